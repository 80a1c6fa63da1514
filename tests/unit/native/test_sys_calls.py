"""perf, core-scheduling and PSI-trigger wrappers: argument checks and error translation."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from koordlet import errors, native


def test_capabilities_and_build_stamp() -> None:
    assert native.ABI_VERSION == 3
    assert native.HAS_PERF and native.HAS_SCHED_CORE and native.HAS_PSI_TRIGGER
    assert native.BUILD_INFO.startswith("kcore abi 3")


def test_perf_argument_checks() -> None:
    with pytest.raises(ValueError, match="distinct events"):
        native.PerfGroup.open_pid(os.getpid(), [])
    with pytest.raises(ValueError, match="distinct events"):
        native.PerfGroup.open_pid(os.getpid(), [native.PerfEvent.TASK_CLOCK] * 2)
    with pytest.raises(ValueError, match="invalid pid"):
        native.PerfGroup.open_pid(0, [native.PerfEvent.TASK_CLOCK])
    with pytest.raises(ValueError, match="at least one CPU"):
        native.PerfGroup.open_cgroup("/sys/fs/cgroup/unified", [], [native.PerfEvent.TASK_CLOCK])


def test_perf_on_missing_cgroup_dir_is_gone(tmp_path: Path) -> None:
    with pytest.raises(errors.CgroupGone, match="perf_event_open"):
        native.PerfGroup.open_cgroup(tmp_path / "gone", [0], [native.PerfEvent.TASK_CLOCK])


def test_perf_reading_scales_for_multiplexing() -> None:
    reading = native.PerfReading({native.PerfEvent.CPU_CYCLES: 100}, time_enabled_ns=200, time_running_ns=100)
    assert reading.scaled(native.PerfEvent.CPU_CYCLES) == 200.0
    unscheduled = native.PerfReading({native.PerfEvent.CPU_CYCLES: 7}, 0, 0)
    assert unscheduled.scaled(native.PerfEvent.CPU_CYCLES) == 7.0


def test_sched_core_rejects_bad_pid() -> None:
    with pytest.raises(ValueError, match="invalid pid"):
        native.sched_core_get(-1)


def test_sched_core_errors_are_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    # The translation is what matters on kernels we cannot boot here: EINVAL and ENODEV mean
    # "unsupported", ESRCH a task that is gone.
    for rc, cls, text in [
        (-errno.EINVAL, errors.Unsupported, "no core scheduling"),
        (-errno.ENODEV, errors.Unsupported, "no SMT"),
        (-errno.ESRCH, errors.CgroupGone, "No such process"),
        (-errno.EPERM, errors.PermissionDenied, "not permitted"),
    ]:
        with pytest.raises(cls, match=text):
            native.schedcore.check_rc(rc, "PR_SCHED_CORE_CREATE pid 1")
    native.schedcore.check_rc(0, "ok")


def test_psi_trigger_validates_spec(tmp_path: Path) -> None:
    for bad in ["", "some", "some 1", "avg 1 2", "some a 2", "some 1 2 3"]:
        with pytest.raises(errors.ParseError, match="PSI trigger"):
            native.PsiTrigger("/proc/pressure/memory", bad)
    with pytest.raises(errors.CgroupGone):
        native.PsiTrigger(tmp_path / "memory.pressure", "some 150000 2000000")


def test_psi_poll_with_nothing_returns_after_timeout() -> None:
    result = native.psi_poll([], 1)
    assert result.fired == [] and result.broken == []


def test_errno_translation() -> None:
    assert isinstance(errors.from_errno(errno.ENODEV, "x"), errors.CgroupGone)
    assert isinstance(errors.from_errno(-errno.EACCES, "x"), errors.PermissionDenied)
    assert isinstance(errors.from_errno(errno.EOPNOTSUPP, "x"), errors.Unsupported)
    assert isinstance(errors.from_errno(errno.EIO, "x"), errors.NativeError)
    parse = errors.from_errno(errno.EBADMSG, "/sys/fs/cgroup/cpu/x/cpu.stat")
    assert isinstance(parse, errors.ParseError) and isinstance(parse, ValueError)
    assert "cpu.stat: malformed content (EBADMSG)" in str(parse)
    gone = errors.from_errno(errno.ENOENT, "/x")
    assert isinstance(gone, FileNotFoundError) and isinstance(gone, errors.KoordletError)


def test_inotify_reports_directory_create_and_delete(tmp_path: Path) -> None:
    with native.Inotify() as watcher:
        wd = watcher.add_watch(tmp_path, native.IN_CREATE | native.IN_DELETE)
        assert watcher.read() == []
        (tmp_path / "pod1").mkdir()
        (tmp_path / "pod1").rmdir()
        events = watcher.read()
        assert [(e.wd, e.name) for e in events] == [(wd, "pod1"), (wd, "pod1")]
        assert events[0].mask & native.IN_CREATE and events[0].mask & native.IN_ISDIR
        assert events[1].mask & native.IN_DELETE
        with pytest.raises(errors.CgroupGone):
            watcher.add_watch(tmp_path / "missing", native.IN_CREATE)
        watcher.remove_watch(wd)


def test_inotify_event_decoder_stops_at_truncation() -> None:
    import struct

    record = struct.pack("iIII", 3, native.IN_CREATE, 0, 8) + b"abc\0\0\0\0\0"
    assert native.parse_inotify_events(record * 2) == [native.InotifyEvent(3, native.IN_CREATE, "abc")] * 2
    assert native.parse_inotify_events(record + record[:20]) == [native.InotifyEvent(3, native.IN_CREATE, "abc")]
    assert native.parse_inotify_events(b"") == []
