"""ResourceExecutor against the kernel's own cgroup files, in private ``koordlet-test-*`` cgroups: the v1
hierarchy on the hybrid host, the pure v2 one in the guest (``python -m tests.vm``).

Values are read back from the files the kernel serves, and the expected v2 text is worked out here, not by
the agent's translations (``koordlet/system/validators.py``), so a broken translation fails.  A kernel
refusal (EINVAL, EACCES, EOPNOTSUPP) comes from the kernel itself, not from an injected fault.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import AuditLog, CgroupUpdate, FileWriter, Outcome, ResourceExecutor
from koordlet.system import CgroupFile, HostPaths, detect_layout
from koordlet.system import resources as r
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures.realcgroup import CGROUP_ROOT, SCRATCH_DISK, RealCgroups, disk_of, kubelet_cpu_weight

pytestmark = pytest.mark.integration

MIB = 1 << 20


@dataclass
class CountingWriter:
    """The real writer, counting write attempts per path and keeping their order."""

    real: FileWriter = field(default_factory=FileWriter)
    attempts: dict[str, int] = field(default_factory=dict)
    order: list[tuple[str, str]] = field(default_factory=list)
    """(path, text) of every attempt, in order."""

    def read(self, path: str) -> str:
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        self.attempts[path] = self.attempts.get(path, 0) + 1
        self.order.append((path, text))
        self.real.write(path, text)


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def executor(tmp_path: Path, version: int) -> tuple[ResourceExecutor, CountingWriter, Clock, AuditLog]:
    layout = detect_layout(HostPaths())
    assert layout.controller_version == version, layout.describe()
    writer, clock, audit = CountingWriter(), Clock(), AuditLog(tmp_path / "audit")
    return ResourceExecutor(layout, clock, audit, writer=writer), writer, clock, audit


def read(groups: RealCgroups, subsystem: str, rel: str, name: str) -> str:
    return (groups.path(subsystem, rel) / name).read_text().strip()


def upd(resource: CgroupFile, rel: str, value: object) -> CgroupUpdate:
    return CgroupUpdate(resource, rel, value, "integration test")


def audit_records(audit: AuditLog) -> list[dict[str, object]]:
    with open(audit.path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_cpu_and_memory_values_reach_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    v2 = real_cgroups.version == 2
    ex, _, _, audit = executor(tmp_path, real_cgroups.version)
    rel = real_cgroups.name
    results = ex.apply(
        [upd(r.CPU_CFS_QUOTA, rel, 50_000), upd(r.CPU_SHARES, rel, 512), upd(r.MEMORY_LIMIT, rel, 256 * MIB)]
    )
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 3, [res.error for res in results]
    assert real_cgroups.cpu_quota() == (50_000, 100_000)
    weight_file, weight = ("cpu.weight", kubelet_cpu_weight(512)) if v2 else ("cpu.shares", 512)
    assert read(real_cgroups, "cpu", "", weight_file) == str(weight)
    assert real_cgroups.memory_limit() == 256 * MIB
    results = ex.apply([upd(r.CPU_CFS_QUOTA, rel, -1), upd(r.MEMORY_LIMIT, rel, -1)])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 2, [res.error for res in results]
    assert real_cgroups.cpu_quota() == (-1, 100_000)
    assert real_cgroups.memory_limit() == -1
    if v2:
        assert read(real_cgroups, "cpu", "", "cpu.max") == "max 100000"
        assert read(real_cgroups, "memory", "", "memory.max") == "max"
    records = audit_records(audit)
    # "old" is what the kernel showed before the write, in the file's own text.
    unlimited_quota, default_weight = ("max 100000", "100") if v2 else ("-1", "1024")
    assert [(rec["resource"], rec["old"], rec["new"]) for rec in records[:2]] == [
        ("cpu_cfs_quota", unlimited_quota, "50000"),
        ("cpu_shares", default_weight, str(weight)),
    ]
    assert records[3] == records[3] | {
        "resource": "cpu_cfs_quota", "old": "50000 100000" if v2 else "50000", "new": "max" if v2 else "-1",
        "outcome": "written"}


@pytest.mark.parametrize("shares", [2, 3, 512, 1024, 2048, 262144])
def test_cpu_shares_become_kubelets_cpu_weight(real_cgroups: RealCgroups, tmp_path: Path, shares: int) -> None:
    ex, *_ = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.CPU_SHARES, real_cgroups.name, shares)])
    assert result.outcome is Outcome.WRITTEN, result.error
    if real_cgroups.version == 2:
        assert read(real_cgroups, "cpu", "", "cpu.weight") == str(kubelet_cpu_weight(shares))
        print(f"shares {shares} -> {result.path}: wrote {result.text!r}, kernel holds "
              f"{read(real_cgroups, 'cpu', '', 'cpu.weight')!r}")
    else:
        assert read(real_cgroups, "cpu", "", "cpu.shares") == str(shares)


def test_quota_keeps_the_period_the_kernel_holds(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # v2 has one file for both (cpu.max "<quota> <period>"): the executor writes the quota alone, which
    # the kernel takes as "keep the period" (kernel/sched/core.c cpu_period_quota_parse).
    real_cgroups.set_cpu_quota("", -1, period_us=50_000)
    ex, writer, _, _ = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.CPU_CFS_QUOTA, real_cgroups.name, 20_000)])
    assert result.outcome is Outcome.WRITTEN, result.error
    assert real_cgroups.cpu_quota() == (20_000, 50_000)
    reader = CgroupReader(detect_layout(HostPaths()))
    assert (reader.read("cpu_cfs_quota", real_cgroups.name), reader.read("cpu_cfs_period", real_cgroups.name)) == (
        20_000, 50_000)
    # The period alone: a file of its own in v1; in v2 it cannot be written without a quota, so the
    # executor refuses it before the kernel sees a write.
    (period,) = ex.apply([upd(r.CPU_CFS_PERIOD, real_cgroups.name, 100_000)])
    if real_cgroups.version == 2:
        assert period.outcome is Outcome.INVALID and period.error is not None and "cpu.max" in period.error
        assert real_cgroups.cpu_quota() == (20_000, 50_000)
        assert len(writer.order) == 1
    else:
        assert period.outcome is Outcome.WRITTEN, period.error
        assert real_cgroups.cpu_quota() == (20_000, 100_000)


def test_burst_and_idle_reach_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    burst_file = "cpu.max.burst" if real_cgroups.version == 2 else "cpu.cfs_burst_us"
    real_cgroups.set_cpu_quota("", 50_000)
    ex, *_ = executor(tmp_path, real_cgroups.version)
    rel = real_cgroups.name
    results = ex.apply([upd(r.CPU_CFS_BURST, rel, 20_000), upd(r.CPU_IDLE, rel, 1)])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 2, [res.error for res in results]
    assert (read(real_cgroups, "cpu", "", burst_file), read(real_cgroups, "cpu", "", "cpu.idle")) == ("20000", "1")
    results = ex.apply([upd(r.CPU_CFS_BURST, rel, 0), upd(r.CPU_IDLE, rel, 0)])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 2, [res.error for res in results]
    assert (read(real_cgroups, "cpu", "", burst_file), read(real_cgroups, "cpu", "", "cpu.idle")) == ("0", "0")


def test_cpuset_leveled_shrink_and_grow(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    host_cpus = parse_cpulist((CGROUP_ROOT / "cpuset" / "cpuset.cpus" if real_cgroups.version == 1
                               else CGROUP_ROOT / "cpuset.cpus.effective").read_text())
    assert len(host_cpus) >= 2, "the test host needs two CPUs"
    both, one = format_cpulist(host_cpus[:2]), str(host_cpus[1])
    parent, child = real_cgroups.name, real_cgroups.name + "/child"
    real_cgroups.mkdir("child", subsystems=("cpuset",))
    real_cgroups.write("cpuset", "", "cpuset.cpus", both)
    real_cgroups.write("cpuset", "child", "cpuset.cpus", both)
    parent_file = str(real_cgroups.path("cpuset") / "cpuset.cpus")
    child_file = str(real_cgroups.path("cpuset", "child") / "cpuset.cpus")
    ex, writer, _, _ = executor(tmp_path, real_cgroups.version)

    # Parent listed first: the executor still narrows the child before the parent.
    shrink = ex.apply([upd(r.CPUSET_CPUS, parent, one), upd(r.CPUSET_CPUS, child, one)])
    assert [res.outcome for res in shrink] == [Outcome.WRITTEN] * 2, [res.error for res in shrink]
    assert (real_cgroups.cpuset_cpus(), real_cgroups.cpuset_cpus("child")) == (one, one)
    assert writer.order == [(child_file, one), (parent_file, one)]
    # Child listed first: the executor still widens the parent before the child.
    writer.order.clear()
    grow = ex.apply([upd(r.CPUSET_CPUS, child, both), upd(r.CPUSET_CPUS, parent, both)])
    assert [res.outcome for res in grow] == [Outcome.WRITTEN] * 2, [res.error for res in grow]
    assert (real_cgroups.cpuset_cpus(), real_cgroups.cpuset_cpus("child")) == (both, both)
    assert writer.order == [(parent_file, both), (child_file, both)]
    # Memory nodes: every host here has node 0 only.
    mems = ex.apply([upd(r.CPUSET_MEMS, parent, "0"), upd(r.CPUSET_MEMS, child, "0")])
    assert [res.outcome for res in mems] == [Outcome.WRITTEN] * 2, [res.error for res in mems]
    assert (read(real_cgroups, "cpuset", "", "cpuset.mems"), read(real_cgroups, "cpuset", "child", "cpuset.mems")) == (
        "0", "0")


def test_child_wider_than_parent(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # Why leveling exists: without the parent in the batch, v1 refuses the wider child (EACCES,
    # kernel/cgroup/cpuset.c validate_change on the legacy hierarchy).  v2 takes it and masks it with the
    # parent's: the child's effective CPUs stay the parent's (Documentation/admin-guide/cgroup-v2.rst).
    host_cpus = parse_cpulist((CGROUP_ROOT / "cpuset" / "cpuset.cpus" if real_cgroups.version == 1
                               else CGROUP_ROOT / "cpuset.cpus.effective").read_text())
    both, one = format_cpulist(host_cpus[:2]), str(host_cpus[1])
    real_cgroups.mkdir("child", subsystems=("cpuset",))
    real_cgroups.write("cpuset", "child", "cpuset.cpus", one)
    real_cgroups.write("cpuset", "", "cpuset.cpus", one)
    ex, *_ = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.CPUSET_CPUS, real_cgroups.name + "/child", both)])
    if real_cgroups.version == 1:
        assert result.outcome is Outcome.FAILED
        assert result.error is not None and "subset of the parent" in result.error
        assert real_cgroups.cpuset_cpus("child") == one
    else:
        assert result.outcome is Outcome.WRITTEN, result.error
        assert real_cgroups.cpuset_cpus("child") == both
        assert read(real_cgroups, "cpuset", "child", "cpuset.cpus.effective") == one


def test_memory_protection_reaches_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # memory.min/low/high are v2 files (v1 has them on Anolis kernels only); memory.min is leveled: a
    # child's protection above its parent's counts only up to the parent's, so the parent grows first.
    real_cgroups.mkdir("child", subsystems=("memory",))
    parent, child = real_cgroups.name, real_cgroups.name + "/child"
    ex, writer, _, audit = executor(tmp_path, real_cgroups.version)
    results = ex.apply([
        upd(r.MEMORY_MIN, child, 32 * MIB), upd(r.MEMORY_MIN, parent, 64 * MIB), upd(r.MEMORY_LOW, parent, 128 * MIB),
        upd(r.MEMORY_HIGH, parent, 512 * MIB), upd(r.MEMORY_LIMIT, parent, 768 * MIB),
    ])
    assert real_cgroups.memory_limit() == 768 * MIB
    if real_cgroups.version == 1:
        assert [res.outcome for res in results] == [Outcome.UNSUPPORTED] * 4 + [Outcome.WRITTEN]
        # The kernel lacks the files (ENOENT in a cgroup that exists): unsupported, and nothing created.
        assert all(res.error and ("absent" in res.error or "No such file" in res.error) for res in results[:4])
        assert not any((real_cgroups.path("memory") / n).exists() for n in ("memory.min", "memory.low", "memory.high"))
        return
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 5, [res.error for res in results]
    assert [read(real_cgroups, "memory", "child", "memory.min")] + [
        read(real_cgroups, "memory", "", name) for name in ("memory.min", "memory.low", "memory.high")] == [
        str(32 * MIB), str(64 * MIB), str(128 * MIB), str(512 * MIB)]
    mins = [(Path(path).parent.name, text) for path, text in writer.order if path.endswith("memory.min")]
    assert mins[0] == (Path(parent).name, str(64 * MIB)), mins  # the parent first, though listed second
    assert (Path(child).name, str(32 * MIB)) in mins
    # A value the kernel refuses: memory.high takes bytes or "max", not a negative number, but the executor's
    # validator stops -5 first; nothing reached the kernel and the file is unchanged.
    (bad,) = ex.apply([upd(r.MEMORY_HIGH, parent, -5)])
    assert bad.outcome is Outcome.INVALID and read(real_cgroups, "memory", "", "memory.high") == str(512 * MIB)
    assert {rec["resource"] for rec in audit_records(audit)} == {"memory_min", "memory_low", "memory_high",
                                                                 "memory_limit"}


@pytest.mark.parametrize(
    ("resource", "subsystem", "name", "value"),
    [
        ("cpu_shares", "cpu", "cpu.shares", 1),
        ("cpu_cfs_quota", "cpu", "cpu.cfs_quota_us", 500),
        ("cpuset_cpus", "cpuset", "cpuset.cpus", "5-3"),
        ("memory_limit", "memory", "memory.limit_in_bytes", -2),
    ],
)
def test_invalid_values_never_reach_the_kernel(
    real_cgroups: RealCgroups, tmp_path: Path, resource: str, subsystem: str, name: str, value: object
) -> None:
    if real_cgroups.version == 2:
        name = {"cpu.shares": "cpu.weight", "cpu.cfs_quota_us": "cpu.max",
                "memory.limit_in_bytes": "memory.max"}.get(name, name)
    before = read(real_cgroups, subsystem, "", name)
    ex, writer, _, _ = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.REGISTRY[resource], real_cgroups.name, value)])
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and name in result.error and repr(value) in result.error
    assert writer.attempts == {}
    assert read(real_cgroups, subsystem, "", name) == before


def test_kernel_einval_is_audited_marked_and_not_retried(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # kernel/sched/core.c tg_set_cfs_bandwidth: a burst above the quota is EINVAL, in both versions
    # (Koordinator #2778).  The validator cannot know the quota, so this is the kernel's refusal.
    burst_file = "cpu.max.burst" if real_cgroups.version == 2 else "cpu.cfs_burst_us"
    real_cgroups.set_cpu_quota("", 10_000)
    ex, writer, clock, audit = executor(tmp_path, real_cgroups.version)
    path = str(real_cgroups.path("cpu") / burst_file)
    (first,) = ex.apply([upd(r.CPU_CFS_BURST, real_cgroups.name, 50_000)])
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "Invalid argument" in first.error
    (record,) = audit_records(audit)
    assert record | {"path": path, "new": "50000", "outcome": "unsupported"} == record
    assert "Invalid argument" in str(record["error"])
    for _ in range(3):
        clock.now += 60
        assert ex.apply([upd(r.CPU_CFS_BURST, real_cgroups.name, 50_000)])[0].outcome is Outcome.UNSUPPORTED
    assert writer.attempts == {path: 1}
    assert read(real_cgroups, "cpu", "", burst_file) == "0"
    # A value the kernel accepts is tried at once.
    assert ex.apply([upd(r.CPU_CFS_BURST, real_cgroups.name, 5_000)])[0].outcome is Outcome.WRITTEN
    assert read(real_cgroups, "cpu", "", burst_file) == "5000"


def test_child_quota_above_the_parents(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # kernel/sched/core.c tg_cfs_schedulable_down: v1 refuses a child quota above its parent's (EINVAL), so
    # the executor caps it to the parent's rate; v2 takes it and lets the parent's quota bind the subtree.
    real_cgroups.mkdir("child", subsystems=("cpu",))
    real_cgroups.set_cpu_quota("", 10_000)
    ex, *_ = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.CPU_CFS_QUOTA, real_cgroups.name + "/child", 50_000)])
    assert result.outcome is Outcome.WRITTEN, result.error
    if real_cgroups.version == 1:
        assert result.update.value == 10_000 and "capped at an ancestor's" in result.update.owner
        assert real_cgroups.cpu_quota("child") == (10_000, 100_000)
        # Once the parent grows, the child's own value goes through.
        real_cgroups.set_cpu_quota("", 200_000)
        assert ex.apply([upd(r.CPU_CFS_QUOTA, real_cgroups.name + "/child", 50_000)])[0].update.value == 50_000
        assert real_cgroups.cpu_quota("child") == (50_000, 100_000)
    else:
        assert real_cgroups.cpu_quota("child") == (50_000, 100_000)
    # What a runtime creating a grandchild is told: a group above it holds a quota (v1 only).
    assert ex.quota_limited_above(real_cgroups.name + "/child/pod") == (real_cgroups.version == 1)
    assert not ex.quota_limited_above(real_cgroups.name)


def test_lowering_a_parent_below_its_children(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # The BE QoS group suppressed below a BE pod's own limit: on v1 the pod and its container (and an
    # unlimited pod's container) are capped first, deepest first; on v2 nothing below changes.
    for rel in ("pod-a/c1", "pod-b/c2"):
        real_cgroups.mkdir(rel, subsystems=("cpu",))
    for rel, quota in (("pod-a", 100_000), ("pod-a/c1", 100_000), ("pod-b/c2", 80_000)):
        real_cgroups.set_cpu_quota(rel, quota)
    ex, writer, _clock, _audit = executor(tmp_path, real_cgroups.version)
    (result,) = ex.apply([upd(r.CPU_CFS_QUOTA, real_cgroups.name, 27_400)])
    assert result.outcome is Outcome.WRITTEN and result.update.value == 27_400, result.error
    assert real_cgroups.cpu_quota("") == (27_400, 100_000)
    expected = 27_400 if real_cgroups.version == 1 else None
    for rel, own in (("pod-a", 100_000), ("pod-a/c1", 100_000), ("pod-b/c2", 80_000)):
        assert real_cgroups.cpu_quota(rel)[0] == (expected or own), rel
    if real_cgroups.version == 1:
        written = [os.path.relpath(os.path.dirname(path), real_cgroups.path("cpu")) for path, _ in writer.order]
        assert written.index("pod-a/c1") < written.index("pod-a") < written.index(".")
        assert real_cgroups.cpu_quota("pod-b") == (-1, 100_000)  # unlimited: inherits, left alone


def test_removed_cgroup_is_gone(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    real_cgroups.mkdir("pod", subsystems=("cpu",))
    ex, *_ = executor(tmp_path, real_cgroups.version)
    pod = real_cgroups.name + "/pod"
    assert ex.apply([upd(r.CPU_SHARES, pod, 256)])[0].outcome is Outcome.WRITTEN
    real_cgroups.remove("pod")
    (result,) = ex.apply([upd(r.CPU_SHARES, pod, 128)])
    assert result.outcome is Outcome.GONE
    assert ex.apply([upd(r.CPU_SHARES, real_cgroups.name + "/never", 128)])[0].outcome is Outcome.GONE


# ---------------------------------------------------------------------------------------------- block I/O


def block_disk(tmp_path: Path) -> tuple[int, int]:
    """(major, minor) of a whole disk: the guest's raw scratch disk, else the disk holding ``tmp_path``."""
    scratch = os.environ.get(SCRATCH_DISK)
    if scratch and stat.S_ISBLK(os.stat(scratch).st_mode):
        dev = os.stat(scratch).st_rdev
        return os.major(dev), os.minor(dev)
    major, minor = disk_of(tmp_path)[1].split(":")
    return int(major), int(minor)


