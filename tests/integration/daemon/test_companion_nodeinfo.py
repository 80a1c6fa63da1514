"""The assembled koordlet gets its Kubernetes Node from the companion (``informer.kube_node()``, what the
allocatable evictions and CPU normalization read), follows its changes, and keeps it across a restart while the
companion is away (persisted with the NodeSLO).  The daemon's hooks scale quotas by the Node's CPU normalization
ratio (a 2-CPU limit, 200000 us per 100 ms, is ceil(200000 / 1.25) = 160000 us on this node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.runtimehooks.framework import HookRequest, Stage
from koordlet.statesinformer.nodeinfo import ResourcePair
from tests.fixtures.agentrun import running
from tests.fixtures.waiting import wait_until
from tests.integration.daemon.test_companion_link import build, config


def node(batch_cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": "node-link", "labels": {}, "annotations": {
                "node.koordinator.sh/cpu-normalization-ratio": "1.25"}},
            "status": {"capacity": {"cpu": "8", "memory": "16Gi"},
                       "allocatable": {"kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "8Gi"}}}


def batch(agent: Any) -> ResourcePair | None:
    kube = agent.informer.kube_node()
    return None if kube is None else kube.batch_allocatable()


def ls_quota(agent: Any) -> object:
    """The quota the agent's hooks give a new LS container with a 2-CPU limit."""
    container = Container("c", "", Resources(), Resources(cpu_milli=2000))
    pod = Pod(uid="u1", name="p", namespace="ns", labels={LABEL_QOS: "LS"}, annotations={}, kube_qos=None,
              phase="Pending", priority=None, containers=(container,))
    result = agent.hooks.runner.run(HookRequest(Stage.PRE_CREATE_CONTAINER, pod, "kubepods/burstable/podu1",
                                                container, "cid"))
    return result.adjustment.values.get("cpu_quota")


def test_the_node_reaches_the_informer_and_survives_a_restart(tmp_path: Path) -> None:
    slo = tmp_path / "slo-controller-config.yaml"
    slo.write_text("data: {}\n")
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                           config_file=str(slo)))
    companion.start()
    port = companion.server.port
    try:
        companion.set_node(node("6000"))  # what the Node watch does with Kubernetes
        with running(build(config(tmp_path, port, featureGates={"CPUNormalization": True}), tmp_path)) as agent:
            wait_until("the Node in the informer", lambda: batch(agent) == ResourcePair(6000, 8 << 30))
            assert agent.informer.kube_node().cpu_normalization_ratio() == 1.25
            assert ls_quota(agent) == 160_000
            companion.set_node(node("2000"))
            wait_until("the changed Node", lambda: batch(agent) == ResourcePair(2000, 8 << 30))
    finally:
        companion.stop()
    with running(build(config(tmp_path, port), tmp_path)) as agent:
        assert batch(agent) == ResourcePair(2000, 8 << 30), "the persisted Node is in force at start"
