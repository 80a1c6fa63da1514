"""NodeSLOSpec and its parts (koordinator ``apis/slo/v1alpha1/nodeslo_types.go``, ``host_application.go``).

Field names are snake_case with the unit in the name; the JSON names are Koordinator's json tags.  Every field is
optional (``None`` = Go's nil pointer, or an empty ``omitempty`` string); :mod:`.defaults` fills them.  Go's
``inline`` embeddings (``CPUQOSCfg`` = ``enable`` + ``CPUQOS``...) are flattened into one dataclass each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodeslo.fields import (
    JsonObject,
    bool_field,
    bool_map_field,
    check_less,
    enum_field,
    int_field,
    list_field,
    nested,
    object_field,
    percent_or_quantity_field,
    quantity_field,
    str_field,
)
from koordlet.errors import ConfigError

CPU_SUPPRESS_POLICIES: Final = ("cpuset", "cfsQuota")
CPU_EVICT_POLICIES: Final = ("evictByRealLimit", "evictByAllocatable")
CPU_QOS_POLICIES: Final = ("groupIdentity", "coreSched")
NET_QOS_POLICIES: Final = ("tc", "terway-qos")
CPU_BURST_POLICIES: Final = ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto")
BLOCK_TYPES: Final = ("device", "volumegroup", "podvolume")
CGROUP_BASES: Final = ("CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort")

# ------------------------------------------------------------------------------------------ thresholds


@dataclass(frozen=True)
class ResourceThresholdStrategy(JsonObject):
    """``resourceUsedThresholdWithBE``: BE suppression and eviction thresholds."""

    enable: bool | None = bool_field("enable")
    """Master switch of the threshold strategies (default false)."""
    cpu_suppress_threshold_percent: int | None = int_field("cpuSuppressThresholdPercent", 0, 100)
    """Node CPU utilisation that BE pods are suppressed to stay under (default 65)."""
    cpu_suppress_min_percent: int | None = int_field("cpuSuppressMinPercent", 0, 100)
    """Floor of the CPU left to BE pods while suppressed."""
    cpu_suppress_policy: str | None = enum_field("cpuSuppressPolicy", CPU_SUPPRESS_POLICIES)
    """``cpuset`` (shrink BE cpuset.cpus) or ``cfsQuota`` (lower BE cfs quota); default cpuset."""
    memory_evict_threshold_percent: int | None = int_field("memoryEvictThresholdPercent", 0, 100)
    """Node memory utilisation that starts BE eviction (default 70)."""
    memory_evict_lower_percent: int | None = int_field("memoryEvictLowerPercent", 0, 100)
    """Utilisation eviction brings memory back under (default threshold - 2)."""
    cpu_evict_be_satisfaction_upper_percent: int | None = int_field("cpuEvictBESatisfactionUpperPercent", 0, 100)
    """BE CPU satisfaction above which eviction stops."""
    cpu_evict_be_satisfaction_lower_percent: int | None = int_field("cpuEvictBESatisfactionLowerPercent", 0, 100)
    """BE CPU satisfaction below which eviction starts (with the usage threshold)."""
    cpu_evict_be_usage_threshold_percent: int | None = int_field("cpuEvictBEUsageThresholdPercent", 0, 100)
    """BE usage / BE real limit needed before CPU eviction starts."""
    cpu_evict_time_window_seconds: int | None = int_field("cpuEvictTimeWindowSeconds", 1)
    """Window of the CPU averages BECPUEvict and CPUEvict look at."""
    cpu_evict_threshold_percent: int | None = int_field("cpuEvictThresholdPercent", 0, 100)
    """Node CPU utilisation that starts CPUEvict."""
    cpu_evict_lower_percent: int | None = int_field("cpuEvictLowerPercent", 0, 100)
    """Utilisation CPUEvict brings the node back under."""
    cpu_evict_policy: str | None = enum_field("cpuEvictPolicy", CPU_EVICT_POLICIES)
    """``evictByRealLimit`` (default) or ``evictByAllocatable``."""
    evict_enabled_priority_threshold: int | None = int_field("evictEnabledPriorityThreshold")
    """Highest pod priority the usage-based evictions may evict."""
    cpu_allocatable_evict_threshold_percent: int | None = int_field("cpuAllocatableEvictThresholdPercent", 0)
    """Batch CPU allocated / allocatable (may exceed 100) that starts CPUAllocatableEvict."""
    cpu_allocatable_evict_lower_percent: int | None = int_field("cpuAllocatableEvictLowerPercent", 0)
    """Allocated ratio CPUAllocatableEvict brings the node back under."""
    memory_allocatable_evict_threshold_percent: int | None = int_field("memoryAllocatableEvictThresholdPercent", 0)
    """Batch memory allocated / allocatable that starts MemoryAllocatableEvict."""
    memory_allocatable_evict_lower_percent: int | None = int_field("memoryAllocatableEvictLowerPercent", 0)
    """Allocated ratio MemoryAllocatableEvict brings the node back under."""
    allocatable_evict_priority_threshold: int | None = int_field("allocatableEvictPriorityThreshold")
    """Highest pod priority the allocatable-based evictions may evict."""

    def check(self, where: str) -> None:
        check_less(where, "memoryEvictLowerPercent", self.memory_evict_lower_percent,
                   "memoryEvictThresholdPercent", self.memory_evict_threshold_percent)
        check_less(where, "cpuEvictBESatisfactionLowerPercent", self.cpu_evict_be_satisfaction_lower_percent,
                   "cpuEvictBESatisfactionUpperPercent", self.cpu_evict_be_satisfaction_upper_percent)
        check_less(where, "cpuEvictLowerPercent", self.cpu_evict_lower_percent,
                   "cpuEvictThresholdPercent", self.cpu_evict_threshold_percent)
        check_less(where, "cpuAllocatableEvictLowerPercent", self.cpu_allocatable_evict_lower_percent,
                   "cpuAllocatableEvictThresholdPercent", self.cpu_allocatable_evict_threshold_percent)
        check_less(where, "memoryAllocatableEvictLowerPercent", self.memory_allocatable_evict_lower_percent,
                   "memoryAllocatableEvictThresholdPercent", self.memory_allocatable_evict_threshold_percent)


# ------------------------------------------------------------------------------------------ QoS classes


@dataclass(frozen=True)
class CPUQOSCfg(JsonObject):
    """``cpuQOS`` of one class."""

    enable: bool | None = bool_field("enable")
    """Apply CPU QoS to the class (default false; false resets the cgroup values)."""
    group_identity: int | None = int_field("groupIdentity", -1, 2)
    """``cpu.bvt_warp_ns`` under the groupIdentity policy: 2 highest .. -1 lowest."""
    sched_idle: int | None = int_field("schedIdle", 0, 1)
    """``cpu.idle`` under the coreSched policy (1 = SCHED_IDLE)."""
    core_expeller: bool | None = bool_field("coreExpeller")
    """Under coreSched, whether the class may expel idle pods from SMT siblings."""


@dataclass(frozen=True)
class MemoryQOSCfg(JsonObject):
    """``memoryQOS`` of one class (memcg QoS; wmark and priority knobs need Anolis OS)."""

    enable: bool | None = bool_field("enable")
    """Apply memory QoS to the class (default false)."""
    min_limit_percent: int | None = int_field("minLimitPercent", 0, 100)
    """``memory.min`` = request x percent / 100."""
    low_limit_percent: int | None = int_field("lowLimitPercent", 0, 100)
    """``memory.low`` = request x percent / 100."""
    throttling_percent: int | None = int_field("throttlingPercent", 0, 100)
    """``memory.high`` factor between request and limit; 0 disables."""
    wmark_ratio: int | None = int_field("wmarkRatio", 0, 100)
    """``memory.wmark_ratio``: async reclaim starts at this percent of the limit."""
    wmark_scale_permill: int | None = int_field("wmarkScalePermill", 1, 1000)
    """``memory.wmark_scale_factor`` in per-mill."""
    wmark_min_adj: int | None = int_field("wmarkMinAdj", -25, 50)
    """``memory.wmark_min_adj``: global min watermark adjustment."""
    page_cache_limit_enable: int | None = int_field("pageCacheLimitEnable", 0, 1)
    """``memory.pagecache_limit.enable``."""
    page_cache_limit_sync: int | None = int_field("pageCacheLimitSync", 0, 1)
    """``memory.pagecache_limit.sync``."""
    page_cache_limit_size_bytes: int | None = int_field("pageCacheLimitSize", 0)
    """``memory.pagecache_limit.size`` in bytes."""
    priority_enable: int | None = int_field("priorityEnable", 0, 1)
    """``memory.use_priority_oom``."""
    priority: int | None = int_field("priority", 0, 12)
    """``memory.priority`` (OOM priority)."""
    oom_kill_group: int | None = int_field("oomKillGroup", 0, 1)
    """``memory.oom.group``."""


@dataclass(frozen=True)
class IOCfg(JsonObject):
    """``ioCfg`` of one block: blk-throttle limits, blk-iocost weight and the root cost model."""

    read_iops: int | None = int_field("readIOPS", 0)
    """Read IOPS limit; 0 disables."""
    write_iops: int | None = int_field("writeIOPS", 0)
    """Write IOPS limit; 0 disables."""
    read_bps: int | None = int_field("readBPS", 0)
    """Read bytes per second limit; 0 disables."""
    write_bps: int | None = int_field("writeBPS", 0)
    """Write bytes per second limit; 0 disables."""
    io_weight_percent: int | None = int_field("ioWeightPercent", 1, 100)
    """blk-iocost weight of the group (default 100)."""
    read_latency_us: int | None = int_field("readLatency", 0)
    """Root only: read latency target in microseconds."""
    write_latency_us: int | None = int_field("writeLatency", 0)
    """Root only: write latency target in microseconds."""
    read_latency_percent: int | None = int_field("readLatencyPercent", 0, 100)
    """Root only: read latency percentile."""
    write_latency_percent: int | None = int_field("writeLatencyPercent", 0, 100)
    """Root only: write latency percentile."""
    enable_user_model: bool | None = bool_field("enableUserModel")
    """Root only: use the cost model below instead of the kernel's."""
    model_read_bps: int | None = int_field("modelReadBPS", 1)
    """User cost model: read bytes per second."""
    model_write_bps: int | None = int_field("modelWriteBPS", 1)
    """User cost model: write bytes per second."""
    model_read_seq_iops: int | None = int_field("modelReadSeqIOPS", 1)
    """User cost model: sequential read IOPS."""
    model_write_seq_iops: int | None = int_field("modelWriteSeqIOPS", 1)
    """User cost model: sequential write IOPS."""
    model_read_rand_iops: int | None = int_field("modelReadRandIOPS", 1)
    """User cost model: random read IOPS."""
    model_write_rand_iops: int | None = int_field("modelWriteRandIOPS", 1)
    """User cost model: random write IOPS."""


