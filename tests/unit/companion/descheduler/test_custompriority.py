"""CustomPriority against the fake apiserver: a scripted cluster is listed through the real client, the plugin
runs one round, and the test reads the evictions and node patches the apiserver received.

Tiers in these tests: ``gold`` (expensive) -> ``silver`` -> ``bronze`` (cheap), chosen by the label ``tier``.
Nodes have 4 CPUs unless a test says otherwise; pods request CPU only (memory is fixed and small), so the
arithmetic is in CPUs.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client

from koordlet.apis.quantity import milli_value
from koordlet.companion.descheduler.cluster import Snapshot, list_snapshot
from koordlet.companion.descheduler.config import load_config
from koordlet.companion.descheduler.custompriority import NAME, CustomPriority, new_plugin, parse_args
from koordlet.companion.descheduler.evictor import Evictor
from koordlet.companion.descheduler.evictorargs import EvictorArgs, Limits
from koordlet.companion.descheduler.framework import Handle
from koordlet.companion.descheduler.registry import ARGS_PARSERS, PLUGIN_FACTORIES
from koordlet.companion.descheduler.runner import Descheduler
from koordlet.errors import ConfigError
from koordlet.log import record_fields
from tests.fixtures.fakeapiserver import FakeApiServer, make_node, make_pod


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    """The ``extra`` fields of each captured record whose message is ``message``."""
    return [record_fields(r) for r in caplog.records if r.getMessage() == message]

GOLD = {"name": "gold", "nodeSelector": {"matchLabels": {"tier": "gold"}}}
SILVER = {"name": "silver", "nodeSelector": {"matchLabels": {"tier": "silver"}}}
BRONZE = {"name": "bronze", "nodeSelector": {"matchLabels": {"tier": "bronze"}}}


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def node(server: FakeApiServer, name: str, tier: str | None, *, cpu: str = "4", pods: str = "110",
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> None:
    obj = make_node(name, labels={"tier": tier} if tier else {},
                    capacity={"cpu": cpu, "memory": "64Gi", "pods": pods})
    if taints:
        obj["spec"]["taints"] = taints
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    server.seed(obj)


def pod(server: FakeApiServer, name: str, node_name: str, cpu: str, *, namespace: str = "default",
        labels: Mapping[str, str] | None = None, owner_kind: str | None = "ReplicaSet",
        spec: Mapping[str, Any] | None = None) -> None:
    obj = make_pod(name, namespace, node_name)
    obj["metadata"]["labels"] = dict(labels or {})
    if owner_kind:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "owner",
                                               "uid": "owner-uid", "controller": True}]
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    obj["spec"].update(spec or {})
    server.seed(obj)


def plugin(api_client: client.ApiClient | None, **args: Any) -> CustomPriority:
    args.setdefault("evictionOrder", [GOLD, SILVER, BRONZE])
    return new_plugin(args, Handle(api_client))


def run(server: FakeApiServer, api_client: client.ApiClient, pl: CustomPriority, *, limits: Limits | None = None,
        dry_run: bool = False) -> Evictor:
    """One round: list the cluster, balance, return the evictor (its records say what it was asked)."""
    snap = list_snapshot(api_client)
    evictor = Evictor(api_client, EvictorArgs(), limits or Limits(), dry_run=dry_run, snap=snap)
    evictor.strategy = NAME
    pl.balance(snap, evictor)
    return evictor


def evicted(server: FakeApiServer) -> list[str]:
    """Pods whose eviction the apiserver accepted, in request order."""
    return [e["name"] for e in server.evictions if not e["blocked"]]


def unschedulable(server: FakeApiServer, name: str) -> bool:
    stored = server.get("nodes", name)
    assert stored is not None
    return bool(stored["spec"].get("unschedulable"))


# ------------------------------------------------------------------------------------------------ args


def test_args_defaults_follow_upstream() -> None:
    """SetDefaults_CustomPriorityArgs: nodeFit true, mode BestEffort; the bools default to false."""
    args = parse_args({"evictionOrder": [GOLD, BRONZE]})
    assert (args.node_fit, args.mode, args.paused, args.dry_run, args.auto_cordon) == (
        True, "BestEffort", False, False, False)
    assert [t.name for t in args.tiers] == ["gold", "bronze"]
    explicit = parse_args({"evictionOrder": [GOLD, BRONZE], "nodeFit": False, "mode": "DrainNode",
                           "autoCordon": True, "dryRun": True, "paused": True,
                           "evictableNamespaces": {"exclude": ["kube-system"]},
                           "podSelectors": [{"name": "web", "selector": {"matchLabels": {"app": "web"}}}],
                           "apiVersion": "descheduler/v1alpha2", "kind": "CustomPriorityArgs"})
    assert (explicit.node_fit, explicit.mode, explicit.auto_cordon, explicit.dry_run, explicit.paused) == (
        False, "DrainNode", True, True, True)
    assert explicit.evictable_namespaces is not None and not explicit.evictable_namespaces.allows("kube-system")


@pytest.mark.parametrize(("args", "message"), [
    (None, "CustomPriorityArgs: the CustomPriority plugin needs args"),
    ({}, "CustomPriorityArgs.evictionOrder: needs at least 2 tiers, got 0"),
    ({"evictionOrder": [GOLD]}, "CustomPriorityArgs.evictionOrder: needs at least 2 tiers, got 1"),
    ({"evictionOrder": "gold"}, "CustomPriorityArgs.evictionOrder: must be a list"),
    ({"evictionOrder": [GOLD, GOLD]}, "CustomPriorityArgs.evictionOrder[1].name: duplicate tier name 'gold'"),
    ({"evictionOrder": [GOLD, {"name": "bronze"}]}, "CustomPriorityArgs.evictionOrder[1].nodeSelector: is required"),
    ({"evictionOrder": [GOLD, {"nodeSelector": {}}]}, "CustomPriorityArgs.evictionOrder[1].name: must not be empty"),
    ({"evictionOrder": [GOLD, {**BRONZE, "name": "Bronze_1"}]},
     "CustomPriorityArgs.evictionOrder[1].name: must be a DNS-1123 subdomain"),
    ({"evictionOrder": [GOLD, {**BRONZE, "nodeSelector": {"matchExpressions": [{"key": "t", "operator": "In"}]}}]},
     "CustomPriorityArgs.evictionOrder[1].nodeSelector.matchExpressions[0].values: must be non-empty"),
    ({"evictionOrder": [{**GOLD, "keepThreshold": {"cpu": 120}}, BRONZE]},
     "CustomPriorityArgs.evictionOrder[0].keepThreshold.cpu: must be a percentage between 0 and 100, got 120"),
    ({"evictionOrder": [GOLD, BRONZE], "mode": "Drain"},
     "CustomPriorityArgs.mode: must be one of BestEffort, DrainNode, got 'Drain'"),
    ({"evictionOrder": [GOLD, BRONZE], "autoCordon": "yes"},
     "CustomPriorityArgs.autoCordon: must be true or false, got 'yes'"),
    ({"evictionOrder": [GOLD, BRONZE], "podSelectors": [{"selector": {}}]},
     "CustomPriorityArgs.podSelectors[0].name: must not be empty"),
    ({"evictionOrder": [GOLD, BRONZE], "evictableNamespaces": {"include": ["a"], "exclude": ["b"]}},
     "CustomPriorityArgs.evictableNamespaces: only one of include and exclude may be set"),
])
def test_bad_args_name_the_field(args: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        new_plugin(args, Handle(None))
    assert message in str(info.value)


# ------------------------------------------------------------------------------------------- BestEffort


def test_best_effort_moves_the_pods_that_fit_smallest_first(fake_apiserver: FakeApiServer,
                                                            api: client.ApiClient) -> None:
    """bronze-1 has 4 CPUs, 1 requested: room for 3.  gold-1's pods sorted by request: a (1), b (1), c (2):
    a and b take 2, c (2) no longer fits.  The node in no tier neither gives nor takes pods."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze")
    node(fake_apiserver, "plain-1", None)
    pod(fake_apiserver, "resident", "bronze-1", "1")
    pod(fake_apiserver, "c", "gold-1", "2")
    pod(fake_apiserver, "b", "gold-1", "1")
    pod(fake_apiserver, "a", "gold-1", "1000m")
    pod(fake_apiserver, "untiered", "plain-1", "100m")
    run(fake_apiserver, api, plugin(api))
    assert evicted(fake_apiserver) == ["a", "b"]
    assert fake_apiserver.get("pods", "c") is not None


