"""Best-effort usage, request and real limit (Koordinator BEResource).

Limit = min(CPUs in the besteffort cpuset, cfs quota / period) in cores; request = the batch-cpu requests
of BE pods; usage = the besteffort cgroup's CPU counter rate.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from koordlet import native
from koordlet.apis.extension import QoSClass
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options, UsageCollector
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import KubeQoS, qos_dir, under_parent

NAME = "beresource"


class BEResourceCollector(UsageCollector):
    name = NAME

    def __init__(self) -> None:
        self._rate = cgroupfiles.Rate()
        self._request_cores = 0.0
        self._usage: int | None = None

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        layout = options.layout
        be_dir = under_parent(options.kube_parent, qos_dir(options.driver, KubeQoS.BESTEFFORT))
        try:
            usage, self._unit = cgroupfiles.cpu_usage(layout, be_dir), cgroupfiles.cpu_usage_ns(layout)
            self._usage = files.track((NAME, "usage"), usage.path, usage.kind, usage.keys)
            cpu_dir = layout.controller_dir("cpu", be_dir)
            if layout.controller_version == 1:
                self._quota = files.track((NAME, "quota"), os.path.join(cpu_dir, "cpu.cfs_quota_us"),
                                          native.Kind.INT)
                self._period: int | None = files.track((NAME, "period"), os.path.join(cpu_dir, "cpu.cfs_period_us"),
                                                       native.Kind.INT)
                cpuset = os.path.join(layout.controller_dir("cpuset", be_dir), "cpuset.cpus")
            else:
                self._quota = files.track((NAME, "max"), os.path.join(cpu_dir, "cpu.max"), native.Kind.CPU_MAX)
                self._period = None
                cpuset = os.path.join(cpu_dir, "cpuset.cpus.effective")
            self._cpuset = files.track((NAME, "cpuset"), cpuset, native.Kind.CPULIST)
        except KoordletError:
            self._usage = None  # a host without these hierarchies has no BE cgroup to measure

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        milli = 0
        for meta in pods:
            if meta.qos is QoSClass.BE:
                milli += sum(c.requests.batch_cpu_milli or 0 for c in meta.pod.containers)
        self._request_cores = milli / 1000

    def collect(self, batch: native.BatchResult, now: float) -> None:
        cache = self._options.cache
        cache.append(names.BE_CPU_REQUEST, (), now, self._request_cores)
        if self._usage is None:
            return
        usage = batch.int_value(self._usage) if self._unit == 1 else batch.key_value(self._usage, 0)
        if usage is not None:
            rate = self._rate.update("be", now, usage * self._unit / 1e9)
            if rate is not None:
                cache.append(names.BE_CPU_USAGE, (), now, rate)
        limit = self._limit(batch)
        if limit is not None:
            cache.append(names.BE_CPU_LIMIT, (), now, limit)

    def _limit(self, batch: native.BatchResult) -> float | None:
        cpus = batch.get(self._cpuset)
        if cpus is None:
            return None
        limit = float(len(cpus)) if cpus else float(os.cpu_count() or 1)
        if self._period is None:
            quota_period = batch.get(self._quota)
            quota, period = quota_period if quota_period is not None else (-1, 0)
        else:
            quota, period = batch.int_value(self._quota) or -1, batch.int_value(self._period) or 0
        if quota > 0 and period > 0:
            limit = min(limit, quota / period)
        return limit


def new(deps: CollectorDeps) -> BEResourceCollector:
    return BEResourceCollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
