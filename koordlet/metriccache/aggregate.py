"""Window aggregates: what NodeMetric reports as ``{avg, p50, p90, p95, p99}`` over a duration."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Statistics of the samples in one window; ``first``/``last`` are their timestamps."""

    count: int
    avg: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float
    latest: float
    first: float
    last: float

    @property
    def span_seconds(self) -> float:
        return self.last - self.first


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of sorted values (p in 0..1): the smallest value with at least p of the
    samples at or below it, so a p99 is always a value that was really observed."""
    if not ordered:
        raise ValueError("percentile of no samples")
    rank = max(1, math.ceil(p * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def aggregate(times: Sequence[float], values: Sequence[float]) -> Aggregate | None:
    """Aggregates time-ordered samples; None for an empty window."""
    if not values:
        return None
    ordered = sorted(values)
    return Aggregate(
        count=len(values),
        avg=math.fsum(values) / len(values),
        min=ordered[0],
        max=ordered[-1],
        p50=percentile(ordered, 0.50),
        p90=percentile(ordered, 0.90),
        p95=percentile(ordered, 0.95),
        p99=percentile(ordered, 0.99),
        latest=values[-1],
        first=times[0],
        last=times[-1],
    )
