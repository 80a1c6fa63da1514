"""NodeMetricPromMetrics: the assembled agent exports each NodeMetric report as gauges only with the gate on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.metriccache import names
from koordlet.statesinformer.nodemetric import NodeMetricRunner
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.isolation import private_settings, write_config


@pytest.mark.parametrize("gate", [True, False])
def test_node_metric_gauges_follow_the_gate(tmp_path: Path, gate: bool) -> None:
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, f"koordlet-test-{os.getpid()}-absent", standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False},
        featureGates={"NodeMetricPromMetrics": gate}))
    config = load(config_file)
    agent = build_agent(config, tmp_path / "state", read_node_info(HostPaths(), native))
    now = time.time()
    agent.cache.append(names.NODE_CPU_USAGE, (), now, 1.5)
    agent.cache.append(names.NODE_MEMORY_USAGE, (), now, 2.0 * 2**30)
    runner = next(c for c in agent.components if isinstance(c, NodeMetricRunner))
    runner.run_once()
    node = agent.metrics.internal.get_sample_value(
        "koordlet_node_metric_node_usage", {"node": config.node_name, "resource": "cpu", "unit": "core"})
    assert (node == 1.5) if gate else (node is None)
