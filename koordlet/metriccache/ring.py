"""Fixed-capacity in-memory series: the recent samples every query and aggregate reads first."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence


class Ring:
    """Timestamped float samples in one ``array('d')`` buffer, times in its first half and values in its
    second (16 bytes a sample, no per-sample objects; one buffer, not two: a node has tens of thousands of
    series, and each array is an object and an allocation of its own).

    Appends must come in time order; an older or equal timestamp is dropped (a clock step back must not
    corrupt windows).  ``pending`` counts samples not yet written to disk.
    """

    __slots__ = ("_b", "_cap", "_len", "_start", "pending")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, got {capacity}")
        self._b = array("d", bytes(16 * capacity))
        self._cap = capacity
        self._start = 0
        self._len = 0
        self.pending = 0

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        return self._len

    def append(self, t: float, value: float) -> bool:
        """Adds a sample; returns False (and drops it) when it is not newer than the last one."""
        # Locals and no modulo or min(): the collectors append thousands of samples a second.
        buf = self._b
        cap, s, n = self._cap, self._start, self._len
        if n:
            last = s + n - 1
            if t <= buf[last - cap if last >= cap else last]:
                return False
        if n < cap:
            i = s + n
            if i >= cap:
                i -= cap
            self._len = n = n + 1
        else:
            i = s
            self._start = s + 1 if s + 1 < cap else 0
        buf[i] = t
        buf[cap + i] = value
        pending = self.pending + 1
        self.pending = pending if pending < n else n
        return True

    def last(self) -> tuple[float, float] | None:
        if not self._len:
            return None
        i = (self._start + self._len - 1) % self._cap
        return self._b[i], self._b[self._cap + i]

    def first_time(self) -> float | None:
        return self._b[self._start] if self._len else None

    def window(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples with start <= t <= end, oldest first.  Searches the buffers in place (C bisect) and
        copies only the window: strategies ask for a few seconds of hundreds of series every round."""
        return self._slice(self._search(start, bisect_left), self._search(end, bisect_right))

    def mean(self, start: float, end: float) -> float | None:
        """The average of the values of :meth:`window` (None when it holds none), summed exactly (``fsum``)
        from the buffer without a list: strategies ask it of hundreds of series a round."""
        b, cap, s, n = self._b, self._cap, self._start, self._len
        if s + n <= cap:
            lo = bisect_left(b, start, s, s + n)
            values: Sequence[float] = b[cap + lo:cap + bisect_right(b, end, lo, s + n)]
        else:
            values = self.values(start, end)
        return math.fsum(values) / len(values) if values else None

    def values(self, start: float, end: float) -> list[float]:
        """The values of :meth:`window` alone: a mean over hundreds of series needs no times."""
        b, cap, s, n = self._b, self._cap, self._start, self._len
        # Within one sorted run, sliced in place: the run [start, start + len) of a ring that has not wrapped,
        # or the newer run [0, start + len - capacity) of one that has, when the window begins in it (a window
        # of the last seconds, unless the wrap point falls within it).
        if s + n <= cap:
            lo = bisect_left(b, start, s, s + n)
            return b[cap + lo:cap + bisect_right(b, end, lo, s + n)].tolist()
        newer = s + n - cap
        if b[0] <= start:
            lo = bisect_left(b, start, 0, newer)
            return b[cap + lo:cap + bisect_right(b, end, lo, newer)].tolist()
        lo, hi = self._search(start, bisect_left), self._search(end, bisect_right)
        if lo >= hi:
            return []
        i, j = (s + lo) % cap, (s + hi) % cap or cap
        if i < j:
            return b[cap + i:cap + j].tolist()
        return b[cap + i:].tolist() + b[cap:cap + j].tolist()

    def _search(self, x: float, find: Callable[..., int]) -> int:
        """``find`` (bisect_left or bisect_right) over the logical order: the times hold at most two
        sorted runs, [start, cap) and then [0, start + len - cap)."""
        times, cap, s, n = self._b, self._cap, self._start, self._len
        if s + n <= cap:
            return int(find(times, x, s, s + n)) - s
        i = int(find(times, x, s, cap))
        if i < cap:
            return i - s
        return cap - s + int(find(times, x, 0, s + n - cap))

    def _slice(self, lo: int, hi: int) -> tuple[list[float], list[float]]:
        if lo >= hi:
            return [], []
        b, cap = self._b, self._cap
        i, j = (self._start + lo) % cap, (self._start + hi) % cap or cap
        if i < j:
            return b[i:j].tolist(), b[cap + i:cap + j].tolist()
        return b[i:cap].tolist() + b[:j].tolist(), b[cap + i:].tolist() + b[cap:cap + j].tolist()

    def tail_arrays(self, n: int) -> tuple[array[float], array[float]]:
        """:meth:`tail` as ``array('d')`` copies: a flush hands thousands of series to disk, and a float
        object per sample (24 bytes, and made only to be packed again) would make most of its time and
        memory."""
        n = min(max(n, 0), self._len)
        if not n:
            return array("d"), array("d")
        b, cap = self._b, self._cap
        i, j = (self._start + self._len - n) % cap, (self._start + self._len) % cap or cap
        if i < j:
            return b[i:j], b[cap + i:cap + j]
        return b[i:cap] + b[:j], b[cap + i:] + b[cap:cap + j]

    def tail(self, n: int) -> tuple[list[float], list[float]]:
        """The newest ``n`` samples, oldest first."""
        n = min(max(n, 0), self._len)
        return self._slice(self._len - n, self._len)
