"""Batch resources of a node (``kubernetes.io/batch-cpu``, ``kubernetes.io/batch-memory``): pure logic, no I/O.

The companion's counterpart of Koordinator's slo-controller ``BatchResource`` plugin
(``pkg/slo-controller/noderesource/plugins/batchresource/plugin.go``, ``calculateOnNode``) and its helpers
(``pkg/slo-controller/noderesource/plugins/util/util.go``: ``CalculateBatchResourceByPolicy``,
``GetNodeSafetyMargin``, ``GetHostAppHPUsed``; ``pkg/util/node.go``: ``GetNodeReservationFromAnnotation``,
``GetNodeReservationFromKubelet``; ``pkg/util/resource.go``: ``IsResourceDiff``/``IsQuantityDiff``).

For one node::

    safetyMargin = capacity * (100 - reclaimThresholdPercent) / 100     (may be negative above 100 %)
    nodeReserved = max(kubelet reserved = capacity - allocatable, node.koordinator.sh/reservation)
    systemUsed   = max(systemUsage + usage of prod/mid host applications, nodeReserved)
    usage:           batch = max(0, capacity - safetyMargin - systemUsed   - sum HP used)
    request:         batch = max(0, capacity - safetyMargin - nodeReserved - sum HP request)   (memory only)
    maxUsageRequest: batch = max(0, capacity - safetyMargin - systemUsed   - sum max(HP request, HP used))
    batch = min(capacity * batch{CPU,Memory}ThresholdPercent / 100, batch)   when the percent is set

HP ("high priority") pods are the Running/Pending pods whose priority class (with its QoS-derived default) is
neither koord-batch nor koord-free.  An HP pod's used is its podsMetric usage, or its request when it has no
metric yet; an LSE pod counts its CPU *request* (Koordinator does not reclaim LSE CPUs).  Metrics of pods that
are not in the pod list ("dangling") count as HP used unless the metric says batch/free.

The floating-point steps (ratios, ``int64(float64(x) * ratio)``) are done the way Go does them, so results are
bit-identical to Koordinator's, including its truncation toward zero.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.extension import ANNOTATION_NODE_RESERVATION, PriorityClass, QoSClass
from koordlet.apis.gojson import loads, member
from koordlet.apis.nodemetric import NodeMetricStatus, PodMetricInfo, ResourceMap
from koordlet.apis.pod import Pod
from koordlet.apis.quantity import int_value, milli_value
from koordlet.apis.sloconfig import ColocationStrategy, default_colocation_strategy
from koordlet.errors import ParseError
from koordlet.system.validators import parse_cpulist

POLICY_USAGE: Final = "usage"
POLICY_REQUEST: Final = "request"
POLICY_MAX_USAGE_REQUEST: Final = "maxUsageRequest"

REASON_DEGRADED: Final = "degrade node resource because of abnormal nodeMetric, reason: degradedByBatchResource"
"""Koordinator's Reset message when the NodeMetric is stale or missing (plugin.go ``Calculate``)."""
REASON_DISABLED: Final = "node colocation is disabled in Config, reason: DisableInConfig"
"""Koordinator's reset message when colocation is off for the node (noderesource ``Reconcile``)."""

_ACTIVE_PHASES: Final = frozenset({"Running", "Pending"})
_LOW_PRIORITY: Final = frozenset({PriorityClass.BATCH, PriorityClass.FREE})
# apis/extension/priority.go: Priority*ValueDefault, used by GetHostAppHPUsed to compare host applications.
_DEFAULT_PRIORITY_VALUE: Final = {PriorityClass.PROD: 9500, PriorityClass.MID: 7500, PriorityClass.BATCH: 5500,
                                  PriorityClass.FREE: 3500, PriorityClass.NONE: 0}


# ---------------------------------------------------------------------------------------------- inputs

