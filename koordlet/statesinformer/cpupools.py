"""The node's CPU shared pools (what Koordinator's statesinformer ``nodeTopo`` reports in the node
annotation ``node.koordinator.sh/cpu-shared-pools``) and the CPUs kubelet's static CPU manager pinned.

Upstream ``states_noderesourcetopology.go`` (``calcNodeTopo``, ``calKubeletAllocatedCPUs``,
``calGuaranteedCpu``, ``calCPUSharePools``, ``covertCPUsToSharePool``): the LS shared pool of each NUMA node
is its CPUs minus

* the CPUs of every pod bound through ``scheduling.koordinator.sh/resource-status`` (LSE and LSR pods:
  upstream removes any pod's bound cpuset from the LS pool);
* the CPUs kubelet's static policy pinned to containers (``cpu_manager_state`` entries), except those of
  pods Koordinator places itself: a pod labelled LS or BE, or one with a bound cpuset, gets its cpuset from
  the cpuset hook whatever kubelet assigned it;
* the node's reserved CPUs: those of the Node's ``node.koordinator.sh/reservation`` and exclusive
  ``node.koordinator.sh/system-qos-resource`` annotations (upstream ``removeNodeReservedCPUs``,
  ``removeSystemQOSCPUs``; the companion sends the Node down), and kubelet's ``reservedSystemCPUs``, the CPUs
  cpusuppress already keeps BE off (upstream leaves those in the pools; taking them out predates the Node
  reaching this agent and keeps LS off the system's CPUs).

The pools are a pure function of the node, the pod list, the reservation and the state file;
:class:`CPUPools` recomputes them when one of those changed (a ``stat`` of the state file per call) and
keeps the last good state file when the file turns to garbage, logging once what is wrong with it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label, resource_status_cpus
from koordlet.errors import KoordletError
from koordlet.statesinformer.cpumanager import (
    POLICY_STATIC,
    STATE_FILE,
    CPUManagerState,
    KubeletCPUManager,
    PinnedContainer,
    parse_cpu_manager_state,
)
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.node import CpuTopology, NodeInfo
from koordlet.system.validators import format_cpulist

log = logging.getLogger(__name__)


def bound_cpus(pod: PodMeta) -> tuple[int, ...]:
    """The cpuset the pod's resource-status annotation binds it to; empty without one, and for garbage
    (upstream skips such a pod; cpusuppress and the cpuset hook report it)."""
    try:
        return tuple(resource_status_cpus(pod.pod.annotations))
    except ValueError:
        return ()


def placed_by_koordinator(pod: PodMeta) -> bool:
    """Upstream ``calGuaranteedCpu``'s managed pods: labelled LS or BE, or bound to a cpuset."""
    label = qos_from_label(pod.pod.labels.get(LABEL_QOS))
    return label in (QoSClass.LS, QoSClass.BE) or bool(bound_cpus(pod))


def kubelet_pinned(state: CPUManagerState | None, pods: Iterable[PodMeta]) -> tuple[PinnedContainer, ...]:
    """The state's exclusive assignments outside the pods Koordinator places, each with its container's
    cgroup directory when the pod list knows it.  An entry of a pod not in the list still counts: kubelet
    keeps the CPUs from its shared pool until it removes the entry."""
    if state is None:
        return ()
    by_uid = {p.uid: p for p in pods}
    pinned: list[PinnedContainer] = []
    for entry in state.assignments:
        pod = by_uid.get(entry.pod_uid)
        if pod is not None and placed_by_koordinator(pod):
            continue
        cgroup_dir = ""
        if pod is not None:
            cgroup_dir = next((c.cgroup_dir for c in pod.containers if c.name == entry.container), "")
        pinned.append(PinnedContainer(entry.pod_uid, entry.container, entry.cpus, cgroup_dir))
    return tuple(pinned)


