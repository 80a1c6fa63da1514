"""``koordlet``: flags, failure exits, and the real process started, probed and stopped by a signal."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.cli.koordlet import main
from koordlet.daemon.run import node_info_fields
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from koordlet.system.probes import PROBE_NAMES
from koordlet.version import __version__
from tests.fixtures.fakehost import FakeHost

REPO_ROOT = Path(__file__).resolve().parents[3]
START_DEADLINE_SECONDS = 60.0
STOP_DEADLINE_SECONDS = 30.0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"koordlet {__version__}\n"


def test_help_lists_run_and_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "run" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--standalone",
        "--config",
        "--log-format",
        "--log-level",
        "--state-dir",
        "--cgroup-root-dir",
        "--proc-root-dir",
        "--sys-root-dir",
        "--var-run-root-dir",
    ):
        assert flag in out, flag


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_bad_config_file_exits_2_naming_the_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "koordlet.yaml"
    config.write_text("logFormat: xml\n")
    assert main(["run", "--standalone", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (f"koordlet: error: {config}: logFormat: must be one of text, json, got 'xml'\n")


def test_unreadable_host_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["run", "--standalone", "--log-format", "json", "--state-dir", str(tmp_path / "state")]
    assert main([*args, "--proc-root-dir", str(empty), "--sys-root-dir", str(empty)]) == 1
    last = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert last["msg"] == "cannot read the host"
    assert str(empty) in last["error"]


def test_state_dir_that_cannot_be_created_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["run", "--standalone", "--log-format", "json", "--state-dir", str(blocker / "state")]) == 1
    last = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert last["msg"] == "cannot create the state directory"


def test_missing_c_core_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import koordlet

    # As if the package were installed without its compiled core: importing koordlet._native fails,
    # and koordlet.native must be imported afresh to notice.
    monkeypatch.setitem(sys.modules, "koordlet._native", None)
    for name in [n for n in sys.modules if n == "koordlet.native" or n.startswith("koordlet.native.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(koordlet, "native")
    assert main(["run", "--standalone", "--log-format", "json", "--state-dir", str(tmp_path)]) == 1
    last = json.loads(capsys.readouterr().err.splitlines()[-1])
    assert last["msg"] == "C core unavailable"
    assert "C core is not built" in last["error"]


# ------------------------------------------------------------------------------------ the real process


class Agent:
    """A ``koordlet`` process (the installed console script) whose JSON log lines are read as they come."""

    def __init__(self, args: list[str]) -> None:
        script = Path(sys.executable).parent / "koordlet"
        assert script.exists(), f"console script {script} missing: install the package (pip install -e .)"
        env = dict(os.environ)
        # The tree under test, even if another koordlet is installed for this interpreter.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [str(script), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def _next(self, deadline: float) -> dict[str, Any] | None:
        """The next JSON log line; None at the end of the output.  Raises TimeoutError at the deadline."""
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                raw = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if raw is None:
                self._queue.put(None)  # stay at the end for later calls
                return None
            self.raw.append(raw)
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a traceback or a foreign line: kept in self.raw for the failure message
            self.lines.append(line)
            return line  # type: ignore[no-any-return]
        raise TimeoutError

    def wait_for(self, msg: str, deadline_seconds: float) -> dict[str, Any]:
        """The first log line with this message, reading until the deadline or the end of the output."""
        deadline = time.monotonic() + deadline_seconds
        for seen in self.lines:
            if seen.get("msg") == msg:
                return seen
        try:
            while (line := self._next(deadline)) is not None:
                if line.get("msg") == msg:
                    return line
        except TimeoutError:
            pass
        raise AssertionError(f"no {msg!r} log line within {deadline_seconds}s; output:\n{''.join(self.raw)}")

    def read_to_end(self, deadline_seconds: float) -> None:
        deadline = time.monotonic() + deadline_seconds
        try:
            while self._next(deadline) is not None:
                pass
        except TimeoutError:
            raise AssertionError(f"output did not end within {deadline_seconds}s") from None

    def messages(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("msg") == msg]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE_SECONDS)


@pytest.fixture
def start_agent() -> Iterator[Callable[[list[str]], Agent]]:
    agents: list[Agent] = []

    def start(args: list[str]) -> Agent:
        agent = Agent(args)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.kill()


def run_until_signal(
    start_agent: Callable[[list[str]], Agent], sig: signal.Signals, state_dir: Path, host_flags: list[str]
) -> Agent:
    """Start ``koordlet run --standalone``, wait until it is up, send ``sig``, check the clean stop."""
    # Private NRI socket and kubelet directory: the defaults are the host's (tests/fixtures/isolation.py).
    agent = start_agent(["run", "--standalone", "--log-format", "json", "--state-dir", str(state_dir),
                         "--addr", "127.0.0.1:0", "--debug-socket=",
                         f"--runtime-hooks-nri-socket-path={state_dir.parent / 'no-nri.sock'}",
                         f"--var-lib-kubelet-dir={state_dir.parent / 'kubelet'}", *host_flags])
    agent.wait_for("koordlet started", START_DEADLINE_SECONDS)
    assert agent.proc.poll() is None
    agent.proc.send_signal(sig)
    stopped = agent.wait_for("koordlet stopped", STOP_DEADLINE_SECONDS)
    assert agent.proc.wait(STOP_DEADLINE_SECONDS) == 0
    agent.read_to_end(STOP_DEADLINE_SECONDS)
    assert stopped["reason"] == f"signal {sig.name}"
    assert stopped["level"] == "info"
    assert agent.lines[-1] is stopped, "the stop line must be the last line"
    assert state_dir.is_dir()
    starting = agent.messages("koordlet starting")[0]
    assert (starting["version"], starting["mode"], starting["state_dir"]) == (__version__, "standalone", str(state_dir))
    (core,) = agent.messages("native core")
    assert core["abi_version"] == native.ABI_VERSION
    assert (core["has_perf"], core["has_sched_core"], core["has_psi_trigger"]) == (
        native.HAS_PERF,
        native.HAS_SCHED_CORE,
        native.HAS_PSI_TRIGGER,
    )
    probes = agent.messages("host capability")
    assert [p["probe"] for p in probes] == list(PROBE_NAMES)
    assert all(isinstance(p["supported"], bool) and p["reason"] for p in probes)
    return agent


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_standalone_on_a_fake_host_stops_cleanly_on(
    sig: signal.Signals, start_agent: Callable[[list[str]], Agent], tmp_path: Path
) -> None:
    host = FakeHost(tmp_path / "host", mode="v1")
    flags = [
        f"--cgroup-root-dir={host.paths.cgroup_root}",
        f"--proc-root-dir={host.paths.proc_root}",
        f"--sys-root-dir={host.paths.sys_root}",
        f"--var-run-root-dir={host.paths.var_run_root}",
    ]
    agent = run_until_signal(start_agent, sig, tmp_path / "state", flags)
    (roots,) = agent.messages("host roots")
    assert roots["proc_root"] == host.paths.proc_root
    # The node as the fake tree describes it (4 CPUs, v1), read by the agent through the C core.
    (node,) = agent.messages("node info")
    assert {k: node[k] for k in node_info_fields(read_node_info(host.paths, native))} == node_info_fields(
        read_node_info(host.paths, native)
    )
    assert (node["cpu_count"], node["online_cpus"], node["cgroup_mode"]) == (4, "0-3", "v1")


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_standalone_on_this_host_stops_cleanly_on(
    sig: signal.Signals, start_agent: Callable[[list[str]], Agent], tmp_path: Path
) -> None:
    # A kube parent of its own (absent): the host's kubepods tree is not the test's.
    private_parent = f"--cgroup-kube-parent=koordlet-test-{os.getpid()}"
    agent = run_until_signal(start_agent, sig, tmp_path / "state", [private_parent])
    (node,) = agent.messages("node info")
    expected = node_info_fields(read_node_info(HostPaths(), native))
    assert {k: node[k] for k in expected} == expected


def test_kubernetes_mode_takes_pods_from_kubelet(
    start_agent: Callable[[list[str]], Agent], fake_kubelet: Any, tmp_path: Path
) -> None:
    from tests.fixtures.fakekubelet import make_pod

    fake_kubelet.set_pods([make_pod("web", qos_class="Burstable"), make_pod("batch", qos_class="BestEffort")])
    options = fake_kubelet.options()
    host = FakeHost(tmp_path / "host", mode="v1")
    agent = start_agent([
        "run", "--log-format", "json", "--state-dir", str(tmp_path / "state"), "--addr", "127.0.0.1:0",
        "--debug-socket=", "--node-name", "node-1", f"--cgroup-root-dir={host.paths.cgroup_root}",
        f"--proc-root-dir={host.paths.proc_root}", f"--sys-root-dir={host.paths.sys_root}",
        "--kubelet-addr", options.address, "--kubelet-port", str(options.port), "--kubelet-ca-file",
        options.ca_file, "--kubelet-token-file", options.token_file, "--kubelet-sync-interval", "1s",
        f"--runtime-hooks-addr={tmp_path / 'run' / 'koordlet.sock'}",
        f"--runtime-hooks-registration-dir={tmp_path / 'hookserver.d'}",
        f"--runtime-hooks-nri-socket-path={tmp_path / 'nri' / 'nri.sock'}",
    ])
    received = agent.wait_for("kubelet pod list received", START_DEADLINE_SECONDS)
    assert received["pods"] == 2
    assert agent.messages("koordlet starting")[0]["mode"] == "kubernetes"
    agent.wait_for("koordlet started", START_DEADLINE_SECONDS)
    assert fake_kubelet.requests[0].authorization == "Bearer token-1"
    # The hook server registered itself for the runtime proxy, and unregisters on the way out.
    registration = json.loads((tmp_path / "hookserver.d" / "koordlet.json").read_text())
    assert registration["remote-endpoint"] == str(tmp_path / "run" / "koordlet.sock")
    assert (tmp_path / "run" / "koordlet.sock").is_socket()
    agent.proc.send_signal(signal.SIGTERM)
    agent.wait_for("koordlet stopped", STOP_DEADLINE_SECONDS)
    assert agent.proc.wait(STOP_DEADLINE_SECONDS) == 0
    assert not (tmp_path / "hookserver.d" / "koordlet.json").exists()
    assert not (tmp_path / "run" / "koordlet.sock").exists()
