"""The kernel knob writer on a fake /proc and /sys: validation, skip-unchanged, originals kept across a
restart and restored, unsupported knobs backed off, failures classified and audited."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest

from koordlet.errors import ConfigError
from koordlet.resourceexecutor.sysctl import ORIGINALS_FILE, SysctlExecutor, SysctlUpdate
from koordlet.resourceexecutor.update import Outcome
from koordlet.system.hostpaths import HostPaths
from koordlet.system.sysfiles import (
    MEMCG_REAP_BACKGROUND,
    MIN_FREE_KBYTES,
    WATERMARK_SCALE_FACTOR,
    Root,
    SysFile,
    sched_features_path,
)
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit, RecordingWriter
from tests.unit.resourceexecutor.fakesysctl import with_features

OWNER = "test: systemStrategy"


@pytest.fixture
def paths(tmp_path: Path) -> HostPaths:
    paths = HostPaths.under(tmp_path / "host")
    vm = Path(paths.proc_root, "sys", "vm")
    vm.mkdir(parents=True)
    (vm / "min_free_kbytes").write_text("67584\n")
    (vm / "watermark_scale_factor").write_text("10\n")
    Path(paths.sys_root, "kernel", "mm").mkdir(parents=True)  # no memcg_reaper: not an Alibaba kernel
    return paths


def _executor(paths: HostPaths, tmp_path: Path, **kwargs: object) -> tuple[SysctlExecutor, MemoryAudit]:
    audit = MemoryAudit()
    executor = SysctlExecutor(paths, kwargs.pop("clock", FakeClock()), audit,  # type: ignore[arg-type]
                              originals_path=str(tmp_path / "state" / ORIGINALS_FILE), **kwargs)  # type: ignore[arg-type]
    return executor, audit


def _read(paths: HostPaths, file: SysFile) -> str:
    return Path(file.path(paths)).read_text().strip()


def test_a_write_keeps_the_value_found_first_and_restore_puts_it_back(paths: HostPaths, tmp_path: Path) -> None:
    executor, audit = _executor(paths, tmp_path)
    assert executor.apply(SysctlUpdate(MIN_FREE_KBYTES, 167772, OWNER)).outcome is Outcome.WRITTEN
    assert executor.apply(SysctlUpdate(MIN_FREE_KBYTES, 200000, OWNER)).outcome is Outcome.WRITTEN
    assert _read(paths, MIN_FREE_KBYTES) == "200000"
    assert executor.original(MIN_FREE_KBYTES) == "67584"  # the first value found, not koordlet's previous one
    assert json.loads((tmp_path / "state" / ORIGINALS_FILE).read_text()) == {"min_free_kbytes": "67584"}
    assert [(e.resource, e.old, e.new, e.owner, e.outcome) for e in audit.entries] == [
        ("min_free_kbytes", "67584", "167772", OWNER, "written"),
        ("min_free_kbytes", "167772", "200000", OWNER, "written")]

    restored = executor.restore(MIN_FREE_KBYTES, "test: off")
    assert restored is not None and restored.outcome is Outcome.WRITTEN
    assert _read(paths, MIN_FREE_KBYTES) == "67584"
    assert executor.original(MIN_FREE_KBYTES) is None
    assert json.loads((tmp_path / "state" / ORIGINALS_FILE).read_text()) == {}
    assert executor.restore(MIN_FREE_KBYTES, "test: off") is None  # nothing left to put back


def test_after_a_restart_the_original_is_still_the_operators(paths: HostPaths, tmp_path: Path) -> None:
    first, _ = _executor(paths, tmp_path)
    first.apply(SysctlUpdate(WATERMARK_SCALE_FACTOR, 150, OWNER))
    again, _ = _executor(paths, tmp_path)  # a new process: the file now holds koordlet's 150
    again.apply(SysctlUpdate(WATERMARK_SCALE_FACTOR, 200, OWNER))
    assert again.original(WATERMARK_SCALE_FACTOR) == "10"
    again.restore(WATERMARK_SCALE_FACTOR, "test: off")
    assert _read(paths, WATERMARK_SCALE_FACTOR) == "10"


def test_an_unchanged_value_is_not_written_nor_audited(paths: HostPaths, tmp_path: Path) -> None:
    writer = RecordingWriter()
    executor, audit = _executor(paths, tmp_path, writer=writer)
    assert executor.apply(SysctlUpdate(WATERMARK_SCALE_FACTOR, 10, OWNER)).outcome is Outcome.SKIPPED_UNCHANGED
    assert writer.attempts == [] and audit.entries == []
    assert executor.original(WATERMARK_SCALE_FACTOR) is None  # koordlet changed nothing: nothing to restore


def test_a_value_drifted_behind_koordlets_back_is_written_again(paths: HostPaths, tmp_path: Path) -> None:
    executor, _ = _executor(paths, tmp_path)
    executor.apply(SysctlUpdate(WATERMARK_SCALE_FACTOR, 150, OWNER))
    Path(WATERMARK_SCALE_FACTOR.path(paths)).write_text("30\n")  # an operator's sysctl -w
    assert executor.apply(SysctlUpdate(WATERMARK_SCALE_FACTOR, 150, OWNER)).outcome is Outcome.WRITTEN
    assert _read(paths, WATERMARK_SCALE_FACTOR) == "150"
    assert executor.original(WATERMARK_SCALE_FACTOR) == "10"


@pytest.mark.parametrize(("file", "value", "error"), [
    (MIN_FREE_KBYTES, 1677, "min_free_kbytes: 1677 is outside [10240, 10485760]"),
    (WATERMARK_SCALE_FACTOR, 401, "watermark_scale_factor: 401 is outside [10, 400]"),
    (MEMCG_REAP_BACKGROUND, 2, "memcg_reap_background: 2 is outside [0, 1]"),
])
def test_a_value_out_of_bounds_is_invalid_and_nothing_is_touched(paths: HostPaths, tmp_path: Path, file: SysFile,
                                                                  value: int, error: str) -> None:
    writer = RecordingWriter()
    executor, audit = _executor(paths, tmp_path, writer=writer)
    result = executor.apply(SysctlUpdate(file, value, OWNER))
    assert (result.outcome, result.error) == (Outcome.INVALID, error)
    assert writer.attempts == [] and audit.entries == []


def test_a_knob_the_kernel_lacks_is_unsupported_and_not_asked_again_before_the_backoff(
        paths: HostPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    executor, audit = _executor(paths, tmp_path, clock=clock, unsupported_retry_seconds=600.0)
    caplog.set_level(logging.INFO, logger="koordlet.resourceexecutor.sysctl")
    first = executor.apply(SysctlUpdate(MEMCG_REAP_BACKGROUND, 1, OWNER))
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "this kernel has no memcg_reap_background" in first.error
    clock.advance(60)
    again = executor.apply(SysctlUpdate(MEMCG_REAP_BACKGROUND, 1, OWNER))
    assert again.outcome is Outcome.UNSUPPORTED and "not retried" not in (again.error or "")
    assert [r.getMessage() for r in caplog.records] == ["kernel knob write failed"]  # once, not per round
    assert audit.entries == [] and executor.original(MEMCG_REAP_BACKGROUND) is None
    # A kernel that gained the knob (a reboot into another kernel) is found once the backoff ends.
    reaper = Path(MEMCG_REAP_BACKGROUND.path(paths))
    reaper.parent.mkdir(parents=True)
    reaper.write_text("0\n")
    clock.advance(600)
    assert executor.apply(SysctlUpdate(MEMCG_REAP_BACKGROUND, 1, OWNER)).outcome is Outcome.WRITTEN


@pytest.mark.parametrize(("code", "outcome"), [(errno.EACCES, Outcome.FAILED), (errno.EINVAL, Outcome.UNSUPPORTED)])
def test_a_refused_write_is_classified_audited_and_keeps_the_original(
        paths: HostPaths, tmp_path: Path, code: int, outcome: Outcome) -> None:
    writer = RecordingWriter(fail={MIN_FREE_KBYTES.path(paths): code})
    executor, audit = _executor(paths, tmp_path, writer=writer)
    result = executor.apply(SysctlUpdate(MIN_FREE_KBYTES, 167772, OWNER))
    assert result.outcome is outcome
    assert result.error is not None and MIN_FREE_KBYTES.path(paths) in result.error
    assert [(e.old, e.new, e.outcome) for e in audit.entries] == [("67584", "167772", outcome.value)]
    assert _read(paths, MIN_FREE_KBYTES) == "67584"


def test_unreadable_originals_are_dropped_with_one_warning(paths: HostPaths, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / ORIGINALS_FILE).write_text("{not json")
    executor, _ = _executor(paths, tmp_path)
    assert executor.restorable() == {}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "kernel knob originals unreadable; starting without them"]


def test_only_known_descriptors_and_owned_updates_are_accepted() -> None:
    stranger = SysFile("min_free_kbytes", Root.PROC, "sys/vm/other", 0, None, False, "not registered")
    with pytest.raises(ConfigError, match="unknown kernel knob 'min_free_kbytes'"):
        SysctlUpdate(stranger, 1, OWNER)
    with pytest.raises(ConfigError, match="needs an owner"):
        SysctlUpdate(MIN_FREE_KBYTES, 20000, "")


# ------------------------------------------------------------------------------------ scheduler features


def test_a_feature_is_flipped_alone_and_restored(paths: HostPaths, tmp_path: Path) -> None:
    kernel = with_features(paths)
    executor, audit = _executor(paths, tmp_path, writer=kernel)
    assert executor.apply_feature("HRTICK", True, OWNER).outcome is Outcome.WRITTEN
    assert executor.apply_feature("HRTICK", True, OWNER).outcome is Outcome.SKIPPED_UNCHANGED
    assert executor.apply_feature("WAKEUP_PREEMPTION", True, OWNER).outcome is Outcome.SKIPPED_UNCHANGED
    assert executor.sched_features() == {"GENTLE_FAIR_SLEEPERS": True, "HRTICK": True, "WAKEUP_PREEMPTION": True}
    assert executor.restorable() == {"sched_features:HRTICK": "0"}
    assert [(e.resource, e.old, e.new) for e in audit.entries] == [("sched_features", "NO_HRTICK", "HRTICK")]
    restored = executor.restore_feature("HRTICK", "test: off")
    assert restored is not None and restored.outcome is Outcome.WRITTEN
    assert kernel.writes == ["HRTICK", "NO_HRTICK"]
    assert executor.sched_features()["HRTICK"] is False and executor.restorable() == {}


@pytest.mark.parametrize(("name", "error"), [
    ("NO_HRTICK", "'NO_HRTICK' is not a scheduler feature name"),
    ("hrtick", "'hrtick' is not a scheduler feature name"),
    ("TTWU_QUEUE", "this kernel has no scheduler feature TTWU_QUEUE"),
])
def test_a_feature_name_the_kernel_would_refuse_is_invalid(paths: HostPaths, tmp_path: Path, name: str,
                                                          error: str) -> None:
    kernel = with_features(paths)
    executor, _ = _executor(paths, tmp_path, writer=kernel)
    result = executor.apply_feature(name, True, OWNER)
    assert result.outcome is Outcome.INVALID and error in (result.error or "")
    assert kernel.writes == []


def test_without_debugfs_features_are_unsupported(paths: HostPaths, tmp_path: Path) -> None:
    executor, _ = _executor(paths, tmp_path)
    result = executor.apply_feature("HRTICK", True, OWNER)
    assert result.outcome is Outcome.UNSUPPORTED
    assert "this kernel has no sched_features" in (result.error or "")


def test_a_kernel_since_5_13_keeps_features_in_debugfs_sched_directory(paths: HostPaths, tmp_path: Path) -> None:
    new = Path(paths.sys_root, "kernel", "debug", "sched", "features")
    new.parent.mkdir(parents=True)
    new.write_text("NO_HRTICK\n")
    assert sched_features_path(paths) == str(new)
    executor, _ = _executor(paths, tmp_path)
    assert executor.sched_features() == {"HRTICK": False}
