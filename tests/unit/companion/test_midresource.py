"""Mid-tier resources: upstream's midresource formula (``plugins/midresource/plugin.go`` and
``CalculateMidResourceByPolicy``), and the companion writing ``kubernetes.io/mid-cpu``/``mid-memory`` on the
Node from a koordlet's prodReclaimableMetric (the fake kube-apiserver with the real client)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ReclaimableMetric, ResourceMap
from koordlet.apis.sloconfig import ColocationStrategy
from koordlet.companion import midresource
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.batchresource import CPUMemory, NodeInput, PodInput
from koordlet.companion.kube import make_api_client
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
from tests.fixtures.fakeapiserver import make_configmap, make_node, make_pod
from tests.fixtures.waiting import wait_until

G = 10**9
NS = "koordinator-system"
NOW = 1_700_000_000.0


def strategy(**kw: Any) -> ColocationStrategy:
    return ColocationStrategy(enable=True, **kw)


USAGE = ResourceMap(50_000, 55 * G)
SYSTEM = ResourceMap(7_000, 12 * G)


def metric(reclaimable: ResourceMap | None, *, usage: ResourceMap = USAGE, system: ResourceMap = SYSTEM,
           at: float = NOW) -> NodeMetricStatus:
    return NodeMetricStatus(update_time=at, node_metric=NodeMetricInfo(node_usage=usage, system_usage=system),
                            prod_reclaimable_metric=None if reclaimable is None else ReclaimableMetric(reclaimable))


NODE = NodeInput(name="n", capacity=CPUMemory(100_000, 120 * G), allocatable=CPUMemory(96_000, 116 * G))
PROD = PodInput(uid="u1", namespace="p", name="web", phase="Running", requests=CPUMemory(40_000, 50 * G),
                priority_class=PriorityClass.PROD, qos=QoSClass.LS)
MID = PodInput(uid="u2", namespace="p", name="mid", phase="Running", requests=CPUMemory(10_000, 10 * G),
               priority_class=PriorityClass.MID, qos=QoSClass.LS)


@pytest.mark.parametrize(("name", "kw", "reclaimable", "expected"), [
    # min(prodReclaimable 20 cores / 30G, unused 50 / 65G); thresholds 100 %, unallocated 0 %.
    ("reclaimable", {}, ResourceMap(20_000, 30 * G), (20_000, 30 * G)),
    # capped by nodeUnused: 100 - 50 cores, 120 - 55 G.
    ("capped by unused", {}, ResourceMap(70_000, 90 * G), (50_000, 65 * G)),
    # capped at capacity x threshold: 15 % of 100 cores, 20 % of 120G.
    ("thresholds", {"mid_cpu_threshold_percent": 15, "mid_memory_threshold_percent": 20},
     ResourceMap(20_000, 30 * G), (15_000, 24 * G)),
    # unallocated = capacity - max(kubelet 4 cores/4G, system 7 cores/12G) - prod requests 40/50G = 53 / 58G;
    # 50 % of it added: 20 + 26.5 cores, 30 + 29 G.
    ("unallocated", {"mid_unallocated_percent": 50}, ResourceMap(20_000, 30 * G), (46_500, 59 * G)),
    # no prediction: zero reclaimable (upstream does not degrade, it counts zero).
    ("no prediction", {}, None, (0, 0)),
    ("empty prediction", {}, ResourceMap(), (0, 0)),
])
def test_mid_formula(name: str, kw: dict[str, Any], reclaimable: ResourceMap | None,
                     expected: tuple[int, int]) -> None:
    result = midresource.calculate(NODE, [PROD, MID], metric(reclaimable), strategy(**kw), NOW)
    assert (result.mid_cpu_milli, result.mid_memory_bytes) == expected
    assert not result.degraded


@pytest.mark.parametrize(("kw", "expected"), [
    # upstream CalculateMidResourceByStaticMode: 30 % of 100 cores, 25 % of 120G; the usage does not count.
    ({"mid_static_cpu_reserved_percent": 30, "mid_static_memory_reserved_percent": 25}, (30_000, 30 * G)),
    # capped at capacity x threshold: 20 % of 100 cores; memory 25 % is under its 50 %.
    ({"mid_static_cpu_reserved_percent": 30, "mid_static_memory_reserved_percent": 25,
      "mid_cpu_threshold_percent": 20, "mid_memory_threshold_percent": 50}, (20_000, 30 * G)),
    # the static shares default to 0.
    ({}, (0, 0)),
])
def test_static_mode(kw: dict[str, Any], expected: tuple[int, int]) -> None:
    result = midresource.calculate(NODE, [PROD, MID], metric(ResourceMap(20_000, 30 * G)),
                                   strategy(mid_reclaim_mode="static", **kw), NOW)
    assert (result.mid_cpu_milli, result.mid_memory_bytes) == expected
    stale = midresource.calculate(NODE, [], metric(None, at=NOW - 16 * 60),
                                  strategy(mid_reclaim_mode="static", **kw), NOW)
    assert stale.degraded and stale.mid_cpu_milli is None, "a stale NodeMetric resets static mid too"


def test_static_mode_from_the_configmap_and_a_bad_mode_refused() -> None:
    from koordlet.apis.sloconfig import render_colocation

    good, errors = render_colocation({"colocation-config": json.dumps({
        "enable": True, "midReclaimMode": "static", "midStaticCPUReservedPercent": 10,
        "midStaticMemoryReservedPercent": 5})}, {})
    assert errors == ()
    assert (good.mid_reclaim_mode, good.mid_static_cpu_reserved_percent, good.mid_static_memory_reserved_percent) == (
        "static", 10, 5)
    bad, errors = render_colocation({"colocation-config": json.dumps({"enable": True, "midReclaimMode": "Static"})},
                                    {})
    assert errors and "midReclaimMode" in str(errors[0]) and bad.mid_reclaim_mode is None


def test_stale_metric_or_disabled_colocation_removes_mid() -> None:
    stale = midresource.calculate(NODE, [], metric(ResourceMap(1, 1), at=NOW - 16 * 60), strategy(), NOW)
    assert (stale.mid_cpu_milli, stale.mid_memory_bytes, stale.degraded) == (None, None, True)
    off = midresource.calculate(NODE, [], metric(ResourceMap(1, 1)), ColocationStrategy(enable=False), NOW)
    assert (off.mid_cpu_milli, off.mid_memory_bytes) == (None, None)


# ---------------------------------------------------------------------------------------------- via kube-apiserver

def colocation(**extra: Any) -> dict[str, str]:
    return {"colocation-config": json.dumps({"enable": True, "resourceDiffThreshold": 0.1,
                                             "updateTimeThresholdSeconds": 300, **extra})}


@pytest.fixture
def cluster(fake_apiserver: Any) -> Any:
    fake_apiserver.seed(make_node("node-1", capacity={"cpu": "100", "memory": "120G", "pods": "110"}))
    fake_apiserver.seed(make_configmap("slo-controller-config", NS, colocation(midCPUThresholdPercent=15)))
    fake_apiserver.seed(make_pod("koordlet-node-1", NS, "node-1", service_account="koordlet"))
    return fake_apiserver


@pytest.fixture
def companion(cluster: Any) -> Iterator[Companion]:
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0"), api)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def mid(cluster: Any) -> tuple[str | None, str | None]:
    allocatable = (cluster.get("nodes", "node-1") or {}).get("status", {}).get("allocatable", {})
    return allocatable.get("kubernetes.io/mid-cpu"), allocatable.get("kubernetes.io/mid-memory")


def report(companion: Companion, cluster: Any, reclaimable: ResourceMap) -> None:
    token = cluster.mint_token(NS, "koordlet-node-1", audiences=["koord-companion"])
    sink = CompanionNodeMetricSink(CompanionClient(f"127.0.0.1:{companion.server.port}", token, "node-1"))
    sink.report(metric(reclaimable, at=time.time()))
    assert not sink.failing


def test_companion_writes_mid_resources_from_prod_reclaimable(cluster: Any, companion: Companion) -> None:
    wait_until("the node to be known", lambda: companion.compute_mid("node-1") is not None)
    # capacity 100 cores / 120G, usage 50 cores / 55G: unused 50 / 65G.  CPU capped at 15 % of 100 cores.
    report(companion, cluster, ResourceMap(20_000, 30 * G))
    wait_until("the first mid write", lambda: mid(cluster) == ("15000", str(30 * G)))
    report(companion, cluster, ResourceMap(10_000, 90 * G))  # memory capped by unused: 65G
    wait_until("the second mid write", lambda: mid(cluster) == ("10000", str(65 * G)))
    cluster.modify("configmaps", "slo-controller-config",
                   lambda cm: cm["data"].update({"colocation-config": json.dumps({"enable": False})}), namespace=NS)
    wait_until("the mid resources to be removed", lambda: mid(cluster) == (None, None))


def test_shared_sample_mid_thresholds_apply(shared_dir: Any) -> None:
    """Koordinator's node-prediction proposal ConfigMap: midCPUThresholdPercent 60, midMemoryThresholdPercent
    70 cap mid-cpu / mid-memory at 60 % / 70 % of capacity (its ``predictPolicy`` key is not a field upstream
    reads, so it is ignored there and here)."""
    from koordlet.apis.sloconfig import configmap_data_from_yaml, render_colocation

    path = shared_dir / "reference" / "koordinator-samples" / "slo-configs" / "colocation-mid-tier-node-prediction.yaml"
    strategy_, errors = render_colocation(configmap_data_from_yaml(path.read_text()), {})
    assert errors == ()
    assert (strategy_.mid_cpu_threshold_percent, strategy_.mid_memory_threshold_percent) == (60, 70)
    result = midresource.calculate(NODE, [PROD], metric(ResourceMap(80_000, 100 * G), usage=ResourceMap(0, 0)),
                                   strategy_, NOW)
    assert (result.mid_cpu_milli, result.mid_memory_bytes) == (60_000, 84 * G)
