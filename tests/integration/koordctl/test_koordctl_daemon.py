"""``koordctl`` against a real agent: every command in-process with ``-o json`` (and as a table) over the
agent's debug socket (``server.debugSocket``), checked against the real cgroup files of the test's pods.

Needs koordlet/debugapi/server.py and the agent wiring of ``server.debugSocket`` (koordlet/daemon/agent.py)."""

from __future__ import annotations

import io
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.cli.koordctl import main
from koordlet.config import load
from koordlet.daemon.agent import build_agent
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from koordlet.version import __version__
from tests.fixtures.agentrun import running
from tests.fixtures.cleanup import remove_tree
from tests.fixtures.isolation import private_settings, write_config
from tests.fixtures.realcgroup import RealCgroups, kubelet_cpu_weight, shares_from_weight
from tests.fixtures.waiting import wait_until
from tests.integration.koordctl.test_top_tmux import Tmux, top_command

SLEEP = "import signal; signal.pause()"
LS_SHARES = 777
# kubelet's shares -> weight and Koordinator's weight -> shares (integer division both ways): v2 keeps only the
# weight, so the agent shows the shares that weight maps back to.
LS_WEIGHT = kubelet_cpu_weight(LS_SHARES)
LS_SHARES_SEEN_ON_V2 = shares_from_weight(LS_WEIGHT)