@dataclass(frozen=True)
class SharedPool:
    """One entry of ``node.koordinator.sh/cpu-shared-pools`` (upstream ``extension.CPUSharedPool``)."""

    socket: int
    node: int
    cpus: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"socket": self.socket, "node": self.node, "cpuset": format_cpulist(self.cpus)}


def shared_pools(node: NodeInfo, pods: Iterable[PodMeta], reserved: Iterable[int],
                 pinned: Iterable[PinnedContainer]) -> list[SharedPool]:
    """The LS shared pool of each NUMA node (see the module doc), ordered by (socket, node); a NUMA node
    with no CPU left has no entry."""
    taken = set(reserved)
    for pod in pods:
        taken.update(bound_cpus(pod))
    for entry in pinned:
        taken.update(entry.cpus)
    return _pools(node, taken)


def be_shared_pools(node: NodeInfo, pods: Iterable[PodMeta], reserved: Iterable[int],
                    pinned: Iterable[PinnedContainer]) -> list[SharedPool]:
    """``node.koordinator.sh/be-cpu-shared-pools``: as :func:`shared_pools`, but only LSE pods take their
    bound CPUs away (upstream ``calCPUSharePools``: BE may run on an LSR pod's CPUs, never on an LSE pod's)."""
    taken = set(reserved)
    for pod in pods:
        if qos_from_label(pod.pod.labels.get(LABEL_QOS)) is QoSClass.LSE:
            taken.update(bound_cpus(pod))
    for entry in pinned:
        taken.update(entry.cpus)
    return _pools(node, taken)


def _pools(node: NodeInfo, taken: set[int]) -> list[SharedPool]:
    by_node: dict[int, list[CpuTopology]] = {}
    for proc in node.processors():
        if proc.cpu not in taken:
            by_node.setdefault(proc.numa_node, []).append(proc)
    pools = [SharedPool(min(procs, key=lambda p: p.cpu).socket_id, numa, tuple(sorted(p.cpu for p in procs)))
             for numa, procs in by_node.items()]
    return sorted(pools, key=lambda p: (p.socket, p.node))


def pools_annotation(pools: Sequence[SharedPool]) -> str:
    """The annotation's JSON text: ``[{"socket":0,"node":0,"cpuset":"0-3"},...]``."""
    return json.dumps([p.to_json() for p in pools], separators=(",", ":"))


@dataclass(frozen=True)
class _Snapshot:
    manager: KubeletCPUManager
    pools: str | None
    ls_pools: tuple[SharedPool, ...] | None = None
    be_pools: tuple[SharedPool, ...] | None = None


