"""One daemon's metrics: Koordinator's two registries and the feature facades, no global state.

Koordinator's koordlet keeps an *internal* registry (the agent's own health and work: start time, node
usage, kubelet calls, resource writes, runtime hooks, NodeMetric) served at ``/internal-metrics``, an
*external* one (what users build on: per-pod and per-container usage, PSI, CPI) at ``/external-metrics``,
and serves both merged at ``/metrics`` (``pkg/koordlet/metrics/{internal,external}_metrics.go``,
``cmd/koordlet/main.go``).  :class:`KoordletMetrics` builds the same split around fresh
``CollectorRegistry`` objects, so two daemons (or two tests) in one process never share a series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.metrics.cpi import DEFAULT_FIELDS, CPICollector
from koordlet.metrics.executor import ResourceExecutorMetrics
from koordlet.metrics.kubelet import KubeletMetrics
from koordlet.metrics.lifecycle import LifecycleMetrics
from koordlet.metrics.nodemetric import NodeMetricMetrics
from koordlet.metrics.psi import PSICollector
from koordlet.metrics.qos import QoSMetrics
from koordlet.metrics.resource import HostAppUsageCollector, NodeUsageCollector, PodUsageCollector
from koordlet.metrics.runtimehooks import RuntimeHookMetrics
from koordlet.metrics.sources import LatestSamples, PodLister

PATH_METRICS: Final = "/metrics"
PATH_INTERNAL: Final = "/internal-metrics"
PATH_EXTERNAL: Final = "/external-metrics"
STALE_FACTOR: Final = 3.0
"""A sample older than this many collect intervals is not exported: two missed ticks are jitter, three
mean the collector (or the cgroup) is gone."""


@dataclass(frozen=True, slots=True)
class MaxAges:
    """Oldest sample each scrape-time family exports, in seconds.

    The defaults are three times Koordinator's default intervals: resource usage every 1 s
    (``--collect-res-used-interval``), PSI every 10 s, CPI every 60 s."""

    resource_seconds: float = 3.0
    psi_seconds: float = 30.0
    cpi_seconds: float = 180.0

    def __post_init__(self) -> None:
        for name in ("resource_seconds", "psi_seconds", "cpi_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MaxAges.{name} must be positive, got {getattr(self, name)!r}")

    @classmethod
    def from_intervals(cls, resource_seconds: float, psi_seconds: float, cpi_seconds: float) -> MaxAges:
        """Max ages for the configured collect intervals."""
        return cls(resource_seconds * STALE_FACTOR, psi_seconds * STALE_FACTOR, cpi_seconds * STALE_FACTOR)


class MergedCollector:
    """Several registries as one collector (Koordinator's ``MergedGatherFunc``), for ``/metrics``."""

    def __init__(self, *sources: Collector) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self._sources:
            yield from source.collect()


class KoordletMetrics:
    """Every metric of one daemon.

    Facades for what callers record (``lifecycle``, ``kubelet``, ``executor``, ``runtime_hooks``,
    ``node_metric``, ``qos``), and scrape-time collectors over ``cache``, ``pods`` and ``host_apps`` for what is
    measured (node, pod, container and host-application usage, PSI, CPI).  Serve :attr:`routes` with
    :func:`koordlet.metrics.server.serve`.
    """

    def __init__(
        self,
        *,
        node_name: str,
        cache: LatestSamples,
        pods: PodLister,
        max_ages: MaxAges | None = None,
        cpi_fields: Mapping[str, str] = DEFAULT_FIELDS,
        process_metrics: bool = True,
        host_apps: Callable[[], Sequence[HostApplicationSpec]] = tuple,
    ) -> None:
        ages = max_ages if max_ages is not None else MaxAges()
        self.node_name = node_name
        self.internal = CollectorRegistry()
        self.external = CollectorRegistry()

        self.lifecycle = LifecycleMetrics(self.internal, node_name)
        self.kubelet = KubeletMetrics(self.internal)
        self.executor = ResourceExecutorMetrics(self.internal)
        self.runtime_hooks = RuntimeHookMetrics(self.internal, node_name)
        self.qos = QoSMetrics(self.internal, node_name)
        self.node_metric = NodeMetricMetrics(node_name)
        self._register(self.internal, [
            self.node_metric,
            NodeUsageCollector(cache, node_name, ages.resource_seconds),
        ])
        if process_metrics:
            # The agent's own CPU and RSS (process_cpu_seconds_total, process_resident_memory_bytes), as Go's
            # default registry carries them for Koordinator's koordlet.
            ProcessCollector(registry=self.internal)

        self._register(self.external, [
            PodUsageCollector(cache, pods, node_name, ages.resource_seconds),
            HostAppUsageCollector(cache, host_apps, node_name, ages.resource_seconds),
            PSICollector(cache, pods, node_name, ages.psi_seconds),
            CPICollector(cache, pods, node_name, ages.cpi_seconds, cpi_fields),
        ])
        self.merged = MergedCollector(self.internal, self.external)

    @staticmethod
    def _register(registry: CollectorRegistry, collectors: Iterable[Collector]) -> None:
        for collector in collectors:
            registry.register(collector)

    @property
    def routes(self) -> dict[str, Collector]:
        """HTTP path -> what it serves."""
        return {PATH_METRICS: self.merged, PATH_INTERNAL: self.internal, PATH_EXTERNAL: self.external}
