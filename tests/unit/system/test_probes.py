"""Kernel feature probes on fake host trees, with the kernel-dependent calls of the C core faked.

File parsers (``read_psi``, ``read_cpulist``) are the real C core reading the fake trees; perf, prctl
and PSI trigger registration are stand-ins whose answers each test chooses.
"""

from __future__ import annotations

import enum
import errno
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from koordlet import native
from koordlet.errors import CgroupGone, NativeError, PermissionDenied, Unsupported
from koordlet.system import PROBE_NAMES, ProbeResult, probe_all
from koordlet.system import probes as probes_module
from koordlet.system.probes import REQUIRED_PROBES
from tests.fixtures.fakehost import FakeHost


class Event(enum.Enum):
    TASK_CLOCK = "task-clock"
    CONTEXT_SWITCHES = "context-switches"
    CPU_MIGRATIONS = "cpu-migrations"
    PAGE_FAULTS = "page-faults"
    CPU_CYCLES = "cycles"
    INSTRUCTIONS = "instructions"


HARDWARE = {Event.CPU_CYCLES, Event.INSTRUCTIONS}


@dataclass
class Group:
    event_errors: dict[Event, int]
    enabled: bool = False
    closed: bool = False

    def enable(self) -> None:
        self.enabled = True

    def read(self) -> dict[Event, int]:
        assert self.enabled and not self.closed
        return {}

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Perf:
    """``PerfGroup`` stand-in: hardware events answer ``hardware_errno`` (0 = they count)."""

    hardware_errno: int = errno.ENOENT
    partial: dict[Event, int] = field(default_factory=dict)
    cgroup_error: BaseException | None = None
    cgroup_calls: list[tuple[str, bool, list[int]]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def open_pid(self, pid: int, events: list[Event]) -> Group:
        assert pid == os.getpid()
        refused = {e: self.hardware_errno for e in events if e in HARDWARE and self.hardware_errno}
        refused |= {e: err for e, err in self.partial.items() if e in events}
        if len(refused) == len(events):
            raise CgroupGone(next(iter(refused.values())), f"perf_event_open on pid {pid}")
        group = Group(refused)
        self.groups.append(group)
        return group

    def open_cgroup(self, cgroup_dir: str, cpus: list[int], events: list[Event]) -> Group:
        self.cgroup_calls.append((cgroup_dir, os.path.isdir(cgroup_dir), list(cpus)))
        if self.cgroup_error is not None:
            raise self.cgroup_error
        group = Group({})
        self.groups.append(group)
        return group


class FakeNative:
    """What the probes use of ``koordlet.native``; set attributes to change the kernel's answers."""

    PerfEvent = Event

    def __init__(self) -> None:
        self.HAS_PERF = True
        self.HAS_SCHED_CORE = True
        self.HAS_PSI_TRIGGER = True
        self.PerfGroup = Perf()
        self.sched_core: BaseException | int = Unsupported(errno.EINVAL, "PR_SCHED_CORE_GET: EINVAL")
        self.trigger_error: BaseException | None = None
        self.triggers: list[tuple[str, str]] = []

    read_psi = staticmethod(native.read_psi)
    read_cpulist = staticmethod(native.read_cpulist)

    def sched_core_get(self, pid: int) -> int:
        if isinstance(self.sched_core, BaseException):
            raise self.sched_core
        return self.sched_core

    def PsiTrigger(self, path: str, trigger: str) -> Group:  # noqa: N802 - stands in for a class
        if self.trigger_error is not None:
            raise self.trigger_error
        self.triggers.append((path, trigger))
        return Group({})


def by_name(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {r.name: r for r in results}


def supported(results: list[ProbeResult]) -> dict[str, bool]:
    return {r.name: r.supported for r in results}


TEST_HOST_ANSWERS = {
    "cgroup_mode": True, "cgroup_driver": True, "cgroup_writable": True, "cgroup_v2_controllers": False, "psi": True,
    "psi_trigger": True, "perf_software": True, "perf_cgroup": True, "perf_hardware": False,
    "core_sched": False, "resctrl": False, "cpu_cfs_burst": True, "cpu_idle": True,
    "cpu_bvt_warp_ns": False, "memory_min": False, "memory_low": False, "memory_high": False,
    "memory_wmark_ratio": False, "memory_wmark_scale_factor": False, "memory_wmark_min_adj": False,
    "memory_priority": False, "memory_use_priority_oom": False, "memory_oom_group": False,
    "blkio_cost_weight": False, "blkio_cost_qos": False, "cpu_pressure": True, "memory_pressure": True,
    "io_pressure": True, "net_cls_classid": True,
}  # fmt: skip


@pytest.fixture
def hybrid(fake_host: FakeHost) -> FakeHost:
    fake_host.set_mode("hybrid")
    return fake_host


def test_a_host_like_the_test_host(hybrid: FakeHost) -> None:
    fake = FakeNative()
    results = probe_all(hybrid.paths, native=fake)
    assert tuple(r.name for r in results) == PROBE_NAMES
    assert supported(results) == TEST_HOST_ANSWERS
    reasons = {r.name: r.reason for r in results}
    root = hybrid.paths.cgroup_root
    assert reasons["cgroup_mode"].startswith("hybrid: v1 controllers {blkio,cpu,cpuacct,cpuset,memory,net_cls}")
    assert reasons["cgroup_v2_controllers"] == (
        f"{root}/unified/cgroup.controllers lists hugetlb; missing cpu, cpuset, io, memory "
        "(they are bound to the v1 hierarchies in hybrid mode)"
    )
    assert reasons["perf_hardware"] == (
        "perf_event_open(PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS): ENOENT "
        "(no hardware PMU exposed, e.g. a VM without vPMU)"
    )
    assert reasons["core_sched"] == (
        "prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET): EINVAL (kernel built without CONFIG_SCHED_CORE)"
    )
    assert reasons["resctrl"].startswith(f"resctrl not in {hybrid.paths.proc_root}/filesystems")
    assert reasons["cpu_cfs_burst"] == f"cpu.cfs_burst_us present in {root}/cpu"
    assert reasons["memory_wmark_ratio"] == (
        f"memory.wmark_ratio absent from {root}/memory (a file of Alibaba Cloud Linux / Anolis kernels)"
    )
    assert reasons["psi"] == (
        f"{hybrid.paths.proc_root}/pressure/{{cpu,memory,io}} and {{cpu,memory,io}}.pressure in {root}/unified readable"
    )
    assert fake.triggers == [(f"{hybrid.paths.proc_root}/pressure/memory", "some 150000 2000000")]
    # Every perf group the probes opened was enabled, read and closed.
    assert fake.PerfGroup.groups and all(g.enabled and g.closed for g in fake.PerfGroup.groups)


@pytest.mark.parametrize("mode", ["hybrid", "v2"])
def test_a_read_only_cgroup_mount_is_a_requirement_not_met(fake_host: FakeHost, mode: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # A DaemonSet mounting the host's cgroup tree read-only: statvfs says so for the mount koordlet writes.
    fake_host.set_mode(mode)
    read_only = str(fake_host.cgroup_root / ("cpu" if mode == "hybrid" else ""))
    real = os.statvfs

    def statvfs(path: str) -> Any:
        flags = real(path).f_flag | (os.ST_RDONLY if os.path.normpath(path) == os.path.normpath(read_only) else 0)
        return SimpleNamespace(f_flag=flags)

    monkeypatch.setattr(probes_module.os, "statvfs", statvfs)
    result = by_name(probe_all(fake_host.paths, native=FakeNative()))["cgroup_writable"]
    assert not result.supported
    assert result.reason.startswith(f"mounted read-only: {os.path.normpath(read_only)};"), result.reason
    assert "cgroup_writable" in REQUIRED_PROBES


def test_per_cgroup_perf_uses_a_temporary_child_and_removes_it(hybrid: FakeHost) -> None:
    fake = FakeNative()
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_cgroup"]
    ((target, existed, cpus),) = fake.PerfGroup.cgroup_calls
    unified = f"{hybrid.paths.cgroup_root}/unified"
    assert os.path.dirname(target) == unified
    assert os.path.basename(target).startswith(f"koordlet-probe-{os.getpid()}-")
    assert existed and not os.path.exists(target)
    assert cpus == [0, 1, 2, 3]
    assert result == ProbeResult(
        "perf_cgroup", True, f"task-clock counted per cgroup on a temporary child cgroup of {unified} over CPUs 0-3"
    )


def test_per_cgroup_perf_falls_back_to_the_root_when_mkdir_fails(
    hybrid: FakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secrets, "token_hex", lambda n: "feedbeef")
    blocker = hybrid.cgroup_root / "unified" / f"koordlet-probe-{os.getpid()}-feedbeef"
    blocker.write_text("in the way")  # mkdir fails with EEXIST
    fake = FakeNative()
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_cgroup"]
    assert fake.PerfGroup.cgroup_calls[0][0] == f"{hybrid.paths.cgroup_root}/unified"
    assert result.supported and "on the root (mkdir failed: EEXIST) of" in result.reason
    assert blocker.read_text() == "in the way"


def test_per_cgroup_perf_failure_still_removes_the_child(hybrid: FakeHost) -> None:
    fake = FakeNative()
    fake.PerfGroup.cgroup_error = CgroupGone(errno.ENOENT, "perf_event_open(TASK_CLOCK) on x")
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_cgroup"]
    assert not result.supported
    assert result.reason.startswith(f"per-cgroup perf on {hybrid.paths.cgroup_root}/unified/koordlet-probe-")
    assert "ENOENT" in result.reason
    assert not [p for p in os.listdir(hybrid.cgroup_root / "unified") if p.startswith("koordlet-probe-")]


def test_v1_only_host_has_no_per_cgroup_psi_or_perf(fake_host: FakeHost) -> None:
    results = by_name(probe_all(fake_host.paths, native=FakeNative()))
    assert not results["perf_cgroup"].supported
    assert "no cgroup v2 hierarchy" in results["perf_cgroup"].reason
    assert not results["psi"].supported
    assert "no per-cgroup PSI: cpu.pressure absent from" in results["psi"].reason
    assert results["cgroup_v2_controllers"].reason.startswith("no cgroup v2 hierarchy under")


def test_a_fully_featured_v2_host(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2", features={"cfs_burst", "cpu_idle", "anolis", "iocost"})
    fake_host.mkdir_cgroup("kubepods.slice")
    fake_host.mount_resctrl("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n")
    fake = FakeNative()
    fake.PerfGroup.hardware_errno = 0
    fake.sched_core = 0
    results = probe_all(fake_host.paths, native=fake)
    assert {name for name, ok in supported(results).items() if not ok} == {"net_cls_classid"}
    reasons = {r.name: r.reason for r in results}
    root = fake_host.paths.cgroup_root
    assert reasons["cgroup_driver"] == f"systemd: kubepods.slice found in {root}"
    assert reasons["cgroup_v2_controllers"] == f"cpu, cpuset, io, memory listed in {root}/cgroup.controllers"
    assert reasons["resctrl"] == f"mounted at {fake_host.paths.resctrl_root}; schemata resources: L3, MB"
    assert reasons["core_sched"] == "prctl(PR_SCHED_CORE) available (this task's cookie: 0x0)"
    assert reasons["cpu_bvt_warp_ns"] == f"cpu.bvt_warp_ns present in {root}/kubepods.slice"
    assert (
        reasons["net_cls_classid"]
        == "net_cls_classid has no cgroup v2 file (net_cls.classid exists only in the other version)"
    )


def test_v2_root_without_children_is_probed_in_a_temporary_child(fake_host: FakeHost) -> None:
    # The pure v2 guest of tests/vm showed it: a v2 root with no child at all (a fresh node, a container) has no
    # directory showing cpu.max.burst or memory.high, so the probes said "unsupported" on a kernel that has them.
    # The kernel creates those files in any new child, so the probe makes one; a fake tree's mkdir creates no
    # interface files, so here the answer is "absent from the temporary child", and the child is gone after.
    fake_host.set_mode("v2", features={"cfs_burst"})
    root = fake_host.paths.cgroup_root
    assert not [entry for entry in os.scandir(root) if entry.is_dir()]
    reasons = {r.name: r.reason for r in probe_all(fake_host.paths, native=FakeNative())}
    reason = reasons["cpu_cfs_burst"]
    assert reason.startswith(f"cpu.max.burst absent from {root}/{probes_module.PROBE_DIR_PREFIX}{os.getpid()}-")
    assert reason.endswith("(a temporary child cgroup, removed)")
    assert not [entry for entry in os.scandir(root) if entry.is_dir()]


def test_v2_without_some_controllers(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2", controllers=("cpu", "memory", "pids"))
    result = by_name(probe_all(fake_host.paths, native=FakeNative()))["cgroup_v2_controllers"]
    assert result == ProbeResult(
        "cgroup_v2_controllers", False,
        f"{fake_host.paths.cgroup_root}/cgroup.controllers lists cpu memory pids; missing cpuset, io",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "probes", "what"),
    [
        ("HAS_PERF", ("perf_software", "perf_cgroup", "perf_hardware"), "perf_event support"),
        ("HAS_SCHED_CORE", ("core_sched",), "prctl(PR_SCHED_CORE) support"),
        ("HAS_PSI_TRIGGER", ("psi_trigger",), "PSI triggers"),
    ],
)
def test_capabilities_missing_from_the_build(hybrid: FakeHost, flag: str, probes: tuple[str, ...], what: str) -> None:
    fake = FakeNative()
    setattr(fake, flag, False)
    results = by_name(probe_all(hybrid.paths, native=fake))
    for name in probes:
        assert results[name] == ProbeResult(name, False, f"C core built without {what} ({flag} is false)")


def test_c_core_unavailable(hybrid: FakeHost) -> None:
    results = by_name(probe_all(hybrid.paths, None, native_error="koordlet._native is not built"))
    for name in ("psi", "psi_trigger", "perf_software", "perf_cgroup", "perf_hardware", "core_sched"):
        assert results[name].reason == "C core unavailable: koordlet._native is not built"
    assert results["cgroup_mode"].supported and results["cpu_idle"].supported


def test_no_cgroup_tree_makes_cgroup_probes_unsupported(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "host")
    for entry in host.cgroup_root.iterdir():
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        else:
            shutil.rmtree(entry)
    results = probe_all(host.paths, native=FakeNative())
    assert len(results) == len(PROBE_NAMES)
    why = f"no cgroup hierarchy under {host.paths.cgroup_root}"
    for name in ("cgroup_mode", "cgroup_driver", "cgroup_writable", "cgroup_v2_controllers", "perf_cgroup", "cpu_idle",
                 "memory_min"):
        result = by_name(results)[name]
        assert not result.supported and result.reason.startswith(why), (name, result.reason)
    assert by_name(results)["perf_software"].supported


def test_partial_hardware_events(hybrid: FakeHost) -> None:
    fake = FakeNative()
    fake.PerfGroup.hardware_errno = 0
    fake.PerfGroup.partial = {Event.INSTRUCTIONS: errno.ENOENT}
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_hardware"]
    assert not result.supported
    assert "refused INSTRUCTIONS: ENOENT (no hardware PMU exposed" in result.reason
    assert result.reason.endswith("CPI needs both")


def test_hardware_events_forbidden(hybrid: FakeHost) -> None:
    fake = FakeNative()
    fake.PerfGroup.hardware_errno = errno.EACCES
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_hardware"]
    assert result.reason.endswith(": EACCES (refused by kernel.perf_event_paranoid or a missing CAP_PERFMON)")


def test_software_event_partially_refused(hybrid: FakeHost) -> None:
    fake = FakeNative()
    fake.PerfGroup.partial = {Event.CONTEXT_SWITCHES: errno.EOPNOTSUPP}
    result = by_name(probe_all(hybrid.paths, native=fake))["perf_software"]
    assert result == ProbeResult(
        "perf_software", False, f"perf_event_open on pid {os.getpid()} refused CONTEXT_SWITCHES: EOPNOTSUPP"
    )


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (Unsupported(errno.ENODEV, "x"), "ENODEV (no SMT siblings, so the kernel keeps core scheduling off)"),
        (PermissionDenied(errno.EPERM, "PR_SCHED_CORE_GET pid 0: Operation not permitted"),
         "EPERM (PR_SCHED_CORE_GET pid 0: Operation not permitted)"),
    ],
)  # fmt: skip
def test_core_sched_errors(hybrid: FakeHost, error: BaseException, reason: str) -> None:
    fake = FakeNative()
    fake.sched_core = error
    result = by_name(probe_all(hybrid.paths, native=fake))["core_sched"]
    assert result == ProbeResult("core_sched", False, f"prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET): {reason}")


def test_psi_trigger_refused(hybrid: FakeHost) -> None:
    fake = FakeNative()
    fake.trigger_error = NativeError(errno.EINVAL, "PSI trigger 'some 150000 2000000' on x: Invalid argument")
    result = by_name(probe_all(hybrid.paths, native=fake))["psi_trigger"]
    assert result.reason == (
        "PSI trigger 'some 150000 2000000' refused: PSI trigger 'some 150000 2000000' on x: Invalid argument (EINVAL)"
    )


def test_garbage_system_pressure_is_unsupported_naming_the_file(hybrid: FakeHost) -> None:
    hybrid.set_pressure("io", "some avg10=oops\n")
    result = by_name(probe_all(hybrid.paths, native=FakeNative()))["psi"]
    assert not result.supported
    assert result.reason.startswith(f"system PSI unreadable: {hybrid.paths.proc_root}/pressure/io: malformed content")


def test_missing_per_cgroup_pressure(hybrid: FakeHost) -> None:
    os.remove(hybrid.cgroup_root / "unified" / "memory.pressure")
    result = by_name(probe_all(hybrid.paths, native=FakeNative()))["psi"]
    assert not result.supported
    assert result.reason.endswith(f"no per-cgroup PSI: memory.pressure absent from {hybrid.paths.cgroup_root}/unified")


def test_resctrl_known_but_not_mounted(hybrid: FakeHost) -> None:
    hybrid.set_filesystems(resctrl=True)
    result = by_name(probe_all(hybrid.paths, native=FakeNative()))["resctrl"]
    root = hybrid.paths.resctrl_root
    assert result == ProbeResult(
        "resctrl", False, f"resctrl known to the kernel but not mounted at {root} (mount -t resctrl resctrl {root})"
    )


def test_unreadable_proc_filesystems(hybrid: FakeHost) -> None:
    os.remove(hybrid.paths.proc("filesystems"))
    result = by_name(probe_all(hybrid.paths, native=FakeNative()))["resctrl"]
    assert not result.supported and result.reason.startswith(f"cannot read {hybrid.paths.proc('filesystems')}:")


def test_file_probes_look_in_kubepods_when_it_exists(hybrid: FakeHost) -> None:
    hybrid.mkdir_cgroup("kubepods")
    result = by_name(probe_all(hybrid.paths, native=FakeNative()))["cpu_idle"]
    assert result.reason == f"cpu.idle present in {hybrid.paths.cgroup_root}/cpu/kubepods"


def test_a_buggy_probe_is_reported_not_raised(hybrid: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(ctx: Any) -> tuple[bool, str]:
        raise RuntimeError("bug")

    probes = tuple((name, explode if name == "resctrl" else fn) for name, fn in probes_module._FEATURE_PROBES)
    monkeypatch.setattr(probes_module, "_FEATURE_PROBES", probes)
    results = by_name(probe_all(hybrid.paths, native=FakeNative()))
    assert results["resctrl"] == ProbeResult("resctrl", False, "probe failed: RuntimeError: bug")
    assert len(results) == len(PROBE_NAMES) and results["cpu_idle"].supported


def test_probe_result_is_frozen() -> None:
    result = ProbeResult("psi", True, "ok")
    with pytest.raises(AttributeError):
        result.supported = False  # type: ignore[misc]