@dataclass(frozen=True, slots=True)
class CPUMemory:
    """CPU in milli-cores and memory in bytes (a ``ResourceList`` masked to cpu and memory)."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes)

    def max(self, other: CPUMemory) -> CPUMemory:
        """Per-resource maximum (``quotav1.Max``)."""
        return CPUMemory(max(self.cpu_milli, other.cpu_milli), max(self.memory_bytes, other.memory_bytes))

    @classmethod
    def of(cls, usage: ResourceMap) -> CPUMemory:
        """A NodeMetric ResourceMap; a resource it does not report counts as zero."""
        return cls(usage.cpu_milli or 0, usage.memory_bytes or 0)


ZERO: Final = CPUMemory()


@dataclass(frozen=True, slots=True)
class NodeInput:
    """The slice of a v1.Node the calculation reads."""

    name: str
    capacity: CPUMemory
    """``status.capacity`` cpu/memory: the base of the formula."""
    allocatable: CPUMemory
    """``status.allocatable`` cpu/memory: only used to derive the kubelet reservation."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """``node.koordinator.sh/reservation`` is read from here."""
    kubelet_reserved: CPUMemory | None = None
    """Reserved by kubelet; None derives it as ``max(capacity - allocatable, 0)`` as Koordinator does."""

    def __post_init__(self) -> None:
        for name in ("capacity", "allocatable"):
            value: CPUMemory = getattr(self, name)
            if value.cpu_milli < 0 or value.memory_bytes < 0:
                raise ValueError(f"node {self.name}: status.{name} must not be negative, got {value}")

    @property
    def kubelet_reservation(self) -> CPUMemory:
        if self.kubelet_reserved is not None:
            return self.kubelet_reserved
        return (self.capacity - self.allocatable).max(ZERO)


@functools.lru_cache(maxsize=4096)
def _shared(cpu_milli: int, memory_bytes: int) -> CPUMemory:
    """One (frozen) instance per amount: a cluster's pods ask for a few hundred distinct amounts, and the companion
    holds one PodInput per pod of the cluster."""
    return CPUMemory(cpu_milli, memory_bytes)


@dataclass(frozen=True, slots=True)
class PodInput:
    """One pod bound to the node."""

    uid: str
    namespace: str
    name: str
    priority_class: PriorityClass
    """The raw Koordinator priority class (label or priority band); NONE falls back to the QoS default."""
    qos: QoSClass
    """The Koordinator QoS with its default (label, else Guaranteed->LSR, Burstable->LS, BestEffort->BE)."""
    phase: str
    requests: CPUMemory
    """Pod request (``util.GetPodRequest``: containers summed, init containers and overhead included)."""
    limits: CPUMemory = ZERO

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_lse(self) -> bool:
        return self.qos is QoSClass.LSE

    @property
    def effective_priority(self) -> PriorityClass:
        """``GetPodPriorityClassWithDefault``: the raw class, else prod for SYSTEM/LSE/LSR/LS, batch for BE."""
        if self.priority_class is not PriorityClass.NONE:
            return self.priority_class
        if self.qos in (QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS):
            return PriorityClass.PROD
        if self.qos is QoSClass.BE:
            return PriorityClass.BATCH
        return PriorityClass.NONE

    @property
    def high_priority(self) -> bool:
        return self.effective_priority not in _LOW_PRIORITY

    @classmethod
    def from_pod(cls, pod: Pod) -> PodInput:
        """From koordlet's Pod view; requests are the containers' cpu/memory requests summed."""
        requests = _shared(sum(c.requests.cpu_milli or 0 for c in pod.containers),
                           sum(c.requests.memory_bytes or 0 for c in pod.containers))
        limits = _shared(sum(c.limits.cpu_milli or 0 for c in pod.containers),
                         sum(c.limits.memory_bytes or 0 for c in pod.containers))
        return cls(uid=pod.uid, namespace=pod.namespace, name=pod.name, priority_class=pod.priority_class,
                   qos=pod.qos, phase=pod.phase, requests=requests, limits=limits)


@dataclass(frozen=True, slots=True)
class HostAppMetric:
    """``status.hostApplicationMetric[]``: a host application's usage and priority class."""

    name: str
    usage: CPUMemory
    priority: PriorityClass = PriorityClass.NONE


# ---------------------------------------------------------------------------------------------- outputs

