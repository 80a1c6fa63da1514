"""LowNodeLoad on snapshots built without an apiserver (the evictor in dry-run): the order pods go in, which
nodes count as sources and targets, deviation thresholds, node pools, and the switches of the args.

Nodes have 16 CPUs (high 50% = 8000m, low 20% = 3200m) and 64 GiB; system usage is 400m."""

from __future__ import annotations

from typing import Any

from koordlet.companion.descheduler.cluster import Snapshot
from koordlet.companion.descheduler.evictor import Evictor, EvictorArgs, Limits
from koordlet.companion.descheduler.framework import Handle
from koordlet.companion.descheduler.lownodeload import LowNodeLoad, new_plugin
from koordlet.companion.descheduler.utilization import new_thresholds, resource_threshold
from tests.unit.companion.descheduler.scenario import Scenario

BASE: dict[str, Any] = {"lowThresholds": {"cpu": 20, "memory": 30}, "highThresholds": {"cpu": 50, "memory": 60},
                        "anomalyCondition": {"consecutiveAbnormalities": 1}}


def run(scenario: Scenario, **args: Any) -> tuple[list[str], LowNodeLoad, Evictor]:
    plugin = new_plugin(BASE | args, Handle(None))
    snap: Snapshot = scenario.snapshot()
    evictor = Evictor(None, EvictorArgs(), Limits(), dry_run=True, snap=snap)
    plugin.balance(snap, evictor)
    return [r.pod.name for r in evictor.records], plugin, evictor


def hot_cold_mid() -> Scenario:
    """A hot node of six 2-core pods, an empty cold node and a middling one."""
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024)
    cold(scenario)
    mid(scenario)
    return scenario


def cold(scenario: Scenario, name: str = "cold", **kwargs: Any) -> None:
    scenario.node(name, **kwargs)


def mid(scenario: Scenario, name: str = "mid") -> None:
    scenario.node(name)
    for i in range(4):
        scenario.pod(f"{name}-{i}", name, 1000, 1024)


def test_pod_order_on_a_hot_node() -> None:
    """Lowest Koordinator priority class first, then spec.priority, Kubernetes QoS, deletion cost; among equals
    the pod whose usage best matches the excess (CPU 12400m - 8000m = 4400m over) goes first."""
    scenario = Scenario()
    scenario.node("hot")
    scenario.pod("prod-big", "hot", 4000, 1024, priority=9500)
    scenario.pod("batch", "hot", 1000, 1024, priority=5500, labels={"koordinator.sh/qosClass": "BE"})
    scenario.pod("low-priority", "hot", 1000, 1024, priority=9000)
    scenario.pod("costly", "hot", 1000, 1024, priority=9100,
                 annotations={"controller.kubernetes.io/pod-deletion-cost": "100"})
    scenario.pod("matches-excess", "hot", 4400, 1024, priority=9100)
    scenario.pod("small", "hot", 600, 1024, priority=9100)
    # nodeFit books every candidate's usage on a target before any eviction (upstream classifyPods), so give
    # them room for all: three cold nodes.
    for i in range(3):
        cold(scenario, f"cold-{i}")
    mid(scenario)
    names, _, _ = run(scenario)
    # batch (1000) -> 11400; low-priority -> 10400; matches-excess (score 2: usage equals the excess) -> 6000.
    assert names == ["batch", "low-priority", "matches-excess"]


def test_nothing_moves_without_a_cold_node_or_when_all_are_cold() -> None:
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024)
    mid(scenario)
    assert run(scenario)[0] == []  # no underutilized node
    scenario.node("cold", unschedulable=True)
    assert run(scenario)[0] == []  # an unschedulable node is no target
    scenario.nodes["cold"].unschedulable = False
    assert len(run(scenario)[0]) == 3
    # The cold node is low for node and prod usage, the middle one low for prod usage (the prod thresholds are
    # 100% when unset): two underutilized nodes, not more than numberOfNodes 2.
    assert run(scenario, numberOfNodes=2)[0] == []
    assert len(run(scenario, numberOfNodes=1)[0]) == 3
    assert run(scenario, paused=True)[0] == []


def test_plugin_dry_run_never_calls_the_evictor() -> None:
    scenario = hot_cold_mid()
    names, plugin, _ = run(scenario, dryRun=True)
    assert names == []
    assert len(plugin.placements) == 3 and {p.target for p in plugin.placements} == {"cold"}


def test_expired_node_metric_leaves_the_node_out() -> None:
    scenario = hot_cold_mid()
    plugin = new_plugin(BASE | {"nodeMetricExpirationSeconds": 60}, Handle(None))
    snap = scenario.snapshot(scenario.metric_time + 60.0)
    evictor = Evictor(None, EvictorArgs(), Limits(), dry_run=True, snap=snap)
    plugin.balance(snap, evictor)
    assert evictor.records == []


