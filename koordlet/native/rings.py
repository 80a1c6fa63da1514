"""A column of metric rings appended to in one C call (``kc_ring_append_all``).

The collectors append one sample to each of thousands of series every tick; a Python loop over them (a method
call and a dozen buffer operations a sample) was a tenth of the daemon's CPU.  A :class:`RingColumn` holds
pointers to the rings' buffers (``koordlet.metriccache.ring``'s layout: a header of :data:`RING_HEADER`
doubles, then the times, then the values), appends a whole column of values at once, and reads every ring's
newest sample at once (the strategies ask for it of every container every round).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from koordlet.native.core import ffi, lib

RING_HEADER: int = lib.KC_RING_HEADER
"""Doubles before a ring's times: capacity, start, length, pending."""


class RingColumn:
    """The buffers of ``len(buffers)`` rings (None for a series not held), appended to and read together.

    It keeps the buffers alive (also after their series is dropped: appends then land where no query looks) and
    their addresses, which hold while an ``array`` is not resized (rings never are): one pointer a ring, not a
    cffi object (a node has tens of thousands of series, and the daemon's memory budget is tight)."""

    __slots__ = ("_buffers", "_pointers", "_size", "_times", "_values")

    def __init__(self, buffers: Sequence[array[float] | None]) -> None:
        for buffer in buffers:
            if buffer is not None and (buffer.typecode != "d" or len(buffer) < RING_HEADER
                                       or len(buffer) != RING_HEADER + 2 * int(buffer[0])):
                raise ValueError("a ring buffer is an array('d') of the header, the times and the values")
        self._buffers = list(buffers)
        self._size = len(buffers)
        addresses = ffi.new("uintptr_t[]", [0 if b is None else b.buffer_info()[0] for b in buffers] or [0])
        self._pointers = (addresses, ffi.cast("double **", addresses))
        self._values = ffi.new("double[]", max(self._size, 1))
        self._times: Any = None  # made by the first last_all(): most columns are only appended to

    def __len__(self) -> int:
        return self._size

    def append(self, t: float, values: Sequence[float]) -> int:
        """Appends ``values[i]`` at ``t`` to ring i (NaN, a missing ring and a time not newer than its last are
        skipped); returns how many were appended.  The caller holds the rings' lock."""
        if len(values) != self._size:
            raise ValueError(f"{len(values)} values for {self._size} rings")
        if not self._size:
            return 0
        self._values[0:self._size] = values
        return int(lib.kc_ring_append_all(self._pointers[1], self._size, t, self._values))

    def last_all(self) -> tuple[list[float], list[float]]:
        """(times, values) of each ring's newest sample, NaN for an empty or missing ring.  The caller holds
        the rings' lock."""
        if not self._size:
            return [], []
        if self._times is None:
            self._times = ffi.new("double[]", self._size)
        lib.kc_ring_last_all(self._pointers[1], self._size, self._times, self._values)
        return ffi.unpack(self._times, self._size), ffi.unpack(self._values, self._size)
