"""What kind of node this is: CPUs and their topology, memory, kernel, cgroup layout.

Read once at start-up (and by the NodeInfo collector every 60 s) through the C core's parsers, so the
same code that reads cgroup files every tick is exercised on the host's sysfs and procfs.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from typing import Any

from koordlet.errors import ParseError, from_errno
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, detect_driver
from koordlet.system.layout import CgroupMode, detect_layout
from koordlet.system.validators import format_cpulist


@dataclass(frozen=True)
class CpuTopology:
    """Where one logical CPU sits."""

    cpu: int
    core_id: int
    """``topology/core_id``: shared by hyper-thread siblings of one socket."""
    socket_id: int
    """``topology/physical_package_id``."""
    numa_node: int
    """The NUMA node whose ``cpulist`` holds this CPU; -1 when no node claims it."""


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node and its CPUs."""

    node: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class NodeInfo:
    """A snapshot of the node's hardware and kernel."""

    kernel_release: str
    online_cpus: tuple[int, ...]
    cpus: tuple[CpuTopology, ...]
    """Topology of each online CPU, by CPU id."""
    numa_nodes: tuple[NumaNode, ...]
    memory_total_bytes: int
    cgroup_mode: CgroupMode
    cgroup_driver: CgroupDriver

    @property
    def cpu_count(self) -> int:
        """Online logical CPUs."""
        return len(self.online_cpus)

    def processors(self) -> tuple[CpuTopology, ...]:
        """The online CPUs with topology; a node read without topology counts each CPU as its own core
        on one socket and NUMA node."""
        if self.cpus:
            return self.cpus
        return tuple(CpuTopology(cpu=c, core_id=c, socket_id=0, numa_node=0) for c in self.online_cpus)

    @property
    def core_count(self) -> int:
        """Physical cores among the online CPUs (distinct socket and core id)."""
        return len({(c.socket_id, c.core_id) for c in self.cpus})

    @property
    def socket_count(self) -> int:
        """Sockets among the online CPUs."""
        return len({c.socket_id for c in self.cpus})

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"kernel {self.kernel_release}, {self.cpu_count} CPUs online ({format_cpulist(self.online_cpus)}) "
            f"on {self.core_count} cores / {self.socket_count} sockets / {len(self.numa_nodes)} NUMA nodes, "
            f"{self.memory_total_bytes} bytes of memory, cgroup {self.cgroup_mode.value} "
            f"with the {self.cgroup_driver.value} driver"
        )


_NODE_DIR = re.compile(r"node(\d+)")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise from_errno(exc.errno or errno.EIO, path) from exc


def _numa_nodes(paths: HostPaths, native: Any) -> tuple[NumaNode, ...]:
    base = paths.sys("devices/system/node")
    if not os.path.isdir(base):
        return ()  # a kernel without CONFIG_NUMA has no node directory
    ids = sorted(int(m.group(1)) for name in os.listdir(base) if (m := _NODE_DIR.fullmatch(name)))
    return tuple(NumaNode(n, tuple(native.read_cpulist(os.path.join(base, f"node{n}", "cpulist")))) for n in ids)


def read_node_info(paths: HostPaths, native: Any) -> NodeInfo:
    """Reads the node's topology, memory, kernel release and cgroup layout.

    ``native`` is :mod:`koordlet.native` or a stand-in (``read_int``, ``read_cpulist``, ``read_meminfo``):
    the caller passes it because the host layer sits below the C core's wrappers and imports nothing of them.
    Raises the reader's error naming the file (``CgroupGone`` for a missing file, ``ParseError`` for
    garbage) or :class:`~koordlet.errors.Unsupported` when no cgroup hierarchy is mounted.
    """
    release = _read_text(paths.proc("sys/kernel/osrelease")).strip()
    if not release:
        raise ParseError(f"{paths.proc('sys/kernel/osrelease')}: empty kernel release")
    online = tuple(native.read_cpulist(paths.sys("devices/system/cpu/online")))
    if not online:
        raise ParseError(f"{paths.sys('devices/system/cpu/online')}: no online CPU")
    nodes = _numa_nodes(paths, native)
    node_of = {cpu: node.node for node in nodes for cpu in node.cpus}
    if not nodes:
        node_of = dict.fromkeys(online, 0)
    cpus = []
    for cpu in online:
        topology = paths.sys(f"devices/system/cpu/cpu{cpu}/topology")
        cpus.append(
            CpuTopology(
                cpu=cpu,
                core_id=native.read_int(os.path.join(topology, "core_id")),
                socket_id=native.read_int(os.path.join(topology, "physical_package_id")),
                numa_node=node_of.get(cpu, -1),
            )
        )
    meminfo = paths.proc("meminfo")
    memory = native.read_meminfo(meminfo, ["MemTotal"])
    if "MemTotal" not in memory:
        raise ParseError(f"{meminfo}: no MemTotal line")
    layout = detect_layout(paths)
    return NodeInfo(
        kernel_release=release,
        online_cpus=online,
        cpus=tuple(cpus),
        numa_nodes=nodes if nodes else (NumaNode(0, online),),
        memory_total_bytes=memory["MemTotal"],
        cgroup_mode=layout.mode,
        cgroup_driver=detect_driver(layout).driver,
    )
