"""NodeMetric reporting: build the status from the metric cache, hand it to reporters on a schedule.

Koordinator's koordlet (``pkg/koordlet/statesinformer/impl/states_nodemetric.go``) reports, every
``reportIntervalSeconds``:

- ``nodeUsage`` / ``systemUsage``: the *average* over ``aggregateDurationSeconds`` (not the latest sample), so
  one busy second does not swing the batch-resource formula or the load-aware scheduler;
- ``aggregatedNodeUsages`` / ``aggregatedSystemUsages``: per duration of ``nodeAggregatePolicy``, the p50, p90,
  p95 and p99 of the same series, plus their ``avg`` (Koordinator's koordlet leaves ``avg`` out although it is
  one of the API's aggregation types; the load-aware scheduler can be configured to read it); while the
  samples cover less than half of a duration (a cold start) that duration's maps are left empty rather
  than reporting a misleading figure;
- ``podsMetric``: the average usage of every pod the informer knows and the cache has samples for, with its
  priority class and QoS class (both with Koordinator's defaults).

``prodReclaimableMetric`` comes from the peak prediction (:mod:`koordlet.prediction`): every pod with metrics
is added to a prod-reclaimable predictor; a predictor that cannot answer gives an empty ``resource`` (as
upstream), which the companion's mid-tier reads as zero.

Reporters decide where a status goes: :class:`LocalNodeMetricSink` keeps it on the node (metric-cache KV
and a JSON file under the state dir); the companion's network sink implements the same protocol.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    AggregatedUsage,
    AggregationType,
    MemoryCollectPolicy,
    NodeMetric,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    PeakMetric,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
)
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.component import Worker
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.aggregate import Aggregate
from koordlet.metriccache.cache import Labels, labels_of
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.hostappmetric import host_app_metrics
from koordlet.system import atomicfile

log = logging.getLogger(__name__)

KV_KEY: Final = "nodemetric"
"""Metric-cache KV key of the last reported NodeMetric object."""
STATE_FILE: Final = "nodemetric.json"
"""File under the state dir holding the last reported NodeMetric object."""
COLD_START_RATIO: Final = 0.5
"""An aggregate counts once its samples span at least this share of its window (Koordinator's
``validateTimeRangeRatio``)."""

_NODE: Final[Labels] = labels_of()


class UsageQuerier(Protocol):
    """The metric-cache query the builder needs (:class:`koordlet.metriccache.MetricCache` has it)."""

    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        ...


class PodLister(Protocol):
    """The informer query the builder needs (every :class:`~koordlet.statesinformer.framework.StatesInformer`)."""

    def pods(self) -> Sequence[PodMeta]:
        ...


class KeyValueStore(Protocol):
    def kv_put(self, key: str, value: Any) -> None:
        ...

    def kv_get(self, key: str) -> Any | None:
        ...


class NodeMetricReporter(Protocol):
    """Where a built NodeMetric status goes (local store, the companion...)."""

    def report(self, status: NodeMetricStatus) -> None:
        """Deliver one status; raise to make the round count as failed."""
        ...


# --- prodReclaimableMetric (peak prediction) -------------------------------------------------------------

class ProdPredictor(Protocol):
    """One round's prod-reclaimable predictor (:class:`koordlet.prediction.ProdReclaimablePredictor`)."""

    def add_pod(self, pod: Any) -> None:
        ...

    def result(self) -> Any:
        """An object with ``cpu_milli`` and ``memory_bytes``; raises when there is no prediction."""
        ...

    def peak(self) -> Any:
        """The predicted prod peak, the same shape; raises when there is no prediction."""
        ...


ProdPredictorFactory = Callable[[float], ProdPredictor]
"""Makes the predictor for the round at ``now`` (epoch seconds)."""


def _prod_reclaimable(predictor: ProdPredictor) -> ReclaimableMetric:
    try:
        result = predictor.result()
    except Exception as exc:  # upstream reports an empty ReclaimableMetric and goes on
        log.warning("prod reclaimable prediction unavailable", extra={"error": str(exc)})
        return ReclaimableMetric(ResourceMap())
    return ReclaimableMetric(ResourceMap(cpu_milli=int(result.cpu_milli), memory_bytes=int(result.memory_bytes)))


def _prod_peak(predictor: ProdPredictor) -> PeakMetric | None:
    try:
        peak = predictor.peak()
    except Exception as exc:  # upstream leaves prodPeakMetric out and goes on
        log.warning("prod peak prediction unavailable", extra={"error": str(exc)})
        return None
    return PeakMetric(ResourceMap(cpu_milli=int(peak.cpu_milli), memory_bytes=int(peak.memory_bytes)))

