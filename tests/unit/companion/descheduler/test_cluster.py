"""The round's snapshot: what is kept of nodes, pods and NodeMetrics, and bad objects skipped one by one."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from koordlet.companion.descheduler.cluster import CPU, MEMORY, build_snapshot
from koordlet.log import record_fields
from tests.unit.companion.descheduler.scenario import MIB, Scenario


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    """The ``extra`` fields of each captured record whose message is ``message``."""
    return [record_fields(r) for r in caplog.records if r.getMessage() == message]


def test_snapshot_holds_running_pods_usage_and_readiness(caplog: pytest.LogCaptureFixture) -> None:
    scenario = Scenario()
    scenario.node("n1")
    scenario.node("n2")
    scenario.pod("web", "n1", 500, 256)
    scenario.pod("done", "n1", 100, 64)
    nodes = [scenario.node_object(n) for n in scenario.nodes.values()]
    nodes[1]["status"]["conditions"][0]["status"] = "False"
    pods = [p.to_object() for p in scenario.pods.values()]
    pods[1]["status"]["phase"] = "Succeeded"
    bad = scenario.pods[("default", "web")].to_object()
    bad["metadata"]["name"] = "bad"
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    unbound = scenario.pods[("default", "web")].to_object()
    unbound["metadata"]["name"] = "elsewhere"
    unbound["spec"]["nodeName"] = "gone-node"
    metrics = [scenario.metric_object(n) for n in scenario.nodes.values()] + [["not", "an", "object"]]
    with caplog.at_level(logging.WARNING):
        snap = build_snapshot(nodes, [*pods, bad, unbound], metrics, scenario.metric_time)

    assert snap.nodes["n1"].ready and not snap.nodes["n2"].ready
    assert snap.nodes["n1"].allocatable == {"cpu": 16000, "memory": 64 * 1024 * MIB, "pods": 110}
    assert [p.name for p in snap.pods_by_node["n1"]] == ["web"]
    web = snap.pods_by_node["n1"][0]
    assert web.requests[CPU] == 500 and web.requests[MEMORY] == 256 * MIB
    assert web.owners and web.owners[0]["kind"] == "ReplicaSet"
    assert web.kube_qos == "Burstable" and web.koord_priority == "koord-prod"
    assert snap.system_usage["n1"] == {CPU: 400, MEMORY: 2048 * MIB}
    assert snap.usage["n1"] == {CPU: 400 + 500 + 100, MEMORY: (2048 + 256 + 64) * MIB}
    assert snap.node_pod_usage["n1"][("default", "web")] == {CPU: 500, MEMORY: 256 * MIB}
    assert snap.usage_if_fresh("n1", 180) is not None
    assert build_snapshot(nodes, [], metrics[:2], scenario.metric_time + 180).usage_if_fresh("n1", 180) is None
    assert logged(caplog, "descheduler: skipping a node") == []
    [bad_pod] = logged(caplog, "descheduler: skipping a pod")
    assert "Pod default/bad" in bad_pod["error"]
    [bad_metric] = logged(caplog, "descheduler: skipping a NodeMetric")
    assert "NodeMetric" in bad_metric["error"]
