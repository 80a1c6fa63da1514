"""Resource writes (Koordinator ``pkg/koordlet/metrics/resource_executor.go``):
``koordlet_resource_update_duration_milliseconds{type, status}``; and what shadow mode did not do,
``koordlet_shadow_intended_total{strategy, action}`` (an action is a resource key, or ``evict``)."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from koordlet.metrics import labels
from koordlet.metrics.buckets import exponential_buckets
from koordlet.resourceexecutor.sink import WriteSink

RESOURCE_UPDATE_DURATION: Final = labels.PREFIX + "resource_update_duration_milliseconds"
SHADOW_INTENDED: Final = labels.PREFIX + "shadow_intended"
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
        self._intended = Counter(SHADOW_INTENDED, "writes and evictions a strategy in shadow mode would have made "
                                 "(each counted once per force-update window while it stays the same)",
                                 ["strategy", "action"], registry=registry)

    def observe(self, updater_type: str, ok: bool, seconds: float) -> None:
        """One write of kind ``updater_type`` (a cgroup file, a resctrl schemata...) took ``seconds``."""
        status = STATUS_SUCCESS if ok else STATUS_FAILED
        self._duration.labels(updater_type, status).observe(seconds * 1000)

    def intended(self, kind: str, strategy: str) -> None:
        self._intended.labels(strategy, kind).inc()
