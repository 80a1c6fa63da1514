"""Koordinator's NodeSLO defaults (``pkg/util/sloconfig/nodeslo_config.go``) and the merge over them.

Per class: every ``enable`` is false; CPU QoS LSR/LS = groupIdentity 2, schedIdle 0, coreExpeller true, BE = -1/0/false,
SYSTEM = 0/0/false; resctrl BE = 0..30 % of L3 with MBA 100, the others 0..100/100; memory QoS LSR/LS =
0/0/0, wmarkRatio 95, wmarkScalePermill 20, wmarkMinAdj -25, priority knobs 0, BE the same with wmarkMinAdj 50,
SYSTEM the all-off values (wmarkRatio 0, wmarkScalePermill 50, wmarkMinAdj 0); block IO without blocks and
network QoS all 0.  The cgroup root only has block IO.  CPU burst: none / 1000 % / 300 % / -1 s / 50 %.  System
strategy: only ``totalNetworkBandwidth`` "0" (the kernel knobs stay unset unless configured).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

import koordlet.apis.nodeslo.types as slo
from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo.fields import merge_json

DEFAULT_CPU_SUPPRESS_THRESHOLD_PERCENT: Final = 65
DEFAULT_MEMORY_EVICT_THRESHOLD_PERCENT: Final = 70
# Koordinator's memoryEvictLowerPercent default, applied by the eviction strategy rather than stored in the spec.
MEMORY_EVICT_LOWER_GAP_PERCENT: Final = 2

_CPU_QOS: Final = {
    QoSClass.LSR: (2, 0, True),
    QoSClass.LS: (2, 0, True),
    QoSClass.BE: (-1, 0, False),
    QoSClass.SYSTEM: (0, 0, False),
}
_RESCTRL: Final = {QoSClass.LSR: (0, 100, 100), QoSClass.LS: (0, 100, 100), QoSClass.BE: (0, 30, 100),
                   QoSClass.SYSTEM: (0, 100, 100)}
# min, low, throttling, wmarkRatio, wmarkScalePermill, wmarkMinAdj
_MEMORY: Final = {QoSClass.LSR: (0, 0, 0, 95, 20, -25), QoSClass.LS: (0, 0, 0, 95, 20, -25),
                  QoSClass.BE: (0, 0, 0, 95, 20, 50), QoSClass.SYSTEM: (0, 0, 0, 0, 50, 0)}


def default_resource_threshold_strategy() -> slo.ResourceThresholdStrategy:
    """``resourceUsedThresholdWithBE`` defaults: off, cpuset suppress at 65 %, memory evict at 70 %."""
    return slo.ResourceThresholdStrategy(
        enable=False, cpu_suppress_threshold_percent=DEFAULT_CPU_SUPPRESS_THRESHOLD_PERCENT,
        cpu_suppress_policy="cpuset", memory_evict_threshold_percent=DEFAULT_MEMORY_EVICT_THRESHOLD_PERCENT,
        cpu_evict_policy="evictByRealLimit")


def default_resource_qos(qos: QoSClass) -> slo.ResourceQOS:
    """The default settings of one class (LSR, LS, BE or SYSTEM), all disabled."""
    group_identity, sched_idle, core_expeller = _CPU_QOS[qos]
    start, end, mba = _RESCTRL[qos]
    min_limit, low_limit, throttling, wmark_ratio, wmark_scale, wmark_min_adj = _MEMORY[qos]
    return slo.ResourceQOS(
        cpu_qos=slo.CPUQOSCfg(enable=False, group_identity=group_identity, sched_idle=sched_idle,
                              core_expeller=core_expeller),
        memory_qos=slo.MemoryQOSCfg(enable=False, min_limit_percent=min_limit, low_limit_percent=low_limit,
                                    throttling_percent=throttling, wmark_ratio=wmark_ratio,
                                    wmark_scale_permill=wmark_scale, wmark_min_adj=wmark_min_adj,
                                    priority_enable=0, priority=0, oom_kill_group=0),
        blkio_qos=slo.BlkIOQOSCfg(enable=False),
        resctrl_qos=slo.ResctrlQOSCfg(enable=False, cat_range_start_percent=start, cat_range_end_percent=end,
                                      mba_percent=mba),
        network_qos=slo.NetworkQOSCfg(enable=False, ingress_request=0, ingress_limit=0, egress_request=0,
                                      egress_limit=0),
    )


def default_resource_qos_strategy() -> slo.ResourceQOSStrategy:
    """``resourceQOSStrategy`` defaults: groupIdentity and tc policies, every class disabled."""
    return slo.ResourceQOSStrategy(
        policies=slo.ResourceQOSPolicies(cpu_policy="groupIdentity", net_qos_policy="tc"),
        lsr_class=default_resource_qos(QoSClass.LSR),
        ls_class=default_resource_qos(QoSClass.LS),
        be_class=default_resource_qos(QoSClass.BE),
        system_class=default_resource_qos(QoSClass.SYSTEM),
        cgroup_root=slo.ResourceQOS(blkio_qos=slo.BlkIOQOSCfg(enable=False)),
    )


def default_cpu_burst_strategy() -> slo.CPUBurstStrategy:
    """``cpuBurstStrategy`` defaults: policy none, 1000 %, 300 %, unlimited period, share pool 50 %."""
    return slo.CPUBurstStrategy(policy="none", cpu_burst_percent=1000, cfs_quota_burst_percent=300,
                                cfs_quota_burst_period_seconds=-1, share_pool_threshold_percent=50)


def default_system_strategy() -> slo.SystemStrategy:
    """``systemStrategy`` defaults: bandwidth "0" (use the NIC speed), kernel knobs untouched."""
    return slo.SystemStrategy(total_network_bandwidth="0")


def default_nodeslo_spec() -> slo.NodeSLOSpec:
    """The NodeSLO spec koordlet uses when nothing is configured."""
    return slo.NodeSLOSpec(
        resource_used_threshold_with_be=default_resource_threshold_strategy(),
        resource_qos_strategy=default_resource_qos_strategy(),
        cpu_burst_strategy=default_cpu_burst_strategy(),
        system_strategy=default_system_strategy(),
        extensions=MappingProxyType({}),
    )


def merge_over_defaults(spec: slo.NodeSLOSpec) -> slo.NodeSLOSpec:
    """``spec`` laid over :func:`default_nodeslo_spec` field by field (set fields win, unset fields inherit)."""
    merged = merge_json(default_nodeslo_spec().to_json(), spec.to_json())
    return slo.NodeSLOSpec.from_json(merged, "spec")
