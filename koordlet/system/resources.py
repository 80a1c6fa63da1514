"""Every cgroup file koordlet's strategies read or write, as :class:`~koordlet.system.cgroupfile.CgroupFile`
descriptors keyed by a stable name (``cpu_shares``, ``memory_limit``...).

The set and the v1 -> v2 renames follow Koordinator's ``util/system/cgroup_resource.go`` and the files
its QoS strategies (``pkg/koordlet/qosmanager/plugins``) touch; the bounds are the kernel's where it has
one (checked against the test host's kernel by ``tests/integration/system``) and Koordinator's otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from koordlet.system.cgroupfile import (
    CgroupFile,
    Field,
    FileKind,
    FileVersion,
    Hierarchy,
    Placement,
    build_registry,
)
from koordlet.system.validators import (
    CFS_QUOTA_MAX_US,
    INT64_MAX,
    PID_MAX_LIMIT,
    SHARES_MAX,
    SHARES_MIN,
    CostQos,
    CpuList,
    DeviceValue,
    IntRange,
    shares_to_weight,
    to_v2_max,
    weight_to_shares,
)

_INT = FileKind.INT
_KV = FileKind.KV
_RAW = FileKind.RAW
_NON_ROOT = Placement.NON_ROOT

# v1 reports "no limit" as LONG_MAX rounded down to the page size (9223372036854771712 with 4 KiB
# pages); anything that close to 2^63 is "unlimited" whatever the page size (up to 64 KiB).
_V1_UNLIMITED_FLOOR = (1 << 63) - (1 << 16)


def _v1_unlimited(value: int) -> int:
    return -1 if value >= _V1_UNLIMITED_FLOOR else value


def _io_max(key: str) -> Callable[[Any], str]:
    # blkio.throttle.*: 0 removes the limit; io.max spells that "max".
    def render(value: Any) -> str:
        major, minor, number = value
        return f"{major}:{minor} {key}={number if number else 'max'}"

    return render


def _bool_file(key: str, v1: FileVersion | None, v2: FileVersion | None, what: str) -> CgroupFile:
    return CgroupFile(key, what, v1, v2, IntRange(0, 1), optional=True)


CPU_SHARES = CgroupFile(
    "cpu_shares",
    "CPU weight: v1 shares 2..262144, v2 weight by kubelet's mapping",
    FileVersion("cpu.shares", _INT, "cpu"),
    FileVersion("cpu.weight", _INT, "cpu", _NON_ROOT),
    IntRange(SHARES_MIN, SHARES_MAX),
    to_v2=lambda shares: str(shares_to_weight(shares)),
    from_v2=weight_to_shares,
)
CPU_CFS_QUOTA = CgroupFile(
    "cpu_cfs_quota",
    "CFS bandwidth quota in µs per period; -1 = unlimited",
    FileVersion("cpu.cfs_quota_us", _INT, "cpu"),
    FileVersion("cpu.max", FileKind.CPU_MAX, "cpu", _NON_ROOT, index=0),
    IntRange(1000, CFS_QUOTA_MAX_US, unlimited=True),
    to_v2=to_v2_max,
)
CPU_CFS_PERIOD = CgroupFile(
    "cpu_cfs_period",
    "CFS bandwidth period in µs (1 ms..1 s)",
    FileVersion("cpu.cfs_period_us", _INT, "cpu"),
    FileVersion(
        "cpu.max",
        FileKind.CPU_MAX,
        "cpu",
        _NON_ROOT,
        index=1,
        write_note="write cpu.max as '<quota|max> <period>' (validators.format_cpu_max)",
    ),
    IntRange(1000, 1_000_000),
)
CPU_CFS_BURST = CgroupFile(
    "cpu_cfs_burst",
    "CFS burst in µs (kernel >= 5.14); v2 cpu.max.burst must not exceed the quota (#2778)",
    FileVersion("cpu.cfs_burst_us", _INT, "cpu"),
    FileVersion("cpu.max.burst", _INT, "cpu", _NON_ROOT),
    IntRange(0, 100 * 10 * 100_000),
    optional=True,
)
CPU_IDLE = _bool_file(
    "cpu_idle",
    FileVersion("cpu.idle", _INT, "cpu"),
    FileVersion("cpu.idle", _INT, "cpu", _NON_ROOT),
    "SCHED_IDLE for the whole cgroup (kernel >= 5.15): coresched's schedIdle",
)
CPU_BVT_WARP_NS = CgroupFile(
    "cpu_bvt_warp_ns",
    "group identity (-1 BE .. 2 LS): groupidentity hook",
    FileVersion("cpu.bvt_warp_ns", _INT, "cpu", anolis_only=True),
    FileVersion("cpu.bvt_warp_ns", _INT, "cpu", _NON_ROOT, anolis_only=True),
    IntRange(-1, 2),
    optional=True,
)
CPUACCT_USAGE = CgroupFile(
    "cpuacct_usage",
    "cumulative CPU time in ns (v2: cpu.stat usage_usec * 1000)",
    FileVersion("cpuacct.usage", _INT, "cpuacct"),
    FileVersion("cpu.stat", _KV, fields=(Field("usage_ns", "usage_usec", 1000),)),
)
CPU_STAT = CgroupFile(
    "cpu_stat",
    "CFS throttling counters: nr_periods, nr_throttled, throttled_ns",
    FileVersion(
        "cpu.stat",
        _KV,
        "cpu",
        fields=(
            Field("nr_periods", "nr_periods"),
            Field("nr_throttled", "nr_throttled"),
            Field("throttled_ns", "throttled_time"),
        ),
    ),
    FileVersion(
        "cpu.stat",
        _KV,
        "cpu",
        _NON_ROOT,
        fields=(
            Field("nr_periods", "nr_periods"),
            Field("nr_throttled", "nr_throttled"),
            Field("throttled_ns", "throttled_usec", 1000),
        ),
    ),
)


def _cpuset_list(name: str, doc: str, file_name: str) -> CgroupFile:
    """A writable cpuset list file: the same name in v1 and v2, where the root has none."""
    return CgroupFile(
        name,
        doc,
        FileVersion(file_name, FileKind.CPULIST, "cpuset"),
        FileVersion(file_name, FileKind.CPULIST, "cpuset", _NON_ROOT),
        CpuList(),
    )


CPUSET_CPUS = _cpuset_list(
    "cpuset_cpus", "CPUs a cgroup may run on (leveled writes: parents first when growing)", "cpuset.cpus"
)
CPUSET_MEMS = _cpuset_list("cpuset_mems", "memory nodes a cgroup may allocate from", "cpuset.mems")
CPUSET_CPUS_EFFECTIVE = CgroupFile(
    "cpuset_cpus_effective",
    "CPUs a cgroup actually gets (its cpus masked by its parents')",
    FileVersion("cpuset.effective_cpus", FileKind.CPULIST, "cpuset"),
    FileVersion("cpuset.cpus.effective", FileKind.CPULIST, "cpuset"),
)
MEMORY_LIMIT = CgroupFile(
    "memory_limit",
    "hard memory limit in bytes; -1 = unlimited",
    FileVersion("memory.limit_in_bytes", _INT, "memory"),
    FileVersion("memory.max", _INT, "memory", _NON_ROOT),
    IntRange(0, INT64_MAX, unlimited=True),
    to_v2=to_v2_max,
    from_v1=_v1_unlimited,
)
MEMORY_USAGE = CgroupFile(
    "memory_usage",
    "memory charged to the cgroup in bytes (page cache included)",
    FileVersion("memory.usage_in_bytes", _INT, "memory"),
    FileVersion("memory.current", _INT, "memory", _NON_ROOT),
)
_MEMORY_STAT_KEYS = ("inactive_anon", "active_anon", "unevictable", "inactive_file", "active_file")
MEMORY_STAT = CgroupFile(
    "memory_stat",
    "memory breakdown; pod usage = inactive_anon + active_anon + unevictable",
    # v1's plain keys count this cgroup only; the total_ keys include descendants, as v2's do.
    FileVersion("memory.stat", _KV, "memory", fields=tuple(Field(k, "total_" + k) for k in _MEMORY_STAT_KEYS)),
    FileVersion("memory.stat", _KV, "memory", _NON_ROOT, fields=tuple(Field(k, k) for k in _MEMORY_STAT_KEYS)),
)


def _memory_protection(key: str, name: str, what: str) -> CgroupFile:
    return CgroupFile(
        key,
        what,
        FileVersion(name, _INT, "memory", anolis_only=True),
        FileVersion(name, _INT, "memory", _NON_ROOT),
        IntRange(0, INT64_MAX),
        optional=True,
    )


MEMORY_MIN = _memory_protection("memory_min", "memory.min", "hard memory protection in bytes (leveled)")
MEMORY_LOW = _memory_protection("memory_low", "memory.low", "best-effort memory protection in bytes")
MEMORY_HIGH = _memory_protection("memory_high", "memory.high", "memory throttling threshold in bytes")


def _anolis_memory(key: str, name: str, validator: IntRange, what: str) -> CgroupFile:
    return CgroupFile(
        key,
        what,
        FileVersion(name, _INT, "memory", anolis_only=True),
        FileVersion(name, _INT, "memory", _NON_ROOT, anolis_only=True),
        validator,
        optional=True,
    )


MEMORY_WMARK_RATIO = _anolis_memory(
    "memory_wmark_ratio", "memory.wmark_ratio", IntRange(0, 100), "async reclaim high watermark, % of limit"
)
MEMORY_WMARK_SCALE_FACTOR = _anolis_memory(
    "memory_wmark_scale_factor",
    "memory.wmark_scale_factor",
    IntRange(1, 1000),
    "gap between the high and low watermarks, in 1/10000 of the limit",
)
MEMORY_WMARK_MIN_ADJ = _anolis_memory(
    "memory_wmark_min_adj", "memory.wmark_min_adj", IntRange(-25, 50), "global min watermark adjustment"
)
MEMORY_PRIORITY = _anolis_memory(
    "memory_priority", "memory.priority", IntRange(0, 12), "OOM priority (0 lowest .. 12 highest)"
)
MEMORY_USE_PRIORITY_OOM = _anolis_memory(
    "memory_use_priority_oom", "memory.use_priority_oom", IntRange(0, 1), "kill by memory.priority on OOM"
)
MEMORY_OOM_GROUP = _bool_file(
    "memory_oom_group",
    FileVersion("memory.oom.group", _INT, "memory", anolis_only=True),
    FileVersion("memory.oom.group", _INT, "memory", _NON_ROOT),
    "kill the whole cgroup on OOM",
)


def _throttle(key: str, v1_name: str, io_key: str, what: str) -> CgroupFile:
    return CgroupFile(
        key,
        what,
        FileVersion(v1_name, _RAW, "blkio"),
        FileVersion("io.max", _RAW, "io", _NON_ROOT, fields=(Field(io_key, io_key),)),
        DeviceValue(0),
        to_v2=_io_max(io_key),
    )


BLKIO_READ_BPS = _throttle(
    "blkio_read_bps", "blkio.throttle.read_bps_device", "rbps", "read bytes/s per device; 0 = no limit"
)
BLKIO_WRITE_BPS = _throttle(
    "blkio_write_bps", "blkio.throttle.write_bps_device", "wbps", "write bytes/s per device; 0 = no limit"
)
BLKIO_READ_IOPS = _throttle(
    "blkio_read_iops", "blkio.throttle.read_iops_device", "riops", "read IO/s per device; 0 = no limit"
)
BLKIO_WRITE_IOPS = _throttle(
    "blkio_write_iops", "blkio.throttle.write_iops_device", "wiops", "write IO/s per device; 0 = no limit"
)
BLKIO_COST_WEIGHT = CgroupFile(
    "blkio_cost_weight",
    "iocost weight per device (1..100, Koordinator's ioWeightPercent)",
    FileVersion("blkio.cost.weight", _RAW, "blkio", anolis_only=True),
    FileVersion("io.weight", _RAW, "io", _NON_ROOT),
    DeviceValue(1, 100),
    optional=True,
)
BLKIO_COST_QOS = CgroupFile(
    "blkio_cost_qos",
    "iocost QoS of a device (root cgroup only)",
    FileVersion("blkio.cost.qos", _RAW, "blkio", Placement.ROOT_ONLY, anolis_only=True),
    FileVersion("io.cost.qos", _RAW, "io", Placement.ROOT_ONLY),
    CostQos(),
    optional=True,
)


def _pressure(resource: str) -> CgroupFile:
    name = f"{resource}.pressure"
    return CgroupFile(
        f"{resource}_pressure",
        f"per-cgroup PSI of {resource}",
        # Anolis kernels expose v1 PSI in cpuacct when booted with psi=1 (Koordinator CPUAcct*Pressure).
        FileVersion(name, FileKind.PSI, "cpuacct", anolis_only=True),
        FileVersion(name, FileKind.PSI),
        hierarchy=Hierarchy.UNIFIED,
        optional=True,
    )


CPU_PRESSURE = _pressure("cpu")
MEMORY_PRESSURE = _pressure("memory")
IO_PRESSURE = _pressure("io")


def _pid_list(key: str, what: str, v1_name: str, v2_name: str) -> CgroupFile:
    """A membership file: a list of ids, written one id at a time; on v1 the cpu hierarchy's copy."""
    return CgroupFile(key, what, FileVersion(v1_name, _RAW, "cpu"), FileVersion(v2_name, _RAW),
                      IntRange(1, PID_MAX_LIMIT))


