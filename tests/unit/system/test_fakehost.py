"""The fake host itself: its trees must look like the kernel's for the other tests to mean anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.system import HostPaths
from koordlet.system import resources as r
from tests.fixtures.fakehost import FakeHost


def test_paths_live_under_the_root(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "h")
    assert host.paths == HostPaths.under(tmp_path / "h")
    assert (tmp_path / "h" / "proc" / "meminfo").is_file()
    assert (tmp_path / "h" / "sys" / "devices" / "system" / "cpu" / "online").read_text() == "0-3\n"


def test_v1_child_gets_each_subsystems_files(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup("kubepods/besteffort")
    root = fake_host.cgroup_root
    assert (root / "cpu/kubepods/besteffort/cpu.shares").read_text() == "1024\n"
    assert (root / "cpuacct/kubepods/cpuacct.usage").is_file()
    # v1 leaves a new cpuset empty, unlike the root.
    assert (root / "cpuset/kubepods/besteffort/cpuset.cpus").read_text() == "\n"
    assert (root / "cpuset/cpuset.cpus").read_text() == "0-3\n"
    assert not (root / "cpu/kubepods/cpu.bvt_warp_ns").exists()


def test_mkdir_in_chosen_subsystems_only(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup("only-memory", subsystems=["memory"])
    assert (fake_host.cgroup_root / "memory/only-memory").is_dir()
    assert not (fake_host.cgroup_root / "cpu/only-memory").exists()


def test_comounted_child_gets_cpu_and_cpuacct_files(fake_host: FakeHost) -> None:
    fake_host.set_mode("v1", comount_cpu_cpuacct=True)
    fake_host.mkdir_cgroup("kubepods")
    both = fake_host.cgroup_root / "cpu,cpuacct" / "kubepods"
    assert (both / "cpu.shares").is_file() and (both / "cpuacct.usage").is_file()


def test_v2_children_list_what_the_parent_enables(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2", controllers=("cpu", "memory"))
    fake_host.mkdir_cgroup("kubepods.slice/kubepods-besteffort.slice")
    child = fake_host.cgroup_root / "kubepods.slice" / "kubepods-besteffort.slice"
    assert (child / "cgroup.controllers").read_text() == "cpu memory\n"
    assert (child / "cpu.max").read_text() == "max 100000\n"
    assert (child / "memory.max").read_text() == "max\n"
    assert not (child / "cpuset.cpus").exists() and not (child / "io.max").exists()
    assert not (fake_host.cgroup_root / "cpu.max").exists()  # never on the root


def test_hybrid_children_have_only_pressure_in_unified(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")
    fake_host.mkdir_cgroup("kubepods")
    unified = fake_host.cgroup_root / "unified" / "kubepods"
    assert (unified / "cgroup.controllers").read_text() == "hugetlb\n"
    assert (unified / "memory.pressure").is_file() and not (unified / "memory.max").exists()
    assert (fake_host.cgroup_root / "memory" / "kubepods" / "memory.limit_in_bytes").is_file()


def test_write_cgroup_routes_names_and_descriptors(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    path = host.write_cgroup("kubepods", r.MEMORY_LIMIT, "1024\n")
    assert path.name == ("memory.max" if host.mode == "v2" else "memory.limit_in_bytes")
    assert host.read_cgroup("kubepods", r.MEMORY_LIMIT) == "1024\n"
    named = host.write_cgroup("kubepods", "cpu.idle", "1\n")
    expected = host.cgroup_root / ("kubepods" if host.mode == "v2" else "cpu/kubepods") / "cpu.idle"
    assert named == expected
    host.remove_cgroup_file("kubepods", "cpu.idle")
    assert not expected.exists()


def test_write_cgroup_needs_a_subsystem_for_core_files_in_v1(fake_host: FakeHost) -> None:
    with pytest.raises(ValueError, match="pass subsystem="):
        fake_host.write_cgroup("kubepods", "cgroup.procs", "1\n")
    assert fake_host.write_cgroup("kubepods", "cgroup.procs", "1\n", subsystem="memory").parent.parent.name == "memory"
    with pytest.raises(ValueError, match="no unified hierarchy"):
        fake_host.cgroup_path("kubepods", "cpu.pressure", subsystem="unified")


def test_bad_mode_and_feature_are_refused(fake_host: FakeHost) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        fake_host.set_mode("v3")
    with pytest.raises(ValueError, match="unknown features"):
        fake_host.set_mode("v1", features={"turbo"})
    with pytest.raises(ValueError, match="needs a directory below the root"):
        fake_host.mkdir_cgroup("/")


def test_set_mode_starts_from_a_clean_tree(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup("kubepods")
    fake_host.set_mode("v2")
    assert not (fake_host.cgroup_root / "cpu").exists()
    assert not (fake_host.cgroup_root / "kubepods").exists()
    assert fake_host.mode == "v2"
