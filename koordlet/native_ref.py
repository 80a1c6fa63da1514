"""Pure-Python reference of the C core's parsers (csrc/kcore_parse.c).

Tests feed the same bytes to both and require identical results, errors included; the benchmark uses
it as the "plain Python" baseline.  It mirrors the C code step by step, so a change of accepted syntax
goes into both.  Results use the C layout: ``Result(err, count, found, v)`` with 32 int64 values.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

MAX_VALUES = 32
MAX_CPUS = MAX_VALUES * 64
MAX_FILE = 65536
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
UINT64_MAX = (1 << 64) - 1
INT32_MAX = (1 << 31) - 1

INT, KV, CPU_MAX, CPULIST, PSI, MEMINFO, RAW, PROC_STAT = range(1, 9)

EBADMSG, ERANGE, ENODATA, EFBIG, ENOSPC, EINVAL = (
    errno.EBADMSG, errno.ERANGE, errno.ENODATA, errno.EFBIG, errno.ENOSPC, errno.EINVAL,
)

_BLANK = b" \t"
_SPACE = b" \t\n"


@dataclass
class Result:
    err: int = 0
    count: int = 0
    found: int = 0
    v: list[int] = field(default_factory=lambda: [0] * MAX_VALUES)


class _Fail(Exception):
    def __init__(self, err: int) -> None:
        self.err = err


def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


def _u64(s: bytes, p: int, limit: int) -> tuple[int, int]:
    """Unsigned decimal at p (one digit at least); returns (value, end)."""
    end = p
    while end < len(s) and _is_digit(s[end]):
        end += 1
    if end == p:
        raise _Fail(EBADMSG)
    value = int(s[p:end])
    if value > limit:
        raise _Fail(ERANGE)
    return value, end


def _i64(s: bytes, p: int) -> tuple[int, int]:
    neg = p < len(s) and s[p] == 0x2D
    value, end = _u64(s, p + 1 if neg else p, INT64_MAX)
    return (-value if neg else value), end


def _skip_blanks(s: bytes, p: int, end: int | None = None) -> int:
    end = len(s) if end is None else end
    while p < end and s[p] in _BLANK:
        p += 1
    return p


def _lines(buf: bytes) -> list[bytes]:
    lines = (line.strip(_BLANK) for line in buf.split(b"\n"))
    return [line for line in lines if line]


def parse_keys(spec: str) -> list[str]:
    keys = [k for k in spec.split(" ") if k]
    if not keys or len(keys) > MAX_VALUES or any(len(k.encode()) >= 64 for k in keys):
        raise _Fail(EINVAL)
    return keys


def _parse_int(buf: bytes, out: Result) -> None:
    s = buf.strip(_SPACE)
    if not s:
        raise _Fail(ENODATA)
    if s == b"max":
        out.v[0] = -1
    else:
        out.v[0], end = _i64(s, 0)
        if end != len(s):
            raise _Fail(EBADMSG)
    out.count = 1


def _parse_cpu_max(buf: bytes, out: Result) -> None:
    s = buf.strip(_SPACE)
    if not s:
        raise _Fail(ENODATA)
    if s[:3] == b"max" and (len(s) == 3 or s[3] in _BLANK):
        out.v[0], q = -1, 3
    else:
        out.v[0], q = _i64(s, 0)
    if q >= len(s) or s[q] not in _BLANK:
        raise _Fail(EBADMSG)
    out.v[1], q = _i64(s, _skip_blanks(s, q))
    if q != len(s):
        raise _Fail(EBADMSG)
    out.count = 2


def _parse_cpulist(buf: bytes, out: Result) -> None:
    s = buf.strip(_SPACE)
    bits = [0] * MAX_VALUES
    p, count = 0, 0
    while p < len(s):
        lo, p = _u64(s, p, UINT64_MAX)
        hi = lo
        if p < len(s) and s[p] == 0x2D:
            hi, p = _u64(s, p + 1, UINT64_MAX)
        if lo > hi:
            raise _Fail(EBADMSG)
        if hi >= MAX_CPUS:
            raise _Fail(ERANGE)
        if p < len(s):
            if s[p] != 0x2C or p + 1 == len(s):
                raise _Fail(EBADMSG)
            p += 1
        for c in range(lo, hi + 1):
            if not bits[c // 64] >> (c % 64) & 1:
                bits[c // 64] |= 1 << (c % 64)
                count += 1
    out.v = [w - (1 << 64) if w > INT64_MAX else w for w in bits]
    out.count = count


def _kv_line(kind: int, s: bytes) -> tuple[bytes, int]:
    """One trimmed KV or MEMINFO line -> (key, value)."""
    p, e = 0, len(s)
    if kind == MEMINFO and e > 5 and s[:4] == b"Node" and s[4] in _BLANK:
        p = _skip_blanks(s, 4)
        try:
            _, p = _u64(s, p, UINT64_MAX)
        except _Fail:
            raise _Fail(EBADMSG) from None
        if p >= e or s[p] not in _BLANK:
            raise _Fail(EBADMSG)
        p = _skip_blanks(s, p)
    k = p
    if kind == MEMINFO:
        while p < e and s[p] not in _BLANK and s[p] != 0x3A:
            p += 1
        if p == k or p >= e or s[p] != 0x3A:
            raise _Fail(EBADMSG)
        key = s[k:p]
        p += 1
    else:
        while p < e and s[p] not in _BLANK:
            p += 1
        key = s[k:p]
        if p >= e:
            raise _Fail(EBADMSG)
    value, p = _i64(s, _skip_blanks(s, p))
    if kind == MEMINFO and p < e:
        u = _skip_blanks(s, p)
        if u == p or s[u:] != b"kB":
            raise _Fail(EBADMSG)
        if value > INT64_MAX // 1024 or value < INT64_MIN // 1024:
            raise _Fail(ERANGE)
        value *= 1024
        p = e
    if p != e:
        raise _Fail(EBADMSG)
    return key, value


def _parse_kv(kind: int, keys: list[str], buf: bytes, out: Result) -> None:
    index: dict[bytes, int] = {}
    for i, key in enumerate(keys):
        index.setdefault(key.encode(), i)
    for line in _lines(buf):
        name, value = _kv_line(kind, line)
        slot = index.get(name)
        if slot is not None:
            out.v[slot] = value
            out.found |= 1 << slot
    out.count = bin(out.found).count("1")


def _psi_avg(s: bytes, p: int, name: bytes) -> tuple[int, int]:
    n = len(name)
    if len(s) - p < n + 1 or s[p:p + n] != name or s[p + n] != 0x3D:
        raise _Fail(EBADMSG)
    whole, p = _u64(s, p + n + 1, INT64_MAX // 100 - 1)
    if len(s) - p < 3 or s[p] != 0x2E or not _is_digit(s[p + 1]) or not _is_digit(s[p + 2]):
        raise _Fail(EBADMSG)
    return whole * 100 + (s[p + 1] - 48) * 10 + (s[p + 2] - 48), p + 3


def _parse_psi(buf: bytes, out: Result) -> None:
    for s in _lines(buf):
        if len(s) > 4 and s[:4] == b"some" and s[4] in _BLANK:
            base = 0
        elif len(s) > 4 and s[:4] == b"full" and s[4] in _BLANK:
            base = 4
        else:
            raise _Fail(EBADMSG)
        p = 4
        for i, name in enumerate((b"avg10", b"avg60", b"avg300")):
            if p >= len(s) or s[p] not in _BLANK:
                raise _Fail(EBADMSG)
            out.v[base + i], p = _psi_avg(s, _skip_blanks(s, p), name)
        if p >= len(s) or s[p] not in _BLANK:
            raise _Fail(EBADMSG)
        p = _skip_blanks(s, p)
        if s[p:p + 6] != b"total=":
            raise _Fail(EBADMSG)
        total, p = _u64(s, p + 6, INT64_MAX)
        if p != len(s):
            raise _Fail(EBADMSG)
        out.v[base + 3] = total
        out.found |= 1 if base == 0 else 2
    if not out.found & 1:
        raise _Fail(EBADMSG if out.found else ENODATA)
    out.count = 8 if out.found & 2 else 4


def _cpu_fields(s: bytes, p: int, limit: int) -> list[int]:
    """The numbers after a cpu line's name at p: at least 4, the first 10 kept, each at most ``limit``."""
    fields: list[int] = []
    while p < len(s):
        if s[p] not in _BLANK:
            raise _Fail(EBADMSG)
        value, p = _u64(s, _skip_blanks(s, p), limit)
        if len(fields) < 10:
            fields.append(value)
    if len(fields) < 4:
        raise _Fail(EBADMSG)
    return fields


