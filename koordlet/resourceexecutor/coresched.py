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
(kernel without CONFIG_SCHED_CORE, the answer on the test host), ENODEV (no SMT) and the errnos of a
missing operation (EOPNOTSUPP, ENOSYS...) mean this host cannot do core scheduling: the reason is logged
once and remembered, and further calls return UNSUPPORTED without a syscall until
``unsupported_retry_seconds`` have passed (the same :class:`~koordlet.resourceexecutor.ledger.WriteLedger`
backoff as a refused cgroup write).
"""

from __future__ import annotations

import enum
import errno
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from koordlet.errors import UNSUPPORTED_ERRNOS, ConfigError, KoordletError
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.ledger import DEFAULT_UNSUPPORTED_RETRY_SECONDS, WriteLedger, check_timings
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.update import Outcome, Result

log = logging.getLogger(__name__)

AUDIT_RESOURCE = "core_sched"
"""The ``resource`` of the audit entries and the ``type`` label of the metric."""
DEFAULT_COOKIE = 0

# For prctl(PR_SCHED_CORE) EINVAL means a kernel without CONFIG_SCHED_CORE and ENODEV a CPU without SMT:
# both say the host cannot do it at all, unlike the same errnos from a cgroup write.
_UNSUPPORTED = UNSUPPORTED_ERRNOS | {errno.EINVAL, errno.ENODEV}
_HOST = "core_sched"
"""The ledger's one target: whether this host can do core scheduling at all."""
_T = TypeVar("_T")


