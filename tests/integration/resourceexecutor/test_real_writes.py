"""ResourceExecutor against the kernel's cgroup v1 files, in private ``koordlet-test-*`` cgroups.

Values are read back from the files the kernel serves; a kernel refusal (EINVAL, EACCES) comes from
the kernel itself, not from an injected fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.resourceexecutor import AuditLog, CgroupUpdate, FileWriter, Outcome, ResourceExecutor
from koordlet.system import HostPaths, detect_layout
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures.realcgroup import RealCgroups

pytestmark = pytest.mark.integration


@dataclass
class CountingWriter:
    """The real writer, counting write attempts per path."""

    real: FileWriter = field(default_factory=FileWriter)
    attempts: dict[str, int] = field(default_factory=dict)

    def read(self, path: str) -> str:
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        self.attempts[path] = self.attempts.get(path, 0) + 1
        self.real.write(path, text)


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def executor(tmp_path: Path) -> tuple[ResourceExecutor, CountingWriter, Clock, AuditLog]:
    layout = detect_layout(HostPaths())
    assert layout.controller_version == 1, layout.describe()
    writer, clock, audit = CountingWriter(), Clock(), AuditLog(tmp_path / "audit")
    return ResourceExecutor(layout, clock, audit, writer=writer), writer, clock, audit


def read(groups: RealCgroups, subsystem: str, rel: str, name: str) -> str:
    return (groups.path(subsystem, rel) / name).read_text().strip()


def upd(resource: str, rel: str, value: object) -> CgroupUpdate:
    return CgroupUpdate(resource, rel, value, "integration test")


def test_cpu_and_memory_values_reach_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    ex, _, _, audit = executor(tmp_path)
    rel = real_cgroups.name
    results = ex.apply(
        [upd("cpu_cfs_quota", rel, 50_000), upd("cpu_shares", rel, 512), upd("memory_limit", rel, 256 << 20)]
    )
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 3, [res.error for res in results]
    assert read(real_cgroups, "cpu", "", "cpu.cfs_quota_us") == "50000"
    assert read(real_cgroups, "cpu", "", "cpu.shares") == "512"
    assert read(real_cgroups, "memory", "", "memory.limit_in_bytes") == str(256 << 20)
    results = ex.apply([upd("cpu_cfs_quota", rel, -1), upd("memory_limit", rel, -1)])
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 2, [res.error for res in results]
    assert read(real_cgroups, "cpu", "", "cpu.cfs_quota_us") == "-1"
    assert int(read(real_cgroups, "memory", "", "memory.limit_in_bytes")) >= (1 << 63) - (1 << 16)
    with open(audit.path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [(rec["resource"], rec["old"], rec["new"]) for rec in records[:2]] == [
        ("cpu_cfs_quota", "-1", "50000"),
        ("cpu_shares", "1024", "512"),
    ]
    assert records[3] == records[3] | {"resource": "cpu_cfs_quota", "old": "50000", "new": "-1", "outcome": "written"}


def test_cpuset_leveled_shrink_and_grow(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    host_cpus = parse_cpulist(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
    assert len(host_cpus) >= 2, "the test host needs two CPUs"
    both, one = format_cpulist(host_cpus[:2]), str(host_cpus[1])
    parent, child = real_cgroups.name, real_cgroups.name + "/child"
    real_cgroups.mkdir("child", subsystems=("cpuset",))
    real_cgroups.write("cpuset", "", "cpuset.cpus", both)
    real_cgroups.write("cpuset", "child", "cpuset.cpus", both)
    ex, *_ = executor(tmp_path)

    shrink = ex.apply([upd("cpuset_cpus", parent, one), upd("cpuset_cpus", child, one)])
    assert [res.outcome for res in shrink] == [Outcome.WRITTEN] * 2, [res.error for res in shrink]
    assert (read(real_cgroups, "cpuset", "", "cpuset.cpus"), read(real_cgroups, "cpuset", "child", "cpuset.cpus")) == (
        one,
        one,
    )
    # Children listed first: the executor still widens the parent before the child.
    grow = ex.apply([upd("cpuset_cpus", child, both), upd("cpuset_cpus", parent, both)])
    assert [res.outcome for res in grow] == [Outcome.WRITTEN] * 2, [res.error for res in grow]
    assert (read(real_cgroups, "cpuset", "", "cpuset.cpus"), read(real_cgroups, "cpuset", "child", "cpuset.cpus")) == (
        both,
        both,
    )


def test_child_wider_than_parent_is_refused_by_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # Why leveling exists: without the parent in the batch, v1 refuses the wider child (EACCES).
    host_cpus = parse_cpulist(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
    both, one = format_cpulist(host_cpus[:2]), str(host_cpus[1])
    real_cgroups.mkdir("child", subsystems=("cpuset",))
    real_cgroups.write("cpuset", "child", "cpuset.cpus", one)
    real_cgroups.write("cpuset", "", "cpuset.cpus", one)
    ex, *_ = executor(tmp_path)
    (result,) = ex.apply([upd("cpuset_cpus", real_cgroups.name + "/child", both)])
    assert result.outcome is Outcome.FAILED
    assert result.error is not None and "subset of the parent" in result.error
    assert read(real_cgroups, "cpuset", "child", "cpuset.cpus") == one


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
    before = read(real_cgroups, subsystem, "", name)
    ex, writer, _, _ = executor(tmp_path)
    (result,) = ex.apply([upd(resource, real_cgroups.name, value)])
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and name in result.error and repr(value) in result.error
    assert writer.attempts == {}
    assert read(real_cgroups, subsystem, "", name) == before


def test_kernel_einval_is_marked_and_not_retried(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # kernel/sched/core.c tg_cfs_schedulable_down: on v1 a child quota above its parent's is EINVAL.
    real_cgroups.mkdir("child", subsystems=("cpu",))
    real_cgroups.write("cpu", "", "cpu.cfs_quota_us", "10000")
    ex, writer, clock, _ = executor(tmp_path)
    child = real_cgroups.name + "/child"
    path = str(real_cgroups.path("cpu", "child") / "cpu.cfs_quota_us")
    (first,) = ex.apply([upd("cpu_cfs_quota", child, 50_000)])
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "Invalid argument" in first.error
    for _ in range(3):
        clock.now += 60
        assert ex.apply([upd("cpu_cfs_quota", child, 50_000)])[0].outcome is Outcome.UNSUPPORTED
    assert writer.attempts == {path: 1}
    assert read(real_cgroups, "cpu", "child", "cpu.cfs_quota_us") == "-1"
    # A value the kernel accepts is tried at once.
    assert ex.apply([upd("cpu_cfs_quota", child, 5_000)])[0].outcome is Outcome.WRITTEN
    assert read(real_cgroups, "cpu", "child", "cpu.cfs_quota_us") == "5000"


def test_removed_cgroup_is_gone(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    real_cgroups.mkdir("pod", subsystems=("cpu",))
    ex, *_ = executor(tmp_path)
    pod = real_cgroups.name + "/pod"
    assert ex.apply([upd("cpu_shares", pod, 256)])[0].outcome is Outcome.WRITTEN
    real_cgroups.path("cpu", "pod").rmdir()
    (result,) = ex.apply([upd("cpu_shares", pod, 128)])
    assert result.outcome is Outcome.GONE
    assert ex.apply([upd("cpu_shares", real_cgroups.name + "/never", 128)])[0].outcome is Outcome.GONE
