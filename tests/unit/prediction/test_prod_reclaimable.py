"""NodeMetric's prodReclaimableMetric from a scripted usage history, against Koordinator's predictor.

The expected figures are derived here from upstream's definitions, written out independently of
koordlet.prediction's code:

* ``pkg/util/histogram``: bucket ``b`` of value ``v`` is ``floor(log_r(v (r-1) / f + 1))`` (0 below ``f``),
  capped at the last bucket; a sample at time t weighs ``2^((t - ref) / halfLife)`` where ``ref`` is the first
  sample's time rounded to a whole half-life; percentile p is the *end* of the first bucket where the
  cumulative weight reaches ``p x total``: ``f (r^(b+1) - 1) / (r - 1)``.  CPU: f = 0.025 cores, r = 1.05,
  max 1024 cores, half-life 12 h; memory: f = 5 MiB, r = 1.05, max 2 TiB, half-life 24 h.
* ``predict_server.go``: each training round takes the p90 of the last minute; CPU is reported as
  ``int(percentile x 1000)`` milli-cores, memory as ``int(percentile)`` bytes; a priority class model takes
  the sum of its pods' samples, the ``sys`` model node minus all pods.
* ``peak_predictor.go``: per prod pod, peak = ``int(p95cpu x 1.1)`` / ``int(p98mem x 1.1)``,
  reclaimable += max(request - peak, 0); result = min(max(allocatable - sum peaks, 0), reclaimable).
  Per class: unReclaimable = ``int((sys + prod + none) x 1.1)`` on p95 CPU / p98 memory; result =
  min(max(allocatable - unReclaimable, 0), max(prod requests - unReclaimable, 0)).  The reported value is the
  minimum of both; a pod younger than 24 h contributes nothing reclaimable.
* ``prodPeakMetric`` (``GetPeak``): per pod, the sum of the peaks plus the requests of young pods; per class,
  unReclaimable; the reported peak is the larger of both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from koordlet.apis.nodemetric import NodeMetricCollectPolicy, NodeMetricStatus, format_time
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.metriccache import names
from koordlet.metriccache.aggregate import Aggregate
from koordlet.metriccache.cache import Labels, labels_of
from koordlet.prediction import Pair, PeakPredictServer, factory
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodemetric import build_node_metric
from koordlet.system.kubepaths import KubeQoS

G = 1 << 30
START = 1_700_000_000.0  # a Tuesday; the first sample's time
MINUTE = 60.0


# ---------------------------------------------------------------------------------------------- upstream formulas

def bucket_of(v: float, first: float, ratio: float, maximum: float) -> int:
    count = math.ceil(math.log(maximum * (ratio - 1) / first + 1) / math.log(ratio)) + 1
    if v < first:
        return 0
    return min(int(math.log(v * (ratio - 1) / first + 1) / math.log(ratio)), count - 1)


def upstream_percentile(samples: Sequence[tuple[float, float]], p: float, first: float, ratio: float,
                        maximum: float, half_life: float) -> float:
    """Weighted histogram percentile of (time, value) samples, as pkg/util/histogram computes it."""
    go_zero = 62135596800.0  # Go rounds times to multiples of the duration counted from year 1
    ref = math.floor((samples[0][0] + go_zero) / half_life + 0.5) * half_life - go_zero
    weights: dict[int, float] = {}
    for when, value in samples:
        b = bucket_of(value, first, ratio, maximum)
        weights[b] = weights.get(b, 0.0) + 2.0 ** ((when - ref) / half_life)
    total = sum(weights.values())
    partial = 0.0
    for b in sorted(weights):
        partial += weights[b]
        if partial >= p * total:
            return first * (ratio ** (b + 1) - 1) / (ratio - 1)
    raise AssertionError("unreachable")


def cpu_milli(samples: Sequence[tuple[float, float]], p: float) -> int:
    return int(upstream_percentile(samples, p, 0.025, 1.05, 1024, 12 * 3600) * 1000)


def memory_bytes(samples: Sequence[tuple[float, float]], p: float) -> int:
    return int(upstream_percentile(samples, p, float(5 << 20), 1.05, float(1 << 41), 24 * 3600))


# ---------------------------------------------------------------------------------------------- fakes

@dataclass
class ScriptedCache:
    """Each series is a function of time; a window's statistics are the value at its end."""

    series: dict[tuple[str, Labels], Callable[[float], float]]

    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        fn = self.series.get((name, labels))
        if fn is None or end is None:
            return None
        v = fn(end)
        return Aggregate(count=1, avg=v, min=v, max=v, p50=v, p90=v, p95=v, p99=v, latest=v, first=end - seconds,
                         last=end)


