"""HostPaths: defaults, re-rooting, DaemonSet mounts, joins that cannot escape the root."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from koordlet.errors import ConfigError
from koordlet.system import HostPaths


def test_defaults_are_the_host_roots() -> None:
    paths = HostPaths()
    assert (paths.cgroup_root, paths.proc_root, paths.sys_root, paths.var_run_root) == (
        "/sys/fs/cgroup",
        "/proc",
        "/sys",
        "/var/run",
    )
    assert paths.resctrl_root == "/sys/fs/resctrl"


def test_resctrl_root_follows_sys_root_unless_given() -> None:
    assert HostPaths(sys_root="/host-sys").resctrl_root == "/host-sys/fs/resctrl"
    assert HostPaths(sys_root="/host-sys", resctrl_root="/host-sys-fs/resctrl").resctrl_root == "/host-sys-fs/resctrl"


def test_under_reroots_every_path(tmp_path: Path) -> None:
    paths = HostPaths.under(tmp_path)
    assert paths.cgroup_root == f"{tmp_path}/sys/fs/cgroup"
    assert paths.proc_root == f"{tmp_path}/proc"
    assert paths.sys_root == f"{tmp_path}/sys"
    assert paths.var_run_root == f"{tmp_path}/var/run"
    assert paths.resctrl_root == f"{tmp_path}/sys/fs/resctrl"


def test_daemonset_mounts_match_koordinator() -> None:
    paths = HostPaths.daemonset()
    assert paths.cgroup_root == "/host-cgroup"
    assert paths.proc_root == "/proc"
    assert paths.sys_root == "/host-sys"
    assert paths.var_run_root == "/host-var-run"
    assert paths.resctrl_root == "/host-sys-fs/resctrl"


def test_trailing_and_double_slashes_are_normalised() -> None:
    paths = HostPaths(cgroup_root="/host-cgroup/", proc_root="//proc", sys_root="/host-sys//")
    assert (paths.cgroup_root, paths.proc_root, paths.sys_root) == ("/host-cgroup", "/proc", "/host-sys")


@pytest.mark.parametrize("field", ["cgroup_root", "proc_root", "sys_root", "var_run_root", "resctrl_root"])
def test_relative_root_is_rejected_naming_the_field(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"host_paths\.{field}: must be an absolute path, got 'relative/x'"):
        HostPaths(**{field: "relative/x"})


def test_helpers_join_parts_and_never_leave_the_root() -> None:
    paths = HostPaths.under("/t")
    assert paths.proc("pressure", "memory") == "/t/proc/pressure/memory"
    assert paths.sys("/devices/system/cpu/online") == "/t/sys/devices/system/cpu/online"
    assert paths.cgroup("cpu", "/kubepods/") == "/t/sys/fs/cgroup/cpu/kubepods"
    assert paths.var_run("nri", "nri.sock") == "/t/var/run/nri/nri.sock"
    assert paths.resctrl("schemata") == "/t/sys/fs/resctrl/schemata"
    assert paths.proc() == "/t/proc"


def test_is_frozen_and_hashable() -> None:
    paths = HostPaths()
    with pytest.raises(dataclasses.FrozenInstanceError):
        paths.proc_root = "/elsewhere"  # type: ignore[misc]
    assert hash(paths) == hash(HostPaths()) and paths == HostPaths()
