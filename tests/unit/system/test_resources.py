"""cgroup file descriptors: registry, paths per mode, support checks, write formatting, read decoding."""

from __future__ import annotations

import pytest

from koordlet import native
from koordlet.errors import ConfigError, ParseError, Unsupported
from koordlet.system import REGISTRY, CgroupFile, FileKind, FileVersion, InvalidValue, build_registry
from koordlet.system import resources as r
from tests.fixtures.fakehost import FakeHost

POD = "kubepods/besteffort/pod1"


def version_of(host: FakeHost) -> int:
    return 2 if host.mode == "v2" else 1


# ---------------------------------------------------------------------------------------- registry


def test_registry_holds_every_strategy_file_once() -> None:
    expected = {
        "cpu_shares", "cpu_cfs_quota", "cpu_cfs_period", "cpu_cfs_burst", "cpu_idle", "cpu_bvt_warp_ns",
        "cpuacct_usage", "cpu_stat", "cpuset_cpus", "cpuset_mems", "cpuset_cpus_effective",
        "memory_limit", "memory_usage", "memory_stat", "memory_min", "memory_low", "memory_high",
        "memory_wmark_ratio", "memory_wmark_scale_factor", "memory_wmark_min_adj", "memory_priority",
        "memory_use_priority_oom", "memory_oom_group", "blkio_read_bps", "blkio_write_bps",
        "blkio_read_iops", "blkio_write_iops", "blkio_cost_weight", "blkio_cost_qos",
        "cpu_pressure", "memory_pressure", "io_pressure", "cgroup_procs", "tasks", "net_cls_classid",
    }  # fmt: skip
    assert set(REGISTRY) == expected
    assert all(key == f.key for key, f in REGISTRY.items())
    with pytest.raises(TypeError):
        REGISTRY["x"] = r.CPU_SHARES  # type: ignore[index]


def test_duplicate_key_raises() -> None:
    with pytest.raises(ConfigError, match="duplicate cgroup file key 'cpu_shares'"):
        build_registry([r.CPU_SHARES, r.CPU_IDLE, r.CPU_SHARES])


def test_descriptor_needs_a_file_and_a_v1_subsystem() -> None:
    with pytest.raises(ConfigError, match="has neither a v1 nor a v2 file"):
        CgroupFile("x", "nothing", None, None)
    with pytest.raises(ConfigError, match=r"its v1 file x\.y needs a subsystem"):
        CgroupFile("x", "no subsystem", FileVersion("x.y", FileKind.INT), None)


def test_file_kinds_are_the_c_cores() -> None:
    assert {k.name: k.value for k in FileKind} == {k.name: k.value for k in native.Kind}


def test_v1_and_v2_names_follow_koordinator() -> None:
    renames = {key: (f.v1.name if f.v1 else None, f.v2.name if f.v2 else None) for key, f in REGISTRY.items()}
    assert renames["cpu_shares"] == ("cpu.shares", "cpu.weight")
    assert renames["cpu_cfs_quota"] == ("cpu.cfs_quota_us", "cpu.max")
    assert renames["cpu_cfs_burst"] == ("cpu.cfs_burst_us", "cpu.max.burst")
    assert renames["cpuacct_usage"] == ("cpuacct.usage", "cpu.stat")
    assert renames["memory_limit"] == ("memory.limit_in_bytes", "memory.max")
    assert renames["memory_usage"] == ("memory.usage_in_bytes", "memory.current")
    assert renames["tasks"] == ("tasks", "cgroup.threads")
    assert renames["blkio_read_bps"] == ("blkio.throttle.read_bps_device", "io.max")
    assert renames["net_cls_classid"] == ("net_cls.classid", None)


