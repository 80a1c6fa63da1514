"""The memory QoS values of one cgroup (Koordinator ``cgroup_reconcile.go``: ``calculateContainerResources``,
``calculatePodResources``, ``updateCgroupSummaryForQoS``, ``completeCgroupSummaryForQoS``).

Integer byte math as Koordinator does it in int64: ``request x percent / 100`` truncated, ``memory.high``
rounded down to a whole page.  A value of None means "leave the file alone"."""

from __future__ import annotations

import resource
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from koordlet.apis.nodeslo import MemoryQOSCfg
from koordlet.system import resources
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.validators import INT64_MAX

PAGE_SIZE = resource.getpagesize()
"""Koordinator's ``system.PageSize`` is the runtime's page size; tests pass 4096 explicitly."""

MEMORY_HIGH_MAX = INT64_MAX
"""``memory.high`` without throttling.  Koordinator writes MaxInt64 ("writing MaxInt64 is equal to write
max"): the v1 (Anolis) and v2 kernels both clamp a byte count that large to their "max", and the
registry's ``memory_high`` validator takes 0..INT64_MAX without a -1 spelling."""


@dataclass(frozen=True, slots=True)
class MemoryValues:
    """What one cgroup should hold, by registry key suffix; None: not written."""

    memory_min: int | None = None
    memory_low: int | None = None
    memory_high: int | None = None
    memory_wmark_ratio: int | None = None
    memory_wmark_scale_factor: int | None = None
    memory_wmark_min_adj: int | None = None
    memory_priority: int | None = None
    memory_use_priority_oom: int | None = None
    memory_oom_group: int | None = None

    def items(self) -> Iterator[tuple[str, int]]:
        """(registry key, value) of every value to write, in a fixed order."""
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                yield f.name, value


RESOURCES: tuple[str, ...] = tuple(f.name for f in fields(MemoryValues))
"""Every registry key this strategy may write."""

FILES: Mapping[str, CgroupFile] = MappingProxyType({d.key: d for d in (
    resources.MEMORY_MIN, resources.MEMORY_LOW, resources.MEMORY_HIGH, resources.MEMORY_WMARK_RATIO,
    resources.MEMORY_WMARK_SCALE_FACTOR, resources.MEMORY_WMARK_MIN_ADJ, resources.MEMORY_PRIORITY,
    resources.MEMORY_USE_PRIORITY_OOM, resources.MEMORY_OOM_GROUP)})
"""The descriptor of each :data:`RESOURCES` key (the field names of :class:`MemoryValues`)."""
assert tuple(FILES) == RESOURCES, "MemoryValues fields must name the memory QoS descriptors, in order"

RESET = MemoryValues(memory_min=0, memory_low=0, memory_high=MEMORY_HIGH_MAX, memory_wmark_ratio=0,
                     memory_wmark_scale_factor=50, memory_wmark_min_adj=0, memory_priority=0,
                     memory_use_priority_oom=0, memory_oom_group=0)
"""The kernel's defaults, as Koordinator's ``NoneMemoryQOS`` writes them: no protection, no throttling,
no async reclaim (wmark_scale_factor 50 is the kernel default), no OOM priority."""

QOS_RESET = MemoryValues(memory_min=0, memory_low=0, memory_priority=0, memory_use_priority_oom=0,
                         memory_oom_group=0)
"""What the kube QoS level gets back: Koordinator writes only these there."""


def percent_of(request_bytes: int, percent: int | None) -> int | None:
    """``request x percent / 100`` (Koordinator: None when the percent is unset)."""
    if percent is None:
        return None
    return max(request_bytes, 0) * percent // 100


def memory_high(request_bytes: int, limit_bytes: int | None, throttling_percent: int | None,
                node_allocatable_bytes: int, page_size: int = PAGE_SIZE) -> int | None:
    """``request + (limit - request) x throttlingPercent / 100`` rounded down to a page; throttling 0
    means no throttling (max); a container without a limit is throttled against the node's allocatable
    memory, as Koordinator does.  A limit below the request (which the API server refuses) counts as the
    request, so the result never falls below it."""
    if throttling_percent is None:
        return None
    if throttling_percent == 0:
        return MEMORY_HIGH_MAX
    request = max(request_bytes, 0)
    limit = limit_bytes if limit_bytes is not None and limit_bytes > 0 else node_allocatable_bytes
    high = request + max(limit - request, 0) * throttling_percent // 100
    return high // page_size * page_size


def _static(cfg: MemoryQOSCfg) -> dict[str, int | None]:
    """The values taken from the config as they are (Koordinator: "resources statically use configured
    values")."""
    return {"memory_wmark_ratio": cfg.wmark_ratio, "memory_wmark_scale_factor": cfg.wmark_scale_permill,
            "memory_wmark_min_adj": cfg.wmark_min_adj, "memory_use_priority_oom": cfg.priority_enable,
            "memory_priority": cfg.priority, "memory_oom_group": cfg.oom_kill_group}


def _low_at_least(low: int | None, low_min: int | None) -> int | None:
    # Koordinator raises a positive memory.low below memory.min to it; 0 (lowLimitPercent 0: off) stays,
    # memory.min protects the same memory anyway.
    if low is not None and low_min is not None and 0 < low < low_min:
        return low_min
    return low


def _high_at_least(high: int | None, low_min: int | None) -> int | None:
    # A memory.high below memory.min (page rounding of a tiny or unaligned request) would reclaim memory
    # the kernel must keep.  Koordinator skips the correction for 0, but memory.high 0 is never "off"
    # here (off is max), so a high rounded down to 0 is raised too.
    if high is not None and low_min is not None and high < low_min:
        return low_min
    return high


def container_values(cfg: MemoryQOSCfg, request_bytes: int, limit_bytes: int | None, node_allocatable_bytes: int,
                     page_size: int = PAGE_SIZE) -> MemoryValues:
    """One container: protection from its request, throttling between request and limit, and the
    static knobs.  Guarantees memory.low >= memory.min and memory.high >= memory.min where set."""
    low_min = percent_of(request_bytes, cfg.min_limit_percent)
    low = _low_at_least(percent_of(request_bytes, cfg.low_limit_percent), low_min)
    high = _high_at_least(memory_high(request_bytes, limit_bytes, cfg.throttling_percent, node_allocatable_bytes,
                                 page_size), low_min)
    return MemoryValues(memory_min=low_min, memory_low=low, memory_high=high, **_static(cfg))


def pod_values(cfg: MemoryQOSCfg, pod_request_bytes: int) -> MemoryValues:
    """The pod cgroup: protection from the sum of its containers' requests and the static knobs.  No
    memory.high: Koordinator throttles containers only, and a pod-level sum of the containers' values
    would throttle what kubelet budgets beyond them (a larger init container, the pod overhead)."""
    low_min = percent_of(pod_request_bytes, cfg.min_limit_percent)
    low = _low_at_least(percent_of(pod_request_bytes, cfg.low_limit_percent), low_min)
    return MemoryValues(memory_min=low_min, memory_low=low, **_static(cfg))


def qos_values(memory_min: int | None, memory_low: int | None, cfg: MemoryQOSCfg | None) -> MemoryValues:
    """A kube QoS directory: the summed protection of the pods below it, and the OOM knobs of the class
    it maps to (Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE) when that class is enabled."""
    if cfg is None:
        return MemoryValues(memory_min=memory_min, memory_low=memory_low)
    return MemoryValues(memory_min=memory_min, memory_low=memory_low, memory_priority=cfg.priority,
                        memory_use_priority_oom=cfg.priority_enable, memory_oom_group=cfg.oom_kill_group)
