"""Pod and container CPU and memory usage (Koordinator PodResource collector).

CPU: the change of cpuacct.usage (v2: cpu.stat usage_usec) over the elapsed time, in cores.  Memory: the
anon + unevictable keys of memory.stat (v1: their total_* hierarchical forms).  A cgroup that vanishes
mid-tick fails its own entries only: no sample, no exception; a pod that leaves the informer has its
files and series dropped on the next tick, so nothing stale is reported for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from koordlet import native
from koordlet.errors import KoordletError
from koordlet.metriccache import Labels, labels_of, names
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import FileGroup, Options
from koordlet.statesinformer.framework import PodMeta

NAME = "podresource"


@dataclass(frozen=True)
class _Target:
    key: tuple[str, str]
    cpu_name: str
    mem_name: str
    labels: Labels
    cpu_slot: int
    cpu_unit_ns: int
    mem_slot: int


class PodResourceCollector:
    name = NAME

    def __init__(self) -> None:
        self._targets: dict[tuple[str, str], _Target] = {}
        self._rate = cgroupfiles.Rate()

    def enabled(self, options: Options) -> bool:
        return True

    def interval(self, options: Options) -> float:
        return options.config.res_used_interval_seconds

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._files = files

    def _track(self, key: tuple[str, str], rel_dir: str, cpu_name: str, mem_name: str, labels: Labels) -> None:
        layout = self._options.layout
        cpu, unit = cgroupfiles.cpu_usage(layout, rel_dir)
        mem = cgroupfiles.memory_stat(layout, rel_dir)
        self._targets[key] = _Target(
            key, cpu_name, mem_name, labels,
            self._files.track((NAME, "cpu", key), cpu.path, cpu.kind, cpu.keys), unit,
            self._files.track((NAME, "mem", key), mem.path, mem.kind, mem.keys),
        )

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        wanted: dict[tuple[str, str], tuple[str, str, str, Labels]] = {}
        for meta in pods:
            if not meta.cgroup_dir:
                continue
            wanted[(meta.uid, "")] = (meta.cgroup_dir, names.POD_CPU_USAGE, names.POD_MEMORY_USAGE,
                                      labels_of(pod=meta.uid))
            for c in meta.containers:
                if c.cgroup_dir and c.container_id:
                    wanted[(meta.uid, c.container_id)] = (
                        c.cgroup_dir, names.CONTAINER_CPU_USAGE, names.CONTAINER_MEMORY_USAGE,
                        labels_of(pod=meta.uid, container=c.container_id))
        for key in [k for k in self._targets if k not in wanted]:
            target = self._targets.pop(key)
            self._files.untrack((NAME, "cpu", key))
            self._files.untrack((NAME, "mem", key))
            self._rate.forget(key)
            self._options.cache.drop(target.cpu_name, target.labels)
            self._options.cache.drop(target.mem_name, target.labels)
        for key, (rel_dir, cpu_name, mem_name, labels) in wanted.items():
            if key not in self._targets:
                try:
                    self._track(key, rel_dir, cpu_name, mem_name, labels)
                except KoordletError:
                    continue  # e.g. a hierarchy this host lacks; probes report it

    def collect(self, batch: native.BatchResult, now: float) -> None:
        samples = []
        for target in self._targets.values():
            slot = target.cpu_slot
            usage = batch.int_value(slot) if target.cpu_unit_ns == 1 else batch.key_value(slot, 0)
            if usage is not None:
                rate = self._rate.update(target.key, now, usage * target.cpu_unit_ns / 1e9)
                if rate is not None:
                    samples.append((target.cpu_name, target.labels, now, rate))
            else:
                self._rate.forget(target.key)
            memory = batch.key_sum(target.mem_slot)
            if memory is not None:
                samples.append((target.mem_name, target.labels, now, float(memory)))
        self._options.cache.append_many(samples)