class CoreSchedScope(enum.IntEnum):
    """Which tasks a call covers: the kernel's PIDTYPE_PID / PIDTYPE_TGID / PIDTYPE_PGID (uapi prctl.h
    ``PR_SCHED_CORE_SCOPE_*``; koordlet.native's ``SchedCoreScope`` has the same values)."""

    THREAD = 0
    THREAD_GROUP = 1
    PROCESS_GROUP = 2


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
        metrics: WriteSink | None = None,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    ) -> None:
        check_timings(0.0, unsupported_retry_seconds)
        self._native = native_module
        self._audit = audit
        self._clock = clock
        self._metrics: WriteSink = metrics if metrics is not None else NULL_SINK
        self._lock = threading.Lock()
        self._ledger = WriteLedger(log, clock, 0.0, unsupported_retry_seconds,
                                   failure_message="core scheduling unsupported",
                                   recovery_message="core scheduling works again")
        self._unsupported: str | None = None

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

    def get(self, pid: int) -> Result:
        """The cookie of thread ``pid`` (``result.cookie``); reads are not audited."""
        with self._lock:
            return self._checked("get", pid, CoreSchedScope.THREAD, "", audit=False)

    def create(self, pid: int, scope: CoreSchedScope, owner: str) -> Result:
        """Gives the tasks of ``pid`` (per ``scope``) a new unique cookie."""
        with self._lock:
            return self._checked("create", pid, scope, owner)

    def share_to(self, pid: int, scope: CoreSchedScope, owner: str) -> Result:
        """Pushes the *calling thread's* cookie to the tasks; see :meth:`assign` and :meth:`clear`."""
        with self._lock:
            return self._checked("share_to", pid, scope, owner)

    def share_from(self, pid: int, owner: str) -> Result:
        """Pulls thread ``pid``'s cookie onto the *calling thread* (the kernel takes only a thread)."""
        with self._lock:
            return self._checked("share_from", pid, CoreSchedScope.THREAD, owner)

    def assign_group(
        self, leader_pid: int, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> Result:
        """A new cookie for a group: Koordinator's ``addCookie`` (hooks/coresched/helper.go) —
        get(leader), create(leader, scope), get(leader) for the new cookie, then in a relay thread
        share_from(leader) and share_to(p, scope) for every other pid."""
        _check_owner(owner)
        others = [p for p in dict.fromkeys(pids) if p != leader_pid]
        with self._lock:
            before = self._checked("get", leader_pid, CoreSchedScope.THREAD, owner, audit=False)
            if not before.ok:
                return Result(None, before.outcome, error=before.error)
            if before.cookie:
                # Koordinator logs and goes on: the pod's group probably changed.
                log.debug("core sched leader already has a cookie", extra={"pid": leader_pid, "cookie": before.cookie})
            created = self._checked("create", leader_pid, scope, owner)
            if not created.ok:
                return Result(None, created.outcome, error=created.error)
            after = self._checked("get", leader_pid, CoreSchedScope.THREAD, owner, audit=False)
            if not after.ok:
                return Result(None, after.outcome, error=after.error)
            if not after.cookie:
                error = f"pid {leader_pid} still has the default cookie after create"
                return Result(None, Outcome.FAILED, error=error)
            result = self._relay(leader_pid, others, scope, owner)
        return Result(None, Outcome.DONE, error=result.error, cookie=after.cookie,
                      applied=(leader_pid, *result.applied), gone=result.gone, failed=result.failed)

    def assign(
        self, from_pid: int, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> Result:
        """Gives ``pids`` the cookie of thread ``from_pid`` (Koordinator ``CoreSched.Assign``): in a relay
        thread, share_from(from_pid) then share_to(p, scope) for each pid."""
        _check_owner(owner)
        targets = [p for p in dict.fromkeys(pids) if p != from_pid]
        with self._lock:
            return self._relay(from_pid, targets, scope, owner)

    def clear(
        self, pids: Iterable[int], owner: str, scope: CoreSchedScope = CoreSchedScope.THREAD_GROUP
    ) -> Result:
        """Resets ``pids`` to the default cookie 0 (Koordinator ``CoreSched.Clear``): share_to from a relay
        thread, which starts with koordlet's cookie 0."""
        _check_owner(owner)
        targets = list(dict.fromkeys(pids))
        with self._lock:
            return _in_new_thread(lambda: self._share_each(targets, scope, owner, DEFAULT_COOKIE))

    # ------------------------------------------------------------------------------------------ helpers

    def _relay(self, from_pid: int, targets: list[int], scope: CoreSchedScope, owner: str) -> Result:
        def run() -> Result:
            pulled = self._checked("share_from", from_pid, CoreSchedScope.THREAD, owner)
            if not pulled.ok:
                return Result(None, pulled.outcome, error=pulled.error)
            return self._share_each(targets, scope, owner, None)

        return _in_new_thread(run)

    def _share_each(self, targets: list[int], scope: CoreSchedScope, owner: str, cookie: int | None) -> Result:
        return each_task(targets, lambda pid: self._checked("share_to", pid, scope, owner), cookie)

    def _checked(self, op: str, pid: int, scope: CoreSchedScope, owner: str, *, audit: bool = True) -> Result:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            # pid 0 means the calling thread: koordlet itself must keep the default cookie.
            message = f"PR_SCHED_CORE {op}: pid must be a positive int, got {pid!r}"
            log.warning("core sched call refused", extra={"error": message})
            return _call_result(op, pid, scope, Outcome.INVALID, error=message)
        if audit:
            _check_owner(owner)
        # No locking here: a relay thread runs this while its caller holds the lock and waits for it.
        return self._call(op, pid, scope, owner, audit=audit)

    def _call(self, op: str, pid: int, scope: CoreSchedScope, owner: str, *, audit: bool) -> Result:
        now = self._clock()
        refused = self._ledger.refusal(_HOST, None, now)
        if refused is not None:
            return _call_result(op, pid, scope, Outcome.UNSUPPORTED, error=refused.reason)
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
            self._ledger.recovered(_HOST, extra={"pid": pid})
            self._unsupported = None
            result = _call_result(op, pid, scope, Outcome.DONE, cookie=cookie)
        if not audit:
            return result
        self._metrics.observe(AUDIT_RESOURCE, result.ok, elapsed)
        if self._audit is not None:
            assert result.path is not None and result.text is not None  # set by _call_result
            self._audit.record(AuditEntry(result.path, AUDIT_RESOURCE, None, result.text, owner,
                                          result.outcome.value, result.error))
        return result

    def _failed(self, op: str, pid: int, scope: CoreSchedScope, exc: BaseException, now: float) -> Result:
        code = getattr(exc, "errno", None)
        what = f"PR_SCHED_CORE {op} pid {pid} scope {scope.name.lower()}"
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if code == errno.ESRCH:
            return _call_result(op, pid, scope, Outcome.GONE, error=f"{what}: task exited (ESRCH)")
        if code in _UNSUPPORTED:
            reason = f"{what}: {detail}"
            if code == errno.EINVAL:
                reason += " (kernel built without CONFIG_SCHED_CORE)"
            elif code == errno.ENODEV:
                reason += " (no SMT siblings, so the kernel keeps core scheduling off)"
            self._ledger.log_failure(_HOST, Outcome.UNSUPPORTED.value, reason, extra={"reason": reason})
            self._ledger.refuse(_HOST, None, now, reason)
            self._unsupported = reason
            return _call_result(op, pid, scope, Outcome.UNSUPPORTED, error=reason)
        # Logged every time: each call names another task, so there is no streak to keep quiet about.
        message = f"{what}: {detail}"
        log.warning("core sched call failed", extra={"error": message})
        return _call_result(op, pid, scope, Outcome.FAILED, error=message)

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


def each_task(targets: Iterable[int], call: Callable[[int], Result], cookie: int | None) -> Result:
    """``call`` for each task, as a share_to loop goes: a task gone or failing is listed and the rest go on; an
    unsupported kernel ends the loop.  ``cookie``: what the tasks applied now carry, when known."""
    applied: list[int] = []
    gone: list[int] = []
    failed: list[tuple[int, str]] = []
    for pid in targets:
        result = call(pid)
        if result.ok:
            applied.append(pid)
        elif result.outcome is Outcome.GONE:
            gone.append(pid)
        elif result.outcome is Outcome.UNSUPPORTED:
            return Result(None, result.outcome, error=result.error, cookie=cookie, applied=tuple(applied),
                          gone=tuple(gone), failed=tuple(failed))
        else:
            failed.append((pid, result.error or result.outcome.value))
    error = "; ".join(m for _, m in failed) or None
    return Result(None, Outcome.DONE, error=error, cookie=cookie, applied=tuple(applied), gone=tuple(gone),
                  failed=tuple(failed))


def _call_result(op: str, pid: int, scope: CoreSchedScope, outcome: Outcome, *, cookie: int | None = None,
                 error: str | None = None) -> Result:
    """One prctl call: ``path`` names the task and ``text`` the call, as the audit does."""
    return Result(None, outcome, f"pid:{pid}", f"{op} scope={scope.name.lower()}", error, cookie=cookie)


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
