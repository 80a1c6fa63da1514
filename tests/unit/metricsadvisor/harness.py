"""Doubles for collector tests: :func:`make_options` wires a real MetricCache over a FakeHost tree, and
:class:`Single` drives one collector as the advisor would (its own file group, ``on_pods``, ``collect``)
under a settable clock.  Pods, informer and clock are the qosmanager doubles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from koordlet.config.types import CollectorConfig
from koordlet.metriccache import CacheSettings, Labels, MetricCache, labels_of
from koordlet.metricsadvisor.framework import Collector, FileGroup, Options
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import CgroupDriver
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_pod

__all__ = ["T0", "FakeClock", "FakeInformer", "Single", "make_node", "make_options", "make_pod", "mkdirs",
           "pod_and_containers", "samples"]

T0 = 1_700_000_000.0


def make_options(host: FakeHost, tmp_path: Path, informer: FakeInformer | None = None, *,
                 clock: FakeClock | None = None, gates: Mapping[str, bool] | None = None,
                 config: CollectorConfig | None = None, perf: Any = None, kube_parent: str = "") -> Options:
    clock = clock or FakeClock(T0)
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), clock)
    extra: dict[str, Any] = {"perf": perf} if perf is not None else {}
    return Options(paths=host.paths, layout=host.layout(), driver=CgroupDriver.CGROUPFS, cache=cache,
                   informer=informer or FakeInformer(), config=config or CollectorConfig(), gates=dict(gates or {}),
                   clock=clock, kube_parent=kube_parent, **extra)


@dataclass
class Single:
    """One collector in its own file group, ticked by hand."""

    collector: Collector
    options: Options
    files: FileGroup

    @classmethod
    def start(cls, collector: Collector, options: Options) -> Single:
        files = FileGroup(collector.interval(options))
        collector.setup(options, files)
        return cls(collector, options, files)

    @property
    def clock(self) -> FakeClock:
        clock = self.options.clock
        assert isinstance(clock, FakeClock)
        return clock

    @property
    def cache(self) -> MetricCache:
        return self.options.cache

    def pods(self, *pods: PodMeta) -> None:
        informer = self.options.informer
        assert isinstance(informer, FakeInformer)
        informer.pod_list[:] = pods
        self.collector.on_pods(tuple(pods))

    def tick(self, advance: float = 0.0) -> None:
        self.clock.advance(advance)
        self.collector.collect(self.files.read(), self.clock())


def samples(cache: MetricCache, name: str, labels: Labels = ()) -> list[tuple[float, float]]:
    """Every sample of one series held in memory, oldest first."""
    times, values = cache.window(name, labels, 0.0, float("inf"))
    return list(zip(times, values, strict=True))


def pod_and_containers(pod: PodMeta) -> list[tuple[Labels, str]]:
    """(labels, cgroup dir) of the pod and each of its containers, pod first."""
    found = [(labels_of(pod=pod.uid), pod.cgroup_dir)]
    found += [(labels_of(pod=pod.uid, container=c.container_id), c.cgroup_dir) for c in pod.containers]
    return found


def mkdirs(host: FakeHost, pods: Sequence[PodMeta]) -> None:
    for pod in pods:
        for c in pod.containers:
            host.mkdir_cgroup(c.cgroup_dir)
