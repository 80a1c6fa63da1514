"""Node CPU and memory usage (Koordinator NodeResource collector).

CPU: the change of /proc/stat's user+nice+system+irq+softirq over the elapsed time, in cores (steal and
idle/iowait excluded); the first sample only sets the baseline.  Memory: MemTotal - MemAvailable, and for
``usageWithPageCache`` MemTotal - MemFree (Koordinator's MemInfo.MemUsageWithPageCache).
"""

from __future__ import annotations

from koordlet import native
from koordlet.metriccache import names
from koordlet.metricsadvisor.cgroupfiles import Rate
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.plugins import Plugin

NAME = "noderesource"
_STAT, _MEMINFO = ("node", "stat"), ("node", "meminfo")


class NodeResourceCollector(UsageCollector):
    name = NAME

    def __init__(self, clock_ticks_per_second: float) -> None:
        self._rate = Rate()
        self._ticks_per_second = clock_ticks_per_second

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._files = files
        self._stat = files.track(_STAT, options.paths.proc("stat"), native.Kind.PROC_STAT)
        self._meminfo = files.track(_MEMINFO, options.paths.proc("meminfo"), native.Kind.MEMINFO,
                                    ["MemTotal", "MemAvailable", "MemFree"])

    def collect(self, batch: native.BatchResult, now: float) -> None:
        cache = self._options.cache
        stat = batch.get(self._stat)
        if stat is not None:
            busy = stat.user + stat.nice + stat.system + stat.irq + stat.softirq
            rate = self._rate.update(_STAT, now, busy / self._ticks_per_second)
            if rate is not None:
                cache.append(names.NODE_CPU_USAGE, (), now, rate)
        total = batch.key_value(self._meminfo, 0)
        available = batch.key_value(self._meminfo, 1)
        if total is not None and available is not None:
            cache.append(names.NODE_MEMORY_USAGE, (), now, float(max(total - available, 0)))
        free = batch.key_value(self._meminfo, 2)
        if total is not None and free is not None:
            cache.append(names.NODE_MEMORY_WITH_PAGE_CACHE, (), now, float(max(total - free, 0)))


def new(deps: CollectorDeps) -> NodeResourceCollector:
    return NodeResourceCollector(deps.clock_ticks_per_second)


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
