"""``koordctl`` commands against a fake debug API: a threading HTTP server on a unix socket serving canned
documents of the contract (:mod:`koordlet.debugapi.contract`), in every output format, with exit codes."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from koordlet.cli import debugclient
from koordlet.cli.debugclient import ApiError, DaemonDown, DaemonTimeout, DebugClient
from koordlet.cli.koordctl import main
from koordlet.cli.koordctl_cmds import render
from koordlet.cli.koordctl_cmds.commands import COMMANDS
from koordlet.debugapi import contract

NOW = 1_800_000_000.0

STATUS_DOC: dict[str, Any] = {
    "version": "1.2.3", "pid": 4242, "node": "node-a", "mode": "standalone", "started_at": NOW - 3725,
    "uptime_seconds": 3725.0,
    "components": [{"name": "statesinformer", "running": True}, {"name": "qosmanager", "running": True},
                   {"name": "runtimehooks", "running": False}],
    "feature_gates": {"BECPUSuppress": True, "CPUBurst": False},
    "probes": [{"name": "psi", "supported": True, "reason": "/proc/pressure readable"},
               {"name": "core_sched", "supported": False, "reason": "prctl: EINVAL"}],
    "companion": {"address": "10.0.0.1:9318", "nodeslo_connected": True, "reports_failing": False},
}

PODS_DOC: dict[str, Any] = {"pods": [
    {"namespace": "default", "name": "web", "uid": "u1", "qos": "LS", "kube_qos": "Burstable",
     "priority_class": "koord-prod", "priority": 9500, "phase": "Running", "source": "kubelet",
     "cgroup_dir": "kubepods/burstable/podu1",
     "containers": [{"name": "nginx", "id": "c1", "cgroup_dir": "kubepods/burstable/podu1/c1",
                     "current": {"cpu_shares": 512}, "desired": {}}],
     "current": {"cpu_shares": 1024, "cpu_cfs_quota": 200000, "cpu_cfs_period": 100000,
                 "memory_limit": 536870912, "cpuset_cpus": "0-3"},
     "desired": {"cpu_shares": 1024, "cpu_cfs_quota": 200000}},
    {"namespace": "batch", "name": "spark", "uid": "u2", "qos": "BE", "kube_qos": "BestEffort",
     "priority_class": "koord-batch", "priority": 5000, "phase": "Running", "source": "kubelet",
     "cgroup_dir": "kubepods/besteffort/podu2", "containers": [],
     "current": {"cpu_shares": 2, "cpu_cfs_quota": -1, "cpu_cfs_period": 100000,
                 "memory_limit": 9223372036854771712},
     "desired": {"cpu_cfs_quota": 50000}},
    {"namespace": "other", "name": "web", "uid": "u3", "qos": "LSR", "kube_qos": "Guaranteed",
     "priority_class": None, "priority": None, "phase": "Pending", "source": "kubelet",
     "cgroup_dir": "kubepods/podu3", "containers": [], "current": {}, "desired": {}},
]}

METRICS_DOC: dict[str, Any] = {
    "window_seconds": 60, "node": {"cpu_cores": 1.5, "memory_bytes": 3 * 1024**3},
    "pods": [
        {"namespace": "default", "name": "idle", "qos": "LS", "cpu_cores": 0.01, "memory_bytes": 1024**2},
        {"namespace": "batch", "name": "spark", "qos": "BE", "cpu_cores": 1.25, "memory_bytes": 2 * 1024**3},
        {"namespace": "default", "name": "new", "qos": "LS", "cpu_cores": None, "memory_bytes": None},
        {"namespace": "default", "name": "web", "qos": "LS", "cpu_cores": 0.2, "memory_bytes": 300 * 1024**2},
    ],
}

SLO_DOC: dict[str, Any] = {
    "origin": "file:/etc/koordlet/nodeslo.yaml", "generation": 3, "rejected": None,
    "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                             "cpuSuppressPolicy": "cfsQuota"},
             "systemStrategy": {"minFreeKbytesFactor": 100}},
}

QOS_DOC: dict[str, Any] = {
    "strategies": [
        {"name": "cpusuppress", "enabled": True, "interval_seconds": 1.0,
         "last": {"strategy": "cpusuppress", "at": NOW - 5, "action": "suppress",
                  "summary": "BE limited to 3 CPUs: LS usage 62% of 65% threshold",
                  "numbers": {"be_cpus": 3, "threshold_percent": 65}}},
        {"name": "memoryevict", "enabled": False, "interval_seconds": 1.0, "last": None},
    ],
    "history": [
        {"strategy": "cpusuppress", "at": NOW - 125, "action": "suppress", "summary": "BE limited to 2 CPUs",
         "numbers": {}},
        {"strategy": "cpusuppress", "at": NOW - 5, "action": "suppress",
         "summary": "BE limited to 3 CPUs: LS usage 62% of 65% threshold", "numbers": {"be_cpus": 3}},
    ],
}

HOOKS_DOC: dict[str, Any] = {
    "hooks": ["groupidentity", "cpuset", "batchresource"],
    "calls": [
        {"at": NOW - 90, "stage": "PreRunPodSandbox", "pod": "default/web", "container": "", "transport": "proxy",
         "duration_ms": 1.25, "ok": True, "errors": [], "adjustment": {"cpu.bvt_warp_ns": 2}},
        {"at": NOW - 3, "stage": "PreCreateContainer", "pod": "batch/spark", "container": "executor",
         "transport": "nri", "duration_ms": 0.5, "ok": False, "errors": ["cpuset: no cpus"], "adjustment": {}},
    ],
}

EVICTIONS_DOC: dict[str, Any] = {"evictions": [
    {"at": NOW - 7200, "pod": "batch/spark", "reason": "memoryEvict", "message": "node memory 82% > 70%",
     "outcome": "evicted", "backend": "kubelet"},
    {"at": NOW - 30, "pod": "batch/etl", "reason": "cpuEvict", "message": "BE satisfaction 20% < 40%",
     "outcome": "dry-run", "backend": "dry-run"},
]}

CGROUP_DOC: dict[str, Any] = {
    "pod": "default/web", "container": "nginx", "dir": "kubepods/burstable/podu1/c1",
    "files": {"cpu/cpu.shares": "512\n", "cpu/cpu.cfs_quota_us": "-1\n",
              "memory/memory.stat": "cache 4096\nrss 8192\n"},
}

PROFILE_DOC: dict[str, Any] = {
    "seconds": 2.0, "interval_seconds": 0.01, "samples": 180, "cpu_seconds": 0.05,
    "collapsed": {"qos;koordlet.qosmanager.manager.Manager.run": 40000, "advisor;koordlet.native.read": 10000},
    "top_self": [{"function": "koordlet.qosmanager.manager.Manager.run", "cpu_seconds": 0.04},
                 {"function": "koordlet.native.read", "cpu_seconds": 0.01}],
    "top_total": [{"function": "koordlet.qosmanager.manager.Manager.run", "cpu_seconds": 0.04}],
}
SHADOW_DOC: dict[str, Any] = {
    "default": False, "strategies": {"cpuevict": True, "resctrl": True},
    "effective": {"cpusuppress": False, "cpuevict": True, "resctrl": True},
    "hooks": {"default": True, "hooks": {}, "effective": {"cpuset": True, "coresched": True}},
}
DOCUMENTS: dict[str, dict[str, Any]] = {
    contract.STATUS: STATUS_DOC, contract.PODS: PODS_DOC, contract.METRICS: METRICS_DOC, contract.SLO: SLO_DOC,
    contract.QOS: QOS_DOC, contract.HOOKS: HOOKS_DOC, contract.EVICTIONS: EVICTIONS_DOC,
    contract.PROFILE: PROFILE_DOC, contract.SHADOW: SHADOW_DOC,
}

# command argv -> (path asked, document answered)
CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "status": (["status"], STATUS_DOC),
    "pods": (["pods"], PODS_DOC),
    "metrics": (["metrics"], METRICS_DOC),
    "slo": (["slo"], SLO_DOC),
    "qos": (["qos"], QOS_DOC),
    "hooks": (["hooks"], HOOKS_DOC),
    "evictions": (["evictions"], EVICTIONS_DOC),
    "cgroup": (["cgroup", "default/web", "nginx"], CGROUP_DOC),
    "profile": (["profile", "--seconds", "2"], PROFILE_DOC),
    "shadow": (["shadow"], SHADOW_DOC),
}


@dataclass
class FakeApi:
    """What the fake daemon answers, and every request it saw as (path, query)."""

    socket_path: str
    routes: dict[str, Callable[[dict[str, str]], tuple[int, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    posted: list[tuple[str, Any]] = field(default_factory=list)
    """(path, JSON body) of every POST."""
    raw: bytes | None = None
    """When set, the body of every answer as is (for malformed answers)."""

    def serve(self, path: str, document: Any, status: int = 200) -> None:
        self.routes[path] = lambda query: (status, document)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    api: FakeApi


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.api.posted.append((urlsplit(self.path).path, body))
        self.do_GET()

    def do_GET(self) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        api.requests.append((url.path, query))
        route = api.routes.get(url.path)
        status, document = route(query) if route else (404, {"error": f"unknown path {url.path}"})
        body = api.raw if api.raw is not None else json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the client address of a unix socket is ''
        pass


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # sun_path holds 108 bytes: pytest's tmp_path can be longer than that.
    path = tempfile.mkdtemp(prefix="kctl", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def api(short_dir: Path) -> Iterator[FakeApi]:
    fake = FakeApi(str(short_dir / "debug.sock"))
    for path, document in DOCUMENTS.items():
        fake.serve(path, document)
    fake.routes[contract.CGROUP] = lambda query: (
        (200, CGROUP_DOC) if query.get("pod") == "default/web" else (404, {"error": f"no pod {query.get('pod')}"}))
    server = _Server(fake.socket_path, _Handler)
    server.api = fake
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(5)


def koordctl(api: FakeApi | None, *argv: str, environ: dict[str, str] | None = None,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    socket_args = ["--socket", api.socket_path] if api is not None else []
    code = main([*argv, *socket_args], out=out, environ=environ or {}, clock=lambda: NOW)
    return code, out.getvalue(), capsys.readouterr().err


def rows(table: str) -> list[list[str]]:
    """A table's lines split on runs of two or more spaces (cells hold at most one space in a row)."""
    return [re.split(r" {2,}", line) for line in table.splitlines()]


