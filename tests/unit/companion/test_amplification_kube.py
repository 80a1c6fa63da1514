"""Resource amplification end to end against the fake kube-apiserver (driven by the real client): the node's
CPU normalization ratio (1.50, ``defaultRatio`` for a model the config does not list) times the configured CPU
ratio gives ``node.koordinator.sh/resource-amplification-ratio``; switching amplification off leaves the CPU
normalization alone in it, and switching both off removes the annotation."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO
from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.companion.amplification import ANNOTATION_RESOURCE_AMPLIFICATION_RATIO
from koordlet.companion.app import Companion
from koordlet.statesinformer.companion import CompanionClient
from tests.fixtures.fakeapiserver import make_configmap, make_node, make_pod
from tests.fixtures.waiting import wait_until
from tests.unit.companion.test_app_kube import start_companion

NS = "koordinator-system"
CM = "slo-controller-config"
AMPLIFICATION = "resource-amplification-config"
NORMALIZATION = "cpu-normalization-config"
KOORDLET_POD = "koordlet-node-1"
G = 10**9


@pytest.fixture
def cluster(fake_apiserver: Any) -> Any:
    data = {NORMALIZATION: json.dumps({"enable": True, "defaultRatio": 1.5}),
            AMPLIFICATION: json.dumps({"enable": True, "resourceAmplificationRatio": {"cpu": 1.2, "memory": 1.1}})}
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


def report_basic_info(cluster: Any, port: int) -> None:
    """The koordlet's CPU basic info (a model without a ``ratioModel`` entry: ``defaultRatio`` applies)."""
    token = str(cluster.mint_token(NS, KOORDLET_POD, audiences=["koord-companion"]))
    status = NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(10_000, 10 * G), system_usage=ResourceMap(1_000, G)))
    basic = {"cpuModel": "AMD EPYC 7763", "hyperThreadEnabled": True}
    client = CompanionClient(f"127.0.0.1:{port}", token, "node-1")
    try:
        assert client.report(status, topology_json=json.dumps({"cpuBasicInfo": basic}).encode()).accepted
    finally:
        client.close()


def annotations(cluster: Any) -> tuple[str | None, str | None]:
    found = (cluster.get("nodes", "node-1") or {}).get("metadata", {}).get("annotations") or {}
    return found.get(ANNOTATION_CPU_NORMALIZATION_RATIO), found.get(ANNOTATION_RESOURCE_AMPLIFICATION_RATIO)


def set_config(cluster: Any, key: str, value: Any) -> None:
    cluster.modify("configmaps", CM, lambda cm: cm["data"].update({key: json.dumps(value)}), namespace=NS)


def test_amplification_written_changed_and_removed(cluster: Any, companion: Companion) -> None:
    wait_until("the node to be known", lambda: companion.compute_batch("node-1") is not None)
    report_basic_info(cluster, companion.server.port)
    # 1.2 x 1.50 is 1.7999999999999998 in float64; upstream's Ratio prints two decimals.
    wait_until("the amplification ratio", lambda: annotations(cluster) == ("1.50", '{"cpu":1.80,"memory":1.10}'))

    # Amplification off: the CPU normalization alone still amplifies the CPU (upstream does the same).
    set_config(cluster, AMPLIFICATION, {"enable": False, "resourceAmplificationRatio": {"cpu": 1.2, "memory": 1.1}})
    wait_until("the normalization-only ratio", lambda: annotations(cluster) == ("1.50", '{"cpu":1.50}'))

    # Normalization off too: the ratio resets to "1.00", no resource is amplified, the annotation goes.
    set_config(cluster, NORMALIZATION, {"enable": False})
    wait_until("the removed annotation", lambda: annotations(cluster) == ("1.00", None))


def test_a_ratio_below_one_leaves_the_annotation_and_a_bad_edit_keeps_the_last_good(
        cluster: Any, companion: Companion) -> None:
    wait_until("the node to be known", lambda: companion.compute_batch("node-1") is not None)
    report_basic_info(cluster, companion.server.port)
    wait_until("the amplification ratio", lambda: annotations(cluster)[1] == '{"cpu":1.80,"memory":1.10}')
    set_config(cluster, AMPLIFICATION, {"enable": True, "resourceAmplificationRatio": {"memory": 0.9}})
    wait_until("the new config", lambda: companion.controller.amplification_for("node-1")
               .resource_amplification_ratio == {"memory": 0.9})
    set_config(cluster, AMPLIFICATION, {"enable": True, "resourceAmplificationRatio": {"memory": "lots"}})
    wait_until("the refusal", lambda: AMPLIFICATION in companion.controller.errors)
    assert annotations(cluster)[1] == '{"cpu":1.80,"memory":1.10}'  # neither edit changed the node
    set_config(cluster, AMPLIFICATION, {"enable": True, "resourceAmplificationRatio": {"memory": 2}})
    wait_until("the fixed config", lambda: annotations(cluster)[1] == '{"cpu":1.50,"memory":2.00}')
