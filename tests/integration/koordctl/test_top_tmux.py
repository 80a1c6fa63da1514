"""``koordctl top`` in a real terminal: a detached tmux session runs it against a fake debug server.

The fake serves the debug API's contract documents (:mod:`koordlet.debugapi.contract`) on a unix socket,
the node's CPU growing at every ``/v1/metrics`` request, so a refresh is visible on screen.  The pods are
chosen so that CPU order, memory order and name order all differ.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from koordlet.debugapi import contract
from tests.fixtures.cleanup import remove_tree

REPO_ROOT = Path(__file__).resolve().parents[3]
DEADLINE_SECONDS = 20.0
MIB = 1024 * 1024

# (namespace, name, qos, cpu cores, memory bytes, cpu shares, cfs quota us)
PODS = (
    ("default", "web-frontend", "LS", 2.5, 100 * MIB, 2048, 250000),
    ("kube-system", "coredns", "LSR", 0.75, 900 * MIB, 1024, -1),
    ("batch", "spark-executor", "BE", 1.25, 2048 * MIB, 2, 50000),
)
BY_CPU = ["web-frontend", "spark-executor", "coredns"]
BY_MEMORY = ["spark-executor", "coredns", "web-frontend"]


class FakeDebugAPI:
    """Canned answers per contract path; ``/v1/metrics`` changes with every request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics_requests = 0
        self.windows: list[str] = []

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if path == contract.STATUS:
            return 200, {"version": "9.9.9-test", "pid": 4242, "node": "node-top-test", "mode": "standalone",
                         "started_at": time.time() - 3723, "uptime_seconds": 3723.0, "components": [],
                         "feature_gates": {}, "probes": [], "companion": None}
        if path == contract.METRICS:
            with self.lock:
                self.metrics_requests += 1
                n = self.metrics_requests
                self.windows.extend(query.get("window", []))
            pods = [{"namespace": ns, "name": name, "qos": qos, "cpu_cores": cpu + n / 1000, "memory_bytes": mem}
                    for ns, name, qos, cpu, mem, _, _ in PODS]
            return 200, {"window_seconds": float(query.get("window", ["60"])[0]),
                         "node": {"cpu_cores": 3.0 + n, "memory_bytes": 6 * 1024 * MIB}, "pods": pods}
        if path == contract.PODS:
            return 200, {"pods": [
                {"namespace": ns, "name": name, "uid": f"uid-{name}", "qos": qos, "kube_qos": "Burstable",
                 "priority_class": "", "priority": 0, "phase": "Running", "source": "kubelet",
                 "cgroup_dir": f"kubepods/pod{name}", "containers": [],
                 "current": {"cpu_shares": shares, "cpu_cfs_quota": quota, "cpu_cfs_period": 100000},
                 "desired": {}}
                for ns, name, qos, _, _, shares, quota in PODS]}
        if path == contract.SLO:
            return 200, {"origin": "companion", "generation": 7, "rejected": None, "spec": {}}
        return 404, {"error": f"unknown path {path}"}


class _UnixHTTPServer(ThreadingHTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True

    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler]) -> None:
        # typeshed types server_address as an inet (host, port) pair; AF_UNIX takes a path.
        super().__init__(path, handler)  # type: ignore[arg-type]

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up a (host, port) pair that a unix socket does not have.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", 0


def _handler(api: FakeDebugAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            status, document = api.answer(url.path, parse_qs(url.query))
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def address_string(self) -> str:
            return "unix"

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # sun_path holds 108 bytes: pytest's tmp_path is too deep for a socket.
    path = Path(tempfile.mkdtemp(prefix="kctop", dir="/tmp"))
    try:
        yield path
    finally:
        remove_tree(path)


@pytest.fixture
def fake_api(short_dir: Path) -> Iterator[tuple[FakeDebugAPI, Path]]:
    api = FakeDebugAPI()
    sock = short_dir / "debug.sock"
    server = _UnixHTTPServer(str(sock), _handler(api))
    thread = threading.Thread(target=server.serve_forever, name="fake-debug-api", daemon=True)
    thread.start()
    try:
        yield api, sock
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Tmux:
    """One detached session on its own tmux server (``-L``), so nothing else's sessions are touched."""

    def __init__(self) -> None:
        self.name = f"kctop-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def _tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=10,
                              check=False)

    def start(self, shell_command: str) -> None:
        result = self._tmux("new-session", "-d", "-s", self.name, "-x", "160", "-y", "40", "-c", str(REPO_ROOT),
                            shell_command)
        assert result.returncode == 0, result.stderr

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-t", self.name).stdout

    def send(self, key: str) -> None:
        assert self._tmux("send-keys", "-t", self.name, key).returncode == 0

    def wait_for(self, condition: Callable[[str], bool], what: str, timeout: float = DEADLINE_SECONDS) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"timed out after {timeout:g}s waiting for {what}; screen:\n{screen}")

    def kill(self) -> None:
        """Ends this test's own tmux server (``-L``), its session and whatever that session ran."""
        result = self._tmux("kill-server")
        if result.returncode != 0 and "no server running" not in result.stderr:
            raise RuntimeError(f"tmux -L {self.name} kill-server failed: {result.stderr.strip()}")



