"""Cycles per instruction per container (Koordinator ``pkg/koordlet/metrics/cpi.go``): ``koordlet_container_cpi``,
read from the metric cache at scrape time.

Koordinator exports the raw counters, one series each, told apart by ``cpi_field`` (``cycles``,
``instructions``).  The CPI collector here stores their ratio, so by default the family carries one series
per container with ``cpi_field="cpi"``; give :class:`CPICollector` a field map to export raw counters
once the collector stores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from prometheus_client.core import GaugeMetricFamily

from koordlet.metriccache import names
from koordlet.metriccache.cache import labels_of
from koordlet.metrics import labels
from koordlet.metrics.sources import LatestSamples, PodLister, ScrapeCollector, pod_label_values, running_containers

CONTAINER_CPI: Final = labels.PREFIX + "container_cpi"
CPI_FIELD: Final = "cpi_field"
DEFAULT_FIELDS: Final[Mapping[str, str]] = {"cpi": names.CONTAINER_CPI}
"""``cpi_field`` value -> cache series (labelled ``pod``, ``container``)."""


class CPICollector(ScrapeCollector):
    """``koordlet_container_cpi`` for the containers of the informer's current pods."""

    def __init__(self, cache: LatestSamples, pods: PodLister, node_name: str, max_age_seconds: float,
                 fields: Mapping[str, str] = DEFAULT_FIELDS) -> None:
        super().__init__(node_name)
        self._cache = cache
        self._pods = pods
        self._max_age = max_age_seconds
        self._fields = dict(fields)

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (GaugeMetricFamily(CONTAINER_CPI, "Container cpi collected by koordlet",
                                  labels=[*labels.CONTAINER_LABELS, CPI_FIELD]),)

    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        (family,) = families
        for meta in self._pods.pods():
            pod = pod_label_values(meta)
            for container in running_containers(meta):
                key = labels_of(pod=meta.uid, container=container.bare_id)
                for field, series in self._fields.items():
                    sample = self._cache.latest(series, key, self._max_age)
                    if sample is not None:
                        family.add_metric([self._node, container.label_id, container.name, *pod, field], sample[1])
