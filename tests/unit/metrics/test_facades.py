"""Facades over counters, histograms and recorded gauges: names, labels, buckets and units as upstream."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.metrics import KoordletMetrics, KubeletFailure
from koordlet.metrics.buckets import exponential_buckets
from koordlet.statesinformer.framework import PodMeta

NODE = "node-1"


class NoPods:
    def pods(self) -> list[PodMeta]:
        return []


@pytest.fixture
def metrics(tmp_path: Path) -> KoordletMetrics:
    cache = MetricCache(CacheSettings(path=tmp_path / "m.db"), lambda: 0.0)
    return KoordletMetrics(node_name=NODE, cache=cache, pods=NoPods(), process_metrics=False)


def value(metrics: KoordletMetrics, name: str, **labels: str) -> float | None:
    return metrics.internal.get_sample_value(name, labels)


def family_type(metrics: KoordletMetrics, name: str) -> tuple[str, str]:
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.internal).decode())}
    return families[name].type, families[name].documentation


def test_start_time(metrics: KoordletMetrics) -> None:
    metrics.lifecycle.record_start(1_700_000_000.0)
    assert value(metrics, "koordlet_start_time", node=NODE) == 1_700_000_000.0
    assert family_type(metrics, "koordlet_start_time") == ("gauge", "the start time of koordlet")


def test_kubelet_request_duration_histogram(metrics: KoordletMetrics) -> None:
    metrics.kubelet.observe("/pods/", 200, 0.012)
    metrics.kubelet.observe("/pods/", 200, 0.5)
    metrics.kubelet.observe("/pods/", 500, 0.003)
    name = "koordlet_kubelet_request_duration_seconds"
    assert family_type(metrics, name) == ("histogram", "kubelet http request duration in seconds")
    ok = {"verb": "get", "path": "/pods/", "code": "200"}
    assert value(metrics, name + "_count", **ok) == 2
    assert value(metrics, name + "_sum", **ok) == pytest.approx(0.512)
    # Koordinator's buckets: ExponentialBuckets(0.001, 4, 7) -> 1 ms .. 4.096 s.
    assert value(metrics, name + "_bucket", **ok, le="0.016") == 1
    assert value(metrics, name + "_bucket", **ok, le="0.256") == 1
    assert value(metrics, name + "_bucket", **ok, le="1.024") == 2
    assert value(metrics, name + "_bucket", **ok, le="4.096") == 2
    assert value(metrics, name + "_count", verb="get", path="/pods/", code="500") == 1
    les = {s.labels["le"] for f in text_string_to_metric_families(generate_latest(metrics.internal).decode())
           if f.name == name for s in f.samples if "le" in s.labels}
    assert les == {"0.001", "0.004", "0.016", "0.064", "0.256", "1.024", "4.096", "+Inf"}


def test_kubelet_failures_are_counted_by_reason(metrics: KoordletMetrics) -> None:
    metrics.kubelet.count_failure("/pods/", KubeletFailure.TRANSPORT)
    metrics.kubelet.count_failure("/pods/", KubeletFailure.TRANSPORT)
    metrics.kubelet.count_failure("/pods/", KubeletFailure.DECODE)
    name = "koordlet_kubelet_request_failures_total"
    assert value(metrics, name, path="/pods/", reason="transport") == 2
    assert value(metrics, name, path="/pods/", reason="decode") == 1
    assert value(metrics, name, path="/pods/", reason="status") is None


def test_resource_update_duration_in_milliseconds(metrics: KoordletMetrics) -> None:
    metrics.executor.observe("cgroupFile", True, 0.00002)
    metrics.executor.observe("cgroupFile", False, 0.5)
    name = "koordlet_resource_update_duration_milliseconds"
    assert value(metrics, name + "_sum", type="cgroupFile", status="success") == pytest.approx(0.02)
    assert value(metrics, name + "_bucket", type="cgroupFile", status="success", le="0.04") == 1
    assert value(metrics, name + "_count", type="cgroupFile", status="failed") == 1
    assert value(metrics, name + "_bucket", type="cgroupFile", status="failed", le="163.84") == 0


def test_runtime_hook_durations(metrics: KoordletMetrics) -> None:
    metrics.runtime_hooks.observe_hook("groupidentity", "PreRunPodSandbox", True, 0.001)
    metrics.runtime_hooks.observe_reconciler("pod", "cpu.cfs_quota_us", False, 0.002)
    assert value(metrics, "koordlet_runtime_hook_invoked_duration_milliseconds_sum", node=NODE,
                 hook="groupidentity", stage="PreRunPodSandbox", status="succeeded") == pytest.approx(1.0)
    assert value(metrics, "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds_count", node=NODE,
                 level="pod", resource_type="cpu.cfs_quota_us", status="failed") == 1


def test_runtime_hook_durations_add_up_per_label_set(metrics: KoordletMetrics) -> None:
    # The labelled children are kept per label tuple: repeated and mixed outcomes land in their own series.
    for ok in (True, False, True):
        metrics.runtime_hooks.observe_hook("groupidentity", "PreRunPodSandbox", ok, 0.001)
        metrics.runtime_hooks.observe_reconciler("pod", "cpu.cfs_quota_us", ok, 0.002)
    name = "koordlet_runtime_hook_invoked_duration_milliseconds_count"
    assert value(metrics, name, node=NODE, hook="groupidentity", stage="PreRunPodSandbox", status="succeeded") == 2
    assert value(metrics, name, node=NODE, hook="groupidentity", stage="PreRunPodSandbox", status="failed") == 1
    name = "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds_sum"
    assert value(metrics, name, node=NODE, level="pod", resource_type="cpu.cfs_quota_us",
                 status="succeeded") == pytest.approx(4.0)


def test_node_metric_gauges_show_the_last_report(metrics: KoordletMetrics) -> None:
    assert value(metrics, "koordlet_node_metric_node_usage", node=NODE, resource="cpu", unit="core") is None
    metrics.node_metric.record(NodeMetricStatus(node_metric=NodeMetricInfo(
        node_usage=ResourceMap(1500, 2**30), system_usage=ResourceMap(250, 2**28))))
    assert value(metrics, "koordlet_node_metric_node_usage", node=NODE, resource="cpu", unit="core") == 1.5
    assert value(metrics, "koordlet_node_metric_node_usage", node=NODE, resource="memory", unit="byte") == 2**30
    assert value(metrics, "koordlet_node_metric_system_usage", node=NODE, resource="cpu", unit="core") == 0.25
    # A later report without a figure drops it, as Koordinator's reset-then-record does.
    metrics.node_metric.record(NodeMetricStatus(node_metric=NodeMetricInfo(node_usage=ResourceMap(cpu_milli=500))))
    assert value(metrics, "koordlet_node_metric_node_usage", node=NODE, resource="cpu", unit="core") == 0.5
    assert value(metrics, "koordlet_node_metric_node_usage", node=NODE, resource="memory", unit="byte") is None
    assert value(metrics, "koordlet_node_metric_system_usage", node=NODE, resource="cpu", unit="core") is None


def test_exponential_buckets() -> None:
    assert exponential_buckets(0.001, 4, 3) == (0.001, 0.004, 0.016)
    with pytest.raises(ValueError, match="factor > 1"):
        exponential_buckets(1, 1, 3)


def test_eviction_detail_series_expire_five_minutes_after_their_last_increment() -> None:
    from prometheus_client import CollectorRegistry

    from koordlet.metrics.qos import DETAIL_EXPIRE_SECONDS, POD_EVICTION, POD_EVICTION_DETAIL, QoSMetrics

    now = [1000.0]
    registry = CollectorRegistry()
    qos = QoSMetrics(registry, "node-1", clock=lambda: now[0])
    qos.pod_eviction("EvictPodByNodeMemoryUsage", "default", "be-1")
    now[0] += DETAIL_EXPIRE_SECONDS / 2
    qos.pod_eviction("EvictPodByNodeMemoryUsage", "default", "be-2")

    def pods() -> set[str]:
        return {s.labels["pod_name"] for f in text_string_to_metric_families(generate_latest(registry).decode())
                if f.name == POD_EVICTION_DETAIL for s in f.samples}

    assert pods() == {"be-1", "be-2"}
    now[0] += DETAIL_EXPIRE_SECONDS / 2 + 1
    qos.strategy_run("memoryevict", 0.001, True)
    assert pods() == {"be-2"}
    total = [s.value for f in text_string_to_metric_families(generate_latest(registry).decode())
             if f.name == POD_EVICTION for s in f.samples]
    assert total == [2.0], "the per-reason count keeps every eviction"
