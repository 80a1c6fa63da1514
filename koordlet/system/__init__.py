"""The host as koordlet sees it: roots, cgroup layout and paths, cgroup file descriptors, kernel probes.

Layering: this package imports only the standard library and :mod:`koordlet.errors`; the functions that
read through the C core take the :mod:`koordlet.native` object from their caller.  Importing it touches no
file.
"""

from koordlet.system.cgroupfile import (
    CgroupFile,
    Field,
    FileKind,
    FileVersion,
    Hierarchy,
    InvalidValue,
    Placement,
    Support,
    build_registry,
)
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import (
    DEFAULT_DRIVER,
    CgroupDriver,
    ContainerRef,
    ContainerRuntime,
    DriverGuess,
    KubeQoS,
    container_dir,
    container_dir_name,
    detect_driver,
    kubepods_dir,
    parse_container_dir_name,
    parse_container_id,
    parse_pod_dir_name,
    pod_dir,
    pod_dir_name,
    qos_dir,
)
from koordlet.system.layout import CgroupLayout, CgroupMode, clean_rel_dir, detect_layout
from koordlet.system.node import CpuTopology, NodeInfo, NumaNode, read_node_info
from koordlet.system.probes import PROBE_NAMES, ProbeResult, probe_all
from koordlet.system.resources import REGISTRY

__all__ = [
    "DEFAULT_DRIVER",
    "PROBE_NAMES",
    "REGISTRY",
    "CgroupDriver",
    "CgroupFile",
    "CgroupLayout",
    "CgroupMode",
    "ContainerRef",
    "ContainerRuntime",
    "CpuTopology",
    "DriverGuess",
    "Field",
    "FileKind",
    "FileVersion",
    "Hierarchy",
    "HostPaths",
    "InvalidValue",
    "KubeQoS",
    "NodeInfo",
    "NumaNode",
    "Placement",
    "ProbeResult",
    "Support",
    "build_registry",
    "clean_rel_dir",
    "container_dir",
    "container_dir_name",
    "detect_driver",
    "detect_layout",
    "kubepods_dir",
    "parse_container_dir_name",
    "parse_container_id",
    "parse_pod_dir_name",
    "pod_dir",
    "pod_dir_name",
    "probe_all",
    "qos_dir",
    "read_node_info",
]
