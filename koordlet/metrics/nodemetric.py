"""What the last NodeMetric report said (Koordinator ``pkg/koordlet/metrics/node_metric.go``):
``koordlet_node_metric_node_usage`` and ``koordlet_node_metric_system_usage{resource, unit}``.

Koordinator records these only with its ``NodeMetricPromMetrics`` feature gate (off by default): the
daemon hands this collector to the NodeMetric runner as its recorder only when the gate is on.  Each
scrape shows exactly the last report, so a resource missing from it is missing here too (Koordinator
resets the gauges before recording for the same reason).  The NUMA variants are not exported: NUMA
usage is not reported.
"""

from __future__ import annotations

import threading
from typing import Final

from prometheus_client.core import GaugeMetricFamily

from koordlet.apis.nodemetric import NodeMetricStatus, ResourceMap
from koordlet.metrics import labels
from koordlet.metrics.sources import ScrapeCollector

NODE_USAGE: Final = labels.PREFIX + "node_metric_node_usage"
SYSTEM_USAGE: Final = labels.PREFIX + "node_metric_system_usage"


class NodeMetricMetrics(ScrapeCollector):
    """Collector of the last reported NodeMetric status; the runner calls :meth:`record`."""

    def __init__(self, node_name: str) -> None:
        super().__init__(node_name)
        self._lock = threading.Lock()
        self._status: NodeMetricStatus | None = None

    def record(self, status: NodeMetricStatus) -> None:
        with self._lock:
            self._status = status

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        keys = [labels.NODE, labels.RESOURCE, labels.UNIT]
        return (
            GaugeMetricFamily(NODE_USAGE, "the node usage reported in the NodeMetric", labels=keys),
            GaugeMetricFamily(SYSTEM_USAGE, "the system usage reported in the NodeMetric", labels=keys),
        )

    def _fill(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        with self._lock:
            status = self._status
        if status is None or status.node_metric is None:
            return
        node_family, system_family = families
        self._add(node_family, status.node_metric.node_usage)
        self._add(system_family, status.node_metric.system_usage)

    def _add(self, family: GaugeMetricFamily, usage: ResourceMap) -> None:
        if usage.cpu_milli is not None:
            family.add_metric([self._node, labels.RESOURCE_CPU, labels.UNIT_CORE], usage.cpu_milli / 1000)
        if usage.memory_bytes is not None:
            family.add_metric([self._node, labels.RESOURCE_MEMORY, labels.UNIT_BYTE], usage.memory_bytes)
