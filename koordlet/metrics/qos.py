"""QoS manager metrics (Koordinator ``pkg/koordlet/metrics/{cpu_suppress,cpu_burst,common}.go``):

* ``koordlet_be_suppress_cpu_cores{node, type}``: CPUs left to BE by cpusuppress (type: cpuset | cfsQuota);
* ``koordlet_be_suppress_ls_used_cpu_cores{node}``: the non-BE usage that computation saw;
* ``koordlet_pod_eviction{node, reason}`` and ``koordlet_pod_eviction_detail{node, pod_namespace, pod_name,
  reason}``: evictions launched; a detail series goes 5 minutes after its last increment, as Koordinator's
  GC counter does (``pkg/util/metrics/expire_metric.go``), so evicted pods' names do not pile up;
* ``koordlet_container_scaled_cfs_quota_us`` / ``..._cfs_burst_us``: what cpuburst set per container;
* ``koordlet_qos_strategy_duration_milliseconds{strategy, status}``: this project's, one per round;
* ``koordlet_psi_trigger_fired_total{node, trigger}`` and ``koordlet_psi_trigger_last_fired_timestamp_seconds{node,
  trigger}``: this project's, PSI trigger firings (:mod:`koordlet.qosmanager.pressure`);
* ``koordlet_qos_woken_rounds_total{node, strategy, acted}``: this project's, rounds a trigger woke, by whether
  they did something (``acted="false"``: a spurious wake-up).

Koordinator's ``pod_eviction`` is a Go counter, exposed under exactly that name.  prometheus_client
would append ``_total`` to a Counter, which breaks existing queries, so these are gauges only ever
incremented (the value and the sample name match the Go agent's)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from koordlet.metrics import labels
from koordlet.metrics.buckets import exponential_buckets

BE_SUPPRESS_CPU: Final = labels.PREFIX + "be_suppress_cpu_cores"
BE_SUPPRESS_LS_USED_CPU: Final = labels.PREFIX + "be_suppress_ls_used_cpu_cores"
POD_EVICTION: Final = labels.PREFIX + "pod_eviction"
POD_EVICTION_DETAIL: Final = labels.PREFIX + "pod_eviction_detail"
CONTAINER_SCALED_CFS_QUOTA: Final = labels.PREFIX + "container_scaled_cfs_quota_us"
STRATEGY_DURATION: Final = labels.PREFIX + "qos_strategy_duration_milliseconds"
PSI_TRIGGER_FIRED: Final = labels.PREFIX + "psi_trigger_fired"
PSI_TRIGGER_LAST_FIRED: Final = labels.PREFIX + "psi_trigger_last_fired_timestamp_seconds"
WOKEN_ROUNDS: Final = labels.PREFIX + "qos_woken_rounds"
DETAIL_EXPIRE_SECONDS: Final = 300.0
"""Koordinator's ``DefaultExpireTime`` for per-pod eviction series."""
# 0.1 ms .. 1.6 s by x4: a round over 1,000 containers should stay under 10 ms.
DURATION_BUCKETS: Final = exponential_buckets(0.1, 4, 8)


class QoSMetrics:
    """The facade strategies report through (implements ``qosmanager.framework.QoSMetricsSink``)."""

    def __init__(self, registry: CollectorRegistry, node_name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._node = node_name
        self._clock = clock
        self._detail_at: dict[tuple[str, str, str, str], float] = {}
        """Label values of each eviction detail series -> when it was last incremented."""
        self._suppress = Gauge(BE_SUPPRESS_CPU, "Number of cores suppress by koordlet",
                               [labels.NODE, labels.SUPPRESS_TYPE], registry=registry)
        self._ls_used = Gauge(BE_SUPPRESS_LS_USED_CPU, "Number of cpu cores used by LS (non-BE pods and "
                              "pods without metadata)", [labels.NODE], registry=registry)
        self._eviction = Gauge(POD_EVICTION, "Number of eviction launched by koordlet",
                               [labels.NODE, labels.REASON], registry=registry)
        self._eviction_detail = Gauge(POD_EVICTION_DETAIL, "evict detail launched by koordlet",
                                      [labels.NODE, labels.POD_NAMESPACE, labels.POD_NAME, labels.REASON],
                                      registry=registry)
        self._scaled_quota = Gauge(CONTAINER_SCALED_CFS_QUOTA, "Run-time replenished within a period (in "
                                   "microseconds) in container-level set by koordlet",
                                   [labels.NODE, labels.POD_NAMESPACE, labels.POD_NAME, labels.KOORD_POD_NAME,
                                    labels.CONTAINER_ID, labels.CONTAINER_NAME], registry=registry)
        self._duration = Histogram(STRATEGY_DURATION, "time of one QoS strategy round",
                                   [labels.STRATEGY, labels.STATUS], registry=registry, buckets=DURATION_BUCKETS)
        self._fired = Counter(PSI_TRIGGER_FIRED, "PSI trigger firings", [labels.NODE, "trigger"], registry=registry)
        self._last_fired = Gauge(PSI_TRIGGER_LAST_FIRED, "when a PSI trigger last fired (seconds since the epoch)",
                                 [labels.NODE, "trigger"], registry=registry)
        self._woken = Counter(WOKEN_ROUNDS, "QoS strategy rounds a pressure trigger woke, by whether they acted",
                              [labels.NODE, labels.STRATEGY, "acted"], registry=registry)

    def be_suppress_cores(self, policy: str, cores: float) -> None:
        self._suppress.labels(self._node, policy).set(cores)

    def be_suppress_ls_used_cores(self, cores: float) -> None:
        self._ls_used.labels(self._node).set(cores)

    def pod_eviction(self, reason: str, pod_namespace: str, pod_name: str) -> None:
        self._eviction.labels(self._node, reason).inc()
        key = (self._node, pod_namespace, pod_name, reason)
        self._eviction_detail.labels(*key).inc()
        self._detail_at[key] = self._clock()

    def expire_details(self) -> None:
        """Drops eviction detail series not incremented for :data:`DETAIL_EXPIRE_SECONDS`; run with every
        strategy round, so it costs a dictionary check while nothing is old."""
        if not self._detail_at:
            return
        cutoff = self._clock() - DETAIL_EXPIRE_SECONDS
        for key in [k for k, at in self._detail_at.items() if at < cutoff]:
            del self._detail_at[key]
            with contextlib.suppress(KeyError):
                self._eviction_detail.remove(*key)

    def scaled_cfs_quota(self, pod_namespace: str, pod_name: str, container: str, quota_us: float) -> None:
        self._scaled_quota.labels(self._node, pod_namespace, pod_name, pod_name, container, container).set(quota_us)

    def forget_container(self, pod_namespace: str, pod_name: str, container: str) -> None:
        with contextlib.suppress(KeyError):
            self._scaled_quota.remove(self._node, pod_namespace, pod_name, pod_name, container, container)

    def psi_trigger_fired(self, trigger: str, at: float) -> None:
        self._fired.labels(self._node, trigger).inc()
        self._last_fired.labels(self._node, trigger).set(at)

    def woken_round(self, strategy: str, acted: bool) -> None:
        self._woken.labels(self._node, strategy, "true" if acted else "false").inc()

    def strategy_run(self, strategy: str, seconds: float, ok: bool) -> None:
        self._duration.labels(strategy, labels.status_of(ok)).observe(seconds * 1000)
        self.expire_details()