def _parse_proc_stat_total(buf: bytes, out: Result) -> None:
    for s in _lines(buf):
        if len(s) < 4 or s[:3] != b"cpu" or s[3] not in _BLANK:
            continue
        fields = _cpu_fields(s, 3, INT64_MAX)
        out.v[: len(fields)] = fields
        out.count = len(fields)
        return
    raise _Fail(EBADMSG)


def parse(kind: int, keys: list[str] | None, buf: bytes) -> Result:
    """The reference of ``kc_parse``: a Result whose err is 0 or the entry's errno."""
    out = Result()
    try:
        if kind == INT:
            _parse_int(buf, out)
        elif kind in (KV, MEMINFO):
            _parse_kv(kind, keys or [], buf, out)
        elif kind == CPU_MAX:
            _parse_cpu_max(buf, out)
        elif kind == CPULIST:
            _parse_cpulist(buf, out)
        elif kind == PSI:
            _parse_psi(buf, out)
        elif kind == RAW:
            out.count = len(buf)
        elif kind == PROC_STAT:
            _parse_proc_stat_total(buf, out)
        else:
            raise _Fail(EINVAL)
    except _Fail as fail:
        out.err = fail.err
    return out


def parse_kv_all(
    kind: int, buf: bytes, names_len: int = 1 << 16, max_keys: int = 4096
) -> list[tuple[bytes, int]] | int:
    """The reference of ``kc_parse_kv_all``: every (key, value) in file order, or the errno."""
    result: list[tuple[bytes, int]] = []
    used = 0
    try:
        for line in _lines(buf):
            key, value = _kv_line(kind, line)
            if len(result) >= max_keys or used + len(key) + 1 > names_len:
                raise _Fail(ENOSPC)
            used += len(key) + 1
            result.append((key, value))
    except _Fail as fail:
        return fail.err
    return result