@dataclass
class Pods:
    metas: list[PodMeta]

    def pods(self) -> Sequence[PodMeta]:
        return self.metas


def pod(uid: str, qos: str, priority: int, cpu: int, memory: int, created: float) -> PodMeta:
    container = Container("main", "", requests=Resources(cpu_milli=cpu, memory_bytes=memory))
    kube_qos = KubeQoS.BESTEFFORT if qos == "BE" else KubeQoS.BURSTABLE
    return PodMeta(Pod(uid=uid, name=uid, namespace="default", labels={"koordinator.sh/qosClass": qos},
                       annotations={}, kube_qos=kube_qos, phase="Running", priority=priority,
                       containers=(container,), creation_timestamp=format_time(created)),
                   f"kubepods/pod{uid}", ())


# ---------------------------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Case:
    name: str
    rounds: int
    web: Callable[[int], tuple[float, float]]
    """Round -> (cores, bytes) of the prod pod "web"."""
    api: Callable[[int], tuple[float, float]]
    """Round -> usage of the prod pod "api"."""
    api_young: bool = False
    """"api" was created an hour before the report (cold start)."""
    step: float = MINUTE
    """Seconds between training rounds."""


CASES = [
    Case("steady", 30, lambda i: (2.0 + 0.1 * (i % 5), 3 * G + (i % 7) * 64 * 2**20),
         lambda i: (1.0, 2 * G)),
    Case("a burst late in the history weighs more", 40,
         lambda i: (7.5 if i > 34 else 1.5, 5 * G if i > 36 else 2 * G), lambda i: (0.4 + 0.05 * (i % 3), 1 * G)),
    Case("a young pod reclaims nothing", 20, lambda i: (3.0, 4 * G), lambda i: (0.5, G // 2), api_young=True),
    # Two days, hourly: the first 7 hours' CPU burst is 15 % of the samples (above the 5 % of p95) but, decayed with
    # a 12 h half-life, weighs 3.3 % (it would weigh 7.5 % with 24 h): too light to set the p95.
    Case("an old burst has decayed", 48, lambda i: (9.0 if i < 7 else 2.0, 9 * G if i < 7 else 3 * G),
         lambda i: (1.0, 2 * G), step=3600.0),
]

ALLOCATABLE = Pair(30_000, 60 * G)
WEB_REQUEST = (8_000, 12 * G)
API_REQUEST = (4_000, 6 * G)
BATCH_USAGE = (3.0, 5 * G)
SYS_USAGE = (1.5, 3 * G)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_prod_reclaimable_equals_upstream_predictor(case: Case, tmp_path: Path) -> None:
    times = [START + i * case.step for i in range(case.rounds)]
    report_at = times[-1]
    old = report_at - 3 * 86400
    web = pod("web", "LS", 9500, *WEB_REQUEST, created=old)
    api = pod("api", "LS", 9500, *API_REQUEST, created=report_at - 3600 if case.api_young else old)
    batch = pod("spark", "BE", 5500, 2_000, 2 * G, created=old)

    def at(fn: Callable[[int], tuple[float, float]], k: int) -> Callable[[float], float]:
        return lambda t: fn(round((t - START) / case.step))[k]

    def node(k: int) -> Callable[[float], float]:
        return lambda t: case.web(round((t - START) / case.step))[k] + case.api(round((t - START) / case.step))[k] \
            + BATCH_USAGE[k] + SYS_USAGE[k]

    series: dict[tuple[str, Labels], Callable[[float], float]] = {
        (names.NODE_CPU_USAGE, labels_of()): node(0), (names.NODE_MEMORY_USAGE, labels_of()): node(1),
        (names.SYSTEM_CPU_USAGE, labels_of()): lambda t: SYS_USAGE[0],
        (names.SYSTEM_MEMORY_USAGE, labels_of()): lambda t: SYS_USAGE[1],
        (names.POD_CPU_USAGE, labels_of(pod="web")): at(case.web, 0),
        (names.POD_MEMORY_USAGE, labels_of(pod="web")): at(case.web, 1),
        (names.POD_CPU_USAGE, labels_of(pod="api")): at(case.api, 0),
        (names.POD_MEMORY_USAGE, labels_of(pod="api")): at(case.api, 1),
        (names.POD_CPU_USAGE, labels_of(pod="spark")): lambda t: BATCH_USAGE[0],
        (names.POD_MEMORY_USAGE, labels_of(pod="spark")): lambda t: BATCH_USAGE[1],
    }
    cache = ScriptedCache(series)
    informer = Pods([web, api, batch])
    server = PeakPredictServer(cache, informer, tmp_path / "ckpt")
    for when in times:
        server.run_once(when)
    status = build_node_metric(cache, informer, NodeMetricCollectPolicy(), report_at,
                               factory(server, lambda: ALLOCATABLE))

    # --- the derivation -------------------------------------------------------------------------------------
    web_hist = [(t, case.web(i)) for i, t in enumerate(times)]
    api_hist = [(t, case.api(i)) for i, t in enumerate(times)]
    prod_hist = [(t, (case.web(i)[0] + case.api(i)[0], case.web(i)[1] + case.api(i)[1])) for i, t in enumerate(times)]
    # sys = node - all pods, summed in list order as upstream's NodeItemsUsage does.
    sys_hist = []
    for i, t in enumerate(times):
        node_usage = (node(0)(t), node(1)(t))
        pods_usage = [(case.web(i)[k] + case.api(i)[k]) + BATCH_USAGE[k] for k in (0, 1)]
        sys_hist.append((t, (max(node_usage[0] - pods_usage[0], 0.0), max(node_usage[1] - pods_usage[1], 0.0))))

    def peak(hist: list[tuple[float, tuple[float, float]]]) -> tuple[int, int]:
        return (cpu_milli([(t, v[0]) for t, v in hist], 0.95), memory_bytes([(t, v[1]) for t, v in hist], 0.98))

    margin = 110 / 100
    reclaimable = [0, 0]
    unreclaimable = [0, 0]
    unpredicted = [0, 0]
    for hist, request, young in ((web_hist, WEB_REQUEST, False), (api_hist, API_REQUEST, case.api_young)):
        if young:
            unpredicted = [unpredicted[k] + request[k] for k in (0, 1)]
            continue
        p = peak(hist)
        for k in (0, 1):
            scaled = int(float(p[k]) * margin)
            unreclaimable[k] += scaled
            reclaimable[k] += max(request[k] - scaled, 0)
    alloc = (ALLOCATABLE.cpu_milli, ALLOCATABLE.memory_bytes)
    by_pod = [min(max(alloc[k] - unreclaimable[k], 0), reclaimable[k]) for k in (0, 1)]
    # No pod is without a class: the "" model takes zero samples, and its p95 is the end of bucket 0 (25m, 5 MiB).
    none_peak = (cpu_milli([(t, 0.0) for t in times], 0.95), memory_bytes([(t, 0.0) for t in times], 0.98))
    assert none_peak == (25, 5 << 20)
    class_peak = [peak(sys_hist)[k] + peak(prod_hist)[k] + none_peak[k] for k in (0, 1)]
    class_unreclaimable = [int(float(v) * margin) for v in class_peak]
    prod_request = [WEB_REQUEST[k] + API_REQUEST[k] for k in (0, 1)]
    by_class = [min(max(alloc[k] - class_unreclaimable[k], 0), max(prod_request[k] - class_unreclaimable[k], 0))
                for k in (0, 1)]
    expected = (min(by_pod[0], by_class[0]), min(by_pod[1], by_class[1]))

    assert status.prod_reclaimable_metric is not None
    got = status.prod_reclaimable_metric.resource
    assert (got.cpu_milli, got.memory_bytes) == expected
    assert status.to_json()["prodReclaimableMetric"]["resource"]["resources"]["cpu"]
    if case.api_young:
        assert expected[0] <= WEB_REQUEST[0], "only web's request is reclaimable"

    expected_peak = tuple(max(unreclaimable[k] + unpredicted[k], class_unreclaimable[k]) for k in (0, 1))
    assert status.prod_peak_metric is not None
    peak_got = status.prod_peak_metric.resource
    assert (peak_got.cpu_milli, peak_got.memory_bytes) == expected_peak
    assert NodeMetricStatus.from_json(status.to_json()) == status  # the wire form carries both


def test_without_allocatable_the_metric_is_empty(tmp_path: Path) -> None:
    cache = ScriptedCache({})
    informer = Pods([])
    server = PeakPredictServer(cache, informer, tmp_path / "ckpt")
    server.run_once(START)
    status = build_node_metric(cache, informer, NodeMetricCollectPolicy(), START, factory(server, lambda: None))
    assert status.prod_reclaimable_metric is not None
    assert status.prod_reclaimable_metric.to_json() == {"resource": {}}
    assert status.prod_peak_metric is not None, "upstream's peak needs no allocatable"


def test_without_a_factory_the_metric_is_left_out() -> None:
    status = build_node_metric(ScriptedCache({}), Pods([]), NodeMetricCollectPolicy(), START)
    assert "prodReclaimableMetric" not in status.to_json() and "prodPeakMetric" not in status.to_json()
