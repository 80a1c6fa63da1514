"""Two companion replicas behind one Service (the shipped Deployment), against the fake kube-apiserver: a koordlet
reports to either one.  The replica receiving a node's reports writes its NodeMetric and NodeResourceTopology,
leader or not; every replica learns the node's metric from the NodeMetric watch, so the leader's batch resources
and both extenders cover it; a replica the koordlet left writes neither object again (a resync, a retried write,
becoming leader) while a koordlet that comes back has its reports written again; a NodeMetric whose status does
not decode is skipped with the node named."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.apis.nodemetric import (
    DEFAULT_REPORT_INTERVAL_SECONDS,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from koordlet.apis.nodemetric.status import format_time
from koordlet.apis.quantity import milli_value
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import ApplyResult, NodeMetricWriter, make_api_client
from koordlet.companion.reports import STALE_AFTER_INTERVALS
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
from tests.fixtures.fakeapiserver import FakeApiServer, make_configmap, make_node
from tests.fixtures.waiting import wait_until
from tests.unit.statesinformer.test_topology import EXPECTED

NS = "koordinator-system"
G = 10**9
NRT = "noderesourcetopologies"
PAST_THE_BOUND = STALE_AFTER_INTERVALS * DEFAULT_REPORT_INTERVAL_SECONDS + 1.0


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster(fake_apiserver: FakeApiServer) -> FakeApiServer:
    fake_apiserver.seed(make_node("node-1", capacity={"cpu": "100", "memory": "120G", "pods": "110"}))
    fake_apiserver.seed(make_configmap("slo-controller-config", NS, {"colocation-config": json.dumps({
        "enable": True, "cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65,
        "updateTimeThresholdSeconds": 300, "resourceDiffThreshold": 0.1})}))
    fake_apiserver.seed({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "web", "namespace": "prod", "uid": "uid-web",
                                      "labels": {"koordinator.sh/qosClass": "LS"}},
                         "spec": {"nodeName": "node-1", "containers": [{"name": "main", "resources": {
                             "requests": {"cpu": "20", "memory": "20G"}}}]},
                         "status": {"phase": "Running"}})
    return fake_apiserver


class Replicas:
    def __init__(self, cluster: FakeApiServer) -> None:
        self.cluster = cluster
        self.started: list[Companion] = []
        self.clocks: dict[str, Clock] = {}

    def start(self, identity: str, leader_elect: bool = True) -> Companion:
        api = make_api_client(self.cluster.host, self.cluster.token_file, self.cluster.ca_file)
        clock = self.clocks[identity] = Clock()
        companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                               leader_elect=leader_elect, identity=identity, auth="none"),
                              api, monotonic=clock)
        companion.start()
        self.started.append(companion)
        return companion

    def pair(self) -> tuple[Companion, Companion]:
        """(leader, standby)."""
        first, second = self.start("first"), self.start("second")
        wait_until("a leader", lambda: first._leading or second._leading)
        return (first, second) if first._leading else (second, first)

    def clock(self, companion: Companion) -> Clock:
        return self.clocks[companion.options.identity]


@pytest.fixture
def replicas(cluster: FakeApiServer) -> Iterator[Replicas]:
    held = Replicas(cluster)
    try:
        yield held
    finally:
        for companion in held.started:
            companion.stop()


def report(companion: Companion, pod_cpu_cores: int, topology: dict[str, Any] | None = None,
           at: float | None = None) -> None:
    """One koordlet report of node-1 to ``companion``: node 50 cores / 55G used, system 7 cores / 12G, the LS
    pod's CPU as given; with a topology report when given."""
    status = NodeMetricStatus(
        update_time=time.time() if at is None else at,
        node_metric=NodeMetricInfo(node_usage=ResourceMap(50_000, 55 * G), system_usage=ResourceMap(7_000, 12 * G)),
        pods_metric=(PodMetricInfo("web", "prod", ResourceMap(pod_cpu_cores * 1000, 11 * G)),))
    client = CompanionClient(f"127.0.0.1:{companion.server.port}", None, "node-1")
    try:
        sink = CompanionNodeMetricSink(client)
        if topology is not None:
            sink.topology = lambda: topology
        sink.report(status)
        assert not sink.failing
    finally:
        client.close()


def pod_cpu(cluster: FakeApiServer) -> int | None:
    """The LS pod's CPU (milli) in node-1's NodeMetric object."""
    obj = cluster.get("nodemetrics", "node-1")
    pods = ((obj or {}).get("status") or {}).get("podsMetric") or []
    return milli_value(pods[0]["podUsage"]["resources"]["cpu"]) if pods else None


def batch_cpu(cluster: FakeApiServer) -> str | None:
    node = cluster.get("nodes", "node-1") or {}
    return node.get("status", {}).get("allocatable", {}).get("kubernetes.io/batch-cpu")


def knows_usage(companion: Companion) -> bool:
    """The replica's extender holds node-1's NodeMetric with its node usage."""
    view = companion.store.view("node-1")
    return view is not None and view.has_metric and view.node_metric_ok