def koordctl(socket_path: str, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([*argv, "--socket", socket_path], out=out, environ={})
    return code, out.getvalue()


def document(socket_path: str, *argv: str) -> dict[str, Any]:
    code, out = koordctl(socket_path, *argv, "-o", "json")
    assert code == 0, f"koordctl {' '.join(argv)} exited {code}"
    parsed: dict[str, Any] = json.loads(out)
    return parsed


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # sun_path holds 108 bytes: pytest's tmp_path can be longer than that.
    path = tempfile.mkdtemp(prefix="kctl", dir="/tmp")
    yield Path(path)
    remove_tree(path)


def test_every_command_reads_the_running_agent(real_cgroups: RealCgroups, tmp_path: Path, socket_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    prefix = real_cgroups.name
    ls_uid = f"{secrets.token_hex(4)}-0000-4000-8000-000000000001"
    be_uid = f"{secrets.token_hex(4)}-0000-4000-8000-000000000002"
    ls_container = secrets.token_hex(32)
    ls_pod_dir = f"kubepods/burstable/pod{ls_uid}"
    be_pod_dir = f"kubepods/besteffort/pod{be_uid}"
    for rel in (f"{ls_pod_dir}/{ls_container}", f"{be_pod_dir}/{secrets.token_hex(32)}"):
        real_cgroups.mkdir(rel)
        real_cgroups.spawn(rel, SLEEP)
    v2 = real_cgroups.version == 2
    real_cgroups.set_cpu_quota(ls_pod_dir, 150000)
    if v2:
        real_cgroups.write("cpu", ls_pod_dir, "cpu.weight", str(LS_WEIGHT))
        real_cgroups.write("memory", ls_pod_dir, "memory.max", str(256 * 1024 * 1024))
    else:
        real_cgroups.write("cpu", ls_pod_dir, "cpu.shares", str(LS_SHARES))
        real_cgroups.write("memory", ls_pod_dir, "memory.limit_in_bytes", str(256 * 1024 * 1024))
    shares_seen = LS_SHARES_SEEN_ON_V2 if v2 else LS_SHARES
    # Keys of `koordctl cgroup`'s files: "<hierarchy>/<file>", the hierarchy being "unified" on v2.
    shares_key, memory_key = ("unified/cpu.weight", "unified/memory.max") if v2 else (
        "cpu/cpu.shares", "memory/memory.limit_in_bytes")

    nodeslo = tmp_path / "nodeslo.yaml"
    nodeslo.write_text("kind: NodeSLO\nspec:\n  resourceUsedThresholdWithBE:\n"
                       "    {enable: true, cpuSuppressThresholdPercent: 65, cpuSuppressPolicy: cfsQuota}\n")
    sock = str(socket_dir / "debug.sock")
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, prefix, standalone=True, server={"debugSocket": sock},
        runtimeHooks={"enableServer": False, "enableNri": False},
        qos={"nodesloFile": str(nodeslo), "evictor": "dry-run"}))
    with running(build_agent(load(config_file), tmp_path / "state", read_node_info(HostPaths(), native))):
        wait_until(f"the debug socket {sock}", lambda: os.path.exists(sock), 10)

        status = document(sock, "status")
        assert (status["mode"], status["pid"], status["version"]) == ("standalone", os.getpid(), __version__)
        assert status["components"] and all(isinstance(c["running"], bool) for c in status["components"])

        def our_pods() -> dict[str, dict[str, Any]]:
            pods = document(sock, "pods")["pods"]
            return {p["cgroup_dir"]: p for p in pods if p["cgroup_dir"] in (f"{prefix}/{ls_pod_dir}",
                                                                             f"{prefix}/{be_pod_dir}")}

        wait_until("both test pods in koordctl pods", lambda: len(our_pods()) == 2, 15)

        def file(subsystem: str, rel: str, name: str) -> str:
            return (real_cgroups.path(subsystem, rel) / name).read_text().strip()

        mismatch: list[str] = []

        def pods_match_files() -> bool:
            pods = our_pods()
            mismatch.clear()
            for rel in (ls_pod_dir, be_pod_dir):
                current = pods[f"{prefix}/{rel}"]["current"]
                quota, period = real_cgroups.cpu_quota(rel)
                expected: dict[str, int | str] = {
                    "cpu_shares": real_cgroups.cpu_shares(rel),
                    "cpu_cfs_quota": quota,
                    "cpu_cfs_period": period,
                    "memory_limit": real_cgroups.memory_limit(rel),
                }
                expected["cpuset_cpus"] = file("cpuset", rel, "cpuset.cpus")
                shown = {key: current.get(key) for key in expected}
                if shown != expected:
                    mismatch.append(f"{rel}: koordctl {shown} != files {expected}")
            return not mismatch

        # The QoS manager may rewrite a BE value between a read of the API and of the file: retry.
        try:
            wait_until("koordctl pods to show the cgroup files' values", pods_match_files, 10)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {mismatch}") from None
        pods = our_pods()
        ls_pod, be_pod = pods[f"{prefix}/{ls_pod_dir}"], pods[f"{prefix}/{be_pod_dir}"]
        assert (ls_pod["qos"], be_pod["qos"]) == ("LS", "BE")
        assert ls_pod["current"]["cpu_shares"] == shares_seen
        assert ls_pod["current"]["cpu_cfs_quota"] == 150000
        assert ls_pod["current"]["memory_limit"] == 256 * 1024 * 1024
        ls_key = f"{ls_pod['namespace']}/{ls_pod['name']}"
        (container,) = ls_pod["containers"]

        code, table = koordctl(sock, "pods")
        assert code == 0
        (row,) = [line.split() for line in table.splitlines() if ls_pod["name"] in line]
        assert row[:3] == [ls_pod["namespace"], ls_pod["name"], "LS"]
        assert row[4].startswith(f"{shares_seen}/") and row[5] == "150000/100000" and row[6] == "256Mi"

        cgroup = document(sock, "cgroup", ls_key)
        assert cgroup["pod"] == ls_key and cgroup["container"] is None
        assert cgroup["files"][shares_key].strip() == str(LS_WEIGHT if v2 else LS_SHARES)
        assert cgroup["files"][memory_key].strip() == str(256 * 1024 * 1024)
        by_name = document(sock, "cgroup", ls_pod["name"], container["name"])  # name only: unique on the node
        assert (by_name["pod"], by_name["container"]) == (ls_key, container["name"])
        assert by_name["dir"] == container["cgroup_dir"]
        assert by_name["files"][shares_key].strip() == file(
            "cpu", f"{ls_pod_dir}/{ls_container}", shares_key.split("/")[1])

        code, _ = koordctl(sock, "cgroup", f"{ls_pod['namespace']}/no-such-pod")
        assert code == 1
        assert "no-such-pod" in capsys.readouterr().err

        def metrics_have_our_pods() -> bool:
            metrics = document(sock, "metrics", "--window", "30")
            names = {p["name"] for p in metrics["pods"]}
            return metrics["window_seconds"] == 30 and {ls_pod["name"], be_pod["name"]} <= names
        wait_until("koordctl metrics to list the test pods", metrics_have_our_pods, 15)

        slo = document(sock, "slo")
        assert slo["rejected"] is None
        assert slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65

        qos = document(sock, "qos")
        assert "cpusuppress" in {s["name"] for s in qos["strategies"]}
        hooks = document(sock, "hooks", "--limit", "5")
        assert isinstance(hooks["hooks"], list) and len(hooks["calls"]) <= 5
        assert isinstance(document(sock, "evictions", "--limit", "5")["evictions"], list)

        for command in (["status"], ["metrics"], ["slo"], ["qos"], ["hooks"], ["evictions"], ["cgroup", ls_key]):
            for fmt in ("table", "yaml"):
                code, out = koordctl(sock, *command, "-o", fmt)
                assert code == 0 and out, f"koordctl {' '.join(command)} -o {fmt}"

        # top in a real terminal, against the real agent: the test pods with their cgroup values.
        session = Tmux()
        try:
            session.start(top_command("--socket", sock, "--interval", "0.5"))
            screen = session.wait_for(lambda s: ls_pod["name"] in s and be_pod["name"] in s, "the test pods in top")
            (row,) = [line.split() for line in screen.splitlines() if ls_pod["name"] in line]
            assert row[:3] == [ls_pod["namespace"], ls_pod["name"], "LS"], screen
            session.send("q")
            assert "EXIT=0" in session.wait_for(lambda s: "EXIT=" in s, "top to quit")
        finally:
            session.kill()

    capsys.readouterr()
    message = (f"koordlet is not running (no debug socket at {sock}): start it with "
               "`systemctl start koordlet` or `koordlet run --standalone`\n")
    for command in (["status"], ["pods"], ["metrics"], ["slo"], ["qos"], ["hooks"], ["evictions"],
                    ["cgroup", ls_key], ["top", "--iterations", "1"]):
        code, _ = koordctl(sock, *command)
        assert code == 3, f"koordctl {' '.join(command)} with the daemon down exited {code}"
        assert capsys.readouterr().err == message, command


def test_zsh_completion_script_is_valid_zsh(tmp_path: Path) -> None:
    import io
    import shutil
    import subprocess

    from koordlet.cli.koordctl import main as koordctl_main

    assert shutil.which("zsh") is not None, "zsh missing: tests/host-deps.sh installs it"
    out = io.StringIO()
    assert koordctl_main(["completion", "zsh"], out=out, environ={}) == 0
    script = tmp_path / "_koordctl"
    script.write_text(out.getvalue())
    subprocess.run(["zsh", "-n", str(script)], check=True, timeout=30)
