"""CoreSchedExecutor over a fake ``koordlet.native``: the exact prctl call sequence (Koordinator's
addCookie / Assign / Clear), the relay thread, ESRCH as gone, an unsupported kernel remembered, audit."""

from __future__ import annotations

import errno
import logging
import os
import threading
from dataclasses import dataclass, field

import pytest

from koordlet.errors import from_errno
from koordlet.resourceexecutor.coresched import CoreSchedExecutor, CoreSchedScope
from koordlet.resourceexecutor.update import Outcome
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

LOGGER = "koordlet.resourceexecutor.coresched"
T, TG = CoreSchedScope.THREAD, CoreSchedScope.THREAD_GROUP


@dataclass
class FakeNative:
    """The ``sched_core_*`` functions of koordlet.native over an in-memory kernel: cookies per task and
    per calling thread (share_to/share_from act on the caller).  ``fail`` maps (op, pid) or op to an
    errno raised the way koordlet.native raises it."""

    cookies: dict[int, int] = field(default_factory=dict)
    thread_cookies: dict[int, int] = field(default_factory=dict)
    calls: list[tuple[str, int, int]] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    fail: dict[object, int] = field(default_factory=dict)
    next_cookie: int = 0x1000

    def _enter(self, op: str, pid: int, scope: int) -> None:
        self.calls.append((op, pid, scope))
        self.threads.append(threading.get_ident())
        code = self.fail.get((op, pid), self.fail.get(op))
        if code is not None:
            raise from_errno(code, f"PR_SCHED_CORE {op} pid {pid}")

    def sched_core_get(self, pid: int = 0) -> int:
        self._enter("get", pid, T)
        if pid == 0:
            return self.thread_cookies.get(threading.get_ident(), 0)
        return self.cookies.get(pid, 0)

    def sched_core_create(self, pid: int, scope: int) -> None:
        self._enter("create", pid, scope)
        self.cookies[pid] = self.next_cookie
        self.next_cookie += 1

    def sched_core_share_to(self, pid: int, scope: int) -> None:
        self._enter("share_to", pid, scope)
        self.cookies[pid] = self.thread_cookies.get(threading.get_ident(), 0)

    def sched_core_share_from(self, pid: int, scope: int = 0) -> None:
        self._enter("share_from", pid, scope)
        self.thread_cookies[threading.get_ident()] = self.cookies.get(pid, 0)


def make(native: FakeNative | None = None) -> tuple[CoreSchedExecutor, FakeNative, FakeClock, MemoryAudit]:
    native = native or FakeNative()
    clock, audit = FakeClock(), MemoryAudit()
    return CoreSchedExecutor(native, audit, clock), native, clock, audit


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def test_assign_group_follows_koordinators_add_cookie_sequence() -> None:
    executor, native, _, audit = make()
    result = executor.assign_group(100, [100, 101, 102, 101], "coresched: group g1")
    assert native.calls == [
        ("get", 100, T),
        ("create", 100, TG),
        ("get", 100, T),
        ("share_from", 100, T),
        ("share_to", 101, TG),
        ("share_to", 102, TG),
    ]
    assert result.ok and result.outcome is Outcome.DONE
    assert (result.cookie, result.applied, result.gone) == (0x1000, (100, 101, 102), ())
    assert native.cookies == {100: 0x1000, 101: 0x1000, 102: 0x1000}
    # share_from/share_to ran on one relay thread, not on the caller's: the caller keeps cookie 0.
    me = threading.get_ident()
    relay = native.threads[3]
    assert native.threads[:3] == [me, me, me]
    assert native.threads[3:] == [relay, relay, relay] and relay != me
    assert native.thread_cookies.get(me, 0) == 0
    assert [(e.path, e.resource, e.new, e.owner, e.outcome) for e in audit.entries] == [
        ("pid:100", "core_sched", "create scope=thread_group", "coresched: group g1", "done"),
        ("pid:100", "core_sched", "share_from scope=thread", "coresched: group g1", "done"),
        ("pid:101", "core_sched", "share_to scope=thread_group", "coresched: group g1", "done"),
        ("pid:102", "core_sched", "share_to scope=thread_group", "coresched: group g1", "done"),
    ]


def test_assign_gives_the_cookie_of_a_sibling() -> None:
    native = FakeNative(cookies={100: 0x77})
    executor, native, _, _ = make(native)
    result = executor.assign(100, [103, 104], "coresched: join g1", scope=CoreSchedScope.PROCESS_GROUP)
    assert native.calls == [("share_from", 100, T), ("share_to", 103, 2), ("share_to", 104, 2)]
    assert result.applied == (103, 104)
    assert native.cookies == {100: 0x77, 103: 0x77, 104: 0x77}
    assert native.thread_cookies.get(threading.get_ident(), 0) == 0


def test_clear_shares_the_default_cookie_from_a_fresh_thread() -> None:
    native = FakeNative(cookies={101: 0x77, 102: 0x77})
    executor, native, _, _ = make(native)
    result = executor.clear([101, 102], "coresched: disabled")
    assert native.calls == [("share_to", 101, TG), ("share_to", 102, TG)]
    assert native.threads[0] != threading.get_ident()
    assert (result.ok, result.cookie, result.applied) == (True, 0, (101, 102))
    assert native.cookies == {101: 0, 102: 0}