def test_pod_selectors_and_evictable_namespaces() -> None:
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024, namespace="team-a" if i < 3 else "team-b",
                     labels={"tier": "batch" if i % 2 else "web"})
    cold(scenario)
    mid(scenario)
    names, _, _ = run(scenario, podSelectors=[{"name": "batch", "selector": {"matchLabels": {"tier": "batch"}}}])
    assert sorted(names) == ["app-1", "app-3", "app-5"]
    names, _, _ = run(scenario, evictableNamespaces={"include": ["team-b"]})
    assert sorted(names) == ["app-3", "app-4", "app-5"]


def test_node_fit_skips_pods_no_target_takes() -> None:
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024,
                     spec={"nodeSelector": {"disk": "ssd"}} if i < 4 else {})
    cold(scenario, labels={"disk": "hdd"})
    mid(scenario)
    names, _, _ = run(scenario)
    # Only the two pods without a node selector fit the cold node; 12400m - 4000m stays hot, nothing else fits.
    assert sorted(names) == ["app-4", "app-5"]
    names, _, _ = run(scenario, nodeFit=False)
    assert len(names) == 3


def test_deviation_thresholds_follow_the_mean() -> None:
    """useDeviationThresholds: low = mean - low%, high = mean + high%.  Mean CPU of (77.5 + 2.5 + 27.5 + 27.5)/4
    = 33.75%: high 43.75% (7000m), low 23.75%."""
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024)
    cold(scenario)
    mid(scenario, "mid-a")
    mid(scenario, "mid-b")
    names, _, _ = run(scenario, useDeviationThresholds=True, lowThresholds={"cpu": 10}, highThresholds={"cpu": 10})
    # 12400m must get to 7000m: three pods leave 6400m.
    assert len(names) == 3


def test_node_pools_use_their_own_thresholds() -> None:
    scenario = Scenario()
    for pool in ("a", "b"):
        scenario.node(f"hot-{pool}", labels={"pool": pool})
        for i in range(4):
            scenario.pod(f"{pool}-app-{i}", f"hot-{pool}", 2000, 1024)  # 8400m: 52.5%
        scenario.node(f"cold-{pool}", labels={"pool": pool})
        scenario.node(f"mid-{pool}", labels={"pool": pool})
        for i in range(4):
            scenario.pod(f"{pool}-mid-{i}", f"mid-{pool}", 1000, 1024)
    pools = [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}},
             {"name": "b", "nodeSelector": {"matchLabels": {"pool": "b"}}, "highThresholds": {"cpu": 60}}]
    # The top-level pool has a selector matching no node, so only the two pools act.
    names, _, _ = run(scenario, nodeSelector={"matchLabels": {"pool": "none"}}, nodePools=pools)
    # Pool a (high 50%): 8400m is over 8000m, one pod goes.  Pool b (high 60% = 9600m): not hot.
    assert len(names) == 1 and names[0].startswith("a-app-")


def test_new_thresholds_fill_every_named_resource() -> None:
    low, high, prod_low, prod_high = new_thresholds(False, {"cpu": 20}, {"cpu": 50}, {}, {})
    assert low == {"cpu": 20, "memory": 100} and high == {"cpu": 50, "memory": 100}
    assert prod_low == {"cpu": 100, "memory": 100} and prod_high == {"cpu": 100, "memory": 100}
    low, high, _, _ = new_thresholds(True, {}, {}, {}, {})
    assert low == {"memory": 0} and high == {"memory": 0}
    assert resource_threshold({"cpu": 15999}, "cpu", 50.0) == 7999


def test_prod_thresholds_move_only_prod_pods() -> None:
    """A node between the node thresholds (46%) whose prod pods use 37.5% of it, over prodHighThresholds 30%
    (4800m): prod pods leave until the prod usage is at most 4800m, the batch pod stays."""
    scenario = Scenario()
    scenario.node("prod-hot")
    for i in range(6):
        scenario.pod(f"prod-{i}", "prod-hot", 1000, 1024, priority=9500)
    scenario.pod("batch-0", "prod-hot", 1000, 1024, priority=5500)
    scenario.node("empty")
    scenario.node("batchy")
    scenario.pod("batch-1", "batchy", 4000, 1024, priority=5500)
    names, plugin, _ = run(scenario, prodLowThresholds={"cpu": 10}, prodHighThresholds={"cpu": 30})
    assert len(names) == 2 and all(name.startswith("prod-") for name in names)
    assert all(p.prod for p in plugin.placements)