def test_a_report_to_the_standby_is_written_and_reaches_the_leader(replicas: Replicas) -> None:
    leader, standby = replicas.pair()
    cluster = replicas.cluster
    wait_until("the pod known to the leader", lambda: leader.compute_batch("node-1") is not None)
    report(standby, 11, EXPECTED)
    # The standby holds the node's report: it writes the node's NodeMetric and NodeResourceTopology.
    wait_until("node-1's NodeMetric", lambda: pod_cpu(cluster) == 11_000)
    nrt = wait_until("node-1's NodeResourceTopology", lambda: cluster.get(NRT, "node-1"))
    assert nrt["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    assert not leader.reported.fresh("node-1") and standby.reported.fresh("node-1")
    # The leader learns the metric from the object: 100 - 35 (reclaim margin) - 7 (system) - 11 (LS pod) cores.
    wait_until("the leader's batch write from the watched NodeMetric", lambda: batch_cpu(cluster) == "47000")
    assert standby._leading is False
    wait_until("the leader's extender knows the node's usage", lambda: knows_usage(leader))
    assert knows_usage(standby)


def test_a_replica_the_koordlet_left_does_not_overwrite_its_objects(replicas: Replicas) -> None:
    leader, standby = replicas.pair()
    cluster = replicas.cluster
    started = float(int(time.time()))
    moved = dict(EXPECTED, topologyPolicy="None")

    def nrt_policies() -> list[str] | None:
        return (cluster.get(NRT, "node-1") or {}).get("topologyPolicies")

    report(leader, 11, EXPECTED, at=started)
    wait_until("the leader's NodeMetric", lambda: pod_cpu(cluster) == 11_000)
    wait_until("the leader's NodeResourceTopology", lambda: nrt_policies() == ["SingleNUMANodePodLevel"])
    # The koordlet moves to the standby (its connection to the leader dropped), with a changed topology...
    replicas.clock(leader).now += PAST_THE_BOUND
    report(standby, 30, moved, at=started + 10)
    wait_until("the standby's NodeMetric", lambda: pod_cpu(cluster) == 30_000)
    wait_until("the standby's NodeResourceTopology", lambda: nrt_policies() == ["None"])
    # ... and back to the leader with the topology the leader wrote before: written again all the same.
    replicas.clock(standby).now += PAST_THE_BOUND
    report(leader, 12, EXPECTED, at=started + 20)
    wait_until("the returning report's NodeMetric", lambda: pod_cpu(cluster) == 12_000)
    wait_until("the returning report's NodeResourceTopology", lambda: nrt_policies() == ["SingleNUMANodePodLevel"])
    # The standby the koordlet left: a retried NodeMetric write, becoming the leader, a topology resync.
    standby._write("node-1", {"metric"})
    leader.stop()
    wait_until("the standby to lead", lambda: standby._leading, timeout=20)
    standby._write("node-1", {"metric"})
    asked: list[str] = []
    may_write = standby.topology._may_write

    def recorded(node: str) -> bool:
        asked.append(node)
        return may_write(node)

    standby.topology._may_write = recorded
    standby.topology.resync()
    wait_until("the topology resync's question", lambda: asked == ["node-1"])
    standby.topology.resync()  # asked once the first resync's write (if any) is done: the writer thread is serial
    wait_until("the topology resync handled", lambda: asked == ["node-1", "node-1"])
    assert pod_cpu(cluster) == 12_000, "the left replica's older report was written over the new one"
    assert nrt_policies() == ["SingleNUMANodePodLevel"], "the left replica's older topology was written"


def test_a_nodemetric_that_does_not_decode_is_skipped_naming_the_node(replicas: Replicas,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    companion = replicas.start("only", leader_elect=False)
    cluster = replicas.cluster
    good = NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(50_000, 55 * G), system_usage=ResourceMap(7_000, 12 * G)),
        pods_metric=(PodMetricInfo("web", "prod", ResourceMap(11_000, 11 * G)),))
    cluster.seed({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "node-1"},
                  "spec": {}, "status": good.to_json()})
    wait_until("the batch write from the NodeMetric object", lambda: batch_cpu(cluster) == "47000")
    known = companion._nodes["node-1"].metric
    caplog.set_level(logging.WARNING, logger="koordlet.companion.app")
    garbage = {"updateTime": format_time(time.time() + 5), "nodeMetric": {"nodeUsage": {"resources": {"cpu": "lots"}}}}
    cluster.modify("nodemetrics", "node-1", lambda obj: obj.update(status=garbage))
    record = wait_until("the refusal logged", lambda: next(
        (r for r in caplog.records if r.getMessage().startswith("NodeMetric status not decoded")), None))
    assert record.node == "node-1"  # type: ignore[attr-defined]
    assert "nodeUsage" in record.error  # type: ignore[attr-defined]
    assert companion._nodes["node-1"].metric is known  # the last good metric stays
    assert knows_usage(companion)
    assert cluster.get("nodemetrics", "node-1")["status"] == garbage  # type: ignore[index]  # never written back


def test_a_nodemetric_writer_does_not_write_an_older_report_over_another_writers(cluster: FakeApiServer,
                                                                                 kube_api: Any) -> None:
    """The last guard of a handover: a replica's write retried or queued while the koordlet already reports to
    another replica does not put the older report back (its own later write is replaced: a node clock stepped
    back)."""
    left, current = NodeMetricWriter(kube_api), NodeMetricWriter(kube_api)

    def status(at: float, cores: int) -> dict[str, Any]:
        return NodeMetricStatus(update_time=at, pods_metric=(
            PodMetricInfo("web", "prod", ResourceMap(cores * 1000, G)),)).to_json()

    started = float(int(time.time()))
    assert left.apply("node-1", status(started, 11)) is ApplyResult.CREATED
    assert current.apply("node-1", status(started + 10, 30)) is ApplyResult.UPDATED
    assert left.apply("node-1", status(started + 5, 12)) is ApplyResult.UNCHANGED
    assert pod_cpu(cluster) == 30_000
    assert current.apply("node-1", status(started - 60, 13)) is ApplyResult.UPDATED
    assert pod_cpu(cluster) == 13_000
