"""Descriptors against the kernel: paths, support, and written values read back, on private cgroups.

Each test works in its own ``koordlet-test-<pid>-<random>`` cgroups (the ``real_cgroups`` fixture), in
the v1 subsystems and in the unified hierarchy, and removes them afterwards.
"""

from __future__ import annotations

import errno
import os
import re

import pytest

from koordlet import native
from koordlet.system import CgroupFile, FileKind, HostPaths, detect_layout, read_node_info
from koordlet.system import resources as r
from koordlet.system.validators import CFS_QUOTA_MAX_US
from tests.fixtures.realcgroup import RealCgroups

pytestmark = pytest.mark.integration

PRESENT = [
    r.CPU_SHARES, r.CPU_CFS_QUOTA, r.CPU_CFS_PERIOD, r.CPU_CFS_BURST, r.CPU_IDLE, r.CPUACCT_USAGE, r.CPU_STAT,
    r.CPUSET_CPUS, r.CPUSET_MEMS, r.CPUSET_CPUS_EFFECTIVE, r.MEMORY_LIMIT, r.MEMORY_USAGE, r.MEMORY_STAT,
    r.CGROUP_PROCS, r.TASKS, r.CPU_PRESSURE, r.MEMORY_PRESSURE, r.IO_PRESSURE,
]  # fmt: skip
ABSENT = [
    r.CPU_BVT_WARP_NS, r.MEMORY_MIN, r.MEMORY_LOW, r.MEMORY_HIGH, r.MEMORY_WMARK_RATIO,
    r.MEMORY_WMARK_SCALE_FACTOR, r.MEMORY_WMARK_MIN_ADJ, r.MEMORY_PRIORITY, r.MEMORY_USE_PRIORITY_OOM,
    r.MEMORY_OOM_GROUP,
]  # fmt: skip


def read_raw(path: str) -> int:
    """Bytes read: RAW files are only checked for readability."""
    count: int = native.read_file(path, native.Kind.RAW)
    return count


def read(resource: CgroupFile, path: str, version: int) -> object:
    spec = resource.spec(version)
    if spec.kind is FileKind.KV:
        return resource.decode(native.read_kv(path, spec.keys()), version)
    reader = {
        FileKind.INT: native.read_int,
        FileKind.CPU_MAX: native.read_cpu_max,
        FileKind.CPULIST: native.read_cpulist,
        FileKind.PSI: native.read_psi,
        FileKind.RAW: read_raw,
    }[spec.kind]
    return resource.decode(reader(path), version)


def write(resource: CgroupFile, path: str, value: object, version: int) -> None:
    with open(path, "w") as f:
        f.write(resource.format(value, version))


@pytest.mark.parametrize("resource", PRESENT, ids=lambda f: f.key)
def test_files_exist_where_the_descriptors_say(real_cgroups: RealCgroups, resource: CgroupFile) -> None:
    layout = detect_layout(HostPaths())
    support = resource.supported(layout, real_cgroups.name)
    assert support, support.reason
    path = resource.path(layout, real_cgroups.name)
    assert os.path.isfile(path)
    expected_root = "/sys/fs/cgroup/unified" if resource.key.endswith("_pressure") else "/sys/fs/cgroup/"
    assert path.startswith(expected_root)
    read(resource, path, resource.version(layout))  # parses with the kind the descriptor names


@pytest.mark.parametrize("resource", ABSENT, ids=lambda f: f.key)
def test_anolis_files_are_absent_in_a_real_cgroup(real_cgroups: RealCgroups, resource: CgroupFile) -> None:
    support = resource.supported(detect_layout(HostPaths()), real_cgroups.name)
    assert not support
    assert support.reason.endswith("(a file of Alibaba Cloud Linux / Anolis kernels)")


@pytest.mark.parametrize(
    ("resource", "values", "expected"),
    [
        (r.CPU_SHARES, [512], 512),
        (r.CPU_CFS_QUOTA, [20000], 20000),
        (r.CPU_CFS_QUOTA, [20000, -1], -1),
        (r.CPU_CFS_PERIOD, [50000], 50000),
        (r.CPU_IDLE, [1], 1),
        (r.CPUSET_CPUS, ["0"], [0]),
        (r.MEMORY_LIMIT, [64 << 20], 64 << 20),
        (r.MEMORY_LIMIT, [64 << 20, -1], -1),  # v1 takes -1 and reads back page-rounded LONG_MAX
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_written_values_read_back_canonical(
    real_cgroups: RealCgroups, resource: CgroupFile, values: list[object], expected: object
) -> None:
    layout = detect_layout(HostPaths())
    path = resource.path(layout, real_cgroups.name)
    version = resource.version(layout)
    for value in values:
        write(resource, path, value, version)
    assert read(resource, path, version) == expected


def test_burst_after_quota(real_cgroups: RealCgroups) -> None:
    layout = detect_layout(HostPaths())
    write(r.CPU_CFS_QUOTA, r.CPU_CFS_QUOTA.path(layout, real_cgroups.name), 50000, 1)
    path = r.CPU_CFS_BURST.path(layout, real_cgroups.name)
    write(r.CPU_CFS_BURST, path, 30000, 1)
    assert read(r.CPU_CFS_BURST, path, 1) == 30000


@pytest.mark.parametrize(
    ("resource", "accepted", "refused"),
    [
        (r.CPU_CFS_QUOTA, [1000, CFS_QUOTA_MAX_US], [999, CFS_QUOTA_MAX_US + 1]),
        (r.CPU_CFS_PERIOD, [1000, 1_000_000], [999, 1_000_001]),
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_validator_bounds_are_the_kernels(
    real_cgroups: RealCgroups, resource: CgroupFile, accepted: list[int], refused: list[int]
) -> None:
    path = resource.path(detect_layout(HostPaths()), real_cgroups.name)
    for value in accepted:
        write(resource, path, value, 1)
    for value in refused:
        with pytest.raises(ValueError):
            resource.format(value, 1)
        with pytest.raises(OSError) as info, open(path, "w") as f:
            f.write(str(value))
        assert info.value.errno == errno.EINVAL


def test_pressure_of_a_private_cgroup_reads_through_unified(real_cgroups: RealCgroups) -> None:
    layout = detect_layout(HostPaths())
    pid = real_cgroups.spawn("", "import signal; signal.pause()")
    try:
        psi = read(r.CPU_PRESSURE, r.CPU_PRESSURE.path(layout, real_cgroups.name), 2)
        assert psi.some.total_us >= 0  # type: ignore[attr-defined]
        with open(r.CGROUP_PROCS.path(layout, real_cgroups.name)) as f:
            assert str(pid) in f.read().split()
        with open(os.path.join(layout.unified_dir(real_cgroups.name), "cgroup.procs")) as f:
            assert str(pid) in f.read().split()
    finally:
        real_cgroups.kill(pid)


def test_node_info_matches_the_host() -> None:
    info = read_node_info(HostPaths())
    assert info.kernel_release == os.uname().release
    assert info.cpu_count == os.cpu_count()
    with open("/proc/meminfo") as f:
        total_kb = int(re.search(r"^MemTotal:\s+(\d+) kB", f.read(), re.M).group(1))  # type: ignore[union-attr]
    assert info.memory_total_bytes == total_kb * 1024
    assert info.cgroup_mode.value == "hybrid"
    assert sorted(c.cpu for c in info.cpus) == list(info.online_cpus)
    assert all(c.numa_node >= 0 for c in info.cpus)
