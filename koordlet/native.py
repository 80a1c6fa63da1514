"""Typed wrappers around the C core (``csrc/kcore.h``); the only importer of ``koordlet._native``.

Everything returned here is a plain Python value: cdata never leaves this module.  Errors from the
core come back as ``-errno`` (or a per-entry errno in batch reads) and are turned into the
:mod:`koordlet.errors` classes: a vanished cgroup is :class:`~koordlet.errors.CgroupGone`, malformed
content is :class:`~koordlet.errors.ParseError`, a missing kernel feature is
:class:`~koordlet.errors.Unsupported`.
"""

from __future__ import annotations

import enum
import errno
import os
import resource
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.errors import NativeBuildMismatch, ParseError, Unsupported, from_errno

try:
    from koordlet._native import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise NativeBuildMismatch(
        f"koordlet's C core is not built ({exc}); install the package (`pip install .`, "
        "or `pip install -e .` in a checkout)"
    ) from exc

ABI_VERSION = 1
if lib.kc_abi_version() != ABI_VERSION:
    raise NativeBuildMismatch(
        f"koordlet._native has ABI {lib.kc_abi_version()}, this wrapper expects {ABI_VERSION}: rebuild it"
    )

_CAPS = lib.kc_capabilities()
HAS_PERF = bool(_CAPS & lib.KC_CAP_PERF)
HAS_SCHED_CORE = bool(_CAPS & lib.KC_CAP_SCHED_CORE)
HAS_PSI_TRIGGER = bool(_CAPS & lib.KC_CAP_PSI_TRIGGER)
BUILD_INFO: str = ffi.string(lib.kc_build_info()).decode()

MAX_KEYS = lib.KC_MAX_VALUES
MAX_CPUS = lib.KC_MAX_CPUS
MAX_FILE_BYTES = lib.KC_MAX_FILE


class Kind(enum.IntEnum):
    """How the C core parses a file (``KC_KIND_*``)."""

    INT = lib.KC_KIND_INT
    KV = lib.KC_KIND_KV
    CPU_MAX = lib.KC_KIND_CPU_MAX
    CPULIST = lib.KC_KIND_CPULIST
    PSI = lib.KC_KIND_PSI
    MEMINFO = lib.KC_KIND_MEMINFO
    RAW = lib.KC_KIND_RAW
    PROC_STAT = lib.KC_KIND_PROC_STAT


@dataclass(frozen=True, slots=True)
class PsiLine:
    """One line of a PSI file: share of time stalled (percent) over 10/60/300 s and the total in µs."""

    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True, slots=True)
class Psi:
    """A PSI file; ``full`` is None where the kernel prints no full line (system cpu before 5.13)."""

    some: PsiLine
    full: PsiLine | None


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One cpu line of /proc/stat, in USER_HZ ticks; fields older kernels lack read 0."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int
    guest: int
    guest_nice: int


@dataclass(frozen=True, slots=True)
class ProcStat:
    """/proc/stat cpu lines: the aggregate and each CPU by id."""

    total: CpuTimes
    cpus: dict[int, CpuTimes]


def _check_path(path: str | os.PathLike[str]) -> bytes:
    raw = os.fsencode(path)
    if not raw or b"\0" in raw:
        raise ValueError(f"invalid path {path!r}")
    return raw


def _keys_spec(kind: Kind, keys: Sequence[str] | None) -> Any:
    """The C core takes selected keys as one space-separated string (NULL for kinds without keys)."""
    if kind not in (Kind.KV, Kind.MEMINFO):
        if keys:
            raise ValueError(f"{kind.name} files take no keys")
        return ffi.NULL
    if not keys:
        raise ValueError(f"{kind.name} reads need at least one key")
    if len(keys) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} keys per file, got {len(keys)}")
    for key in keys:
        if not key or len(key) >= 64 or any(c in key for c in " \t\n\0:"):
            raise ValueError(f"invalid key {key!r}")
    return " ".join(keys).encode()


def _cpus_from_bitmap(words: Any, count: int) -> list[int]:
    cpus: list[int] = []
    for index in range(MAX_KEYS):
        word = words[index] & 0xFFFFFFFFFFFFFFFF
        base = index * 64
        while word:
            low = word & -word
            cpus.append(base + low.bit_length() - 1)
            word ^= low
        if len(cpus) >= count:
            break
    return cpus


