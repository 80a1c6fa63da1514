"""Runtime hooks (Koordinator ``pkg/koordlet/metrics/runtime_hook.go``): how long each hook plugin and
each reconciler pass takes, in milliseconds."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry

from koordlet.metrics import labels
from koordlet.metrics.buckets import exponential_buckets
from koordlet.metrics.histogram import HistogramChild, LightHistogram

HOOK_DURATION: Final = labels.PREFIX + "runtime_hook_invoked_duration_milliseconds"
RECONCILER_DURATION: Final = labels.PREFIX + "runtime_hook_reconciler_invoked_duration_milliseconds"
# 10 us .. 164 ms by x4; a cgroup write takes <= 40 us.
DURATION_BUCKETS: Final = exponential_buckets(0.01, 4, 8)


class RuntimeHookMetrics:
    """Facade the hook server, the NRI plugin and the reconciler report through."""

    def __init__(self, registry: CollectorRegistry, node_name: str) -> None:
        self._node = node_name
        self._hook = LightHistogram(HOOK_DURATION, "time duration of invocations of runtime hook plugins",
                               [labels.NODE, "hook", "stage", labels.STATUS], registry=registry,
                               buckets=DURATION_BUCKETS)
        self._reconciler = LightHistogram(RECONCILER_DURATION,
                                     "time duration of invocations of runtime hook reconciler plugins",
                                     [labels.NODE, "level", "resource_type", labels.STATUS], registry=registry,
                                     buckets=DURATION_BUCKETS)
        # The labelled children, one per label tuple: ``labels()`` locks on every call, and a reconciler round
        # runs every hook for every pod and container.  Nothing removes these series.
        self._hook_children: dict[tuple[str, str, bool], HistogramChild] = {}
        self._reconciler_children: dict[tuple[str, str, bool], HistogramChild] = {}

    def observe_hook(self, hook: str, stage: str, ok: bool, seconds: float) -> None:
        """Hook plugin ``hook`` ran at ``stage`` (``PreRunPodSandbox``...) for ``seconds``."""
        key = (hook, stage, ok)
        child = self._hook_children.get(key)
        if child is None:
            child = self._hook_children[key] = self._hook.labels(self._node, hook, stage, labels.status_of(ok))
        child.observe(seconds * 1000)

    def observe_reconciler(self, level: str, resource_type: str, ok: bool, seconds: float) -> None:
        """The reconciler handled ``resource_type`` (``cpu.cfs_quota_us``...) at ``level`` (pod, container...)."""
        key = (level, resource_type, ok)
        child = self._reconciler_children.get(key)
        if child is None:
            child = self._reconciler_children[key] = self._reconciler.labels(
                self._node, level, resource_type, labels.status_of(ok))
        child.observe(seconds * 1000)
