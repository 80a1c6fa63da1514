"""Memory eviction arithmetic, in Koordinator's integer form (``memory_evict.go``): the usage is a whole
percent rounded down, and the release is capacity x (usage% - lower%) / 100 bytes."""

from __future__ import annotations

DEFAULT_THRESHOLD_PERCENT = 70
RELEASE_BUFFER_PERCENT = 2
"""``memoryReleaseBufferPercent``: the lower watermark defaults to the threshold minus this."""


def lower_percent(threshold: int, lower: int | None) -> int:
    return lower if lower is not None else threshold - RELEASE_BUFFER_PERCENT


def usage_percent(used_bytes: float, capacity_bytes: int) -> int:
    return int(used_bytes) * 100 // capacity_bytes


def release_bytes(capacity_bytes: int, usage_pct: int, lower_pct: int) -> int:
    return capacity_bytes * (usage_pct - lower_pct) // 100
