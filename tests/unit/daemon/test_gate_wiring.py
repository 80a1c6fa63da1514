"""Gates read only where the agent is assembled (:func:`koordlet.daemon.agent.build_agent`): NodeTopologyReport
hands the topology source its switch, NodeMetricPromMetrics gives the NodeMetric runner its Prometheus recorder.

The agent is built, not started, on a fake host (its sysfs, procfs and cgroup roots below ``tmp_path``), so the
gate's wiring is tested without root; ``tests/integration/daemon`` repeats both on the real host.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import Agent, build_agent
from koordlet.metriccache import names
from koordlet.statesinformer.nodemetric import NodeMetricRunner
from koordlet.statesinformer.topology import TopologySource
from koordlet.system.node import read_node_info
from tests.fixtures.fakehost import FakeHost
from tests.fixtures.isolation import private_settings, write_config

NODE = "gate-wiring-node"


def agent_on(fake_host: FakeHost, tmp_path: Path, feature_gates: dict[str, bool], **settings: Any) -> Agent:
    """The agent built on the fake host with ``feature_gates`` and further config ``settings`` (YAML keys)."""
    paths = fake_host.paths
    fake_host.write_sys("devices/system/node/node0/meminfo", "Node 0 MemTotal:       16777216 kB\n")
    config = load(write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, "koordlet-test-absent", nodeName=NODE, standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False},
        host={"cgroupRootDir": paths.cgroup_root, "procRootDir": paths.proc_root, "sysRootDir": paths.sys_root,
              "varRunRootDir": str(tmp_path / "run")},
        featureGates=feature_gates, **settings)))
    return build_agent(config, tmp_path / "state", read_node_info(paths, native))


def component(agent: Agent, kind: type[Any]) -> Any:
    return next(c for c in agent.components if isinstance(c, kind))


@pytest.mark.parametrize("gate", [True, False])
def test_topology_reported_only_with_the_gate(fake_host: FakeHost, tmp_path: Path, gate: bool) -> None:
    agent = agent_on(fake_host, tmp_path, {"NodeTopologyReport": gate})
    topology = component(agent, TopologySource)
    assert topology.refresh()  # the CPU topology is re-read either way
    agent.informer.sync_standalone()  # the first pod list: the pools are known
    report = topology.current()
    if gate:
        assert report is not None
        assert [d["id"] for d in report["cpuTopology"]["detail"]] == [0, 1, 2, 3]
    else:
        assert report is None


@pytest.mark.parametrize("gate", [True, False])
def test_node_metric_gauges_only_with_the_gate(fake_host: FakeHost, tmp_path: Path, gate: bool) -> None:
    agent = agent_on(fake_host, tmp_path, {"NodeMetricPromMetrics": gate})
    now = time.time()
    agent.cache.append(names.NODE_CPU_USAGE, (), now, 1.5)
    agent.cache.append(names.NODE_MEMORY_USAGE, (), now, 2.0 * 2**30)
    component(agent, NodeMetricRunner).run_once()
    usage = agent.metrics.internal.get_sample_value(
        "koordlet_node_metric_node_usage", {"node": NODE, "resource": "cpu", "unit": "core"})
    assert usage == (1.5 if gate else None)