@dataclass(frozen=True)
class BlockCfg(JsonObject):
    """One entry of ``blkioQOS.blocks``."""

    name: str | None = str_field("name")
    """Device path, volume group or pod volume name."""
    block_type: str | None = enum_field("type", BLOCK_TYPES)
    """``device``, ``volumegroup`` or ``podvolume``."""
    io_cfg: IOCfg | None = field(default=None, metadata=nested("ioCfg", IOCfg))
    """Limits and weights for the block."""


@dataclass(frozen=True)
class BlkIOQOSCfg(JsonObject):
    """``blkioQOS`` of one class or of the cgroup root."""

    enable: bool | None = bool_field("enable")
    """Apply block IO QoS (default false)."""
    blocks: tuple[BlockCfg, ...] | None = list_field("blocks", BlockCfg)
    """Per-block settings (default none)."""


@dataclass(frozen=True)
class ResctrlQOSCfg(JsonObject):
    """``resctrlQOS`` of one class (Intel RDT / AMD PQoS)."""

    enable: bool | None = bool_field("enable")
    """Apply resctrl QoS (default false)."""
    cat_range_start_percent: int | None = int_field("catRangeStartPercent", 0, 100)
    """Start of the class's L3 ways, as a percentage of the cache."""
    cat_range_end_percent: int | None = int_field("catRangeEndPercent", 0, 100)
    """End of the class's L3 ways, as a percentage of the cache."""
    mba_percent: int | None = int_field("mbaPercent", 0, 100)
    """Memory bandwidth allocation percentage."""

    def check(self, where: str) -> None:
        check_less(where, "catRangeStartPercent", self.cat_range_start_percent,
                   "catRangeEndPercent", self.cat_range_end_percent)


