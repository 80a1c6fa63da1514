"""Reading and parsing single files, or bytes already in memory, with the C parsers."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.errors import from_errno
from koordlet.native.core import MAX_KEYS, Kind, check_path, ffi, keys_spec, lib

# Large enough for every key of memory.stat or /proc/meminfo; the C core answers ENOSPC beyond.
_KV_ALL_NAMES_BYTES = 1 << 16
_KV_ALL_MAX_KEYS = 4096


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


def decode(kind: Kind, keys: Sequence[str] | None, result: Any) -> Any:
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
    raw = check_path(path)
    out = ffi.new("struct kc_result *")
    rc = lib.kc_read_file(raw, kind, keys_spec(kind, keys), out)
    if rc < 0:
        raise from_errno(rc, os.fsdecode(raw))
    return decode(kind, keys, out)


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


def _kv_all_buffers(names_len: int, max_keys: int) -> tuple[Any, Any]:
    return ffi.new("char[]", max(names_len, 1)), ffi.new("int64_t[]", max(max_keys, 1))


def _kv_all_pairs(names: Any, values: Any, n: int) -> list[tuple[bytes, int]]:
    keys = ffi.buffer(names)[:].split(b"\0")
    return [(keys[i], int(values[i])) for i in range(n)]


def _read_kv_all(path: str | os.PathLike[str], kind: Kind) -> dict[str, int]:
    raw = check_path(path)
    names, values = _kv_all_buffers(_KV_ALL_NAMES_BYTES, _KV_ALL_MAX_KEYS)
    n = lib.kc_read_kv_all(raw, kind, names, _KV_ALL_NAMES_BYTES, values, _KV_ALL_MAX_KEYS)
    if n < 0:
        raise from_errno(n, os.fsdecode(raw))
    return {key.decode("utf-8", "replace"): value for key, value in _kv_all_pairs(names, values, n)}


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
    raw = check_path(path)
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
    rc = lib.kc_parse_buffer(kind, keys_spec(kind, keys), data, len(data), out)
    if rc < 0:
        raise from_errno(rc, f"{kind.name} content")
    return decode(kind, keys, out)


# The raw results below are what the parity tests compare with koordlet.native_ref.


def parse_result(kind: int, keys: str | None, data: bytes) -> tuple[int, int, int, list[int]]:
    """The raw C result (err, count, found, v) for bytes in memory.  ``keys`` goes to C unchecked
    (space-separated)."""
    out = ffi.new("struct kc_result *")
    rc = lib.kc_parse_buffer(kind, keys.encode() if keys is not None else ffi.NULL, data, len(data), out)
    if rc == -errno.EINVAL and out.err == 0:
        return (errno.EINVAL, 0, 0, [0] * MAX_KEYS)
    return (int(out.err), int(out.count), int(out.found), list(out.v))


def parse_kv_all_result(
    kind: int, data: bytes, names_len: int = _KV_ALL_NAMES_BYTES, max_keys: int = _KV_ALL_MAX_KEYS
) -> list[tuple[bytes, int]] | int:
    """Every (key, value) of KV/MEMINFO bytes in file order, or the positive errno."""
    names, values = _kv_all_buffers(names_len, max_keys)
    n = lib.kc_parse_kv_all_buffer(kind, data, len(data), names, names_len, values, max_keys)
    if n < 0:
        return int(-n)
    return _kv_all_pairs(names, values, n)


def parse_proc_stat_result(data: bytes, cap: int = 4096) -> list[tuple[int, list[int]]] | int:
    """The cpu lines of /proc/stat bytes as [(cpu or -1, fields)], or the positive errno."""
    out = ffi.new("struct kc_cpu_times[]", max(cap, 1))
    n = lib.kc_parse_proc_stat_buffer(data, len(data), out, cap)
    if n < 0:
        return int(-n)
    return [(int(out[i].cpu), list(out[i].f)) for i in range(n)]
