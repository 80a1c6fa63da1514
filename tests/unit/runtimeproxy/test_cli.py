"""``koord-runtime-proxy`` as a process, and the systemd unit that runs it."""

from __future__ import annotations

import configparser
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runtimeproxy import cli

REPO_ROOT = Path(__file__).resolve().parents[3]
UNIT = REPO_ROOT / "systemd" / "koord-runtime-proxy.service"


def flags(tmp: Path) -> list[str]:
    return [f"--koord-runtimeproxy-endpoint={tmp / 'proxy.sock'}",
            f"--remote-runtime-service-endpoint={tmp / 'no-containerd.sock'}",
            f"--remote-image-service-endpoint={tmp / 'no-containerd.sock'}",
            f"--runtime-hook-config-dir={tmp / 'hookserver.d'}", f"--checkpoint-path={tmp / 'checkpoint.json'}"]


def test_docker_mode_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert cli.main([*flags(tmp_path), "--backend-runtime-mode=Docker"]) == cli.EXIT_FAILURE
    assert [(r.getMessage(), "'Docker' is not supported" in str(getattr(r, "error", ""))) for r in caplog.records
            if r.levelno == logging.ERROR] == [("cannot start", True)]


def test_a_file_in_the_way_of_the_socket_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "proxy.sock").write_text("not a socket")
    assert cli.main(flags(tmp_path)) == cli.EXIT_FAILURE
    assert [(r.getMessage(), "cannot serve on" in str(getattr(r, "error", ""))) for r in caplog.records
            if r.levelno == logging.ERROR] == [("cannot start", True)]
    assert (tmp_path / "proxy.sock").read_text() == "not a socket"


def test_serves_without_a_backend_and_stops_on_sigterm() -> None:
    with tempfile.TemporaryDirectory(prefix="kprx-") as name:
        tmp = Path(name)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        proc = subprocess.Popen([sys.executable, "-m", "runtimeproxy.cli", *flags(tmp)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            while not (tmp / "proxy.sock").is_socket():  # up although containerd is not
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == cli.EXIT_OK
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log = proc.stderr.read() if proc.stderr else ""
        assert "not reconciled with the backend yet" in log and "stopping signal=SIGTERM" in log
        assert not (tmp / "proxy.sock").exists()


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text().replace("\\\n", " "))
    return parser


def test_systemd_unit_orders_the_proxy_between_containerd_and_kubelet() -> None:
    parsed = unit()
    assert "containerd.service" in parsed["Unit"]["After"]
    assert "kubelet.service" in parsed["Unit"]["Before"]
    assert parsed["Unit"]["StartLimitIntervalSec"] == "0"
    service = parsed["Service"]
    assert service["Restart"] == "always"
    assert service["RuntimeDirectory"] == "koord-runtimeproxy"
    assert service["StateDirectory"] == "koord-runtime-proxy"
    assert "kubelet.service" in parsed["Install"]["RequiredBy"]


def test_systemd_unit_flags_are_the_proxys() -> None:
    argv = shlex.split(unit()["Service"]["ExecStart"])
    assert argv[0].endswith("koord-runtime-proxy")
    args = cli.build_parser().parse_args(argv[1:])
    assert args.koord_runtimeproxy_endpoint == "/var/run/koord-runtimeproxy/runtimeproxy.sock"
    assert Path(args.koord_runtimeproxy_endpoint).parent.name == unit()["Service"]["RuntimeDirectory"]
    assert Path(args.checkpoint_path).parent.name == unit()["Service"]["StateDirectory"]
