"""CPU normalization end to end against the fake kube-apiserver (driven by the real client): a koordlet reports
its CPU basic info with its topology, the companion looks the ratio up in ``cpu-normalization-config`` (the
shipped sample), patches the Node annotation ``node.koordinator.sh/cpu-normalization-ratio``, amplifies the
node's batch-cpu by it, and the koordlet receives the ratio back with its node; a node label switching
normalization off resets the ratio to "1.00" and the batch-cpu to the plain formula."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO, LABEL_CPU_NORMALIZATION_ENABLED
from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, PodMetricInfo, ResourceMap
from koordlet.apis.sloconfig import configmap_data_from_yaml
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import make_api_client
from koordlet.statesinformer.companion import CompanionClient
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.cpubasicinfo import NormalizationRatio
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakeapiserver import make_configmap, make_node, make_pod
from tests.fixtures.waiting import wait_until
from tests.unit.companion.test_app_kube import start_companion

NS = "koordinator-system"
CM = "slo-controller-config"
G = 10**9
KOORDLET_POD = "koordlet-node-1"
SAMPLE = "reference/koordinator-samples/slo-configs/cpu-normalization.yaml"
MODEL = "Intel Xeon Platinum 8369B CPU @ 2.90GHz"  # the sample: hyperThreadTurboEnabledRatio 1.20


@pytest.fixture
def cluster(fake_apiserver: Any, shared_dir: Path) -> Any:
    sample = configmap_data_from_yaml((shared_dir / SAMPLE).read_text(encoding="utf-8"))
    data = {"colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": 65,
                                             "memoryReclaimThresholdPercent": 65}), **sample}
    fake_apiserver.seed(make_node("node-1", capacity={"cpu": "100", "memory": "120G", "pods": "110"}))
    fake_apiserver.seed(make_configmap(CM, NS, data))
    fake_apiserver.seed(make_pod(KOORDLET_POD, NS, "node-1", service_account="koordlet"))
    return fake_apiserver


@pytest.fixture
def companion(cluster: Any) -> Iterator[Companion]:
    instance = start_companion(cluster)
    try:
        yield instance
    finally:
        instance.stop()


def token(cluster: Any) -> str:
    return str(cluster.mint_token(NS, KOORDLET_POD, audiences=["koord-companion"]))


def report(port: int, tok: str, basic_info: dict[str, Any]) -> None:
    """node 50 cores used, system 7 cores / 12G, one pod 11 cores / 11G: batch-cpu 100 - 35 - 7 - 11 = 47 cores."""
    status = NodeMetricStatus(
        update_time=time.time(),
        node_metric=NodeMetricInfo(node_usage=ResourceMap(50_000, 55 * G), system_usage=ResourceMap(7_000, 12 * G)),
        pods_metric=(PodMetricInfo("web", "prod", ResourceMap(11_000, 11 * G)),))
    client = CompanionClient(f"127.0.0.1:{port}", tok, "node-1")
    try:
        response = client.report(status, topology_json=json.dumps({"cpuBasicInfo": basic_info}).encode())
    finally:
        client.close()
    assert response.accepted


def node_facts(cluster: Any) -> tuple[str | None, str | None]:
    node = cluster.get("nodes", "node-1") or {}
    ratio = (node.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_CPU_NORMALIZATION_RATIO)
    return ratio, node.get("status", {}).get("allocatable", {}).get("kubernetes.io/batch-cpu")


def test_ratio_written_batch_amplified_and_sent_to_the_koordlet(cluster: Any, companion: Companion, tmp_path: Path,
                                                                failures: ComponentFailures) -> None:
    tok = token(cluster)
    wait_until("the node to be known", lambda: companion.compute_batch("node-1") is not None)
    report(companion.server.port, tok, {"cpuModel": MODEL, "hyperThreadEnabled": True, "turboEnabled": True})
    # 47000 x 1.20 (upstream MultiplyMilliQuant, rounded up to a whole unit) = 56400
    wait_until("the ratio and the amplified batch-cpu", lambda: node_facts(cluster) == ("1.20", "56400"))

    # The koordlet gets its Node (with the annotation) alongside its NodeSLO and reads the ratio from it.
    nodes: list[Any] = []
    client = CompanionClient(f"127.0.0.1:{companion.server.port}", tok, "node-1")
    source = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "nodeslo.json", on_node=nodes.append,
                                    initial_backoff_seconds=0.05, max_backoff_seconds=0.5)
    source.start(failures.callback("companion-nodeslo"))
    try:
        ratio = NormalizationRatio(lambda: nodes[-1].annotations if nodes else None)
        wait_until("the koordlet's ratio", lambda: ratio() == 1.2)

        # The node label wins over the strategy: off -> "1.00", batch-cpu back to the plain formula.
        cluster.modify("nodes", "node-1",
                       lambda n: n["metadata"]["labels"].update({LABEL_CPU_NORMALIZATION_ENABLED: "false"}))
        wait_until("the reset ratio", lambda: node_facts(cluster) == ("1.00", "47000"))
        wait_until("the koordlet's reset ratio", lambda: ratio() == 1.0)
    finally:
        source.stop()
        client.close()


def test_a_model_without_a_ratio_leaves_the_node_alone(cluster: Any, companion: Companion) -> None:
    tok = token(cluster)
    wait_until("the node to be known", lambda: companion.compute_batch("node-1") is not None)
    report(companion.server.port, tok, {"cpuModel": "AMD EPYC 7763", "hyperThreadEnabled": True})
    wait_until("the plain batch-cpu", lambda: node_facts(cluster)[1] == "47000")
    assert node_facts(cluster)[0] is None  # no annotation: no ratio for that model and no defaultRatio
    assert [r for r in cluster.requests if r.verb == "PATCH" and r.resource == "nodes" and not r.subresource] == []
    # A config edit giving a default ratio normalizes it.
    cluster.modify("configmaps", CM, lambda cm: cm["data"].update(
        {"cpu-normalization-config": json.dumps({"enable": True, "defaultRatio": 1.5})}), namespace=NS)
    wait_until("the default ratio", lambda: node_facts(cluster) == ("1.50", "70500"))
    # A bad edit is refused; the last good config stays (the ratio does not move).
    cluster.modify("configmaps", CM, lambda cm: cm["data"].update(
        {"cpu-normalization-config": json.dumps({"enable": True, "defaultRatio": "fast"})}), namespace=NS)
    wait_until("the refusal", lambda: "cpu-normalization-config" in companion.controller.errors)
    assert node_facts(cluster) == ("1.50", "70500")


def test_the_leader_reads_the_basic_info_of_the_node_resource_topology(cluster: Any, companion: Companion) -> None:
    # The koordlet reported to another replica: only the NodeResourceTopology carries its basic info.
    basic = json.dumps({"cpuModel": MODEL, "hyperThreadEnabled": True, "turboEnabled": True})
    cluster.seed({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                  "metadata": {"name": "node-1", "annotations": {"node.koordinator.sh/cpu-basic-info": basic}},
                  "topologyPolicies": ["None"], "zones": []})
    cluster.modify("nodes", "node-1", lambda n: n["metadata"]["labels"].update({"pool": "a"}))  # a Node event
    wait_until("the ratio from the NodeResourceTopology", lambda: node_facts(cluster)[0] == "1.20")


def test_a_restarted_companion_keeps_the_nodes_ratio_until_it_can_decide(cluster: Any) -> None:
    # The Node carries the ratio a previous companion wrote (its koordlet divides quotas by it); this companion
    # has no report yet and no NodeResourceTopology to read: it leaves the annotation and amplifies by it.
    cluster.modify("nodes", "node-1", lambda n: n["metadata"].setdefault("annotations", {}).update(
        {ANNOTATION_CPU_NORMALIZATION_RATIO: "1.20"}))
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                           leader_elect=False), api)
    companion.start()
    try:
        wait_until("the node to be known", lambda: companion.compute_batch("node-1") is not None)
        report(companion.server.port, token(cluster), {})  # no CPU model in the report
        wait_until("the batch-cpu amplified by the node's ratio", lambda: node_facts(cluster) == ("1.20", "56400"))
    finally:
        companion.stop()
