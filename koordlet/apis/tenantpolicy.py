"""The tenant policy: which pod-supplied labels and annotations koordlet honours, and for whom.

A pod names its own labels and annotations, so every key that grants something is tenant input.  The
policy reviews a pod and returns it without the keys it may not use, with one :class:`Refusal` per key
dropped; every reader (the states informer's pod list, the runtime hooks' requests) sees the reviewed pod,
so a refused key is ignored everywhere alike, as if the pod did not carry it.

Keys allowed by namespace (``tenant.*Namespaces`` in the config, default ``kube-system`` only):

* label ``koordinator.sh/qosClass=SYSTEM`` (:data:`KEY_QOS_SYSTEM`) and ``=LSE`` (:data:`KEY_QOS_LSE`):
  refused, the pod falls back to the class of its Kubernetes QoS (Guaranteed LSR, Burstable LS, BestEffort
  BE);
* annotations ``koordinator.sh/oom-score-adj`` and ``-spec`` (:data:`KEY_OOM_SCORE_ADJ`) asking for less
  than kubelet gives the container (:func:`kubelet_oom_score_adj`): both refused; a value at or above
  kubelet's is honoured for every pod (it only makes the pod a likelier OOM victim);
* annotation ``koordinator.sh/eviction-policy`` (:data:`KEY_EVICTION_OPT_OUT`), which can keep every
  eviction off the pod, and a positive ``koordinator.sh/eviction-priority`` (evicted after its peers);
* label or annotation ``runtimeproxy.koordinator.sh/skip-hookserver`` (:data:`KEY_SKIP_HOOK_SERVER`).

Keys checked by value for every pod:

* ``scheduling.koordinator.sh/resource-status`` (:data:`KEY_RESOURCE_STATUS`): its cpuset must lie within
  the node's online CPUs, must not overlap the CPUs of another pod's exclusive claim (LSE and LSR pods'
  resource-status cpusets: koord-scheduler writes them for those classes; among overlapping exclusive
  claims the older pod keeps its CPUs), and must not hold more CPUs than the pod's CPU limit (a bound pod's
  CFS quota is lifted); a refused cpuset is removed from the annotation, its NUMA resources stay;
* ``node.koordinator.sh/resctrl`` (:data:`KEY_POD_RESCTRL`): a per-pod resctrl group for LSR and LSE pods
  only; a reserve of CLOSIDs stays for the class groups (:func:`pod_group_room`, checked where groups are
  made).

Core-scheduling group ids are namespace-qualified where groups are formed
(:mod:`koordlet.isolation.coresched.rules`), so no key needs refusing there.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.apis import gojson
from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS, QoSClass
from koordlet.apis.pod import Pod
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.validators import parse_cpulist

if TYPE_CHECKING:
    from koordlet.config.types import TenantConfig

log = logging.getLogger(__name__)

KEY_QOS_SYSTEM = "qosClassSystem"
KEY_QOS_LSE = "qosClassLSE"
KEY_OOM_SCORE_ADJ = "oomScoreAdj"
KEY_EVICTION_OPT_OUT = "evictionOptOut"
KEY_SKIP_HOOK_SERVER = "skipHookServer"
NAMESPACE_KEYS = (KEY_QOS_SYSTEM, KEY_QOS_LSE, KEY_OOM_SCORE_ADJ, KEY_EVICTION_OPT_OUT, KEY_SKIP_HOOK_SERVER)
"""Keys a namespace must be allowed to use."""
KEY_RESOURCE_STATUS = "resourceStatus"
KEY_POD_RESCTRL = "podResctrl"

ANNOTATION_OOM_SCORE_ADJ = "koordinator.sh/oom-score-adj"
ANNOTATION_OOM_SCORE_ADJ_SPEC = "koordinator.sh/oom-score-adj-spec"
ANNOTATION_EVICTION_POLICY = "koordinator.sh/eviction-policy"
ANNOTATION_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"
SKIP_HOOK_SERVER = "runtimeproxy.koordinator.sh/skip-hookserver"
ANNOTATION_RESCTRL = "node.koordinator.sh/resctrl"

ALL_NAMESPACES = "*"
NO_NAMESPACE = "-"
DEFAULT_PRIVILEGED_NAMESPACES = frozenset({"kube-system"})
DEFAULT_CLOSID_RESERVE = 1

# kubelet pkg/kubelet/qos/policy.go
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
SYSTEM_NODE_CRITICAL = "system-node-critical"
"""kubelet gives node-critical pods (``IsNodeCriticalPod``: this priority class) the Guaranteed value."""

CLASS_GROUPS = ("LSR", "LS", "BE")
"""The resctrl class groups the ``resctrl`` QoS strategy makes (LSE shares LSR's)."""
_EXCLUSIVE = (QoSClass.LSE, QoSClass.LSR)
_POD_RESCTRL_CLASSES = (QoSClass.LSE, QoSClass.LSR)
REFUSALS_KEPT = 4096
"""Pods whose refusals are remembered (logged once, shown by the debug API); the oldest go first."""


@dataclass(frozen=True)
class Refusal:
    """One key of a pod that was not honoured."""

    key: str
    """The policy key (:data:`KEY_QOS_SYSTEM`...)."""
    field: str
    """What the pod carried: ``label koordinator.sh/qosClass=SYSTEM``."""
    reason: str

    def text(self) -> str:
        return f"{self.key}: {self.field}: {self.reason}"


def kubelet_oom_score_adj(kube_qos: KubeQoS | None, memory_request_bytes: int | None, memory_capacity_bytes: int,
                          priority_class_name: str = "") -> int:
    """The ``oom_score_adj`` kubelet gives a container (``GetContainerOOMScoreAdjust``): -997 Guaranteed and
    node-critical, 1000 BestEffort, Burstable ``1000 - 1000*request/capacity`` kept within 3..999.  An
    unknown class counts as BestEffort and an unknown request as 0: the floor is never guessed low."""
    if priority_class_name == SYSTEM_NODE_CRITICAL or kube_qos is KubeQoS.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if kube_qos is not KubeQoS.BURSTABLE:
        return BESTEFFORT_OOM_SCORE_ADJ
    request = memory_request_bytes or 0
    value = 1000 - (1000 * request) // memory_capacity_bytes if memory_capacity_bytes > 0 else 1000
    if value < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if value >= BESTEFFORT_OOM_SCORE_ADJ:
        return BESTEFFORT_OOM_SCORE_ADJ - 1
    return value


def _oom_values(pod: Pod) -> list[tuple[str | None, int]]:
    """(container or None for the pod default, value) of the oom annotations; unparseable parts are left to
    the hook, which reports them."""
    found: list[tuple[str | None, int]] = []
    spec = pod.annotations.get(ANNOTATION_OOM_SCORE_ADJ_SPEC)
    if spec:
        try:
            values = gojson.loads(spec)
        except ValueError:
            values = None
        if isinstance(values, dict):
            found += [(str(k), v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)]
    default = pod.annotations.get(ANNOTATION_OOM_SCORE_ADJ)
    if default:
        with contextlib.suppress(ValueError):
            found.append((None, int(default.strip())))
    return found


def _positive(text: str | None) -> bool:
    try:
        return text is not None and int(text) > 0
    except ValueError:
        return False  # the evictors read garbage as 0


def _cpu_limit_milli(pod: Pod) -> int | None:
    """The pod's CPU limit (sum over its containers); None when a container has none (no quota to escape)."""
    if not pod.containers:
        return None
    limits = [c.limits.cpu_milli for c in pod.containers]
    return None if any(v is None for v in limits) else sum(v for v in limits if v is not None)


def _without_cpuset(raw: str) -> str | None:
    """The resource-status annotation without its cpuset (its NUMA resources stay); None when nothing is left."""
    try:
        status = gojson.loads(raw)
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    rest = {k: v for k, v in status.items() if k != "cpuset"}
    return json.dumps(rest, separators=(",", ":")) if rest else None


def resource_status_cpus(pod: Pod) -> list[int] | None:
    """The CPUs of the pod's resource-status annotation; None without one or when it cannot be read (the
    readers report that)."""
    raw = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return None
    try:
        status = gojson.loads(raw)
        text = status.get("cpuset") if isinstance(status, dict) else None
        return parse_cpulist(text) if isinstance(text, str) and text else None
    except ValueError:
        return None


def pod_group_room(num_closids: int, groups: Collection[str], reserve: int,
                   class_groups: Sequence[str] = CLASS_GROUPS) -> str | None:
    """Why one more per-pod resctrl group may not be made (None: it may).  ``groups``: the control groups
    there are (the root group, CLOSID 0, not included); the class groups not made yet and ``reserve`` more
    CLOSIDs must stay free after it."""
    free = num_closids - 1 - len(groups)
    missing = sum(1 for g in class_groups if g not in groups)
    if free - 1 < missing + reserve:
        return (f"{free} of {num_closids} CLOSIDs free, {missing} kept for class groups not made yet and "
                f"{reserve} in reserve (tenant.podResctrlClosidReserve)")
    return None


class _Allowed:
    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.every = ALL_NAMESPACES in self.names

    def __contains__(self, namespace: object) -> bool:
        return self.every or namespace in self.names


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


class TenantPolicy:
    """Reviews pods against the per-key namespace lists and records what it refused (thread-safe)."""

    def __init__(self, allowed: Mapping[str, Iterable[str]] | None = None,
                 default: Iterable[str] = DEFAULT_PRIVILEGED_NAMESPACES,
                 closid_reserve: int = DEFAULT_CLOSID_RESERVE) -> None:
        """``allowed``: key -> namespaces, replacing ``default`` for that key."""
        overrides = dict(allowed or {})
        unknown = sorted(set(overrides) - set(NAMESPACE_KEYS))
        if unknown:
            raise ValueError(f"unknown tenant policy key(s) {', '.join(unknown)}; known: {', '.join(NAMESPACE_KEYS)}")
        default = tuple(default)
        self._allowed = {key: _Allowed(overrides.get(key, default)) for key in NAMESPACE_KEYS}
        self.closid_reserve = closid_reserve
        self._lock = threading.Lock()
        self._refused: collections.OrderedDict[str, tuple[Refusal, ...]] = collections.OrderedDict()
        self._logged: dict[str, set[tuple[str, str]]] = {}

    @classmethod
    def from_config(cls, config: TenantConfig) -> TenantPolicy:
        per_key = {KEY_QOS_SYSTEM: config.qos_system_namespaces, KEY_QOS_LSE: config.qos_lse_namespaces,
                   KEY_OOM_SCORE_ADJ: config.oom_score_adj_namespaces,
                   KEY_EVICTION_OPT_OUT: config.eviction_opt_out_namespaces,
                   KEY_SKIP_HOOK_SERVER: config.skip_hook_server_namespaces}
        overrides = {key: ([] if text.strip() == NO_NAMESPACE else _split(text))
                     for key, text in per_key.items() if text.strip()}
        return cls(overrides, _split(config.privileged_namespaces), config.pod_resctrl_closid_reserve)

    def allows(self, key: str, namespace: str) -> bool:
        return namespace in self._allowed[key]

    # ------------------------------------------------------------------------------------------ review

    def review(self, pod: Pod, *, memory_capacity_bytes: int, node_cpus: Collection[int] | None = None,
               exclusive: Mapping[int, Pod] | None = None, trusted: bool = False,
               requests_from: Pod | None = None) -> tuple[Pod, tuple[Refusal, ...]]:
        """``pod`` without the keys it may not use, and why each was dropped.  ``node_cpus``: the node's
        online CPUs (None: unknown, not checked); ``exclusive``: CPU -> the pod whose exclusive claim holds it
        (the pod's own claims are skipped); ``trusted``: an operator-configured workload (standalone), which
        may use every key; ``requests_from``: the same pod as kubelet lists it, whose memory requests and
        QoS give kubelet's oom_score_adj (runtime requests carry no requests)."""
        if trusted:
            return pod, ()
        labels, annotations = dict(pod.labels), dict(pod.annotations)
        refused: list[Refusal] = []
        ns = pod.namespace

        qos_label = labels.get(LABEL_QOS)
        for value, key in ((QoSClass.SYSTEM.value, KEY_QOS_SYSTEM), (QoSClass.LSE.value, KEY_QOS_LSE)):
            if qos_label == value and not self.allows(key, ns):
                del labels[LABEL_QOS]
                refused.append(Refusal(key, f"label {LABEL_QOS}={value}", f"namespace {ns} may not use it"))
        if not self.allows(KEY_EVICTION_OPT_OUT, ns):
            if ANNOTATION_EVICTION_POLICY in annotations:
                del annotations[ANNOTATION_EVICTION_POLICY]
                refused.append(Refusal(KEY_EVICTION_OPT_OUT, f"annotation {ANNOTATION_EVICTION_POLICY}",
                                       f"namespace {ns} may not use it"))
            if _positive(annotations.get(ANNOTATION_EVICTION_PRIORITY)):
                # Above the default 0 the pod is evicted after its peers: a lower value only volunteers it.
                del annotations[ANNOTATION_EVICTION_PRIORITY]
                refused.append(Refusal(KEY_EVICTION_OPT_OUT, f"annotation {ANNOTATION_EVICTION_PRIORITY}",
                                       f"namespace {ns} may not put itself behind other pods"))
        for kind, where in (("label", labels), ("annotation", annotations)):
            if SKIP_HOOK_SERVER in where and not self.allows(KEY_SKIP_HOOK_SERVER, ns):
                del where[SKIP_HOOK_SERVER]
                refused.append(Refusal(KEY_SKIP_HOOK_SERVER, f"{kind} {SKIP_HOOK_SERVER}",
                                       f"namespace {ns} may not use it"))
        if not self.allows(KEY_OOM_SCORE_ADJ, ns):
            below = self._oom_below_kubelet(pod, requests_from or pod, memory_capacity_bytes)
            if below is not None:
                for name in (ANNOTATION_OOM_SCORE_ADJ, ANNOTATION_OOM_SCORE_ADJ_SPEC):
                    annotations.pop(name, None)
                refused.append(Refusal(KEY_OOM_SCORE_ADJ, "annotation koordinator.sh/oom-score-adj(-spec)", below))
        reviewed = dataclasses.replace(pod, labels=labels, annotations=annotations) if refused else pod
        if ANNOTATION_RESCTRL in annotations and reviewed.qos not in _POD_RESCTRL_CLASSES:
            del annotations[ANNOTATION_RESCTRL]
            qos = reviewed.qos.value or "none"
            refused.append(Refusal(KEY_POD_RESCTRL, f"annotation {ANNOTATION_RESCTRL}",
                                   f"a per-pod resctrl group is for LSR and LSE pods, not {qos}"))
        cpus = resource_status_cpus(pod)
        if cpus is not None:
            problem = self._cpuset_problem(pod, cpus, node_cpus, exclusive or {}, requests_from or pod)
            if problem is not None:
                rest = _without_cpuset(annotations[ANNOTATION_RESOURCE_STATUS])
                if rest is None:
                    del annotations[ANNOTATION_RESOURCE_STATUS]
                else:
                    annotations[ANNOTATION_RESOURCE_STATUS] = rest
                refused.append(Refusal(KEY_RESOURCE_STATUS, f"annotation {ANNOTATION_RESOURCE_STATUS} cpuset",
                                       problem))
        if not refused:
            return pod, ()
        return dataclasses.replace(pod, labels=labels, annotations=annotations), tuple(refused)

    @staticmethod
    def _oom_below_kubelet(pod: Pod, spec: Pod, capacity: int) -> str | None:
        values = _oom_values(pod)
        if not values:
            return None
        requests = {c.name: c.requests.memory_bytes for c in spec.containers}
        kube_qos = spec.kube_qos or pod.kube_qos
        priority_class_name = spec.priority_class_name or pod.priority_class_name
        for container, value in values:
            names = [container] if container is not None else (list(requests) or [""])
            for name in names:
                floor = kubelet_oom_score_adj(kube_qos, requests.get(name), capacity, priority_class_name)
                if value < floor:
                    what = f"container {name}" if name else "the pod"
                    return (f"{value} is below {floor}, kubelet's value for {what} "
                            f"({kube_qos.value if kube_qos else 'unknown QoS'})")
        return None

    @staticmethod
    def _cpuset_problem(pod: Pod, cpus: list[int], node_cpus: Collection[int] | None,
                        exclusive: Mapping[int, Pod], spec: Pod) -> str | None:
        if node_cpus is not None:
            outside = sorted(set(cpus) - set(node_cpus))
            if outside:
                return f"CPUs {_cpulist(outside)} are not online on this node"
        limit = _cpu_limit_milli(spec)
        if limit is not None and len(set(cpus)) * 1000 > -(-limit // 1000) * 1000:
            # A bound pod's CFS quota is lifted (koordinator#489): more CPUs than its limit would escape it.
            return f"{len(set(cpus))} CPUs exceed the pod's CPU limit of {limit}m"
        taken: dict[str, list[int]] = {}
        for cpu in cpus:
            owner = exclusive.get(cpu)
            if owner is not None and owner.uid != pod.uid:
                taken.setdefault(owner.key, []).append(cpu)
        if taken:
            # Only names, not the other pod's details: both pods' owners may read koordctl.
            return "; ".join(f"CPUs {_cpulist(c)} are held exclusively by pod {k}" for k, c in sorted(taken.items()))
        return None

    def review_all(self, pods: Sequence[tuple[Pod, bool]], *, memory_capacity_bytes: int,
                   node_cpus: Collection[int] | None) -> list[tuple[Pod, tuple[Refusal, ...]]]:
        """Reviews a node's pod list ((pod, trusted) pairs, order kept): each pod on its own, then the
        resource-status cpusets against each other (trusted workloads' claims, then exclusive claims oldest pod
        first, then the rest)."""
        first = [self.review(pod, memory_capacity_bytes=memory_capacity_bytes, node_cpus=node_cpus,
                             trusted=trusted) for pod, trusted in pods]
        claims: dict[int, Pod] = {}
        # Trusted workloads' claims first, then exclusive classes by age, then the rest.
        order = sorted(range(len(first)), key=lambda i: (not pods[i][1], first[i][0].qos not in _EXCLUSIVE,
                                                         first[i][0].creation_timestamp, first[i][0].uid))
        out = list(first)
        for i in order:
            pod, refusals = first[i]
            if pods[i][1] or resource_status_cpus(pod) is None:
                if pods[i][1] and pod.qos in _EXCLUSIVE:
                    claims.update((cpu, pod) for cpu in resource_status_cpus(pod) or ())
                continue
            again, more = self.review(pod, memory_capacity_bytes=memory_capacity_bytes, node_cpus=node_cpus,
                                      exclusive=claims)
            out[i] = (again, refusals + more)
            if not more and again.qos in _EXCLUSIVE:
                claims.update((cpu, again) for cpu in resource_status_cpus(again) or ())
        return out

    # ------------------------------------------------------------------------------------------ records

    def note(self, pod: Pod, refusals: tuple[Refusal, ...], *, latest: bool = True) -> None:
        """Records a review's refusals; each key is logged the first time it is refused for the pod.
        ``latest`` False (a runtime hook's review of a pod the pod list may already have reviewed): only
        adds, never clears what the pod list's review found."""
        if not refusals and not latest:
            return
        with self._lock:
            if refusals:
                self._refused[pod.uid] = refusals
                self._refused.move_to_end(pod.uid)
                logged = self._logged.setdefault(pod.uid, set())
                new = [r for r in refusals if (r.key, r.field) not in logged]
                logged.update((r.key, r.field) for r in new)
                while len(self._refused) > REFUSALS_KEPT:
                    uid, _ = self._refused.popitem(last=False)
                    self._logged.pop(uid, None)
            else:
                # The pod dropped the keys: a later relapse is news again.
                new = []
                self._refused.pop(pod.uid, None)
                self._logged.pop(pod.uid, None)
        for refusal in new:
            log.warning("pod key refused by the tenant policy", extra={
                "pod": pod.key, "uid": pod.uid, "key": refusal.key, "field": refusal.field, "reason": refusal.reason})

    def refused(self, uid: str) -> tuple[Refusal, ...]:
        """The refusals of the pod's latest review."""
        with self._lock:
            return self._refused.get(uid, ())


def exclusive_claims(pods: Iterable[Pod]) -> dict[int, Pod]:
    """CPU -> the LSE/LSR pod whose (reviewed) resource-status cpuset holds it."""
    claims: dict[int, Pod] = {}
    for pod in pods:
        if pod.qos in _EXCLUSIVE:
            for cpu in resource_status_cpus(pod) or ():
                claims.setdefault(cpu, pod)
    return claims


def _cpulist(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


__all__ = ["ALL_NAMESPACES", "KEY_EVICTION_OPT_OUT", "KEY_OOM_SCORE_ADJ", "KEY_POD_RESCTRL", "KEY_QOS_LSE",
           "KEY_QOS_SYSTEM", "KEY_RESOURCE_STATUS", "KEY_SKIP_HOOK_SERVER", "NAMESPACE_KEYS", "Refusal",
           "TenantPolicy", "exclusive_claims", "kubelet_oom_score_adj", "pod_group_room"]
