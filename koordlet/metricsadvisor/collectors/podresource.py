"""Pod and container CPU usage (Koordinator PodResource collector; memory is the podmemory collector).

CPU: the change of cpuacct.usage (v2: cpu.stat usage_usec) over the elapsed time, in cores.  A cgroup that
vanishes mid-tick fails its own entries only: no sample, no exception; a pod that leaves the informer has
its files and series dropped on the next tick, so nothing stale is reported for it.  Each tick is one C
gather of every counter and one append per series column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from koordlet import native
from koordlet.metriccache import names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.metricsadvisor.podcolumns import PodColumns
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta

NAME = "podresource"


class PodResourceCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._prev: list[float] = []
        self._last_t: float | None = None

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._v2 = options.layout.controller_version == 2
        self._columns = PodColumns(NAME, files, options.cache, 1)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        old_keys = list(self._columns.keys)
        self._columns.track_owners(pods, self._options.layout, cgroupfiles.cpu_usage, names.POD_CPU_USAGE,
                                   names.CONTAINER_CPU_USAGE)
        self._prev = self._columns.remap(self._prev, old_keys)

    def collect(self, batch: native.BatchResult, now: float) -> None:
        slots = self._columns.slots
        counters = batch.gather_key(slots, 0) if self._v2 else batch.gather(slots, native.Gather.VALUE)
        last_t, self._last_t = self._last_t, now
        if last_t is not None and now > last_t:
            scale = cgroupfiles.cpu_usage_ns(self._options.layout) / 1e9 / (now - last_t)
            # NaN (a failed read now or before) and a counter that went backwards (a recreated cgroup)
            # give no sample; the next tick measures from the new value.
            rates = [(c - p) * scale if c >= p else math.nan for c, p in zip(counters, self._prev, strict=True)]
            self._columns.append(0, now, rates)
        self._prev = counters


def new(deps: CollectorDeps) -> PodResourceCollector:
    return PodResourceCollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
