"""A labelled histogram whose ``observe`` is a bisect and two additions under a lock.

prometheus_client's ``Histogram.observe`` checks the metric is observable, locks twice (sum, then the bucket)
and walks the bounds in Python: about 4 us, paid for every hook of every runtime request and reconciler run
(three hooks a CreateContainer, a thousand containers a reconciler round).  Here the counts stay plain
per-bucket integers and the cumulative buckets are made only when /metrics is scraped.  The exposition is the
same family (``_bucket`` with ``le``, ``_sum``, ``_count``), without prometheus_client's ``_created`` series,
which Koordinator's Go client does not export either.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class HistogramChild:
    """One label set's buckets: ``counts[i]`` observations at most ``bounds[i]``, the last beyond them all."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, so a value equal to a bound counts in that bucket (le).
        index = bisect_left(self._bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self._counts), self._sum


class LightHistogram:
    """A histogram family with ``labelnames``, registered in ``registry`` as a collector."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram {name}: buckets must be increasing and distinct, got {list(buckets)}")
        if bounds[-1] == float("inf"):
            bounds = bounds[:-1]  # the +Inf bucket is always there
        self.name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = bounds
        self._les = [floatToGoString(b) for b in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> HistogramChild:
        if len(values) != len(self._labelnames):
            raise ValueError(f"histogram {self.name}: {len(values)} label values for {len(self._labelnames)} "
                             f"labels {list(self._labelnames)}")
        key = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = HistogramChild(self._bounds)
            return child

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self._documentation, labels=list(self._labelnames))]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self._documentation, labels=list(self._labelnames))
        with self._lock:
            children = list(self._children.items())
        for key, child in children:
            counts, total = child.snapshot()
            cumulative, buckets = 0, []
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(key), buckets, total)
        yield family
