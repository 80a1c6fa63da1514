"""The assembled agent serves the debug API on its socket: pods with the values of their real cgroup
files, node usage after a collection, every QoS strategy, and a pod's real cgroup files."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.debugapi import contract
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.agentrun import running
from tests.fixtures.cleanup import remove_tree
from tests.fixtures.debugclient import get
from tests.fixtures.isolation import private_settings, write_config
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until

SLEEP = "import signal; signal.pause()"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # A unix socket path holds at most 107 bytes; pytest's tmp_path may be longer.
    directory = Path(tempfile.mkdtemp(prefix="kdbg-", dir="/tmp"))
    yield directory
    remove_tree(directory)


def file_values(real_cgroups: RealCgroups, rel: str) -> dict[str, Any]:
    quota, period = real_cgroups.cpu_quota(rel)
    return {"cpu_shares": real_cgroups.cpu_shares(rel), "cpu_cfs_quota": quota, "cpu_cfs_period": period,
            "memory_limit": real_cgroups.memory_limit(rel), "cpuset_cpus": real_cgroups.cpuset_cpus(rel)}


def test_debug_api_of_a_running_agent(real_cgroups: RealCgroups, tmp_path: Path, sock_dir: Path) -> None:
    prefix = real_cgroups.name
    ls_uid = f"{secrets.token_hex(4)}-0000-4000-8000-000000000001"
    be_uid = f"{secrets.token_hex(4)}-0000-4000-8000-000000000002"
    container_id = secrets.token_hex(32)
    ls_pod = f"kubepods/burstable/pod{ls_uid}"
    be_pod = f"kubepods/besteffort/pod{be_uid}"
    ls_container = f"{ls_pod}/{container_id}"
    for rel in (ls_container, be_pod):
        real_cgroups.mkdir(rel)
    real_cgroups.set_cpu_quota(ls_container, 50000)
    memory_file = "memory.max" if real_cgroups.version == 2 else "memory.limit_in_bytes"
    real_cgroups.write("memory", ls_container, memory_file, str(256 << 20))
    real_cgroups.spawn(ls_container, SLEEP)
    real_cgroups.spawn(be_pod, SLEEP)

    socket_path = sock_dir / "run" / "debug.sock"
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, prefix, standalone=True, server={"debugSocket": str(socket_path)},
        runtimeHooks={"enableServer": False, "enableNri": False}, qos={"evictor": "dry-run"}))
    agent: Any = build_agent(load(config_file), tmp_path / "state", read_node_info(HostPaths(), native))
    assert agent.debug is not None and agent.components[-1] is agent.debug
    with running(agent):
        path = str(socket_path)
        assert socket_path.is_socket() and socket_path.stat().st_mode & 0o777 == contract.SOCKET_MODE

        code, status = get(path, contract.STATUS)
        assert code == 200 and status["mode"] == "standalone"
        assert [c["name"] for c in status["components"]] == [c.name for c in agent.components]
        assert all(c["running"] for c in status["components"] if c["name"] == "debugapi")

        def our_pods() -> dict[str, Any]:
            _, doc = get(path, contract.PODS)
            found = {p["uid"]: p for p in doc["pods"] if p["uid"] in (ls_uid, be_uid)}
            return found if len(found) == 2 else {}

        pods = wait_until("both test pods in /v1/pods", our_pods, 15)
        ls, be = pods[ls_uid], pods[be_uid]
        assert (ls["qos"], ls["kube_qos"], ls["source"]) == ("LS", "Burstable", "kubepods")
        assert (be["qos"], be["kube_qos"]) == ("BE", "BestEffort")
        assert ls["cgroup_dir"] == f"{prefix}/{ls_pod}" and be["cgroup_dir"] == f"{prefix}/{be_pod}"
        # The values are read on request: compare them with the files read right after.
        assert be["current"] == file_values(real_cgroups, be_pod)
        assert ls["current"] == file_values(real_cgroups, ls_pod)
        (container,) = ls["containers"]
        assert container["id"] == container_id
        assert container["current"] == file_values(real_cgroups, ls_container)
        assert container["current"]["cpu_cfs_quota"] == 50_000
        assert container["current"]["memory_limit"] == 256 << 20
        # Whatever the executor wrote and still remembers is the file's value now (nothing else writes here).
        for row in (ls, be, container):
            for resource, value in row["desired"].items():
                assert row["current"][resource] == value, (row["cgroup_dir"], resource)

        def node_usage() -> Any:
            _, doc = get(path, contract.METRICS + "?window=30")
            return doc if doc["node"] is not None and doc["node"]["cpu_cores"] is not None else None

        metrics = wait_until("node usage in /v1/metrics", node_usage, 15)
        assert metrics["window_seconds"] == 30
        assert metrics["node"]["cpu_cores"] >= 0 and metrics["node"]["memory_bytes"] > 0
        assert {p["name"] for p in metrics["pods"]} >= {f"pod{ls_uid}", f"pod{be_uid}"}

        code, qos = get(path, contract.QOS)
        assert code == 200
        assert [s["name"] for s in qos["strategies"]] == agent.qos.strategies
        assert all(isinstance(s["enabled"], bool) and s["interval_seconds"] > 0 for s in qos["strategies"])

        code, slo = get(path, contract.SLO)
        assert code == 200 and slo["origin"] == agent.qos.holder.current().origin

        code, cgroup = get(path, f"{contract.CGROUP}?pod=kubepods/pod{ls_uid}&container={container['name']}")
        assert code == 200 and cgroup["dir"] == f"{prefix}/{ls_container}"
        files = cgroup["files"]
        # Keys are "<hierarchy>/<file>": the v1 cpu (or cpu,cpuacct) and memory hierarchies, or "unified" on v2.
        quota_file, cpu_hierarchy, memory_hierarchy = (
            ("cpu.max", "unified", "unified") if real_cgroups.version == 2 else ("cpu.cfs_quota_us", "cpu", "memory"))
        quota = [v for k, v in files.items() if k.endswith(f"/{quota_file}") and cpu_hierarchy in k.split("/")[0]]
        assert quota == [(real_cgroups.path("cpu", ls_container) / quota_file).read_text()]
        procs = [v for k, v in files.items() if k.split("/")[0] == memory_hierarchy and k.endswith("/cgroup.procs")]
        assert procs == [(real_cgroups.path("memory", ls_container) / "cgroup.procs").read_text()]

        code, missing = get(path, f"{contract.CGROUP}?pod=kubepods/nope")
        assert code == 404 and "kubepods/nope" in missing["error"]
        code, hooks = get(path, contract.HOOKS)
        assert code == 200 and hooks["hooks"] == list(agent.hooks.runner.names)
        code, evictions = get(path, contract.EVICTIONS)
        assert (code, evictions) == (200, {"evictions": []})
    assert not socket_path.exists()
