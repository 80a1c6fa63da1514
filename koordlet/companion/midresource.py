"""Mid-tier resources of a node (``kubernetes.io/mid-cpu``, ``kubernetes.io/mid-memory``): pure logic, no I/O.

The companion's counterpart of Koordinator's slo-controller ``MidResource`` plugin
(``pkg/slo-controller/noderesource/plugins/midresource/plugin.go``) and ``CalculateMidResourceByPolicy``
(``pkg/slo-controller/noderesource/plugins/util/util.go``).  For one node::

    prodReclaimable = NodeMetric status.prodReclaimableMetric (0 when absent or empty)
    nodeUnused      = capacity - nodeUsage                       (0 when the node usage is incomplete)
    systemUsed      = systemUsage + usage of host applications above mid priority
    nodeReserved    = max(systemUsed, kubelet reserved, node.koordinator.sh/reservation)
    unallocated     = max(capacity - nodeReserved - requests of Running/Pending pods above mid, 0)
    mid = max(min(prodReclaimable, nodeUnused), 0) + int(unallocated * midUnallocatedPercent / 100)
    mid = min(mid, int(capacity * mid{CPU,Memory}ThresholdPercent / 100))

Under ``midReclaimMode: static`` (upstream ``CalculateMidResourceByStaticMode``) mid is a fixed share of the
capacity instead::

    mid = min(int(capacity * midStatic{CPU,Memory}ReservedPercent / 100),
              int(capacity * mid{CPU,Memory}ThresholdPercent / 100))

A stale or missing NodeMetric (``degradeTimeMinutes``) or colocation turned off removes both resources, as
upstream's Reset does (in either mode: upstream checks the NodeMetric before it looks at the mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.extension import PriorityClass
from koordlet.apis.nodemetric import NodeMetricStatus
from koordlet.apis.sloconfig import ColocationStrategy
from koordlet.companion.batchresource import (
    _DEFAULT_PRIORITY_VALUE,
    ZERO,
    BatchValues,
    CPUMemory,
    HostAppMetric,
    NodeInput,
    PodInput,
    _setting,
    is_degrade_needed,
    parse_node_reservation,
)
from koordlet.errors import ParseError

REASON_DEGRADED: Final = "degrade node Mid resource because of abnormal nodeMetric, reason: degradedByMidResource"
REASON_DISABLED: Final = "node colocation is disabled in Config, reason: DisableInConfig"

_ACTIVE_PHASES: Final = frozenset({"Running", "Pending"})
_NOT_ABOVE_MID: Final = frozenset({PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE})


@dataclass(frozen=True, slots=True)
class MidResult:
    """What to write on the node; None quantities remove the resource."""

    mid_cpu_milli: int | None
    mid_memory_bytes: int | None
    reason: str
    degraded: bool
    details: dict[str, Any] = field(default_factory=dict)
    errors: tuple[ParseError, ...] = ()

    @property
    def values(self) -> BatchValues:
        """The pair in the shape :func:`koordlet.companion.batchresource.needs_update` compares."""
        return BatchValues(self.mid_cpu_milli, self.mid_memory_bytes)


def _ratio(strategy: ColocationStrategy, name: str) -> float:
    # getPercentFromStrategy: float64(percent) / 100.
    return float(int(_setting(strategy, name))) / 100


def calculate(node: NodeInput, pods: Sequence[PodInput], metric: NodeMetricStatus | None,
              strategy: ColocationStrategy, now: float, *, host_apps: Sequence[HostAppMetric] = (),
              cluster_enabled: bool = True) -> MidResult:
    """The mid resources to write on ``node`` (see the module docstring)."""
    if not cluster_enabled or strategy.enable is not True:
        return MidResult(None, None, REASON_DISABLED, degraded=False)
    if is_degrade_needed(metric, strategy, now):
        return MidResult(None, None, REASON_DEGRADED, degraded=True)
    assert metric is not None and metric.node_metric is not None
    if strategy.mid_reclaim_mode == "static":
        return _static(node.capacity, strategy)

    reclaimable = ZERO
    prm = metric.prod_reclaimable_metric
    if prm is not None:
        reclaimable = CPUMemory(prm.resource.cpu_milli or 0, prm.resource.memory_bytes or 0)

    mid_value = _DEFAULT_PRIORITY_VALUE[PriorityClass.MID]
    host_app_used = ZERO
    for app in host_apps:
        if _DEFAULT_PRIORITY_VALUE[app.priority] > mid_value:
            host_app_used += app.usage
    usage = metric.node_metric.system_usage
    system_used = CPUMemory(usage.cpu_milli or 0, usage.memory_bytes or 0) + host_app_used

    errors: list[ParseError] = []
    try:
        annotation_reserved = parse_node_reservation(node.name, node.annotations)
    except ParseError as exc:
        errors.append(exc)
        annotation_reserved = None
    node_reserved = node.kubelet_reservation.max(annotation_reserved or ZERO).max(system_used)

    prod_allocated = ZERO
    for pod in pods:
        if pod.phase in _ACTIVE_PHASES and pod.effective_priority not in _NOT_ABOVE_MID:
            prod_allocated += pod.requests
    cap = node.capacity
    unallocated = (cap - node_reserved - prod_allocated).max(ZERO)

    node_usage = metric.node_metric.node_usage
    if node_usage.cpu_milli is not None and node_usage.memory_bytes is not None:
        unused = cap - CPUMemory(node_usage.cpu_milli, node_usage.memory_bytes)
    else:
        unused = ZERO  # upstream: no usage, so radically believe nothing is left

    unallocated_ratio = _ratio(strategy, "mid_unallocated_percent")
    cpu_ratio = _ratio(strategy, "mid_cpu_threshold_percent")
    memory_ratio = _ratio(strategy, "mid_memory_threshold_percent")

    def resolve(prod: int, free: int, unalloc: int, capacity: int, threshold: float) -> int:
        value = max(min(prod, free), 0) + int(float(unalloc) * unallocated_ratio)
        cap_value = int(float(capacity) * threshold)
        return cap_value if value > cap_value else value

    cpu = resolve(reclaimable.cpu_milli, unused.cpu_milli, unallocated.cpu_milli, cap.cpu_milli, cpu_ratio)
    memory = resolve(reclaimable.memory_bytes, unused.memory_bytes, unallocated.memory_bytes, cap.memory_bytes,
                     memory_ratio)
    reason = (f"midAllocatable[CPU(milli-core)]:{cpu} = min(min(ProdReclaimable:{reclaimable.cpu_milli}, "
              f"NodeUnused:{unused.cpu_milli}) + Unallocated:{unallocated.cpu_milli} * midUnallocatedRatio:"
              f"{unallocated_ratio}, NodeCapacity:{cap.cpu_milli} * thresholdRatio:{cpu_ratio}); "
              f"midAllocatable[Memory(byte)]:{memory} = min(min(ProdReclaimable:{reclaimable.memory_bytes}, "
              f"NodeUnused:{unused.memory_bytes}) + Unallocated:{unallocated.memory_bytes} * midUnallocatedRatio:"
              f"{unallocated_ratio}, NodeCapacity:{cap.memory_bytes} * thresholdRatio:{memory_ratio})")
    details = {"prod_reclaimable": reclaimable, "node_unused": unused, "unallocated": unallocated,
               "node_reserved": node_reserved, "system_used": system_used, "prod_allocated": prod_allocated}
    return MidResult(cpu, memory, reason, degraded=False, details=details, errors=tuple(errors))


def _static(cap: CPUMemory, strategy: ColocationStrategy) -> MidResult:
    cpu_reserved = _ratio(strategy, "mid_static_cpu_reserved_percent")
    memory_reserved = _ratio(strategy, "mid_static_memory_reserved_percent")
    cpu_ratio = _ratio(strategy, "mid_cpu_threshold_percent")
    memory_ratio = _ratio(strategy, "mid_memory_threshold_percent")
    cpu = min(int(float(cap.cpu_milli) * cpu_reserved), int(float(cap.cpu_milli) * cpu_ratio))
    memory = min(int(float(cap.memory_bytes) * memory_reserved), int(float(cap.memory_bytes) * memory_ratio))
    reason = (f"midAllocatable[CPU(milli-core)]:{cpu} = min(nodeCapacity:{cap.cpu_milli} * staticReservedPercent:"
              f"{cpu_reserved}, nodeCapacity:{cap.cpu_milli} * thresholdRatio:{cpu_ratio}); "
              f"midAllocatable[Memory(byte)]:{memory} = min(nodeCapacity:{cap.memory_bytes} * staticReservedPercent:"
              f"{memory_reserved}, nodeCapacity:{cap.memory_bytes} * thresholdRatio:{memory_ratio})")
    return MidResult(cpu, memory, reason, degraded=False, details={"mode": "static"})
