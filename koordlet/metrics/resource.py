"""Resource usage: the node's (``koordlet_node_used_*``, Koordinator's common.go) and each pod's and
container's, read from the metric cache at scrape time.

Koordinator's koordlet exports node usage only (it keeps pod usage in its TSDB and NodeMetric);
``koordlet_pod_resource_usage`` and ``koordlet_container_resource_usage`` are this project's, named and
labelled after Koordinator's per-container metrics (``koordlet_container_resource_requests``:
``resource`` plus ``unit`` = core | byte).  ``koordlet_host_application_resource_usage`` is Koordinator's
(``metrics/host_application.go``), with its labels: NodeSLO host applications' CPU (cores) and memory (bytes,
without page cache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final

from prometheus_client.core import GaugeMetricFamily

from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.metriccache import names
from koordlet.metriccache.cache import labels_of
from koordlet.metrics import labels
from koordlet.metrics.sources import ContainerRef, LatestSamples, PodScrapeCollector, Row, ScrapeCollector
from koordlet.statesinformer import hostapps
from koordlet.statesinformer.framework import PodMeta

NODE_USED_CPU: Final = labels.PREFIX + "node_used_cpu_cores"
NODE_USED_MEMORY: Final = labels.PREFIX + "node_used_memory_bytes"
POD_RESOURCE_USAGE: Final = labels.PREFIX + "pod_resource_usage"
CONTAINER_RESOURCE_USAGE: Final = labels.PREFIX + "container_resource_usage"
HOST_APPLICATION_RESOURCE_USAGE: Final = labels.PREFIX + "host_application_resource_usage"

_USAGE: Final = (
    (labels.RESOURCE_CPU, labels.UNIT_CORE, names.POD_CPU_USAGE, names.CONTAINER_CPU_USAGE),
    (labels.RESOURCE_MEMORY, labels.UNIT_BYTE, names.POD_MEMORY_USAGE, names.CONTAINER_MEMORY_USAGE),
)


class NodeUsageCollector(ScrapeCollector):
    """``koordlet_node_used_cpu_cores`` and ``koordlet_node_used_memory_bytes``: the newest node samples,
    left out when older than ``max_age_seconds`` (a stalled collector must not look like a steady node)."""

    def __init__(self, cache: LatestSamples, node_name: str, max_age_seconds: float) -> None:
        super().__init__(node_name)
        self._cache = cache
        self._max_age = max_age_seconds

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(NODE_USED_CPU, "Number of cpu cores used by node in realtime", labels=[labels.NODE]),
            GaugeMetricFamily(NODE_USED_MEMORY, "Memory used by node in realtime", labels=[labels.NODE]),
        )

    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        for family, series in zip(families, (names.NODE_CPU_USAGE, names.NODE_MEMORY_USAGE), strict=True):
            sample = self._cache.latest(series, labels_of(), self._max_age)
            if sample is not None:
                family.add_metric([self._node], sample[1])


class PodUsageCollector(PodScrapeCollector):
    """``koordlet_pod_resource_usage`` and ``koordlet_container_resource_usage`` for the informer's current
    pods, from samples no older than ``max_age_seconds``."""

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(POD_RESOURCE_USAGE, "pod resource usage collected by koordlet",
                              labels=[*labels.POD_LABELS, labels.RESOURCE, labels.UNIT]),
            GaugeMetricFamily(CONTAINER_RESOURCE_USAGE, "container resource usage collected by koordlet",
                              labels=[*labels.CONTAINER_LABELS, labels.RESOURCE, labels.UNIT]),
        )

    def _pod_rows(self, meta: PodMeta) -> Iterator[Row]:
        key = labels_of(pod=meta.uid)
        for resource, unit, pod_series, _ in _USAGE:
            sample = self._cache.latest(pod_series, key, self._max_age)
            if sample is not None:
                yield (resource, unit), sample[1]

    def _container_rows(self, meta: PodMeta, container: ContainerRef) -> Iterator[Row]:
        key = labels_of(pod=meta.uid, container=container.bare_id)
        for resource, unit, _, container_series in _USAGE:
            sample = self._cache.latest(container_series, key, self._max_age)
            if sample is not None:
                yield (resource, unit), sample[1]


class HostAppUsageCollector(ScrapeCollector):
    """``koordlet_host_application_resource_usage`` of the NodeSLO's host applications (``host_apps``), from
    samples no older than ``max_age_seconds``: an application whose cgroup is gone drops out."""

    def __init__(self, cache: LatestSamples, host_apps: Callable[[], Sequence[HostApplicationSpec]], node_name: str,
                 max_age_seconds: float) -> None:
        super().__init__(node_name)
        self._cache = cache
        self._host_apps = host_apps
        self._max_age = max_age_seconds

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (GaugeMetricFamily(HOST_APPLICATION_RESOURCE_USAGE, "Host application resource usage collected by "
                                  "koordlet", labels=[labels.NODE, "host_application_name", labels.RESOURCE,
                                                      "priority_class", "qos"]),)

    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        (family,) = families
        for app in hostapps.unique(self._host_apps()):  # as collected: the first of a repeated name
            name = app.name or ""
            key = hostapps.labels(name)
            for resource, series in ((labels.RESOURCE_CPU, names.HOST_APP_CPU_USAGE),
                                     (labels.RESOURCE_MEMORY, names.HOST_APP_MEMORY_USAGE)):
                sample = self._cache.latest(series, key, self._max_age)
                if sample is not None:
                    family.add_metric([self._node, name, resource, app.priority or "", app.qos or ""],
                                      sample[1])
