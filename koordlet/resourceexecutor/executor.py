"""The single writer of cgroup files (Koordinator ``pkg/koordlet/resourceexecutor``).

:meth:`ResourceExecutor.apply` takes a batch of :class:`~koordlet.resourceexecutor.update.CgroupUpdate`
and, per update: resolves the file for this host's cgroup version, validates and renders the value
with the registry descriptor (v2 translations included) before touching anything, skips the write when
the same text went to the same file less than ``force_update_seconds`` ago (Koordinator's
``--resource-force-update-seconds``, 60 s: a periodic rewrite repairs values changed behind our back),
orders ``cpuset.cpus`` / ``memory.min`` writes by level (:mod:`.leveled`), writes, audits and records a
metric.

Errors are classified, not retried blindly:

* ENOENT on a vanished directory, ENODEV, ESRCH: the cgroup is gone, an expected race with the runtime;
  logged at debug only.
* EINVAL: the kernel refuses this value here.  The (path, value) pair is marked unsupported and not
  written again before ``unsupported_retry_seconds`` (10 min) unless the value changes: Koordinator
  #3217 burned 350-420m CPU rewriting a refused value every tick.  ENOENT on a file whose directory
  exists (the kernel lacks the file) and EOPNOTSUPP are marked the same way for any value.
* anything else (EACCES/EPERM, EBUSY, ENOSPC...) fails the update; each distinct error of a path is
  logged once until a write to that path succeeds.

Locking: a cgroup v1 ``memory.limit_in_bytes`` write may block for seconds while the kernel reclaims, and
NRI answers within containerd's 2 s.  So no caller waits for another's write to an unrelated file:

* the state lock guards the tables (last written, refused, log streaks) and is never held across a write;
* each file's writes are serialised by a lock of its own, held from the read of the old value through the
  write to the table update, so the "last written" cache follows the order the writes reached the file;
* a batch holding a leveled resource (``cpuset.cpus``, ``memory.min``) or, on cgroup v1, a CFS quota runs
  whole under the tree lock: its top-down / bottom-up order and the quota fitting read parents and write
  children, which another such batch must not interleave with.  Other batches never take it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from koordlet.errors import ConfigError, KoordletError, Unsupported, from_errno
from koordlet.metrics.executor import ResourceExecutorMetrics
from koordlet.resourceexecutor import cfsquota
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.leveled import MERGE, bottom_up, top_down_parents
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter
from koordlet.streaklog import Streak
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.layout import CgroupLayout, clean_rel_dir
from koordlet.system.resources import REGISTRY

log = logging.getLogger(__name__)

DEFAULT_FORCE_UPDATE_SECONDS = 60.0
DEFAULT_UNSUPPORTED_RETRY_SECONDS = 600.0
_PREPARED_MEMO_SIZE = 20_000

_GONE = frozenset({errno.ENODEV, errno.ESRCH})
_UNSUPPORTED_ANY_VALUE = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.ENOTTY})
# cgroup v1 cpuset (kernel/cgroup/cpuset.c validate_change) answers EACCES for a child that is not a
# subset of its parent and EBUSY for a parent that would no longer cover a child.
_CPUSET_HINTS = {
    errno.EACCES: "cpuset.cpus must be a subset of the parent's (write the parent first)",
    errno.EBUSY: "a child cpuset still uses CPUs being removed (write the children first)",
}


class _Prepared(NamedTuple):
    """An update that passed validation: where it goes and the text to write.  A tuple, not a
    dataclass: one is built per update per round, and the memo copies it with a new index."""

    position: int
    update: CgroupUpdate
    descriptor: CgroupFile
    version: int
    rel_dir: str
    path: str
    text: str
    canonical: object

    @property
    def key(self) -> str:
        return self.descriptor.key


class _PathLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        """Writers holding or waiting for ``lock``; counted under the executor's state lock."""


@dataclass(frozen=True)
class _Written:
    text: str
    at: float


@dataclass(frozen=True)
class _Refused:
    text: str | None
    """The refused text; None when no value can work (the file is missing)."""
    until: float
    reason: str


def _version_of(layout: CgroupLayout, resource: str) -> int | None:
    try:
        return REGISTRY[resource].version(layout)
    except Unsupported:
        return None


