"""Where the agent builds the PSI trigger watcher (issue 23): only when the kernel takes triggers (probe
``psi_trigger``) and ``qos.pressureTriggers`` names some; a bad trigger stops the start with its name; without
CAP_SYS_RESOURCE (this host) the windows are widened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import Agent, build_agent
from koordlet.errors import ConfigError
from koordlet.qosmanager.pressure import PressureWatcher, has_cap_sys_resource
from koordlet.system.node import read_node_info
from tests.fixtures.fakehost import FakeHost
from tests.fixtures.isolation import private_settings, write_config


def agent_on(fake_host: FakeHost, tmp_path: Path, probes: dict[str, bool], **qos: Any) -> Agent:
    fake_host.set_mode("hybrid")
    paths = fake_host.paths
    fake_host.write_sys("devices/system/node/node0/meminfo", "Node 0 MemTotal:       16777216 kB\n")
    config = load(write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, "koordlet-test-absent", nodeName="pressure-node", standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False},
        host={"cgroupRootDir": paths.cgroup_root, "procRootDir": paths.proc_root, "sysRootDir": paths.sys_root,
              "varRunRootDir": str(tmp_path / "run")}, qos=qos)))
    return build_agent(config, tmp_path / "state", read_node_info(paths, native), probes=probes)


def watchers(agent: Agent) -> list[PressureWatcher]:
    return [c for c in agent.components if isinstance(c, PressureWatcher)]


def test_the_default_triggers_run_where_the_kernel_takes_them(fake_host: FakeHost, tmp_path: Path) -> None:
    agent = agent_on(fake_host, tmp_path, {"psi_trigger": True})
    (watcher,) = watchers(agent)
    status = {s["name"]: s for s in watcher.status()}
    assert list(status) == ["node-memory-some", "kubepods-memory-some", "besteffort-cpu-some"]
    assert status["node-memory-some"]["path"] == fake_host.paths.proc("pressure", "memory")
    # kubepods below the kube parent (cgroupKubeParent), in the unified hierarchy: per-cgroup PSI on hybrid hosts.
    kubepods = status["kubepods-memory-some"]["path"]
    assert "/unified/koordlet-test-absent/kubepods" in kubepods and kubepods.endswith("/memory.pressure")
    assert status["besteffort-cpu-some"]["wakes"] == ["cpuevict"]
    widened = not has_cap_sys_resource()
    assert all(("widened" in s["note"]) == widened for s in status.values())
    # The watcher starts after the QoS manager it wakes, and stops before it.
    names = [c.name for c in agent.components]
    assert names.index("qosmanager") < names.index("pressurewatcher")


@pytest.mark.parametrize(("probes", "qos"), [({"psi_trigger": False}, {}), ({"psi_trigger": True},
                                                                            {"pressureTriggers": ""})])
def test_no_watcher_without_kernel_support_or_triggers(fake_host: FakeHost, tmp_path: Path, probes: dict[str, bool],
                                                       qos: dict[str, str]) -> None:
    assert watchers(agent_on(fake_host, tmp_path, probes, **qos)) == []


def test_a_bad_trigger_stops_the_start_naming_it(fake_host: FakeHost, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"qos\.pressureTriggers: 'node memory most 1 1000000'"):
        agent_on(fake_host, tmp_path, {"psi_trigger": True}, pressureTriggers="node memory most 1 1000000")
