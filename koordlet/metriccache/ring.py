"""Fixed-capacity in-memory series: the recent samples every query and aggregate reads first."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right


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
        """Samples with start <= t <= end, oldest first."""
        times, values = self._ordered()
        lo = bisect_left(times, start)
        hi = bisect_right(times, end)
        return times[lo:hi], values[lo:hi]

    def tail(self, n: int) -> tuple[list[float], list[float]]:
        """The newest ``n`` samples, oldest first."""
        times, values = self._ordered()
        n = min(n, len(times))
        return (times[len(times) - n:], values[len(values) - n:]) if n else ([], [])

    def _ordered(self) -> tuple[list[float], list[float]]:
        cap, s, n = len(self._t), self._start, self._len
        if s + n <= cap:
            return self._t[s:s + n].tolist(), self._v[s:s + n].tolist()
        first = cap - s
        return (self._t[s:].tolist() + self._t[: n - first].tolist(),
                self._v[s:].tolist() + self._v[: n - first].tolist())

