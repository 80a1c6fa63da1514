"""Configuration: defaults, YAML over defaults, flags over YAML, errors that name the field path."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from koordlet.apis.duration import parse_seconds_or_duration
from koordlet.config import add_flags, flags_from_args, gates, load
from koordlet.config.load import embedded_standalone_default
from koordlet.errors import ConfigError


def parse(argv: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return flags_from_args(parser.parse_args(argv))


def test_defaults_are_koordinators() -> None:
    config = load()
    assert config.server.addr == ":9316"
    assert config.kubelet.sync_interval_seconds == 10 and config.kubelet.sync_timeout_seconds == 3
    assert config.collector.res_used_interval_seconds == 1 and config.collector.psi_interval_seconds == 10
    assert config.collector.cpi_interval_seconds == 60 and config.collector.sys_metric_outdated_seconds == 10
    assert config.metric_cache.retention_seconds == 12 * 3600
    assert config.host.cgroup_root_dir == "/sys/fs/cgroup" and not config.standalone


def test_file_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "koordlet.yaml"
    path.write_text("kubelet:\n  syncIntervalSeconds: 5s\n  port: 10255\nfeatureGates: {PSICollector: true}\n"
                    "workloads:\n- {name: nginx, systemdUnit: nginx.service, qosClass: LS, priority: 9000}\n")
    config = load(path, parse(["--kubelet-sync-interval", "1m30s", "--feature-gates", "CPICollector=true",
                               "--kubelet-insecure-tls"]))
    assert config.kubelet.sync_interval_seconds == 90 and config.kubelet.port == 10255
    assert config.kubelet.insecure_tls is True
    assert dict(config.feature_gates) == {"CPICollector": True}  # the flag replaces the file's gates
    assert config.workloads[0].systemd_unit == "nginx.service"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kubelet: {port: 0}", "kubelet.port: must be 1..65535, got 0"),
        ("kubelet: {prot: 1}", "kubelet: unknown key(s) prot"),
        ("collector: {resUsedIntervalSeconds: -1}", "collector.resUsedIntervalSeconds: must be > 0"),
        ("collector: {resUsedIntervalSeconds: soon}", "collector.resUsedIntervalSeconds: not a duration"),
        ("logLevel: loud", "logLevel: must be one of"),
        ("featureGates: {Bogus: true}", "unknown gate(s) Bogus"),
        ("featureGates: {PSICollector: yes please}", "featureGates: expected a mapping of name to true/false"),
        ("workloads: [{name: a, cgroupPath: x, systemdUnit: y}]", "workloads[0]: set exactly one"),
        ("workloads: [{name: a, cgroupPath: ../etc}]", "workloads[0].cgroupPath: must not contain '..'"),
        ("workloads: [{name: a, cgroupPath: x}, {name: a, cgroupPath: y}]", "workloads[1].name: duplicate"),
        ("host: {cgroupKubeParent: /abs}", "host.cgroupKubeParent: must be relative"),
        ("- a list", "expected a mapping at the top"),
        ("server: {addr: nowhere}", "server.addr: must be [host]:port"),
    ],
)
def test_bad_values_name_the_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_bad_flags_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kubelet\.port: invalid literal"):
        load(None, parse(["--kubelet-port", "ten"]))
    with pytest.raises(ConfigError, match="Name=true or Name=false"):
        load(None, parse(["--feature-gates", "PSICollector"]))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "missing.yaml")


def test_embedded_standalone_default() -> None:
    config = load(None, {}, embedded_standalone_default())
    assert config.standalone and config.discover_kubepods
    effective = gates.resolve(config.feature_gates)
    assert effective["PSICollector"] and effective["CPICollector"] and effective["BECPUSuppress"]


def test_gates_all_alpha_and_overrides() -> None:
    effective = gates.resolve({"AllAlpha": True, "CoreSched": False})
    assert effective["PSICollector"] and not effective["CoreSched"] and effective["CPUBurst"]
    assert not gates.resolve({"AllBeta": False})["CPUBurst"]


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10), ("1m30s", 90), ("12h", 43200), ("500ms", 0.5),
                                               ("2.5", 2.5), ("1h1m1s", 3661)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_seconds_or_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "s", "10x", "1h-1m", "m"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_seconds_or_duration(bad)
