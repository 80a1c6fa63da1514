"""Inputs several strategies share: node capacity, usage of pods split by class, the BE QoS directory,
a standalone host's BE workloads.

Usage comes from the metric cache (never from cgroup files directly) and only when fresh: a sample older
than ``STALE_INTERVALS`` collect intervals means the collector or the cgroup is gone, and acting on it
would suppress or evict on a number that no longer describes the node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from koordlet.apis.extension import QoSClass
from koordlet.metriccache import names
from koordlet.metriccache.cache import pod_labels
from koordlet.qosmanager.framework import Options
from koordlet.resourceexecutor import Outcome, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import WORKLOAD_SOURCE
from koordlet.system.kubepaths import KubeQoS, qos_dir, under_parent

STALE_INTERVALS = 3.0


def max_age(options: Options, interval_seconds: float | None = None) -> float:
    base = options.collector.res_used_interval_seconds if interval_seconds is None else interval_seconds
    return base * STALE_INTERVALS


def be_qos_dir(options: Options) -> str:
    """``kubepods/besteffort`` (or the systemd slice) below the kube parent."""
    return under_parent(options.kube_parent, qos_dir(options.driver, KubeQoS.BESTEFFORT))


def kube_qos_dir(options: Options, qos: KubeQoS) -> str:
    return under_parent(options.kube_parent, qos_dir(options.driver, qos))


def is_be(pod: PodMeta) -> bool:
    return pod.qos is QoSClass.BE


def be_workloads(pods: Iterable[PodMeta]) -> list[PodMeta]:
    """A standalone host's configured BE workloads (class from the ``koordinator.sh/qosClass`` label their
    config gives them), by cgroup path: each is limited and evicted through its own cgroup."""
    return sorted((p for p in pods if p.source == WORKLOAD_SOURCE and p.qos is QoSClass.BE),
                  key=lambda p: p.cgroup_dir)


@dataclass(frozen=True)
class PodUsage:
    """Latest usage per pod UID (pods without a fresh sample are absent) and the node's."""

    node: float | None
    pods: Mapping[str, float]


def cpu_usage(options: Options, pods: Sequence[PodMeta]) -> PodUsage:
    """Cores used by the node and by each pod, from samples no older than :func:`max_age`."""
    return _usage(options, pods, names.NODE_CPU_USAGE, names.POD_CPU_USAGE,
                  max_age(options))


def memory_usage(options: Options, pods: Sequence[PodMeta]) -> PodUsage:
    """Bytes used by the node and by each pod (pod memory is collected every ``memory_interval``)."""
    return _usage(options, pods, names.NODE_MEMORY_USAGE, names.POD_MEMORY_USAGE,
                  max_age(options, max(options.collector.memory_interval_seconds,
                                       options.collector.res_used_interval_seconds)))


def _usage(options: Options, pods: Sequence[PodMeta], node_name: str, pod_name: str, age: float) -> PodUsage:
    cache = options.cache
    node = cache.latest(node_name, (), age)
    per_pod: dict[str, float] = {}
    for pod in pods:
        sample = cache.latest(pod_name, pod_labels(pod.uid), age)
        if sample is not None:
            per_pod[pod.uid] = sample[1]
    return PodUsage(node[1] if node is not None else None, per_pod)


@dataclass(frozen=True)
class SplitUsage:
    """The node's usage split the way Koordinator's ``CalculateFilterPodsUsed`` does."""

    node: float
    matched: float
    """Used by pods the filter selects (non-BE for suppress)."""
    others: float
    """Used by the other pods."""
    system: float
    """max(node - all pods, 0): daemons, kernel threads, host applications."""


def split_usage(usage: PodUsage, pods: Sequence[PodMeta], select: Callable[[PodMeta], bool]) -> SplitUsage | None:
    """None without a fresh node sample."""
    if usage.node is None:
        return None
    matched = others = 0.0
    for pod in pods:
        value = usage.pods.get(pod.uid)
        if value is None:
            continue
        if select(pod):
            matched += value
        else:
            others += value
    return SplitUsage(usage.node, matched, others, max(usage.node - matched - others, 0.0))


def write_outcomes(results: Iterable[Result]) -> dict[str, int]:
    """A batch's results counted by outcome, under the names decisions report them with."""
    counted = Counter(r.outcome for r in results)
    return {"writes": counted[Outcome.WRITTEN], "unchanged": counted[Outcome.SKIPPED_UNCHANGED],
            "gone": counted[Outcome.GONE], "refused": counted[Outcome.UNSUPPORTED],
            "invalid": counted[Outcome.INVALID], "failed": counted[Outcome.FAILED]}


def write_problems(results: Iterable[Result]) -> list[str]:
    """Writes that neither landed nor met a vanished cgroup, with the executor's reason."""
    return [f"{r.path or r.update.rel_dir}: {r.outcome.value}{f' ({r.error})' if r.error else ''}"
            for r in results if not r.ok and r.outcome is not Outcome.GONE]


def write_tail(counts: Mapping[str, int]) -> str:
    """``; 2 writes to vanished cgroups, 1 writes failed`` for a summary; empty when all landed."""
    parts = []
    if counts["gone"]:
        parts.append(f"{counts['gone']} writes to vanished cgroups")
    bad = counts["refused"] + counts["invalid"] + counts["failed"]
    if bad:
        parts.append(f"{bad} writes failed")
    return "; " + ", ".join(parts) if parts else ""
