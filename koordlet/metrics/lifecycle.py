"""The daemon's own lifecycle (Koordinator ``pkg/koordlet/metrics/common.go``): ``koordlet_start_time``."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Gauge

from koordlet.metrics import labels

START_TIME: Final = labels.PREFIX + "start_time"


class LifecycleMetrics:
    """Facade over the lifecycle gauges of one daemon."""

    def __init__(self, registry: CollectorRegistry, node_name: str) -> None:
        self._node = node_name
        self._start_time = Gauge(START_TIME, "the start time of koordlet", [labels.NODE], registry=registry)

    def record_start(self, epoch_seconds: float) -> None:
        """The daemon started at ``epoch_seconds`` (a restart shows as a jump)."""
        self._start_time.labels(self._node).set(epoch_seconds)
