"""History chunks: a series' samples as the metric store keeps them on disk (``csrc/kcore_chunk.c``).

A chunk is the byte :data:`CHUNK_XOR`, then the times and the values, each column XOR-encoded against a
prediction, and a hash: 11-12 bytes a sample of CPU usage and 6-7 of memory where zlib made 14 and 8, at a
fraction of a microsecond a chunk where zlib spent 15-25 us.  :func:`encode_pending` encodes every ring's
samples not yet on disk in one C call (a flush of thousands of series).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from koordlet.native.core import ffi, lib

CHUNK_XOR: int = lib.KC_CHUNK_XOR
"""The first byte of a chunk in this format (a zlib stream, the store's older format, never starts with it)."""


def _doubles(column: Sequence[float]) -> array[float]:
    return column if isinstance(column, array) and column.typecode == "d" else array("d", column)


def encode_chunk(times: Sequence[float], values: Sequence[float]) -> bytes:
    """One chunk of ``len(times)`` samples."""
    n = len(times)
    if len(values) != n:
        raise ValueError(f"{n} times and {len(values)} values")
    t, v = _doubles(times), _doubles(values)
    out = ffi.new("unsigned char[]", lib.kc_chunk_bound(n))
    size = lib.kc_chunk_encode(ffi.from_buffer("double[]", t), ffi.from_buffer("double[]", v), n, out)
    return bytes(ffi.buffer(out, size))


def decode_chunk(blob: bytes, n: int) -> tuple[array[float], array[float]]:
    """The times and values of a chunk of ``n`` samples; ValueError when ``blob`` is not one."""
    times, values = array("d", bytes(8 * n)), array("d", bytes(8 * n))
    if lib.kc_chunk_decode(blob, len(blob), n, ffi.from_buffer("double[]", times),
                           ffi.from_buffer("double[]", values)) != 0:
        raise ValueError(f"not a chunk of {n} samples ({len(blob)} bytes)")
    return times, values


@dataclass(frozen=True)
class PendingChunks:
    """What :func:`encode_pending` made: ring i's chunk is ``data[offsets[i]:offsets[i + 1]]``."""

    data: bytes
    offsets: list[int]
    counts: list[int]
    first: list[float]
    last: list[float]

    def chunk(self, i: int) -> bytes:
        return self.data[self.offsets[i]:self.offsets[i + 1]]


def encode_pending(buffers: Sequence[array[float]]) -> PendingChunks:
    """The samples of each ring (``koordlet.metriccache.ring``'s buffers) not yet on disk, a chunk each, and
    their pending counts reset.  The caller holds the rings' lock."""
    n = len(buffers)
    rings = ffi.new("double *[]", [ffi.from_buffer("double[]", b) for b in buffers] or [ffi.NULL])
    out = ffi.new("unsigned char[]", max(1, lib.kc_ring_pending_bound(rings, n)))
    offsets, counts = ffi.new("long[]", n + 1), ffi.new("long[]", max(n, 1))
    first, last = ffi.new("double[]", max(n, 1)), ffi.new("double[]", max(n, 1))
    size = lib.kc_ring_encode_pending(rings, n, out, offsets, counts, first, last)
    if size < 0:
        raise MemoryError("encoding history chunks")
    return PendingChunks(ffi.buffer(out, size)[:], ffi.unpack(offsets, n + 1), ffi.unpack(counts, n),
                         ffi.unpack(first, n), ffi.unpack(last, n))