def test_exited_tasks_are_gone_not_errors(caplog: pytest.LogCaptureFixture) -> None:
    native = FakeNative(fail={("share_to", 102): errno.ESRCH})
    executor, native, _, audit = make(native)
    result = executor.assign_group(100, [101, 102, 103], "t")
    assert result.ok
    assert (result.applied, result.gone) == ((100, 101, 103), (102,))
    assert [e.outcome for e in audit.entries if e.path == "pid:102"] == ["gone"]
    assert warnings(caplog) == []


def test_a_leader_that_exited_stops_the_sequence() -> None:
    native = FakeNative(fail={("get", 100): errno.ESRCH})
    executor, native, _, audit = make(native)
    result = executor.assign_group(100, [101], "t")
    assert result.outcome is Outcome.GONE
    assert native.calls == [("get", 100, T)]
    assert audit.entries == []


def test_a_source_that_exited_before_share_from_assigns_nothing() -> None:
    native = FakeNative(fail={("share_from", 100): errno.ESRCH})
    executor, native, _, _ = make(native)
    result = executor.assign(100, [101], "t")
    assert (result.outcome, result.applied) == (Outcome.GONE, ())
    assert native.calls == [("share_from", 100, T)]


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        (errno.EINVAL, "CONFIG_SCHED_CORE"),
        (errno.ENODEV, "no SMT siblings"),
        (errno.EOPNOTSUPP, "PR_SCHED_CORE create pid 100"),
    ],
)
def test_an_unsupported_kernel_is_remembered_and_logged_once(
    caplog: pytest.LogCaptureFixture, code: int, fragment: str
) -> None:
    executor, native, clock, _ = make(FakeNative(fail={"create": code}))
    first = executor.create(100, TG, "t")
    assert native.calls == [("create", 100, TG)]
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and fragment in first.error
    reason = executor.unsupported_reason
    assert reason == first.error
    calls = len(native.calls)
    # No syscall every tick: every call answers from memory until the retry time.
    for _ in range(3):
        assert executor.assign_group(100, [101], "t").outcome is Outcome.UNSUPPORTED
        assert executor.get(100).outcome is Outcome.UNSUPPORTED
        assert executor.clear([101], "t").outcome is Outcome.UNSUPPORTED
        assert executor.share_to(101, TG, "t").error == reason
    assert len(native.calls) == calls
    assert len(warnings(caplog)) == 1
    clock.advance(600)
    native.fail.clear()
    assert executor.create(100, TG, "t").ok
    assert executor.unsupported_reason is None


def test_unsupported_on_the_first_call_stops_assign_group() -> None:
    native = FakeNative(fail={"get": errno.EINVAL})
    executor, native, _, audit = make(native)
    result = executor.assign_group(100, [101], "t")
    assert result.outcome is Outcome.UNSUPPORTED
    assert result.error is not None and "kernel built without CONFIG_SCHED_CORE" in result.error
    assert native.calls == [("get", 100, T)]
    assert audit.entries == []


def test_other_errors_fail_without_being_remembered() -> None:
    native = FakeNative(fail={("share_to", 101): errno.EPERM})
    executor, native, _, _ = make(native)
    result = executor.assign_group(100, [101, 102], "t")
    assert result.outcome is Outcome.DONE and not result.ok
    assert result.applied == (100, 102)
    assert [pid for pid, _ in result.failed] == [101]
    assert result.error is not None and "share_to pid 101" in result.error
    assert executor.unsupported_reason is None
    assert executor.share_to(101, TG, "t").outcome is Outcome.FAILED
    assert native.calls.count(("share_to", 101, TG)) == 2


@pytest.mark.parametrize("pid", [0, -5, True])
def test_pids_that_would_touch_koordlet_itself_are_refused(pid: int) -> None:
    executor, native, _, _ = make()
    assert executor.create(pid, TG, "t").outcome is Outcome.INVALID
    assert executor.get(pid).outcome is Outcome.INVALID
    assert executor.assign_group(pid, [5], "t").outcome is Outcome.INVALID
    assert native.calls == []


def test_get_reads_without_audit() -> None:
    executor, _, _, audit = make(FakeNative(cookies={42: 0xABC}))
    result = executor.get(42)
    assert (result.ok, result.cookie) == (True, 0xABC)
    assert audit.entries == []


def test_probe() -> None:
    executor, native, _, _ = make()
    assert executor.probe() is None
    assert native.calls == [("get", 0, T)]
    executor, native, _, _ = make(FakeNative(fail={"get": errno.EINVAL}))
    reason = executor.probe()
    assert reason is not None and "CONFIG_SCHED_CORE" in reason


def test_this_host_answers_without_raising() -> None:
    # The real C core: this kernel is built without core scheduling (test-host.md), so the probe must
    # report it; a host that has it answers None.  get() only reads.
    executor = CoreSchedExecutor(audit=MemoryAudit())
    reason = executor.probe()
    result = executor.get(os.getpid())
    if reason is None:
        assert result.ok
    else:
        assert "PR_SCHED_CORE" in reason
        assert result.outcome is Outcome.UNSUPPORTED
