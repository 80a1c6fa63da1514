"""System usage: node usage minus every pod's (and standalone workload's) usage, never below 0
(Koordinator SystemResource).  Inputs older than the outdated interval make no sample."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.framework import FileGroup, Options, UsageCollector
from koordlet.statesinformer.framework import PodMeta

NAME = "sysresource"
_PAIRS = ((names.NODE_CPU_USAGE, names.POD_CPU_USAGE, names.SYSTEM_CPU_USAGE),
          (names.NODE_MEMORY_USAGE, names.POD_MEMORY_USAGE, names.SYSTEM_MEMORY_USAGE))


class SysResourceCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._uids: tuple[str, ...] = ()

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        self._uids = tuple(meta.uid for meta in pods if meta.cgroup_dir)

    def collect(self, batch: native.BatchResult, now: float) -> None:
        cache = self._options.cache
        config = self._options.config
        for node_name, pod_name, system_name in _PAIRS:
            # Memory samples come every memory interval: they are fresh for two of those.
            max_age = max(config.sys_metric_outdated_seconds,
                          2 * config.memory_interval_seconds if pod_name == names.POD_MEMORY_USAGE else 0)
            node = cache.latest(node_name, (), max_age_seconds=max_age)
            if node is None:
                continue
            pods_total = 0.0
            for uid in self._uids:
                sample = cache.latest(pod_name, labels_of(pod=uid), max_age_seconds=max_age)
                if sample is not None:
                    pods_total += sample[1]
            cache.append(system_name, (), now, max(node[1] - pods_total, 0.0))