def test_pods_go_to_the_next_tier_first_and_moves_are_accounted(fake_apiserver: FakeApiServer,
                                                                api: client.ApiClient) -> None:
    """gold's pod (2) does not fit the full silver node, so it takes 2 of bronze's 3 free CPUs; silver's own
    pod (2) then finds 1 left on bronze and stays, although bronze looked free enough before the round."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "silver-1", "silver")
    node(fake_apiserver, "bronze-1", "bronze")
    pod(fake_apiserver, "silver-full", "silver-1", "2")
    pod(fake_apiserver, "silver-pod", "silver-1", "2")
    pod(fake_apiserver, "bronze-resident", "bronze-1", "1")
    pod(fake_apiserver, "gold-pod", "gold-1", "2")
    run(fake_apiserver, api, plugin(api))
    assert evicted(fake_apiserver) == ["gold-pod"]


def test_two_sources_never_count_on_the_same_room(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "silver-1", "silver", cpu="3")
    pod(fake_apiserver, "p1", "gold-1", "2")
    pod(fake_apiserver, "p2", "gold-2", "2")
    run(fake_apiserver, api, plugin(api))
    assert evicted(fake_apiserver) == ["p1"]


def test_the_pod_count_limits_a_target(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze", pods="2")
    pod(fake_apiserver, "resident", "bronze-1", "100m")
    pod(fake_apiserver, "p1", "gold-1", "100m")
    pod(fake_apiserver, "p2", "gold-1", "200m")
    run(fake_apiserver, api, plugin(api))
    assert evicted(fake_apiserver) == ["p1"]


def test_node_fit_respects_selectors_taints_and_cordons(fake_apiserver: FakeApiServer,
                                                        api: client.ApiClient) -> None:
    """bronze-tainted has a NoSchedule taint, bronze-cordoned is unschedulable, bronze-ok takes pods: a pod
    pinned to gold by its nodeSelector stays, a tolerating pod may use the tainted node."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-cordoned", "bronze", unschedulable=True)
    node(fake_apiserver, "bronze-ok", "bronze", cpu="1")
    node(fake_apiserver, "bronze-tainted", "bronze",
         taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])
    pod(fake_apiserver, "pinned", "gold-1", "100m", spec={"nodeSelector": {"tier": "gold"}})
    pod(fake_apiserver, "plain-small", "gold-1", "500m")
    pod(fake_apiserver, "plain-big", "gold-1", "2")
    pod(fake_apiserver, "tolerant", "gold-1", "3", spec={"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]})
    evictor = run(fake_apiserver, api, plugin(api))
    # plain-small lands on bronze-ok; plain-big fits only the tainted or the cordoned node: neither.
    assert evicted(fake_apiserver) == ["plain-small", "tolerant"]
    assert [r.result for r in evictor.records] == ["success", "success"]


def test_best_effort_gives_up_on_a_node_after_five_misses(fake_apiserver: FakeApiServer,
                                                          api: client.ApiClient) -> None:
    """Upstream's early stop: candidates go smallest first, so after 5 in a row found no room the bigger rest
    is not tried, even one that only its node selector had kept from fitting (here the sixth)."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="16")
    for index in range(5):
        pod(fake_apiserver, f"pinned-{index}", "gold-1", f"{100 + index}m", spec={"nodeSelector": {"tier": "gold"}})
        pod(fake_apiserver, f"g2-pinned-{index}", "gold-2", f"{100 + index}m",
            spec={"nodeSelector": {"tier": "gold"}})
    pod(fake_apiserver, "free", "gold-1", "1")
    pod(fake_apiserver, "g2-free", "gold-2", "1")
    pod(fake_apiserver, "g2-pinned-after", "gold-2", "101m", spec={"nodeSelector": {"tier": "gold"}})
    pod(fake_apiserver, "g2-early", "gold-2", "102m")
    run(fake_apiserver, api, plugin(api))
    # gold-1: five misses, then "free" is never tried.  gold-2: g2-early breaks the run of misses.
    assert evicted(fake_apiserver) == ["g2-early", "g2-free"]


def test_without_node_fit_only_room_counts(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-tainted", "bronze", cpu="2",
         taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])
    pod(fake_apiserver, "pinned", "gold-1", "1", spec={"nodeSelector": {"tier": "gold"}})
    pod(fake_apiserver, "too-big", "gold-1", "3")
    run(fake_apiserver, api, plugin(api, nodeFit=False))
    assert evicted(fake_apiserver) == ["pinned"]


def test_candidates_are_filtered(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    """The evictor's filter (DaemonSet pods, pods without owners), evictableNamespaces and podSelectors."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="16")
    pod(fake_apiserver, "daemon", "gold-1", "100m", owner_kind="DaemonSet", labels={"app": "web"})
    pod(fake_apiserver, "bare", "gold-1", "100m", owner_kind=None, labels={"app": "web"})
    pod(fake_apiserver, "excluded", "gold-1", "100m", namespace="kube-system", labels={"app": "web"})
    pod(fake_apiserver, "unselected", "gold-1", "100m", labels={"app": "db"})
    pod(fake_apiserver, "web", "gold-1", "100m", labels={"app": "web"})
    pod(fake_apiserver, "cache", "gold-1", "100m", labels={"app": "cache"})
    run(fake_apiserver, api, plugin(api, evictableNamespaces={"exclude": ["kube-system"]}, podSelectors=[
        {"name": "web", "selector": {"matchLabels": {"app": "web"}}},
        {"name": "cache", "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["cache"]}]}},
    ]))
    assert sorted(evicted(fake_apiserver)) == ["cache", "web"]


def test_node_selector_limits_the_nodes_taking_part(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze")
    fake_apiserver.modify("nodes", "bronze-1", lambda obj: obj["metadata"]["labels"].update(pool="other"))
    pod(fake_apiserver, "p1", "gold-1", "1")
    run(fake_apiserver, api, plugin(api, nodeSelector={"matchExpressions": [
        {"key": "pool", "operator": "NotIn", "values": ["other"]}]}))
    assert evicted(fake_apiserver) == []


def test_best_effort_respects_the_evictor_limits(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "gold-3", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="32")
    for source in ("gold-1", "gold-2", "gold-3"):
        for index in range(3):
            pod(fake_apiserver, f"{source}-p{index}", source, "100m")
    evictor = run(fake_apiserver, api, plugin(api), limits=Limits(per_node=2, total=3))
    assert evicted(fake_apiserver) == ["gold-1-p0", "gold-1-p1", "gold-2-p0"]
    assert evictor.total_evicted == 3
    # The plugin stops asking once a limit is reached rather than collecting refusals.
    assert [r.result for r in evictor.records] == ["success"] * 3


def test_best_effort_skips_namespaces_at_their_limit(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="16")
    pod(fake_apiserver, "a1", "gold-1", "100m", namespace="team-a")
    pod(fake_apiserver, "a2", "gold-1", "200m", namespace="team-a")
    pod(fake_apiserver, "b1", "gold-1", "300m", namespace="team-b")
    evictor = run(fake_apiserver, api, plugin(api), limits=Limits(per_namespace=1))
    assert evicted(fake_apiserver) == ["a1", "b1"]
    assert [r.result for r in evictor.records] == ["success", "success"]


def test_a_refused_eviction_gives_the_room_back(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    """p1's eviction is blocked (a disruption budget): the 2 CPUs it had claimed on bronze go to p2."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="2")
    pod(fake_apiserver, "p1", "gold-1", "2")
    pod(fake_apiserver, "p2", "gold-2", "2")
    fake_apiserver.block_eviction("default", "p1")
    run(fake_apiserver, api, plugin(api))
    assert [(e["name"], e["blocked"]) for e in fake_apiserver.evictions] == [("p1", True), ("p2", False)]


def test_paused_and_single_tier_clusters_do_nothing(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "bronze-1", "bronze")
    pod(fake_apiserver, "p1", "gold-1", "1")
    caplog.set_level(logging.INFO)
    run(fake_apiserver, api, plugin(api, paused=True))
    assert "CustomPriority is paused" in caplog.text
    fake_apiserver.delete("nodes", "bronze-1")
    run(fake_apiserver, api, plugin(api))
    assert fake_apiserver.evictions == []


def reschedule(server: FakeApiServer, evictor: Evictor, before: Mapping[str, dict[str, Any]]) -> None:
    """Plays the scheduler: each evicted pod comes back on the node the plugin found room on."""
    for record in evictor.records:
        if record.result != "success":
            continue
        target = record.reason.rsplit("room on node ", 1)[1].rstrip(")")
        obj = copy.deepcopy(before[record.pod.name])
        obj["spec"]["nodeName"] = target
        server.seed(obj)


def cpu_requested(server: FakeApiServer) -> dict[str, int]:
    used: dict[str, int] = {}
    for obj in server.list_objects("pods"):
        cpu = obj["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        used[obj["spec"]["nodeName"]] = used.get(obj["spec"]["nodeName"], 0) + milli_value(cpu)
    return used


@pytest.mark.parametrize("mode", ["BestEffort", "DrainNode"])
def test_a_scripted_cluster_never_overfills_a_cheaper_node(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                           mode: str) -> None:
    """36 nodes in three tiers with random pods (seeded).  After each round every evicted pod is put back where
    the plugin found room, as the scheduler could: no node may end above its allocatable CPU and pods only move
    to cheaper tiers.  Pods go to the next tier first, so some take two rounds to reach bronze; the rounds
    settle once nothing more fits."""
    rng = random.Random(20)
    tiers = ("gold", "silver", "bronze")
    for tier in tiers:
        for index in range(12):
            name = f"{tier}-{index:02d}"
            node(fake_apiserver, name, tier, cpu="8")
            # Every node 60-95% full: the cheaper tiers cannot take everything gold has.
            to_fill = int(rng.uniform(0.6, 0.95) * 8000)
            number = 0
            while fitting := [size for size in (250, 500, 1000, 1500, 2500) if size <= to_fill]:
                size = rng.choice(fitting)
                pod(fake_apiserver, f"{name}-p{number}", name, f"{size}m")
                to_fill, number = to_fill - size, number + 1
    stored = {obj["metadata"]["name"]: obj for obj in fake_apiserver.list_objects("pods")}
    rank = {tier: index for index, tier in enumerate(tiers)}
    moves_per_round = []
    for _ in range(5):
        evictor = run(fake_apiserver, api, plugin(api, mode=mode))
        reschedule(fake_apiserver, evictor, stored)
        stored = {obj["metadata"]["name"]: obj for obj in fake_apiserver.list_objects("pods")}
        moved = [r for r in evictor.records if r.result == "success"]
        assert len(moved) == len(evictor.records)
        for record in moved:
            target = record.reason.rsplit("room on node ", 1)[1].rstrip(")")
            assert rank[target.split("-")[0]] > rank[record.pod.node.split("-")[0]]
        assert max(cpu_requested(fake_apiserver).values()) <= 8000
        moves_per_round.append(len(moved))
        if not moved:
            break
    assert moves_per_round[0] > 0 and moves_per_round[-1] == 0, moves_per_round
    assert any(obj["spec"]["nodeName"].startswith("gold") for obj in stored.values()), "the cheap tiers filled up"


# ------------------------------------------------------------------------------------------- DrainNode


def drain_cluster(server: FakeApiServer) -> None:
    """bronze-1 has room for 3.  gold-1 (1 + 1) fits whole; gold-2 (1 + 2) would have its small pod fit in
    the 1 CPU gold-1 leaves, but not its big one: it keeps both."""
    node(server, "gold-1", "gold")
    node(server, "gold-2", "gold")
    node(server, "bronze-1", "bronze")
    pod(server, "resident", "bronze-1", "1")
    pod(server, "g1-a", "gold-1", "1")
    pod(server, "g1-b", "gold-1", "1")
    pod(server, "g2-a", "gold-2", "1")
    pod(server, "g2-b", "gold-2", "2")


def test_drain_node_is_all_or_nothing(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                      caplog: pytest.LogCaptureFixture) -> None:
    drain_cluster(fake_apiserver)
    caplog.set_level(logging.INFO)
    run(fake_apiserver, api, plugin(api, mode="DrainNode"))
    assert evicted(fake_apiserver) == ["g1-a", "g1-b"]
    assert {"node": "gold-2", "pod": "default/g2-b",
            "reason": "pod fits on no node of a cheaper tier"} in logged(caplog, "CustomPriority: not draining node")
    [summary] = logged(caplog, "CustomPriority: round done")
    assert summary["drained_nodes"] == ["gold-1"] and summary["evictions"] == 2
    # Without autoCordon no node is touched.
    assert fake_apiserver.count("patch", "nodes") == 0


def test_a_node_that_cannot_drain_claims_no_room(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    """gold-1's small pod would fit bronze but its big one would not: the room the small one was planned into
    is free again for gold-2, which needs all 3 free CPUs."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="3")
    pod(fake_apiserver, "g1-small", "gold-1", "1")
    pod(fake_apiserver, "g1-huge", "gold-1", "5")
    pod(fake_apiserver, "g2-a", "gold-2", "1")
    pod(fake_apiserver, "g2-b", "gold-2", "2")
    run(fake_apiserver, api, plugin(api, mode="DrainNode"))
    assert evicted(fake_apiserver) == ["g2-a", "g2-b"]


def test_best_effort_on_the_same_cluster_moves_the_odd_pod(fake_apiserver: FakeApiServer,
                                                           api: client.ApiClient) -> None:
    drain_cluster(fake_apiserver)
    run(fake_apiserver, api, plugin(api))
    assert evicted(fake_apiserver) == ["g1-a", "g1-b", "g2-a"]


def test_auto_cordon_marks_only_drained_nodes(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    drain_cluster(fake_apiserver)
    run(fake_apiserver, api, plugin(api, mode="DrainNode", autoCordon=True))
    assert unschedulable(fake_apiserver, "gold-1")
    assert not unschedulable(fake_apiserver, "gold-2")
    assert not unschedulable(fake_apiserver, "bronze-1")
    # Cordoned before the first eviction, so the scheduler cannot put the pods back.
    verbs = [(r.verb, r.resource) for r in fake_apiserver.requests if r.verb in ("patch", "create")]
    assert verbs[0] == ("patch", "nodes")


def test_auto_cordon_is_undone_when_draining_fails(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """bronze-1 has room for 3.  g1-b's eviction is refused: draining gold-1 stops, gold-1 takes pods again,
    and the CPU g1-b had claimed on bronze goes back, so gold-2's pod (2) fits beside g1-a."""
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="3")
    pod(fake_apiserver, "g1-a", "gold-1", "1")
    pod(fake_apiserver, "g1-b", "gold-1", "1")
    pod(fake_apiserver, "g2-a", "gold-2", "2")
    fake_apiserver.block_eviction("default", "g1-b")
    run(fake_apiserver, api, plugin(api, mode="DrainNode", autoCordon=True))
    assert [(e["name"], e["blocked"]) for e in fake_apiserver.evictions] == [
        ("g1-a", False), ("g1-b", True), ("g2-a", False)]
    assert not unschedulable(fake_apiserver, "gold-1")
    assert fake_apiserver.count("patch", "nodes", name="gold-1") == 2
    assert unschedulable(fake_apiserver, "gold-2")
    assert logged(caplog, "CustomPriority: draining node stopped: evicting a pod failed") == [
        {"node": "gold-1", "pod": "default/g1-b"}]


def test_a_node_cordoned_by_someone_else_stays_cordoned(fake_apiserver: FakeApiServer,
                                                        api: client.ApiClient) -> None:
    drain_cluster(fake_apiserver)
    fake_apiserver.modify("nodes", "gold-1", lambda obj: obj["spec"].update(unschedulable=True))
    fake_apiserver.block_eviction("default", "g1-b")
    run(fake_apiserver, api, plugin(api, mode="DrainNode", autoCordon=True))
    assert fake_apiserver.count("patch", "nodes") == 0
    assert unschedulable(fake_apiserver, "gold-1")


def test_drain_node_never_starts_what_a_limit_would_stop(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A per-node limit of 1 cannot drain a node with 2 candidates: nothing is evicted, nothing cordoned."""
    drain_cluster(fake_apiserver)
    caplog.set_level(logging.INFO)
    run(fake_apiserver, api, plugin(api, mode="DrainNode", autoCordon=True), limits=Limits(per_node=1))
    assert fake_apiserver.evictions == []
    assert fake_apiserver.count("patch", "nodes") == 0
    assert {"node": "gold-1", "reason": "2 candidates exceed the per-node eviction limit (1)"} in logged(
        caplog, "CustomPriority: not draining node")


def test_drain_node_namespace_limit(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node(fake_apiserver, "gold-1", "gold")
    node(fake_apiserver, "gold-2", "gold")
    node(fake_apiserver, "bronze-1", "bronze", cpu="16")
    pod(fake_apiserver, "a1", "gold-1", "1", namespace="team-a")
    pod(fake_apiserver, "a2", "gold-1", "1", namespace="team-a")
    pod(fake_apiserver, "b1", "gold-2", "1", namespace="team-b")
    run(fake_apiserver, api, plugin(api, mode="DrainNode"), limits=Limits(per_namespace=1))
    assert evicted(fake_apiserver) == ["b1"]


# ------------------------------------------------------------------------------------------- dry-run


def test_dry_run_evicts_nothing_and_logs_the_plan(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    drain_cluster(fake_apiserver)
    caplog.set_level(logging.INFO)
    run(fake_apiserver, api, plugin(api, mode="DrainNode", autoCordon=True, dryRun=True))
    assert fake_apiserver.evictions == []
    assert fake_apiserver.count("patch", "nodes") == 0
    assert fake_apiserver.count("create", "pods", subresource="eviction") == 0
    assert logged(caplog, "CustomPriority dry-run: would cordon node") == [{"node": "gold-1"}]
    would = logged(caplog, "CustomPriority dry-run: would evict pod")
    # Only gold-1's pods: gold-2 cannot drain, so none of its pods is named.
    assert [(f["pod"], f["node"], f["tier"]) for f in would] == [
        ("default/g1-a", "gold-1", "gold"), ("default/g1-b", "gold-1", "gold")]
    assert all(f["target_node"] == "bronze-1" for f in would)
    assert logged(caplog, "CustomPriority: round done") == [
        {"dry_run": True, "evictions": 2, "evictions_per_tier": {"gold": 2}, "drained_nodes": ["gold-1"]}]


def test_descheduler_dry_run_goes_through_the_evictor(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    """The descheduler-wide dry-run: the evictor logs and counts against its limits, and the handle does not
    patch the node."""
    drain_cluster(fake_apiserver)
    snap: Snapshot = list_snapshot(api)
    evictor = Evictor(api, EvictorArgs(), Limits(), dry_run=True, snap=snap)
    pl = new_plugin({"evictionOrder": [GOLD, BRONZE], "mode": "DrainNode", "autoCordon": True},
                    Handle(api, dry_run=True))
    pl.balance(snap, evictor)
    assert fake_apiserver.evictions == []
    assert fake_apiserver.count("patch", "nodes") == 0
    assert [(r.pod.name, r.result) for r in evictor.records] == [("g1-a", "dry-run"), ("g1-b", "dry-run")]


# ------------------------------------------------------------------------------------------- configuration

CONFIG = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: 60s
maxNoOfPodsToEvictPerNode: 5
profiles:
- name: tiers
  plugins:
    balance:
      enabled: [{name: CustomPriority}]
    evict:
      disabled: [{name: "*"}]
      enabled: [{name: DefaultEvictor}]
    filter:
      disabled: [{name: "*"}]
      enabled: [{name: DefaultEvictor}]
  pluginConfig:
  - name: CustomPriority
    args:
      apiVersion: descheduler/v1alpha2
      kind: CustomPriorityArgs
      mode: DrainNode
      autoCordon: true
      evictionOrder:
      - name: gold
        nodeSelector: {matchLabels: {tier: gold}}
      - name: bronze
        nodeSelector: {matchLabels: {tier: bronze}}
"""


def test_registered_and_run_by_the_descheduler(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    """The configuration file enables the plugin by name; the descheduler's round drains gold-1."""
    assert PLUGIN_FACTORIES[NAME] is new_plugin and ARGS_PARSERS[NAME] is parse_args
    drain_cluster(fake_apiserver)
    descheduler = Descheduler(api, load_config(CONFIG), is_leader=lambda: True)
    assert [p.name for p in descheduler.plugins()] == [NAME]
    report = descheduler.run_once()
    assert report.errors == []
    assert sorted(r.pod.name for r in report.evicted) == ["g1-a", "g1-b"]
    assert evicted(fake_apiserver) == ["g1-a", "g1-b"]
    assert unschedulable(fake_apiserver, "gold-1")


@pytest.mark.parametrize(("change", "message"), [
    (("      mode: DrainNode", "      mode: drain"),
     "profiles[0].pluginConfig[0].args.mode: must be one of BestEffort, DrainNode, got 'drain'"),
    (("      - name: bronze\n", "      - name: gold\n"),
     "profiles[0].pluginConfig[0].args.evictionOrder[1].name: duplicate tier name 'gold'"),
    (("  pluginConfig:", "  pluginConfigIgnored:"), "CustomPriority plugin needs args"),
])
def test_bad_args_in_the_configuration_name_the_field(change: tuple[str, str], message: str) -> None:
    text = CONFIG.replace(*change)
    assert text != CONFIG
    with pytest.raises(ConfigError) as info:
        load_config(text)
    assert message in str(info.value)