def _psi_line(v: Any, base: int) -> PsiLine:
    return PsiLine(v[base] / 100, v[base + 1] / 100, v[base + 2] / 100, v[base + 3])


def _decode(kind: Kind, keys: Sequence[str] | None, result: Any) -> Any:
    """The Python value of a successful ``kc_result``."""
    v = result.v
    if kind is Kind.INT:
        return v[0]
    if kind is Kind.KV or kind is Kind.MEMINFO:
        found = result.found
        return {key: v[i] for i, key in enumerate(keys or ()) if found >> i & 1}
    if kind is Kind.CPU_MAX:
        return (v[0], v[1])
    if kind is Kind.CPULIST:
        return _cpus_from_bitmap(v, result.count)
    if kind is Kind.PSI:
        full = _psi_line(v, lib.KC_PSI_FULL_AVG10) if result.found & 2 else None
        return Psi(_psi_line(v, lib.KC_PSI_SOME_AVG10), full)
    if kind is Kind.PROC_STAT:
        return CpuTimes(*(v[i] if i < result.count else 0 for i in range(10)))
    return result.count  # RAW: bytes read


def read_file(path: str | os.PathLike[str], kind: Kind, keys: Sequence[str] | None = None) -> Any:
    """Reads and parses one file (nothing kept open); raises on any error."""
    raw = _check_path(path)
    out = ffi.new("struct kc_result *")
    rc = lib.kc_read_file(raw, kind, _keys_spec(kind, keys), out)
    if rc < 0:
        raise from_errno(rc, os.fsdecode(raw))
    return _decode(kind, keys, out)


def read_int(path: str | os.PathLike[str]) -> int:
    """An integer file (``cpuacct.usage``, ``cpu.cfs_quota_us``...); ``max`` reads as -1."""
    value: int = read_file(path, Kind.INT)
    return value


def read_cpu_max(path: str | os.PathLike[str]) -> tuple[int, int]:
    """cgroup v2 ``cpu.max`` as (quota, period); an unlimited quota is -1."""
    value: tuple[int, int] = read_file(path, Kind.CPU_MAX)
    return value


def read_cpulist(path: str | os.PathLike[str]) -> list[int]:
    """A CPU list file (``cpuset.cpus``, ``/sys/devices/system/cpu/online``) as sorted CPU ids."""
    value: list[int] = read_file(path, Kind.CPULIST)
    return value


def read_psi(path: str | os.PathLike[str]) -> Psi:
    """A PSI file (``/proc/pressure/cpu``, ``<cgroup>/memory.pressure``)."""
    value: Psi = read_file(path, Kind.PSI)
    return value


def _read_kv_all(path: str | os.PathLike[str], kind: Kind) -> dict[str, int]:
    raw = _check_path(path)
    names_len, max_keys = 1 << 16, 4096
    names = ffi.new("char[]", names_len)
    values = ffi.new("int64_t[]", max_keys)
    n = lib.kc_read_kv_all(raw, kind, names, names_len, values, max_keys)
    if n < 0:
        raise from_errno(n, os.fsdecode(raw))
    keys = ffi.buffer(names)[:].split(b"\0")
    return {keys[i].decode("utf-8", "replace"): values[i] for i in range(n)}


def read_kv(path: str | os.PathLike[str], keys: Sequence[str] | None = None) -> dict[str, int]:
    """A flat ``key value`` file (``memory.stat``, ``cpu.stat``): the selected keys that are present,
    or every key when ``keys`` is None."""
    if keys is None:
        return _read_kv_all(path, Kind.KV)
    value: dict[str, int] = read_file(path, Kind.KV, keys)
    return value


def read_meminfo(path: str | os.PathLike[str], keys: Sequence[str] | None = None) -> dict[str, int]:
    """``/proc/meminfo`` or ``/sys/devices/system/node/nodeN/meminfo``, values in bytes."""
    if keys is None:
        return _read_kv_all(path, Kind.MEMINFO)
    value: dict[str, int] = read_file(path, Kind.MEMINFO, keys)
    return value


