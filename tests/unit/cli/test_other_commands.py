"""``koord-runtime-proxy`` and ``koord-companion`` (help and version), and the console scripts."""

from __future__ import annotations

from importlib import metadata

import pytest

from koordlet.companion import cli as companion_cli
from koordlet.version import __version__
from runtimeproxy import cli as proxy_cli

CONSOLE_SCRIPTS = {
    "koordlet": "koordlet.cli.koordlet:main",
    "koordctl": "koordlet.cli.koordctl:main",
    "koord-runtime-proxy": "runtimeproxy.cli:main",
    "koord-companion": "koordlet.companion.cli:main",
}


def test_console_scripts_are_declared_and_load() -> None:
    try:
        dist = metadata.distribution("koordlet")
    except metadata.PackageNotFoundError:
        pytest.fail("the koordlet distribution is not installed: pip install -e .")
    scripts = {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}
    assert {name: ep.value for name, ep in scripts.items()} == CONSOLE_SCRIPTS
    for ep in scripts.values():
        assert callable(ep.load())
    assert dist.version == __version__


@pytest.mark.parametrize(("cli", "prog"), [(proxy_cli, "koord-runtime-proxy"), (companion_cli, "koord-companion")])
def test_version(cli: object, prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])  # type: ignore[attr-defined]
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{prog} {__version__}\n"


def test_companion_without_kubernetes_or_a_config_file_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert companion_cli.main(["--metrics-addr=", "--grpc-addr=127.0.0.1:0", "--extender-addr=127.0.0.1:0"]) == 1
    err = capsys.readouterr().err
    assert "cannot start" in err and "KUBERNETES_SERVICE_HOST" in err


def test_proxy_takes_koordinator_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        proxy_cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--koord-runtimeproxy-endpoint",
        "--remote-runtime-service-endpoint",
        "--backend-runtime-mode",
        "--runtime-hook-server-key",
        "--runtime-hook-server-val",
    ):
        assert flag in out, flag
    args = proxy_cli.build_parser().parse_args([])
    assert args.koord_runtimeproxy_endpoint == "/var/run/koord-runtimeproxy/runtimeproxy.sock"
    assert args.remote_runtime_service_endpoint == "/var/run/containerd/containerd.sock"
    assert args.backend_runtime_mode == "Containerd"
    assert args.runtime_hook_server_key == "runtimeproxy.koordinator.sh/skip-hookserver"
    assert args.runtime_hook_server_val == "true"
    with pytest.raises(SystemExit) as exited:
        proxy_cli.main(["--backend-runtime-mode", "Podman"])
    assert exited.value.code == 2
