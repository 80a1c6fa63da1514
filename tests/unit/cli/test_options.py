"""``koordlet run`` options: flags over the YAML file over defaults; validation names file, key, value."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.cli.common import default_state_dir
from koordlet.cli.koordlet import build_parser
from koordlet.cli.options import CONFIG_KEYS, load_config_file, resolve_run_options
from koordlet.errors import ConfigError


def options(*argv: str):  # type: ignore[no-untyped-def]
    return resolve_run_options(build_parser().parse_args(["run", *argv]))


def test_defaults() -> None:
    opts = options("--standalone")
    assert opts.standalone
    assert (opts.log_format, opts.log_level) == ("text", "info")
    assert opts.state_dir == default_state_dir()
    assert opts.host_roots == {}
    assert opts.config_file is None


def test_config_keys_are_the_flags_in_camel_case() -> None:
    assert {
        "logFormat",
        "logLevel",
        "stateDir",
        "cgroupRootDir",
        "procRootDir",
        "sysRootDir",
        "varRunRootDir",
    } == CONFIG_KEYS


def test_file_values_apply_and_flags_override_them(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "koordlet.yaml"
    config.parent.mkdir()
    config.write_text(
        "logFormat: json\nlogLevel: DEBUG\nstateDir: state\ncgroupRootDir: /host/cgroup\nprocRootDir: /host/proc\n"
    )
    opts = options("--standalone", "--config", str(config), "--log-level", "warning", "--proc-root-dir", "/p")
    assert opts.config_file == config
    assert opts.log_format == "json"
    assert opts.log_level == "warning"
    # Relative paths in the file are relative to the file.
    assert opts.state_dir == tmp_path / "etc" / "state"
    assert opts.host_roots == {"cgroup_root": "/host/cgroup", "proc_root": "/p"}


def test_relative_flags_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    opts = options("--standalone", "--sys-root-dir", "fake/sys", "--state-dir", "st")
    assert opts.host_roots == {"sys_root": str(tmp_path / "fake" / "sys")}
    assert opts.state_dir == tmp_path / "st"


def test_empty_file_is_no_options(tmp_path: Path) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text("# nothing set\n")
    assert load_config_file(config) == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("logFormat: xml\n", r"logFormat: expected one of text, json, got 'xml'"),
        ("logLevel: 3\n", r"logLevel: expected one of debug, info, warning, error, critical, got 3"),
        ("stateDir: ''\n", r"stateDir: expected a directory path, got ''"),
        ("cgroupRootDir: [a]\n", r"cgroupRootDir: expected a directory path, got \['a'\]"),
        ("cgroup_root_dir: /x\nbogus: 1\n", r"unknown option\(s\) bogus, cgroup_root_dir; known: cgroupRootDir"),
        ("- a\n- b\n", r"expected a mapping of option to value, got list"),
        ("logFormat: [unclosed\n", r"not valid YAML"),
    ],
)
def test_bad_files_name_the_file_key_and_value(tmp_path: Path, content: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config_file(config)
    assert str(caught.value).startswith(f"{config}: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("euid", "environ", "expected"),
    [
        (0, {"XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}, "/var/lib/koordlet"),
        (1000, {"XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/koordlet"),
        (1000, {"XDG_STATE_HOME": "relative/ignored", "HOME": "/home/u"}, "/home/u/.local/state/koordlet"),
        (1000, {"HOME": "/home/u"}, "/home/u/.local/state/koordlet"),
    ],
)
def test_default_state_dir(euid: int, environ: dict[str, str], expected: str) -> None:
    assert default_state_dir(euid, environ) == Path(expected)
