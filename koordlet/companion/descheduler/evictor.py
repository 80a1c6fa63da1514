"""Which pods may be evicted and the eviction itself (upstream ``pkg/descheduler/evictions/evictions.go``
``EvictorFilter`` + ``PodEvictor``, ``eviction_limiter.go``): per-round limits per node, per namespace and in
total, the policy/v1 Eviction API, a counter per decision, dry-run that only logs."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import parse_time
from koordlet.companion.descheduler.cluster import NodeInfo, PodInfo, Snapshot
from koordlet.companion.descheduler.evictorargs import EvictorArgs, Limits
from koordlet.companion.descheduler.nodefit import fits_any_other_node, requested_on
from koordlet.companion.kube.client import KubeApiError
from koordlet.companion.kube.writers import EvictionResult, evict_pod

__all__ = ["EVICT_ANNOTATION", "EvictionCounts", "EvictionRecord", "Evictor", "EvictorArgs", "EvictorMetrics",
           "Limits", "is_critical_pod", "is_daemonset_pod"]

log = logging.getLogger(__name__)

SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
"""``scheduling.SystemCriticalPriority``: pods at or above it are never evicted by default."""
CRITICAL_PRIORITY_CLASSES: Final = frozenset({"system-cluster-critical", "system-node-critical"})
EVICT_ANNOTATION: Final = "descheduler.alpha.kubernetes.io/evict"
"""A pod carrying this annotation is evictable whatever the filters say (upstream ``HaveEvictAnnotation``)."""
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
SOURCE_ANNOTATION: Final = "kubernetes.io/config.source"


class EvictorMetrics:
    """``descheduler_pods_evicted`` (upstream ``pkg/descheduler/metrics``) on the given registry."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        kwargs: dict[str, Any] = {} if registry is None else {"registry": registry}
        self.pods_evicted = Counter(
            "descheduler_pods_evicted", "Number of evicted pods, by the result, by the strategy, by the namespace, "
            "by the node name. 'error' result means a pod could not be evicted",
            ["result", "strategy", "namespace", "node"], **kwargs)


@dataclass
class EvictionCounts:
    """Evictions of one round, shared by the profiles' evictors (upstream ``EvictionLimiter``, reset per
    round)."""

    per_node: dict[str, int] = field(default_factory=dict)
    per_namespace: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def add(self, pod: PodInfo) -> None:
        if pod.node:
            self.per_node[pod.node] = self.per_node.get(pod.node, 0) + 1
        self.per_namespace[pod.namespace] = self.per_namespace.get(pod.namespace, 0) + 1
        self.total += 1


@dataclass(frozen=True)
class EvictionRecord:
    """One decision of :meth:`Evictor.evict`."""

    pod: PodInfo
    reason: str
    strategy: str
    result: str
    """``success``, ``dry-run``, ``blocked``, ``gone``, ``error`` or the limit that refused it."""


def _volumes(pod: PodInfo) -> list[Mapping[str, Any]]:
    spec = member(pod.raw, "spec")
    volumes = member(spec, "volumes") if isinstance(spec, Mapping) else None
    return [v for v in volumes if isinstance(v, Mapping)] if isinstance(volumes, list) else []


def is_daemonset_pod(pod: PodInfo) -> bool:
    return any(member(owner, "kind") == "DaemonSet" for owner in pod.owners)


def is_mirror_pod(pod: PodInfo) -> bool:
    return MIRROR_ANNOTATION in pod.annotations


def is_static_pod(pod: PodInfo) -> bool:
    source = pod.annotations.get(SOURCE_ANNOTATION)
    return source is not None and source != "api"


def is_critical_pod(pod: PodInfo) -> bool:
    """Static, mirror, system-critical priority or a system critical priority class (``IsCriticalPod``)."""
    return (is_static_pod(pod) or is_mirror_pod(pod) or pod.priority_class_name in CRITICAL_PRIORITY_CLASSES
            or (pod.priority is not None and pod.priority >= SYSTEM_CRITICAL_PRIORITY))


def has_local_storage(pod: PodInfo) -> bool:
    return any(member(v, "emptyDir") is not None or member(v, "hostPath") is not None for v in _volumes(pod))


def has_pvc(pod: PodInfo) -> bool:
    return any(member(v, "persistentVolumeClaim") is not None for v in _volumes(pod))


