"""The assembled companion without Kubernetes (a ConfigMap file) talking to a koordlet's real client."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.qosmanager.evictor import CompanionEvictionAPI, EvictionFailed
from koordlet.qosmanager.nodeslo import NodeSLOHolder
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink, CompanionNodeSLOSource
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.waiting import wait_until

TOKEN = "s3cret-token"


def configmap(percent: int, report_seconds: int = 60) -> str:
    threshold = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": percent}})
    colocation = json.dumps({"enable": True, "metricReportIntervalSeconds": report_seconds})
    return f"data:\n  resource-threshold-config: '{threshold}'\n  colocation-config: '{colocation}'\n"




def threshold(holder: NodeSLOHolder) -> int | None:
    spec = holder.current().spec.resource_used_threshold_with_be
    return None if spec is None else spec.cpu_suppress_threshold_percent


@pytest.fixture
def companion(tmp_path: Path) -> Iterator[tuple[Companion, Path]]:
    path = tmp_path / "slo-controller-config.yaml"
    path.write_text(configmap(60))
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", token=TOKEN,
                                          config_file=str(path)))
    instance.start()
    try:
        yield instance, path
    finally:
        instance.stop()


def test_a_config_file_edit_reaches_the_koordlet(companion: tuple[Companion, Path], tmp_path: Path,
                                                 failures: ComponentFailures) -> None:
    instance, path = companion
    holder = NodeSLOHolder()
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    source = CompanionNodeSLOSource(client, holder, tmp_path / "cache.json")
    source.start(failures.callback("companion-nodeslo"))
    try:
        wait_until("the first NodeSLO", lambda: threshold(holder) == 60)
        path.write_text(configmap(70))
        os.utime(path, (time.time() + 5, time.time() + 5))
        started = time.monotonic()
        wait_until("the edited NodeSLO", lambda: threshold(holder) == 70)
        elapsed = time.monotonic() - started
        print(f"file edit -> koordlet holder: {elapsed * 1000:.0f} ms (file poll {1.0:g} s + push)")
        path.write_text("data:\n  resource-threshold-config: '{\"clusterStrategy\": {\"enable\": 7}}'\n")
        os.utime(path, (time.time() + 10, time.time() + 10))
        wait_until("the refusal", lambda: "resource-threshold-config" in instance.controller.errors)
        assert threshold(holder) == 70, "a bad key keeps the last good NodeSLO on the node"
    finally:
        source.stop(5)


def test_reports_come_back_with_the_collect_policy(companion: tuple[Companion, Path]) -> None:
    instance, _ = companion
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    policies: list[Any] = []
    sink = CompanionNodeMetricSink(client, on_policy=policies.append)
    status = NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(cpu_milli=1500, memory_bytes=2 << 30)))
    sink.report(status)
    assert not sink.failing
    assert [p.report_interval_seconds for p in policies] == [60]
    view = instance.store.views(["node-1"])[0]
    assert view is not None, "the extender learned the node's usage"
    assert "node-1" in instance.controller.nodes


def test_the_nodeslo_watch_carries_the_collect_policy_before_any_report(
        companion: tuple[Companion, Path], tmp_path: Path, failures: ComponentFailures) -> None:
    instance, _ = companion
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    policies: list[Any] = []
    sink = CompanionNodeMetricSink(client, on_policy=policies.append)
    source = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "cache.json", on_policy=sink.offer_policy)
    source.start(failures.callback("companion-nodeslo"))
    try:
        wait_until("the collect policy from the watch", lambda: policies)
    finally:
        source.stop(5)
    assert sink.reports == 0 and [p.report_interval_seconds for p in policies] == [60]
    sink.report(NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(cpu_milli=1, memory_bytes=1))))
    assert len(policies) == 1, "the same policy in a report's reply is not applied twice"


def test_without_kubernetes_evictions_are_refused(companion: tuple[Companion, Path]) -> None:
    instance, _ = companion
    api = CompanionEvictionAPI(CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1"))
    with pytest.raises(EvictionFailed, match=r"UNIMPLEMENTED.*no Kubernetes"):
        api.evict("default", "web", "BECPUEvict", "test")
