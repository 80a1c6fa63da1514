"""Batches: files read together every tick through one C call, and the process-wide fd budget."""

from __future__ import annotations

import enum
import os
import resource
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.errors import from_errno
from koordlet.native.core import MAX_KEYS, Kind, check_path, ffi, keys_spec, lib
from koordlet.native.files import decode


def configure_fd_budget(reserve: int = 1024) -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit and lets file sets keep open every fd above
    ``reserve`` (kept at least a quarter of the limit for sockets, logs and SQLite).  Returns the budget.
    Called once at start-up by the daemon; until then sets keep nothing open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    limit = soft if soft != resource.RLIM_INFINITY else 1 << 20
    budget = max(0, limit - max(reserve, limit // 4))
    lib.kc_set_fd_budget(budget)
    return budget


def set_fd_budget(max_kept_fds: int) -> int:
    """Sets the process-wide cap on fds kept open by all file sets; returns the previous cap."""
    previous: int = lib.kc_set_fd_budget(max_kept_fds)
    return previous


def kept_fds() -> int:
    """How many fds all file sets keep open now."""
    count: int = lib.kc_kept_fds()
    return count


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str
    kind: Kind
    keys: tuple[str, ...] | None


class FileSet:
    """Files read together every tick through one C call (one GIL release for the whole batch).

    Files stay open between reads (within the budget set by :func:`configure_fd_budget`) and are
    re-read with ``pread`` at offset 0; a removed cgroup's fd is dropped on the read that finds it gone.
    A set serialises its own use with a lock, so one set may be shared by threads.
    """

    def __init__(self) -> None:
        handle = lib.kc_set_new()
        if handle == ffi.NULL:
            raise MemoryError("kc_set_new")
        self._handle = ffi.gc(handle, lib.kc_set_free)
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}

    def add(self, path: str | os.PathLike[str], kind: Kind, keys: Sequence[str] | None = None) -> int:
        """Adds a file; returns its slot (slots of removed files are reused)."""
        raw = check_path(path)
        spec = keys_spec(kind, keys)
        with self._lock:
            slot = lib.kc_set_add(self._handle, raw, kind, spec)
            if slot < 0:
                raise from_errno(slot, f"adding {os.fsdecode(raw)} to a file set")
            self._entries[slot] = _Entry(os.fsdecode(raw), kind, tuple(keys) if keys else None)
            return int(slot)

    def remove(self, slot: int) -> None:
        """Removes a file and closes its kept fd."""
        with self._lock:
            if self._entries.pop(slot, None) is None:
                raise KeyError(f"slot {slot} is not in this file set")
            lib.kc_set_remove(self._handle, slot)

    def path(self, slot: int) -> str:
        return self._entries[slot].path

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def open_fds(self) -> int:
        """Fds this set keeps open now."""
        return int(lib.kc_set_open_fds(self._handle))

    def read(self) -> BatchResult:
        """Reads every file of the set; per-file errors are in the result, never raised here."""
        with self._lock:
            n = lib.kc_set_slots(self._handle)
            # A fresh array per read: a result handed out earlier keeps its own values.
            out = ffi.new("struct kc_result[]", max(n, 1))
            lib.kc_set_read(self._handle, ffi.NULL, n, out)
            return BatchResult(out, dict(self._entries), n)

    def close(self) -> None:
        """Closes every kept fd now (also done when the set is garbage collected)."""
        with self._lock:
            for slot in list(self._entries):
                lib.kc_set_remove(self._handle, slot)
            self._entries.clear()


class Gather(enum.IntEnum):
    VALUE = lib.KC_GATHER_VALUE
    KEY_SUM = lib.KC_GATHER_KEY_SUM


class Slots:
    """A fixed list of slots in C memory, built once per pod change and gathered every tick."""

    __slots__ = ("array", "count")

    def __init__(self, slots: Sequence[int]) -> None:
        self.count = len(slots)
        self.array = ffi.new("int[]", list(slots) or [0])


class BatchResult:
    """The outcome of one :meth:`FileSet.read`, addressed by slot."""

    __slots__ = ("_entries", "_out", "_size")

    def __init__(self, out: Any, entries: dict[int, _Entry], size: int = 0) -> None:
        self._out = out
        self._entries = entries
        self._size = size

    def slots(self) -> Iterable[int]:
        return self._entries.keys()

    def error(self, slot: int) -> int:
        """0, or the errno of this file alone (ENOENT/ENODEV: its cgroup is gone)."""
        self._check(slot)
        return int(self._out[slot].err)

    def value(self, slot: int) -> Any:
        """The parsed value; raises the file's own error (CgroupGone, ParseError, ...)."""
        entry = self._check(slot)
        result = self._out[slot]
        if result.err:
            raise from_errno(result.err, entry.path)
        return decode(entry.kind, entry.keys, result)

    def get(self, slot: int, default: Any = None) -> Any:
        """The parsed value, or ``default`` when this file failed."""
        entry = self._check(slot)
        result = self._out[slot]
        if result.err:
            return default
        return decode(entry.kind, entry.keys, result)

    # Fast accessors for collectors that read thousands of entries a tick: no dict or object per value.

    def gather(self, slots: Slots, how: Gather, index: int = 0, found_bit: int = -1) -> list[float]:
        """One number per slot in one C call: ``Gather.VALUE`` v[index] (an INT's value, a KV's selected key
        ``index``, a PSI field), ``Gather.KEY_SUM`` the sum of the selected keys present.  NaN where the entry
        failed, or where bit ``found_bit`` of its found mask is clear (pass the key index for a KV key)."""
        dest = ffi.new("double[]", max(slots.count, 1))
        rc = lib.kc_gather(self._out, self._size, slots.array, slots.count, how, index, found_bit, dest)
        if rc < 0:
            raise ValueError(f"gather {how!r} index {index} found_bit {found_bit}: invalid arguments")
        return ffi.unpack(dest, slots.count)  # type: ignore[no-any-return]

    def gather_key(self, slots: Slots, index: int) -> list[float]:
        """Selected key ``index`` of KV/MEMINFO entries (NaN where failed or absent)."""
        return self.gather(slots, Gather.VALUE, index, index)

    def int_value(self, slot: int) -> int | None:
        """v[0] of a successful INT entry (or any kind's first value); None when the entry failed."""
        result = self._out[slot]
        return None if result.err else int(result.v[0])

    def key_value(self, slot: int, index: int) -> int | None:
        """Selected key ``index`` of a successful KV/MEMINFO entry; None when it failed or lacked the key."""
        result = self._out[slot]
        if result.err or not result.found >> index & 1:
            return None
        return int(result.v[index])

    def key_sum(self, slot: int) -> int | None:
        """The sum of the selected keys present in a successful KV/MEMINFO entry; None when it failed."""
        result = self._out[slot]
        if result.err:
            return None
        found, v = result.found, result.v
        return sum(int(v[i]) for i in range(MAX_KEYS) if found >> i & 1)

    def _check(self, slot: int) -> _Entry:
        entry = self._entries.get(slot)
        if entry is None:
            raise KeyError(f"slot {slot} was not in the file set when it was read")
        return entry


# Benchmark floors (tests/bench): the same I/O with no parsing and no bookkeeping.


def _path_array(paths: Sequence[bytes]) -> tuple[list[Any], Any]:
    """A C array of the paths, with the buffers it points into (they must outlive the array)."""
    holders = [ffi.new("char[]", p) for p in paths]
    return holders, ffi.new("const char *[]", holders)


def raw_open_read_close(paths: Sequence[bytes]) -> int:
    """Opens, reads and closes each file once; returns how many were read."""
    _holders, array = _path_array(paths)
    return int(lib.kc_raw_open_read_close(array, len(paths), ffi.NULL))


class RawOpenFiles:
    """Files kept open and re-read with ``pread(fd, buf, n, 0)``: the floor of a batch read."""

    def __init__(self, paths: Sequence[bytes]) -> None:
        _holders, array = _path_array(paths)
        self._n = len(paths)
        self._fds = ffi.new("int[]", self._n)
        self.opened = int(lib.kc_raw_open_all(array, self._n, self._fds))

    def pread_all(self) -> int:
        return int(lib.kc_raw_pread_all(self._fds, self._n, ffi.NULL))

    def close(self) -> None:
        lib.kc_raw_close_all(self._fds, self._n)
