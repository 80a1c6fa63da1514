"""The single caller of ``prctl(PR_SCHED_CORE)``: core-scheduling cookies of tasks
(Documentation/admin-guide/hw-vuln/core-scheduling.rst; Koordinator ``util/system/core_sched*.go``).

Tasks with the same cookie may share an SMT core; tasks with different cookies never run on siblings
at once.  The calls:

* ``create(pid, scope)`` gives the tasks a new unique cookie;
* ``share_to(pid, scope)`` pushes the *calling thread's* cookie to the tasks;
* ``share_from(pid)`` pulls a thread's cookie onto the calling thread;
* ``get(pid)`` reads a thread's cookie (0 = none).

Because share_to/share_from act on the calling thread, Koordinator runs them in a fresh OS thread that
exits afterwards (``GoWithNewThread``): the relay starts with the agent's cookie 0 and whatever it
pulls in dies with it, so koordlet's own threads keep cookie 0.  :meth:`CoreSchedExecutor.assign`,
:meth:`~CoreSchedExecutor.clear` and :meth:`~CoreSchedExecutor.assign_group` do the same with a
short-lived ``threading.Thread`` (one OS thread each, never reused).

Errors are classified like cgroup writes: ESRCH is a task that exited (GONE, not an error); EINVAL
(kernel without CONFIG_SCHED_CORE, the answer on the test host), ENODEV (no SMT) and EOPNOTSUPP mean
this host cannot do core scheduling: the reason is logged once and remembered, and further calls
return UNSUPPORTED without a syscall until ``unsupported_retry_seconds`` have passed.
"""

from __future__ import annotations

import enum
import errno
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from koordlet.errors import ConfigError, KoordletError
from koordlet.metrics.executor import ResourceExecutorMetrics
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.executor import DEFAULT_UNSUPPORTED_RETRY_SECONDS, check_timings

log = logging.getLogger(__name__)

AUDIT_RESOURCE = "core_sched"
"""The ``resource`` of the audit entries and the ``type`` label of the metric."""
DEFAULT_COOKIE = 0

_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP, errno.ENOSYS})
_T = TypeVar("_T")


class CoreSchedScope(enum.IntEnum):
    """Which tasks a call covers: the kernel's PIDTYPE_PID / PIDTYPE_TGID / PIDTYPE_PGID (uapi prctl.h
    ``PR_SCHED_CORE_SCOPE_*``; koordlet.native's ``SchedCoreScope`` has the same values)."""

    THREAD = 0
    THREAD_GROUP = 1
    PROCESS_GROUP = 2


class CallOutcome(enum.Enum):
    """What happened to one prctl call."""

    DONE = "done"
    GONE = "gone"
    """The task exited (ESRCH): an expected race."""
    UNSUPPORTED = "unsupported"
    """The kernel cannot do core scheduling here (EINVAL/ENODEV/EOPNOTSUPP), now or remembered."""
    FAILED = "failed"
    """Any other error (EPERM: not allowed to ptrace the task...)."""
    INVALID = "invalid"
    """Refused before any call (pid <= 0 would act on koordlet itself)."""


@dataclass(frozen=True)
class CallResult:
    """One prctl call; ``cookie`` is set by a successful ``get``."""

    op: str
    pid: int
    scope: CoreSchedScope
    outcome: CallOutcome
    cookie: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is CallOutcome.DONE