class CPUPools:
    """The shared pools and kubelet's pinned CPUs over the informer's sources, recomputed when the pod
    list (replaced, never mutated, so compared by identity), the reservation or the state file changed.

    ``ready`` says whether the inputs are known (the first pod list and kubelet's ``/configz`` read):
    before that, and while kubelet's static policy is in force but its state file was never read, the
    pools are unknown (None) rather than a guess that may hand an LS container someone's exclusive CPUs."""

    def __init__(self, state_path: str, node: Callable[[], NodeInfo], pods: Callable[[], Sequence[PodMeta]],
                 reservation: Callable[[], Reservation], ready: Callable[[], bool],
                 node_reserved: Callable[[], frozenset[int]] = frozenset) -> None:
        self.state_path = state_path
        self._node = node
        self._node_reserved = node_reserved
        """CPUs the Node's own annotations keep from both pools (``node.koordinator.sh/reservation``, exclusive
        ``system-qos-resource``: upstream ``removeNodeReservedCPUs``, ``removeSystemQOSCPUs``)."""
        self._pods = pods
        self._reservation = reservation
        self._ready = ready
        self._lock = threading.Lock()
        self._key_pods: Sequence[PodMeta] | None = None
        self._key_node: NodeInfo | None = None
        self._key: tuple[object, ...] | None = None
        self._snapshot = _Snapshot(KubeletCPUManager(), None)
        self._file_key: tuple[int, int, int] | None = None
        self._state: CPUManagerState | None = None
        """The last good checkpoint (None: never read, or the file does not exist)."""
        self._state_error = ""

    @classmethod
    def under(cls, kubelet_root_dir: str, node: Callable[[], NodeInfo], pods: Callable[[], Sequence[PodMeta]],
              reservation: Callable[[], Reservation], ready: Callable[[], bool],
              node_reserved: Callable[[], frozenset[int]] = frozenset) -> CPUPools:
        """Pools reading ``<kubelet_root_dir>/cpu_manager_state``."""
        return cls(os.path.join(kubelet_root_dir, STATE_FILE), node, pods, reservation, ready, node_reserved)

    def cpu_manager(self) -> KubeletCPUManager:
        """kubelet's policy and the containers it pinned; never raises."""
        return self._current().manager

    def annotation(self) -> str | None:
        """``node.koordinator.sh/cpu-shared-pools`` text, or None while the pools are unknown."""
        return self._current().pools

    def pools(self) -> tuple[tuple[SharedPool, ...], tuple[SharedPool, ...]] | None:
        """The LS and BE shared pools, or None while they are unknown (as :meth:`annotation`)."""
        snapshot = self._current()
        if snapshot.ls_pools is None or snapshot.be_pools is None:
            return None
        return snapshot.ls_pools, snapshot.be_pools

    def _current(self) -> _Snapshot:
        pods = self._pods()
        reservation = self._reservation()
        ready = self._ready()
        with self._lock:
            file_key = self._stat()
            node = self._node()
            kept = self._node_reserved()
            key = (reservation, ready, file_key, kept)
            # The node is replaced, never mutated, when the CPU topology is re-read: compared by identity.
            if self._key_pods is pods and self._key_node is node and self._key == key:
                return self._snapshot
            self._load(file_key, reservation.cpu_manager_policy)
            static = reservation.cpu_manager_policy == POLICY_STATIC
            pinned = kubelet_pinned(self._state, pods)
            manager = KubeletCPUManager(reservation.cpu_manager_policy, pinned, self._state_error)
            known = ready and not (static and self._state is None)
            snapshot = _Snapshot(manager, None)
            if known:
                reserved = (*reservation.cpus, *kept)
                ls = tuple(shared_pools(node, pods, reserved, pinned))
                be = tuple(be_shared_pools(node, pods, reserved, pinned))
                snapshot = _Snapshot(manager, pools_annotation(ls), ls, be)
            self._key_pods, self._key_node, self._key, self._snapshot = pods, node, key, snapshot
            return self._snapshot

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.state_path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return (-1, exc.errno or 0, 0)  # unreadable: _load reports it
        # kubelet replaces the file by rename: a new inode even when mtime and size repeat.
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self, file_key: tuple[int, int, int] | None, policy: str) -> None:
        """Reads the state file when it changed since the last read; on failure keeps the last good state."""
        if file_key is None:
            # kubelet under the none policy may have no file; under static its absence hides the pins.
            self._file_key = None
            if policy == POLICY_STATIC:
                self._fail(f"{self.state_path}: missing while kubelet's cpuManagerPolicy is static (is "
                           "--var-lib-kubelet-dir kubelet's root directory as koordlet sees it?)")
            else:
                self._state, self._state_error = None, ""
            return
        if file_key == self._file_key:
            return
        self._file_key = file_key
        try:
            with open(self.state_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            state = parse_cpu_manager_state(text, self.state_path)
        except OSError as exc:
            self._fail(f"{self.state_path}: cannot read: {exc.strerror or exc}")
            return
        except KoordletError as exc:
            self._fail(str(exc))
            return
        if self._state_error:
            log.info("kubelet cpu manager state readable again", extra={"path": self.state_path})
        self._state, self._state_error = state, ""

    def _fail(self, error: str) -> None:
        if error != self._state_error:
            log.error("cannot use kubelet's cpu manager state, keeping the last good one",
                      extra={"error": error, "kept": self._state is not None})
        self._state_error = error
