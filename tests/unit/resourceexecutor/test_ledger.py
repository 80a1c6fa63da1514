"""WriteLedger on its own: skip-unchanged within the force-update window, refusal backoff by value, log once
per (target, kind of failure), forgetting what is below a directory found gone, and pruning on a timer."""

from __future__ import annotations

import errno
import logging

import pytest

from koordlet.errors import ConfigError
from koordlet.resourceexecutor.ledger import WriteLedger, check_timings, classify, failure_kind
from koordlet.resourceexecutor.update import Outcome
from tests.unit.resourceexecutor.fakes import FakeClock

LOGGER = "tests.ledger"


def make(clock: FakeClock) -> WriteLedger:
    return WriteLedger(logging.getLogger(LOGGER), clock, 60.0, 600.0,
                       failure_message="update not applied", recovery_message="write succeeds again")


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_same_text_is_skipped_within_the_window_only() -> None:
    clock = FakeClock()
    ledger = make(clock)
    assert ledger.skip("/cg/a/cpu.shares", "2", clock()) is None
    ledger.written("/cg/a/cpu.shares", "2", clock())
    assert ledger.skip("/cg/a/cpu.shares", "2", clock()) == (Outcome.SKIPPED_UNCHANGED, None)
    assert ledger.skip("/cg/a/cpu.shares", "3", clock()) is None
    assert ledger.skip("/cg/a/cpu.shares", "2", clock(), use_cache=False) is None
    clock.advance(60)
    assert ledger.skip("/cg/a/cpu.shares", "2", clock()) is None
    assert ledger.last_written("/cg/a/cpu.shares") == "2"
    ledger.prune(clock())  # kept a second window: the executor verifies it before rewriting
    assert ledger.remembers("/cg/a/cpu.shares", "2") and not ledger.remembers("/cg/a/cpu.shares", "3")
    clock.advance(60)
    ledger.prune(clock())
    assert ledger.last_written("/cg/a/cpu.shares") is None
    assert not ledger.remembers("/cg/a/cpu.shares", "2")


def test_a_refused_value_backs_off_until_it_changes_or_the_backoff_ends(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    ledger = make(clock)
    target = "/no/such/dir/cpu.cfs_quota_us"
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert ledger.failed(target, "5", errno.EINVAL, clock(), "refused") is Outcome.UNSUPPORTED
    assert ledger.skip(target, "5", clock()) == (
        Outcome.UNSUPPORTED, "refused; not retried for 600 s unless the value changes")
    assert ledger.skip(target, "6", clock()) is None
    # The same kind again is not logged; a success ends the streak, and that is logged once.
    ledger.failed(target, "6", errno.EINVAL, clock(), "refused again")
    ledger.written(target, "7", clock())
    assert messages(caplog) == ["update not applied", "write succeeds again"]
    clock.advance(600)
    assert ledger.refusal(target, "6", clock()) is None
    ledger.failed(target, "5", errno.EOPNOTSUPP, clock(), "no such operation")
    assert ledger.refusal(target, "anything", clock()) is not None  # any value: the operation is missing


def test_a_gone_directory_takes_what_is_below_it() -> None:
    clock = FakeClock()
    ledger = make(clock)
    ledger.written("/cg/pod/c1/cpu.shares", "2", clock())
    ledger.written("/cg/pod/c1/cpu.cfs_quota_us", "100", clock())
    ledger.written("/cg/pod2/cpu.shares", "2", clock())
    assert ledger.failed("/cg/pod/c1/cpu.shares", "3", errno.ENODEV, clock(), "gone") is Outcome.GONE
    assert ledger.last_written("/cg/pod/c1/cpu.cfs_quota_us") is None
    assert ledger.last_written("/cg/pod2/cpu.shares") == "2"
    ledger.forget("/cg/pod2")
    assert ledger.last_written("/cg/pod2/cpu.shares") is None


def test_classification_uses_the_errno_classes() -> None:
    missing_dir = "/no/such/dir/file"
    assert classify(errno.ENOENT, missing_dir) is Outcome.GONE
    assert classify(errno.ENOENT, __file__) is Outcome.UNSUPPORTED  # its directory exists: the file is absent
    assert classify(errno.ESRCH, missing_dir) is Outcome.GONE
    assert classify(errno.EINVAL, missing_dir) is Outcome.UNSUPPORTED
    assert classify(errno.ENOTTY, missing_dir) is Outcome.UNSUPPORTED
    assert classify(errno.EACCES, missing_dir) is Outcome.FAILED
    assert failure_kind(Outcome.FAILED, errno.EIO) == "failed:EIO"
    assert failure_kind(Outcome.INVALID) == "invalid"


def test_negative_timings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="force_update_seconds"):
        check_timings(-1, 0)
    with pytest.raises(ConfigError, match="unsupported_retry_seconds"):
        check_timings(0, -1)