# ---------------------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    ("resource", "v1", "v2"),
    [
        (r.CPU_SHARES, f"cpu/{POD}/cpu.shares", f"{POD}/cpu.weight"),
        (r.CPU_CFS_QUOTA, f"cpu/{POD}/cpu.cfs_quota_us", f"{POD}/cpu.max"),
        (r.CPUACCT_USAGE, f"cpuacct/{POD}/cpuacct.usage", f"{POD}/cpu.stat"),
        (r.CPUSET_CPUS, f"cpuset/{POD}/cpuset.cpus", f"{POD}/cpuset.cpus"),
        (r.MEMORY_LIMIT, f"memory/{POD}/memory.limit_in_bytes", f"{POD}/memory.max"),
        (r.BLKIO_WRITE_IOPS, f"blkio/{POD}/blkio.throttle.write_iops_device", f"{POD}/io.max"),
        (r.CGROUP_PROCS, f"cpu/{POD}/cgroup.procs", f"{POD}/cgroup.procs"),
        (r.TASKS, f"cpu/{POD}/tasks", f"{POD}/cgroup.threads"),
        (r.CPU_PRESSURE, f"cpuacct/{POD}/cpu.pressure", f"{POD}/cpu.pressure"),
    ],
)
def test_paths_per_mode(fake_cgroup_host: FakeHost, resource: CgroupFile, v1: str, v2: str) -> None:
    layout = fake_cgroup_host.layout()
    expected = v2 if fake_cgroup_host.mode == "v2" else v1
    assert resource.path(layout, POD) == f"{fake_cgroup_host.paths.cgroup_root}/{expected}"
    assert resource.path(layout, f"/{POD}/") == resource.path(layout, POD)
    assert resource.spec_for(layout).name == expected.rsplit("/", 1)[1]


