"""Which cgroups BE CPU suppression limits.

On a Kubernetes node: the besteffort QoS directory; its pods and containers follow its cpuset and its
quota caps them all.  On a standalone host (the informer lists configured workloads or pods found in a
kubepods tree) the targets are every BE workload's own cgroup (``cgroupPath``, or ``system.slice/<unit>``),
plus the besteffort directory only while a pod found below it is listed: a kubepods tree koordlet was
told to ignore (``discoverKubepods: false``) is left alone.

A BE workload whose cgroup holds a non-BE pod (an LS workload configured below it, a kubepods tree) is
left alone: its cpuset and quota would bind that pod too.  A BE workload below another target (one
configured inside ``kubepods/besteffort``) is capped by the outer target's quota and gets no share of its
own; its cgroups still get the BE cpuset.

BE host applications under ``KubepodsBesteffort`` (NodeSLO ``hostApplications``) are suppressed with the BE
pods, as upstream: the besteffort directory is their parent, so its quota caps them, and their trees get
the BE cpuset.  On a standalone host such an application makes the besteffort directory a target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from koordlet.apis.extension import QoSClass
from koordlet.qosmanager.helpers import be_workloads
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import DISCOVERED_SOURCE, WORKLOAD_SOURCE
from koordlet.system.kubepaths import KubeQoS


def non_be(pod: PodMeta) -> bool:
    """Koordinator's ``NonBEPodFilter``: neither labelled BE nor in kubelet's BestEffort class."""
    return pod.qos is not QoSClass.BE and pod.pod.kube_qos is not KubeQoS.BESTEFFORT


def within(rel_dir: str, parent: str) -> bool:
    """``rel_dir`` is ``parent`` or below it."""
    return rel_dir == parent or rel_dir.startswith(parent + "/")


@dataclass(frozen=True)
class Targets:
    """The BE cgroups of this round."""

    roots: tuple[str, ...]
    """The outermost BE cgroups, in the order the quota is split: besteffort first, then workloads by
    cgroup path.  Each gets the BE cpuset and, under the cfsQuota policy, a share of the BE quota."""
    besteffort: bool
    """The besteffort directory is a target: its tree is walked to pod and container depth."""
    workload_dirs: tuple[str, ...]
    """BE workload cgroups (nested ones included) whose whole tree gets the BE cpuset."""
    left_alone: tuple[str, ...] = ()
    """``<workload>: why`` for BE workloads not limited."""
    host_app_dirs: tuple[str, ...] = ()
    """BE host applications' cgroups below the besteffort directory, whose whole trees get the BE cpuset
    (walked every round: the application makes and removes its own sub-cgroups)."""

    @property
    def only_besteffort(self) -> bool:
        """Only the besteffort directory, as on a Kubernetes node (decisions then read as they always did)."""
        return self.besteffort and not self.workload_dirs and not self.left_alone


def be_targets(be_dir: str, pods: Sequence[PodMeta], host_app_dirs: Sequence[str] = ()) -> Targets:
    """The targets for these pods; ``be_dir`` is the besteffort QoS directory below the kube parent,
    ``host_app_dirs`` the cgroups of the BE host applications suppressed with the BE pods."""
    apps = tuple(d for d in host_app_dirs if within(d, be_dir) and d != be_dir)
    if not any(p.source in (WORKLOAD_SOURCE, DISCOVERED_SOURCE) for p in pods):
        return Targets((be_dir,), True, (), host_app_dirs=apps)
    besteffort = bool(apps) or any(p.source == DISCOVERED_SOURCE and within(p.cgroup_dir, be_dir) for p in pods)
    guarded = [p for p in pods if non_be(p) and p.cgroup_dir]
    dirs: list[str] = []
    left_alone: list[str] = []
    for workload in be_workloads(pods):
        rel = workload.cgroup_dir
        if not rel:
            left_alone.append(f"{workload.pod.key}: its cgroup is the hierarchy root")
            continue
        holder = next((p for p in guarded if within(p.cgroup_dir, rel)), None)
        if holder is not None:
            left_alone.append(f"{workload.pod.key}: its cgroup {rel} holds {holder.qos.value or 'non-BE'} pod "
                              f"{holder.pod.key}")
            continue
        if rel not in dirs:
            dirs.append(rel)
    roots = [be_dir] if besteffort else []
    for rel in dirs:  # sorted by path: a parent comes before what is below it
        if not any(within(rel, root) for root in roots):
            roots.append(rel)
    return Targets(tuple(roots), besteffort, tuple(dirs), tuple(left_alone), apps)