# --- end prodReclaimableMetric ------------------------------------------------------------------------------


class NodeMetricRecorder(Protocol):
    """Optional observer of reported statuses (the Prometheus ``koordlet_node_metric_*`` gauges)."""

    def record(self, status: NodeMetricStatus) -> None:
        ...


# ---------------------------------------------------------------------------------------------- builder

_MEMORY_SERIES: Final = {
    MemoryCollectPolicy.WITHOUT_PAGE_CACHE: (names.NODE_MEMORY_USAGE, names.POD_MEMORY_USAGE),
    MemoryCollectPolicy.WITH_PAGE_CACHE: (names.NODE_MEMORY_WITH_PAGE_CACHE, names.POD_MEMORY_WITH_PAGE_CACHE),
}
"""Node and pod memory series per ``nodeMemoryCollectPolicy``, for the figures that are collected."""


def _memory_series(policy: NodeMetricCollectPolicy) -> tuple[str, str]:
    """Node and pod memory series for the policy.

    ``usageWithPageCache`` reads its own series (node MemTotal - MemFree, pods' anon + file LRUs), as upstream.
    ``usageWithHotPageCache`` needs kidled's cold-page statistics (gate ColdPageCollector, not implemented):
    Koordinator degrades it to usage without page cache when kidled is not running, and so does this."""
    return _MEMORY_SERIES.get(policy.node_memory_collect_policy,
                              _MEMORY_SERIES[MemoryCollectPolicy.WITHOUT_PAGE_CACHE])


def _usage(cpu: Aggregate | None, memory: Aggregate | None, kind: AggregationType) -> ResourceMap:
    # Koordinator fails the whole query (and reports an empty map) when either resource has no samples.
    if cpu is None or memory is None:
        return ResourceMap()
    return ResourceMap.from_usage(_statistic(cpu, kind), _statistic(memory, kind))


def _statistic(aggregate: Aggregate, kind: AggregationType) -> float:
    # Aggregate's fields are named like the JSON keys: avg, p50, p90, p95, p99.
    value: float = getattr(aggregate, kind.value)
    return value


def _windows(
    cache: UsageQuerier, cpu_series: str, memory_series: str, durations: Iterable[float], now: float,
) -> tuple[AggregatedUsage, ...]:
    windows = []
    for seconds in durations:
        cpu = cache.aggregate(cpu_series, _NODE, seconds, now)
        memory = cache.aggregate(memory_series, _NODE, seconds, now)
        # Koordinator judges the cold start on the CPU series' time range.
        cold = cpu is None or cpu.span_seconds < seconds * COLD_START_RATIO
        usage = {kind: ResourceMap() if cold else _usage(cpu, memory, kind) for kind in AggregationType}
        windows.append(AggregatedUsage(duration_seconds=seconds, usage=usage))
    return tuple(windows)


def _priority_with_default(meta: PodMeta) -> PriorityClass:
    """Koordinator's ``GetPodPriorityClassWithDefault``: the pod's band, else one derived from its QoS."""
    band = meta.priority_class
    if band is not PriorityClass.NONE:
        return band
    if meta.qos in (QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS):
        return PriorityClass.PROD
    if meta.qos is QoSClass.BE:
        return PriorityClass.BATCH
    return PriorityClass.NONE


def _pod_metric(cache: UsageQuerier, meta: PodMeta, memory_series: str, seconds: float,
                now: float) -> PodMetricInfo | None:
    labels = labels_of(pod=meta.uid)
    cpu = cache.aggregate(names.POD_CPU_USAGE, labels, seconds, now)
    memory = cache.aggregate(memory_series, labels, seconds, now)
    if cpu is None or memory is None:
        return None
    return PodMetricInfo(
        name=meta.pod.name,
        namespace=meta.pod.namespace,
        pod_usage=ResourceMap.from_usage(cpu.avg, memory.avg),
        priority=_priority_with_default(meta),
        qos=meta.qos,
    )


