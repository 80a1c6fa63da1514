"""What the scrape-time collectors read: the informer's current pods and the cache's newest samples.

Per-pod and per-container series are produced at scrape time from the pods the informer knows *now* and
the samples the cache holds, instead of being set on long-lived gauges.  A pod that goes disappears from
the next scrape, a sample older than the collector's max age is not exported, and the number of series is
bounded by the pods on the node: nothing has to remember to delete a label set.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from koordlet.metriccache.cache import Labels
from koordlet.statesinformer.framework import PodMeta


class LatestSamples(Protocol):
    """The cache query a scrape needs (:class:`koordlet.metriccache.MetricCache` has it)."""

    def latest(self, name: str, labels: Labels, max_age_seconds: float | None = None) -> tuple[float, float] | None:
        ...


class PodLister(Protocol):
    """The informer query a scrape needs (:class:`koordlet.statesinformer.framework.StatesInformer` has it)."""

    def pods(self) -> Sequence[PodMeta]:
        ...


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A running container of a pod, as the label values and the cache key need it."""

    bare_id: str
    """The runtime id without scheme: the cache's ``container`` label."""
    label_id: str
    """The id as kubelet reports it (``containerd://<id>``), Koordinator's ``container_id`` label value."""
    name: str


def pod_label_values(meta: PodMeta) -> tuple[str, str, str]:
    """``pod_uid``, ``pod_name``, ``pod_namespace``."""
    return meta.uid, meta.pod.name, meta.pod.namespace


def running_containers(meta: PodMeta) -> Iterator[ContainerRef]:
    """The pod's containers that have a runtime id (the others have no cgroup and so no samples)."""
    with_scheme = {c.name: c.container_id for c in meta.pod.containers if c.container_id}
    for container in meta.containers:
        if not container.container_id:
            continue
        full = with_scheme.get(container.name, "")
        # Only the same container's id may lend its scheme (a restart changes the id).
        label_id = full if full.endswith("://" + container.container_id) else container.container_id
        yield ContainerRef(bare_id=container.container_id, label_id=label_id, name=container.name)


class ScrapeCollector(abc.ABC):
    """A prometheus_client custom collector whose gauge families are rebuilt at every scrape.

    ``describe`` yields the same families without samples, so a registry detects a duplicate name at
    registration instead of at the first scrape."""

    def __init__(self, node_name: str) -> None:
        self._node = node_name

    @abc.abstractmethod
    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        """New, empty families (one per exported metric name)."""

    @abc.abstractmethod
    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        """Adds this scrape's samples to the families returned by :meth:`_families`."""

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> list[Metric]:
        families = self._families()
        self._fill(families)
        return list(families)


Row = tuple[tuple[str, ...], float]
"""The label values after a series' owner labels, and the sample value."""


class PodScrapeCollector(ScrapeCollector):
    """A pod family and a container family over the informer's current pods, from samples no older than
    ``max_age_seconds``: subclasses say which rows each pod and each running container has."""

    def __init__(self, cache: LatestSamples, pods: PodLister, node_name: str, max_age_seconds: float) -> None:
        super().__init__(node_name)
        self._cache = cache
        self._pods = pods
        self._max_age = max_age_seconds

    @abc.abstractmethod
    def _pod_rows(self, meta: PodMeta) -> Iterable[Row]:
        """The pod's rows (labels after ``node`` and the pod labels)."""

    @abc.abstractmethod
    def _container_rows(self, meta: PodMeta, container: ContainerRef) -> Iterable[Row]:
        """The container's rows (labels after ``node``, the container and the pod labels)."""

    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        pod_family, container_family = families
        for meta in self._pods.pods():
            pod = pod_label_values(meta)
            for row_labels, value in self._pod_rows(meta):
                pod_family.add_metric([self._node, *pod, *row_labels], value)
            for container in running_containers(meta):
                for row_labels, value in self._container_rows(meta, container):
                    container_family.add_metric(
                        [self._node, container.label_id, container.name, *pod, *row_labels], value)
