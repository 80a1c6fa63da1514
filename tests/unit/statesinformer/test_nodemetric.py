"""NodeMetric builder, local sink and runner: window averages and percentiles on a scripted series,
podsMetric priority/QoS, atomic file writes, a bad state dir, and the report schedule."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import LABEL_PRIORITY_CLASS, LABEL_QOS
from koordlet.apis.nodemetric import (
    MemoryCollectPolicy,
    NodeMetric,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    ResourceMap,
)
from koordlet.apis.pod import Container, Pod
from koordlet.component import Component
from koordlet.metriccache import CacheSettings, MetricCache, labels_of, names
from koordlet.metriccache.aggregate import Aggregate
from koordlet.metriccache.cache import Labels
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.nodemetric import (
    KV_KEY,
    LocalNodeMetricSink,
    NodeMetricRunner,
    NodeMetricWriteError,
    build_node_metric,
    next_slot,
)
from koordlet.system.kubepaths import KubeQoS
from tests.fixtures.failures import ComponentFailures

NOW = 1_748_144_198.0
MIB = 1024 * 1024


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Pods:
    def __init__(self, pods: Sequence[PodMeta] = ()) -> None:
        self.list = list(pods)

    def pods(self) -> Sequence[PodMeta]:
        return self.list


def meta(uid: str, name: str, *, kube_qos: KubeQoS | None = KubeQoS.BURSTABLE, priority: int | None = None,
         labels: dict[str, str] | None = None) -> PodMeta:
    pod = Pod(uid=uid, name=name, namespace="default", labels=labels or {}, annotations={}, kube_qos=kube_qos,
              phase="Running", priority=priority, containers=(Container("main", f"containerd://{uid}-c"),))
    return PodMeta(pod=pod, cgroup_dir=f"kubepods/pod{uid}",
                   containers=(ContainerMeta("main", f"{uid}-c", f"kubepods/pod{uid}/{uid}-c"),))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> MetricCache:
    settings = CacheSettings(path=tmp_path / "metrics.db", interval_seconds=1.0, default_window_seconds=1800.0)
    return MetricCache(settings, clock)


def script_node(cache: MetricCache) -> None:
    """100 node samples 3 s apart ending at NOW: cpu i/8 cores and i MiB for i = 1..100 (exact in binary),
    plus one outlier 400 s back (100 cores, 1000 MiB) that only the 10- and 30-minute windows see.
    System usage is a flat 0.5 cores and 1 GiB at the same instants."""
    node: Labels = labels_of()
    cache.append(names.NODE_CPU_USAGE, node, NOW - 400, 100.0)
    cache.append(names.NODE_MEMORY_USAGE, node, NOW - 400, 1000.0 * MIB)
    for i in range(1, 101):
        t = NOW - 297 + 3 * (i - 1)
        cache.append(names.NODE_CPU_USAGE, node, t, i / 8)
        cache.append(names.NODE_MEMORY_USAGE, node, t, float(i * MIB))
        cache.append(names.SYSTEM_CPU_USAGE, node, t, 0.5)
        cache.append(names.SYSTEM_MEMORY_USAGE, node, t, float(1024 * MIB))


def script_pod(cache: MetricCache, uid: str, cpu: float | None, memory: float | None, *, start: float = NOW - 60,
               end: float = NOW) -> None:
    t = start
    while t <= end:
        if cpu is not None:
            cache.append(names.POD_CPU_USAGE, labels_of(pod=uid), t, cpu)
        if memory is not None:
            cache.append(names.POD_MEMORY_USAGE, labels_of(pod=uid), t, memory)
        t += 10


def rm(cpu: str, memory: str) -> dict[str, Any]:
    return {"resources": {"cpu": cpu, "memory": memory}}


COLD: dict[str, Any] = {"avg": {}, "p50": {}, "p90": {}, "p95": {}, "p99": {}}
FIVE_MINUTES = {
    # avg of i/8 is 6.3125 cores -> int64(6312.5) = 6312m; nearest-rank p50 = 50/8, p90 = 90/8 ...
    "avg": rm("6312m", "51712Ki"),  # 50.5 MiB
    "p50": rm("6250m", "50Mi"),
    "p90": rm("11250m", "90Mi"),
    "p95": rm("11875m", "95Mi"),
    "p99": rm("12375m", "99Mi"),
}
TEN_MINUTES = {
    # 101 samples with the outlier: avg (631.25 + 100) / 101 cores, (5050 + 1000) MiB / 101;
    # ranks ceil(p * 101) = 51, 91, 96, 100 of the sorted values.
    "avg": rm("7240m", "62810740"),
    "p50": rm("6375m", "51Mi"),
    "p90": rm("11375m", "91Mi"),
    "p95": rm("12", "96Mi"),
    "p99": rm("12500m", "100Mi"),
}
SYSTEM = {"avg": rm("500m", "1Gi"), "p50": rm("500m", "1Gi"), "p90": rm("500m", "1Gi"), "p95": rm("500m", "1Gi"),
          "p99": rm("500m", "1Gi")}


def test_status_from_scripted_series(cache: MetricCache) -> None:
    script_node(cache)
    ls = meta("a", "ls-pod", labels={LABEL_QOS: "LS"})
    be = meta("b", "be-pod", kube_qos=KubeQoS.BESTEFFORT)
    mid = meta("c", "mid-pod", kube_qos=KubeQoS.GUARANTEED, priority=7100)
    labelled = meta("d", "labelled-batch", labels={LABEL_PRIORITY_CLASS: "koord-batch", LABEL_QOS: "LSR"})
    no_samples = meta("e", "just-started")
    cpu_only = meta("f", "no-memory-yet")
    gone_quiet = meta("g", "samples-too-old")
    script_pod(cache, "a", 0.25, 100.0 * MIB)
    script_pod(cache, "b", 0.5, 200.0 * MIB)
    script_pod(cache, "c", 1.5, 1.5 * 1024 * MIB)
    script_pod(cache, "d", 0.001, 1000.0)
    script_pod(cache, "f", 0.1, None)
    script_pod(cache, "g", 0.1, 1.0 * MIB, start=NOW - 900, end=NOW - 400)

    status = build_node_metric(cache, Pods([ls, be, mid, labelled, no_samples, cpu_only, gone_quiet]),
                               NodeMetricCollectPolicy(), NOW)

    assert status.to_json() == {
        "updateTime": "2025-05-25T03:36:38Z",
        "nodeMetric": {
            "nodeUsage": FIVE_MINUTES["avg"],  # the 300 s average, not the latest sample
            "aggregatedNodeUsages": [
                {"usage": FIVE_MINUTES, "duration": "5m0s"},
                {"usage": TEN_MINUTES, "duration": "10m0s"},
                {"usage": COLD, "duration": "30m0s"},  # 400 s of samples < half of 30 minutes
            ],
            "systemUsage": rm("500m", "1Gi"),
            "aggregatedSystemUsages": [
                {"usage": SYSTEM, "duration": "5m0s"},
                {"usage": COLD, "duration": "10m0s"},  # system samples span 297 s < 300 s
                {"usage": COLD, "duration": "30m0s"},
            ],
        },
        "podsMetric": [
            {"name": "ls-pod", "namespace": "default", "podUsage": rm("250m", "100Mi"), "priority": "koord-prod",
             "qos": "LS"},
            {"name": "be-pod", "namespace": "default", "podUsage": rm("500m", "200Mi"), "priority": "koord-batch",
             "qos": "BE"},
            {"name": "mid-pod", "namespace": "default", "podUsage": rm("1500m", "1536Mi"), "priority": "koord-mid",
             "qos": "LSR"},
            {"name": "labelled-batch", "namespace": "default", "podUsage": rm("1m", "1k"),
             "priority": "koord-batch", "qos": "LSR"},
        ],
    }


def test_aggregate_duration_sets_the_average_window(cache: MetricCache) -> None:
    script_node(cache)
    status = build_node_metric(cache, Pods(), NodeMetricCollectPolicy(aggregate_duration_seconds=600,
                                                                      node_aggregate_durations=()), NOW)
    assert status.node_metric is not None
    assert status.node_metric.to_json()["nodeUsage"] == TEN_MINUTES["avg"]
    assert "aggregatedNodeUsages" not in status.node_metric.to_json()
    assert status.pods_metric == ()


def test_no_samples_gives_empty_maps(cache: MetricCache) -> None:
    status = build_node_metric(cache, Pods([meta("a", "a")]), NodeMetricCollectPolicy(), NOW)
    assert status.to_json() == {
        "updateTime": "2025-05-25T03:36:38Z",
        "nodeMetric": {
            "nodeUsage": {},
            "aggregatedNodeUsages": [{"usage": COLD, "duration": d} for d in ("5m0s", "10m0s", "30m0s")],
            "systemUsage": {},
            "aggregatedSystemUsages": [{"usage": COLD, "duration": d} for d in ("5m0s", "10m0s", "30m0s")],
        },
    }


@pytest.mark.parametrize("policy", [MemoryCollectPolicy.WITHOUT_PAGE_CACHE, MemoryCollectPolicy.WITH_HOT_PAGE_CACHE])
def test_memory_policies_without_their_series_use_usage_without_page_cache(cache: MetricCache,
                                                                          policy: MemoryCollectPolicy) -> None:
    """usageWithHotPageCache needs kidled (ColdPageCollector, not implemented): degraded as upstream does."""
    script_node(cache)
    for t in (NOW - 10, NOW):  # a with-page-cache series these policies must not read
        cache.append(names.NODE_MEMORY_WITH_PAGE_CACHE, labels_of(), t, 7000.0 * MIB)
    status = build_node_metric(cache, Pods(), NodeMetricCollectPolicy(node_memory_collect_policy=policy), NOW)
    assert status.node_metric is not None
    assert status.node_metric.to_json()["nodeUsage"] == FIVE_MINUTES["avg"]


def test_usage_with_page_cache_reports_its_own_series(cache: MetricCache) -> None:
    """usageWithPageCache: node memory from MemTotal - MemFree samples, pod memory from anon + file LRU samples
    (upstream collectNodeMetric / collectPodMetric query the *WithPageCache metrics); CPU is unchanged."""
    script_node(cache)
    for i in range(1, 101):  # i + 1000 MiB at the node samples' instants: avg 1050.5 MiB
        cache.append(names.NODE_MEMORY_WITH_PAGE_CACHE, labels_of(), NOW - 297 + 3 * (i - 1), float((i + 1000) * MIB))
    script_pod(cache, "a", 0.25, 100.0 * MIB)
    for t in range(int(NOW) - 60, int(NOW) + 1, 10):
        cache.append(names.POD_MEMORY_WITH_PAGE_CACHE, labels_of(pod="a"), float(t), 900.0 * MIB)
    policy = NodeMetricCollectPolicy(node_memory_collect_policy=MemoryCollectPolicy.WITH_PAGE_CACHE)
    status = build_node_metric(cache, Pods([meta("a", "ls-pod")]), policy, NOW).to_json()
    assert status["nodeMetric"]["nodeUsage"] == rm("6312m", f"{(1050 * MIB + MIB // 2) // 1024}Ki")
    assert [p["podUsage"] for p in status["podsMetric"]] == [rm("250m", "900Mi")]


# ------------------------------------------------------------------------------------------- local sink


class KV:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def kv_put(self, key: str, value: Any) -> None:
        self.data[key] = json.loads(json.dumps(value))  # what a store that serialises would keep

    def kv_get(self, key: str) -> Any | None:
        return self.data.get(key)


def status_at(t: float) -> NodeMetricStatus:
    return NodeMetricStatus(update_time=t, node_metric=NodeMetricInfo(node_usage=ResourceMap(138, 1815637738)))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "nodemetric.json")


def test_sink_writes_file_and_kv(tmp_path: Path) -> None:
    kv = KV()
    state = tmp_path / "state"  # created on first report
    sink = LocalNodeMetricSink(kv, state, "node-1")
    assert sink.latest() is None
    sink.report(status_at(NOW))
    sink.report(status_at(NOW + 60))

    on_disk = json.loads(sink.path.read_text())
    assert on_disk == kv.data[KV_KEY]
    assert on_disk["metadata"] == {"name": "node-1"} and on_disk["status"]["updateTime"] == "2025-05-25T03:37:38Z"
    assert NodeMetric.from_json(on_disk).status == status_at(NOW + 60)
    assert sink.latest() == NodeMetric(name="node-1", status=status_at(NOW + 60))
    assert stat.S_IMODE(sink.path.stat().st_mode) == 0o644
    assert leftovers(state) == []


def test_failed_write_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv = KV()
    sink = LocalNodeMetricSink(kv, tmp_path, "node-1")
    sink.report(status_at(NOW))
    before = sink.path.read_bytes()

    def no_space(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(NodeMetricWriteError, match=f"cannot write NodeMetric to {sink.path}: No space left"):
        sink.report(status_at(NOW + 60))
    assert sink.path.read_bytes() == before  # readers still see the previous complete report
    assert leftovers(tmp_path) == []  # and no temporary file is left behind
    assert kv.data[KV_KEY]["status"]["updateTime"] == "2025-05-25T03:37:38Z"  # the KV copy is current


def test_bad_state_dir_is_a_clear_error_and_recoverable(tmp_path: Path) -> None:
    kv = KV()
    state = tmp_path / "state"
    state.write_text("not a directory\n")
    sink = LocalNodeMetricSink(kv, state, "node-1")
    with pytest.raises(NodeMetricWriteError) as excinfo:
        sink.report(status_at(NOW))
    assert str(state / "nodemetric.json") in str(excinfo.value)
    assert isinstance(excinfo.value, OSError)
    assert kv.data[KV_KEY]["status"]["updateTime"] == "2025-05-25T03:36:38Z"

    state.unlink()  # the operator fixes the state dir; the same sink carries on
    sink.report(status_at(NOW + 60))
    assert json.loads(sink.path.read_text())["status"]["updateTime"] == "2025-05-25T03:37:38Z"


# ------------------------------------------------------------------------------------------- runner


class Recorder:
    """A reporter that records statuses, optionally failing on chosen calls, and lets a test wait."""

    def __init__(self, fail_on: Sequence[int] = (), error: BaseException | None = None) -> None:
        self.statuses: list[NodeMetricStatus] = []
        self.calls = 0
        self._fail_on = set(fail_on)
        self._error = error
        self._cond = threading.Condition()

    def report(self, status: NodeMetricStatus) -> None:
        with self._cond:
            self.calls += 1
            call = self.calls
            self._cond.notify_all()
            if call in self._fail_on:
                raise self._error if self._error is not None else RuntimeError(f"sink down (call {call})")
            self.statuses.append(status)
            self._cond.notify_all()

    def wait_calls(self, count: int, timeout_seconds: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= count, timeout_seconds)


class FailingCache:
    """A cache whose queries raise; counts them so a test can wait for rounds."""

    def __init__(self) -> None:
        self.queries = 0
        self._cond = threading.Condition()

    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        with self._cond:
            self.queries += 1
            self._cond.notify_all()
        raise RuntimeError("cache is broken")

    def wait_queries(self, count: int, timeout_seconds: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.queries >= count, timeout_seconds)


def fast_policy(interval: float = 0.02) -> NodeMetricCollectPolicy:
    return NodeMetricCollectPolicy(report_interval_seconds=interval)


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [(10.0, 12.0, 15.0),  # on time: the next slot of the grid
     (10.0, 14.9, 15.0),  # a slow round that still ends before the next slot
     (10.0, 27.0, 30.0),  # overran by three slots: 15, 20 and 25 are skipped, not run back to back
     (10.0, 15.0, 20.0)],  # ending exactly on a slot counts as having missed it
)
def test_next_slot_keeps_the_cadence(previous: float, now: float, expected: float) -> None:
    assert next_slot(previous, 5.0, now) == expected


def test_runner_reports_on_schedule(cache: MetricCache, clock: Clock, failures: ComponentFailures) -> None:
    script_node(cache)
    reporter = Recorder()
    runner = NodeMetricRunner(cache, Pods(), [reporter], fast_policy(), clock=clock)
    runner.start(failures.callback("nodemetric"))
    try:
        assert reporter.wait_calls(3), "no three reports within 5 s at a 20 ms interval"
    finally:
        runner.stop(5.0)
    assert runner.failures == 0
    assert runner.rounds >= 3
    assert all(s.update_time == NOW for s in reporter.statuses)
    assert reporter.statuses[0].node_metric is not None
    assert reporter.statuses[0].node_metric.to_json()["nodeUsage"] == FIVE_MINUTES["avg"]


def test_first_report_waits_one_interval_and_stop_is_prompt(cache: MetricCache, failures: ComponentFailures) -> None:
    reporter = Recorder()
    runner = NodeMetricRunner(cache, Pods(), [reporter], NodeMetricCollectPolicy(report_interval_seconds=3600))
    runner.start(failures.callback("nodemetric"))
    started = time.monotonic()
    runner.stop(5.0)
    assert time.monotonic() - started < 2.0, "stop waited for the report interval"
    assert reporter.calls == 0 and runner.rounds == 0


def test_report_now_runs_a_round_at_once_and_keeps_the_cadence(cache: MetricCache,
                                                               failures: ComponentFailures) -> None:
    reporter = Recorder()
    runner = NodeMetricRunner(cache, Pods(), [reporter], NodeMetricCollectPolicy(report_interval_seconds=3600))
    runner.start(failures.callback("nodemetric"))
    try:
        runner.report_now()  # a companion came back: it gets the node's figures without waiting an hour
        assert reporter.wait_calls(1), "report_now did not run a round"
        runner.report_now()
        assert reporter.wait_calls(2)
        assert not reporter.wait_calls(3, timeout_seconds=0.3), "a round ran without being due or asked for"
    finally:
        runner.stop(5.0)
    assert runner.rounds == 2


def test_failed_rounds_are_counted_not_fatal(cache: MetricCache, caplog: pytest.LogCaptureFixture,
                                             failures: ComponentFailures) -> None:
    reporter = Recorder(fail_on=[1, 2])
    runner = NodeMetricRunner(cache, Pods(), [reporter], fast_policy())
    runner.start(failures.callback("nodemetric"))
    try:
        assert reporter.wait_calls(4)
    finally:
        runner.stop(5.0)
    assert runner.failures == 2
    assert len(reporter.statuses) >= 2
    assert any(r.getMessage() == "NodeMetric report failed" for r in caplog.records)


def test_a_broken_build_is_counted(clock: Clock, failures: ComponentFailures) -> None:
    broken = FailingCache()
    reporter = Recorder()
    runner = NodeMetricRunner(broken, Pods(), [reporter], fast_policy(), clock=clock)
    with pytest.raises(RuntimeError, match="cache is broken"):
        runner.run_once()
    runner.start(failures.callback("nodemetric"))
    try:
        assert broken.wait_queries(3), "the runner stopped trying after a failed round"
    finally:
        runner.stop(5.0)
    assert runner.failures >= 2 and runner.failures == runner.rounds
    assert reporter.calls == 0


def test_every_reporter_gets_the_status_even_after_one_fails(cache: MetricCache, clock: Clock) -> None:
    broken, healthy = Recorder(fail_on=[1]), Recorder()
    runner = NodeMetricRunner(cache, Pods(), [broken, healthy], clock=clock)
    with pytest.raises(RuntimeError, match="sink down"):
        runner.run_once()
    assert len(healthy.statuses) == 1
    status = runner.run_once()
    assert broken.statuses == [status] and healthy.statuses[-1] == status


def test_recorder_sees_each_built_status(cache: MetricCache, clock: Clock) -> None:
    seen: list[NodeMetricStatus] = []

    class Seen:
        def record(self, status: NodeMetricStatus) -> None:
            seen.append(status)

    runner = NodeMetricRunner(cache, Pods(), [], clock=clock, recorder=Seen())
    assert seen == [runner.run_once()]


def test_an_escaping_base_exception_reports_the_failure(cache: MetricCache, failures: ComponentFailures) -> None:
    class Fatal(BaseException):
        pass

    reporter = Recorder(fail_on=[1], error=Fatal("out of memory"))
    runner = NodeMetricRunner(cache, Pods(), [reporter], fast_policy())
    runner.start(failures.callback("nodemetric"))
    try:
        error = failures.wait_for("nodemetric")
    finally:
        runner.stop(5.0)
    assert isinstance(error, Fatal)


def test_policy_change_takes_effect_next_round(cache: MetricCache, failures: ComponentFailures) -> None:
    reporter = Recorder()
    runner = NodeMetricRunner(cache, Pods(), [reporter], fast_policy())
    runner.start(failures.callback("nodemetric"))
    try:
        assert reporter.wait_calls(1)
        slow = NodeMetricCollectPolicy(report_interval_seconds=3600)
        runner.set_policy(slow)
        assert runner.policy is slow
        # At most the round already scheduled on the 20 ms interval runs; at that pace a third would come
        # within 40 ms, so none in half a second means the hour-long interval is in force.
        assert not reporter.wait_calls(3, timeout_seconds=0.5)
    finally:
        runner.stop(5.0)


def test_a_shorter_interval_brings_the_next_report_forward(cache: MetricCache, failures: ComponentFailures) -> None:
    # The companion's policy arrives while the first report is an hour away: it is due within the new
    # interval, not after the hour (a node would otherwise report nothing for the default 60 s).
    reporter = Recorder()
    runner = NodeMetricRunner(cache, Pods(), [reporter], NodeMetricCollectPolicy(report_interval_seconds=3600))
    runner.start(failures.callback("nodemetric"))
    try:
        runner.set_policy(fast_policy())
        assert reporter.wait_calls(2), "the 20 ms interval did not replace the hour-long wait"
    finally:
        runner.stop(5.0)


def test_runner_is_a_component_that_starts_once(cache: MetricCache, failures: ComponentFailures) -> None:
    runner = NodeMetricRunner(cache, Pods(), [])
    component: Component = runner  # checked by mypy: the daemon can own it
    assert component.name == "nodemetric"
    runner.start(failures.callback("nodemetric"))
    try:
        with pytest.raises(RuntimeError, match="already started"):
            runner.start(failures.callback("nodemetric"))
    finally:
        runner.stop(5.0)
    runner.start(failures.callback("nodemetric"))  # a stopped runner may start again
    runner.stop(5.0)


def test_sink_behind_the_runner_survives_a_bad_state_dir(cache: MetricCache, tmp_path: Path, clock: Clock) -> None:
    state = tmp_path / "state"
    state.write_text("")
    sink = LocalNodeMetricSink(KV(), state, "node-1")
    runner = NodeMetricRunner(cache, Pods(), [sink], clock=clock)
    with pytest.raises(NodeMetricWriteError):
        runner.run_once()
    os.unlink(state)
    runner.run_once()
    assert sink.path.exists()
