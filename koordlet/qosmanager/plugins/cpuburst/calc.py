"""The cpuburst arithmetic (Koordinator ``qosmanager/plugins/cpuburst/cpu_burst.go``): burst values, the
share-pool state and the quota scaling step.  Pure functions, no I/O.

Units: CPU limits in milli-cores, quotas and bursts in microseconds per :data:`CFS_PERIOD_US`."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

CFS_PERIOD_US = 100_000
"""Koordinator's ``CFSBasePeriodValue``: limits become quotas over kubelet's default 100 ms period."""
SCALE_UP = 1.2
SCALE_DOWN = 0.8
COOLING_RATIO = 0.9
"""Between 0.9 x threshold and the threshold the share pool is "cooling": no scale up, no forced scale down."""
DEFAULT_SHARE_POOL_THRESHOLD_PERCENT = 50


class NodeState(enum.Enum):
    """How busy the share pool is (Koordinator ``nodeStateForBurst``)."""

    OVERLOAD = "overload"
    """usage >= threshold: every scaled container steps down."""
    COOLING = "cooling"
    """0.9 x threshold <= usage < threshold: no container steps up."""
    IDLE = "idle"
    UNKNOWN = "unknown"
    """No fresh node usage: treated like cooling (no step up)."""


class Operation(enum.Enum):
    """What one round does to a container's quota (Koordinator ``cfsOperation``)."""

    UP = "up"
    DOWN = "down"
    REMAIN = "remain"
    RESET = "reset"


def base_quota(limit_milli: int) -> int:
    """The quota kubelet sets for a CPU limit (Koordinator ``GetContainerBaseCFSQuota``); -1 without a limit."""
    if limit_milli <= 0:
        return -1
    return limit_milli * CFS_PERIOD_US // 1000


def ceil_quota(base: int, cfs_quota_burst_percent: int | None) -> int:
    """How far the quota may be scaled up: base x cfsQuotaBurstPercent%, only when that is above 100%."""
    if cfs_quota_burst_percent is not None and cfs_quota_burst_percent > 100:
        return int(base * cfs_quota_burst_percent / 100)
    return base


def burst_us(limit_milli: int, cpu_burst_percent: int) -> int:
    """``cpu.cfs_burst_us`` = limit cores x cpuBurstPercent% x period (Koordinator ``calcStaticCPUBurstVal``)."""
    if limit_milli <= 0:
        return 0
    return int(limit_milli / 1000 * (cpu_burst_percent / 100) * CFS_PERIOD_US)


def safe_burst_us(desired: int, quota: int) -> int:
    """The burst capped at the quota: kernels >= 5.14 refuse ``burst > quota`` with EINVAL, on v2
    ``cpu.max.burst`` as on v1 (Koordinator #2778, ``calcSafeCPUBurstVal``).  An unlimited (-1) or
    unknown quota leaves the burst as it is."""
    if quota > 0 and desired > quota:
        return quota
    return desired


@dataclass(frozen=True)
class SharePool:
    """The CPUs LS pods share: the node minus LSE/LSR requests; usage minus LSE/LSR/BE usage."""

    total_cores: float
    used_cores: float
    threshold_percent: int
    state: NodeState

    @property
    def usage_ratio(self) -> float:
        return self.used_cores / self.total_cores if self.total_cores > 0 else 1.0


@dataclass(frozen=True)
class PodShare:
    """What one pod takes from the share pool."""

    exclusive: bool
    """LSE or LSR (label): its CPU request is carved out of the pool."""
    outside: bool
    """LSE, LSR or BE (label): its usage is not the pool's."""
    request_cores: float
    usage_cores: float | None


def share_pool(cpu_count: int, node_used: float | None, pods: Iterable[PodShare], threshold_percent: int
               ) -> SharePool:
    """Koordinator ``getNodeStateForBurst``; system usage stays in the pool, for caution."""
    pods = list(pods)
    return pool_state(pool_total(cpu_count, [p.request_cores for p in pods if p.exclusive]), node_used,
                      [p.usage_cores for p in pods if p.outside], threshold_percent)


def pool_total(cpu_count: int, exclusive_requests: Iterable[float]) -> float:
    """The share pool's cores: the node's minus the CPU requests of the LSE/LSR pods (in pod order)."""
    total = float(cpu_count)
    for request in exclusive_requests:
        total -= request
    return total


def pool_state(total: float, node_used: float | None, outside_usages: Iterable[float | None],
               threshold_percent: int) -> SharePool:
    """:func:`share_pool` from the pool's cores and the usage of the pods outside it (LSE, LSR, BE; None:
    no sample), for a caller that keeps the part that changes only with the pods."""
    used = node_used if node_used is not None else 0.0
    for usage in outside_usages:
        if usage is not None:
            used -= usage
    if node_used is None:
        return SharePool(total, used, threshold_percent, NodeState.UNKNOWN)
    return SharePool(total, used, threshold_percent, node_state(used / total if total > 0 else 1.0,
                                                                 threshold_percent))


def node_state(usage_ratio: float, threshold_percent: int) -> NodeState:
    threshold = threshold_percent / 100
    if usage_ratio >= threshold:
        return NodeState.OVERLOAD
    if usage_ratio >= threshold * COOLING_RATIO:
        return NodeState.COOLING
    return NodeState.IDLE


def adjust_for_node(state: NodeState, operation: Operation) -> Operation:
    """Koordinator ``changeOperationByNode``: an overloaded pool turns up and remain into down; a
    cooling or unknown pool turns up into remain."""
    if state is NodeState.OVERLOAD and operation in (Operation.UP, Operation.REMAIN):
        return Operation.DOWN
    if state in (NodeState.COOLING, NodeState.UNKNOWN) and operation is Operation.UP:
        return Operation.REMAIN
    return operation


def target_quota(operation: Operation, current: int, base: int, ceil: int) -> int:
    """The next quota: one x1.2 / x0.8 step (Go's int64() truncation), kept within [base, ceil]."""
    if operation is Operation.UP:
        target = int(current * SCALE_UP)
    elif operation is Operation.DOWN:
        target = int(current * SCALE_DOWN)
    elif operation is Operation.RESET:
        target = base
    else:
        target = current
    return max(base, min(target, ceil))


def usage_percent(usage_cores: float | None, limit_milli: int) -> int:
    """Usage as an integer percentage of the limit (Go ``int64(usage/limit*100)``); a container without
    a fresh sample counts as 100%: it neither spends nor saves tokens."""
    if usage_cores is None:
        return 100
    return int(usage_cores / (limit_milli / 1000) * 100)
