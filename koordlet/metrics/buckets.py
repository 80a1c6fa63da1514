"""Histogram bucket layouts as Koordinator declares them with ``prometheus.ExponentialBuckets``."""

from __future__ import annotations


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` upper bounds ``start, start*factor, ...`` (client_golang's ExponentialBuckets)."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError(f"exponential buckets need start > 0, factor > 1, count >= 1; got {start}, {factor}, {count}")
    return tuple(start * factor**i for i in range(count))
