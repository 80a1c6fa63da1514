"""LowNodeLoad over a scripted 100-node cluster in the fake apiserver, through the real client: one round of
the Descheduler lists nodes, pods and NodeMetrics, evicts through the Eviction API, and the test checks the
result against its own arithmetic.

Every node has 16 CPUs and 64 GiB; the thresholds are the seeds' (low cpu 20% / memory 30%, high cpu 50% /
memory 60%), so high is 8000m CPU.  A hot node runs 14000m: 400m system, six 1500m app pods (ReplicaSets in
namespaces team-0..3) and five pods that must never be evicted (DaemonSet, no owner, system-node-critical,
emptyDir, kube-system).  Shedding four app pods (6000m) brings it to exactly 8000m, which is no longer above
the threshold.  A cold node runs 1400m (room 6600m under high: four app pods); a middle node 4400m (27.5%: neither
low nor high)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml
from kubernetes import client

from koordlet.companion.descheduler.config import load_config
from koordlet.companion.descheduler.lownodeload import LowNodeLoad
from koordlet.companion.descheduler.runner import Descheduler, RoundReport
from koordlet.log import record_fields
from tests.fixtures.fakeapiserver import FakeApiServer
from tests.unit.companion.descheduler.scenario import MIB, Scenario, threshold

HIGH = {"cpu": 50.0, "memory": 60.0}
LOW = {"cpu": 20.0, "memory": 30.0}
APP_PODS_PER_HOT_NODE = 6
PROTECTED = ("ds", "bare", "critical", "scratch", "system")


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    """The ``extra`` fields of each captured record whose message is ``message``."""
    return [record_fields(r) for r in caplog.records if r.getMessage() == message]


def config_text(**top: Any) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "deschedulingInterval": "60s",
        "profiles": [{
            "name": "koord-descheduler",
            "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]},
                        "evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]},
                        "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]}},
            "pluginConfig": [{"name": "LowNodeLoad", "args": {
                "lowThresholds": LOW, "highThresholds": HIGH,
                "anomalyCondition": {"consecutiveAbnormalities": 1},
                "evictableNamespaces": {"exclude": ["kube-system", "koordinator-system"]},
            }}],
        }],
        **top,
    }
    return yaml.safe_dump(doc)


def build(hot: int, cold: int) -> Scenario:
    scenario = Scenario()
    for i in range(hot):
        name = f"hot-{i:02d}"
        scenario.node(name)
        for j in range(APP_PODS_PER_HOT_NODE):
            scenario.pod(f"{name}-app-{j}", name, 1500, 2048, namespace=f"team-{(i + j) % 4}",
                         labels={"app": "web"})
        scenario.pod(f"{name}-ds", name, 1200, 1024, namespace="monitoring", owner="DaemonSet")
        scenario.pod(f"{name}-bare", name, 1000, 512, namespace="team-0", owner=None)
        scenario.pod(f"{name}-critical", name, 800, 512, namespace="team-1", priority=2_000_001_000,
                     priority_class_name="system-node-critical")
        scenario.pod(f"{name}-scratch", name, 900, 512, namespace="team-2",
                     volumes=[{"name": "scratch", "emptyDir": {}}])
        scenario.pod(f"{name}-system", name, 700, 512, namespace="kube-system")
    for i in range(cold):
        name = f"cold-{i:02d}"
        scenario.node(name)
        for j in range(2):
            scenario.pod(f"{name}-app-{j}", name, 500, 1024, namespace="team-3")
    for i in range(100 - hot - cold):
        name = f"mid-{i:02d}"
        scenario.node(name)
        for j in range(4):
            scenario.pod(f"{name}-app-{j}", name, 1000, 4096, namespace="team-2")
    return scenario


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def one_round(server: FakeApiServer, api_client: client.ApiClient, scenario: Scenario, text: str,
              dry_run: bool | None = None) -> tuple[RoundReport, LowNodeLoad]:
    scenario.seed(server)
    descheduler = Descheduler(api_client, load_config(text), is_leader=lambda: True, dry_run=dry_run)
    report = descheduler.run_once()
    assert not report.errors and not report.skipped
    plugin = descheduler.plugins()[0]
    assert isinstance(plugin, LowNodeLoad)
    return report, plugin


def evicted_keys(server: FakeApiServer) -> list[tuple[str, str]]:
    accepted = [e for e in server.evictions if not e.get("blocked")]
    return [(e["namespace"], e["name"]) for e in accepted]


def assert_only_app_pods(keys: list[tuple[str, str]]) -> None:
    for namespace, name in keys:
        assert "-app-" in name and not name.endswith(PROTECTED), (namespace, name)
        assert namespace != "kube-system"


def assert_targets_within_high(scenario: Scenario, plugin: LowNodeLoad, evicted: list[tuple[str, str]]) -> None:
    """Every evicted pod was planned onto one node that was under the low thresholds, and each such node's usage
    plus what was planned onto it stays at or under its high thresholds."""
    placed = {p.pod.key: p for p in plugin.placements}
    assert sorted(placed) == sorted(evicted)
    arriving: dict[str, list[tuple[str, str]]] = {}
    for key, placement in placed.items():
        assert placement.source.startswith("hot-")
        assert placement.target.startswith("cold-"), placement
        arriving.setdefault(placement.target, []).append(key)
    for target, keys in arriving.items():
        cpu, memory = scenario.usage(target)
        cpu += sum(scenario.pods[k].cpu for k in keys)
        memory += sum(scenario.pods[k].memory for k in keys)
        cpu_high, memory_high = threshold(scenario.nodes[target], HIGH)
        assert cpu <= cpu_high and memory * MIB <= memory_high, (target, cpu, memory)


def test_hot_nodes_are_drained_below_high_onto_cold_nodes(fake_apiserver: FakeApiServer,
                                                          api: client.ApiClient) -> None:
    scenario = build(hot=8, cold=12)
    report, plugin = one_round(fake_apiserver, api, scenario, config_text(maxNoOfPodsToEvictPerNode=10))

    evicted = evicted_keys(fake_apiserver)
    assert sorted(evicted) == sorted(r.pod.key for r in report.evicted)
    assert_only_app_pods(evicted)
    gone = set(evicted)
    for name in scenario.nodes:
        if name.startswith("hot-"):
            cpu, memory = scenario.usage(name, gone)
            cpu_high, memory_high = threshold(scenario.nodes[name], HIGH)
            assert cpu <= cpu_high and memory * MIB <= memory_high, (name, cpu, memory)
            # Four pods bring it to the threshold exactly; the loop stops there, not after a fifth.
            assert len([k for k in gone if k[1].startswith(name)]) == 4
        else:
            assert not any(k[1].startswith(name + "-") for k in gone)
    assert_targets_within_high(scenario, plugin, evicted)
    # The Eviction API deleted the pods (terminating until their kubelet is done), the protected ones are all there.
    for namespace, name in evicted:
        assert fake_apiserver.deleting("pods", name, namespace)
    for spec in scenario.pods.values():
        if spec.name.endswith(PROTECTED):
            assert fake_apiserver.get("pods", spec.name, spec.namespace) is not None


def test_targets_never_planned_above_high_when_room_is_scarce(fake_apiserver: FakeApiServer,
                                                              api: client.ApiClient) -> None:
    """Two cold nodes have 13200m of room for ten hot nodes that want 6000m each: the plugin stops moving
    pods once the cold nodes are planned full, leaving most hot nodes hot."""
    scenario = build(hot=10, cold=2)
    _, plugin = one_round(fake_apiserver, api, scenario, config_text(maxNoOfPodsToEvictPerNode=10))

    evicted = evicted_keys(fake_apiserver)
    assert evicted and len(evicted) < 10 * 4
    assert_only_app_pods(evicted)
    assert_targets_within_high(scenario, plugin, evicted)
    room = sum(threshold(scenario.nodes[n], HIGH)[0] - scenario.usage(n)[0] for n in ("cold-00", "cold-01"))
    assert sum(scenario.pods[k].cpu for k in evicted) <= room
    still_hot = [n for n in scenario.nodes if n.startswith("hot-")
                 and scenario.usage(n, set(evicted))[0] > threshold(scenario.nodes[n], HIGH)[0]]
    assert len(still_hot) >= 8


def test_eviction_limits_per_node_namespace_and_round(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = build(hot=8, cold=12)
    one_round(fake_apiserver, api, scenario, config_text(maxNoOfPodsToEvictPerNode=2,
                                                         maxNoOfPodsToEvictPerNamespace=3,
                                                         maxNoOfPodsToEvictTotal=10))

    evicted = evicted_keys(fake_apiserver)
    assert_only_app_pods(evicted)
    per_node: dict[str, int] = {}
    per_namespace: dict[str, int] = {}
    for namespace, name in evicted:
        node = scenario.pods[(namespace, name)].node
        per_node[node] = per_node.get(node, 0) + 1
        per_namespace[namespace] = per_namespace.get(namespace, 0) + 1
    assert max(per_node.values()) <= 2
    assert max(per_namespace.values()) <= 3
    # Four namespaces of three: twelve allowed by namespace, the round's total caps it at ten.
    assert len(evicted) == 10


def test_dry_run_evicts_nothing_and_logs_what_it_would(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    scenario = build(hot=8, cold=12)
    with caplog.at_level(logging.INFO, logger="koordlet.companion.descheduler"):
        report, plugin = one_round(fake_apiserver, api, scenario, config_text(maxNoOfPodsToEvictPerNode=10),
                                   dry_run=True)

    assert fake_apiserver.evictions == []
    assert fake_apiserver.count("evict") == 0
    would = [r.pod.key for r in report.evicted]
    assert len(would) == 8 * 4 and all(r.result == "dry-run" for r in report.records)
    assert_only_app_pods(would)
    assert_targets_within_high(scenario, plugin, would)
    lines = logged(caplog, "descheduler dry-run: would evict pod")
    assert sorted(f["pod"] for f in lines) == sorted(f"{namespace}/{name}" for namespace, name in would)
    assert all(f["node"].startswith("hot-") for f in lines)
    [summary] = logged(caplog, "descheduler round done")
    assert summary["dry_run"] is True and summary["evictions"] == 32
    for spec in scenario.pods.values():
        assert fake_apiserver.get("pods", spec.name, spec.namespace) is not None


def test_dry_run_from_the_configuration(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = build(hot=3, cold=3)
    report, _ = one_round(fake_apiserver, api, scenario, config_text(dryRun=True))
    assert report.dry_run and report.evicted
    assert fake_apiserver.evictions == []
