"""The pieces of a node scenario: real processes with their logs, the node's cgroups as the kernel has them,
koordlet's debug API and Prometheus endpoint, and the run's report.

Every process is started by the harness in its own session, stopped by its PID (SIGTERM, then SIGKILL after a
bound) and leaves its log in the run's directory, whose tail is shown when a scenario fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.fixtures import debugclient
from tests.fixtures.containerd import CGROUP_ROOT, unified_cgroups
from tests.fixtures.waiting import wait_until

STOP_SECONDS = 15.0
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def console_script(name: str) -> list[str]:
    """The installed console script beside this interpreter (what a node runs), else the module."""
    path = BIN / name
    if path.exists():
        return [str(path)]
    modules = {"koordlet": "koordlet.cli.koordlet", "koord-companion": "koordlet.companion.cli",
               "koord-runtime-proxy": "runtimeproxy.cli"}
    return [sys.executable, "-m", modules[name]]


class Proc:
    """One component as a real process."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = {**os.environ, **(env or {})}
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=self._env, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after :data:`STOP_SECONDS`; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(STOP_SECONDS)
        return proc.returncode

    def kill(self) -> int:
        """SIGKILL, as a crash or the OOM killer ends it, and reaps it; returns the PID it had."""
        proc = self._proc
        assert proc is not None and proc.poll() is None, f"{self.name} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(STOP_SECONDS)
        return proc.pid

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.name} exited with {self.exit_code()}:\n{self.log_tail()}")


# --------------------------------------------------------------------------------------- the kernel's view


def cgroup_file(rel_dir: str, v1_subsystem: str, v1_name: str, v2_name: str) -> Path:
    rel = rel_dir.strip("/")
    if unified_cgroups():
        return CGROUP_ROOT / rel / v2_name
    return CGROUP_ROOT / v1_subsystem / rel / v1_name


def cpu_usage_ns(rel_dir: str) -> int:
    """CPU time used by a cgroup and its children, from the kernel."""
    if unified_cgroups():
        for line in (CGROUP_ROOT / rel_dir.strip("/") / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) * 1000
        raise AssertionError(f"no usage_usec in {rel_dir}/cpu.stat")
    return int((CGROUP_ROOT / "cpuacct" / rel_dir.strip("/") / "cpuacct.usage").read_text())


def cfs_quota(rel_dir: str) -> tuple[int, int]:
    """(quota, period) in microseconds; quota -1 when unlimited."""
    if unified_cgroups():
        quota, period = (CGROUP_ROOT / rel_dir.strip("/") / "cpu.max").read_text().split()
        return (-1 if quota == "max" else int(quota)), int(period)
    base = CGROUP_ROOT / "cpu" / rel_dir.strip("/")
    return int((base / "cpu.cfs_quota_us").read_text()), int((base / "cpu.cfs_period_us").read_text())


def cpu_shares(rel_dir: str) -> int:
    """cpu.shares (on v2 the shares kubelet's weight formula came from, rounded as the runtime does)."""
    if unified_cgroups():
        weight = int((CGROUP_ROOT / rel_dir.strip("/") / "cpu.weight").read_text())
        return weight  # compared against the weight of the expected shares by the caller
    return int((CGROUP_ROOT / "cpu" / rel_dir.strip("/") / "cpu.shares").read_text())


def memory_limit(rel_dir: str) -> int:
    """The memory limit in bytes; -1 when unlimited."""
    path = cgroup_file(rel_dir, "memory", "memory.limit_in_bytes", "memory.max")
    text = path.read_text().strip()
    if text == "max" or int(text) >= 1 << 62:
        return -1
    return int(text)


def cpuset_cpus(rel_dir: str) -> str:
    return cgroup_file(rel_dir, "cpuset", "cpuset.cpus", "cpuset.cpus").read_text().strip()


def cgroup_exists(rel_dir: str) -> bool:
    if unified_cgroups():
        return (CGROUP_ROOT / rel_dir.strip("/")).is_dir()
    return any((CGROUP_ROOT / sub / rel_dir.strip("/")).is_dir() for sub in ("cpu", "memory", "cpuset"))


