"""Which file holds which number, per cgroup version: Koordinator's usage math (cpuacct.usage or
cpu.stat usage_usec for CPU; memory.stat's anon and unevictable pages, without page cache, for memory)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from koordlet import native
from koordlet.system.layout import CgroupLayout

# v1 memory.stat's total_* keys include descendants (a pod's containers); v2 memory.stat is hierarchical.
MEMORY_KEYS_V1 = ("total_inactive_anon", "total_active_anon", "total_unevictable")
MEMORY_KEYS_V2 = ("inactive_anon", "active_anon", "unevictable")
# The page cache Koordinator adds for ``usageWithPageCache`` (MemoryStatRaw.UsageWithPageCache): the file LRUs.
MEMORY_FILE_KEYS_V1 = ("total_active_file", "total_inactive_file")
MEMORY_FILE_KEYS_V2 = ("active_file", "inactive_file")
THROTTLE_KEYS = ("nr_periods", "nr_throttled")


@dataclass(frozen=True)
class FileSpec:
    path: str
    kind: native.Kind
    keys: tuple[str, ...] | None = None


def cpu_usage(layout: CgroupLayout, rel_dir: str) -> FileSpec:
    """The CPU usage counter of a cgroup: v1 cpuacct.usage (an INT), v2 cpu.stat usage_usec (key 0)."""
    if layout.controller_version == 1:
        return FileSpec(os.path.join(layout.controller_dir("cpuacct", rel_dir), "cpuacct.usage"), native.Kind.INT)
    return FileSpec(os.path.join(layout.controller_dir("cpu", rel_dir), "cpu.stat"), native.Kind.KV, ("usage_usec",))


def cpu_usage_ns(layout: CgroupLayout) -> int:
    """Nanoseconds per unit of :func:`cpu_usage`'s counter."""
    return 1 if layout.controller_version == 1 else 1000


def memory_stat(layout: CgroupLayout, rel_dir: str) -> FileSpec:
    """memory.stat with the keys whose sum is Koordinator's memory usage (anon + unevictable)."""
    keys = MEMORY_KEYS_V1 if layout.controller_version == 1 else MEMORY_KEYS_V2
    return FileSpec(os.path.join(layout.controller_dir("memory", rel_dir), "memory.stat"), native.Kind.KV, keys)


def memory_stat_with_page_cache(layout: CgroupLayout, rel_dir: str) -> FileSpec:
    """memory.stat with :func:`memory_stat`'s keys followed by the two file-LRU keys: the sum of all five is
    Koordinator's usage with page cache, the first three its usage without (one read gives both)."""
    if layout.controller_version == 1:
        keys = MEMORY_KEYS_V1 + MEMORY_FILE_KEYS_V1
    else:
        keys = MEMORY_KEYS_V2 + MEMORY_FILE_KEYS_V2
    return FileSpec(os.path.join(layout.controller_dir("memory", rel_dir), "memory.stat"), native.Kind.KV, keys)


def cpu_stat_throttle(layout: CgroupLayout, rel_dir: str) -> FileSpec:
    return FileSpec(os.path.join(layout.controller_dir("cpu", rel_dir), "cpu.stat"), native.Kind.KV, THROTTLE_KEYS)


def pressure(layout: CgroupLayout, rel_dir: str, resource: str) -> FileSpec:
    """A cgroup's PSI file: in the unified hierarchy, which has them even without controllers (hybrid)."""
    return FileSpec(os.path.join(layout.unified_dir(rel_dir), f"{resource}.pressure"), native.Kind.PSI)


class Rate:
    """Per-key rate of a monotonically increasing counter; the first sample only sets the baseline, and a
    counter that went backwards (a cgroup recreated under the same name) restarts it."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[object, tuple[float, float]] = {}

    def update(self, key: object, now: float, value: float) -> float | None:
        last = self._last.get(key)
        self._last[key] = (now, value)
        if last is None or now <= last[0] or value < last[1]:
            return None
        return (value - last[1]) / (now - last[0])

    def forget(self, key: object) -> None:
        self._last.pop(key, None)
