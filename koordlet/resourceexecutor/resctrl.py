"""The single writer of the resctrl filesystem (Intel RDT / AMD PQoS): control groups, their
``schemata`` (L3 CAT masks, MBA values) and ``tasks`` (Koordinator ``ResctrlSchemataResourceUpdater``).

Semantics mirror :class:`~koordlet.resourceexecutor.executor.ResourceExecutor` and share its
:class:`~koordlet.resourceexecutor.ledger.WriteLedger`: every schemata is validated against the host's
``info/`` limits before anything is written (all lines, so nothing is half-applied:
:mod:`.resctrl_schemata`); the same text written to the same group less than ``force_update_seconds`` ago
is skipped; EINVAL marks that (group, text) unsupported for ``unsupported_retry_seconds`` unless the text
changes; every write is audited and timed.  A host without a mounted resctrl answers
``Outcome.UNSUPPORTED`` with the reason, logged once.

Kernel facts (Documentation/arch/x86/resctrl.rst): ``tasks`` takes one task id per write; ESRCH means the
task exited.  ``mkdir`` fails with ENOSPC when every CLOSID (``info/L3/num_closids``) is in use.  After a
refused write ``info/last_cmd_status`` says why, and the error message carries it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from koordlet.errors import GONE_ERRNOS, REFUSED_VALUE_ERRNO, ConfigError, ParseError, Unsupported, from_errno
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.ledger import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    WriteLedger,
    check_timings,
    classify,
    failure_kind,
)
from koordlet.resourceexecutor.resctrl_schemata import (
    CAT_RESOURCES,
    MB_MAX_AMD,
    MB_MAX_PERCENT,
    MB_RESOURCE,
    RESERVED_NAMES,
    Invalid,
    check_group_name,
    group_label,
    parse_schemata,
    parse_tasks,
    read_limits,
    render,
)
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.update import Outcome, Result
from koordlet.resourceexecutor.writer import FileWriter, read_quietly

log = logging.getLogger(__name__)

SCHEMATA_METRIC = "resctrl_schemata"
TASKS_METRIC = "resctrl_tasks"
GROUP_METRIC = "resctrl_group"


class ResctrlWriter(Protocol):
    """File operations on the resctrl mount; errors are ``OSError`` with the kernel's errno."""

    def read(self, path: str) -> str:
        """The file's content."""

    def write(self, path: str, text: str) -> None:
        """Writes ``text`` in one ``write(2)``, without creating the file."""

    def mkdir(self, path: str) -> None:
        """Creates a control group (the kernel fills in its files)."""

    def rmdir(self, path: str) -> None:
        """Removes a control group (the kernel moves its tasks to the parent)."""


class ResctrlGroups(Protocol):
    """The resctrl writer as the resctrl strategy and hook see it (:class:`ResctrlExecutor`, or a shadow-mode view
    of it, :class:`~koordlet.resourceexecutor.shadowviews.ShadowResctrl`)."""

    root: str

    def unsupported_reason(self) -> str | None: ...
    def groups(self) -> list[str]: ...
    def apply_schemata(self, group: str, lines: Sequence[str], owner: str) -> Result: ...
    def assign_tasks(self, group: str, pids: Iterable[int], owner: str) -> Result: ...
    def remove_group(self, group: str, owner: str) -> Result: ...
    def forget(self, group: str | None = None) -> None: ...


class ResctrlFileWriter(FileWriter):
    """:class:`FileWriter` plus the directory calls; on resctrl ``rmdir`` works on a non-empty group."""

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)


MOUNT_RECHECK_SECONDS = 1.0
"""How long an answer to "is resctrl mounted" stands."""