def measure_cores(rel_dir: str, seconds: float) -> float:
    """Cores a cgroup used over ``seconds``, measured from its CPU time."""
    start_ns, start = cpu_usage_ns(rel_dir), time.monotonic()
    time.sleep(seconds)  # a measurement window, not a wait for an outcome
    return (cpu_usage_ns(rel_dir) - start_ns) / 1e9 / (time.monotonic() - start)


# --------------------------------------------------------------------------------------- koordlet's view


class KoordletView:
    """What a running koordlet says about itself: debug API (unix socket) and Prometheus (/metrics)."""

    def __init__(self, debug_socket: Path, metrics_port: int) -> None:
        self.debug_socket = debug_socket
        self.metrics_port = metrics_port

    def get(self, path: str) -> Any:
        code, body = debugclient.get(str(self.debug_socket), path)
        if code != 200:
            raise AssertionError(f"debug API {path}: HTTP {code}: {body}")
        return body

    def not_running(self) -> list[str] | None:
        """Components that are not running, or None while the debug API does not answer."""
        if not self.debug_socket.exists():
            return None
        try:
            status = self.get("/v1/status")
        except (OSError, AssertionError):
            return None
        return [c["name"] for c in status.get("components", []) if not c.get("running")]

    def ready(self) -> bool:
        return self.not_running() == []

    def decisions(self, strategy: str) -> list[dict[str, Any]]:
        """The strategy's decisions that acted (history) plus its last one, oldest first."""
        body = self.get("/v1/qos")
        acted = [d for d in body["history"] if d["strategy"] == strategy]
        last = next((s["last"] for s in body["strategies"] if s["name"] == strategy and s["last"]), None)
        if last is not None and (not acted or acted[-1]["at"] != last["at"]):
            acted.append(last)
        return acted

    def last_decision(self, strategy: str) -> dict[str, Any] | None:
        decisions = self.decisions(strategy)
        return decisions[-1] if decisions else None

    def evictions(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/evictions?limit=100")["evictions"])

    def slo(self) -> dict[str, Any]:
        return dict(self.get("/v1/slo"))

    def pods(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/pods")["pods"])

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def series_of_pod(self, pod_name: str) -> list[str]:
        """Prometheus sample lines labelled with ``pod_name``, but the eviction record, which outlives the pod
        by design (five minutes, as Koordinator's GC counter)."""
        needle = f'pod_name="{pod_name}"'
        return [line for line in self.scrape().splitlines()
                if needle in line and not line.startswith(("#", "koordlet_pod_eviction_detail"))]

    def eviction_detail(self, pod_name: str) -> list[str]:
        needle = f'pod_name="{pod_name}"'
        return [line for line in self.scrape().splitlines()
                if needle in line and line.startswith("koordlet_pod_eviction_detail")]


# --------------------------------------------------------------------------------------- the report


class Report:
    """The run's measured figures, one object per scenario and variant, written as JSON after every update
    so a run cut short still leaves what it measured."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"started_at": time.time(), "scenarios": {}}

    def record(self, scenario: str, variant: str, **figures: Any) -> None:
        entry = self.data["scenarios"].setdefault(scenario, {}).setdefault(variant, {})
        entry.update(figures)
        self.write()

    def write(self) -> None:
        self.data["written_at"] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True, default=str) + "\n")
        tmp.replace(self.path)


def wait_for(what: str, check: Callable[[], Any], timeout: float, procs: Sequence[Proc] = ()) -> Any:
    """:func:`wait_until` that fails at once, with the log, when one of ``procs`` died meanwhile."""

    def checked() -> Any:
        for proc in procs:
            proc.check_alive()
        return check()

    try:
        return wait_until(what, checked, timeout=timeout, poll=0.1)
    except AssertionError as exc:
        logs = "\n".join(f"--- {p.name} (pid {p.pid}) log tail:\n{p.log_tail(30)}" for p in procs)
        raise AssertionError(f"{exc}\n{logs}") from None
