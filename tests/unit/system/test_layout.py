"""cgroup mode detection from the tree under the cgroup root."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from koordlet.errors import ParseError, Unsupported
from koordlet.system import CgroupMode, HostPaths, clean_rel_dir, detect_layout
from tests.fixtures.fakehost import FakeHost


def test_v1_maps_each_subsystem_to_its_dir(fake_host: FakeHost) -> None:
    layout = fake_host.layout()
    root = fake_host.paths.cgroup_root
    assert layout.mode is CgroupMode.V1
    assert layout.controller_version == 1
    assert layout.unified_root is None
    assert layout.subsystem_dir("cpu") == f"{root}/cpu"
    assert layout.subsystem_dir("cpuacct") == f"{root}/cpuacct"
    assert layout.subsystem_dir("memory") == f"{root}/memory"
    assert layout.subsystem_dir("name=systemd") == f"{root}/systemd"
    assert layout.subsystem_dir("pids") is None
    assert layout.v2_controllers() == frozenset()


def test_v2_root_is_the_unified_hierarchy(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    layout = fake_host.layout()
    assert layout.mode is CgroupMode.V2
    assert layout.controller_version == 2
    assert layout.unified_root == fake_host.paths.cgroup_root
    assert layout.v1_mounts == {}
    assert layout.controller_root("memory") == fake_host.paths.cgroup_root
    assert layout.v2_controllers() == {"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}


def test_hybrid_has_v1_controllers_and_a_unified_mount(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")
    layout = fake_host.layout()
    root = fake_host.paths.cgroup_root
    assert layout.mode is CgroupMode.HYBRID
    assert layout.controller_version == 1
    assert layout.unified_root == f"{root}/unified"
    assert layout.controller_root("cpu") == f"{root}/cpu"
    assert "unified" not in layout.v1_mounts
    assert layout.v2_controllers() == {"hugetlb"}
    assert "cgroup2 at" in layout.describe() and "PSI and perf only" in layout.describe()


def test_comounted_cpu_cpuacct_prefers_the_named_symlinks(fake_host: FakeHost) -> None:
    fake_host.set_mode("v1", comount_cpu_cpuacct=True)
    layout = fake_host.layout()
    root = fake_host.paths.cgroup_root
    assert layout.subsystem_dir("cpu") == f"{root}/cpu"
    assert layout.subsystem_dir("cpuacct") == f"{root}/cpuacct"


def test_comounted_dir_without_symlinks_serves_both(fake_host: FakeHost) -> None:
    fake_host.set_mode("v1", comount_cpu_cpuacct=True)
    root = fake_host.cgroup_root
    (root / "cpu").unlink()
    (root / "cpuacct").unlink()
    layout = fake_host.layout()
    assert layout.subsystem_dir("cpu") == f"{root}/cpu,cpuacct"
    assert layout.subsystem_dir("cpuacct") == f"{root}/cpu,cpuacct"


def test_missing_subsystem_is_unsupported_naming_it(fake_host: FakeHost) -> None:
    layout = fake_host.layout()
    with pytest.raises(Unsupported, match=r"subsystem 'pids' is not mounted under .*\(mounted: blkio, cpu,"):
        layout.controller_root("pids")


def test_missing_root_is_unsupported(tmp_path: Path) -> None:
    with pytest.raises(Unsupported, match=r"cgroup root .*/nowhere does not exist") as info:
        detect_layout(HostPaths(cgroup_root=str(tmp_path / "nowhere")))
    assert info.value.errno == errno.ENOENT


def test_empty_root_names_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "cgroup" / "notahierarchy").mkdir(parents=True)
    with pytest.raises(Unsupported, match=r"neither cgroup.controllers \(v2\) nor v1 subsystem directories"):
        detect_layout(HostPaths(cgroup_root=str(tmp_path / "cgroup")))


def test_garbage_in_cgroup_controllers_is_a_parse_error(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    (fake_host.cgroup_root / "cgroup.controllers").write_text("cpu mem/ory\n")
    with pytest.raises(ParseError, match=r"cgroup.controllers: invalid controller name 'mem/ory'"):
        fake_host.layout().v2_controllers()


def test_unreadable_cgroup_controllers_names_the_file(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")
    layout = fake_host.layout()
    os.remove(fake_host.cgroup_root / "unified" / "cgroup.controllers")
    with pytest.raises(FileNotFoundError, match=r"unified/cgroup.controllers"):
        layout.v2_controllers()


@pytest.mark.parametrize("mode", ["v1", "v2", "hybrid"])
def test_dirs_join_relative_paths(fake_host: FakeHost, mode: str) -> None:
    fake_host.set_mode(mode)
    layout = fake_host.layout()
    root = fake_host.paths.cgroup_root
    expected_cpu = f"{root}/kubepods/pod1" if mode == "v2" else f"{root}/cpu/kubepods/pod1"
    assert layout.controller_dir("cpu", "/kubepods/pod1/") == expected_cpu
    if mode == "v1":
        with pytest.raises(Unsupported, match="no cgroup v2 hierarchy"):
            layout.unified_dir("kubepods")
    else:
        expected = f"{root}/kubepods" if mode == "v2" else f"{root}/unified/kubepods"
        assert layout.unified_dir("kubepods") == expected


def test_rel_dir_cannot_climb_out() -> None:
    assert clean_rel_dir("/kubepods//./besteffort/") == "kubepods/besteffort"
    assert clean_rel_dir("") == ""
    with pytest.raises(ParseError, match=r"must not contain '\.\.'"):
        clean_rel_dir("kubepods/../../etc")


def test_layout_is_hashable(fake_host: FakeHost) -> None:
    assert hash(fake_host.layout()) == hash(fake_host.layout())
    assert fake_host.layout() == fake_host.layout()