@dataclass(frozen=True)
class NetworkQOSCfg(JsonObject):
    """``networkQOS`` of one class: an int is a percentage of the total bandwidth, a string a quantity (bytes/s)."""

    enable: bool | None = bool_field("enable")
    """Apply network QoS (default false)."""
    ingress_request: int | str | None = percent_or_quantity_field("ingressRequest")
    """Guaranteed ingress bandwidth."""
    ingress_limit: int | str | None = percent_or_quantity_field("ingressLimit")
    """Maximum ingress bandwidth."""
    egress_request: int | str | None = percent_or_quantity_field("egressRequest")
    """Guaranteed egress bandwidth."""
    egress_limit: int | str | None = percent_or_quantity_field("egressLimit")
    """Maximum egress bandwidth."""


@dataclass(frozen=True)
class ResourceQOS(JsonObject):
    """The QoS settings of one class (``lsrClass``, ``lsClass``, ``beClass``, ``systemClass``, ``cgroupRoot``)."""

    cpu_qos: CPUQOSCfg | None = field(default=None, metadata=nested("cpuQOS", CPUQOSCfg))
    """CPU QoS (group identity or core scheduling)."""
    memory_qos: MemoryQOSCfg | None = field(default=None, metadata=nested("memoryQOS", MemoryQOSCfg))
    """Memory QoS (memcg protection, throttling, async reclaim)."""
    blkio_qos: BlkIOQOSCfg | None = field(default=None, metadata=nested("blkioQOS", BlkIOQOSCfg))
    """Block IO QoS."""
    resctrl_qos: ResctrlQOSCfg | None = field(default=None, metadata=nested("resctrlQOS", ResctrlQOSCfg))
    """LLC and memory bandwidth partitioning."""
    network_qos: NetworkQOSCfg | None = field(default=None, metadata=nested("networkQOS", NetworkQOSCfg))
    """Network bandwidth QoS."""


