"""The assembled agent with NodeSLO ``hostApplications`` from its NodeSLO file: the application's cgroup
(under the test's own prefix) with a busy process is collected, reported in NodeMetric's
``hostApplicationMetric`` with its priority and QoS, and left out of the system usage."""

from __future__ import annotations

import json
import time
from pathlib import Path

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.metriccache import names
from koordlet.statesinformer import hostapps
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.agentrun import running
from tests.fixtures.isolation import private_settings, write_config
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until
from tests.integration.daemon.test_agent import collect_for


def test_host_app_from_the_nodeslo_file_is_reported(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    groups = real_cgroups
    groups.mkdir("nginx")
    groups.spawn("nginx", "while True: pass")
    nodeslo = tmp_path / "nodeslo.json"
    nodeslo.write_text(json.dumps({"hostApplications": [
        {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"base": "CgroupRoot", "parentDir": groups.name, "relativePath": "nginx/"}}]}))
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, f"{groups.name}/absent", standalone=True, discoverKubepods=False,
        qos={"nodesloFile": str(nodeslo)}, runtimeHooks={"enableServer": False, "enableNri": False}))
    agent = build_agent(load(config_file), tmp_path / "state", read_node_info(HostPaths(), native))
    with running(agent):
        wait_until("the NodeSLO file in force", lambda: agent.qos.holder.current().origin.startswith("file:"))
        start = groups.cpu_usage_ns("nginx"), time.time()
        collect_for(agent, 2.0)
        kernel_cores = (groups.cpu_usage_ns("nginx") - start[0]) / 1e9 / (time.time() - start[1])
        samples = agent.cache.window(names.HOST_APP_CPU_USAGE, hostapps.labels("nginx"), 0, time.time())[1]
        assert samples, "the host application was collected"
        assert max(samples) > 0 and kernel_cores > 0  # the loop ran, and the collector saw it run
        # System usage excludes the host application (no pods here): node - host apps, same tick.
        node = agent.cache.latest(names.NODE_CPU_USAGE, ())
        apps = agent.cache.latest(names.HOST_APPS_CPU_USAGE, ())
        system = agent.cache.latest(names.SYSTEM_CPU_USAGE, ())
        assert node is not None and apps is not None and system is not None
        assert node[0] == apps[0] == system[0] and system[1] == max(node[1] - apps[1], 0.0)
        reporter = next(c for c in agent.components if c.name == "nodemetric")
        status = reporter.run_once()
    (metric,) = status.host_application_metric
    assert (metric.name, metric.priority.value, metric.qos.value) == ("nginx", "koord-prod", "LS")
    assert metric.usage.cpu_milli is not None and metric.usage.cpu_milli > 0
    assert status.to_json()["hostApplicationMetric"][0]["name"] == "nginx"