def section(out: str, header_start: str) -> list[list[str]]:
    """The rows of the table whose header line starts with ``header_start``, up to the next blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return rows("\n".join(lines[start:end]))


# --- json and yaml print the document as is -----------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_print_the_document_as_is(api: FakeApi, capsys: pytest.CaptureFixture[str],
                                                name: str, fmt: str) -> None:
    argv, document = CASES[name]
    code, out, err = koordctl(api, *argv, "-o", fmt, capsys=capsys)
    assert (code, err) == (0, "")
    parsed = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert parsed == document


def test_every_daemon_command_has_a_case() -> None:
    assert sorted(CASES) == sorted(command.name for command in COMMANDS)


def test_long_output_flag(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "slo", "--output", "json", capsys=capsys)
    assert code == 0 and json.loads(out) == SLO_DOC


# --- tables -------------------------------------------------------------------------------------------

def test_profile_table_and_folded_file(api: FakeApi, capsys: pytest.CaptureFixture[str], short_dir: Path) -> None:
    folded = short_dir / "cpu.folded"
    code, out, _ = koordctl(api, "profile", "--seconds", "2", "--interval-ms", "5", "--folded", str(folded),
                            capsys=capsys)
    assert code == 0
    assert api.requests[-1] == (contract.PROFILE, {"seconds": "2", "interval_ms": "5"})
    assert "2.5% of one core" in out
    assert section(out, "SELF-CPU")[1:] == [["0.040", "koordlet.qosmanager.manager.Manager.run"],
                                          ["0.010", "koordlet.native.read"]]
    assert folded.read_text() == ("qos;koordlet.qosmanager.manager.Manager.run 40000\n"
                                  "advisor;koordlet.native.read 10000\n")


def test_status_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "status", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[:5] == [
        "Node:      node-a",
        "Version:   1.2.3 (pid 4242)",
        "Mode:      standalone",
        "Uptime:    1h2m",
        "Companion: 10.0.0.1:9318 (connected, reports ok)",
    ]
    assert section(out, "COMPONENT") == [["COMPONENT", "RUNNING"], ["statesinformer", "yes"],
                                         ["qosmanager", "yes"], ["runtimehooks", "no"]]
    assert section(out, "FEATURE-GATE") == [["FEATURE-GATE", "ENABLED"], ["BECPUSuppress", "yes"], ["CPUBurst", "no"]]
    assert section(out, "PROBE") == [["PROBE", "SUPPORTED", "REASON"], ["psi", "yes", "/proc/pressure readable"],
                                     ["core_sched", "no", "prctl: EINVAL"]]


def test_status_table_marks_gates_not_implemented(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    gates = {"BECPUSuppress": True, "Libpfm4": False}
    api.serve(contract.STATUS, {**STATUS_DOC, "feature_gates": gates, "feature_gates_not_implemented": ["Libpfm4"]})
    code, out, _ = koordctl(api, "status", capsys=capsys)
    assert code == 0
    assert section(out, "FEATURE-GATE") == [["FEATURE-GATE", "ENABLED", "IMPLEMENTED"],
                                            ["BECPUSuppress", "yes", "yes"], ["Libpfm4", "no", "no"]]


def test_status_table_names_the_strategies_in_shadow_mode(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.STATUS, {**STATUS_DOC, "shadow": SHADOW_DOC})
    _, out, _ = koordctl(api, "status", capsys=capsys)
    assert "Shadow mode: cpuevict, resctrl" in out.splitlines()
    api.serve(contract.STATUS, {**STATUS_DOC, "shadow": {**SHADOW_DOC, "effective": {"cpuevict": False}}})
    _, out, _ = koordctl(api, "status", capsys=capsys)
    assert "Shadow mode: none (every strategy active)" in out.splitlines()


PRESSURE_DOC = {
    "enabled": True, "reason": "", "debounce_seconds": 0.5,
    "triggers": [
        {"name": "kubepods-memory-some", "path": "/sys/fs/cgroup/unified/kubepods/memory.pressure",
         "trigger": "some 140000 2000000", "wakes": ["memoryevict"], "registered": True, "error": "",
         "note": "configured some 70000 1000000; widened: no CAP_SYS_RESOURCE", "fired": 3, "last_fired": NOW - 60},
        {"name": "besteffort-cpu-some", "path": "/sys/fs/cgroup/unified/kubepods/besteffort/cpu.pressure",
         "trigger": "some 1200000 2000000", "wakes": ["cpuevict"], "registered": False,
         "error": "/sys/fs/cgroup/unified/kubepods/besteffort/cpu.pressure missing", "note": "", "fired": 0,
         "last_fired": None},
    ],
    "wakes": {"memoryevict": {"received": 5, "woken_rounds_acted": 1, "woken_rounds_quiet": 2, "folded": 2}},
}


def test_status_table_lists_the_pressure_triggers_and_their_last_firing(
        api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.STATUS, {**STATUS_DOC, "pressure": PRESSURE_DOC})
    _, out, _ = koordctl(api, "status", capsys=capsys)
    lines = out.splitlines()
    assert any(line.startswith("Pressure:") and line.endswith(
        "PSI triggers wake the eviction strategies (woken rounds at least 0.5 s apart)") for line in lines)
    assert any(line.startswith("Woken rounds:") and line.endswith(
        "memoryevict: 1 acted, 2 found nothing to do, 2 wakes folded") for line in lines)
    assert section(out, "PSI-TRIGGER") == [
        ["PSI-TRIGGER", "THRESHOLD", "WAKES", "REGISTERED", "FIRED", "LAST-FIRED", "NOTE"],
        ["kubepods-memory-some", "some 140000 2000000", "memoryevict", "yes", "3", "1m",
         "configured some 70000 1000000; widened: no CAP_SYS_RESOURCE"],
        ["besteffort-cpu-some", "some 1200000 2000000", "cpuevict", "no", "0", "-",
         "/sys/fs/cgroup/unified/kubepods/besteffort/cpu.pressure missing"],
    ]
    api.serve(contract.STATUS, {**STATUS_DOC, "pressure": {
        "enabled": False, "reason": "qos.pressureTriggers is empty", "triggers": [], "wakes": {}}})
    _, out, _ = koordctl(api, "status", capsys=capsys)
    assert any(line.startswith("Pressure:") and line.endswith("polling only: qos.pressureTriggers is empty")
               for line in out.splitlines())
    assert "PSI-TRIGGER" not in out


def test_qos_history_says_which_rounds_a_trigger_woke(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    woken = {"strategy": "memoryevict", "at": NOW - 5, "action": "evict", "summary": "kubepods memory 85% >= 70%",
             "numbers": {}, "shadow": False, "intended": [], "woken_by": "psi kubepods-memory-some"}
    api.serve(contract.QOS, {**QOS_DOC, "history": [woken]})
    _, out, _ = koordctl(api, "qos", capsys=capsys)
    assert "[woken: psi kubepods-memory-some] kubepods memory 85% >= 70%" in out


def test_status_table_without_companion(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.STATUS, {**STATUS_DOC, "companion": None, "feature_gates": {}, "probes": []})
    code, out, _ = koordctl(api, "status", capsys=capsys)
    assert code == 0
    assert "Companion: none" in out.splitlines()
    assert "FEATURE-GATE" not in out and "PROBE" not in out


def test_pods_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "pods", capsys=capsys)
    assert code == 0
    table = section(out, "NAMESPACE")
    assert table == [
        ["NAMESPACE", "NAME", "QOS", "PRIORITY", "CPU-SHARES(cur/desired)", "QUOTA", "MEMORY-LIMIT", "CPUSET"],
        ["default", "web", "LS", "koord-prod/9500", "1024/1024", "200000/100000", "512Mi", "0-3"],
        ["batch", "spark", "BE", "koord-batch/5000", "2/-", "unlimited*", "unlimited", "-"],
        ["other", "web", "LSR", "-", "-/-", "-", "-", "-"],
    ]
    # The BE quota differs from what koordlet last wrote: marked, and the mark is explained.
    assert out.splitlines()[-1].startswith("* differs from the value koordlet last wrote")


def test_pods_table_says_what_shadow_mode_would_have_done(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    web = PODS_DOC["pods"][0]
    shadowed = {**web, "intended": {"cpu_cfs_quota": {"value": 300000, "because": "cpusuppress: BE limited"}},
                "containers": [{**web["containers"][0], "intended": {"cpuset_cpus": {"value": "0-2",
                                                                                    "because": "cpusuppress"}}}],
                "intended_evictions": [{"at": NOW - 5, "pod": "default/web", "reason": "EvictPodByNodeMemoryUsage",
                                        "message": "node memory 78%", "outcome": "intended", "backend": "cri"}]}
    api.serve(contract.PODS, {"pods": [shadowed, *PODS_DOC["pods"][1:]]})
    _, out, _ = koordctl(api, "pods", capsys=capsys)
    lines = out.splitlines()
    at = lines.index("Shadow mode, per pod (nothing was written or evicted):")
    assert lines[at + 1:at + 4] == [
        "  default/web: would set cpu_cfs_quota to 300000 because cpusuppress: BE limited",
        "  default/web container nginx: would set cpuset_cpus to 0-2 because cpusuppress",
        "  default/web: would evict because EvictPodByNodeMemoryUsage: node memory 78%",
    ]


def test_pods_table_empty(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.PODS, {"pods": []})
    code, out, _ = koordctl(api, "pods", capsys=capsys)
    assert code == 0
    assert out.split() == ["NAMESPACE", "NAME", "QOS", "PRIORITY", "CPU-SHARES(cur/desired)", "QUOTA",
                           "MEMORY-LIMIT", "CPUSET"]


def test_metrics_table_sorts_pods_by_cpu(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "metrics", capsys=capsys)
    assert code == 0
    assert out.splitlines()[0] == "NODE  cpu 1.500 cores  memory 3Gi  (60 s average)"
    assert section(out, "NAMESPACE") == [
        ["NAMESPACE", "NAME", "QOS", "CPU(cores)", "MEMORY"],
        ["batch", "spark", "BE", "1.250", "2Gi"],
        ["default", "web", "LS", "0.200", "300Mi"],
        ["default", "idle", "LS", "0.010", "1Mi"],
        ["default", "new", "LS", "-", "-"],
    ]
    assert api.requests[-1] == (contract.METRICS, {})


def test_metrics_window_and_no_node_samples(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.METRICS, {"window_seconds": 30, "node": None, "pods": []})
    code, out, _ = koordctl(api, "metrics", "--window", "30", capsys=capsys)
    assert code == 0
    assert api.requests[-1] == (contract.METRICS, {"window": "30"})
    assert out.splitlines()[0] == "NODE  no samples in the last 30 s"


def test_slo_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "slo", capsys=capsys)
    assert code == 0
    assert out.splitlines()[:3] == ["Origin:     file:/etc/koordlet/nodeslo.yaml", "Generation: 3", "Rejected:   -"]
    assert section(out, "FIELD") == [
        ["FIELD", "VALUE"],
        ["resourceUsedThresholdWithBE.enable", "true"],
        ["resourceUsedThresholdWithBE.cpuSuppressThresholdPercent", "65"],
        ["resourceUsedThresholdWithBE.cpuSuppressPolicy", '"cfsQuota"'],
        ["systemStrategy.minFreeKbytesFactor", "100"],
    ]


def test_slo_table_shows_the_rejection(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.serve(contract.SLO, {**SLO_DOC, "rejected": "spec.x: bad value 165"})
    _, out, _ = koordctl(api, "slo", capsys=capsys)
    assert "Rejected:   spec.x: bad value 165" in out.splitlines()


def test_qos_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "qos", capsys=capsys)
    assert code == 0
    assert section(out, "STRATEGY") == [
        ["STRATEGY", "ENABLED", "MODE", "LAST-ACTION", "AGE", "SUMMARY"],
        ["cpusuppress", "yes", "active", "suppress", "5s", "BE limited to 3 CPUs: LS usage 62% of 65% threshold"],
        ["memoryevict", "no", "active", "-", "-", "-"],
    ]
    assert "Shadow mode" not in out
    assert "Recent actions (2 of 2, oldest first):" in out
    assert section(out, "AGE") == [
        ["AGE", "STRATEGY", "ACTION", "SUMMARY"],
        ["2m5s", "cpusuppress", "suppress", "BE limited to 2 CPUs"],
        ["5s", "cpusuppress", "suppress", "BE limited to 3 CPUs: LS usage 62% of 65% threshold"],
    ]


def test_qos_table_says_what_shadow_mode_would_have_done(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    would = ["would set /sys/fs/cgroup/cpu/kubepods/besteffort/cpu.cfs_quota_us to '300000' because cpusuppress: be",
             "would evict batch/spark because EvictPodByNodeMemoryUsage: node memory 78%"]
    shadowed = {**QOS_DOC["strategies"][0], "shadow": True,
                "last": {**QOS_DOC["strategies"][0]["last"], "shadow": True, "intended": would}}
    api.serve(contract.QOS, {**QOS_DOC, "strategies": [shadowed, QOS_DOC["strategies"][1]]})
    _, out, _ = koordctl(api, "qos", capsys=capsys)
    assert section(out, "STRATEGY")[1][:3] == ["cpusuppress", "yes", "shadow"]
    lines = out.splitlines()
    at = lines.index("Shadow mode, the last rounds would have (nothing was written or evicted):")
    assert lines[at + 1:at + 3] == [f"  cpusuppress: {sentence}" for sentence in would]


def test_shadow_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "shadow", capsys=capsys)
    assert code == 0 and api.posted == []
    assert out.splitlines()[0] == "default: strategies active, hooks shadow"
    assert section(out, "KIND") == [
        ["KIND", "NAME", "MODE", "SET-BY"],
        ["strategy", "cpusuppress", "active", "default"],
        ["strategy", "cpuevict", "shadow", "own"],
        ["strategy", "resctrl", "shadow", "own"],
        ["hook", "cpuset", "shadow", "default"],
        ["hook", "coresched", "shadow", "default"],
    ]


@pytest.mark.parametrize(("argv", "body"), [
    (["cpuevict", "off"], {"strategy": "cpuevict", "shadow": False}),
    (["cpuevict", "default"], {"strategy": "cpuevict", "shadow": None}),
    (["all", "on"], {"strategy": None, "shadow": True}),
    (["--hook", "cpuset", "on"], {"hook": "cpuset", "shadow": True}),
    (["--hook", "all", "off"], {"hook": None, "shadow": False}),
])
def test_shadow_switches_at_run_time(api: FakeApi, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     body: dict[str, Any]) -> None:
    api.serve(contract.ADMIN_SHADOW, SHADOW_DOC)
    code, out, _ = koordctl(api, "shadow", *argv, capsys=capsys)
    assert code == 0 and api.posted == [(contract.ADMIN_SHADOW, body)]
    assert out.splitlines()[0] == "default: strategies active, hooks shadow"


@pytest.mark.parametrize(("argv", "message"), [
    (["cpuevict"], "say on, off or default"),
    (["all", "default"], "only one strategy's own setting can be dropped"),
])
def test_shadow_refuses_half_a_switch(api: FakeApi, capsys: pytest.CaptureFixture[str], argv: list[str],
                                      message: str) -> None:
    code, _, err = koordctl(api, "shadow", *argv, capsys=capsys)
    assert code == 1 and message in err and api.posted == []


def test_hooks_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "hooks", "--limit", "5", capsys=capsys)
    assert code == 0
    assert api.requests[-1] == (contract.HOOKS, {"limit": "5"})
    assert out.splitlines()[0] == "Hooks: groupidentity, cpuset, batchresource"
    assert section(out, "AGE") == [
        ["AGE", "TRANSPORT", "STAGE", "POD", "CONTAINER", "DURATION", "OK", "ADJUSTMENT"],
        ["1m30s", "proxy", "PreRunPodSandbox", "default/web", "-", "1.2ms", "yes", "cpu.bvt_warp_ns=2"],
        ["3s", "nri", "PreCreateContainer", "batch/spark", "executor", "0.5ms", "no", "errors: cpuset: no cpus"],
    ]


def test_hooks_table_says_what_hooks_in_shadow_mode_would_have_set(api: FakeApi,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    call = {**HOOKS_DOC["calls"][0], "adjustment": {}, "intended": {"cpuset_cpus": "0-3"}}
    api.serve(contract.HOOKS, {**HOOKS_DOC, "calls": [call]})
    _, out, _ = koordctl(api, "hooks", capsys=capsys)
    assert section(out, "AGE")[1][-2:] == ["yes", "shadow, would set: cpuset_cpus=0-3"]


def test_evictions_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "evictions", "--limit", "2", capsys=capsys)
    assert code == 0
    assert api.requests[-1] == (contract.EVICTIONS, {"limit": "2"})
    assert rows(out) == [
        ["AGE", "POD", "REASON", "OUTCOME", "BACKEND", "MESSAGE"],
        ["2h", "batch/spark", "memoryEvict", "evicted", "kubelet", "node memory 82% > 70%"],
        ["30s", "batch/etl", "cpuEvict", "dry-run", "dry-run", "BE satisfaction 20% < 40%"],
    ]


def test_cgroup_table(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = koordctl(api, "cgroup", "default/web", "nginx", capsys=capsys)
    assert code == 0
    assert api.requests == [(contract.CGROUP, {"pod": "default/web", "container": "nginx"})]
    assert out.splitlines()[:3] == ["Pod:       default/web", "Container: nginx",
                                    "Dir:       kubepods/burstable/podu1/c1"]
    assert out.splitlines()[4:] == [
        "FILE                  CONTENT",
        "cpu/cpu.shares        512",
        "cpu/cpu.cfs_quota_us  -1",
        "memory/memory.stat    cache 4096",
        "                      rss 8192",
    ]


def test_cgroup_resolves_a_unique_pod_name(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = koordctl(api, "cgroup", "spark", capsys=capsys)
    # spark is only in namespace batch; the fake answers 404 for any pod but default/web.
    assert api.requests == [(contract.PODS, {}), (contract.CGROUP, {"pod": "batch/spark"})]
    assert (code, err) == (1, "koordctl: error: no pod batch/spark\n")


def test_cgroup_ambiguous_or_unknown_pod_name(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = koordctl(api, "cgroup", "web", capsys=capsys)
    assert (code, out) == (1, "")
    assert err == ("koordctl: error: pod name 'web' is ambiguous: default/web, other/web (give NAMESPACE/NAME)\n")
    code, _, err = koordctl(api, "cgroup", "nope", capsys=capsys)
    assert code == 1
    assert err == "koordctl: error: no pod named 'nope' on this node (koordctl pods lists them)\n"
    assert [path for path, _ in api.requests] == [contract.PODS, contract.PODS]


# --- exit codes ---------------------------------------------------------------------------------------

DOWN = ("koordlet is not running (no debug socket at {}): start it with `systemctl start koordlet` "
        "or `koordlet run --standalone`\n")
DENIED = "cannot open {}: permission denied (the debug socket is root only: run koordctl as root)\n"


@pytest.mark.parametrize("name", list(CASES))
def test_daemon_down_exits_3(short_dir: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    missing = str(short_dir / "debug.sock")
    code = main([*CASES[name][0], "--socket", missing], out=io.StringIO(), environ={})
    assert code == 3
    assert capsys.readouterr().err == DOWN.format(missing)


def test_stale_socket_without_listener_exits_3(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(short_dir / "debug.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)  # bound but never listening: connect() is refused
        assert main(["status", "--socket", path], out=io.StringIO(), environ={}) == 3
    assert capsys.readouterr().err == DOWN.format(path)


def test_permission_denied_exits_3(api: FakeApi, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: debugclient.UnixHTTPConnection) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(debugclient.UnixHTTPConnection, "connect", refuse)
    code, out, err = koordctl(api, "pods", capsys=capsys)
    assert (code, out) == (3, "")
    assert err == DENIED.format(api.socket_path)


def test_api_error_exits_1_with_its_message(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = koordctl(api, "cgroup", "default/gone", capsys=capsys)
    assert (code, out, err) == (1, "", "koordctl: error: no pod default/gone\n")
    del api.routes[contract.QOS]
    code, out, err = koordctl(api, "qos", "-o", "json", capsys=capsys)
    assert (code, out, err) == (1, "", "koordctl: error: unknown path /v1/qos\n")
    api.serve(contract.STATUS, {"error": "boom"}, status=500)
    assert koordctl(api, "status", capsys=capsys)[::2] == (1, "koordctl: error: boom\n")


def test_an_answer_that_is_not_json_exits_1(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.raw = b"<html>oops</html>"
    code, _, err = koordctl(api, "status", capsys=capsys)
    assert code == 1
    assert err.startswith("koordctl: error: the daemon answered HTTP 200 with a body that is not a JSON object")


@pytest.mark.parametrize("argv", [["pods", "-o", "wide"], ["hooks", "--limit", "0"], ["metrics", "--window", "x"],
                                  ["cgroup"], ["nosuch"], [], ["completion", "fish"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv, out=io.StringIO(), environ={})
    assert exited.value.code == 2
    assert "usage: koordctl" in capsys.readouterr().err


# --- the socket: flag, environment, default -----------------------------------------------------------

def test_socket_from_environment_and_flag(api: FakeApi, short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["slo", "-o", "json"], out=out, environ={"KOORDCTL_SOCKET": api.socket_path}) == 0
    assert json.loads(out.getvalue()) == SLO_DOC
    elsewhere = str(short_dir / "elsewhere.sock")
    code = main(["slo", "--socket", elsewhere], out=io.StringIO(), environ={"KOORDCTL_SOCKET": api.socket_path})
    assert code == 3
    assert capsys.readouterr().err == DOWN.format(elsewhere)


def test_default_socket_is_the_contracts(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def connect(self: debugclient.UnixHTTPConnection) -> None:
        seen.append(self.socket_path)
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(debugclient.UnixHTTPConnection, "connect", connect)
    assert main(["status"], out=io.StringIO(), environ={"KOORDCTL_SOCKET": ""}) == 3
    assert seen == [contract.DEFAULT_SOCKET]
    assert capsys.readouterr().err == DOWN.format(contract.DEFAULT_SOCKET)


# --- the client ---------------------------------------------------------------------------------------

def test_client_timeout_is_its_own_error(short_dir: Path) -> None:
    path = str(short_dir / "mute.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(path)
        mute.listen(1)  # connect() completes on the backlog; nothing ever answers
        with pytest.raises(DaemonTimeout) as raised:
            DebugClient(path, timeout_seconds=0.2).get(contract.STATUS)
    assert str(raised.value) == f"koordlet did not answer on {path} within 0.2 s"
    assert isinstance(raised.value, TimeoutError)


def test_client_errors_carry_status_and_classes(api: FakeApi) -> None:
    client = DebugClient(api.socket_path)
    assert client.get(contract.HOOKS, limit=3, other=None) == HOOKS_DOC
    assert api.requests[-1] == (contract.HOOKS, {"limit": "3"})
    with pytest.raises(ApiError) as raised:
        client.get("/v1/nope")
    assert (raised.value.status, raised.value.message) == (404, "unknown path /v1/nope")
    with pytest.raises(DaemonDown) as down:
        DebugClient(api.socket_path + ".absent").get(contract.STATUS)
    assert isinstance(down.value, ConnectionError)


# --- doctor keeps working, now also with -o ------------------------------------------------------------

def test_doctor_output_formats(capsys: pytest.CaptureFixture[str]) -> None:
    @dataclass(frozen=True)
    class Probe:
        name: str
        supported: bool
        reason: str

    def probes(paths: Any) -> list[Probe]:
        return [Probe("psi", True, "ok")]

    for argv in (["doctor", "-o", "json"], ["doctor", "--json"]):
        out = io.StringIO()
        assert main(argv, out=out, probe_all=probes) == 0
        assert json.loads(out.getvalue())["probes"] == [{"name": "psi", "supported": True, "reason": "ok"}]
    out = io.StringIO()
    assert main(["doctor", "-o", "yaml"], out=out, probe_all=probes) == 0
    assert yaml.safe_load(out.getvalue())["summary"] == {"supported": 1, "unsupported": 0}


# --- completion ---------------------------------------------------------------------------------------

ALL_COMMANDS = [*CASES, "doctor", "completion"]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_names_every_command_flag_and_format(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["completion", shell], out=out, environ={}) == 0
    script = out.getvalue()
    for command in ALL_COMMANDS:
        assert command in script
    for word in ("--socket", "--output", "--window", "--limit", "--json", "--cgroup-root-dir", "table json yaml",
                 "bash zsh"):
        assert word in script
    if shell == "bash":
        assert "complete -F _koordctl koordctl" in script
        for command in CASES:
            assert f"\n        {command})\n" in script
    else:
        assert script.startswith("#compdef koordctl\n")
        assert "compdef _koordctl koordctl" in script
        for command in CASES:
            assert f"\n                {command})\n" in script


def test_completion_script_is_valid_bash(short_dir: Path) -> None:
    shell = "bash"  # zsh is checked in tests/integration/koordctl (host-deps installs it)
    out = io.StringIO()
    assert main(["completion", shell], out=out, environ={}) == 0
    script = short_dir / f"koordctl.{shell}"
    script.write_text(out.getvalue())
    subprocess.run([shell, "-n", str(script)], check=True, timeout=30)


def test_bash_completion_completes(short_dir: Path) -> None:
    out = io.StringIO()
    main(["completion", "bash"], out=out, environ={})
    script = short_dir / "koordctl.bash"
    script.write_text(out.getvalue())

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        probe = (f'source {script}; COMP_WORDS=(koordctl {line}); COMP_CWORD={len(words)}; '
                 '_koordctl; printf "%s\\n" "${COMPREPLY[@]}"')
        result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, timeout=30,
                                env={**os.environ, "LC_ALL": "C"})
        return sorted(filter(None, result.stdout.splitlines()))

    assert complete("ev") == ["evictions"]
    assert complete("pods", "-o", "y") == ["yaml"]
    assert complete("pods", "-o", "") == ["json", "table", "yaml"]
    assert complete("hooks", "--l") == ["--limit"]
    assert complete("completion", "") == ["--help", "-h", "bash", "zsh"]


def test_humanisers() -> None:
    assert [render.duration(s) for s in (0, 59, 60, 61, 3600, 3660, 86400, 90000)] == [
        "0s", "59s", "1m", "1m1s", "1h", "1h1m", "1d", "1d1h"]
    assert render.age(NOW + 10, NOW) == "0s" and render.age(None, NOW) == "-"
    assert [render.size(v) for v in (0, 1023, 1024, 1536, "max", -1, "4096", None)] == [
        "0", "1023", "1Ki", "1.5Ki", "unlimited", "unlimited", "4Ki", "-"]


def test_socket_default_follows_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    from koordlet.cli.koordctl_cmds.flags import resolve_socket

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert resolve_socket(None, {"XDG_STATE_HOME": "/home/u/.state"}) == "/home/u/.state/koordlet/debug.sock"
    assert resolve_socket(None, {"KOORDCTL_SOCKET": "/tmp/x.sock"}) == "/tmp/x.sock"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert resolve_socket(None, {}) == "/var/run/koordlet/debug.sock"