IO_KEYS = {"blkio_read_bps": "rbps", "blkio_write_bps": "wbps", "blkio_read_iops": "riops",
           "blkio_write_iops": "wiops"}
"""Registry key -> its key in v2 io.max (v1: the file blkio.throttle.<read|write>_<bps|iops>_device)."""


def io_limits(groups: RealCgroups, devno: str) -> dict[str, int]:
    """The kernel's throttle limits of disk ``devno`` by io.max key; -1 for none (no line, or "max")."""
    limits = dict.fromkeys(IO_KEYS.values(), -1)
    if groups.version == 2:
        for line in read(groups, "io", "", "io.max").splitlines():
            dev, *fields = line.split()
            if dev == devno:
                limits.update({k: -1 if v == "max" else int(v) for k, v in (f.split("=", 1) for f in fields)})
        return limits
    for key in limits:
        name = f"blkio.throttle.{'read' if key[0] == 'r' else 'write'}_{key[1:]}_device"
        for line in read(groups, "blkio", "", name).splitlines():
            dev, value = line.split()
            if dev == devno:
                limits[key] = int(value)
    return limits


def test_io_throttle_reaches_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    major, minor = block_disk(tmp_path)
    devno = f"{major}:{minor}"
    real_cgroups.mkdir("", subsystems=("blkio",))
    ex, writer, _, _ = executor(tmp_path, real_cgroups.version)
    wanted = {"blkio_read_bps": 8 * MIB, "blkio_write_bps": 4 * MIB, "blkio_read_iops": 900, "blkio_write_iops": 300}
    results = ex.apply([upd(r.REGISTRY[key], real_cgroups.name, (major, minor, value))
                        for key, value in wanted.items()])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 4, [res.error for res in results]
    assert io_limits(real_cgroups, devno) == {IO_KEYS[key]: value for key, value in wanted.items()}
    print(f"io throttle {devno}: wrote {[text for _, text in writer.order]}, "
          f"kernel holds {io_limits(real_cgroups, devno)}")
    if real_cgroups.version == 2:
        assert [text for _, text in writer.order] == [f"{devno} {IO_KEYS[k]}={v}" for k, v in wanted.items()]
    # 0 lifts a limit: v1 drops the rule, v2 writes "max" (the line goes once every key is max).
    results = ex.apply([upd(r.REGISTRY[key], real_cgroups.name, (major, minor, 0)) for key in wanted])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 4, [res.error for res in results]
    assert io_limits(real_cgroups, devno) == dict.fromkeys(IO_KEYS.values(), -1)
    if real_cgroups.version == 2:
        assert devno not in read(real_cgroups, "io", "", "io.max")