def read_proc_stat(path: str | os.PathLike[str] = "/proc/stat") -> ProcStat:
    """The cpu lines of ``/proc/stat``."""
    raw = _check_path(path)
    cap = max(os.cpu_count() or 1, 1) * 2 + 2
    while True:
        out = ffi.new("struct kc_cpu_times[]", cap)
        n = lib.kc_read_proc_stat(raw, out, cap)
        if n != -errno.ENOSPC:
            break
        cap *= 4
    if n < 0:
        raise from_errno(n, os.fsdecode(raw))
    times = [(out[i].cpu, CpuTimes(*out[i].f)) for i in range(n)]
    return ProcStat(total=times[0][1], cpus=dict(times[1:]))


def parse(kind: Kind, data: bytes, keys: Sequence[str] | None = None) -> Any:
    """Parses content already in memory, with the same rules and errors as the file readers."""
    out = ffi.new("struct kc_result *")
    rc = lib.kc_parse_buffer(kind, _keys_spec(kind, keys), data, len(data), out)
    if rc < 0:
        raise from_errno(rc, f"{kind.name} content")
    return _decode(kind, keys, out)


def parse_result(kind: int, keys: str | None, data: bytes) -> tuple[int, int, int, list[int]]:
    """The raw C result (err, count, found, v) for bytes in memory: what the parity tests compare with
    :mod:`koordlet.native_ref`.  ``keys`` goes to C unchecked (space-separated)."""
    out = ffi.new("struct kc_result *")
    rc = lib.kc_parse_buffer(kind, keys.encode() if keys is not None else ffi.NULL, data, len(data), out)
    if rc == -errno.EINVAL and out.err == 0:
        return (errno.EINVAL, 0, 0, [0] * MAX_KEYS)
    return (int(out.err), int(out.count), int(out.found), list(out.v))


def parse_kv_all_result(
    kind: int, data: bytes, names_len: int = 1 << 16, max_keys: int = 4096
) -> list[tuple[bytes, int]] | int:
    """Every (key, value) of KV/MEMINFO bytes in file order, or the positive errno (parity tests)."""
    names = ffi.new("char[]", max(names_len, 1))
    values = ffi.new("int64_t[]", max(max_keys, 1))
    n = lib.kc_parse_kv_all_buffer(kind, data, len(data), names, names_len, values, max_keys)
    if n < 0:
        return int(-n)
    keys = ffi.buffer(names)[:].split(b"\0")
    return [(keys[i], int(values[i])) for i in range(n)]


def parse_proc_stat_result(data: bytes, cap: int = 4096) -> list[tuple[int, list[int]]] | int:
    """The cpu lines of /proc/stat bytes as [(cpu or -1, fields)], or the positive errno (parity tests)."""
    out = ffi.new("struct kc_cpu_times[]", max(cap, 1))
    n = lib.kc_parse_proc_stat_buffer(data, len(data), out, cap)
    if n < 0:
        return int(-n)
    return [(int(out[i].cpu), list(out[i].f)) for i in range(n)]


# ---------------------------------------------------------------------------------------- batches


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
        raw = _check_path(path)
        spec = _keys_spec(kind, keys)
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
        return _decode(entry.kind, entry.keys, result)

    def get(self, slot: int, default: Any = None) -> Any:
        """The parsed value, or ``default`` when this file failed."""
        entry = self._check(slot)
        result = self._out[slot]
        if result.err:
            return default
        return _decode(entry.kind, entry.keys, result)

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


# ---------------------------------------------------------------------------------------- raw loops
# Benchmark floors (tests/bench): the same I/O with no parsing and no bookkeeping.


def raw_open_read_close(paths: Sequence[bytes]) -> int:
    """Opens, reads and closes each file once; returns how many were read."""
    holders = [ffi.new("char[]", p) for p in paths]
    array = ffi.new("const char *[]", holders)
    return int(lib.kc_raw_open_read_close(array, len(paths), ffi.NULL))


class RawOpenFiles:
    """Files kept open and re-read with ``pread(fd, buf, n, 0)``: the floor of a batch read."""

    def __init__(self, paths: Sequence[bytes]) -> None:
        holders = [ffi.new("char[]", p) for p in paths]
        array = ffi.new("const char *[]", holders)
        self._n = len(paths)
        self._fds = ffi.new("int[]", self._n)
        self.opened = int(lib.kc_raw_open_all(array, self._n, self._fds))

    def pread_all(self) -> int:
        return int(lib.kc_raw_pread_all(self._fds, self._n, ffi.NULL))

    def close(self) -> None:
        lib.kc_raw_close_all(self._fds, self._n)


