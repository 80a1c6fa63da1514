"""Pressure stall information per pod and container (Koordinator ``pkg/koordlet/metrics/psi.go``):
``koordlet_pod_psi`` and ``koordlet_container_psi``, read from the metric cache at scrape time.

Labels as Koordinator's: ``psi_resource_type`` cpu | mem | io, ``psi_precision`` (the cache keeps the
``avg10`` figure only), ``psi_degree`` some | full, ``cpu_full_supported`` whether the resource's ``full``
line exists (older kernels have none for cpu).  Values are percentages as the kernel prints them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily

from koordlet.metriccache import names
from koordlet.metriccache.cache import Labels, labels_of
from koordlet.metrics import labels
from koordlet.metrics.sources import ContainerRef, PodScrapeCollector, Row
from koordlet.statesinformer.framework import PodMeta

POD_PSI: Final = labels.PREFIX + "pod_psi"
CONTAINER_PSI: Final = labels.PREFIX + "container_psi"

_PSI_LABELS: Final = (labels.PSI_RESOURCE_TYPE, labels.PSI_PRECISION, labels.PSI_DEGREE, labels.CPU_FULL_SUPPORTED)

PRECISION_AVG10: Final = "avg10"
_RESOURCE_TYPES: Final = (("cpu", "cpu"), ("memory", "mem"), ("io", "io"))
"""(the cache's ``resource`` label, Koordinator's ``psi_resource_type``)."""


class PSICollector(PodScrapeCollector):
    """``koordlet_pod_psi`` and ``koordlet_container_psi`` for the informer's current pods."""

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(POD_PSI, "Pod psi collected by koordlet", labels=[*labels.POD_LABELS, *_PSI_LABELS]),
            GaugeMetricFamily(CONTAINER_PSI, "Container psi collected by koordlet",
                              labels=[*labels.CONTAINER_LABELS, *_PSI_LABELS]),
        )

    def _pod_rows(self, meta: PodMeta) -> Iterator[Row]:
        return self._records(names.POD_PSI, labels_of(pod=meta.uid))

    def _container_rows(self, meta: PodMeta, container: ContainerRef) -> Iterator[Row]:
        return self._records(names.CONTAINER_PSI, labels_of(pod=meta.uid, container=container.bare_id))

    def _records(self, series: str, owner: Labels) -> Iterator[Row]:
        for cache_resource, resource_type in _RESOURCE_TYPES:
            base = dict(owner, resource=cache_resource)
            some = self._cache.latest(series, labels_of(base, kind="some"), self._max_age)
            full = self._cache.latest(series, labels_of(base, kind="full"), self._max_age)
            supported = "true" if full is not None else "false"
            if some is not None:
                yield (resource_type, PRECISION_AVG10, "some", supported), some[1]
            if full is not None:
                yield (resource_type, PRECISION_AVG10, "full", supported), full[1]
