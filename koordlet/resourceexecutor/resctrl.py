"""The single writer of the resctrl filesystem (Intel RDT / AMD PQoS): control groups, their
``schemata`` (L3 CAT masks, MBA values) and ``tasks`` (Koordinator ``ResctrlSchemataResourceUpdater``).

Semantics mirror :class:`~koordlet.resourceexecutor.executor.ResourceExecutor`: every schemata is
validated against the host's ``info/`` limits before anything is written (all lines, so nothing is
half-applied); the same text written to the same group less than ``force_update_seconds`` ago is
skipped; EINVAL marks that (group, text) unsupported for ``unsupported_retry_seconds`` unless the text
changes; every write is audited and timed.  A host without a mounted resctrl answers
``Outcome.UNSUPPORTED`` with the reason, logged once.

Kernel facts (Documentation/arch/x86/resctrl.rst):

* A schemata write holds lines ``<resource>:<id>=<value>;<id>=<value>`` ending in a newline; the kernel
  parses every line before applying any, so one ``write(2)`` of all lines is all-or-nothing.
* L3 masks are hex bit masks within ``info/<L3|L3CODE|L3DATA>/cbm_mask`` with at least ``min_cbm_bits``
  bits set; Intel CAT requires the set bits to be contiguous unless ``sparse_masks`` says 1 (6.7+).
* MB values lie between ``info/MB/min_bandwidth`` and 100 (percent) on Intel, which rounds them up to a
  multiple of ``bandwidth_gran``; AMD takes absolute units up to 2048 (unlimited) with granularity 1.
  A value that is not a multiple is refused here, so what we write is what the kernel keeps and the
  skip-unchanged comparison stays true.
* ``tasks`` takes one task id per write; ESRCH means the task exited.  ``mkdir`` fails with ENOSPC when
  every CLOSID (``info/L3/num_closids``) is in use.  After a refused write ``info/last_cmd_status``
  says why, and the error message carries it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from koordlet.errors import ConfigError, ParseError, Unsupported, from_errno
from koordlet.metrics.executor import ResourceExecutorMetrics
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.executor import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    check_timings,
)
from koordlet.resourceexecutor.update import Outcome
from koordlet.resourceexecutor.writer import FileWriter

log = logging.getLogger(__name__)

SCHEMATA_METRIC = "resctrl_schemata"
TASKS_METRIC = "resctrl_tasks"
GROUP_METRIC = "resctrl_group"

CAT_RESOURCES = ("L3", "L3CODE", "L3DATA")
"""Schemata resources holding cache bit masks (L3CODE/L3DATA when CDP is on)."""
MB_RESOURCE = "MB"
RESERVED_NAMES = frozenset({"info", "mon_groups", "mon_data"})
"""Directories of the resctrl root that are not control groups."""

MB_MAX_PERCENT = 100
"""Intel MBA: percent of the full bandwidth."""
MB_MAX_AMD = 2048
"""AMD: absolute units of 1/8 GB/s; 2048 means unlimited (Koordinator ``system/resctrl.go``)."""

# One path component: no '/', no leading dot (rules out "." and ".."), printable ASCII only.
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_DECIMAL = re.compile(r"[0-9]+")
_GONE = frozenset({errno.ESRCH, errno.ENODEV})
_UNSUPPORTED_ANY_VALUE = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.ENOTTY})


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


class ResctrlFileWriter(FileWriter):
    """:class:`FileWriter` plus the directory calls; on resctrl ``rmdir`` works on a non-empty group."""

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)


@dataclass(frozen=True)
class ResctrlResult:
    """What happened to one schemata write or group removal."""

    group: str
    """The control group, "" for the root group."""
    outcome: Outcome
    path: str | None = None
    text: str | None = None
    """The schemata text written (or that would have been)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The group holds the desired state as far as the executor knows."""
        return self.outcome in (Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED)


@dataclass(frozen=True)
class TaskAssignment:
    """What happened to one :meth:`ResctrlExecutor.assign_tasks` call."""

    group: str
    outcome: Outcome
    """WRITTEN when some task moved, SKIPPED_UNCHANGED when all were there (or gone), FAILED when a
    write failed for another reason than the task's exit, GONE/UNSUPPORTED/INVALID for the whole call."""
    assigned: tuple[int, ...] = ()
    already: tuple[int, ...] = ()
    gone: tuple[int, ...] = ()
    """Tasks that exited before they could be moved (ESRCH): expected, not an error."""
    failed: tuple[tuple[int, str], ...] = ()
    """(task id, error) of the writes that failed otherwise."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED)


@dataclass(frozen=True)
class _CatLimits:
    cbm_mask: int | None
    min_cbm_bits: int
    sparse: bool


@dataclass(frozen=True)
class _MbLimits:
    min_bandwidth: int
    granularity: int


@dataclass
class _HostLimits:
    cat: dict[str, _CatLimits] = field(default_factory=dict)
    mb: _MbLimits | None = None
    domains: dict[str, frozenset[int]] | None = None
    """Resource -> domain ids of the root schemata; None when it could not be read."""


@dataclass(frozen=True)
class _Written:
    text: str
    at: float


@dataclass(frozen=True)
class _Refused:
    text: str | None
    until: float
    reason: str


class _Invalid(Exception):
    """A schemata that must not be written; the message names the group, line and value."""

    def __init__(self, message: str, outcome: Outcome = Outcome.INVALID) -> None:
        super().__init__(message)
        self.outcome = outcome


def group_label(group: str) -> str:
    """How messages name a group: its name, or "(root)"."""
    return repr(group) if group else "(root)"


def check_group_name(group: str, *, allow_root: bool) -> None:
    """Raises ``ValueError`` unless ``group`` is "" (the root, when allowed) or one safe path component
    that is not a reserved directory (info, mon_groups, mon_data)."""
    if group == "":
        if allow_root:
            return
        raise ValueError("resctrl group: the root group cannot be removed")
    if not isinstance(group, str) or not _GROUP_NAME.fullmatch(group):
        raise ValueError(
            f"resctrl group {group!r}: must be one path component of letters, digits, '_', '.' or '-' "
            "not starting with '.'"
        )
    if group in RESERVED_NAMES:
        raise ValueError(f"resctrl group {group!r}: reserved by the kernel ({', '.join(sorted(RESERVED_NAMES))})")


def parse_schemata(content: str) -> dict[str, dict[int, str]]:
    """``"    L3:0=7ff;1=7ff\\n    MB:0=100;1=100\\n"`` -> ``{"L3": {0: "7ff", 1: "7ff"}, "MB": {...}}``.

    The kernel right-aligns resource names; lines it prints that are not ``name:id=value`` pairs
    (Arm MPAM extras) are kept with the pairs that parse."""
    result: dict[str, dict[int, str]] = {}
    for raw in content.splitlines():
        name, sep, body = raw.strip().partition(":")
        if not sep:
            continue
        pairs: dict[int, str] = {}
        for pair in body.split(";"):
            key, eq, value = pair.partition("=")
            if eq and key.strip().isdigit():
                pairs[int(key.strip())] = value.strip()
        result[name.strip()] = pairs
    return result


class ResctrlExecutor:
    """Validates, deduplicates, writes and audits resctrl schemata and task moves; the only resctrl writer.

    ``root`` is the resctrl mount point (``HostPaths.resctrl_root``); ``clock`` a monotonic clock in
    seconds for cache expiry and backoffs; ``audit`` receives every attempted write; ``metrics`` one
    observation per write.  ``mb_max`` is the largest MB value: 100 on Intel (percent), 2048 on AMD.
    ``writer`` replaces the real file access in tests.  Thread-safe.
    """

    def __init__(
        self,
        root: str,
        clock: Callable[[], float],
        audit: Auditor | None,
        metrics: ResourceExecutorMetrics | None = None,
        force_update_seconds: float = DEFAULT_FORCE_UPDATE_SECONDS,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
        mb_max: int = MB_MAX_PERCENT,
        writer: ResctrlWriter | None = None,
    ) -> None:
        check_timings(force_update_seconds, unsupported_retry_seconds)
        if mb_max < 1:
            raise ConfigError(f"resctrl mb_max: must be positive, got {mb_max!r}")
        self.root = os.path.normpath(root)
        self._clock = clock
        self._audit = audit
        self._metrics = metrics
        self._force_update_seconds = force_update_seconds
        self._retry_seconds = unsupported_retry_seconds
        self._mb_max = mb_max
        self._writer: ResctrlWriter = writer if writer is not None else ResctrlFileWriter()
        self._lock = threading.Lock()
        self._cache: dict[str, _Written] = {}
        self._refused: dict[str, _Refused] = {}
        self._logged: dict[str, str] = {}
        self._unsupported: str | None = None
        self._next_prune = clock() + force_update_seconds

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

    def apply_schemata(self, group: str, lines: Sequence[str], owner: str) -> ResctrlResult:
        """Writes ``lines`` (``"L3:0=7ff;1=7ff"``, ``"MB:0=100;1=100"``) to ``<root>/<group>/schemata``
        in one write, creating the group when missing; ``group`` "" is the root group."""
        _check_owner(owner, group)
        with self._lock:
            now = self._clock()
            self._prune(now)
            try:
                check_group_name(group, allow_root=True)
            except ValueError as exc:
                return self._unwritable(ResctrlResult(group, Outcome.INVALID, error=str(exc)))
            reason = self._check_mounted()
            if reason is not None:
                return ResctrlResult(group, Outcome.UNSUPPORTED, error=reason)
            directory = self._dir(group)
            path = os.path.join(directory, "schemata")
            try:
                text = self._render(group, lines, self._read_limits())
            except _Invalid as exc:
                return self._unwritable(ResctrlResult(group, exc.outcome, path, error=str(exc)))
            refused = self._refused.get(path)
            if refused is not None and now < refused.until and refused.text in (None, text):
                error = f"{refused.reason}; not retried for {refused.until - now:.0f} s unless the value changes"
                return ResctrlResult(group, Outcome.UNSUPPORTED, path, text, error)
            cached = self._cache.get(path)
            if cached is not None and cached.text == text and now - cached.at < self._force_update_seconds:
                return ResctrlResult(group, Outcome.SKIPPED_UNCHANGED, path, text)
            if group and not os.path.isdir(directory):
                made = self._mkdir(group, directory, owner)
                if made is not None:
                    return made
            return self._write_schemata(group, path, text, owner, now)

    def assign_tasks(self, group: str, pids: Iterable[int], owner: str) -> TaskAssignment:
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
                self._log_once(f"tasks:{group}", str(exc))
                return TaskAssignment(group, Outcome.INVALID, error=str(exc))
            reason = self._check_mounted()
            if reason is not None:
                return TaskAssignment(group, Outcome.UNSUPPORTED, error=reason)
            path = os.path.join(self._dir(group), "tasks")
            try:
                listed = _parse_tasks(self._writer.read(path), path)
            except OSError as exc:
                code = exc.errno or errno.EIO
                outcome = Outcome.GONE if code in (errno.ENOENT, *_GONE) else Outcome.FAILED
                message = str(from_errno(code, f"read {path}"))
                if outcome is Outcome.GONE:
                    message += " (the group does not exist; apply_schemata creates it)"
                else:
                    self._log_once(path, message)
                return TaskAssignment(group, outcome, error=message)
            except ParseError as exc:
                self._log_once(path, str(exc))
                return TaskAssignment(group, Outcome.FAILED, error=str(exc))
            return self._move_tasks(group, path, wanted, listed, owner)

    def remove_group(self, group: str, owner: str) -> ResctrlResult:
        """Removes a control group (its tasks fall back to the root group); never the root or a
        reserved directory.  A group that does not exist is GONE."""
        _check_owner(owner, group)
        with self._lock:
            try:
                check_group_name(group, allow_root=False)
            except ValueError as exc:
                return self._unwritable(ResctrlResult(group, Outcome.INVALID, error=str(exc)))
            reason = self._check_mounted()
            if reason is not None:
                return ResctrlResult(group, Outcome.UNSUPPORTED, error=reason)
            directory = self._dir(group)
            self._drop_below(directory)
            if not os.path.isdir(directory):
                return ResctrlResult(group, Outcome.GONE, directory)
            started = time.perf_counter()
            try:
                self._writer.rmdir(directory)
            except OSError as exc:
                code = exc.errno or errno.EIO
                outcome = Outcome.GONE if code == errno.ENOENT else self._classify(code, directory)
                result = ResctrlResult(group, outcome, directory, error=str(from_errno(code, f"rmdir {directory}")))
            else:
                result = ResctrlResult(group, Outcome.WRITTEN, directory)
            self._observe(GROUP_METRIC, result.outcome, time.perf_counter() - started)
            self._record(directory, GROUP_METRIC, "exists", "rmdir", owner, result.outcome, result.error)
            if result.outcome not in (Outcome.WRITTEN, Outcome.GONE) and result.error:
                self._log_once(directory, result.error)
            return result

    def forget(self, group: str | None = None) -> None:
        """Drops what the executor remembers about ``group`` (or everything); the next apply writes."""
        with self._lock:
            if group is None:
                self._cache.clear()
                self._refused.clear()
                self._logged.clear()
            else:
                self._drop_below(self._dir(group))

    # ------------------------------------------------------------------------------------------ phases

    def _check_mounted(self) -> str | None:
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

    def _read_limits(self) -> _HostLimits:
        limits = _HostLimits()
        for name in CAT_RESOURCES:
            info = os.path.join(self.root, "info", name)
            if not os.path.isdir(info):
                continue
            mask = self._read_info(info, "cbm_mask", 16)
            min_bits = self._read_info(info, "min_cbm_bits", 10)
            sparse = self._read_info(info, "sparse_masks", 10)
            limits.cat[name] = _CatLimits(mask, 1 if min_bits is None else min_bits, sparse == 1)
        info = os.path.join(self.root, "info", MB_RESOURCE)
        if os.path.isdir(info):
            minimum = self._read_info(info, "min_bandwidth", 10)
            granularity = self._read_info(info, "bandwidth_gran", 10)
            limits.mb = _MbLimits(minimum or 0, granularity or 1)
        try:
            root_schemata = parse_schemata(self._writer.read(self._schemata("")))
        except OSError:
            return limits
        limits.domains = {name: frozenset(pairs) for name, pairs in root_schemata.items()}
        return limits

    def _read_info(self, directory: str, name: str, base: int) -> int | None:
        path = os.path.join(directory, name)
        try:
            text = self._writer.read(path).strip()
        except OSError:
            return None
        try:
            return int(text, base)
        except ValueError:
            raise _Invalid(f"{path}: cannot parse {text!r} (base {base})", Outcome.FAILED) from None

    def _render(self, group: str, lines: Sequence[str], limits: _HostLimits) -> str:
        where = f"resctrl group {group_label(group)}"
        if isinstance(lines, str):
            raise _Invalid(f"{where}: lines must be a sequence of schemata lines, got one string {lines!r}")
        if not lines:
            raise _Invalid(f"{where}: no schemata lines")
        rendered: list[str] = []
        seen: set[str] = set()
        for line in lines:
            name, pairs = _parse_line(where, line)
            if name in seen:
                raise _Invalid(f"{where}: line {line!r}: resource {name} given twice")
            seen.add(name)
            if limits.domains is not None:
                known = limits.domains.get(name)
                if known is None:
                    raise _Invalid(
                        f"{where}: line {line!r}: this host's resctrl has no {name} "
                        f"(schemata lists {', '.join(sorted(limits.domains)) or 'nothing'})",
                        Outcome.UNSUPPORTED,
                    )
                unknown = sorted(set(pairs) - known)
                if unknown:
                    raise _Invalid(
                        f"{where}: line {line!r}: domain {unknown[0]} unknown "
                        f"(this host's {name} domains: {', '.join(map(str, sorted(known)))})"
                    )
            if name == MB_RESOURCE:
                values = {d: self._check_mb(where, line, d, v, limits.mb) for d, v in pairs.items()}
                body = ";".join(f"{d}={values[d]}" for d in sorted(values))
            else:
                masks = {d: _check_cbm(where, line, name, d, v, limits.cat.get(name)) for d, v in pairs.items()}
                body = ";".join(f"{d}={masks[d]:x}" for d in sorted(masks))
            rendered.append(f"{name}:{body}")
        # The kernel refuses a write that does not end in a newline.
        return "\n".join(rendered) + "\n"

    def _check_mb(self, where: str, line: str, domain: int, text: str, mb: _MbLimits | None) -> int:
        if not _DECIMAL.fullmatch(text):
            raise _Invalid(f"{where}: line {line!r}: MB value {text!r} on domain {domain} is not a decimal number")
        value = int(text)
        minimum = mb.min_bandwidth if mb is not None else 0
        if value < minimum or value > self._mb_max:
            raise _Invalid(
                f"{where}: line {line!r}: MB value {value} on domain {domain} outside "
                f"{minimum}..{self._mb_max} (info/MB/min_bandwidth..max)"
            )
        if mb is not None and mb.granularity > 1 and value % mb.granularity:
            rounded = -(-value // mb.granularity) * mb.granularity
            raise _Invalid(
                f"{where}: line {line!r}: MB value {value} on domain {domain} is not a multiple of "
                f"info/MB/bandwidth_gran {mb.granularity} (the kernel would round it up to {rounded})"
            )
        return value

    def _mkdir(self, group: str, directory: str, owner: str) -> ResctrlResult | None:
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
            outcome = self._classify(code, directory)
            self._observe(GROUP_METRIC, outcome, time.perf_counter() - started)
            self._record(directory, GROUP_METRIC, None, "mkdir", owner, outcome, message)
            return self._unwritable(ResctrlResult(group, outcome, directory, error=message))
        self._observe(GROUP_METRIC, Outcome.WRITTEN, time.perf_counter() - started)
        self._record(directory, GROUP_METRIC, None, "mkdir", owner, Outcome.WRITTEN, None)
        return None

    def _write_schemata(self, group: str, path: str, text: str, owner: str, now: float) -> ResctrlResult:
        old = self._read_quietly(path)
        started = time.perf_counter()
        try:
            self._writer.write(path, text)
        except OSError as exc:
            elapsed = time.perf_counter() - started
            result = self._failed(group, path, text, exc.errno or errno.EIO, now)
        else:
            elapsed = time.perf_counter() - started
            self._cache[path] = _Written(text, now)
            self._refused.pop(path, None)
            if self._logged.pop(path, None) is not None:
                log.info("resctrl write succeeds again", extra={"path": path, "value": text})
            result = ResctrlResult(group, Outcome.WRITTEN, path, text)
        self._observe(SCHEMATA_METRIC, result.outcome, elapsed)
        self._record(path, SCHEMATA_METRIC, old, text, owner, result.outcome, result.error)
        return result

    def _failed(self, group: str, path: str, text: str, code: int, now: float) -> ResctrlResult:
        self._cache.pop(path, None)
        outcome = self._classify(code, path)
        message = str(from_errno(code, f"write {text.strip()!r} to {path}"))
        if outcome is Outcome.GONE:
            self._drop_below(os.path.dirname(path))
            return ResctrlResult(group, outcome, path, text, message)
        if code == errno.EINVAL:
            status = self._read_quietly(os.path.join(self.root, "info", "last_cmd_status"))
            if status:
                message += f" (info/last_cmd_status: {status})"
        if outcome is Outcome.UNSUPPORTED:
            any_value = code != errno.EINVAL
            self._refused[path] = _Refused(None if any_value else text, now + self._retry_seconds, message)
        self._log_once(path, message)
        return ResctrlResult(group, outcome, path, text, message)

    def _move_tasks(
        self, group: str, path: str, wanted: list[int], listed: set[int], owner: str
    ) -> TaskAssignment:
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
                    return TaskAssignment(group, Outcome.GONE, tuple(assigned), tuple(already), tuple(gone),
                                          tuple(failed), message + " (the group was removed)")
                outcome = Outcome.GONE if code in (errno.ESRCH, errno.ENOENT) else self._classify(code, path)
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
            self._log_once(path, error)
        else:
            overall, error = (Outcome.WRITTEN if assigned else Outcome.SKIPPED_UNCHANGED), None
        return TaskAssignment(group, overall, tuple(assigned), tuple(already), tuple(gone), tuple(failed), error)

    # ------------------------------------------------------------------------------------------ helpers

    def _dir(self, group: str) -> str:
        return os.path.join(self.root, group) if group else self.root

    def _schemata(self, group: str) -> str:
        return os.path.join(self._dir(group), "schemata")

    def _classify(self, code: int, path: str) -> Outcome:
        if code == errno.ENOENT:
            return Outcome.UNSUPPORTED if os.path.isdir(os.path.dirname(path)) else Outcome.GONE
        if code in _GONE:
            return Outcome.GONE
        if code == errno.EINVAL or code in _UNSUPPORTED_ANY_VALUE:
            return Outcome.UNSUPPORTED
        return Outcome.FAILED

    def _observe(self, kind: str, outcome: Outcome, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.observe(kind, outcome is Outcome.WRITTEN, seconds)

    def _record(
        self, path: str, kind: str, old: str | None, new: str, owner: str, outcome: Outcome, error: str | None
    ) -> None:
        if self._audit is not None:
            self._audit.record(AuditEntry(path, kind, old, new, owner, outcome.value, error))

    def _unwritable(self, result: ResctrlResult) -> ResctrlResult:
        if result.outcome is not Outcome.GONE and result.error:
            self._log_once(result.path or f"group:{result.group}", result.error)
        return result

    def _log_once(self, key: str, message: str) -> None:
        if self._logged.get(key) == message:
            return
        self._logged[key] = message
        log.warning("resctrl update not applied", extra={"path": key, "error": message})

    def _read_quietly(self, path: str) -> str | None:
        try:
            return self._writer.read(path).strip()
        except OSError:
            return None

    def _drop_below(self, directory: str) -> None:
        prefix = directory.rstrip("/") + "/"
        for table in (self._cache, self._refused, self._logged):
            for key in [k for k in table if k.startswith(prefix) or k == directory]:
                del table[key]

    def _prune(self, now: float) -> None:
        if now < self._next_prune:
            return
        self._next_prune = now + max(self._force_update_seconds, 1.0)
        for path in [k for k, v in self._cache.items() if now - v.at >= self._force_update_seconds]:
            del self._cache[path]
        for path in [k for k, v in self._refused.items() if now >= v.until]:
            del self._refused[path]


def _check_owner(owner: str, group: str) -> None:
    # A missing owner is a plugin bug, not bad runtime input: fail where the call is made.
    if not owner:
        raise ConfigError(f"a resctrl update of group {group_label(group)} needs an owner for the audit")


def _parse_line(where: str, line: str) -> tuple[str, dict[int, str]]:
    if not isinstance(line, str) or "\n" in line.strip():
        raise _Invalid(f"{where}: line {line!r}: one schemata line per entry")
    name, sep, body = line.strip().partition(":")
    name = name.strip()
    if not sep or name not in (*CAT_RESOURCES, MB_RESOURCE):
        raise _Invalid(
            f"{where}: line {line!r}: resource {name!r} unknown (want {', '.join((*CAT_RESOURCES, MB_RESOURCE))})"
        )
    pairs: dict[int, str] = {}
    # Koordinator writes a trailing ';', which the kernel ignores.
    for pair in body.strip().rstrip(";").split(";"):
        key, eq, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not _DECIMAL.fullmatch(key) or not value:
            raise _Invalid(f"{where}: line {line!r}: {pair.strip()!r} is not <domain id>=<value>")
        domain = int(key)
        if domain in pairs:
            raise _Invalid(f"{where}: line {line!r}: domain {domain} given twice")
        pairs[domain] = value
    return name, pairs


def _check_cbm(where: str, line: str, name: str, domain: int, text: str, cat: _CatLimits | None) -> int:
    if not _HEX.fullmatch(text):
        raise _Invalid(f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is not hexadecimal")
    mask = int(text, 16)
    if mask == 0:
        raise _Invalid(f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is empty")
    if cat is not None and cat.cbm_mask is not None and mask & ~cat.cbm_mask:
        raise _Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} outside "
            f"info/{name}/cbm_mask {cat.cbm_mask:x}"
        )
    bits = mask.bit_count()
    min_bits = cat.min_cbm_bits if cat is not None else 1
    if bits < min_bits:
        raise _Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} has {bits} bits, "
            f"info/{name}/min_cbm_bits is {min_bits}"
        )
    shifted = mask >> ((mask & -mask).bit_length() - 1)
    if shifted & (shifted + 1) and not (cat is not None and cat.sparse):
        raise _Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is not contiguous "
            "(Intel CAT needs one run of set bits)"
        )
    return mask


def _parse_tasks(content: str, path: str) -> set[int]:
    tasks: set[int] = set()
    for raw in content.split():
        if not raw.isdigit():
            raise ParseError(f"{path}: task id {raw!r} is not a number")
        tasks.add(int(raw))
    return tasks
