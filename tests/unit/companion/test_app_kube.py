"""The companion against a kube-apiserver (the in-process fake, driven by the real client) with a koordlet's
real companion client: ConfigMap edits reach the koordlet's NodeSLO holder, batch resources on the Node
follow Koordinator's formula over a scripted NodeMetric series, CRs are written, one leader writes, and a
companion outage changes nothing on the koordlet until it comes back.  The koordlet authenticates as it does in
a cluster: with a projected token of its pod on node-1, reviewed by the companion (the default with Kubernetes)."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, PodMetricInfo, ResourceMap
from koordlet.companion import cli
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import make_api_client
from koordlet.qosmanager.evictor import CompanionEvictionAPI, EvictionFailed
from koordlet.statesinformer.companion import CompanionClient, CompanionError, CompanionNodeMetricSink, token_from_file
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakeapiserver import Fault, make_configmap, make_node, make_pod
from tests.fixtures.waiting import wait_until

NS = "koordinator-system"
CM = "slo-controller-config"
G = 10**9
KOORDLET_POD = "koordlet-node-1"
OUTAGE_SECONDS = float(os.environ.get("KOORDLET_COMPANION_OUTAGE_SECONDS", "5"))
"""How long the companion stays down in the outage test (the acceptance figure, 300 s, is run by hand)."""




def cm_data(percent: int) -> dict[str, str]:
    return {
        "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": 65,
                                         "memoryReclaimThresholdPercent": 65, "updateTimeThresholdSeconds": 300,
                                         "resourceDiffThreshold": 0.1}),
        "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True,
                                                                     "cpuSuppressThresholdPercent": percent}}),
    }


def ls_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "prod", "uid": "uid-web",
                         "labels": {"koordinator.sh/qosClass": "LS"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "nginx", "resources": {
                "requests": {"cpu": "20", "memory": "20G"}, "limits": {"cpu": "20", "memory": "20G"}}}]},
            "status": {"phase": "Running"}}


def koordlet_token(cluster: Any) -> str:
    """The projected token of node-1's koordlet pod (seeded by the ``cluster`` fixture)."""
    return str(cluster.mint_token(NS, KOORDLET_POD, audiences=["koord-companion"]))


def threshold(holder: NodeSLOHolder) -> int | None:
    spec = holder.current().spec.resource_used_threshold_with_be
    return None if spec is None else spec.cpu_suppress_threshold_percent


@pytest.fixture
def cluster(fake_apiserver: Any) -> Any:
    fake_apiserver.seed(make_node("node-1", capacity={"cpu": "100", "memory": "120G", "pods": "110"}))
    fake_apiserver.seed(make_configmap(CM, NS, cm_data(60)))
    fake_apiserver.seed(ls_pod())
    fake_apiserver.seed(make_pod(KOORDLET_POD, NS, "node-1", service_account="koordlet"))
    return fake_apiserver


def start_companion(cluster: Any, leader_elect: bool = False, identity: str = "") -> Companion:
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                           leader_elect=leader_elect, identity=identity), api)
    companion.start()
    return companion


@pytest.fixture
def companion(cluster: Any) -> Iterator[Companion]:
    instance = start_companion(cluster)
    try:
        yield instance
    finally:
        instance.stop()


def koordlet_source(port: int, holder: NodeSLOHolder, tmp_path: Path,
                    failures: ComponentFailures, token: str) -> CompanionNodeSLOSource:
    client = CompanionClient(f"127.0.0.1:{port}", token, "node-1")
    source = CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo-companion.json",
                                    initial_backoff_seconds=0.05, max_backoff_seconds=0.5)
    source.start(failures.callback("companion-nodeslo"))
    return source


