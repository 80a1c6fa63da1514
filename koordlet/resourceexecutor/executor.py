"""The single writer of cgroup files (Koordinator ``pkg/koordlet/resourceexecutor``).

:meth:`ResourceExecutor.apply` takes a batch of :class:`~koordlet.resourceexecutor.update.CgroupUpdate`
and, per update: resolves the file for this host's cgroup version, validates and renders the value
with the registry descriptor (v2 translations included) before touching anything, skips the write when
the same text went to the same file (to the same device's line, in a per-device file) less than
``force_update_seconds`` ago (Koordinator's ``--resource-force-update-seconds``, 60 s: then the file is read
back, and a value changed behind our back is rewritten; one that still holds is not, unlike Koordinator's
unconditional rewrite), orders ``cpuset.cpus`` / ``memory.min`` writes by level (:mod:`.leveled`), writes,
audits and records a metric.

Errors are classified, not retried blindly (:mod:`.ledger`): a vanished cgroup is an expected race,
logged at debug only; a value the kernel refuses (EINVAL) is not written again before
``unsupported_retry_seconds`` (10 min) unless it changes, nor is any value of a file the kernel lacks;
anything else (EACCES/EPERM, EBUSY, ENOSPC...) fails the update and is logged once per kind of failure
until a write to that path succeeds.

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
from dataclasses import replace
from typing import NamedTuple

from koordlet.errors import KoordletError, Unsupported, from_errno, missing_file
from koordlet.resourceexecutor import cfsquota
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.ledger import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    WriteLedger,
    check_timings,
    classify,
    failure_kind,
)
from koordlet.resourceexecutor.leveled import MERGE, bottom_up, top_down_parents
from koordlet.resourceexecutor.prepared import Prepared, line_target, target_of
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter, read_quietly
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.layout import CgroupLayout, clean_rel_dir
from koordlet.system.resources import CPU_CFS_QUOTA, CPUSET_CPUS

log = logging.getLogger(__name__)

_PREPARED_MEMO_SIZE = 20_000

# cgroup v1 cpuset (kernel/cgroup/cpuset.c validate_change) answers EACCES for a child that is not a
# subset of its parent and EBUSY for a parent that would no longer cover a child.
_CPUSET_HINTS = {
    errno.EACCES: "cpuset.cpus must be a subset of the parent's (write the parent first)",
    errno.EBUSY: "a child cpuset still uses CPUs being removed (write the children first)",
}


_QUIET_BATCHES = 64
_QUIET_BATCH_MIN = 32
"""Smaller batches (a pod's hook writes) cost little to answer one by one."""


class _QuietBatch(NamedTuple):
    updates: tuple[CgroupUpdate, ...]
    """Held so that the ids below stay theirs."""
    ids: tuple[int, ...]
    results: tuple[Result, ...]
    version: int
    """The ledger's version when the batch was answered."""
    oldest: float
    """When the oldest of its values was written."""


class _PathLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        """Writers holding or waiting for ``lock``; counted under the executor's state lock."""


def _holds(p: Prepared, current: str) -> bool:
    """Whether a file holding ``current`` holds ``p``'s text already: its device's line, in a per-device file;
    else the text's words first (cgroup v2's ``cpu.max`` takes ``max`` and then reads ``max 100000``)."""
    if p.target == p.path:
        words = p.text.split()
        return current.split()[:len(words)] == words
    text = p.text.strip()
    return any(line.strip() == text for line in current.splitlines())


def _version_of(layout: CgroupLayout, resource: CgroupFile) -> int | None:
    try:
        return resource.version(layout)
    except Unsupported:
        return None


class ResourceExecutor:
    """Validates, deduplicates, orders, writes and audits cgroup updates; the only cgroup writer.

    ``clock`` is a monotonic clock in seconds deciding cache expiry and backoffs (tests pass a fake);
    ``audit`` receives every attempted write (None: no audit); ``metrics`` gets one observation per
    write (None: nobody measures); ``writer`` replaces the real file access in tests.  Thread-safe;
    batches run concurrently except where their order matters (see the module doc, "Locking").
    """

    def __init__(
        self,
        layout: CgroupLayout,
        clock: Callable[[], float],
        audit: Auditor | None,
        metrics: WriteSink | None = None,
        force_update_seconds: float = DEFAULT_FORCE_UPDATE_SECONDS,
        *,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
        writer: CgroupWriter | None = None,
    ) -> None:
        check_timings(force_update_seconds, unsupported_retry_seconds)
        self._layout = layout
        self._clock = clock
        self._audit = audit
        self._metrics: WriteSink = metrics if metrics is not None else NULL_SINK
        self._writer: CgroupWriter = writer if writer is not None else FileWriter()
        self._v1_quota = _version_of(layout, CPU_CFS_QUOTA) == 1
        self._lock = threading.Lock()
        """The state lock: the tables below; released around every write (see the module doc)."""
        self._tree_lock = threading.Lock()
        self._path_locks: dict[str, _PathLock] = {}
        """Locks of the files being written now (under the state lock; dropped when nobody uses one)."""
        self._ledger = WriteLedger(log, clock, force_update_seconds, unsupported_retry_seconds,
                                   failure_message="cgroup update not applied",
                                   recovery_message="cgroup write succeeds again")
        """Keyed by path, or by resource key for updates that never resolved to a file."""
        self._prepared: dict[tuple[str, str, type, object], Prepared] = {}
        """(resource, rel_dir, value type, value) -> the update resolved and validated once."""
        self._quiet_batches: dict[tuple[int, int], _QuietBatch] = {}
        """(id of its first update, its length) -> a batch of at least :data:`_QUIET_BATCH_MIN` updates, every
        one skipped as unchanged.  A strategy whose values stay hands the same update objects round after
        round (cpuburst's bursts, cpusuppress's cpusets over 1,000 containers): while the ledger did not change
        since and the oldest of the batch's writes is within the force-update window, it gets the same answers
        whole.  An entry holds its updates, so their ids are not reused while it is kept."""
        self._intended: dict[str, tuple[str, float, Outcome, str]] = {}
        """Shadow mode: target -> (text, when its file was read, the outcome then, the owner) of what
        :meth:`intend` judged."""

    # ------------------------------------------------------------------------------------------- public

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        """Applies a batch; returns one :class:`Result` per update, in the batch's order.

        Order of writes: the top-down merged values of leveled resources, then the other updates in
        batch order, then the final leveled values bottom-up."""
        batch = list(updates)
        v1_quota = self._v1_quota
        if any(u.resource.key in MERGE or (v1_quota and u.resource is CPU_CFS_QUOTA) for u in batch):
            with self._tree_lock, self._lock:
                return self._apply_locked(batch)
        with self._lock:
            return self._apply_locked(batch)

    def intend(self, updates: Iterable[CgroupUpdate], strategy: str) -> list[Result]:
        """Shadow mode's :meth:`apply`: each update resolved, validated and rendered as ``apply`` does and its
        file read, and nothing written.  A value the file holds already is ``SKIPPED_UNCHANGED``; any other is
        ``INTENDED``, audited as intended (the file's value, the one ``strategy`` wants, the owner) and counted.
        A file is read again only once the force-update window passed or the value changed, and is
        ``SKIPPED_UNCHANGED`` until then, as ``apply`` skips what it wrote within the window: a node left in shadow
        mode for a day keeps a readable audit.  What was
        written stays unknown to the tables, so switching to active mode writes everything due at once.  Not
        modelled: a v1 CFS quota capped to its parents', and the top-down merge of a leveled value (``apply``
        does both only as it writes)."""
        batch = list(updates)
        with self._lock:
            now = self._clock()
            prepared = [self._prepared_for(index, update) for index, update in enumerate(batch)]
        results: list[Result] = []
        for p in prepared:
            if isinstance(p, Result):
                results.append(p)
                continue
            # As apply skips a value it wrote within the window, a value judged within the window is not read
            # again (a shadow cgreconcile round over 1,000 containers would otherwise read ~9,000 files a second)
            # and is unchanged, as apply would answer: the round decides as it would in active mode.
            known = self._intended.get(p.target)
            if known is not None and known[0] == p.text and now - known[1] < self._ledger.force_update_seconds:
                results.append(Result(p.update, Outcome.SKIPPED_UNCHANGED, p.path, p.text))
                continue
            current = self._read_quietly(p.path)
            held = current is not None and _holds(p, current)
            outcome = Outcome.SKIPPED_UNCHANGED if held else Outcome.INTENDED
            results.append(Result(p.update, outcome, p.path, p.text))
            with self._lock:
                self._note_intended(p.target, p.text, now, outcome, p.update.owner)
            if held:
                continue
            self._metrics.intended(p.key, strategy)
            if self._audit is not None:
                self._audit.record(AuditEntry(p.path, p.key, current, p.text, p.update.owner,
                                              Outcome.INTENDED.value))
        return results

    def _memo(self, update: CgroupUpdate) -> tuple[tuple[str, str, type, object] | None, Prepared | None]:
        """The memo key of ``update`` (None: not hashable) and what the memo holds for it (under the state lock)."""
        # The type is part of the key: 1, 1.0 and True are equal but do not validate alike.
        key = (update.resource.key, update.rel_dir, type(update.value), update.value)
        try:
            return key, self._prepared.get(key)
        except TypeError:  # an unhashable value: prepared every time
            return None, None

    def _prepared_for(self, index: int, update: CgroupUpdate) -> Prepared | Result:
        """``update`` resolved and validated, from the memo when it was before (under the state lock)."""
        key, done = self._memo(update)
        return done._replace(position=index, update=update) if done is not None else self._prepare(index, update, key)

    def _note_intended(self, target: str, text: str, now: float, outcome: Outcome, owner: str) -> None:
        """Remembers how ``text`` for ``target`` was judged (under the state lock)."""
        if len(self._intended) >= _PREPARED_MEMO_SIZE:
            self._intended.clear()
        self._intended[target] = (text, now, outcome, owner)

    def _fit_v1_quota(self, p: Prepared, planned: dict[str, str]) -> Prepared:
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
            p = p._replace(update=update, text=text, canonical=p.descriptor.validate(update.value),
                           target=line_target(p.descriptor, p.path, text))
        planned[p.path] = p.text
        return p

    def _quota_root(self) -> str:
        return os.path.dirname(CPU_CFS_QUOTA.path(self._layout, ""))

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
            quota_file = CPU_CFS_QUOTA.path(self._layout, clean_rel_dir(rel_dir))
        except (Unsupported, ValueError):
            return False
        above = os.path.dirname(os.path.dirname(quota_file))
        return cfsquota.binding_limit(above, self._quota_root(), self._read_quietly) is not None

    def _apply_locked(self, batch: list[CgroupUpdate]) -> list[Result]:
        now = self._clock()
        self._ledger.prune(now)
        if not batch:
            return []
        quiet_key = (id(batch[0]), len(batch))
        known = self._quiet_batches.get(quiet_key)
        if (known is not None and known.version == self._ledger.version
                and now - known.oldest < self._ledger.force_update_seconds
                and known.ids == tuple(map(id, batch))):
            return list(known.results)
        from_memo: list[Prepared] = []
        results = self._apply_each(batch, now, from_memo)
        self._remember_quiet(quiet_key, batch, results, from_memo)
        return results

    def _remember_quiet(self, key: tuple[int, int], batch: list[CgroupUpdate], results: list[Result],
                        from_memo: list[Prepared]) -> None:
        """Keeps a batch answered with nothing but skips from the memo (``from_memo``: the prepared updates
        skipped so, by their target's last write alone), see :attr:`_quiet_batches`; forgets one that was not."""
        if len(from_memo) != len(batch) or len(batch) < _QUIET_BATCH_MIN:
            self._quiet_batches.pop(key, None)
            return
        written_at = self._ledger.written_at
        times = [written_at(p.target) for p in from_memo]
        if None in times:
            return
        if len(self._quiet_batches) >= _QUIET_BATCHES:
            self._quiet_batches.clear()
        self._quiet_batches[key] = _QuietBatch(tuple(batch), tuple(map(id, batch)), tuple(results),
                                               self._ledger.version, min(t for t in times if t is not None))

    def _apply_each(self, batch: list[CgroupUpdate], now: float, from_memo: list[Prepared]) -> list[Result]:
        """The batch answered update by update; appends to ``from_memo`` each one skipped from the memo as
        unchanged."""
        results: list[Result | None] = [None] * len(batch)
        leveled: list[Prepared] = []
        pending: list[Prepared] = []
        """To be written: neither refused earlier nor written unchanged within the window."""
        planned: dict[str, str] = {}
        """Quota files this batch writes, in batch order (the order non-leveled writes happen in)."""
        quiet: list[tuple[int, CgroupUpdate, Prepared]] = []
        """Leveled updates skipped as unchanged: a parent among them may still need widening for a child
        that is written."""
        unchanged = self._ledger.unchanged
        for index, update in enumerate(batch):
            memo_key, done = self._memo(update)
            if done is not None and unchanged(done.target, done.text, now):
                # The steady round's answer, straight from the memo.  A v1 CFS quota is fitted to its
                # parents only when it is written, so skipping it needs nothing else either.
                results[index] = Result(update, Outcome.SKIPPED_UNCHANGED, done.path, done.text)
                from_memo.append(done)
                if done.leveled:
                    quiet.append((index, update, done))
                continue
            prepared = done._replace(position=index, update=update) if done is not None else self._prepare(
                index, update, memo_key)
            if isinstance(prepared, Result):
                results[index] = prepared
                continue
            if prepared.leveled:
                leveled.append(prepared)
            skipped = self._skip_reason(prepared, prepared.text, now)
            if skipped is None and self._v1_quota and prepared.descriptor is CPU_CFS_QUOTA:
                prepared = self._fit_v1_quota(prepared, planned)
                skipped = self._skip_reason(prepared, prepared.text, now)
            if skipped is None:
                pending.append(prepared)
            else:
                results[index] = skipped
        if pending:
            if quiet and any(p.leveled for p in pending):
                leveled += [done._replace(position=index, update=update) for index, update, done in quiet]
                leveled.sort(key=lambda p: p.position)
            self._write_pending(pending, leveled, results, now)
        return [r for r in results if r is not None]

    def _write_pending(
        self, pending: list[Prepared], leveled: list[Prepared], results: list[Result | None], now: float
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
        """The text this executor last wrote to ``path`` and still remembers (written or verified within
        the last two force-update windows), or None; what the debug API shows as the desired value."""
        with self._lock:
            return self._ledger.last_written(path, lines=True)

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        """Shadow mode, for a writer of a strategy's own (tc, resctrl, core scheduling): ``strategy`` would have
        made ``path`` hold ``new`` instead of ``old``, and nothing was written.  Audited and counted as the
        cgroup files :meth:`intend` judges are."""
        self._metrics.intended(kind, strategy)
        if self._audit is not None:
            self._audit.record(AuditEntry(path, kind, old, new, owner, Outcome.INTENDED.value))

    def last_intended(self, path: str) -> tuple[str, str] | None:
        """Shadow mode: the text a strategy would have written to ``path`` and who wanted it (the update's owner),
        while the file holds another value; None otherwise.  What ``koordctl pods`` shows as "would set"."""
        with self._lock:
            known = self._intended.get(path)
        if known is None or known[2] is not Outcome.INTENDED:
            return None
        return known[0], known[3]

    def forget(self, path: str | None = None) -> None:
        """Drops what the executor remembers (last written values, refused values) for ``path`` and the
        files below it, or for everything; the next apply writes again.  In a per-device file (blkio
        throttles, ``io.max``, ``io.weight``, ``io.cost.qos``) ``<file>/<major>:<minor>`` forgets that
        device's lines only.  For callers that know a file was changed behind the executor's back."""
        with self._lock:
            self._ledger.forget(path)

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

    def _prepare(
        self, index: int, update: CgroupUpdate, memo_key: tuple[str, str, type, object] | None
    ) -> Prepared | Result:
        """Resolves and validates ``update``, remembered under ``memo_key`` (None: not hashable).  Strategies
        send the same (resource, directory, value) round after round; doing this once keeps a steady round
        over 1,000 containers cheap."""
        descriptor = update.resource
        try:
            rel_dir = clean_rel_dir(update.rel_dir)
            version = descriptor.version(self._layout)
            path = descriptor.path(self._layout, rel_dir)
        except Unsupported as exc:
            return self._unwritable(update, Outcome.UNSUPPORTED, None, None, str(exc.strerror), update.key)
        except ValueError as exc:  # ParseError: '..' in rel_dir
            return self._unwritable(update, Outcome.INVALID, None, None, str(exc), update.key)
        try:
            # format() first: its message names the file of this host's version (cpu.weight, not cpu.shares).
            text = descriptor.format(update.value, version)
            canonical = descriptor.validate(update.value)
        except (ValueError, KoordletError) as exc:
            return self._unwritable(update, Outcome.INVALID, path, None, f"{path}: {exc}", path)
        target = line_target(descriptor, path, text)
        prepared = Prepared(index, update, descriptor, version, rel_dir, path, text, canonical, target,
                             descriptor.key in MERGE)
        if memo_key is not None:
            if len(self._prepared) >= _PREPARED_MEMO_SIZE:
                self._prepared.clear()
            self._prepared[memo_key] = prepared
        return prepared

    def _write_merged(self, p: Prepared, now: float) -> Result | None:
        """Pass 1 of a leveled write; None when the current value already covers the desired one."""
        try:
            current = self._writer.read(p.path)
        except OSError as exc:
            code = exc.errno or errno.EIO
            outcome = classify(code, p.path)
            if outcome is Outcome.GONE:
                self._ledger.drop_below(os.path.dirname(p.path))
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
        self, p: Prepared, text: str, owner: str, now: float, old: str | None = None, use_cache: bool = True
    ) -> Result:
        skip = self._skip_reason(p, text, now, use_cache)
        if skip is not None:
            return skip
        # Past the force-update window, a value this executor wrote is read back first and rewritten only when
        # the file no longer holds it: repairing drift needs no write (and no audit entry) where none happened,
        # and a node with thousands of cgroups would otherwise rewrite them all every window.
        refreshing = use_cache and self._ledger.remembers(target_of(p, text), text)
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
                if refreshing and old == text.strip():
                    self._lock.acquire()
                    relocked = True
                    self._ledger.written(target_of(p, text), text, now)
                    return Result(p.update, Outcome.SKIPPED_UNCHANGED, p.path, text)
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
        self._metrics.observe(p.key, result.outcome is Outcome.WRITTEN, elapsed)
        if self._audit is not None:
            entry = AuditEntry(p.path, p.key, old, text, owner, result.outcome.value, result.error)
            self._audit.record(entry)
        return result

    def _record_write(self, p: Prepared, text: str, code: int | None, now: float) -> Result:
        """The tables after a write that failed with errno ``code`` or succeeded (None)."""
        if code is not None:
            return self._failed(p, text, code, now)
        self._ledger.written(target_of(p, text), text, now)
        return Result(p.update, Outcome.WRITTEN, p.path, text)

    def _skip_reason(self, p: Prepared, text: str, now: float, use_cache: bool = True) -> Result | None:
        """The result of not writing ``text`` now (refused earlier, or written within the force-update
        window), or None when it has to be written."""
        skip = self._ledger.skip(target_of(p, text), text, now, use_cache=use_cache)
        if skip is None:
            return None
        outcome, error = skip
        return Result(p.update, outcome, p.path, text, error)

    def _failed(self, p: Prepared, text: str, code: int, now: float) -> Result:
        message = str(from_errno(code, f"write {text!r} to {p.path}"))
        if p.descriptor is CPUSET_CPUS and code in _CPUSET_HINTS and self._layout.controller_version == 1:
            message += f" ({_CPUSET_HINTS[code]})"
        if missing_file(code, p.path):
            message = f"{p.path}: file absent although its cgroup exists (kernel lacks it)"
        outcome = self._ledger.failed(target_of(p, text), text, code, now, message, path=p.path)
        if outcome is Outcome.GONE:
            log.debug("cgroup gone", extra={"path": p.path})
        return Result(p.update, outcome, p.path, text, message)

    # ------------------------------------------------------------------------------------------ helpers

    def _unwritable(
        self, update: CgroupUpdate, outcome: Outcome, path: str | None, text: str | None, error: str, log_key: str,
        code: int | None = None,
    ) -> Result:
        if outcome is not Outcome.GONE:
            self._ledger.log_failure(log_key, failure_kind(outcome, code), error)
        return Result(update, outcome, path, text, error)

    def _read_quietly(self, path: str) -> str | None:
        return read_quietly(self._writer.read, path)