def build_node_metric(
    cache: UsageQuerier, informer: PodLister, policy: NodeMetricCollectPolicy, now: float,
    predictor_factory: ProdPredictorFactory | None = None,
    *, host_apps: Sequence[HostApplicationSpec] = (),
) -> NodeMetricStatus:
    """The NodeMetric status at ``now`` (epoch seconds) from the cache's series; see the module docstring.

    Pods without samples in the aggregate window (just started, or not collected) are left out, as
    Koordinator leaves out pods whose query fails.  ``prodReclaimableMetric`` is set when
    ``predictor_factory`` is given (the daemon runs the peak prediction).
    """
    seconds = policy.aggregate_duration_seconds
    node_memory, pod_memory = _memory_series(policy)

    def average(cpu_series: str, memory_series: str) -> ResourceMap:
        cpu = cache.aggregate(cpu_series, _NODE, seconds, now)
        memory = cache.aggregate(memory_series, _NODE, seconds, now)
        return _usage(cpu, memory, AggregationType.AVG)

    node = NodeMetricInfo(
        node_usage=average(names.NODE_CPU_USAGE, node_memory),
        aggregated_node_usages=_windows(cache, names.NODE_CPU_USAGE, node_memory,
                                        policy.node_aggregate_durations, now),
        system_usage=average(names.SYSTEM_CPU_USAGE, names.SYSTEM_MEMORY_USAGE),
        aggregated_system_usages=_windows(cache, names.SYSTEM_CPU_USAGE, names.SYSTEM_MEMORY_USAGE,
                                          policy.node_aggregate_durations, now),
    )
    pods = []
    predictor = predictor_factory(now) if predictor_factory is not None else None
    for meta in informer.pods():
        metric = _pod_metric(cache, meta, pod_memory, seconds, now)
        if metric is not None:
            pods.append(metric)
            if predictor is not None:
                try:  # upstream: predict the pods with valid metrics, ignore a pod's prediction failure
                    predictor.add_pod(meta.pod)
                except Exception as exc:
                    log.debug("pod not predicted", extra={"pod": meta.pod.key, "error": str(exc)})
    reclaimable = _prod_reclaimable(predictor) if predictor is not None else None
    peak = _prod_peak(predictor) if predictor is not None else None
    return NodeMetricStatus(update_time=now, node_metric=node, pods_metric=tuple(pods),
                            prod_reclaimable_metric=reclaimable, prod_peak_metric=peak,
                            host_application_metric=host_app_metrics(
                                cache, host_apps, policy.node_memory_collect_policy, seconds, now))


# ---------------------------------------------------------------------------------------------- local sink

class NodeMetricWriteError(KoordletError, OSError):
    """The NodeMetric file could not be written; the message names the path and the cause."""


class LocalNodeMetricSink:
    """Keeps the latest NodeMetric on the node: in the metric-cache KV (key ``nodemetric``) and as a JSON
    file under the state dir, replaced atomically (temporary file in the same directory, fsync, rename) so
    a reader (koordctl, an operator's ``cat``) never sees a half-written file, even across a crash.

    Both hold the whole object (``apiVersion``, ``kind``, ``metadata.name``, ``status``), readable with
    :meth:`koordlet.apis.nodemetric.NodeMetric.from_json`."""

    def __init__(self, store: KeyValueStore, state_dir: Path, node_name: str) -> None:
        self._store = store
        self._state_dir = Path(state_dir)
        self._node_name = node_name
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._state_dir / STATE_FILE

    def report(self, status: NodeMetricStatus) -> None:
        """Stores ``status``; raises :class:`NodeMetricWriteError` when the file cannot be written (the KV
        copy is stored first and stays current)."""
        document = NodeMetric(name=self._node_name, status=status).to_json()
        with self._lock:
            self._store.kv_put(KV_KEY, document)
            self._write(json.dumps(document, indent=2, sort_keys=False).encode() + b"\n")

    def latest(self) -> NodeMetric | None:
        """The last stored NodeMetric (from the KV), or None before the first report."""
        document = self._store.kv_get(KV_KEY)
        return NodeMetric.from_json(document) if document is not None else None

    def _write(self, data: bytes) -> None:
        target = self.path
        try:
            self._state_dir.mkdir(parents=True, exist_ok=True)
            atomicfile.write(target, data, mode=0o644, on_dir_sync_error=self._dir_sync_failed)
        except OSError as exc:
            raise NodeMetricWriteError(exc.errno or errno.EIO,
                                       f"cannot write NodeMetric to {target}: {exc.strerror or exc}") from exc

    def _dir_sync_failed(self, exc: OSError) -> None:
        # The rename is durable only once the directory entry is on disk; a failure here loses nothing that
        # is not already lost on a crash, so it is logged, not raised.
        log.debug("state dir fsync failed", extra={"path": str(self._state_dir), "error": str(exc)})


# ---------------------------------------------------------------------------------------------- runner

def next_slot(previous_due: float, interval: float, now: float) -> float:
    """The report slot after ``previous_due`` on a cadence of ``interval`` that is still ahead of ``now``.

    Slots stay on the grid started at the first report, so build time does not make reports drift; a
    round that overran skips the slots it missed instead of reporting back to back."""
    due = previous_due + interval
    if due <= now:
        due += interval * (math.floor((now - due) / interval) + 1)
    return due


