"""System usage: node usage minus every pod's (and standalone workload's) and every host application's
usage, never below 0 (Koordinator SystemResource).  Node and pod inputs older than the outdated interval
make no sample; host-application sums that are missing or as old count as none (upstream skips the
sample instead, but its host-app collector always runs)."""

from __future__ import annotations

from collections.abc import Sequence

from koordlet import native
from koordlet.metriccache import labels_of, names
from koordlet.metriccache.ring import Ring
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta

NAME = "sysresource"
_PAIRS = ((names.NODE_CPU_USAGE, names.POD_CPU_USAGE, names.SYSTEM_CPU_USAGE),
          (names.NODE_MEMORY_USAGE, names.POD_MEMORY_USAGE, names.SYSTEM_MEMORY_USAGE))
_HOST_APPS = {names.POD_CPU_USAGE: names.HOST_APPS_CPU_USAGE, names.POD_MEMORY_USAGE: names.HOST_APPS_MEMORY_USAGE}


class SysResourceCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._pods: dict[str, list[Ring]] = {pod_name: [] for _, pod_name, _ in _PAIRS}

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        uids = [meta.uid for meta in pods if meta.cgroup_dir]
        for _, pod_name, _ in _PAIRS:
            self._pods[pod_name] = self._options.cache.handles([(pod_name, labels_of(pod=uid)) for uid in uids])

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
            for ring in self._pods[pod_name]:
                last = ring.last()
                if last is not None and now - last[0] <= max_age:
                    pods_total += last[1]
            host_apps = cache.latest(_HOST_APPS[pod_name], (), max_age_seconds=max_age)
            if host_apps is not None:
                pods_total += host_apps[1]
            cache.append(system_name, (), now, max(node[1] - pods_total, 0.0))


def new(deps: CollectorDeps) -> SysResourceCollector:
    return SysResourceCollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