def test_hybrid_reads_pressure_from_unified_and_controls_from_v1(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")
    layout = fake_host.layout()
    root = fake_host.paths.cgroup_root
    assert r.CPU_PRESSURE.path(layout, POD) == f"{root}/unified/{POD}/cpu.pressure"
    assert r.CPU_PRESSURE.version(layout) == 2
    assert r.CPU_SHARES.path(layout, POD) == f"{root}/cpu/{POD}/cpu.shares"
    assert r.CPUACCT_USAGE.path(layout, POD) == f"{root}/cpuacct/{POD}/cpuacct.usage"
    assert r.CPU_SHARES.version(layout) == 1


def test_path_refuses_to_climb_out(fake_cgroup_host: FakeHost) -> None:
    with pytest.raises(ParseError, match=r"must not contain '\.\.'"):
        r.CPU_SHARES.path(fake_cgroup_host.layout(), "kubepods/../../..")


def test_v1_only_file_on_v2_is_unsupported(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    layout = fake_host.layout()
    with pytest.raises(Unsupported, match="net_cls_classid has no cgroup v2 file"):
        r.NET_CLS_CLASSID.path(layout, POD)
    support = r.NET_CLS_CLASSID.supported(layout)
    assert not support and "has no cgroup v2 file" in support.reason


# ---------------------------------------------------------------------------------------- support


def test_common_files_are_supported(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(POD)
    layout = fake_cgroup_host.layout()
    for resource in (
        r.CPU_SHARES,
        r.CPU_CFS_QUOTA,
        r.CPUSET_CPUS,
        r.MEMORY_LIMIT,
        r.MEMORY_STAT,
        r.CPU_STAT,
        r.CPUACCT_USAGE,
        r.CGROUP_PROCS,
        r.TASKS,
        r.BLKIO_READ_BPS,
        r.CPU_CFS_BURST,
        r.CPU_IDLE,
    ):
        support = resource.supported(layout, POD)
        assert support, f"{resource.key}: {support.reason}"
        assert support.reason.startswith(f"{resource.spec_for(layout).name} present in ")


def test_anolis_files_are_unsupported_unless_the_kernel_has_them(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    anolis = [
        r.CPU_BVT_WARP_NS,
        r.MEMORY_WMARK_RATIO,
        r.MEMORY_WMARK_SCALE_FACTOR,
        r.MEMORY_WMARK_MIN_ADJ,
        r.MEMORY_PRIORITY,
        r.MEMORY_USE_PRIORITY_OOM,
    ]
    if host.mode == "v1":
        anolis += [r.MEMORY_MIN, r.MEMORY_LOW, r.MEMORY_HIGH, r.MEMORY_OOM_GROUP, r.BLKIO_COST_WEIGHT]
    for resource in anolis:
        support = resource.supported(host.layout(), POD)
        assert not support
        assert support.reason.endswith("(a file of Alibaba Cloud Linux / Anolis kernels)"), support.reason
    host.set_mode(host.mode, features={"anolis"})
    host.mkdir_cgroup(POD)
    for resource in anolis:
        assert resource.supported(host.layout(), POD), resource.key


def test_v2_memory_protection_is_standard(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    fake_host.mkdir_cgroup(POD)
    for resource in (r.MEMORY_MIN, r.MEMORY_LOW, r.MEMORY_HIGH, r.MEMORY_OOM_GROUP):
        assert resource.supported(fake_host.layout(), POD)


def test_missing_optional_feature_is_unsupported(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.set_mode(host.mode, features=())
    host.mkdir_cgroup(POD)
    for resource in (r.CPU_CFS_BURST, r.CPU_IDLE):
        support = resource.supported(host.layout(), POD)
        assert not support
        assert (
            support.reason
            == f"{resource.spec_for(host.layout()).name} absent from {resource.directory(host.layout(), POD)}"
        )


def test_v2_root_lacks_controller_files_so_a_child_is_checked(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    layout = fake_host.layout()
    support = r.CPU_SHARES.supported(layout)
    assert not support
    root = fake_host.paths.cgroup_root
    assert (
        support.reason == f"cpu.weight exists only below the root and no child cgroup of {root} has the cpu controller"
    )
    fake_host.mkdir_cgroup("system.slice")
    support = r.CPU_SHARES.supported(layout)
    assert support and support.reason == f"cpu.weight present in {fake_host.paths.cgroup_root}/system.slice"


def test_v2_controller_not_enabled(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2", controllers=("cpu", "pids"))
    fake_host.mkdir_cgroup(POD)
    support = r.MEMORY_LIMIT.supported(fake_host.layout(), POD)
    assert not support
    assert support.reason == (
        f"memory.max needs the memory controller, absent from {fake_host.paths.cgroup_root}/cgroup.controllers "
        "(lists: cpu pids)"
    )


def test_hybrid_unified_lacks_controllers_but_has_pressure(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")
    fake_host.mkdir_cgroup(POD)
    layout = fake_host.layout()
    assert r.MEMORY_PRESSURE.supported(layout, POD)
    assert r.MEMORY_PRESSURE.supported(layout)
    assert r.MEMORY_LIMIT.supported(layout, POD)  # v1 memory controller


def test_v1_pressure_is_anolis_only(fake_host: FakeHost) -> None:
    support = r.IO_PRESSURE.supported(fake_host.layout())
    assert not support and "io.pressure absent from" in support.reason and "Anolis" in support.reason


def test_missing_directory_is_reported(fake_cgroup_host: FakeHost) -> None:
    support = r.CPU_SHARES.supported(fake_cgroup_host.layout(), "kubepods/nope")
    assert not support and support.reason.endswith("kubepods/nope does not exist")


def test_root_only_file_is_checked_at_the_root(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.set_mode(host.mode, features={"anolis", "iocost"})
    host.mkdir_cgroup(POD)
    support = r.BLKIO_COST_QOS.supported(host.layout(), POD)
    assert support
    assert support.reason.endswith(f"present in {r.BLKIO_COST_QOS.hierarchy_root(host.layout())}")


# ---------------------------------------------------------------------------------------- writes


@pytest.mark.parametrize(
    ("resource", "value", "v1", "v2"),
    [
        (r.CPU_SHARES, 1024, "1024", "39"),
        (r.CPU_SHARES, "2", "2", "1"),
        (r.CPU_CFS_QUOTA, -1, "-1", "max"),
        (r.CPU_CFS_QUOTA, "max", "-1", "max"),
        (r.CPU_CFS_QUOTA, 20000, "20000", "20000"),
        (r.CPU_CFS_BURST, 0, "0", "0"),
        (r.CPU_BVT_WARP_NS, -1, "-1", "-1"),
        (r.CPUSET_CPUS, "3,0-2", "0-3", "0-3"),
        (r.MEMORY_LIMIT, -1, "-1", "max"),
        (r.MEMORY_LIMIT, 1 << 30, str(1 << 30), str(1 << 30)),
        (r.MEMORY_WMARK_MIN_ADJ, -25, "-25", "-25"),
        (r.BLKIO_READ_BPS, "8:0 1048576", "8:0 1048576", "8:0 rbps=1048576"),
        (r.BLKIO_WRITE_IOPS, "8:0 0", "8:0 0", "8:0 wiops=max"),
        (r.CGROUP_PROCS, 4242, "4242", "4242"),
        (r.NET_CLS_CLASSID, 0x10002, "65538", None),
    ],
)
def test_format_per_version(resource: CgroupFile, value: object, v1: str, v2: str | None) -> None:
    assert resource.format(value, 1) == v1
    if v2 is None:
        with pytest.raises(Unsupported):
            resource.format(value, 2)
    else:
        assert resource.format(value, 2) == v2


@pytest.mark.parametrize(
    ("resource", "value", "message"),
    [
        (
            r.CPU_SHARES,
            1,
            r"invalid value 1 for cpu.shares \(cpu_shares\): out of range: expected an integer in 2\.\.262144",
        ),
        (r.CPU_CFS_QUOTA, 999, r"invalid value 999 for cpu.cfs_quota_us .*or -1 \(unlimited\)"),
        (r.CPU_CFS_QUOTA, 1 << 44, r"invalid value 17592186044416 for cpu.cfs_quota_us"),
        (r.CPU_CFS_PERIOD, 2_000_000, r"invalid value 2000000 for cpu.cfs_period_us .*1000\.\.1000000"),
        (r.CPU_BVT_WARP_NS, 3, r"invalid value 3 for cpu.bvt_warp_ns .*-1\.\.2"),
        (r.CPU_IDLE, True, r"invalid value True for cpu.idle .*expected an integer in 0\.\.1"),
        (r.CPUSET_CPUS, "0-", r"invalid value '0-' for cpuset.cpus .*bad list element '0-'"),
        (r.CPUSET_MEMS, "", r"invalid value '' for cpuset.mems .*empty list"),
        (r.MEMORY_MIN, -1, r"invalid value -1 for memory.min"),
        (r.MEMORY_WMARK_RATIO, 101, r"invalid value 101 for memory.wmark_ratio"),
        (r.MEMORY_PRIORITY, "high", r"invalid value 'high' for memory.priority"),
        (r.BLKIO_COST_WEIGHT, "8:0 0", r"invalid value '8:0 0' for blkio.cost.weight .*value 0 out of range 1\.\.100"),
        (r.CGROUP_PROCS, 0, r"invalid value 0 for cgroup.procs"),
        (r.NET_CLS_CLASSID, 1 << 32, r"invalid value 4294967296 for net_cls.classid"),
    ],
)
def test_bad_writes_name_file_and_value(resource: CgroupFile, value: object, message: str) -> None:
    with pytest.raises(InvalidValue, match=message):
        resource.format(value, 1)
    with pytest.raises(InvalidValue, match=message):
        resource.validate(value)
    with pytest.raises(ValueError):  # InvalidValue is a ConfigError, so a ValueError
        resource.format(value, 1)


def test_v2_errors_name_the_v2_file() -> None:
    with pytest.raises(InvalidValue, match=r"invalid value 1 for cpu.weight \(cpu_shares\)"):
        r.CPU_SHARES.format(1, 2)


def test_read_only_and_composite_files_refuse_writes() -> None:
    with pytest.raises(InvalidValue, match=r"memory.current is read-only \(memory_usage\); refusing to write 5"):
        r.MEMORY_USAGE.format(5, 2)
    with pytest.raises(InvalidValue, match="read-only"):
        r.CPU_PRESSURE.validate("x")
    with pytest.raises(
        InvalidValue, match=r"cpu.max cannot take cpu_cfs_period alone: write cpu.max as '<quota\|max> <period>'"
    ):
        r.CPU_CFS_PERIOD.format(100000, 2)
    assert r.CPU_CFS_PERIOD.format(100000, 1) == "100000"


# ---------------------------------------------------------------------------------------- reads


def test_decode_ints_and_conversions() -> None:
    assert r.CPU_SHARES.decode(1024, 1) == 1024
    assert r.CPU_SHARES.decode(39, 2) == 998  # weight 39 back to shares (lossy, as in kubelet)
    assert r.CPU_SHARES.decode(10000, 2) == 262144
    assert r.MEMORY_LIMIT.decode(9223372036854771712, 1) == -1  # v1 "unlimited", 4 KiB pages
    assert r.MEMORY_LIMIT.decode(9223372036854710272, 1) == -1  # 64 KiB pages
    assert r.MEMORY_LIMIT.decode(1 << 30, 1) == 1 << 30
    assert r.MEMORY_LIMIT.decode(-1, 2) == -1  # the C core reads "max" as -1
    assert r.CPU_CFS_QUOTA.decode((-1, 100000), 2) == -1
    assert r.CPU_CFS_QUOTA.decode((50000, 100000), 2) == 50000
    assert r.CPU_CFS_PERIOD.decode((50000, 100000), 2) == 100000
    assert r.CPUSET_CPUS.decode([0, 1], 2) == [0, 1]


def test_decode_keyed_files_to_canonical_names() -> None:
    assert r.CPUACCT_USAGE.decode(123456, 1) == 123456
    assert r.CPUACCT_USAGE.decode({"usage_usec": 123}, 2) == 123000
    assert r.CPU_STAT.decode({"nr_periods": 10, "nr_throttled": 3, "throttled_time": 500, "nr_bursts": 0}, 1) == {
        "nr_periods": 10,
        "nr_throttled": 3,
        "throttled_ns": 500,
    }
    assert r.CPU_STAT.decode({"nr_periods": 10, "nr_throttled": 3, "throttled_usec": 5}, 2) == {
        "nr_periods": 10,
        "nr_throttled": 3,
        "throttled_ns": 5000,
    }
    v1_stat = {
        f"total_{k}": i
        for i, k in enumerate(("inactive_anon", "active_anon", "unevictable", "inactive_file", "active_file"))
    }
    assert r.MEMORY_STAT.decode({**v1_stat, "inactive_anon": 99}, 1) == {
        "inactive_anon": 0,
        "active_anon": 1,
        "unevictable": 2,
        "inactive_file": 3,
        "active_file": 4,
    }
    assert r.MEMORY_STAT.spec(1).keys() == tuple(v1_stat)


def test_decode_missing_key_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"cpu.stat: key 'throttled_usec' missing \(have: nr_periods, nr_throttled\)"):
        r.CPU_STAT.decode({"nr_periods": 1, "nr_throttled": 0}, 2)
    with pytest.raises(ParseError, match=r"key 'usage_usec' missing \(have: nothing\)"):
        r.CPUACCT_USAGE.decode({}, 2)


def _read(path: str, resource: CgroupFile, version: int) -> object:
    spec = resource.spec(version)
    readers = {
        FileKind.INT: native.read_int,
        FileKind.CPU_MAX: native.read_cpu_max,
        FileKind.CPULIST: native.read_cpulist,
        FileKind.PSI: native.read_psi,
    }
    raw = native.read_kv(path, spec.keys()) if spec.kind is FileKind.KV else readers[spec.kind](path)
    return resource.decode(raw, version)


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        (r.MEMORY_LIMIT, -1, -1),
        (r.MEMORY_LIMIT, 268435456, 268435456),
        (r.CPUSET_CPUS, "1-2", [1, 2]),
        (r.CPU_IDLE, 1, 1),
        (r.CPU_CFS_BURST, 50000, 50000),
        (r.CPU_BVT_WARP_NS, -1, -1),
        (r.MEMORY_WMARK_RATIO, 95, 95),
        (r.CPU_SHARES, 262144, 262144),
    ],
)
def test_written_text_reads_back_through_the_c_core(
    fake_cgroup_host: FakeHost, resource: CgroupFile, value: object, expected: object
) -> None:
    host = fake_cgroup_host
    host.set_mode(host.mode, features={"cfs_burst", "cpu_idle", "anolis"})
    host.mkdir_cgroup(POD)
    layout = host.layout()
    version = resource.version(layout)
    path = resource.path(layout, POD)
    host.write_cgroup(POD, resource, resource.format(value, version) + "\n")
    assert _read(path, resource, version) == expected


def test_default_fake_files_decode(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    layout = host.layout()
    for resource, expected in (
        (r.MEMORY_LIMIT, -1),
        (r.CPU_CFS_QUOTA, -1),
        (r.CPUACCT_USAGE, 0),
        (r.CPU_STAT, {"nr_periods": 0, "nr_throttled": 0, "throttled_ns": 0}),
        (r.CPU_SHARES, 1024 if host.mode == "v1" else 2597),  # weight 100 -> (99 * 262142 // 9999) + 2
    ):
        assert _read(resource.path(layout, POD), resource, resource.version(layout)) == expected, resource.key