class NodeMetricRunner:
    """Builds and reports the NodeMetric status every ``report_interval_seconds`` on its own thread.

    The first report comes one interval after start (as in Koordinator: at start the windows are empty).
    Reports stay on a fixed cadence from the start time; a round that overruns skips the slots it missed.
    A failing round (build or any reporter) is logged and counted, never fatal; every reporter is tried
    even when an earlier one fails.  :meth:`set_policy` takes effect from the next round.
    """

    name: Final = "nodemetric"

    def __init__(
        self,
        cache: UsageQuerier,
        informer: PodLister,
        reporters: Sequence[NodeMetricReporter],
        policy: NodeMetricCollectPolicy | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        recorder: NodeMetricRecorder | None = None,
        predictor_factory: ProdPredictorFactory | None = None,
        host_apps: Callable[[], Sequence[HostApplicationSpec]] | None = None,
    ) -> None:
        self._cache = cache
        self._informer = informer
        self._reporters = tuple(reporters)
        self._policy = policy if policy is not None else NodeMetricCollectPolicy()
        self._clock = clock
        self._monotonic = monotonic
        self._recorder = recorder
        self.predictor_factory = predictor_factory
        """Set before start (the daemon's prediction block); None: no ``prodReclaimableMetric``."""
        self.host_apps = host_apps
        """The NodeSLO's ``hostApplications`` in force (hostApplicationMetric)."""
        self._worker = Worker("koordlet-nodemetric")
        self._wake = threading.Event()
        """Set by stop(), by a policy whose interval changed and by report_now()."""
        self._now = threading.Event()
        """Set by report_now(): the next round runs at once instead of on its slot."""
        self._lock = threading.Lock()
        self._rounds = 0
        self._failures = 0

    @property
    def policy(self) -> NodeMetricCollectPolicy:
        return self._policy

    def set_policy(self, policy: NodeMetricCollectPolicy) -> None:
        """Replace the collect policy (a new NodeMetric spec); the next round uses it, and a shorter
        interval brings the next report forward (at most one new interval from now)."""
        changed = policy.report_interval_seconds != self._policy.report_interval_seconds
        self._policy = policy
        if changed:
            self._wake.set()

    def report_now(self) -> None:
        """Runs a round at once (off the cadence, which stays): a companion that comes back after reports
        were lost gets the node's figures now rather than up to one interval later."""
        self._now.set()
        self._wake.set()

    @property
    def rounds(self) -> int:
        """Rounds attempted so far."""
        return self._rounds

    @property
    def failures(self) -> int:
        """Rounds that raised (in the build or in a reporter)."""
        return self._failures

    def run_once(self) -> NodeMetricStatus:
        """Build one status and hand it to every reporter; raises the first reporter error after trying all."""
        status = build_node_metric(self._cache, self._informer, self._policy, self._clock(),
                                   self.predictor_factory,
                                   host_apps=self.host_apps() if self.host_apps is not None else ())
        if self._recorder is not None:
            self._recorder.record(status)
        errors: list[Exception] = []
        for reporter in self._reporters:
            try:
                reporter.report(status)
            except Exception as exc:
                errors.append(exc)
                log.warning("NodeMetric reporter failed",
                            extra={"reporter": type(reporter).__name__, "error": str(exc)})
        if errors:
            raise errors[0]
        return status

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self._worker.start(lambda: self._loop(on_failure))

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stopping.set()
        self._wake.set()
        if not self._worker.stop(timeout_seconds):
            log.warning("NodeMetric runner still busy at stop", extra={"timeout_seconds": timeout_seconds})

    def _loop(self, on_failure: Callable[[BaseException], None]) -> None:
        try:
            next_due = self._monotonic() + self._policy.report_interval_seconds
            while True:
                self._wake.wait(max(0.0, next_due - self._monotonic()))
                if self._worker.stopping.is_set():
                    return
                if self._wake.is_set():  # a new interval: the next report is due within it
                    self._wake.clear()
                    next_due = min(next_due, self._monotonic() + self._policy.report_interval_seconds)
                    if self._now.is_set():
                        self._now.clear()
                        self._round()
                        continue
                    if self._monotonic() < next_due:
                        continue
                self._round()
                next_due = next_slot(next_due, self._policy.report_interval_seconds, self._monotonic())
        except BaseException as exc:  # the thread's root: anything escaping the rounds kills reporting
            on_failure(exc)

    def _round(self) -> None:
        with self._lock:
            self._rounds += 1
        try:
            status = self.run_once()
        except Exception as exc:
            with self._lock:
                self._failures += 1
            log.warning("NodeMetric report failed",
                        extra={"error": str(exc), "failures": self._failures, "rounds": self._rounds})
        else:
            log.debug("NodeMetric reported", extra={"pods": len(status.pods_metric)})