def report(port: int, pod_cpu_cores: int, token: str) -> None:
    """One koordlet report: node 50 cores / 55G used, system 7 cores / 12G, the LS pod as given."""
    status = NodeMetricStatus(
        update_time=time.time(),
        node_metric=NodeMetricInfo(node_usage=ResourceMap(50_000, 55 * G), system_usage=ResourceMap(7_000, 12 * G)),
        pods_metric=(PodMetricInfo("web", "prod", ResourceMap(pod_cpu_cores * 1000, 11 * G)),))
    sink = CompanionNodeMetricSink(CompanionClient(f"127.0.0.1:{port}", token, "node-1"))
    sink.report(status)
    assert not sink.failing


def batch(cluster: Any) -> tuple[str | None, str | None]:
    allocatable = (cluster.get("nodes", "node-1") or {}).get("status", {}).get("allocatable", {})
    return allocatable.get("kubernetes.io/batch-cpu"), allocatable.get("kubernetes.io/batch-memory")


def test_a_configmap_edit_reaches_the_koordlet(cluster: Any, companion: Companion, tmp_path: Path,
                                               failures: ComponentFailures) -> None:
    holder = NodeSLOHolder()
    source = koordlet_source(companion.server.port, holder, tmp_path, failures, koordlet_token(cluster))
    try:
        wait_until("the first NodeSLO", lambda: threshold(holder) == 60)
        started = time.monotonic()
        cluster.modify("configmaps", CM, lambda cm: cm["data"].update(cm_data(70)), namespace=NS)
        wait_until("the edited NodeSLO", lambda: threshold(holder) == 70)
        print(f"ConfigMap edit -> koordlet holder: {(time.monotonic() - started) * 1000:.0f} ms")
        bad = {"resource-threshold-config": json.dumps({"clusterStrategy": {"cpuSuppressThresholdPercent": 160}})}
        cluster.modify("configmaps", CM, lambda cm: cm["data"].update(bad), namespace=NS)
        wait_until("the refusal", lambda: "resource-threshold-config" in companion.controller.errors)
        assert "cpuSuppressThresholdPercent" in companion.controller.errors["resource-threshold-config"]
        assert threshold(holder) == 70, "the last good NodeSLO stays"
        # The object is written after the push to the koordlet: wait for that write, not just for the object.
        wait_until("the NodeSLO object with 70", lambda: (o := cluster.get("nodeslos", "node-1")) is not None
                   and o["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 70)
    finally:
        source.stop(5)


def test_batch_resources_follow_the_formula_over_a_metric_series(cluster: Any, companion: Companion) -> None:
    port, token = companion.server.port, koordlet_token(cluster)
    wait_until("the pod to be known", lambda: companion.compute_batch("node-1") is not None)
    # capacity 100 cores / 120G, reclaim 65%: margin 35 cores / 42G; system 7 cores / 12G; the LS pod's usage.
    report(port, 11, token)  # cpu 100 - 35 - 7 - 11 = 47 cores; memory 120 - 42 - 12 - 11 = 55G
    wait_until("the first batch write", lambda: batch(cluster) == ("47000", str(55 * G)))
    report(port, 30, token)  # 100 - 35 - 7 - 30 = 28 cores: -40%, above the 10% diff threshold -> written
    wait_until("the second batch write", lambda: batch(cluster) == ("28000", str(55 * G)))
    writes = cluster.count("PATCH", "nodes", subresource="status")
    report(port, 31, token)  # 27 cores: -3.6%, below 10% and within 300 s -> not written
    wait_until("the third calculation", lambda: companion.resources.batch["node-1"].batch_cpu_milli == 27000)
    time.sleep(0.2)  # the writer had its chance
    assert batch(cluster) == ("28000", str(55 * G))
    assert cluster.count("PATCH", "nodes", subresource="status") == writes
    nodemetric = wait_until("the NodeMetric object", lambda: cluster.get("nodemetrics", "node-1"))
    assert nodemetric["status"]["podsMetric"][0]["name"] == "web"
    cluster.modify("configmaps", CM, lambda cm: cm["data"].update(
        {"colocation-config": json.dumps({"enable": False})}), namespace=NS)
    wait_until("the batch resources to be removed", lambda: batch(cluster) == (None, None))


def test_one_leader_writes_and_the_other_takes_over(cluster: Any) -> None:
    first = start_companion(cluster, leader_elect=True, identity="first")
    second = start_companion(cluster, leader_elect=True, identity="second")
    try:
        wait_until("a leader", lambda: first._leading or second._leading)
        leader, standby = (first, second) if first._leading else (second, first)
        assert not standby._leading
        report(leader.server.port, 11, koordlet_token(cluster))
        wait_until("the leader's batch write", lambda: batch(cluster)[0] == "47000")
        leader.stop()
        wait_until("the standby to lead", lambda: standby._leading, timeout=20)
        report(standby.server.port, 30, koordlet_token(cluster))
        wait_until("the new leader's batch write", lambda: batch(cluster)[0] == "28000")
    finally:
        first.stop()
        second.stop()


def test_a_companion_outage_keeps_the_last_good_nodeslo(cluster: Any, tmp_path: Path,
                                                        failures: ComponentFailures) -> None:
    holder = NodeSLOHolder()
    companion = start_companion(cluster)
    source = koordlet_source(companion.server.port, holder, tmp_path, failures, koordlet_token(cluster))
    try:
        wait_until("the first NodeSLO", lambda: threshold(holder) == 60)
        generation = holder.current().generation
        port = companion.server.port
        companion.stop()
        cluster.modify("configmaps", CM, lambda cm: cm["data"].update(cm_data(75)), namespace=NS)
        deadline = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < deadline:  # the koordlet retries all along; nothing may change meanwhile
            assert holder.current().generation == generation and threshold(holder) == 60
            time.sleep(0.1)
        # Back on the same address, with the edit made while it was away.
        api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
        companion = Companion(CompanionOptions(grpc_addr=f"127.0.0.1:{port}", extender_addr="127.0.0.1:0",
                                               leader_elect=False), api)
        companion.start()
        # Bounded by the client channel's reconnect backoff (30 s at most), which grows during a long outage.
        wait_until("the catch-up", lambda: threshold(holder) == 75, timeout=45)
        assert holder.current().generation == generation + 1, "one change, no flapping"
    finally:
        source.stop(5)
        companion.stop()


def node1_eviction_api(cluster: Any, companion: Companion) -> CompanionEvictionAPI:
    """node-1's koordlet eviction path, once the companion knows ``prod/elsewhere``, a pod of node-2."""
    other = ls_pod()
    other["metadata"].update(name="elsewhere", uid="uid-elsewhere")
    other["spec"]["nodeName"] = "node-2"
    cluster.seed(other)
    client = CompanionClient(f"127.0.0.1:{companion.server.port}", koordlet_token(cluster), "node-1")
    wait_until("the pods to be known", lambda: companion._pod_nodes.get(("prod", "elsewhere")) == "node-2")
    return CompanionEvictionAPI(client)


def test_koordlet_evictions_go_through_the_eviction_api(cluster: Any, companion: Companion) -> None:
    api = node1_eviction_api(cluster, companion)
    with pytest.raises(EvictionFailed, match=r"PERMISSION_DENIED.*not on node node-1") as refused:
        api.evict("prod", "elsewhere", "BECPUEvict", "a pod of another node")
    assert "node-2" not in str(refused.value), "the refusal must not say where the pod is"
    cluster.block_eviction("prod", "web")
    with pytest.raises(EvictionFailed, match="blocked by a PodDisruptionBudget"):
        api.evict("prod", "web", "BECPUEvict", "cpu satisfaction 40% < 60%")
    cluster.block_eviction("prod", "web", blocked=False)
    api.evict("prod", "web", "BECPUEvict", "cpu satisfaction 40% < 60%")
    assert [(e["name"], e["blocked"]) for e in cluster.evictions] == [("web", True), ("web", False)]
    assert cluster.deleting("pods", "web", namespace="prod")


def test_a_pod_the_watch_has_not_delivered_is_looked_up(cluster: Any, companion: Companion) -> None:
    """A companion still listing after its start (or whose watch lags a pod the kubelet already runs) asks
    kube-apiserver where the pod is, instead of refusing a pod of the asking node: a refusal makes the koordlet
    walk on and evict its next candidate in this one's place."""
    api = node1_eviction_api(cluster, companion)
    with companion._lock:  # as before the pod list reached them
        companion._pod_nodes.clear()
    with pytest.raises(EvictionFailed, match=r"PERMISSION_DENIED.*not on node node-1") as refused:
        api.evict("prod", "elsewhere", "BECPUEvict", "a pod of another node")
    assert not refused.value.unreachable
    with pytest.raises(EvictionFailed, match=r"PERMISSION_DENIED.*prod/nosuch is not on node node-1"):
        api.evict("prod", "nosuch", "BECPUEvict", "no such pod: the same answer")
    api.evict("prod", "web", "BECPUEvict", "cpu satisfaction 40% < 60%")
    assert [(e["name"], e["blocked"]) for e in cluster.evictions] == [("web", False)]
    cluster.fail_next(10, Fault.HTTP_500, when=lambda r: r.verb == "get" and r.name == "web2")
    try:
        with pytest.raises(EvictionFailed, match="UNAVAILABLE") as down:
            api.evict("prod", "web2", "BECPUEvict", "kube-apiserver cannot say where the pod is")
    finally:
        cluster.clear_faults()
    assert down.value.unreachable, "no answer about the pod: the koordlet must not walk on"


def test_the_shipped_flags_serve_tls_and_review_the_koordlets_token(cluster: Any, tmp_path: Path,
                                                                   failures: ComponentFailures) -> None:
    """koord-companion as the manifests start it (auth defaults to tokenreview, the serving certificate from a
    Secret it bootstraps), and a koordlet configured as the DaemonSet configures it: the Secret's ``ca.crt`` and
    its projected token in files."""
    pytest.importorskip("cryptography", reason="the Secret bootstrap (koordlet.companion.certs) needs cryptography")
    args = cli.build_parser().parse_args([
        "--grpc-addr=127.0.0.1:0", "--extender-addr=127.0.0.1:0", "--metrics-addr=", "--leader-elect=false",
        f"--kube-api-server={cluster.host}", f"--kube-token-file={cluster.token_file}",
        f"--kube-ca-file={cluster.ca_file}", f"--tls-secret={NS}/koord-companion-tls", "--tls-dns-names=localhost"])
    companion = cli._build(args)
    companion.start()
    secret = cluster.get("secrets", "koord-companion-tls", namespace=NS)
    assert secret is not None
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    token_file = tmp_path / "token"
    token_file.write_text(koordlet_token(cluster))
    holder = NodeSLOHolder()
    client = CompanionClient(f"localhost:{companion.server.port}", token_from_file(str(token_file)), "node-1",
                             ca_file=str(ca_file))
    source = CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo-companion.json",
                                    initial_backoff_seconds=0.05, max_backoff_seconds=0.5)
    source.start(failures.callback("companion-nodeslo"))
    try:
        assert companion.server.authenticator.mode == "tokenreview"
        wait_until("the NodeSLO over TLS with the reviewed token", lambda: threshold(holder) == 60)
        other = CompanionClient(f"localhost:{companion.server.port}", koordlet_token(cluster), "node-2",
                                ca_file=str(ca_file))
        with pytest.raises(CompanionError, match="PERMISSION_DENIED"):
            other.evict("prod", "web", "BECPUEvict", "node-1's token speaking for node-2")
        other.close()
    finally:
        source.stop(5)
        client.close()
        companion.stop()