CGROUP_PROCS = _pid_list("cgroup_procs", "processes (thread groups) in the cgroup; write a pid to move a process",
                         "cgroup.procs", "cgroup.procs")
TASKS = _pid_list("tasks", "threads in the cgroup; write a tid to move one thread", "tasks", "cgroup.threads")

NET_CLS_CLASSID = CgroupFile(
    "net_cls_classid",
    "tc class id (0xMMMMmmmm) stamped on the cgroup's packets; v1 only",
    FileVersion("net_cls.classid", _INT, "net_cls"),
    None,
    IntRange(0, 0xFFFFFFFF),
    optional=True,
)

REGISTRY: Mapping[str, CgroupFile] = build_registry(
    [
        CPU_SHARES,
        CPU_CFS_QUOTA,
        CPU_CFS_PERIOD,
        CPU_CFS_BURST,
        CPU_IDLE,
        CPU_BVT_WARP_NS,
        CPUACCT_USAGE,
        CPU_STAT,
        CPUSET_CPUS,
        CPUSET_MEMS,
        CPUSET_CPUS_EFFECTIVE,
        MEMORY_LIMIT,
        MEMORY_USAGE,
        MEMORY_STAT,
        MEMORY_MIN,
        MEMORY_LOW,
        MEMORY_HIGH,
        MEMORY_WMARK_RATIO,
        MEMORY_WMARK_SCALE_FACTOR,
        MEMORY_WMARK_MIN_ADJ,
        MEMORY_PRIORITY,
        MEMORY_USE_PRIORITY_OOM,
        MEMORY_OOM_GROUP,
        BLKIO_READ_BPS,
        BLKIO_WRITE_BPS,
        BLKIO_READ_IOPS,
        BLKIO_WRITE_IOPS,
        BLKIO_COST_WEIGHT,
        BLKIO_COST_QOS,
        CPU_PRESSURE,
        MEMORY_PRESSURE,
        IO_PRESSURE,
        CGROUP_PROCS,
        TASKS,
        NET_CLS_CLASSID,
    ]
)
"""Every known cgroup resource by key."""
