"""Resource writes (Koordinator ``pkg/koordlet/metrics/resource_executor.go``):
``koordlet_resource_update_duration_milliseconds{type, status}``."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Histogram

from koordlet.metrics import labels
from koordlet.metrics.buckets import exponential_buckets
from koordlet.resourceexecutor.sink import WriteSink

RESOURCE_UPDATE_DURATION: Final = labels.PREFIX + "resource_update_duration_milliseconds"
# Koordinator's status values for this metric differ from the common succeeded/failed.
STATUS_SUCCESS: Final = "success"
STATUS_FAILED: Final = "failed"
# 10 us .. 164 ms by x4; a cgroup write takes <= 40 us.
DURATION_BUCKETS: Final = exponential_buckets(0.01, 4, 8)


class ResourceExecutorMetrics(WriteSink):
    """The executors' :class:`~koordlet.resourceexecutor.sink.WriteSink`: one histogram observation per write."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(RESOURCE_UPDATE_DURATION, "time duration of resource update such as cgroup files",
                                   ["type", labels.STATUS], registry=registry, buckets=DURATION_BUCKETS)

    def observe(self, updater_type: str, ok: bool, seconds: float) -> None:
        """One write of kind ``updater_type`` (a cgroup file, a resctrl schemata...) took ``seconds``."""
        status = STATUS_SUCCESS if ok else STATUS_FAILED
        self._duration.labels(updater_type, status).observe(seconds * 1000)