@dataclass(frozen=True)
class ResourceQOSPolicies(JsonObject):
    """``policies``: which mechanism implements CPU and network QoS."""

    cpu_policy: str | None = enum_field("cpuPolicy", CPU_QOS_POLICIES)
    """``groupIdentity`` (default) or ``coreSched``."""
    net_qos_policy: str | None = enum_field("netQOSPolicy", NET_QOS_POLICIES)
    """``tc`` (default) or ``terway-qos``."""


@dataclass(frozen=True)
class ResourceQOSStrategy(JsonObject):
    """``resourceQOSStrategy``: the per-class QoS settings."""

    policies: ResourceQOSPolicies | None = field(default=None, metadata=nested("policies", ResourceQOSPolicies))
    """Mechanisms used for CPU and network QoS."""
    lsr_class: ResourceQOS | None = field(default=None, metadata=nested("lsrClass", ResourceQOS))
    """Settings for LSR pods."""
    ls_class: ResourceQOS | None = field(default=None, metadata=nested("lsClass", ResourceQOS))
    """Settings for LS pods."""
    be_class: ResourceQOS | None = field(default=None, metadata=nested("beClass", ResourceQOS))
    """Settings for BE pods."""
    system_class: ResourceQOS | None = field(default=None, metadata=nested("systemClass", ResourceQOS))
    """Settings for SYSTEM pods and host applications."""
    cgroup_root: ResourceQOS | None = field(default=None, metadata=nested("cgroupRoot", ResourceQOS))
    """Settings for the root cgroup (block IO cost model only)."""


# ------------------------------------------------------------------------------------------ burst, system


@dataclass(frozen=True)
class CPUBurstStrategy(JsonObject):
    """``cpuBurstStrategy`` (``CPUBurstConfig`` inline plus the share-pool threshold)."""

    policy: str | None = enum_field("policy", CPU_BURST_POLICIES)
    """``none`` (default), ``cpuBurstOnly``, ``cfsQuotaBurstOnly`` or ``auto``."""
    cpu_burst_percent: int | None = int_field("cpuBurstPercent", 1, 10000)
    """``cpu.cfs_burst_us`` as a percentage of the CPU limit (default 1000)."""
    cfs_quota_burst_percent: int | None = int_field("cfsQuotaBurstPercent", 100)
    """Ceiling of the scaled-up cfs quota, percent of the limit (default 300)."""
    cfs_quota_burst_period_seconds: int | None = int_field("cfsQuotaBurstPeriodSeconds", -1)
    """How long a pod may run with a raised quota; -1 = unlimited (default)."""
    share_pool_threshold_percent: int | None = int_field("sharePoolThresholdPercent", 0, 100)
    """Share-pool utilisation above which bursting is scaled back (default 50)."""


