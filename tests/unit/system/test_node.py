"""read_node_info on fake sysfs/procfs trees, read through the C core."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import pytest

from koordlet import native
from koordlet.errors import CgroupGone, ParseError
from koordlet.system import CgroupDriver, CgroupMode, CpuTopology, NumaNode, read_node_info
from tests.fixtures.fakehost import FakeHost


class Recording:
    """Delegates to the C core and records which files were read through it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(native, name)

        def call(path: str, *args: Any) -> Any:
            self.paths.append(path)
            return real(path, *args)

        return call


def test_default_fake_host(fake_cgroup_host: FakeHost) -> None:
    info = read_node_info(fake_cgroup_host.paths, native)
    assert info.kernel_release == "6.1.0-fake"
    assert info.online_cpus == (0, 1, 2, 3)
    assert info.cpus == (
        CpuTopology(0, 0, 0, 0),
        CpuTopology(1, 1, 0, 0),
        CpuTopology(2, 0, 0, 0),
        CpuTopology(3, 1, 0, 0),
    )
    assert (info.cpu_count, info.core_count, info.socket_count) == (4, 2, 1)
    assert info.numa_nodes == (NumaNode(0, (0, 1, 2, 3)),)
    assert info.memory_total_bytes == 16 * 1024 * 1024 * 1024
    assert info.cgroup_mode is (CgroupMode.V2 if fake_cgroup_host.mode == "v2" else CgroupMode.V1)
    assert info.cgroup_driver is CgroupDriver.SYSTEMD
    assert info.describe().startswith("kernel 6.1.0-fake, 4 CPUs online (0-3) on 2 cores / 1 sockets / 1 NUMA nodes")


def test_reads_go_through_the_given_native(fake_host: FakeHost) -> None:
    recording = Recording()
    read_node_info(fake_host.paths, native=recording)
    sys_root, proc_root = fake_host.paths.sys_root, fake_host.paths.proc_root
    assert f"{sys_root}/devices/system/cpu/online" in recording.paths
    assert f"{sys_root}/devices/system/node/node0/cpulist" in recording.paths
    assert f"{sys_root}/devices/system/cpu/cpu3/topology/physical_package_id" in recording.paths
    assert f"{proc_root}/meminfo" in recording.paths


def test_two_sockets_two_nodes_and_a_driver(fake_host: FakeHost) -> None:
    fake_host.set_cpu_topology([(0, 0, 0, 0), (1, 1, 0, 0), (2, 0, 1, 1), (3, 1, 1, 1)])
    fake_host.set_meminfo(total_kb=1024)
    fake_host.mkdir_cgroup("kubepods")
    info = read_node_info(fake_host.paths, native)
    assert [c.numa_node for c in info.cpus] == [0, 0, 1, 1]
    assert (info.core_count, info.socket_count) == (4, 2)
    assert info.numa_nodes == (NumaNode(0, (0, 1)), NumaNode(1, (2, 3)))
    assert info.memory_total_bytes == 1024 * 1024
    assert info.cgroup_driver is CgroupDriver.CGROUPFS


def test_only_online_cpus_are_listed(fake_host: FakeHost) -> None:
    fake_host.write_sys("devices/system/cpu/online", "0,2\n")
    info = read_node_info(fake_host.paths, native)
    assert info.online_cpus == (0, 2)
    assert [c.cpu for c in info.cpus] == [0, 2]


def test_kernel_without_numa_puts_every_cpu_on_node_0(fake_host: FakeHost) -> None:
    shutil.rmtree(fake_host.paths.sys("devices/system/node"))
    info = read_node_info(fake_host.paths, native)
    assert info.numa_nodes == (NumaNode(0, (0, 1, 2, 3)),)
    assert {c.numa_node for c in info.cpus} == {0}


def test_cpu_claimed_by_no_node_is_minus_one(fake_host: FakeHost) -> None:
    fake_host.write_sys("devices/system/node/node0/cpulist", "0-2\n")
    info = read_node_info(fake_host.paths, native)
    assert [c.numa_node for c in info.cpus] == [0, 0, 0, -1]


def test_garbage_topology_names_the_file(fake_host: FakeHost) -> None:
    path = fake_host.write_sys("devices/system/cpu/cpu1/topology/core_id", "one\n")
    with pytest.raises(ParseError, match=re.escape(f"{path}: malformed content")):
        read_node_info(fake_host.paths, native)


def test_missing_topology_names_the_file(fake_host: FakeHost) -> None:
    path = fake_host.paths.sys("devices/system/cpu/cpu2/topology/physical_package_id")
    os.remove(path)
    with pytest.raises(CgroupGone, match=re.escape(path)):
        read_node_info(fake_host.paths, native)


def test_meminfo_without_memtotal(fake_host: FakeHost) -> None:
    path = fake_host.write_proc("meminfo", "MemFree: 10 kB\n")
    with pytest.raises(ParseError, match=re.escape(f"{path}: no MemTotal line")):
        read_node_info(fake_host.paths, native)


@pytest.mark.parametrize(("content", "error", "message"), [
    ("\n", ParseError, "empty kernel release"),
    (None, FileNotFoundError, "No such file or directory"),
])  # fmt: skip
def test_bad_kernel_release(fake_host: FakeHost, content: str | None, error: type[Exception], message: str) -> None:
    path = fake_host.paths.proc("sys/kernel/osrelease")
    if content is None:
        os.remove(path)
    else:
        fake_host.write_proc("sys/kernel/osrelease", content)
    with pytest.raises(error, match=re.escape(f"{path}: {message}")):
        read_node_info(fake_host.paths, native)


def test_no_online_cpu_is_an_error(fake_host: FakeHost) -> None:
    path = fake_host.write_sys("devices/system/cpu/online", "\n")
    with pytest.raises(ParseError, match=re.escape(f"{path}: no online CPU")):
        read_node_info(fake_host.paths, native)