class ResctrlExecutor:
    """Validates, deduplicates, writes and audits resctrl schemata and task moves; the only resctrl writer.

    ``root`` is the resctrl mount point (``HostPaths.resctrl_root``); ``clock`` a monotonic clock in
    seconds for cache expiry and backoffs; ``audit`` receives every attempted write; ``metrics`` one
    observation per write.  ``mb_max`` is the largest MB value: 100 on Intel (percent), 2048 on AMD.
    ``writer`` replaces the real file access in tests.  Whether resctrl is mounted is looked up at most once per
    :data:`MOUNT_RECHECK_SECONDS` of ``mount_clock`` (real time: it is a fact of the host, not of the write
    windows).  Thread-safe.
    """

    def __init__(
        self,
        root: str,
        clock: Callable[[], float],
        audit: Auditor | None,
        metrics: WriteSink | None = None,
        force_update_seconds: float = DEFAULT_FORCE_UPDATE_SECONDS,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
        mb_max: int = MB_MAX_PERCENT,
        writer: ResctrlWriter | None = None,
        mount_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_timings(force_update_seconds, unsupported_retry_seconds)
        if mb_max < 1:
            raise ConfigError(f"resctrl mb_max: must be positive, got {mb_max!r}")
        self.root = os.path.normpath(root)
        self._clock = clock
        self._audit = audit
        self._metrics: WriteSink = metrics if metrics is not None else NULL_SINK
        self._mb_max = mb_max
        self._writer: ResctrlWriter = writer if writer is not None else ResctrlFileWriter()
        self._lock = threading.Lock()
        self._ledger = WriteLedger(log, clock, force_update_seconds, unsupported_retry_seconds,
                                   failure_message="resctrl update not applied",
                                   recovery_message="resctrl write succeeds again")
        self._unsupported: str | None = None
        self._mount_clock = mount_clock
        self._mount_checked_at: float | None = None

    # ------------------------------------------------------------------------------------------- public

    def unsupported_reason(self) -> str | None:
        """Why resctrl cannot be used on this host (not mounted...), or None when it can."""
        with self._lock:
            return self._check_mounted()

    def groups(self) -> list[str]:
        """The control groups below the root, sorted (monitoring-only dirs and ``info`` excluded).

        Raises :class:`~koordlet.errors.Unsupported` when resctrl is not mounted."""
        with self._lock:
            reason = self._check_mounted()
        if reason is not None:
            raise Unsupported(errno.EOPNOTSUPP, reason)
        try:
            names = os.listdir(self.root)
        except OSError as exc:
            raise from_errno(exc.errno or errno.EIO, f"list {self.root}") from exc
        return sorted(n for n in names if n not in RESERVED_NAMES and os.path.isdir(os.path.join(self.root, n)))

    def apply_schemata(self, group: str, lines: Sequence[str], owner: str) -> Result:
        """Writes ``lines`` (``"L3:0=7ff;1=7ff"``, ``"MB:0=100;1=100"``) to ``<root>/<group>/schemata``
        in one write, creating the group when missing; ``group`` "" is the root group."""
        _check_owner(owner, group)
        with self._lock:
            now = self._clock()
            self._ledger.prune(now)
            directory = self._usable_dir(group, allow_root=True)
            if isinstance(directory, Result):
                return directory
            path = os.path.join(directory, "schemata")
            try:
                text = render(group, lines, read_limits(self.root, self._writer.read), self._mb_max)
            except Invalid as exc:
                return self._unwritable(_result(group, exc.outcome, path, error=str(exc)))
            skip = self._ledger.skip(path, text, now)
            if skip is not None:
                return _result(group, skip[0], path, text, skip[1])
            if group and not os.path.isdir(directory):
                made = self._mkdir(group, directory, owner)
                if made is not None:
                    return made
            return self._write_schemata(group, path, text, owner, now)

    def assign_tasks(self, group: str, pids: Iterable[int], owner: str) -> Result:
        """Moves the tasks ``pids`` into ``group`` ("" = the root group, i.e. out of every group), one
        write per task; tasks already listed in the group are not written again."""
        _check_owner(owner, group)
        wanted = list(dict.fromkeys(pids))
        with self._lock:
            try:
                check_group_name(group, allow_root=True)
                bad = [p for p in wanted if isinstance(p, bool) or not isinstance(p, int) or p <= 0]
                if bad:
                    raise ValueError(f"resctrl group {group_label(group)}: task ids must be positive ints, got {bad!r}")
            except ValueError as exc:
                self._ledger.log_failure(f"tasks:{group}", failure_kind(Outcome.INVALID), str(exc))
                return _result(group, Outcome.INVALID, error=str(exc))
            reason = self._check_mounted()
            if reason is not None:
                return _result(group, Outcome.UNSUPPORTED, error=reason)
            path = os.path.join(self._dir(group), "tasks")
            try:
                listed = parse_tasks(self._writer.read(path), path)
            except OSError as exc:
                code = exc.errno or errno.EIO
                outcome = Outcome.GONE if code in GONE_ERRNOS else Outcome.FAILED
                message = str(from_errno(code, f"read {path}"))
                if outcome is Outcome.GONE:
                    message += " (the group does not exist; apply_schemata creates it)"
                else:
                    self._ledger.log_failure(path, failure_kind(outcome, code), message)
                return _result(group, outcome, error=message)
            except ParseError as exc:
                self._ledger.log_failure(path, "failed:parse", str(exc))
                return _result(group, Outcome.FAILED, error=str(exc))
            return self._move_tasks(group, path, wanted, listed, owner)

    def remove_group(self, group: str, owner: str) -> Result:
        """Removes a control group (its tasks fall back to the root group); never the root or a
        reserved directory.  A group that does not exist is GONE."""
        _check_owner(owner, group)
        with self._lock:
            directory = self._usable_dir(group, allow_root=False)
            if isinstance(directory, Result):
                return directory
            self._ledger.drop_below(directory)
            if not os.path.isdir(directory):
                return _result(group, Outcome.GONE, directory)
            started = time.perf_counter()
            try:
                self._writer.rmdir(directory)
            except OSError as exc:
                code = exc.errno or errno.EIO
                outcome = Outcome.GONE if code == errno.ENOENT else classify(code, directory)
                result = _result(group, outcome, directory, error=str(from_errno(code, f"rmdir {directory}")))
            else:
                result = _result(group, Outcome.WRITTEN, directory)
            self._observe(GROUP_METRIC, result.outcome, time.perf_counter() - started)
            self._record(directory, GROUP_METRIC, "exists", "rmdir", owner, result.outcome, result.error)
            if result.outcome not in (Outcome.WRITTEN, Outcome.GONE) and result.error:
                self._ledger.log_failure(directory, failure_kind(result.outcome), result.error)
            return result

    # ------------------------------------------------------------------------------------- shadow mode

    def planned_schemata(self, group: str, lines: Sequence[str]) -> tuple[str, str] | Result:
        """What :meth:`apply_schemata` would write, (path, text), or the result it would give without writing
        (a bad name or value, resctrl not mounted)."""
        with self._lock:
            directory = self._usable_dir(group, allow_root=True)
            if isinstance(directory, Result):
                return directory
            path = os.path.join(directory, "schemata")
            try:
                return path, render(group, lines, read_limits(self.root, self._writer.read), self._mb_max)
            except Invalid as exc:
                return _result(group, exc.outcome, path, error=str(exc))

    def current_schemata(self, group: str) -> str | None:
        """The group's schemata as the kernel shows it, None when the group does not exist or cannot be read."""
        try:
            return self._writer.read(self._schemata(group))
        except OSError:
            return None

    def listed_tasks(self, group: str) -> set[int]:
        """The tasks in ``group`` now (none when it does not exist or cannot be read)."""
        path = os.path.join(self._dir(group), "tasks")
        try:
            return parse_tasks(self._writer.read(path), path)
        except (OSError, ParseError):
            return set()

    def tasks_path(self, group: str) -> str:
        return os.path.join(self._dir(group), "tasks")

    @property
    def force_update_seconds(self) -> float:
        """How long an unchanged schemata text goes unwritten (:meth:`apply_schemata` rewrites it after)."""
        return self._ledger.force_update_seconds

    def clock(self) -> float:
        return self._clock()

    def forget(self, group: str | None = None) -> None:
        """Drops what the executor remembers about ``group`` (or everything); the next apply writes."""
        with self._lock:
            if group is None:
                self._ledger.clear()
            else:
                self._ledger.drop_below(self._dir(group))

    # ------------------------------------------------------------------------------------------ phases

    def _check_mounted(self) -> str | None:
        # The hooks ask for every pod and container of every reconciler round: the answer of the last second
        # stands (a mount or unmount is noticed a second late at most).
        now = self._mount_clock()
        if self._mount_checked_at is not None and 0 <= now - self._mount_checked_at < MOUNT_RECHECK_SECONDS:
            return self._unsupported
        self._mount_checked_at = now
        # The probe's criterion (koordlet.system.probes._probe_resctrl): a mounted resctrl has a
        # root schemata; the bare mount point directory exists on every kernel with sysfs.
        if not os.path.isdir(self.root):
            reason: str | None = (
                f"resctrl unavailable: {self.root} does not exist (kernel without CONFIG_X86_CPU_RESCTRL, "
                "or not mounted)"
            )
        elif not os.path.isfile(os.path.join(self.root, "schemata")):
            reason = f"resctrl not mounted at {self.root} (mount -t resctrl resctrl {self.root})"
        else:
            reason = None
        if reason != self._unsupported:
            if reason is not None:
                log.warning("resctrl unsupported", extra={"reason": reason})
            elif self._unsupported is not None:
                log.info("resctrl available again", extra={"root": self.root})
            self._unsupported = reason
        return reason

    def _mkdir(self, group: str, directory: str, owner: str) -> Result | None:
        started = time.perf_counter()
        try:
            self._writer.mkdir(directory)
        except FileExistsError:
            return None
        except OSError as exc:
            code = exc.errno or errno.EIO
            message = str(from_errno(code, f"mkdir {directory}"))
            if code == errno.ENOSPC:
                message += " (every CLOSID is in use: see info/L3/num_closids; remove unused groups)"
            outcome = classify(code, directory)
            self._observe(GROUP_METRIC, outcome, time.perf_counter() - started)
            self._record(directory, GROUP_METRIC, None, "mkdir", owner, outcome, message)
            return self._unwritable(_result(group, outcome, directory, error=message), code)
        self._observe(GROUP_METRIC, Outcome.WRITTEN, time.perf_counter() - started)
        self._record(directory, GROUP_METRIC, None, "mkdir", owner, Outcome.WRITTEN, None)
        return None

    def _write_schemata(self, group: str, path: str, text: str, owner: str, now: float) -> Result:
        old = self._read_quietly(path)
        started = time.perf_counter()
        try:
            self._writer.write(path, text)
        except OSError as exc:
            elapsed = time.perf_counter() - started
            result = self._failed(group, path, text, exc.errno or errno.EIO, now)
        else:
            elapsed = time.perf_counter() - started
            self._ledger.written(path, text, now)
            result = _result(group, Outcome.WRITTEN, path, text)
        self._observe(SCHEMATA_METRIC, result.outcome, elapsed)
        self._record(path, SCHEMATA_METRIC, old, text, owner, result.outcome, result.error)
        return result

    def _failed(self, group: str, path: str, text: str, code: int, now: float) -> Result:
        message = str(from_errno(code, f"write {text.strip()!r} to {path}"))
        if code == REFUSED_VALUE_ERRNO:
            status = self._read_quietly(os.path.join(self.root, "info", "last_cmd_status"))
            if status:
                message += f" (info/last_cmd_status: {status})"
        outcome = self._ledger.failed(path, text, code, now, message)
        return _result(group, outcome, path, text, message)

    def _move_tasks(
        self, group: str, path: str, wanted: list[int], listed: set[int], owner: str
    ) -> Result:
        assigned: list[int] = []
        gone: list[int] = []
        failed: list[tuple[int, str]] = []
        already = [p for p in wanted if p in listed]
        for pid in (p for p in wanted if p not in listed):
            message: str | None = None
            started = time.perf_counter()
            try:
                self._writer.write(path, f"{pid}\n")
            except OSError as exc:
                code = exc.errno or errno.EIO
                message = str(from_errno(code, f"move task {pid} to {path}"))
                if code == errno.ENOENT and not os.path.isdir(os.path.dirname(path)):
                    self._observe(TASKS_METRIC, Outcome.GONE, time.perf_counter() - started)
                    self._record(path, TASKS_METRIC, None, str(pid), owner, Outcome.GONE, message)
                    return _result(group, Outcome.GONE, path, error=message + " (the group was removed)",
                                   applied=tuple(assigned), already=tuple(already), gone=tuple(gone),
                                   failed=tuple(failed))
                # ENOENT with the group still there: the task exited between the read and the write.
                outcome = Outcome.GONE if code in GONE_ERRNOS else classify(code, path)
                if outcome is Outcome.GONE:
                    gone.append(pid)
                else:
                    failed.append((pid, message))
            else:
                outcome = Outcome.WRITTEN
                assigned.append(pid)
            self._observe(TASKS_METRIC, outcome, time.perf_counter() - started)
            self._record(path, TASKS_METRIC, None, str(pid), owner, outcome, message)
        if failed:
            overall, error = Outcome.FAILED, "; ".join(m for _, m in failed)
            self._ledger.log_failure(path, failure_kind(overall), error)
        else:
            overall, error = (Outcome.WRITTEN if assigned else Outcome.SKIPPED_UNCHANGED), None
        return _result(group, overall, path, error=error, applied=tuple(assigned), already=tuple(already),
                       gone=tuple(gone), failed=tuple(failed))

    # ------------------------------------------------------------------------------------------ helpers

    def _usable_dir(self, group: str, *, allow_root: bool) -> str | Result:
        """The directory of ``group``, or the result of a bad name or an unmounted resctrl."""
        try:
            check_group_name(group, allow_root=allow_root)
        except ValueError as exc:
            return self._unwritable(_result(group, Outcome.INVALID, error=str(exc)))
        reason = self._check_mounted()
        if reason is not None:
            return _result(group, Outcome.UNSUPPORTED, error=reason)
        return self._dir(group)

    def _dir(self, group: str) -> str:
        return os.path.join(self.root, group) if group else self.root

    def _schemata(self, group: str) -> str:
        return os.path.join(self._dir(group), "schemata")

    def _observe(self, kind: str, outcome: Outcome, seconds: float) -> None:
        self._metrics.observe(kind, outcome is Outcome.WRITTEN, seconds)

    def _record(
        self, path: str, kind: str, old: str | None, new: str, owner: str, outcome: Outcome, error: str | None
    ) -> None:
        if self._audit is not None:
            self._audit.record(AuditEntry(path, kind, old, new, owner, outcome.value, error))

    def _unwritable(self, result: Result, code: int | None = None) -> Result:
        if result.outcome is not Outcome.GONE and result.error:
            self._ledger.log_failure(result.path or f"group:{result.group}", failure_kind(result.outcome, code),
                                     result.error)
        return result

    def _read_quietly(self, path: str) -> str | None:
        return read_quietly(self._writer.read, path)


def _result(group: str, outcome: Outcome, path: str | None = None, text: str | None = None,
            error: str | None = None, *, applied: tuple[int, ...] = (), already: tuple[int, ...] = (),
            gone: tuple[int, ...] = (), failed: tuple[tuple[int, str], ...] = ()) -> Result:
    return Result(None, outcome, path, text, error, group=group, applied=applied, already=already, gone=gone,
                  failed=failed)


def _check_owner(owner: str, group: str) -> None:
    # A missing owner is a plugin bug, not bad runtime input: fail where the call is made.
    if not owner:
        raise ConfigError(f"a resctrl update of group {group_label(group)} needs an owner for the audit")


__all__ = [
    "CAT_RESOURCES",
    "GROUP_METRIC",
    "MB_MAX_AMD",
    "MB_MAX_PERCENT",
    "MB_RESOURCE",
    "RESERVED_NAMES",
    "SCHEMATA_METRIC",
    "TASKS_METRIC",
    "ResctrlExecutor",
    "ResctrlFileWriter",
    "ResctrlWriter",
    "check_group_name",
    "group_label",
    "parse_schemata",
]
