"""Fixed-capacity in-memory series: the recent samples every query and aggregate reads first."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable


class Ring:
    """Timestamped float samples in two ``array('d')`` buffers (16 bytes a sample, no per-sample objects).

    Appends must come in time order; an older or equal timestamp is dropped (a clock step back must not
    corrupt windows).  ``pending`` counts samples not yet written to disk.
    """

    __slots__ = ("_len", "_start", "_t", "_v", "pending")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, got {capacity}")
        self._t = array("d", bytes(8 * capacity))
        self._v = array("d", bytes(8 * capacity))
        self._start = 0
        self._len = 0
        self.pending = 0

    @property
    def capacity(self) -> int:
        return len(self._t)

    def __len__(self) -> int:
        return self._len

    def append(self, t: float, value: float) -> bool:
        """Adds a sample; returns False (and drops it) when it is not newer than the last one."""
        cap = len(self._t)
        if self._len and t <= self._t[(self._start + self._len - 1) % cap]:
            return False
        if self._len < cap:
            i = (self._start + self._len) % cap
            self._len += 1
        else:
            i = self._start
            self._start = (self._start + 1) % cap
        self._t[i] = t
        self._v[i] = value
        self.pending = min(self.pending + 1, self._len)
        return True

    def last(self) -> tuple[float, float] | None:
        if not self._len:
            return None
        i = (self._start + self._len - 1) % len(self._t)
        return self._t[i], self._v[i]

    def first_time(self) -> float | None:
        return self._t[self._start] if self._len else None

    def window(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples with start <= t <= end, oldest first.  Searches the buffers in place (C bisect) and
        copies only the window: strategies ask for a few seconds of hundreds of series every round."""
        return self._slice(self._search(start, bisect_left), self._search(end, bisect_right))

    def _search(self, x: float, find: Callable[..., int]) -> int:
        """``find`` (bisect_left or bisect_right) over the logical order: the buffer holds at most two
        sorted runs, [start, cap) and then [0, start + len - cap)."""
        times, cap, s, n = self._t, len(self._t), self._start, self._len
        if s + n <= cap:
            return int(find(times, x, s, s + n)) - s
        i = int(find(times, x, s, cap))
        if i < cap:
            return i - s
        return cap - s + int(find(times, x, 0, s + n - cap))

    def _slice(self, lo: int, hi: int) -> tuple[list[float], list[float]]:
        if lo >= hi:
            return [], []
        cap = len(self._t)
        a, b = (self._start + lo) % cap, (self._start + hi) % cap or cap
        if a < b:
            return self._t[a:b].tolist(), self._v[a:b].tolist()
        return self._t[a:].tolist() + self._t[:b].tolist(), self._v[a:].tolist() + self._v[:b].tolist()

    def tail(self, n: int) -> tuple[list[float], list[float]]:
        """The newest ``n`` samples, oldest first."""
        n = min(max(n, 0), self._len)
        return self._slice(self._len - n, self._len)
