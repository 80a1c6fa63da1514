"""Host application usage (Koordinator ``metricsadvisor/collectors/hostapplication``): CPU and memory of
each NodeSLO ``hostApplications`` entry, read from its cgroup like a pod's.

Per application and tick: CPU in cores from the change of its usage counter (the first tick of an
application only sets the baseline), memory without page cache (memory.stat anon + unevictable, as for
pods) and with it (v1 memory.usage_in_bytes, v2 memory.current).  An application counts in a tick only
when all three reads succeed, as upstream skips it on any read error.  The sums over the applications
that counted go to the ``host_apps_*`` series every tick (0 with none), which sysresource subtracts
from the node's usage as upstream subtracts its shared host-app usage; the memory sum follows the
NodeMetric memory policy as upstream's does (with page cache only for ``usageWithPageCache``).

The list comes from the NodeSLO in force; a change is picked up after the tick that noticed it (files
are read before the collectors run), and a removed application's series are dropped then.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from koordlet import native
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.plugins import Plugin
from koordlet.statesinformer import hostapps
from koordlet.system.layout import CgroupLayout

NAME = "hostapp"


@dataclass(frozen=True)
class _Tracked:
    name: str
    rel_dir: str
    cpu: int
    memory: int
    with_cache: int


def memory_with_page_cache(layout: CgroupLayout, rel_dir: str) -> cgroupfiles.FileSpec:
    """The cgroup's memory usage including page cache: v1 memory.usage_in_bytes, v2 memory.current
    (upstream ``ReadMemoryUsage``)."""
    name = "memory.usage_in_bytes" if layout.controller_version == 1 else "memory.current"
    return cgroupfiles.FileSpec(os.path.join(layout.controller_dir("memory", rel_dir), name), native.Kind.INT)


class HostAppCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._tracked: dict[str, _Tracked] = {}
        self._last_cpu: dict[str, tuple[float, float]] = {}
        """Application name -> (time, counter) of its last good CPU read."""

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._files = files
        self._v2 = options.layout.controller_version == 2
        self._retrack(hostapps.unique(options.host_apps()))

    def collect(self, batch: native.BatchResult, now: float) -> None:
        cache = self._options.cache
        ns_per_unit = cgroupfiles.cpu_usage_ns(self._options.layout)
        with_cache = self._options.memory_with_page_cache()
        total_cpu = total_memory = 0.0
        for app in self._tracked.values():
            counter = batch.key_value(app.cpu, 0) if self._v2 else batch.int_value(app.cpu)
            memory = batch.key_sum(app.memory)
            usage = batch.int_value(app.with_cache)
            if counter is None or memory is None or usage is None:
                continue
            last = self._last_cpu.get(app.name)
            self._last_cpu[app.name] = (now, float(counter))
            # A counter that went backwards is a recreated cgroup: measure from the new value next tick.
            if last is None or now <= last[0] or counter < last[1]:
                continue
            cores = (counter - last[1]) * ns_per_unit / 1e9 / (now - last[0])
            labels = hostapps.labels(app.name)
            cache.append_many([(names.HOST_APP_CPU_USAGE, labels, now, cores),
                               (names.HOST_APP_MEMORY_USAGE, labels, now, float(memory)),
                               (names.HOST_APP_MEMORY_WITH_PAGE_CACHE, labels, now, float(usage))])
            total_cpu += cores
            total_memory += float(usage if with_cache else memory)
        cache.append(names.HOST_APPS_CPU_USAGE, (), now, total_cpu)
        cache.append(names.HOST_APPS_MEMORY_USAGE, (), now, total_memory)
        apps = hostapps.unique(self._options.host_apps())
        if [(a.name, self._dir(a)) for a in apps] != [(t.name, t.rel_dir) for t in self._tracked.values()]:
            self._retrack(apps)

    def _dir(self, app: HostApplicationSpec) -> str:
        return hostapps.cgroup_dir(app, self._options.driver, self._options.kube_parent)

    def _retrack(self, apps: Sequence[HostApplicationSpec]) -> None:
        layout = self._options.layout
        wanted = {a.name or "": self._dir(a) for a in apps}
        for name, old in list(self._tracked.items()):
            if wanted.get(name) != old.rel_dir:
                self._untrack(old)
        for name, rel_dir in wanted.items():
            if name in self._tracked:
                continue
            try:
                specs = (cgroupfiles.cpu_usage(layout, rel_dir), cgroupfiles.memory_stat(layout, rel_dir),
                         memory_with_page_cache(layout, rel_dir))
            except KoordletError:  # the host lacks a hierarchy: probes report it, nothing to read
                continue
            slots = [self._files.track((NAME, name, kind), s.path, s.kind, s.keys)
                     for kind, s in zip(("cpu", "memory", "with_cache"), specs, strict=True)]
            self._tracked[name] = _Tracked(name, rel_dir, *slots)
        # Keep the configured order, so sums and reports do not depend on the history of changes.
        self._tracked = {name: self._tracked[name] for name in wanted if name in self._tracked}

    def _untrack(self, app: _Tracked) -> None:
        for kind in ("cpu", "memory", "with_cache"):
            self._files.untrack((NAME, app.name, kind))
        self._last_cpu.pop(app.name, None)
        labels = hostapps.labels(app.name)
        for series in (names.HOST_APP_CPU_USAGE, names.HOST_APP_MEMORY_USAGE, names.HOST_APP_MEMORY_WITH_PAGE_CACHE):
            self._options.cache.drop(series, labels)
        del self._tracked[app.name]


def new(deps: CollectorDeps) -> HostAppCollector:
    return HostAppCollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