# ---------------------------------------------------------------------------------------- perf


class PerfEvent(enum.Enum):
    """perf_event_open (type, config) pairs (include/uapi/linux/perf_event.h)."""

    CPU_CYCLES = (0, 0)
    INSTRUCTIONS = (0, 1)
    CACHE_MISSES = (0, 3)
    CPU_CLOCK = (1, 0)
    TASK_CLOCK = (1, 1)
    PAGE_FAULTS = (1, 2)
    CONTEXT_SWITCHES = (1, 3)
    CPU_MIGRATIONS = (1, 4)


@dataclass(frozen=True, slots=True)
class PerfReading:
    """Counts summed over the group's CPUs, with the time the groups were enabled and running."""

    values: dict[PerfEvent, int]
    time_enabled_ns: int
    time_running_ns: int

    def scaled(self, event: PerfEvent) -> float:
        """The count corrected for multiplexing (value * enabled / running).  Per-cgroup events on a
        cgroup with no task switched in report no times at all: the raw value stands then."""
        if not self.time_running_ns:
            return float(self.values[event])
        return self.values[event] * self.time_enabled_ns / self.time_running_ns


class PerfGroup:
    """A perf_event group per CPU on a cgroup v2 directory, or one group on a task.

    Events the kernel lacks (hardware counters in a VM without a PMU: ENOENT) are dropped and listed in
    :attr:`event_errors`; opening fails only when no event opens at all.
    """

    def __init__(self, handle: Any, events: tuple[PerfEvent, ...], errors: dict[PerfEvent, int]) -> None:
        self._handle = handle
        self._events = events
        self.event_errors = errors
        self.events = tuple(e for e in events if e not in errors)

    @classmethod
    def open_cgroup(
        cls, cgroup_dir: str | os.PathLike[str], cpus: Sequence[int], events: Sequence[PerfEvent]
    ) -> PerfGroup:
        """Counts tasks of a cgroup v2 directory (hierarchically) on the given CPUs."""
        if not cpus:
            raise ValueError("per-cgroup perf needs at least one CPU")
        return cls._open(_check_path(cgroup_dir), 0, list(cpus), events)

    @classmethod
    def open_pid(cls, pid: int, events: Sequence[PerfEvent]) -> PerfGroup:
        """Counts one task (thread) on every CPU."""
        if pid <= 0:
            raise ValueError(f"invalid pid {pid}")
        return cls._open(None, pid, [], events)

    @classmethod
    def _open(cls, cgroup: bytes | None, pid: int, cpus: list[int], events: Sequence[PerfEvent]) -> PerfGroup:
        evs = tuple(events)
        if not evs or len(evs) > lib.KC_PERF_MAX_EVENTS or len(set(evs)) != len(evs):
            raise ValueError(f"need 1..{lib.KC_PERF_MAX_EVENTS} distinct events, got {evs}")
        types = ffi.new("uint32_t[]", [e.value[0] for e in evs])
        configs = ffi.new("uint64_t[]", [e.value[1] for e in evs])
        event_errs = ffi.new("int32_t[]", len(evs))
        err = ffi.new("int32_t *")
        cpu_array = ffi.new("int[]", cpus) if cpus else ffi.NULL
        handle = lib.kc_perf_open(
            cgroup if cgroup is not None else ffi.NULL, pid, cpu_array, len(cpus), types, configs, len(evs),
            event_errs, err,
        )
        target = os.fsdecode(cgroup) if cgroup is not None else f"pid {pid}"
        if handle == ffi.NULL:
            names = ", ".join(e.name for e in evs)
            raise from_errno(err[0], f"perf_event_open({names}) on {target}")
        errors = {e: int(event_errs[i]) for i, e in enumerate(evs) if event_errs[i]}
        return cls(ffi.gc(handle, lib.kc_perf_close), evs, errors)

    def enable(self) -> None:
        self._call(lib.kc_perf_enable, "enable")

    def disable(self) -> None:
        self._call(lib.kc_perf_disable, "disable")

    def read(self) -> PerfReading:
        handle = self._live()
        values = ffi.new("uint64_t[]", len(self._events))
        enabled = ffi.new("uint64_t *")
        running = ffi.new("uint64_t *")
        rc = lib.kc_perf_read(handle, values, enabled, running)
        if rc < 0:
            raise from_errno(rc, "perf read")
        counts = {e: int(values[i]) for i, e in enumerate(self._events) if e not in self.event_errors}
        return PerfReading(counts, int(enabled[0]), int(running[0]))

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            ffi.release(handle)

    def __enter__(self) -> PerfGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> Any:
        if self._handle is None:
            raise ValueError("perf group is closed")
        return self._handle

    def _call(self, fn: Any, what: str) -> None:
        rc = fn(self._live())
        if rc < 0:
            raise from_errno(rc, f"perf {what}")