def parse_proc_stat(buf: bytes, cap: int = 4096) -> list[tuple[int, list[int]]] | int:
    """The reference of ``kc_parse_proc_stat``: [(cpu or -1, 10 fields)], aggregate first, or the errno."""
    if cap < 1:
        return ENOSPC
    total: tuple[int, list[int]] | None = None
    cpus: list[tuple[int, list[int]]] = []
    try:
        for s in _lines(buf):
            if len(s) < 3 or s[:3] != b"cpu":
                continue
            p = 3
            if p < len(s) and s[p] in _BLANK:
                cpu = -1
            else:
                try:
                    cpu, p = _u64(s, p, INT32_MAX)
                except _Fail:
                    raise _Fail(EBADMSG) from None
                if len(cpus) + 1 >= cap:
                    raise _Fail(ENOSPC)
            fields = _cpu_fields(s, p, UINT64_MAX)
            entry = (cpu, fields + [0] * (10 - len(fields)))
            if cpu == -1:
                total = entry
            else:
                cpus.append(entry)
    except _Fail as fail:
        return fail.err
    if total is None:
        return EBADMSG
    return [total, *cpus]


def read_file(path: str | os.PathLike[str], kind: int, keys: list[str] | None = None) -> Result:
    """Reads and parses one file the plain-Python way (the benchmark's baseline)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        return Result(err=exc.errno or errno.EIO)
    if len(data) > MAX_FILE:
        return Result(err=EFBIG)
    return parse(kind, keys, data)
