"""Abuse suite: an eviction flood through the companion is rate limited, per node and across the cluster.

The attack is what a NodeSLO with thresholds at 0 (or one compromised node) does: koordlets ask the companion to
evict every pod they run, at once.  It runs against a real koord-companion (:class:`Companion` on 127.0.0.1, the
fake kube-apiserver behind it) with koordlets authenticated by their projected tokens; what counts is how many
evictions reached the Eviction API.  Refused evictions come back as RESOURCE_EXHAUSTED, which the koordlet's
evictor turns into a failed attempt that its strategy retries on a later round.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.companion import cli
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import make_api_client
from koordlet.companion.ratelimit import DEFAULT_BURST, DEFAULT_NODE_BURST, DEFAULT_NODE_RATE, RateLimit
from koordlet.qosmanager.evictor import CompanionEvictionAPI, EvictionFailed
from koordlet.statesinformer.companion import CompanionClient
from tests.fixtures.fakeapiserver import FakeApiServer, make_node, make_pod
from tests.fixtures.waiting import wait_until

NS = "koordinator-system"
NODES = ("node-1", "node-2", "node-3")
PODS_PER_NODE = 12
"""More than the default per-node burst."""


@pytest.fixture
def cluster(fake_apiserver: FakeApiServer) -> FakeApiServer:
    for node in NODES:
        fake_apiserver.seed(make_node(node))
        fake_apiserver.seed(make_pod(f"koordlet-{node}", NS, node, service_account="koordlet"))
        for i in range(PODS_PER_NODE):
            pod = make_pod(f"be-{node}-{i}", "batch", node)
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            fake_apiserver.seed(pod)
    return fake_apiserver


def start(cluster: FakeApiServer, **options: Any) -> Companion:
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", leader_elect=False,
                                           **options), api)
    companion.start()
    wait_until("the pods to be known", lambda: len(companion._pod_nodes) == len(NODES) * (PODS_PER_NODE + 1))
    return companion


@pytest.fixture
def clients(cluster: FakeApiServer) -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    for client in made.values():
        client.close()


def evictor(cluster: FakeApiServer, companion: Companion, clients: dict[str, Any], node: str) -> CompanionEvictionAPI:
    """The koordlet's own eviction path (evictor -> companion client) of ``node``, with its projected token."""
    token = cluster.mint_token(NS, f"koordlet-{node}", audiences=["koord-companion"])
    client = clients[node] = CompanionClient(f"127.0.0.1:{companion.server.port}", token, node)
    return CompanionEvictionAPI(client)


def flood(api: CompanionEvictionAPI, node: str) -> list[str]:
    """Asks for every BE pod of ``node``; the error of each refused eviction."""
    errors = []
    for i in range(PODS_PER_NODE):
        try:
            api.evict("batch", f"be-{node}-{i}", "BEMemoryEvict", "flood")
        except EvictionFailed as exc:
            errors.append(str(exc))
    return errors


def evicted(cluster: FakeApiServer, node: str) -> int:
    return sum(1 for e in cluster.evictions if e["name"].startswith(f"be-{node}-") and not e["blocked"])


def test_one_node_flooding_is_limited_by_the_default_per_node_limit(cluster: FakeApiServer,
                                                                    clients: dict[str, Any]) -> None:
    companion = start(cluster)  # the defaults: limits on
    try:
        api = evictor(cluster, companion, clients, "node-1")
        started = time.monotonic()
        errors = flood(api, "node-1")
        refilled = int((time.monotonic() - started) * DEFAULT_NODE_RATE)
        # The burst, plus what the default rate (one every 5 s) refilled during the flood.
        assert DEFAULT_NODE_BURST <= evicted(cluster, "node-1") <= DEFAULT_NODE_BURST + refilled
        assert len(errors) == PODS_PER_NODE - evicted(cluster, "node-1")
        assert all("RESOURCE_EXHAUSTED" in e and "rate limit of node node-1" in e for e in errors), errors
        # Another node is not starved by node-1's flood.
        flood(evictor(cluster, companion, clients, "node-2"), "node-2")
        assert evicted(cluster, "node-2") >= DEFAULT_NODE_BURST
    finally:
        companion.stop()


def test_every_node_flooding_at_once_is_limited_cluster_wide(cluster: FakeApiServer,
                                                             clients: dict[str, Any]) -> None:
    # Small limits so three nodes exceed the cluster's; rates low enough that nothing refills during the test.
    companion = start(cluster, eviction_limit=RateLimit(0.001, 15), node_eviction_limit=RateLimit(0.001, 8))
    try:
        errors = [e for node in NODES for e in flood(evictor(cluster, companion, clients, node), node)]
        assert [evicted(cluster, node) for node in NODES] == [8, 7, 0]
        assert len(cluster.evictions) == 15
        assert sum("cluster-wide eviction rate limit" in e for e in errors) == (PODS_PER_NODE - 7) + PODS_PER_NODE
        assert sum("rate limit of node node-1" in e for e in errors) == PODS_PER_NODE - 8
        assert all("RESOURCE_EXHAUSTED" in e for e in errors)
    finally:
        companion.stop()


def test_evictions_that_did_not_happen_cost_nothing(cluster: FakeApiServer, clients: dict[str, Any]) -> None:
    companion = start(cluster, eviction_limit=RateLimit(0.001, 2), node_eviction_limit=RateLimit(0.001, 2))
    try:
        api = evictor(cluster, companion, clients, "node-1")
        cluster.block_eviction("batch", "be-node-1-0")  # a PodDisruptionBudget: retried every round
        for _ in range(5):
            with pytest.raises(EvictionFailed, match="blocked by a PodDisruptionBudget"):
                api.evict("batch", "be-node-1-0", "BEMemoryEvict", "blocked")
        api.evict("batch", "be-node-1-1", "BEMemoryEvict", "still allowed")
        api.evict("batch", "be-node-1-2", "BEMemoryEvict", "still allowed")
        with pytest.raises(EvictionFailed, match="RESOURCE_EXHAUSTED"):
            api.evict("batch", "be-node-1-3", "BEMemoryEvict", "over the limit")
    finally:
        companion.stop()


def test_the_limits_are_on_by_default_and_configurable_by_flag() -> None:
    defaults = cli.build_parser().parse_args([])
    assert (defaults.eviction_rate, defaults.eviction_burst) == (5.0, DEFAULT_BURST)
    assert defaults.eviction_rate > 0 and defaults.node_eviction_rate > 0
    assert CompanionOptions().eviction_limit.enabled and CompanionOptions().node_eviction_limit.enabled
    args = cli.build_parser().parse_args(["--eviction-rate=0.5", "--eviction-burst=3", "--node-eviction-rate=0",
                                          "--node-eviction-burst=1"])
    assert (args.eviction_rate, args.eviction_burst, args.node_eviction_rate) == (0.5, 3, 0.0)
    with pytest.raises(SystemExit):
        cli.main(["--eviction-rate=-1", "--config-file=x"])