@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (tests/host-deps.sh installs it)")
    session = Tmux()
    try:
        yield session
    finally:
        session.kill()


def top_command(*args: str) -> str:
    """The shell command the pane runs: ``koordctl top ARGS``, then its exit status, then a pause to read it."""
    argv = [sys.executable, "-m", "koordlet.cli.koordctl", "top", *args]
    env = f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}"
    return f"env {env} {shlex.join(argv)}; echo EXIT=$?; sleep 60"


def pod_order(screen: str) -> list[str]:
    names = [name for _, name, *_ in PODS]
    rows = [line for line in screen.splitlines() if any(f" {name} " in f" {line} " for name in names)]
    return [next(name for name in names if f" {name} " in f" {row} ") for row in rows]


def node_cpu(screen: str) -> float | None:
    match = re.search(r"CPU (\d+\.\d+) cores", screen)
    return float(match.group(1)) if match else None


def test_top_refreshes_sorts_and_quits(tmux: Tmux, fake_api: tuple[FakeDebugAPI, Path]) -> None:
    api, sock = fake_api
    tmux.start(top_command("--socket", str(sock), "--interval", "0.3", "--window", "15"))

    screen = tmux.wait_for(lambda s: "node-top-test" in s and len(pod_order(s)) == 3, "the first frame")
    assert "mode standalone" in screen
    assert "uptime 01:02:03" in screen
    assert "NodeSLO: origin companion  generation 7" in screen
    assert "Node usage (avg 15s)" in screen
    assert "MEMORY 6.0Gi" in screen
    for column in ("NAMESPACE", "NAME", "QOS", "CPU(cores)", "MEMORY", "CPU-SHARES", "QUOTA"):
        assert column in screen
    assert "q quit" in screen
    assert pod_order(screen) == BY_CPU
    web = next(line for line in screen.splitlines() if "web-frontend" in line)
    assert re.search(r"default\s+web-frontend\s+LS\s+2\.5\d\d\s+100\.0Mi\s+2048\s+2\.50\s*$", web), web
    coredns = next(line for line in screen.splitlines() if "coredns" in line)
    assert coredns.rstrip().endswith("max"), coredns
    assert set(api.windows) == {"15"}

    first_cpu = node_cpu(screen)
    assert first_cpu is not None
    tmux.wait_for(lambda s: (node_cpu(s) or 0) > first_cpu, "a refresh with the new node CPU")

    tmux.send("m")
    screen = tmux.wait_for(lambda s: pod_order(s) == BY_MEMORY, "the memory order")
    assert "sorted by memory" in screen
    tmux.send("n")
    tmux.wait_for(lambda s: pod_order(s) == ["spark-executor", "web-frontend", "coredns"], "the name order")
    tmux.send("c")
    tmux.wait_for(lambda s: pod_order(s) == BY_CPU, "the CPU order again")

    tmux.send("q")
    screen = tmux.wait_for(lambda s: "EXIT=" in s, "koordctl top to exit")
    assert "EXIT=0" in screen


def test_top_without_daemon_says_not_running(tmux: Tmux, short_dir: Path) -> None:
    missing = short_dir / "debug.sock"
    # The socket comes from $KOORDCTL_SOCKET when --socket is not given.
    command = top_command("--interval", "0.3")
    tmux.start(f"export KOORDCTL_SOCKET={shlex.quote(str(missing))}; {command}")

    screen = tmux.wait_for(lambda s: "EXIT=" in s, "koordctl top to exit")
    expected = (f"koordlet is not running (no debug socket at {missing}): start it with "
                "`systemctl start koordlet` or `koordlet run --standalone`")
    assert expected in screen
    assert "EXIT=3" in screen