# ---------------------------------------------------------------------------------------- core sched


class SchedCoreScope(enum.IntEnum):
    """Which tasks a PR_SCHED_CORE call covers (PIDTYPE_PID/TGID/PGID)."""

    THREAD = lib.KC_SCHED_CORE_SCOPE_THREAD
    THREAD_GROUP = lib.KC_SCHED_CORE_SCOPE_THREAD_GROUP
    PROCESS_GROUP = lib.KC_SCHED_CORE_SCOPE_PROCESS_GROUP


def _sched_core_check(rc: int, what: str) -> None:
    if rc >= 0:
        return
    # With valid arguments the kernel answers EINVAL when built without CONFIG_SCHED_CORE, and ENODEV
    # when the CPU has no SMT (kernel/sched/core_sched.c).
    if -rc == errno.EINVAL:
        raise Unsupported(errno.EINVAL, f"{what}: kernel has no core scheduling (PR_SCHED_CORE: EINVAL)")
    if -rc == errno.ENODEV:
        raise Unsupported(errno.ENODEV, f"{what}: no SMT siblings, core scheduling is off (ENODEV)")
    raise from_errno(rc, what)


def _check_pid(pid: int) -> None:
    if pid < 0:
        raise ValueError(f"invalid pid {pid}")


def sched_core_get(pid: int = 0) -> int:
    """The core-scheduling cookie of a task (0 = none; pid 0 = the caller)."""
    _check_pid(pid)
    cookie = ffi.new("uint64_t *")
    _sched_core_check(lib.kc_sched_core_get(pid, cookie), f"PR_SCHED_CORE_GET pid {pid}")
    return int(cookie[0])