@dataclass(frozen=True, slots=True)
class BatchValues:
    """Batch resources on a node; None means the resource is absent (removed)."""

    cpu_milli: int | None
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What to write on the node.  ``None`` quantities mean "remove the resource" (Koordinator's Reset)."""

    batch_cpu_milli: int | None
    """``kubernetes.io/batch-cpu`` as integer milli-cores."""
    batch_memory_bytes: int | None
    """``kubernetes.io/batch-memory`` in bytes."""
    reason: str
    degraded: bool
    details: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[ParseError, ...] = ()
    """Bad input that was ignored as Koordinator ignores it (e.g. an unparsable reservation annotation)."""

    @property
    def remove(self) -> bool:
        """True when batch-cpu and batch-memory must be deleted from the node's capacity and allocatable."""
        return self.batch_cpu_milli is None and self.batch_memory_bytes is None

    @property
    def values(self) -> BatchValues:
        return BatchValues(self.batch_cpu_milli, self.batch_memory_bytes)


# ---------------------------------------------------------------------------------------------- parsing

def parse_cpuset(text: str) -> frozenset[int]:
    """A Linux cpu list (``"0-3,8"``) as k8s ``cpuset.Parse`` reads it; raises ValueError on bad input.

    The grammar is the kernel list syntax koordlet reads everywhere, minus what Go's ``strconv.Atoi`` refuses:
    blanks and non-ASCII digits.  The id bound matters here because a node annotation is anyone's with node
    edit rights, and "0-99999999999" would fill the memory."""
    if not text.isascii() or any(c.isspace() for c in text):
        raise ValueError(f"invalid cpu list {text!r}: only ASCII digits, '-' and ','")
    try:
        return frozenset(parse_cpulist(text))
    except ValueError as exc:
        raise ValueError(f"invalid cpu list {text!r}: {exc}") from None


def parse_node_reservation(node_name: str, annotations: Mapping[str, str]) -> CPUMemory | None:
    """The cpu/memory reserved by ``node.koordinator.sh/reservation`` (None when the annotation is absent).

    ``reservedCPUs`` wins over ``resources.cpu`` (its size in whole cores).  Raises ParseError naming the node
    and the annotation when the value is not valid; Koordinator then ignores the whole annotation."""
    raw = annotations.get(ANNOTATION_NODE_RESERVATION)
    if raw is None:
        return None
    where = f"node {node_name}: annotation {ANNOTATION_NODE_RESERVATION}"
    try:
        obj = loads(raw)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ParseError(f"{where}: not valid JSON ({exc}): {raw!r}") from None
    if obj is None:
        return CPUMemory()
    if not isinstance(obj, Mapping):
        raise ParseError(f"{where}: expected a JSON object, got {raw!r}")
    cpu, memory = 0, 0
    resources = member(obj, "resources")
    if resources is not None:
        if not isinstance(resources, Mapping):
            raise ParseError(f"{where}: resources must be an object, got {resources!r}")
        for name, value in resources.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ParseError(f"{where}: resources.{name}: invalid quantity {value!r}")
            try:
                if name == "cpu":
                    cpu = milli_value(value)
                elif name == "memory":
                    memory = int_value(value)
                else:
                    milli_value(value)  # any resource must still decode as a Quantity
            except ParseError as exc:
                raise ParseError(f"{where}: resources.{name}: {exc}") from None
    reserved_cpus = member(obj, "reservedCPUs")
    if reserved_cpus is not None and not isinstance(reserved_cpus, str):
        raise ParseError(f"{where}: reservedCPUs must be a string, got {reserved_cpus!r}")
    if reserved_cpus:
        try:
            cpu = len(parse_cpuset(reserved_cpus)) * 1000
        except ValueError as exc:
            raise ParseError(f"{where}: reservedCPUs: {exc}") from None
    return CPUMemory(cpu, memory)


# ---------------------------------------------------------------------------------------------- helpers

def _setting(strategy: ColocationStrategy, name: str) -> Any:
    value = getattr(strategy, name)
    return getattr(default_colocation_strategy(), name) if value is None else value


def _scale(value: int, ratio: float) -> int:
    """``int64(float64(value) * ratio)``: Go's float multiply, truncated toward zero."""
    return int(float(value) * ratio)


def _giga(count: int) -> int:
    """``Quantity.ScaledValue(resource.Giga)``: rounded up."""
    return -((-count) // 10**9)


def _go_float(value: float) -> str:
    """A float64 as Go's ``%v`` prints it (``1``, ``0.5``)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)


def _high_priority_metric(metric: PodMetricInfo) -> bool:
    return metric.priority not in _LOW_PRIORITY


@dataclass(frozen=True, slots=True)
class _Part:
    """One resource's formula: the value, the subtracted terms and the optional cap, for the message."""

    value: int
    terms: tuple[tuple[str, int], ...]
    capacity: int
    cap_ratio: float | None


def _resolve(capacity: int, margin: int, terms: tuple[tuple[str, int], ...],
             threshold_percent: int | None) -> _Part:
    value = max(capacity - margin - sum(v for _, v in terms), 0)
    ratio = None
    if threshold_percent is not None:
        ratio = float(threshold_percent) / 100.0
        value = min(_scale(capacity, ratio), value)
    return _Part(value, (("nodeSafetyMargin", margin), *terms), capacity, ratio)


def _message(header: str, part: _Part, show: Any) -> str:
    formula = f"nodeCapacity:{show(part.capacity)}" + "".join(f" - {name}:{show(v)}" for name, v in part.terms)
    if part.cap_ratio is not None:
        formula = f"min(nodeCapacity:{show(part.capacity)} * thresholdRatio:{_go_float(part.cap_ratio)}, {formula})"
    return f"{header}:{show(part.value)} = {formula}"


# ---------------------------------------------------------------------------------------------- calculate

def is_degrade_needed(metric: NodeMetricStatus | None, strategy: ColocationStrategy, now: float) -> bool:
    """A NodeMetric without an update time, or older than ``degradeTimeMinutes``, is abnormal."""
    if metric is None or metric.update_time is None or metric.node_metric is None:
        return True
    return now > metric.update_time + int(_setting(strategy, "degrade_time_minutes")) * 60


def calculate(node: NodeInput, pods: Sequence[PodInput], metric: NodeMetricStatus | None,
              strategy: ColocationStrategy, now: float, *, host_apps: Sequence[HostAppMetric] = (),
              cluster_enabled: bool = True) -> BatchResult:
    """The batch resources to write on ``node``.

    ``metric`` is the node's NodeMetric status (None if there is none); ``host_apps`` its
    ``hostApplicationMetric``.  ``cluster_enabled`` is the cluster-level ``enable`` of ``colocation-config``:
    Koordinator treats the node as disabled when either level is off, even if a ``nodeConfigs`` entry turns it
    on.  A disabled node or a stale NodeMetric gives a result with both quantities None (remove them)."""
    if not cluster_enabled or strategy.enable is not True:
        return BatchResult(None, None, REASON_DISABLED, degraded=False, details={"enabled": False})
    if is_degrade_needed(metric, strategy, now):
        age = None if metric is None or metric.update_time is None else now - metric.update_time
        return BatchResult(None, None, REASON_DEGRADED, degraded=True,
                           details={"enabled": True, "node_metric_age_seconds": age})
    assert metric is not None and metric.node_metric is not None  # is_degrade_needed checked both

    errors: list[ParseError] = []
    metrics_by_key = {f"{m.namespace}/{m.name}": m for m in metric.pods_metric}
    dangling = dict(metrics_by_key)
    hp_request, hp_used, hp_max_used_request = ZERO, ZERO, ZERO
    for pod in pods:
        if pod.phase not in _ACTIVE_PHASES:
            continue
        pod_metric = metrics_by_key.get(pod.key)
        if pod_metric is not None:
            dangling.pop(pod.key, None)
        if not pod.high_priority:
            continue
        hp_request += pod.requests
        if pod_metric is None:
            # Upstream adds the request to HP used only; podHPMaxUsedRequest leaves such a pod out at node level.
            hp_used += pod.requests
            continue
        used = CPUMemory.of(pod_metric.pod_usage)
        if pod.is_lse:
            # LSE pods own their CPUs exclusively: their CPU is never reclaimed, whatever they use.
            hp_used += CPUMemory(pod.requests.cpu_milli, used.memory_bytes)
        else:
            hp_used += used
        hp_max_used_request += pod.requests.max(used)

    dangling_used = ZERO
    for pod_metric in dangling.values():
        if _high_priority_metric(pod_metric):
            dangling_used += CPUMemory.of(pod_metric.pod_usage)
    hp_used += dangling_used
    hp_max_used_request += dangling_used

    batch_value = _DEFAULT_PRIORITY_VALUE[PriorityClass.BATCH]
    host_app_used = ZERO
    for app in host_apps:
        if _DEFAULT_PRIORITY_VALUE[app.priority] > batch_value:
            host_app_used += app.usage
    system_usage = CPUMemory.of(metric.node_metric.system_usage)
    system_used = system_usage + host_app_used

    try:
        annotation_reserved = parse_node_reservation(node.name, node.annotations)
    except ParseError as exc:
        errors.append(exc)
        annotation_reserved = None
    node_reserved = node.kubelet_reservation.max(annotation_reserved or ZERO)
    system_used_or_reserved = system_used.max(node_reserved)

    cap = node.capacity
    cpu_margin = _scale(cap.cpu_milli, float(100 - int(_setting(strategy, "cpu_reclaim_threshold_percent"))) / 100.0)
    mem_margin = _scale(cap.memory_bytes,
                        float(100 - int(_setting(strategy, "memory_reclaim_threshold_percent"))) / 100.0)

    cpu_policy = POLICY_MAX_USAGE_REQUEST if strategy.cpu_calculate_policy == POLICY_MAX_USAGE_REQUEST \
        else POLICY_USAGE
    if cpu_policy == POLICY_MAX_USAGE_REQUEST:
        cpu_terms = (("systemUsageOrNodeReserved", system_used_or_reserved.cpu_milli),
                     ("podHPMaxUsedRequest", hp_max_used_request.cpu_milli))
    else:
        cpu_terms = (("systemUsageOrNodeReserved", system_used_or_reserved.cpu_milli),
                     ("podHPUsed", hp_used.cpu_milli))
    memory_policy = strategy.memory_calculate_policy \
        if strategy.memory_calculate_policy in (POLICY_REQUEST, POLICY_MAX_USAGE_REQUEST) else POLICY_USAGE
    if memory_policy == POLICY_REQUEST:
        mem_terms = (("nodeReserved", node_reserved.memory_bytes), ("podHPRequest", hp_request.memory_bytes))
    elif memory_policy == POLICY_MAX_USAGE_REQUEST:
        mem_terms = (("systemUsage", system_used_or_reserved.memory_bytes),
                     ("podHPMaxUsedRequest", hp_max_used_request.memory_bytes))
    else:
        mem_terms = (("systemUsage", system_used_or_reserved.memory_bytes), ("podHPUsed", hp_used.memory_bytes))

    cpu = _resolve(cap.cpu_milli, cpu_margin, cpu_terms, strategy.batch_cpu_threshold_percent)
    memory = _resolve(cap.memory_bytes, mem_margin, mem_terms, strategy.batch_memory_threshold_percent)
    cpu_message = _message("batchAllocatable[CPU(Milli-Core)]", cpu, str)
    memory_message = _message("batchAllocatable[Mem(GB)]", memory, _giga)
    details: dict[str, Any] = {
        "enabled": True,
        "cpu_policy": cpu_policy,
        "memory_policy": memory_policy,
        "capacity": cap,
        "safety_margin": CPUMemory(cpu_margin, mem_margin),
        "system_usage": system_usage,
        "host_app_used": host_app_used,
        "annotation_reserved": annotation_reserved,
        "kubelet_reserved": node.kubelet_reservation,
        "node_reserved": node_reserved,
        "system_used_or_reserved": system_used_or_reserved,
        "hp_request": hp_request,
        "hp_used": hp_used,
        "hp_max_used_request": hp_max_used_request,
        "dangling_used": dangling_used,
        "cpu_message": cpu_message,
        "memory_message": memory_message,
    }
    return BatchResult(cpu.value, memory.value, f"{cpu_message}; {memory_message}", degraded=False,
                       details=details, errors=tuple(errors))


# ---------------------------------------------------------------------------------------------- update decision

def _is_quantity_diff(old: int, new: int, threshold: float) -> bool:
    # util.IsQuantityDiff compares MilliValue()s: |new - old| > old * threshold (strictly; a zero old value
    # therefore changes on any difference).
    old_milli, new_milli = old * 1000, new * 1000
    return math.fabs(float(new_milli - old_milli)) > float(old_milli) * threshold


def _is_resource_diff(old: int | None, new: int | None, threshold: float) -> bool:
    if (old is None) != (new is None):
        return True
    if old is None or new is None:
        return False
    return _is_quantity_diff(old, new, threshold)


def needs_update(old: BatchValues | BatchResult, new: BatchValues | BatchResult, last_update_time: float | None,
                 now: float, strategy: ColocationStrategy) -> bool:
    """Whether the node status must be written: never written by us, more than ``updateTimeThresholdSeconds``
    since the last write, a resource appearing or disappearing (e.g. colocation turned off), or a relative
    change above ``resourceDiffThreshold`` in batch-cpu or batch-memory."""
    old_values = old.values if isinstance(old, BatchResult) else old
    new_values = new.values if isinstance(new, BatchResult) else new
    interval = int(_setting(strategy, "update_time_threshold_seconds"))
    if last_update_time is None or now - last_update_time > interval:
        return True
    threshold = float(_setting(strategy, "resource_diff_threshold"))
    return (_is_resource_diff(old_values.cpu_milli, new_values.cpu_milli, threshold)
            or _is_resource_diff(old_values.memory_bytes, new_values.memory_bytes, threshold))


__all__ = [
    "POLICY_MAX_USAGE_REQUEST", "POLICY_REQUEST", "POLICY_USAGE", "REASON_DEGRADED", "REASON_DISABLED",
    "BatchResult", "BatchValues", "CPUMemory", "HostAppMetric", "NodeInput", "PodInput", "calculate",
    "is_degrade_needed", "needs_update", "parse_cpuset", "parse_node_reservation",
]