@dataclass(frozen=True)
class GroupResult:
    """A multi-task operation (:meth:`CoreSchedExecutor.assign_group`, ``assign``, ``clear``)."""

    outcome: CallOutcome
    """DONE when the source was usable (even if some targets exited or failed: see the lists), GONE when
    the source task exited, UNSUPPORTED, FAILED when the cookie could not be made or pulled."""
    cookie: int | None = None
    """The cookie now on the tasks (0 after ``clear``), when known."""
    applied: tuple[int, ...] = ()
    """Tasks that hold the cookie now (the source included)."""
    gone: tuple[int, ...] = ()
    failed: tuple[tuple[int, str], ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is CallOutcome.DONE and not self.failed


class CoreSchedExecutor:
    """Fronts the C core's ``sched_core_*`` calls with classification, audit and a remembered
    "unsupported" state.

    ``native_module`` is ``koordlet.native`` (imported on first use when None) or a stand-in with the
    same ``sched_core_get/create/share_to/share_from`` functions; ``clock`` (monotonic seconds) decides
    when an unsupported kernel is asked again.  Thread-safe: one call at a time.
    """

    def __init__(
        self,
        native_module: Any = None,
        audit: Auditor | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: ResourceExecutorMetrics | None = None,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    ) -> None:
        check_timings(0.0, unsupported_retry_seconds)
        self._native = native_module
        self._audit = audit
        self._clock = clock
        self._metrics = metrics
        self._retry_seconds = unsupported_retry_seconds
        self._lock = threading.Lock()
        self._unsupported: str | None = None
        self._retry_at = 0.0

    # ------------------------------------------------------------------------------------------- public

    @property
    def unsupported_reason(self) -> str | None:
        """Why core scheduling is unavailable, once a call (or :meth:`probe`) found out; else None."""
        return self._unsupported

    def probe(self) -> str | None:
        """Asks the kernel about the calling thread's cookie; returns the reason core scheduling is
        unavailable, or None when it works."""
        with self._lock:
            self._call("get", 0, CoreSchedScope.THREAD, "probe", audit=False)
            return self._unsupported

    def get(self, pid: int) -> CallResult:
        """The cookie of thread ``pid`` (``result.cookie``); reads are not audited."""
        with self._lock:
            return self._checked("get", pid, CoreSchedScope.THREAD, "", audit=False)

    def create(self, pid: int, scope: CoreSchedScope, owner: str) -> CallResult:
        """Gives the tasks of ``pid`` (per ``scope``) a new unique cookie."""
        with self._lock:
            return self._checked("create", pid, scope, owner)

    def share_to(self, pid: int, scope: CoreSchedScope, owner: str) -> CallResult:
        """Pushes the *calling thread's* cookie to the tasks; see :meth:`assign` and :meth:`clear`."""
        with self._lock:
            return self._checked("share_to", pid, scope, owner)

    def share_from(self, pid: int, owner: str) -> CallResult:
        """Pulls thread ``pid``'s cookie onto the *calling thread* (the kernel takes only a thread)."""
        with self._lock:
            return self._checked("share_from", pid, CoreSchedScope.THREAD, owner)

    def assign_group(
        self, leader_pid: int, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> GroupResult:
        """A new cookie for a group: Koordinator's ``addCookie`` (hooks/coresched/helper.go) —
        get(leader), create(leader, scope), get(leader) for the new cookie, then in a relay thread
        share_from(leader) and share_to(p, scope) for every other pid."""
        _check_owner(owner)
        others = [p for p in dict.fromkeys(pids) if p != leader_pid]
        with self._lock:
            before = self._checked("get", leader_pid, CoreSchedScope.THREAD, owner, audit=False)
            if not before.ok:
                return GroupResult(before.outcome, error=before.error)
            if before.cookie:
                # Koordinator logs and goes on: the pod's group probably changed.
                log.debug("core sched leader already has a cookie", extra={"pid": leader_pid, "cookie": before.cookie})
            created = self._checked("create", leader_pid, scope, owner)
            if not created.ok:
                return GroupResult(created.outcome, error=created.error)
            after = self._checked("get", leader_pid, CoreSchedScope.THREAD, owner, audit=False)
            if not after.ok:
                return GroupResult(after.outcome, error=after.error)
            if not after.cookie:
                error = f"pid {leader_pid} still has the default cookie after create"
                return GroupResult(CallOutcome.FAILED, error=error)
            result = self._relay(leader_pid, others, scope, owner)
        return GroupResult(
            CallOutcome.DONE,
            after.cookie,
            (leader_pid, *result.applied),
            result.gone,
            result.failed,
            result.error,
        )

    def assign(
        self, from_pid: int, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> GroupResult:
        """Gives ``pids`` the cookie of thread ``from_pid`` (Koordinator ``CoreSched.Assign``): in a relay
        thread, share_from(from_pid) then share_to(p, scope) for each pid."""
        _check_owner(owner)
        targets = [p for p in dict.fromkeys(pids) if p != from_pid]
        with self._lock:
            return self._relay(from_pid, targets, scope, owner)

    def clear(
        self, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> GroupResult:
        """Resets ``pids`` to the default cookie 0 (Koordinator ``CoreSched.Clear``): share_to from a relay
        thread, which starts with koordlet's cookie 0."""
        _check_owner(owner)
        targets = list(dict.fromkeys(pids))
        with self._lock:
            return _in_new_thread(lambda: self._share_each(targets, scope, owner, DEFAULT_COOKIE))

    # ------------------------------------------------------------------------------------------ helpers

    def _relay(self, from_pid: int, targets: list[int], scope: CoreSchedScope, owner: str) -> GroupResult:
        def run() -> GroupResult:
            pulled = self._checked("share_from", from_pid, CoreSchedScope.THREAD, owner)
            if not pulled.ok:
                return GroupResult(pulled.outcome, error=pulled.error)
            return self._share_each(targets, scope, owner, None)

        return _in_new_thread(run)

    def _share_each(self, targets: list[int], scope: CoreSchedScope, owner: str, cookie: int | None) -> GroupResult:
        applied: list[int] = []
        gone: list[int] = []
        failed: list[tuple[int, str]] = []
        for pid in targets:
            result = self._checked("share_to", pid, scope, owner)
            if result.ok:
                applied.append(pid)
            elif result.outcome is CallOutcome.GONE:
                gone.append(pid)
            elif result.outcome is CallOutcome.UNSUPPORTED:
                return GroupResult(result.outcome, cookie, tuple(applied), tuple(gone), tuple(failed), result.error)
            else:
                failed.append((pid, result.error or result.outcome.value))
        error = "; ".join(m for _, m in failed) or None
        return GroupResult(CallOutcome.DONE, cookie, tuple(applied), tuple(gone), tuple(failed), error)

    def _checked(self, op: str, pid: int, scope: CoreSchedScope, owner: str, *, audit: bool = True) -> CallResult:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            # pid 0 means the calling thread: koordlet itself must keep the default cookie.
            message = f"PR_SCHED_CORE {op}: pid must be a positive int, got {pid!r}"
            log.warning("core sched call refused", extra={"error": message})
            return CallResult(op, pid, scope, CallOutcome.INVALID, error=message)
        if audit:
            _check_owner(owner)
        # No locking here: a relay thread runs this while its caller holds the lock and waits for it.
        return self._call(op, pid, scope, owner, audit=audit)

    def _call(self, op: str, pid: int, scope: CoreSchedScope, owner: str, *, audit: bool) -> CallResult:
        now = self._clock()
        if self._unsupported is not None and now < self._retry_at:
            return CallResult(op, pid, scope, CallOutcome.UNSUPPORTED, error=self._unsupported)
        started = time.perf_counter()
        cookie: int | None = None
        try:
            native = self._load()
            if op == "get":
                cookie = int(native.sched_core_get(pid))
            elif op == "create":
                native.sched_core_create(pid, int(scope))
            elif op == "share_to":
                native.sched_core_share_to(pid, int(scope))
            else:
                native.sched_core_share_from(pid, int(scope))
        except (OSError, KoordletError) as exc:
            elapsed = time.perf_counter() - started
            result = self._failed(op, pid, scope, exc, now)
        else:
            elapsed = time.perf_counter() - started
            if self._unsupported is not None:
                log.info("core scheduling works again", extra={"pid": pid})
                self._unsupported = None
            result = CallResult(op, pid, scope, CallOutcome.DONE, cookie)
        if not audit:
            return result
        if self._metrics is not None:
            self._metrics.observe(AUDIT_RESOURCE, result.ok, elapsed)
        if self._audit is not None:
            new = f"{op} scope={scope.name.lower()}"
            self._audit.record(AuditEntry(f"pid:{pid}", AUDIT_RESOURCE, None, new, owner, result.outcome.value,
                                          result.error))
        return result

    def _failed(self, op: str, pid: int, scope: CoreSchedScope, exc: BaseException, now: float) -> CallResult:
        code = getattr(exc, "errno", None)
        what = f"PR_SCHED_CORE {op} pid {pid} scope {scope.name.lower()}"
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if code == errno.ESRCH:
            return CallResult(op, pid, scope, CallOutcome.GONE, error=f"{what}: task exited (ESRCH)")
        if code in _UNSUPPORTED:
            reason = f"{what}: {detail}"
            if code == errno.EINVAL:
                reason += " (kernel built without CONFIG_SCHED_CORE)"
            elif code == errno.ENODEV:
                reason += " (no SMT siblings, so the kernel keeps core scheduling off)"
            if self._unsupported is None:
                log.warning("core scheduling unsupported", extra={"reason": reason})
            self._unsupported = reason
            self._retry_at = now + self._retry_seconds
            return CallResult(op, pid, scope, CallOutcome.UNSUPPORTED, error=reason)
        message = f"{what}: {detail}"
        log.warning("core sched call failed", extra={"error": message})
        return CallResult(op, pid, scope, CallOutcome.FAILED, error=message)

    def _load(self) -> Any:
        if self._native is None:
            try:
                self._native = importlib.import_module("koordlet.native")
            except ImportError as exc:
                raise Unavailable(f"C core not importable: {exc}") from exc
            if not getattr(self._native, "HAS_SCHED_CORE", False):
                self._native = None
                raise Unavailable("C core built without PR_SCHED_CORE (headers lacked it)")
        return self._native


class Unavailable(KoordletError, OSError):
    """The C core cannot make the call at all (not built, or built without PR_SCHED_CORE)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSYS, message)


def _check_owner(owner: str) -> None:
    if not owner:
        raise ConfigError("a core sched call needs an owner for the audit")


def _in_new_thread(fn: Callable[[], _T]) -> _T:
    """Runs ``fn`` in a new OS thread that exits afterwards (Koordinator ``GoWithNewThread``), so a cookie
    the relay pulls onto itself never stays on a koordlet thread."""
    box: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="koordlet-coresched-relay", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]
