"""NodeTopologyReport on the assembled agent and the real host: the CPU topology is re-read through the C core
every ``collector.nodeCpuInfoIntervalSeconds`` and reported only with the gate on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.statesinformer.topology import TopologySource
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from koordlet.system.numamemory import read_numa_memory
from koordlet.system.validators import parse_cpulist
from tests.fixtures.isolation import private_settings, write_config


@pytest.mark.parametrize("gate", [True, False])
def test_topology_reported_from_the_real_host_only_with_the_gate(tmp_path: Path, gate: bool) -> None:
    config = load(write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, f"koordlet-test-{os.getpid()}-absent", standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False},
        collector={"nodeCpuInfoIntervalSeconds": 7},
        featureGates={"NodeTopologyReport": gate})))
    paths = HostPaths()
    agent = build_agent(config, tmp_path / "state", read_node_info(paths, native))
    topology = next(c for c in agent.components if isinstance(c, TopologySource))
    assert topology.interval_seconds == 7
    # Started right after the informer, before the collectors and the first NodeMetric report.
    names = [c.name for c in agent.components]
    assert names.index("node-topology") == names.index("statesinformer") + 1
    assert topology.refresh()
    agent.informer.sync_standalone()  # the first pod list: the pools are known
    report = topology.current()
    if not gate:
        assert report is None
        return
    assert report is not None
    with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
        online = parse_cpulist(f.read())
    assert [d["id"] for d in report["cpuTopology"]["detail"]] == online
    numa = read_numa_memory(paths) or {0: agent.informer.node().memory_total_bytes}
    assert [z["name"] for z in report["zones"]] == [f"node-{n}" for n in sorted(numa)]
    assert sum(int(next(r["capacity"] for r in z["resources"] if r["name"] == "cpu")) for z in report["zones"]) == (
        len(online))
    assert report["kubeletCPUManagerPolicy"] == {}  # a plain host: no kubelet policy to report
    # Nothing bound or reserved on this standalone host: every online CPU is in the LS and BE pools.
    for key in ("cpuSharedPools", "beCPUSharedPools"):
        assert sorted(c for p in report[key] for c in parse_cpulist(p["cpuset"])) == online
