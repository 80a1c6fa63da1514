"""Descriptors and kubelet's cgroup layouts against the kernel: paths, support, written values read back,
the driver detected and the pods found in kubepods trees of both drivers, on private cgroups.

Each test works in its own ``koordlet-test-<pid>-<random>`` cgroups (the ``real_cgroups`` fixture): in the
v1 subsystems and the unified hierarchy on the hybrid host, in the one v2 hierarchy in the guest.  The
private prefix stands for kubelet's ``--cgroup-root``, so the real kubepods tree of the host is never read.
"""

from __future__ import annotations

import errno
import os
import re
import uuid

import pytest

from koordlet import native
from koordlet.statesinformer.standalone import scan_kubepods
from koordlet.system import CgroupFile, FileKind, HostPaths, detect_layout, read_node_info
from koordlet.system import resources as r
from koordlet.system.cgroupfile import InvalidValue
from koordlet.system.kubepaths import (
    CgroupDriver,
    KubeQoS,
    cgroup_parent_dir,
    container_dir,
    detect_driver,
    pod_dir,
    pod_dir_name,
    qos_dir,
    under_parent,
)
from koordlet.system.validators import CFS_QUOTA_MAX_US, format_cpu_max
from tests.fixtures.realcgroup import RealCgroups

pytestmark = pytest.mark.integration

