"""The assembled koordlet linked to a companion: its QoS manager runs the companion's NodeSLO, its NodeMetric
reports reach the companion, and a restart while the companion is away keeps the persisted NodeSLO."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.errors import ConfigError
from koordlet.statesinformer.nodemetric import NodeMetricRunner
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.agentrun import running
from tests.fixtures.isolation import private_settings, write_config
from tests.fixtures.waiting import wait_until


def config(tmp_path: Path, port: int, **extra: Any) -> Path:
    # A kube parent of its own that does not exist: no pods, and none of the host's.
    return write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, f"koordlet-test-{os.getpid()}-absent", standalone=True, nodeName="node-link",
        discoverKubepods=False, runtimeHooks={"enableServer": False, "enableNri": False},
        companion={"address": f"127.0.0.1:{port}"}, **extra))


def build(path: Path, tmp_path: Path) -> Any:
    return build_agent(load(path), tmp_path / "state", read_node_info(HostPaths(), native))


def suppress_threshold(agent: Any) -> int | None:
    spec = agent.qos.holder.current().spec.resource_used_threshold_with_be
    return None if spec is None else spec.cpu_suppress_threshold_percent


def test_the_koordlet_runs_the_companions_nodeslo_and_reports_to_it(tmp_path: Path) -> None:
    slo = tmp_path / "slo-controller-config.yaml"
    threshold = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 55}})
    slo.write_text(f"data:\n  resource-threshold-config: '{threshold}'\n")
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                           config_file=str(slo)))
    companion.start()
    port = companion.server.port
    try:
        with running(build(config(tmp_path, port), tmp_path)) as agent:
            wait_until("the companion's NodeSLO in the QoS manager", lambda: suppress_threshold(agent) == 55)
            reporter = next(c for c in agent.components if isinstance(c, NodeMetricRunner))
            reporter.run_once()  # the next scheduled report is a minute away
            wait_until("a NodeMetric report at the companion", lambda: companion.store.views(["node-link"])[0])
    finally:
        companion.stop()
    # Restarted while the companion is away: the persisted NodeSLO is in force before any QoS round.
    with running(build(config(tmp_path, port), tmp_path)) as agent:
        assert suppress_threshold(agent) == 55
        assert "persisted" in agent.qos.holder.current().origin


def test_companion_and_a_nodeslo_file_are_one_source_too_many(tmp_path: Path) -> None:
    path = config(tmp_path, 1, qos={"nodesloFile": str(tmp_path / "nodeslo.yaml")})
    with pytest.raises(ConfigError, match=r"companion\.address and qos\.nodesloFile"):
        build_agent(load(path), tmp_path / "state", read_node_info(HostPaths(), native))