def is_terminating(pod: PodInfo) -> bool:
    metadata = member(pod.raw, "metadata")
    return isinstance(metadata, Mapping) and member(metadata, "deletionTimestamp") is not None


class Evictor:
    """The evict/filter plugin of one round: :meth:`filter` says whether a pod may be evicted, :meth:`evict`
    evicts it unless a limit is reached.  Create one per round (the counts are per round)."""

    def __init__(self, api_client: client.ApiClient | None, args: EvictorArgs, limits: Limits, *, dry_run: bool,
                 snap: Snapshot | None = None, metrics: EvictorMetrics | None = None,
                 priority_threshold: int | None = None, timeout_seconds: float = 10.0,
                 counts: EvictionCounts | None = None) -> None:
        self.api_client = api_client
        self.args = args
        self.limits = limits
        self.dry_run = dry_run
        self.strategy = ""
        """Name of the plugin evicting now (set by the runner), for logs and the metric."""
        self.records: list[EvictionRecord] = []
        self._snap = snap
        self._metrics = metrics
        self._threshold = args.priority_threshold if priority_threshold is None else priority_threshold
        self._timeout = timeout_seconds
        self.counts = counts if counts is not None else EvictionCounts()
        self._requested: dict[str, dict[str, int]] | None = None
        self._owner_counts: dict[str, int] | None = None

    @property
    def total_evicted(self) -> int:
        return self.counts.total

    def node_evicted(self, node: str) -> int:
        return self.counts.per_node.get(node, 0)

    def namespace_evicted(self, namespace: str) -> int:
        return self.counts.per_namespace.get(namespace, 0)

    def node_limit_reached(self, node: str) -> bool:
        return self.limits.per_node is not None and self.node_evicted(node) >= self.limits.per_node

    def total_limit_reached(self) -> bool:
        return self.limits.total is not None and self.total_evicted >= self.limits.total

    def _checks(self, pod: PodInfo) -> list[str]:
        args = self.args
        failed: list[str] = []
        if not args.evict_daemonset_pods and is_daemonset_pod(pod):
            failed.append("pod is a DaemonSet pod")
        if is_mirror_pod(pod):
            failed.append("pod is a mirror pod")
        if is_static_pod(pod):
            failed.append("pod is a static pod")
        if is_terminating(pod):
            failed.append("pod is terminating")
        if not args.evict_all_bare_pods and not pod.owners:
            if not args.evict_failed_bare_pods:
                failed.append("pod does not have any ownerRefs")
            elif pod.phase != "Failed":
                failed.append("pod does not have any ownerRefs and is not in failed phase")
        if not args.evict_system_critical_pods:
            if is_critical_pod(pod):
                failed.append("pod has system critical priority")
            if self._threshold is not None and pod.priority is not None and pod.priority >= self._threshold:
                failed.append("pod has higher priority than specified priority class threshold")
        if not args.evict_local_storage_pods and has_local_storage(pod):
            failed.append("pod has local storage and descheduler is not configured with evictLocalStoragePods")
        if args.ignore_pvc_pods and has_pvc(pod):
            failed.append("pod has a PVC and descheduler is configured to ignore PVC pods")
        if not args.namespaces.allows(pod.namespace):
            failed.append("pod namespace is not evictable")
        if args.label_selector is not None and not args.label_selector.matches(pod.labels):
            failed.append("pod labels do not match the labelSelector filter in the policy parameter")
        if args.min_pod_age_seconds is not None and not self._old_enough(pod, args.min_pod_age_seconds):
            failed.append(f"pod age is not older than minPodAge ({args.min_pod_age_seconds:g}s)")
        if args.min_replicas > 1 and self._snap is not None and len(pod.owners) == 1:
            replicas = self._replicas(pod)
            if replicas < args.min_replicas:
                failed.append(f"owner has {replicas} replicas which is less than minReplicas of {args.min_replicas}")
        if args.node_fit and self._snap is not None and not self._fits_elsewhere(pod):
            failed.append("pod does not fit on any other node because of nodeSelector(s), Taint(s), "
                          "or nodes marked as unschedulable")
        return failed

    def _old_enough(self, pod: PodInfo, min_age: float) -> bool:
        """Started at least ``min_age`` seconds before the round (``status.startTime``)."""
        status = member(pod.raw, "status")
        started = member(status, "startTime") if isinstance(status, Mapping) else None
        if not isinstance(started, str) or not started:
            return False
        try:
            start = parse_time(started)
        except ValueError:
            return False
        now = self._snap.now if self._snap is not None else time.time()
        return now - start >= min_age

    def _replicas(self, pod: PodInfo) -> int:
        """Pods of the round sharing ``pod``'s one owner (upstream indexes them by owner uid)."""
        assert self._snap is not None
        if self._owner_counts is None:
            self._owner_counts = {}
            for other in self._snap.pods():
                if len(other.owners) == 1:
                    uid = str(member(other.owners[0], "uid") or "")
                    self._owner_counts[uid] = self._owner_counts.get(uid, 0) + 1
        return self._owner_counts.get(str(member(pod.owners[0], "uid") or ""), 0)

    def _fits_elsewhere(self, pod: PodInfo) -> bool:
        assert self._snap is not None
        if self._requested is None:
            self._requested = {name: requested_on(pods) for name, pods in self._snap.pods_by_node.items()}
        nodes: list[NodeInfo] = list(self._snap.nodes.values())
        return fits_any_other_node(pod, nodes, self._requested)

    def filter(self, pod: PodInfo) -> str | None:
        """None when ``pod`` may be evicted, else the reasons it may not (upstream ``EvictorFilter.Filter``:
        the eviction annotation overrides every check)."""
        failed = self._checks(pod)
        if failed and EVICT_ANNOTATION not in pod.annotations:
            return "; ".join(failed)
        return None

    def _refusal(self, pod: PodInfo) -> str | None:
        limits = self.limits
        if limits.per_node is not None and pod.node and self.node_evicted(pod.node) + 1 > limits.per_node:
            return "maximum number of pods per node reached"
        if limits.per_namespace is not None and self.namespace_evicted(pod.namespace) + 1 > limits.per_namespace:
            return "maximum number of pods per namespace reached"
        if limits.total is not None and self.total_evicted + 1 > limits.total:
            return "maximum number of pods total reached"
        return None

    def _record(self, pod: PodInfo, reason: str, result: str) -> None:
        self.records.append(EvictionRecord(pod, reason, self.strategy, result))
        if self._metrics is not None:
            self._metrics.pods_evicted.labels(result, self.strategy, pod.namespace, pod.node).inc()

    def evict(self, pod: PodInfo, reason: str) -> bool:
        """Evicts ``pod``; False when a limit refused it or the API did (a PodDisruptionBudget, the pod gone,
        an error: logged).  In dry-run it logs and counts the pod against the limits (so the log shows what a
        real round would do), calling no API."""
        refusal = self._refusal(pod)
        if refusal is not None:
            self._record(pod, reason, refusal)
            log.info("descheduler: not evicting pod",
                     extra={"pod": str(pod), "node": pod.node, "strategy": self.strategy, "reason": refusal})
            return False
        if self.dry_run:
            self.counts.add(pod)
            self._record(pod, reason, "dry-run")
            log.info("descheduler dry-run: would evict pod", extra={"pod": str(pod), "node": pod.node,
                                                                   "strategy": self.strategy, "reason": reason})
            return True
        if self.api_client is None:
            raise RuntimeError("descheduler evictor has no API client")
        try:
            result = evict_pod(self.api_client, pod.namespace, pod.name, timeout_seconds=self._timeout)
        except KubeApiError as exc:
            self._record(pod, reason, "error")
            log.error("descheduler: evicting pod failed", extra={"pod": str(pod), "error": str(exc)})
            return False
        if result is EvictionResult.BLOCKED_BY_PDB:
            self._record(pod, reason, "blocked")
            log.info("descheduler: eviction refused (disruption budget or throttling)", extra={"pod": str(pod)})
            return False
        if result is EvictionResult.GONE:
            self._record(pod, reason, "gone")
            log.info("descheduler: pod was gone before its eviction", extra={"pod": str(pod)})
            return False
        self.counts.add(pod)
        self._record(pod, reason, "success")
        log.info("descheduler: evicted pod", extra={"pod": str(pod), "node": pod.node, "strategy": self.strategy,
                                                "reason": reason})
        return True