PRESENT = [
    r.CPU_SHARES, r.CPU_CFS_QUOTA, r.CPU_CFS_PERIOD, r.CPU_CFS_BURST, r.CPU_IDLE, r.CPUACCT_USAGE, r.CPU_STAT,
    r.CPUSET_CPUS, r.CPUSET_MEMS, r.CPUSET_CPUS_EFFECTIVE, r.MEMORY_LIMIT, r.MEMORY_USAGE, r.MEMORY_STAT,
    r.CGROUP_PROCS, r.TASKS, r.CPU_PRESSURE, r.MEMORY_PRESSURE, r.IO_PRESSURE,
]  # fmt: skip
# Files of Alibaba Cloud Linux / Anolis kernels; memory.min/low/high/oom.group are upstream in v2 only.
VENDOR = [
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
    version = resource.version(layout)
    spec = resource.spec(version)
    # Hybrid: controller files in their v1 subsystem, PSI only in unified; v2: all in the one hierarchy.
    hierarchy = "unified" if version == 2 else spec.subsystem
    assert hierarchy is not None
    assert path == str(real_cgroups.path(hierarchy) / spec.name)
    assert os.path.isfile(path)
    read(resource, path, version)  # parses with the kind the descriptor names


@pytest.mark.parametrize("resource", VENDOR, ids=lambda f: f.key)
def test_vendor_files_exist_only_where_upstream_has_them(real_cgroups: RealCgroups, resource: CgroupFile) -> None:
    layout = detect_layout(HostPaths())
    support = resource.supported(layout, real_cgroups.name)
    if resource.spec_for(layout).anolis_only:
        assert not support
        assert support.reason.endswith("(a file of Alibaba Cloud Linux / Anolis kernels)")
    else:
        assert real_cgroups.version == 2
        assert support, support.reason
        read(resource, resource.path(layout, real_cgroups.name), 2)


@pytest.mark.parametrize(
    ("resource", "values", "expected_v1", "expected_v2"),
    [
        # v2: kubelet's mapping writes cpu.weight 1 + (512 - 2) * 9999 // 262142 = 20, read back as shares
        # 2 + (20 - 1) * 262142 // 9999 = 500: the round trip loses what weight's coarser scale cannot hold.
        (r.CPU_SHARES, [512], 512, 500),
        (r.CPU_CFS_QUOTA, [20000], 20000, 20000),
        (r.CPU_CFS_QUOTA, [20000, -1], -1, -1),  # v2 writes "max"
        (r.CPU_CFS_PERIOD, [50000], 50000, InvalidValue),  # v2: the period is half of cpu.max, written with it
        (r.CPU_IDLE, [1], 1, 1),
        (r.CPUSET_CPUS, ["0"], [0], [0]),
        (r.MEMORY_LIMIT, [64 << 20], 64 << 20, 64 << 20),
        (r.MEMORY_LIMIT, [64 << 20, -1], -1, -1),  # v1 takes -1 and reads back page-rounded LONG_MAX; v2 "max"
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_written_values_read_back_canonical(
    real_cgroups: RealCgroups, resource: CgroupFile, values: list[object], expected_v1: object, expected_v2: object
) -> None:
    layout = detect_layout(HostPaths())
    path = resource.path(layout, real_cgroups.name)
    version = resource.version(layout)
    expected = expected_v1 if version == 1 else expected_v2
    if expected is InvalidValue:
        with pytest.raises(InvalidValue):
            resource.format(values[0], version)
        return
    for value in values:
        write(resource, path, value, version)
    assert read(resource, path, version) == expected
    if resource is r.CPU_SHARES:
        assert real_cgroups.cpu_shares() == expected  # the kernel's file, decoded without the descriptor


def test_burst_after_quota(real_cgroups: RealCgroups) -> None:
    layout = detect_layout(HostPaths())
    version = r.CPU_CFS_BURST.version(layout)
    write(r.CPU_CFS_QUOTA, r.CPU_CFS_QUOTA.path(layout, real_cgroups.name), 50000, version)
    path = r.CPU_CFS_BURST.path(layout, real_cgroups.name)
    write(r.CPU_CFS_BURST, path, 30000, version)
    assert read(r.CPU_CFS_BURST, path, version) == 30000
    assert real_cgroups.cpu_quota() == (50000, 100_000)


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
    layout = detect_layout(HostPaths())
    path = resource.path(layout, real_cgroups.name)
    version = resource.version(layout)

    def text(value: int) -> str:
        # v2 keeps quota and period in one cpu.max: a period goes in with an unlimited quota.
        if version == 2 and resource is r.CPU_CFS_PERIOD:
            return format_cpu_max(-1, value)
        return str(value)

    for value in accepted:
        with open(path, "w") as f:
            f.write(text(value))
        assert read(resource, path, version) == value
    for value in refused:
        with pytest.raises(ValueError):
            resource.validate(value)
        with pytest.raises(OSError) as info, open(path, "w") as f:
            f.write(text(value))
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


def test_node_info_matches_the_host(cgroup_version: int) -> None:
    info = read_node_info(HostPaths(), native)
    assert info.kernel_release == os.uname().release
    assert info.cpu_count == os.cpu_count()
    with open("/proc/meminfo") as f:
        total_kb = int(re.search(r"^MemTotal:\s+(\d+) kB", f.read(), re.M).group(1))  # type: ignore[union-attr]
    assert info.memory_total_bytes == total_kb * 1024
    assert info.cgroup_mode.value == ("hybrid" if cgroup_version == 1 else "v2")  # the host boots hybrid
    assert sorted(c.cpu for c in info.cpus) == list(info.online_cpus)
    assert all(c.numa_node >= 0 for c in info.cpus)


@pytest.mark.parametrize("driver", list(CgroupDriver), ids=lambda d: d.value)
def test_kubepods_tree_of_either_driver_is_found(real_cgroups: RealCgroups, driver: CgroupDriver) -> None:
    """kubelet's QoS/pod/container directories as each driver names them (cgroupfs ``kubepods/besteffort/
    pod<uid>/<id>``, systemd ``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/
    cri-containerd-<id>.scope``) give the driver, the pods with their QoS and containers, and directories
    whose cgroup files are the kernel's for the tasks inside."""
    layout = detect_layout(HostPaths())
    parent = real_cgroups.name
    assert detect_driver(layout, parent).guessed  # no kubepods yet: Koordinator's default is assumed
    made = {qos: (str(uuid.uuid4()), os.urandom(32).hex()) for qos in KubeQoS}
    for qos, (uid, cid) in made.items():
        real_cgroups.mkdir(container_dir(driver, qos, uid, f"containerd://{cid}"))
        if driver is CgroupDriver.SYSTEMD:  # the CRI cgroup_parent kubelet hands the runtime is one slice name
            assert cgroup_parent_dir(pod_dir_name(driver, qos, uid)) == pod_dir(driver, qos, uid)
    guess = detect_driver(layout, parent)
    assert (guess.driver, guess.guessed) == (driver, False), guess.reason

    found = {p.uid: p for p in scan_kubepods(layout, driver, parent)}
    assert {uid: (p.pod.kube_qos, p.cgroup_dir, [c.container_id for c in p.containers]) for uid, p in found.items()} \
        == {uid: (qos, under_parent(parent, pod_dir(driver, qos, uid)), [cid]) for qos, (uid, cid) in made.items()}
    for qos, (uid, cid) in made.items():
        container = found[uid].containers[0]
        assert container.cgroup_dir == under_parent(parent, container_dir(driver, qos, uid, f"containerd://{cid}"))
        assert found[uid].cgroup_dir.startswith(under_parent(parent, qos_dir(driver, qos)))
        rel = container.cgroup_dir.removeprefix(parent + "/")
        pid = real_cgroups.spawn(rel, "import signal; signal.pause()")
        with open(r.CGROUP_PROCS.path(layout, container.cgroup_dir)) as f:
            assert f.read().split() == [str(pid)]
        quota_version = r.CPU_CFS_QUOTA.version(layout)
        write(r.CPU_CFS_QUOTA, r.CPU_CFS_QUOTA.path(layout, container.cgroup_dir), 20000, quota_version)
        assert real_cgroups.cpu_quota(rel)[0] == 20000
        real_cgroups.kill(pid)