def check_timings(force_update_seconds: float, unsupported_retry_seconds: float) -> None:
    """The settings every writer (cgroup files, resctrl, prctl) shares; negative ones are config errors."""
    if force_update_seconds < 0:
        raise ConfigError(f"resource_executor.force_update_seconds: must be >= 0, got {force_update_seconds!r}")
    if unsupported_retry_seconds < 0:
        raise ConfigError(
            f"resource_executor.unsupported_retry_seconds: must be >= 0, got {unsupported_retry_seconds!r}"
        )


class ResourceExecutor:
    """Validates, deduplicates, orders, writes and audits cgroup updates; the only cgroup writer.

    ``clock`` is a monotonic clock in seconds deciding cache expiry and backoffs (tests pass a fake);
    ``audit`` receives every attempted write (None: no audit); ``metrics`` gets one observation per
    write; ``writer`` replaces the real file access in tests.  Thread-safe; batches run concurrently except
    where their order matters (see the module doc, "Locking").
    """

    def __init__(
        self,
        layout: CgroupLayout,
        clock: Callable[[], float],
        audit: Auditor | None,
        metrics: ResourceExecutorMetrics | None = None,
        force_update_seconds: float = DEFAULT_FORCE_UPDATE_SECONDS,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
        writer: CgroupWriter | None = None,
    ) -> None:
        check_timings(force_update_seconds, unsupported_retry_seconds)
        self._layout = layout
        self._clock = clock
        self._audit = audit
        self._metrics = metrics
        self._force_update_seconds = force_update_seconds
        self._retry_seconds = unsupported_retry_seconds
        self._writer: CgroupWriter = writer if writer is not None else FileWriter()
        self._v1_quota = _version_of(layout, cfsquota.RESOURCE) == 1
        self._lock = threading.Lock()
        """The state lock: the tables below; released around every write (see the module doc)."""
        self._tree_lock = threading.Lock()
        self._path_locks: dict[str, _PathLock] = {}
        """Locks of the files being written now (under the state lock; dropped when nobody uses one)."""
        self._cache: dict[str, _Written] = {}
        self._refused: dict[str, _Refused] = {}
        self._logged: dict[str, Streak] = {}
        """path (or resource key for unresolved updates) -> its streak of failures: logged when it starts,
        when the kind of failure changes and when a write succeeds again, not for every value refused."""
        self._prepared: dict[tuple[str, str, type, object], _Prepared] = {}
        """(resource, rel_dir, value type, value) -> the update resolved and validated once."""
        self._next_prune = clock() + force_update_seconds

    # ------------------------------------------------------------------------------------------- public

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        """Applies a batch; returns one :class:`Result` per update, in the batch's order.

        Order of writes: the top-down merged values of leveled resources, then the other updates in
        batch order, then the final leveled values bottom-up."""
        batch = list(updates)
        if any(u.resource in MERGE or (self._v1_quota and u.resource == cfsquota.RESOURCE) for u in batch):
            with self._tree_lock, self._lock:
                return self._apply_locked(batch)
        with self._lock:
            return self._apply_locked(batch)

    def _fit_v1_quota(self, p: _Prepared, planned: dict[str, str]) -> _Prepared:
        """cgroup v1 refuses a CFS quota above the parent's (:mod:`.cfsquota`): ``p`` capped to what its
        ancestors allow once the earlier updates of its batch (``planned``: quota file -> text, written
        before it) are in, after capping the descendants above the new value (their results are audited and
        logged, not returned: the caller asked for this cgroup).  Only for values about to be written, so a
        steady round costs nothing."""
        def read(path: str) -> str | None:
            return planned[path] if path in planned else self._read_quietly(path)

        directory = os.path.dirname(p.path)
        update = cfsquota.fit_to_parent(p.update, directory, self._quota_root(), read)
        caps = cfsquota.descendants_above(update, directory, read)
        if caps:
            self._apply_locked(caps)
        if update is not p.update:
            text = p.descriptor.format(update.value, p.version)
            p = p._replace(update=update, text=text, canonical=p.descriptor.validate(update.value))
        planned[p.path] = p.text
        return p

    def _quota_root(self) -> str:
        return os.path.dirname(REGISTRY[cfsquota.RESOURCE].path(self._layout, ""))

    def quota_limited_above(self, rel_dir: str, *, suppressible: bool = False) -> bool:
        """Whether a group above ``rel_dir`` holds a CFS quota on cgroup v1, where the kernel checks every
        quota below it against that limit (:mod:`.cfsquota`); False on v2, which never refuses a child's.
        ``suppressible``: the caller knows a group above may be limited any moment (the BE group under
        cpusuppress), which on v1 counts as limited."""
        if not self._v1_quota:
            return False
        if suppressible:
            return True
        try:
            quota_file = REGISTRY[cfsquota.RESOURCE].path(self._layout, clean_rel_dir(rel_dir))
        except (Unsupported, ValueError):
            return False
        above = os.path.dirname(os.path.dirname(quota_file))
        return cfsquota.binding_limit(above, self._quota_root(), self._read_quietly) is not None

    def _apply_locked(self, batch: list[CgroupUpdate]) -> list[Result]:
        now = self._clock()
        self._prune(now)
        results: list[Result | None] = [None] * len(batch)
        leveled: list[_Prepared] = []
        pending: list[_Prepared] = []
        """To be written: neither refused earlier nor written unchanged within the window."""
        planned: dict[str, str] = {}
        """Quota files this batch writes, in batch order (the order non-leveled writes happen in)."""
        for index, update in enumerate(batch):
            prepared = self._prepare(index, update)
            if isinstance(prepared, Result):
                results[index] = prepared
                continue
            if prepared.key in MERGE:
                leveled.append(prepared)
            skipped = self._skip_reason(prepared, prepared.text, now)
            if skipped is None and self._v1_quota and prepared.key == cfsquota.RESOURCE:
                prepared = self._fit_v1_quota(prepared, planned)
                skipped = self._skip_reason(prepared, prepared.text, now)
            if skipped is None:
                pending.append(prepared)
            else:
                results[index] = skipped
        if pending:
            self._write_pending(pending, leveled, results, now)
        return [r for r in results if r is not None]

    def _write_pending(
        self, pending: list[_Prepared], leveled: list[_Prepared], results: list[Result | None], now: float
    ) -> None:
        widened: set[int] = set()
        reopened = False
        for p in top_down_parents(leveled, [q for q in pending if q.key in MERGE]):
            merged = self._write_merged(p, now)
            if merged is None:
                continue
            if merged.outcome is not Outcome.WRITTEN:
                results[p.position] = merged
                continue
            widened.add(p.position)
            if results[p.position] is not None:
                # Skipped as unchanged, but the file had drifted and the merge changed it: its final
                # value is due again.
                results[p.position] = None
                pending.append(p)
                reopened = True
        if reopened:
            pending.sort(key=lambda q: q.position)
        for p in [q for q in pending if q.key not in MERGE] + bottom_up([q for q in pending if q.key in MERGE]):
            if results[p.position] is not None:
                continue
            result = self._write(p, p.text, p.update.owner, now)
            if result.outcome is Outcome.SKIPPED_UNCHANGED and p.position in widened:
                # Pass 1 already wrote the final value (a pure grow).
                result = replace(result, outcome=Outcome.WRITTEN)
            results[p.position] = result

    def last_written(self, path: str) -> str | None:
        """The text this executor last wrote to ``path`` and still remembers (within the force-update
        window), or None; what the debug API shows as the desired value."""
        with self._lock:
            written = self._cache.get(path)
        return written.text if written is not None else None

    def forget(self, path: str | None = None) -> None:
        """Drops what the executor remembers (last written values, refused values) for ``path`` and the
        files below it, or for everything; the next apply writes again.  For callers that know a file
        was changed behind the executor's back."""
        # The failure streaks stay: a caller that forgets a file every round (it drifted) while its write
        # keeps failing must not make the failure logged every round.
        with self._lock:
            if path is None:
                self._cache.clear()
                self._refused.clear()
                return
            for table in (self._cache, self._refused):
                for key in [k for k in table if k == path or k.startswith(path.rstrip("/") + "/")]:
                    del table[key]

    def forget_cgroup(self, rel_dir: str) -> None:
        """Forgets cgroup ``rel_dir`` (and what is below it) in every hierarchy: it was removed and made again
        under the same name (a pod's cgroup recreated), so it holds the runtime's values, not the ones written
        to the directory before it."""
        rel = clean_rel_dir(rel_dir)
        if not rel:
            return  # never the whole hierarchy
        layout = self._layout
        roots = [layout.unified_root] if layout.controller_version == 2 else list(layout.v1_mounts.values())
        for root in {os.path.join(r, rel) for r in roots if r}:
            self.forget(root)

    # ------------------------------------------------------------------------------------------ phases

    def _prepare(self, index: int, update: CgroupUpdate) -> _Prepared | Result:
        # Strategies send the same (resource, directory, value) round after round; resolving and
        # validating it once keeps a steady round over 1,000 containers cheap.
        try:
            # The type is part of the key: 1, 1.0 and True are equal but do not validate alike.
            memo_key: tuple[str, str, type, object] | None = (
                update.resource, update.rel_dir, type(update.value), update.value)
            done = self._prepared.get(memo_key) if memo_key is not None else None
        except TypeError:  # an unhashable value: prepare it every time
            memo_key, done = None, None
        if done is not None:
            return _Prepared(index, update, *done[2:])
        descriptor = REGISTRY[update.resource]
        try:
            rel_dir = clean_rel_dir(update.rel_dir)
            version = descriptor.version(self._layout)
            path = descriptor.path(self._layout, rel_dir)
        except Unsupported as exc:
            return self._unwritable(update, Outcome.UNSUPPORTED, None, None, str(exc.strerror), update.resource)
        except ValueError as exc:  # ParseError: '..' in rel_dir
            return self._unwritable(update, Outcome.INVALID, None, None, str(exc), update.resource)
        try:
            # format() first: its message names the file of this host's version (cpu.weight, not cpu.shares).
            text = descriptor.format(update.value, version)
            canonical = descriptor.validate(update.value)
        except (ValueError, KoordletError) as exc:
            return self._unwritable(update, Outcome.INVALID, path, None, f"{path}: {exc}", path)
        prepared = _Prepared(index, update, descriptor, version, rel_dir, path, text, canonical)
        if memo_key is not None:
            if len(self._prepared) >= _PREPARED_MEMO_SIZE:
                self._prepared.clear()
            self._prepared[memo_key] = prepared
        return prepared

    def _write_merged(self, p: _Prepared, now: float) -> Result | None:
        """Pass 1 of a leveled write; None when the current value already covers the desired one."""
        try:
            current = self._writer.read(p.path)
        except OSError as exc:
            code = exc.errno or errno.EIO
            outcome = self._classify(code, p.path)
            if outcome is Outcome.GONE:
                self._drop_below(os.path.dirname(p.path))
            message = f"{from_errno(code, 'read ' + p.path)} (before a leveled write)"
            return self._unwritable(p.update, outcome, p.path, p.text, message, p.path, code)
        merged = MERGE[p.key](current, p.canonical)
        if merged is None:
            return None
        text = p.descriptor.format(merged, p.version)
        # The merge was computed from the file itself, so the cache has nothing to add here.
        owner = f"{p.update.owner} (leveled: merged value top-down)"
        return self._write(p, text, owner, now, old=current.strip(), use_cache=False)

    def _write(
        self, p: _Prepared, text: str, owner: str, now: float, old: str | None = None, use_cache: bool = True
    ) -> Result:
        skip = self._skip_reason(p, text, now, use_cache)
        if skip is not None:
            return skip
        # Neither the read of the old value nor the write holds the state lock: a slow write (cgroup v1 memory
        # reclaim) must not stall every other caller.  The path lock keeps this file's writes, and the cache
        # entries recording them, in one order.
        path_lock = self._path_locks.get(p.path)
        if path_lock is None:
            path_lock = self._path_locks[p.path] = _PathLock()
        path_lock.users += 1
        self._lock.release()
        relocked = False
        try:
            with path_lock.lock:
                if old is None:
                    old = self._read_quietly(p.path)
                # Real elapsed time for the metric, whatever clock decides expiry.
                started = time.perf_counter()
                code: int | None = None
                try:
                    self._writer.write(p.path, text)
                except OSError as exc:
                    code = exc.errno or errno.EIO
                elapsed = time.perf_counter() - started
                self._lock.acquire()
                relocked = True
                result = self._record_write(p, text, code, now)
        finally:
            if not relocked:
                self._lock.acquire()
            path_lock.users -= 1
            if not path_lock.users:
                del self._path_locks[p.path]
        if self._metrics is not None:
            self._metrics.observe(p.key, result.outcome is Outcome.WRITTEN, elapsed)
        if self._audit is not None:
            entry = AuditEntry(p.path, p.key, old, text, owner, result.outcome.value, result.error)
            self._audit.record(entry)
        return result

    def _record_write(self, p: _Prepared, text: str, code: int | None, now: float) -> Result:
        """The tables after a write that failed with errno ``code`` or succeeded (None)."""
        if code is not None:
            return self._failed(p, text, code, now)
        self._cache[p.path] = _Written(text, now)
        self._refused.pop(p.path, None)
        streak = self._logged.pop(p.path, None)
        if streak is not None:
            streak.ok("cgroup write succeeds again", extra={"path": p.path, "value": text})
        return Result(p.update, Outcome.WRITTEN, p.path, text)

    def _skip_reason(self, p: _Prepared, text: str, now: float, use_cache: bool = True) -> Result | None:
        """The result of not writing ``text`` now (refused earlier, or written within the force-update
        window), or None when it has to be written."""
        refused = self._refused.get(p.path)
        if refused is not None and now < refused.until and refused.text in (None, text):
            error = f"{refused.reason}; not retried for {refused.until - now:.0f} s unless the value changes"
            return Result(p.update, Outcome.UNSUPPORTED, p.path, text, error)
        cached = self._cache.get(p.path)
        if use_cache and cached is not None and cached.text == text and now - cached.at < self._force_update_seconds:
            return Result(p.update, Outcome.SKIPPED_UNCHANGED, p.path, text)
        return None

    def _failed(self, p: _Prepared, text: str, code: int, now: float) -> Result:
        self._cache.pop(p.path, None)  # the file's content is unknown now
        outcome = self._classify(code, p.path)
        message = str(from_errno(code, f"write {text!r} to {p.path}"))
        if p.key == "cpuset_cpus" and code in _CPUSET_HINTS and self._layout.controller_version == 1:
            message += f" ({_CPUSET_HINTS[code]})"
        if outcome is Outcome.GONE:
            self._drop_below(os.path.dirname(p.path))
            log.debug("cgroup gone", extra={"path": p.path})
            return Result(p.update, outcome, p.path, text, message)
        if outcome is Outcome.UNSUPPORTED:
            any_value = code != errno.EINVAL
            if code == errno.ENOENT:
                message = f"{p.path}: file absent although its cgroup exists (kernel lacks it)"
            self._refused[p.path] = _Refused(None if any_value else text, now + self._retry_seconds, message)
        self._log_once(p.path, _failure_kind(outcome, code), message)
        return Result(p.update, outcome, p.path, text, message)

    # ------------------------------------------------------------------------------------------ helpers

    def _classify(self, code: int, path: str) -> Outcome:
        if code == errno.ENOENT:
            # The directory gone is the runtime's race; the file alone missing is the kernel's answer.
            return Outcome.UNSUPPORTED if os.path.isdir(os.path.dirname(path)) else Outcome.GONE
        if code in _GONE:
            return Outcome.GONE
        if code == errno.EINVAL or code in _UNSUPPORTED_ANY_VALUE:
            return Outcome.UNSUPPORTED
        return Outcome.FAILED

    def _unwritable(
        self, update: CgroupUpdate, outcome: Outcome, path: str | None, text: str | None, error: str, log_key: str,
        code: int | None = None,
    ) -> Result:
        if outcome is not Outcome.GONE:
            self._log_once(log_key, _failure_kind(outcome, code), error)
        return Result(update, outcome, path, text, error)

    def _log_once(self, key: str, kind: str, message: str) -> None:
        streak = self._logged.get(key)
        if streak is None:
            streak = self._logged[key] = Streak(log, self._clock)
        streak.fail(kind, "cgroup update not applied", extra={"path": key, "error": message})

    def _read_quietly(self, path: str) -> str | None:
        try:
            return self._writer.read(path).strip()
        except OSError:
            return None

    def _drop_below(self, directory: str) -> None:
        prefix = directory.rstrip("/") + "/"
        for table in (self._cache, self._refused, self._logged):
            for key in [k for k in table if k.startswith(prefix)]:
                del table[key]

    def _prune(self, now: float) -> None:
        # Entries of cgroups nobody updates any more (deleted pods) would otherwise pile up.
        if now < self._next_prune:
            return
        self._next_prune = now + max(self._force_update_seconds, 1.0)
        for path in [k for k, v in self._cache.items() if now - v.at >= self._force_update_seconds]:
            del self._cache[path]
        for path in [k for k, v in self._refused.items() if now >= v.until]:
            del self._refused[path]


def _failure_kind(outcome: Outcome, code: int | None) -> str:
    """What a failure's log streak is keyed on: the outcome and errno, never the value (a quota refused
    round after round is refused with a new value each time)."""
    return outcome.value if code is None else f"{outcome.value}:{errno.errorcode.get(code, str(code))}"