def test_io_weight_needs_iocost(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    """io.weight per disk is iocost's (block/blk-iocost.c): the kernel takes it only once iocost is
    initialised on the disk by a write to the root's io.cost.qos; before that a per-disk weight is refused
    (EOPNOTSUPP from blkg_conf_prep) and the executor marks it unsupported.  v1 has the files only on
    Anolis kernels (blkio.cost.*)."""
    major, minor = block_disk(tmp_path)
    devno = f"{major}:{minor}"
    real_cgroups.mkdir("", subsystems=("blkio",))
    ex, writer, _, audit = executor(tmp_path, real_cgroups.version)
    rel = real_cgroups.name
    if real_cgroups.version == 1:
        results = ex.apply([upd(r.BLKIO_COST_QOS, "", f"{devno} enable=1"), upd(r.BLKIO_COST_WEIGHT, rel,
                                                                                 (major, minor, 50))])
        assert [res.outcome for res in results] == [Outcome.UNSUPPORTED] * 2, [res.error for res in results]
        assert all(res.error and "absent" in res.error for res in results), [res.error for res in results]
        assert not any(Path(path).exists() for path in writer.attempts)
        return
    assert read(real_cgroups, "io", "", "io.weight").splitlines()[0] == "default 100"
    # A disk has iocost once a line for it shows in the root's io.cost.qos (another test may have done it).
    had_iocost = any(line.split()[0] == devno for line in (CGROUP_ROOT / "io.cost.qos").read_text().splitlines())
    weight_path = str(real_cgroups.path("io") / "io.weight")
    (before,) = ex.apply([upd(r.BLKIO_COST_WEIGHT, rel, (major, minor, 50))])
    if not had_iocost:
        assert before.outcome is Outcome.UNSUPPORTED, before.error
        assert before.error is not None and "not supported" in before.error
        assert audit_records(audit)[-1]["outcome"] == "unsupported"
        ex.forget(weight_path)
    try:
        (qos,) = ex.apply([upd(r.BLKIO_COST_QOS, "", f"{devno} enable=1")])
        assert qos.outcome is Outcome.WRITTEN, qos.error
        qos_line = next(line for line in (CGROUP_ROOT / "io.cost.qos").read_text().splitlines()
                        if line.split()[0] == devno)
        assert "enable=1" in qos_line.split()
        (weight,) = ex.apply([upd(r.BLKIO_COST_WEIGHT, rel, (major, minor, 50))])
        assert weight.outcome is Outcome.WRITTEN, weight.error
        assert read(real_cgroups, "io", "", "io.weight").splitlines() == ["default 100", f"{devno} 50"]
        print(f"io.weight: before iocost {before.outcome.value} ({before.error}); io.cost.qos {qos_line!r}; "
              f"io.weight {read(real_cgroups, 'io', '', 'io.weight').splitlines()}")
    finally:
        # The root's iocost is the host's: a restore that did not reach the kernel must fail the test.
        (restored,) = ex.apply([upd(r.BLKIO_COST_QOS, "", f"{devno} enable=0")])
        assert restored.outcome is Outcome.WRITTEN, f"iocost of {devno} left enabled: {restored.error}"
