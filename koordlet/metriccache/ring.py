"""Fixed-capacity in-memory series: the recent samples every query and aggregate reads first."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from koordlet.native import RING_HEADER

_H = RING_HEADER
_START, _LEN, _PENDING = 1, 2, 3
"""Header slots (slot 0 holds the capacity): the C core's batch append reads and moves them too."""


class Ring:
    """Timestamped float samples in one ``array('d')`` buffer: a header (capacity, start, length, pending), then
    the times, then the values (16 bytes a sample, no per-sample objects; one buffer, not several: a node has
    tens of thousands of series, and each array is an object and an allocation of its own).  The header lives in
    the buffer so the C core can append a column of samples to thousands of rings in one call
    (:class:`koordlet.native.RingColumn`).

    Appends must come in time order; an older or equal timestamp is dropped (a clock step back must not
    corrupt windows).  ``pending`` counts samples not yet written to disk.
    """

    __slots__ = ("_b", "_cap")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, got {capacity}")
        self._b = array("d", bytes(8 * (_H + 2 * capacity)))
        self._b[0] = capacity
        self._cap = capacity

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def buffer(self) -> array[float]:
        """The buffer, for :class:`koordlet.native.RingColumn`."""
        return self._b

    @property
    def pending(self) -> int:
        return int(self._b[_PENDING])

    @pending.setter
    def pending(self, count: int) -> None:
        self._b[_PENDING] = count

    def __len__(self) -> int:
        return int(self._b[_LEN])

    def append(self, t: float, value: float) -> bool:
        """Adds a sample; returns False (and drops it) when it is not newer than the last one (the same rule
        as ``kc_ring_append_all``)."""
        b, cap = self._b, self._cap
        s, n = int(b[_START]), int(b[_LEN])
        if n:
            last = s + n - 1
            if t <= b[_H + (last - cap if last >= cap else last)]:
                return False
        if n < cap:
            i = s + n
            if i >= cap:
                i -= cap
            n += 1
            b[_LEN] = n
        else:
            i = s
            b[_START] = s + 1 if s + 1 < cap else 0
        b[_H + i] = t
        b[_H + cap + i] = value
        pending = b[_PENDING] + 1
        b[_PENDING] = pending if pending < n else n
        return True

    def last(self) -> tuple[float, float] | None:
        # Strategies ask it of every container every round.
        b = self._b
        n = int(b[_LEN])
        if not n:
            return None
        cap = self._cap
        i = int(b[_START]) + n - 1
        if i >= cap:
            i -= cap
        return b[_H + i], b[_H + cap + i]

    def first_time(self) -> float | None:
        b = self._b
        return b[_H + int(b[_START])] if b[_LEN] else None

    def window(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples with start <= t <= end, oldest first.  Searches the buffer in place (C bisect) and
        copies only the window: strategies ask for a few seconds of hundreds of series every round."""
        return self._slice(self._search(start, bisect_left), self._search(end, bisect_right))

    def mean(self, start: float, end: float) -> float | None:
        """The average of the values of :meth:`window` (None when it holds none), summed exactly (``fsum``)
        from the buffer without a list: strategies ask it of hundreds of series a round."""
        b, cap = self._b, self._cap
        s, n = int(b[_START]), int(b[_LEN])
        if s + n <= cap:
            lo = bisect_left(b, start, _H + s, _H + s + n)
            values: Sequence[float] = b[cap + lo:cap + bisect_right(b, end, lo, _H + s + n)]
        else:
            values = self.values(start, end)
        return math.fsum(values) / len(values) if values else None

    def values(self, start: float, end: float) -> list[float]:
        """The values of :meth:`window` alone: a mean over hundreds of series needs no times."""
        b, cap = self._b, self._cap
        s, n = int(b[_START]), int(b[_LEN])
        # Within one sorted run, sliced in place: the run [start, start + len) of a ring that has not wrapped,
        # or the newer run [0, start + len - capacity) of one that has, when the window begins in it (a window
        # of the last seconds, unless the wrap point falls within it).  Indexes below are buffer positions.
        if s + n <= cap:
            lo = bisect_left(b, start, _H + s, _H + s + n)
            return b[cap + lo:cap + bisect_right(b, end, lo, _H + s + n)].tolist()
        newer = s + n - cap
        if b[_H] <= start:
            lo = bisect_left(b, start, _H, _H + newer)
            return b[cap + lo:cap + bisect_right(b, end, lo, _H + newer)].tolist()
        lo, hi = self._search(start, bisect_left), self._search(end, bisect_right)
        if lo >= hi:
            return []
        i, j = (s + lo) % cap, (s + hi) % cap or cap
        v = _H + cap
        if i < j:
            return b[v + i:v + j].tolist()
        return b[v + i:v + cap].tolist() + b[v:v + j].tolist()

    def _search(self, x: float, find: Callable[..., int]) -> int:
        """``find`` (bisect_left or bisect_right) over the logical order: the times hold at most two
        sorted runs, [start, cap) and then [0, start + len - cap)."""
        b, cap = self._b, self._cap
        s, n = int(b[_START]), int(b[_LEN])
        if s + n <= cap:
            return int(find(b, x, _H + s, _H + s + n)) - _H - s
        i = int(find(b, x, _H + s, _H + cap)) - _H
        if i < cap:
            return i - s
        return cap - s + int(find(b, x, _H, _H + s + n - cap)) - _H

    def _slice(self, lo: int, hi: int) -> tuple[list[float], list[float]]:
        if lo >= hi:
            return [], []
        b, cap = self._b, self._cap
        s = int(b[_START])
        i, j = (s + lo) % cap, (s + hi) % cap or cap
        t, v = _H, _H + cap
        if i < j:
            return b[t + i:t + j].tolist(), b[v + i:v + j].tolist()
        return (b[t + i:t + cap].tolist() + b[t:t + j].tolist(),
                b[v + i:v + cap].tolist() + b[v:v + j].tolist())

    def tail(self, n: int) -> tuple[list[float], list[float]]:
        """The newest ``n`` samples, oldest first."""
        length = len(self)
        n = min(max(n, 0), length)
        return self._slice(length - n, length)
