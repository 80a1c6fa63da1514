"""CPU throttling per pod and container (Koordinator PodThrottled): d nr_throttled / d nr_periods."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.errors import KoordletError
from koordlet.metriccache import Labels, labels_of, names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import FileGroup, Options
from koordlet.statesinformer.framework import PodMeta

NAME = "throttled"


class ThrottledCollector:
    name = NAME

    def __init__(self) -> None:
        # key -> (series name, labels, slot); last (periods, throttled) per key.
        self._targets: dict[tuple[str, str], tuple[str, Labels, int]] = {}
        self._last: dict[tuple[str, str], tuple[int, int]] = {}

    def enabled(self, options: Options) -> bool:
        return True

    def interval(self, options: Options) -> float:
        return options.config.res_used_interval_seconds

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._files = files

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        wanted: dict[tuple[str, str], tuple[str, str, Labels]] = {}
        for meta in pods:
            if meta.cgroup_dir:
                wanted[(meta.uid, "")] = (meta.cgroup_dir, names.POD_CPU_THROTTLED, labels_of(pod=meta.uid))
            for c in meta.containers:
                if c.cgroup_dir and c.container_id:
                    wanted[(meta.uid, c.container_id)] = (c.cgroup_dir, names.CONTAINER_CPU_THROTTLED,
                                                          labels_of(pod=meta.uid, container=c.container_id))
        for key in [k for k in self._targets if k not in wanted]:
            name, labels, _ = self._targets.pop(key)
            self._files.untrack((NAME, key))
            self._last.pop(key, None)
            self._options.cache.drop(name, labels)
        for key, (rel_dir, name, labels) in wanted.items():
            if key in self._targets:
                continue
            try:
                spec = cgroupfiles.cpu_stat_throttle(self._options.layout, rel_dir)
            except KoordletError:
                continue
            self._targets[key] = (name, labels, self._files.track((NAME, key), spec.path, spec.kind, spec.keys))

    def collect(self, batch: native.BatchResult, now: float) -> None:
        samples = []
        for key, (name, labels, slot) in self._targets.items():
            periods, throttled = batch.key_value(slot, 0), batch.key_value(slot, 1)
            if periods is None or throttled is None:
                self._last.pop(key, None)
                continue
            last = self._last.get(key)
            self._last[key] = (periods, throttled)
            if last is None or periods < last[0] or throttled < last[1]:
                continue
            d_periods = periods - last[0]
            ratio = (throttled - last[1]) / d_periods if d_periods else 0.0
            samples.append((name, labels, now, ratio))
        self._options.cache.append_many(samples)
