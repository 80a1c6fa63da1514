"""The host isolation guard (tests/fixtures/isolation.py): an agent in a test on the host's own paths is caught.

Each violation here is really attempted - by this process, by one of its threads, by a child process, by an
in-process agent's config and by a test of an inner session - and the guard refuses it before it reaches the
host (the targets need not exist: the audit hook runs before the system call).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config import load
from koordlet.config.flags import ROOT_STATE_DIR
from koordlet.config.types import Config
from koordlet.daemon.agent import build_agent
from koordlet.debugapi.contract import DEFAULT_SOCKET
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.isolation import (
    HostDefaultsInTest,
    HostIsolation,
    host_defaults_in,
    host_paths,
    koordlet_run_args,
    private_settings,
    write_config,
)

DEFAULTS = Config()
EVERY_HOST_OPTION = ["stateDir", "host.varLibKubeletRootDir", "qos.terwayQosDir", "server.debugSocket", "server.addr",
                     "runtimeHooks.nriSocketPath", "runtimeHooks.serverSocket", "runtimeHooks.registrationDir",
                     "qos.runtimeEndpoint", "kubelet.tokenFile", "host.cgroupKubeParent"]


def options(found: list[str]) -> list[str]:
    return [item.split("=", 1)[0] for item in found]


def test_the_guarded_paths_are_koordlets_own_defaults_under_both_spellings_of_var_run() -> None:
    paths = host_paths()
    nri = DEFAULTS.runtime_hooks.nri_socket_path
    assert nri.startswith("/var/run/")
    for path in (nri, "/run/" + nri.removeprefix("/var/run/"), DEFAULT_SOCKET, str(ROOT_STATE_DIR),
                 DEFAULTS.runtime_hooks.registration_dir, DEFAULTS.host.var_lib_kubelet_root_dir):
        assert path in paths, path
    # The directory a default socket is made in is guarded; one shared with other software is not.
    assert str(Path(DEFAULT_SOCKET).parent) in paths
    assert "/var/run" not in paths and "/run/containerd" not in paths and "/var/lib" not in paths


def test_every_host_default_of_the_config_is_named() -> None:
    assert options(host_defaults_in(DEFAULTS, ROOT_STATE_DIR)) == EVERY_HOST_OPTION


def test_private_settings_leave_nothing_of_the_hosts(tmp_path: Path) -> None:
    private = private_settings(tmp_path, "koordlet-test-none",
                               runtimeHooks={"enableServer": True}, qos={"evictor": "cri"})
    config = load(write_config(tmp_path / "koordlet.yaml", private))
    assert (config.runtime_hooks.enable_server, config.qos.evictor) == (True, "cri")
    assert host_defaults_in(config, Path(config.state_dir)) == []


def test_a_default_is_fine_while_its_feature_is_off(tmp_path: Path) -> None:
    settings = private_settings(tmp_path, "koordlet-test-none", qos={"evictor": "dry-run"},
                                runtimeHooks={"enableNri": False, "enableServer": False})
    for group, key in (("qos", "runtimeEndpoint"), ("runtimeHooks", "nriSocketPath"),
                       ("runtimeHooks", "serverSocket"), ("runtimeHooks", "registrationDir")):
        del settings[group][key]
    config = load(write_config(tmp_path / "koordlet.yaml", settings))
    assert host_defaults_in(config, Path(config.state_dir)) == []


def test_an_in_process_agent_on_host_defaults_is_refused_before_it_starts(tmp_path: Path) -> None:
    config = load(write_config(tmp_path / "koordlet.yaml", {"standalone": True,
                                                            "server": {"addr": "127.0.0.1:0", "debugSocket": ""}}))
    with pytest.raises(HostDefaultsInTest) as refused:
        build_agent(config, tmp_path / "state", read_node_info(HostPaths(), native))
    for option in ("host.cgroupKubeParent", "runtimeHooks.nriSocketPath", "host.varLibKubeletRootDir"):
        assert option in str(refused.value)
    assert not (tmp_path / "state").exists(), "nothing of the agent was built"


def test_koordlet_run_arguments_are_checked_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(HostDefaultsInTest, match=r"host\.cgroupKubeParent=''.*kubepods"):
        koordlet_run_args(["--standalone", "--state-dir", str(tmp_path / "state"), "--addr", "127.0.0.1:0"])
    config = write_config(tmp_path / "koordlet.yaml", private_settings(tmp_path, "koordlet-test-none"))
    assert koordlet_run_args(["--standalone", "--config", str(config)]) == ["--standalone", "--config", str(config)]


def test_a_default_path_opened_in_this_process_is_refused_and_recorded(host_isolation: HostIsolation) -> None:
    target = f"{ROOT_STATE_DIR}/metrics.db"
    with pytest.raises(PermissionError, match="test isolation refused open"):
        open(target, "w")  # noqa: SIM115 - refused before anything is opened
    [refusal] = host_isolation.take()
    assert (refusal.event, refusal.target, refusal.thread) == ("open", target, "MainThread")
    assert any("test_isolation_fixture.py" in frame for frame in refusal.stack)


def test_a_refusal_an_agent_thread_swallowed_is_still_recorded(host_isolation: HostIsolation) -> None:
    # An agent's component catches OSError and logs it (the NRI dialler retries, the kubepods scan skips).
    def dial() -> None:
        with socket.socket(socket.AF_UNIX) as sock, contextlib.suppress(OSError):
            sock.connect(DEFAULTS.runtime_hooks.nri_socket_path)

    thread = threading.Thread(target=dial, name="runtimehooks-nri")
    thread.start()
    thread.join(10)
    [refusal] = host_isolation.take()
    assert (refusal.event, refusal.thread) == ("socket.connect", "runtimehooks-nri")
    assert refusal.target == DEFAULTS.runtime_hooks.nri_socket_path


def test_a_child_process_is_guarded_too(host_isolation: HostIsolation) -> None:
    kubepods = "/sys/fs/cgroup/cpu/kubepods/besteffort"
    child = subprocess.run([sys.executable, "-c", f"import os; os.listdir({kubepods!r})"], capture_output=True,
                           text=True, timeout=60, check=False)
    assert child.returncode == 1 and "PermissionError" in child.stderr, child.stderr
    [refusal] = host_isolation.take()
    assert (refusal.event, refusal.target) == ("os.listdir", kubepods)
    assert refusal.pid != os.getpid() and "kubepods tree" in refusal.why


def test_paths_of_the_tests_own_are_not_guarded(tmp_path: Path, host_isolation: HostIsolation) -> None:
    private = tmp_path / "var" / "run" / "koordlet"
    private.mkdir(parents=True)
    (private / "debug.sock").write_text("")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
    assert host_isolation.take() == []


INNER = '''
import threading

def test_agent_thread_touches_the_host_and_swallows_the_error():
    def scan():
        try:
            open("/var/run/koordlet/koordlet.sock")
        except OSError:
            pass  # logged and retried, as an agent would
    thread = threading.Thread(target=scan, name="agent")
    thread.start()
    thread.join(10)

def test_private_agent():
    pass
'''


def test_a_test_whose_agent_touched_the_host_fails(pytester: pytest.Pytester, host_isolation: HostIsolation) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.fixtures.isolation"]\n')
    pytester.makepyfile(test_inner=textwrap.dedent(INNER))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_agent_thread_touches_the_host_and_swallows_the_error*",
                                 "*1 use(s) of the host's own paths refused during this test*",
                                 "open /var/run/koordlet/koordlet.sock: /var/run/koordlet* is a default of*",
                                 "*by pid * (thread agent)"])
    assert host_isolation.take() == [], "the inner test's refusal failed the inner test, not this one"
