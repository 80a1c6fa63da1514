"""CPU throttling per pod and container (Koordinator PodThrottled): d nr_throttled / d nr_periods."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.metriccache import names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.metricsadvisor.podcolumns import PodColumns
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta

NAME = "throttled"


class ThrottledCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._periods: list[float] = []
        self._throttled: list[float] = []

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._columns = PodColumns(NAME, files, options.cache, 1)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        old_keys = list(self._columns.keys)
        self._columns.track_owners(pods, self._options.layout, cgroupfiles.cpu_stat_throttle,
                                   names.POD_CPU_THROTTLED, names.CONTAINER_CPU_THROTTLED)
        self._periods = self._columns.remap(self._periods, old_keys)
        self._throttled = self._columns.remap(self._throttled, old_keys)

    def collect(self, batch: native.BatchResult, now: float) -> None:
        periods = batch.gather_key(self._columns.slots, 0)
        throttled = batch.gather_key(self._columns.slots, 1)
        ratios = []
        for p, t, last_p, last_t in zip(periods, throttled, self._periods, self._throttled, strict=True):
            if p >= last_p and t >= last_t:  # False with NaN: a failed read now or before
                ratios.append((t - last_t) / (p - last_p) if p > last_p else 0.0)
            else:
                ratios.append(float("nan"))
        self._periods, self._throttled = periods, throttled
        self._columns.append(0, now, ratios)


def new(deps: CollectorDeps) -> ThrottledCollector:
    return ThrottledCollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
