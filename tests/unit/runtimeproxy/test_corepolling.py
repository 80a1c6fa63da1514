"""The proxy's gRPC core configuration (runtimeproxy.corepolling) and the command line that applies it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtimeproxy import corepolling

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_sets_the_caller_polled_endpoints_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "grpc", raising=False)  # as at the proxy's start: no gRPC yet
    env: dict[str, str] = {}
    assert corepolling.configure(env) is True
    assert env == {"GRPC_EXPERIMENTS": corepolling.ENDPOINTS_POLLED_BY_CALLERS}


def test_the_operator_s_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "grpc", raising=False)
    env = {"GRPC_EXPERIMENTS": "event_engine_client"}
    assert corepolling.configure(env) is False
    assert env == {"GRPC_EXPERIMENTS": "event_engine_client"}


def test_a_process_that_loaded_grpc_keeps_what_it_has() -> None:
    import grpc  # noqa: F401  (gRPC core has read its configuration now)

    env: dict[str, str] = {}
    assert corepolling.configure(env) is False
    assert env == {}


def test_the_command_line_configures_grpc_before_importing_it() -> None:
    # A fresh interpreter, as the proxy starts: importing the command line must not import grpc (main()
    # configures it first), and main() must set the variable before the proxy's modules load gRPC.
    env = {key: value for key, value in os.environ.items() if key != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    probe = ("import os, sys\n"
             "import runtimeproxy.cli as cli\n"
             "assert 'grpc' not in sys.modules, 'runtimeproxy.cli imports grpc'\n"
             "try:\n"
             "    cli.main(['--version'])\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(os.environ.get('GRPC_EXPERIMENTS'), 'grpc' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    assert out[-1] == f"{corepolling.ENDPOINTS_POLLED_BY_CALLERS} True"
