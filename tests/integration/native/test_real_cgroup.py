"""The C core on real cgroup files - the v1 hierarchy on the host, the pure v2 one in the guest - plus the
unified PSI/perf files and /proc."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet import native
from koordlet import native_ref as ref
from tests.fixtures.realcgroup import ONLY_V1, RealCgroups

pytestmark = pytest.mark.integration

BUSY = "while True: pass"

# Files a container cgroup has in each v1 subsystem / v2 controller, with how to parse them.  Everything here
# is stable for a cgroup with no tasks, so C and Python must read the same values.
STATIC_FILES_V1 = [
    ("cpuacct", "cpuacct.usage", native.Kind.INT, None),
    ("cpu", "cpu.stat", native.Kind.KV, ["nr_periods", "nr_throttled", "throttled_time", "nr_bursts"]),
    ("cpu", "cpu.cfs_quota_us", native.Kind.INT, None),
    ("cpu", "cpu.cfs_period_us", native.Kind.INT, None),
    ("cpu", "cpu.cfs_burst_us", native.Kind.INT, None),
    ("cpu", "cpu.shares", native.Kind.INT, None),
    ("cpu", "cpu.idle", native.Kind.INT, None),
    ("cpuset", "cpuset.cpus", native.Kind.CPULIST, None),
    ("cpuset", "cpuset.mems", native.Kind.CPULIST, None),
    (
        "memory",
        "memory.stat",
        native.Kind.KV,
        ["total_inactive_anon", "total_active_anon", "total_unevictable", "total_cache", "hierarchical_memory_limit"],
    ),
    ("memory", "memory.usage_in_bytes", native.Kind.INT, None),
    ("memory", "memory.limit_in_bytes", native.Kind.INT, None),
]
STATIC_FILES_V2 = [
    ("cpu", "cpu.stat", native.Kind.KV, ["usage_usec", "nr_periods", "nr_throttled", "throttled_usec", "nr_bursts"]),
    ("cpu", "cpu.max", native.Kind.CPU_MAX, None),
    ("cpu", "cpu.max.burst", native.Kind.INT, None),
    ("cpu", "cpu.weight", native.Kind.INT, None),
    ("cpu", "cpu.idle", native.Kind.INT, None),
    ("cpuset", "cpuset.cpus.effective", native.Kind.CPULIST, None),
    ("cpuset", "cpuset.mems.effective", native.Kind.CPULIST, None),
    ("memory", "memory.stat", native.Kind.KV, ["anon", "file", "inactive_anon", "active_anon", "unevictable"]),
    ("memory", "memory.current", native.Kind.INT, None),
    ("memory", "memory.min", native.Kind.INT, None),
    ("memory", "memory.low", native.Kind.INT, None),
    ("memory", "memory.events", native.Kind.KV, ["low", "high", "max", "oom", "oom_kill"]),
    ("cpu", "cpu.pressure", native.Kind.PSI, None),
]
# "max" in cpu.max / memory.max: the C core's CPU_MAX kind reads "max" as -1.


@pytest.fixture
def budget() -> Iterator[None]:
    previous = native.set_fd_budget(10_000)
    yield
    native.set_fd_budget(previous)


def test_native_matches_reference_on_real_files(real_cgroups: RealCgroups, budget: None) -> None:
    real_cgroups.mkdir("kubepods/podA/c1")
    real_cgroups.set_cpu_quota("kubepods/podA/c1", 20000)
    fs = native.FileSet()
    slots = []
    for subsystem, name, kind, keys in STATIC_FILES_V2 if real_cgroups.version == 2 else STATIC_FILES_V1:
        path = real_cgroups.path(subsystem, "kubepods/podA/c1") / name
        slots.append((fs.add(path, kind, keys), path, kind, keys))
    result = fs.read()
    for slot, path, kind, keys in slots:
        expected = ref.read_file(path, int(kind), keys)
        assert result.error(slot) == expected.err == 0, path
        again = native.read_file(path, kind, keys)
        if path.name == "cpu.stat":
            # The kernel's counters can move between two reads (v2 flushes its per-CPU stats lazily, even for
            # a cgroup without tasks): the same keys, each value no smaller.
            first = result.value(slot)
            assert first.keys() == again.keys() and all(again[k] >= v for k, v in first.items()), path
        else:
            assert result.value(slot) == again, path
        # One read for both parsers: a live file's counters may move between two reads.
        data = path.read_bytes()
        raw = ref.parse(int(kind), keys, data)
        assert native.parse_result(int(kind), " ".join(keys) if keys else None, data)[3] == raw.v
    quota = result.value(slots[1 if real_cgroups.version == 2 else 2][0])
    assert (quota[0] if real_cgroups.version == 2 else quota) == 20000


def test_root_files_and_proc_match_reference(cgroup_version: int) -> None:
    root = "/sys/fs/cgroup" if cgroup_version == 2 else None
    for path, kind in [
        (f"{root}/memory.stat" if root else "/sys/fs/cgroup/memory/memory.stat", native.Kind.KV),
        (f"{root}/cpu.stat" if root else "/sys/fs/cgroup/cpu/cpu.stat", native.Kind.KV),
        ("/proc/meminfo", native.Kind.MEMINFO),
    ]:
        data = Path(path).read_bytes()
        assert native.parse_kv_all_result(int(kind), data) == ref.parse_kv_all(int(kind), data), path
        assert set(native.read_kv(path) if kind is native.Kind.KV else native.read_meminfo(path)) == {
            k.decode()
            for k, _ in ref.parse_kv_all(int(kind), data)  # type: ignore[union-attr]
        }
    stat = Path("/proc/stat").read_bytes()
    assert native.parse_proc_stat_result(stat) == ref.parse_proc_stat(stat)
    parsed = native.read_proc_stat()
    assert sorted(parsed.cpus) == list(range(len(parsed.cpus)))
    for name in ("cpu", "memory", "io"):
        psi = native.read_psi(f"/proc/pressure/{name}")
        assert psi.some.total_us >= 0 and psi.full is not None


def test_kept_fd_sees_fresh_usage_and_enodev_after_removal(real_cgroups: RealCgroups, budget: None) -> None:
    real_cgroups.mkdir("busy")
    fs = native.FileSet()
    if real_cgroups.version == 2:
        usage = fs.add(real_cgroups.path("cpu", "busy") / "cpu.stat", native.Kind.KV, ["usage_usec"])
        stat = fs.add(real_cgroups.path("memory", "busy") / "memory.stat", native.Kind.KV, ["anon"])

        def used_ns() -> int:
            return int(fs.read().value(usage)["usage_usec"]) * 1000
    else:
        usage = fs.add(real_cgroups.path("cpuacct", "busy") / "cpuacct.usage", native.Kind.INT)
        stat = fs.add(real_cgroups.path("memory", "busy") / "memory.stat", native.Kind.KV, ["total_rss"])

        def used_ns() -> int:
            return int(fs.read().value(usage))
    assert used_ns() == 0
    assert fs.open_fds == 2
    pid = real_cgroups.spawn("busy", BUSY)
    deadline = time.monotonic() + 10
    while used_ns() < 50_000_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used_ns() >= 50_000_000, "a busy loop should show 50 ms of CPU within 10 s"
    assert used_ns() == pytest.approx(real_cgroups.cpu_usage_ns("busy"), rel=0.2)
    assert fs.open_fds == 2  # the same kept fds answered every read
    real_cgroups.kill(pid)
    real_cgroups.remove("busy")
    gone = fs.read()
    assert gone.error(usage) == errno.ENODEV
    assert gone.error(stat) == errno.ENODEV
    assert fs.open_fds == 0  # the removed cgroup's fds were dropped
    assert fs.read().error(usage) == errno.ENOENT


def test_unified_pressure_files_and_trigger(real_cgroups: RealCgroups) -> None:
    real_cgroups.mkdir("psi")
    real_cgroups.spawn("psi", "import signal; signal.pause()")
    directory = real_cgroups.path("unified", "psi")
    for name in ("cpu", "memory", "io"):
        psi = native.read_psi(directory / f"{name}.pressure")
        assert psi.some.avg10 >= 0
    # Without CAP_SYS_RESOURCE the window must be a multiple of 2 s (kernel/sched/psi.c).
    with native.PsiTrigger(directory / "memory.pressure", "some 150000 2000000") as trigger:
        started = time.monotonic()
        polled = native.psi_poll([trigger], 50)
        assert polled.fired == [] and polled.broken == []
        assert time.monotonic() - started >= 0.04


def test_perf_counts_a_busy_cgroup_and_drops_hardware_events(real_cgroups: RealCgroups) -> None:
    real_cgroups.mkdir("perf")
    events = [
        native.PerfEvent.TASK_CLOCK,
        native.PerfEvent.CONTEXT_SWITCHES,
        native.PerfEvent.CPU_CYCLES,
        native.PerfEvent.INSTRUCTIONS,
    ]
    cpus = native.read_cpulist("/sys/devices/system/cpu/online")
    with native.PerfGroup.open_cgroup(real_cgroups.path("unified", "perf"), cpus, events) as group:
        # This guest has no PMU: hardware counters are refused with ENOENT and reported per event.
        if native.PerfEvent.CPU_CYCLES in group.event_errors:
            assert group.event_errors[native.PerfEvent.CPU_CYCLES] == errno.ENOENT
        assert native.PerfEvent.TASK_CLOCK in group.events
        group.enable()
        pid = real_cgroups.spawn("perf", BUSY)
        deadline = time.monotonic() + 10
        while group.read().values[native.PerfEvent.TASK_CLOCK] < 100_000_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        reading = group.read()
        real_cgroups.kill(pid)
    assert reading.values[native.PerfEvent.TASK_CLOCK] >= 100_000_000


@ONLY_V1  # a v1 cpu directory exists only in v1
def test_perf_on_a_v1_directory_is_refused(real_cgroups: RealCgroups) -> None:
    # perf_event is bound to the unified hierarchy here; a v1 cpu dir fd is not a perf cgroup.
    with pytest.raises(OSError) as info:
        native.PerfGroup.open_cgroup(real_cgroups.path("cpu"), [0], [native.PerfEvent.TASK_CLOCK])
    assert info.value.errno in (errno.ENOENT, errno.EBADF, errno.EINVAL)


def test_perf_on_own_task() -> None:
    with native.PerfGroup.open_pid(os.getpid(), [native.PerfEvent.TASK_CLOCK, native.PerfEvent.PAGE_FAULTS]) as g:
        g.enable()
        sum(range(200_000))
        reading = g.read()
    assert reading.values[native.PerfEvent.TASK_CLOCK] > 0
    assert reading.time_running_ns > 0


def test_core_scheduling_get_answers_or_says_unsupported() -> None:
    from koordlet.errors import Unsupported

    try:
        cookie = native.sched_core_get(0)
    except Unsupported as exc:  # this test host's kernel: built without CONFIG_SCHED_CORE
        assert exc.errno in (errno.EINVAL, errno.ENODEV)
    else:
        assert cookie >= 0
