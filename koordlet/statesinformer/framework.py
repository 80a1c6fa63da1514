"""What the states informer hands to collectors, strategies and hooks: pods with their cgroup
directories, and the node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.pod import Pod
from koordlet.statesinformer.cpumanager import KubeletCPUManager
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.node import NodeInfo


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    name: str
    container_id: str
    """Bare runtime id ("" before the container started)."""
    cgroup_dir: str
    """Directory relative to a hierarchy root ("" when unknown)."""


@dataclass(frozen=True, slots=True)
class PodMeta:
    """A pod (or a standalone workload, as a pod of namespace ``standalone``) and where its cgroups are."""

    pod: Pod
    cgroup_dir: str
    """The pod's directory relative to a hierarchy root (``kubepods/besteffort/pod<uid>``)."""
    containers: tuple[ContainerMeta, ...]
    source: str = "kubelet"
    """kubelet, kubepods (found on the host) or config (a standalone workload)."""
    qos: QoSClass = field(init=False, compare=False)
    """The pod's class, worked out once: every strategy asks it of every pod every round."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "qos", self.pod.qos)

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def priority_class(self) -> PriorityClass:
        return self.pod.priority_class


PodsCallback = Callable[[Sequence[PodMeta]], None]


class StatesInformer(Protocol):
    """The node's current pods and facts; readers never block on I/O."""

    def pods(self) -> Sequence[PodMeta]:
        """The last good pod list (never raises; empty until the first successful sync)."""
        ...

    def node(self) -> NodeInfo:
        ...

    def reservation(self) -> Reservation:
        """CPU and memory the node keeps back from pods (kubelet's kube+system reserved)."""
        ...

    def cpu_manager(self) -> KubeletCPUManager:
        """kubelet's CPU manager policy and the CPUs its static policy pinned to containers (never raises:
        a state file that cannot be read leaves the last good pins and says why)."""
        ...

    def subscribe(self, callback: PodsCallback) -> None:
        """Calls ``callback(pods)`` after each change of the pod list (from the informer's thread)."""
        ...

    def kube_node(self) -> KubeNodeInfo | None:
        """The Kubernetes Node's facts as the companion last sent them (allocatable incl. batch-* and mid-*,
        labels, annotations); None until it sent one (no companion, an older companion, no Kubernetes)."""
        ...
