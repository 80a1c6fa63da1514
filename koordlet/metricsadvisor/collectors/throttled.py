"""CPU throttling per pod and container (Koordinator PodThrottled): d nr_throttled / d nr_periods."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.metriccache import names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import FileGroup, Options
from koordlet.metricsadvisor.podcolumns import PodColumns, Wanted, owners, spec_or_none
from koordlet.statesinformer.framework import PodMeta

NAME = "throttled"


class ThrottledCollector:
    name = NAME

    def __init__(self) -> None:
        self._periods: list[float] = []
        self._throttled: list[float] = []

    def enabled(self, options: Options) -> bool:
        return True

    def interval(self, options: Options) -> float:
        return options.config.res_used_interval_seconds

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._columns = PodColumns(NAME, files, options.cache, 1)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        wanted: Wanted = {}
        for owner in owners(pods):
            spec = spec_or_none(cgroupfiles.cpu_stat_throttle, self._options.layout, owner.rel_dir)
            if spec is not None:
                series = names.POD_CPU_THROTTLED if owner.is_pod else names.CONTAINER_CPU_THROTTLED
                wanted[owner.key] = (spec, ((series, owner.labels),))
        old_keys = list(self._columns.keys)
        self._columns.update(wanted)
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