def sched_core_create(pid: int, scope: SchedCoreScope) -> None:
    """Gives the tasks a new unique cookie."""
    _check_pid(pid)
    _sched_core_check(lib.kc_sched_core_create(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_CREATE pid {pid}")


def sched_core_share_to(pid: int, scope: SchedCoreScope) -> None:
    """Pushes the caller's cookie to the tasks."""
    _check_pid(pid)
    _sched_core_check(lib.kc_sched_core_share_to(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_SHARE_TO pid {pid}")


def sched_core_share_from(pid: int, scope: SchedCoreScope = SchedCoreScope.THREAD) -> None:
    """Pulls the task's cookie onto the caller (the kernel accepts only a thread here)."""
    _check_pid(pid)
    _sched_core_check(
        lib.kc_sched_core_share_from(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_SHARE_FROM pid {pid}"
    )


# ---------------------------------------------------------------------------------------- PSI triggers


class PsiTrigger:
    """A registered PSI trigger (Documentation/accounting/psi.rst): ``"some 150000 2000000"`` fires
    when tasks stall 150 ms within any 2 s window.  Without CAP_SYS_RESOURCE the window must be a
    multiple of 2 s."""

    def __init__(self, path: str | os.PathLike[str], trigger: str) -> None:
        self.fd = -1
        raw = _check_path(path)
        parts = trigger.split()
        if len(parts) != 3 or parts[0] not in ("some", "full") or not all(p.isdigit() for p in parts[1:]):
            raise ParseError(f"PSI trigger must be '<some|full> <stall_us> <window_us>', got {trigger!r}")
        fd = lib.kc_psi_trigger_open(raw, " ".join(parts).encode())
        if fd < 0:
            raise from_errno(fd, f"PSI trigger {trigger!r} on {os.fsdecode(raw)}")
        self.path = os.fsdecode(raw)
        self.trigger = " ".join(parts)
        self.fd = int(fd)

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            lib.kc_close(self.fd)
            self.fd = -1

    def __enter__(self) -> PsiTrigger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class PsiPoll:
    """Triggers that fired, and triggers whose file broke (cgroup removed: POLLERR)."""

    fired: list[PsiTrigger]
    broken: list[PsiTrigger]


_POLLPRI, _POLLERR, _POLLHUP, _POLLNVAL = 0x2, 0x8, 0x10, 0x20


def psi_poll(triggers: Sequence[PsiTrigger], timeout_ms: int) -> PsiPoll:
    """Waits up to ``timeout_ms`` for any trigger (an interrupting signal returns early, empty)."""
    live = [t for t in triggers if t.fd >= 0]
    fds = ffi.new("int[]", [t.fd for t in live]) if live else ffi.NULL
    revents = ffi.new("int16_t[]", max(len(live), 1))
    rc = lib.kc_psi_poll(fds, len(live), timeout_ms, revents)
    if rc == -errno.EINTR:
        return PsiPoll([], [])
    if rc < 0:
        raise from_errno(rc, "poll on PSI triggers")
    broken = [t for i, t in enumerate(live) if revents[i] & (_POLLERR | _POLLHUP | _POLLNVAL)]
    fired = [t for i, t in enumerate(live) if revents[i] & _POLLPRI and t not in broken]
    return PsiPoll(fired, broken)


# ---------------------------------------------------------------------------------------- inotify


@dataclass(frozen=True, slots=True)
class InotifyEvent:
    """One inotify(7) event: the watch it came from, its mask bits and the entry name (may be empty)."""

    wd: int
    mask: int
    name: str


IN_CREATE = lib.KC_IN_CREATE
IN_DELETE = lib.KC_IN_DELETE
IN_MOVED_FROM = lib.KC_IN_MOVED_FROM
IN_MOVED_TO = lib.KC_IN_MOVED_TO
IN_DELETE_SELF = lib.KC_IN_DELETE_SELF
IN_IGNORED = lib.KC_IN_IGNORED
IN_Q_OVERFLOW = lib.KC_IN_Q_OVERFLOW
IN_ISDIR = lib.KC_IN_ISDIR

_INOTIFY_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


def parse_inotify_events(data: bytes) -> list[InotifyEvent]:
    """Decodes a buffer of struct inotify_event records; a truncated record ends the list."""
    events = []
    offset = 0
    while offset + _INOTIFY_HEADER.size <= len(data):
        wd, mask, _cookie, length = _INOTIFY_HEADER.unpack_from(data, offset)
        offset += _INOTIFY_HEADER.size
        if offset + length > len(data):
            break
        name = data[offset:offset + length].split(b"\0", 1)[0]
        offset += length
        events.append(InotifyEvent(wd, mask, os.fsdecode(name)))
    return events


class Inotify:
    """A non-blocking inotify instance; poll :meth:`fileno` (select/selectors) and call :meth:`read`."""

    _BUFFER = 64 * 1024

    def __init__(self) -> None:
        fd = lib.kc_inotify_open()
        if fd < 0:
            raise from_errno(fd, "inotify_init1")
        self._fd = int(fd)
        self._buf = ffi.new("char[]", self._BUFFER)

    def fileno(self) -> int:
        return self._fd

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watches a directory; returns the watch descriptor (raises CgroupGone when it is missing)."""
        raw = _check_path(path)
        wd = lib.kc_inotify_add(self._fd, raw, mask)
        if wd < 0:
            raise from_errno(wd, f"inotify watch on {os.fsdecode(raw)}")
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        rc = lib.kc_inotify_remove(self._fd, wd)
        if rc < 0 and -rc != errno.EINVAL:  # EINVAL: the kernel already dropped it (directory removed)
            raise from_errno(rc, f"inotify_rm_watch {wd}")

    def read(self) -> list[InotifyEvent]:
        """Events pending now (empty when none): never blocks."""
        n = lib.kc_inotify_read(self._fd, self._buf, self._BUFFER)
        if n < 0:
            raise from_errno(n, "inotify read")
        return parse_inotify_events(ffi.buffer(self._buf, n)[:]) if n else []

    def close(self) -> None:
        if self._fd >= 0:
            lib.kc_close(self._fd)
            self._fd = -1

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self.close()