@dataclass(frozen=True)
class SystemStrategy(JsonObject):
    """``systemStrategy``: node-wide kernel knobs."""

    min_free_kbytes_factor: int | None = int_field("minFreeKbytesFactor", 1)
    """``min_free_kbytes`` = factor x node memory / 10000 (unset by default; 100 recommended)."""
    watermark_scale_factor: int | None = int_field("watermarkScaleFactor", 1, 400)
    """``/proc/sys/vm/watermark_scale_factor`` (unset by default; 150 recommended)."""
    memcg_reap_background: int | None = int_field("memcgReapBackGround", 0, 1)
    """``/sys/kernel/mm/memcg_reaper/reap_background``."""
    sched_group_identity_enabled: int | None = int_field("schedGroupIdentityEnabled", 0, 1)
    """``/proc/sys/kernel/sched_group_identity_enabled``."""
    sched_idle_saver_wmark_ns: int | None = int_field("schedIdleSaverWmark", 0)
    """``/proc/sys/kernel/sched_idle_saver_wmark`` in nanoseconds."""
    sched_features: Mapping[str, bool] | None = bool_map_field("schedFeatures")
    """Extra ``/sys/kernel/debug/sched_features`` switches."""
    page_cache_limit_enabled: int | None = int_field("pageCacheLimitEnabled", 0, 1)
    """``/sys/kernel/mm/pagecache_limit/enabled``."""
    total_network_bandwidth: str | None = quantity_field("totalNetworkBandwidth")
    """Node network bandwidth as a quantity (default "0": read the NIC speed)."""


# ------------------------------------------------------------------------------------------ host apps


@dataclass(frozen=True)
class CgroupPath(JsonObject):
    """Where a host application's cgroup lives: ``base/parentDir/relativePath``."""

    base: str | None = enum_field("base", CGROUP_BASES)
    """``CgroupRoot``, ``Kubepods``, ``KubepodsBurstable`` or ``KubepodsBesteffort``."""
    parent_dir: str | None = str_field("parentDir")
    """Directory under the base."""
    relative_path: str | None = str_field("relativePath")
    """Directory of the application under the parent."""

    def check(self, where: str) -> None:
        # koordlet joins base/parentDir/relativePath the way Go's filepath.Join does, which resolves "..":
        # a NodeSLO could otherwise point a host application at any directory of the host's cgroupfs
        # mount or above it.
        for name, value in (("parentDir", self.parent_dir), ("relativePath", self.relative_path)):
            if value and ".." in value.split("/"):
                raise ConfigError(f"{where}.{name}: must not contain '..', got {value!r}")


@dataclass(frozen=True)
class HostApplicationSpec(JsonObject):
    """One entry of ``hostApplications``: an out-of-band process tree koordlet manages like a pod."""

    name: str | None = str_field("name")
    """Application name."""
    priority: str | None = enum_field("priority", [p.value for p in PriorityClass if p.value])
    """Priority band (``koord-prod``...)."""
    qos: str | None = enum_field("qos", [q.value for q in QoSClass if q.value])
    """QoS class (``LS``, ``BE``...)."""
    cgroup_path: CgroupPath | None = field(default=None, metadata=nested("cgroupPath", CgroupPath))
    """Cgroup of the application; derived from qos and priority when unset."""
    strategy: Mapping[str, Any] | None = object_field("strategy")
    """Per-application strategy (empty in Koordinator today)."""

    def check(self, where: str) -> None:
        # The name keys the application's metric series and, with no cgroupPath, is its cgroup directory.
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ConfigError(f"{where}.name: must be a non-empty name without '/', got {self.name!r}")


# ------------------------------------------------------------------------------------------ spec


@dataclass(frozen=True)
class NodeSLOSpec(JsonObject):
    """``NodeSLO.spec``: everything koordlet's QoS manager obeys on one node."""

    resource_used_threshold_with_be: ResourceThresholdStrategy | None = field(
        default=None, metadata=nested("resourceUsedThresholdWithBE", ResourceThresholdStrategy))
    """BE suppression and eviction thresholds."""
    resource_qos_strategy: ResourceQOSStrategy | None = field(
        default=None, metadata=nested("resourceQOSStrategy", ResourceQOSStrategy))
    """Per-class QoS settings."""
    cpu_burst_strategy: CPUBurstStrategy | None = field(
        default=None, metadata=nested("cpuBurstStrategy", CPUBurstStrategy))
    """CPU burst."""
    system_strategy: SystemStrategy | None = field(default=None, metadata=nested("systemStrategy", SystemStrategy))
    """Node-wide kernel knobs."""
    extensions: Mapping[str, Any] | None = object_field("extensions")
    """Third-party plugin configuration, by plugin name."""
    host_applications: tuple[HostApplicationSpec, ...] | None = list_field("hostApplications", HostApplicationSpec)
    """Out-of-band applications under QoS management."""

    def with_defaults(self) -> NodeSLOSpec:
        """This spec laid over Koordinator's defaults, as koordlet merges a NodeSLO before using it."""
        from koordlet.apis.nodeslo.defaults import merge_over_defaults

        return merge_over_defaults(self)
