"""The node topology report (Koordinator ``statesinformer/impl/states_noderesourcetopology.go``,
``calcNodeTopo``; gate NodeTopologyReport): what koordlet tells koord-companion, which writes it as the node's
NodeResourceTopology (``topology.node.k8s.io/v1alpha1``) so a NUMA- and cpuset-aware scheduler sees it.

The report is a JSON object whose members are what upstream puts in the object's annotations and fields:

* ``cpuTopology``: ``{"detail": [{"id", "core", "socket", "node"}]}`` by CPU id (``node.koordinator.sh/cpu-topology``).
  ``core`` is a node-wide logical core number as ``lscpu -e`` prints it (upstream reads lscpu): sysfs
  ``core_id`` repeats on every socket, and a scheduler grouping hyper-threads by it would pair CPUs of
  different sockets;
* ``cpuBasicInfo`` (``node.koordinator.sh/cpu-basic-info``, :mod:`koordlet.statesinformer.cpubasicinfo`): the
  facts the companion's CPU normalization looks the node's ratio up by;
* ``kubeletCPUManagerPolicy`` (``kubelet.koordinator.sh/cpu-manager-policy``): kubelet's policy, its options
  and, under ``static``, the CPUs kubelet reserved (``reservedSystemCPUs``, else kubelet's own choice of
  ceil(reserved CPU) CPUs, :func:`take_by_topology`);
* ``podCPUAllocs`` (``node.koordinator.sh/pod-cpu-allocs``): CPUs kubelet's static policy pinned, per pod;
* ``cpuSharedPools`` / ``beCPUSharedPools`` (:mod:`koordlet.statesinformer.cpupools`);
* ``nodeReservation`` (``node.koordinator.sh/reservation``): the Node's own reservation annotation (the companion
  sends the Node down), its CPU count turned into CPU ids as upstream ``getNodeReserved`` does; those CPUs
  are left out of both pool lists;
* ``systemQOSResource`` (``node.koordinator.sh/system-qos-resource``): the Node's CPUs for SYSTEM pods;
  exclusive ones (the default) leave both pool lists too;
* ``topologyPolicy``: kubelet's topology manager policy and scope as the NRT names them;
* ``zones``: one ``Node`` zone per NUMA node with its CPUs, memory and (unreported: 0) huge pages.

The CPU topology is re-read every ``nodeCPUInfoIntervalSeconds`` (upstream's node info collector): CPUs
brought online or offline change the report, and the pools the hooks use.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from koordlet.apis.cpunormalization import CPUBasicInfo
from koordlet.apis.quantity import format_cpu_milli, format_memory_bytes
from koordlet.component import Worker
from koordlet.errors import KoordletError
from koordlet.statesinformer.cpumanager import KubeletCPUManager, PinnedContainer
from koordlet.statesinformer.cpupools import SharedPool
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.statesinformer.reservation import Reservation
from koordlet.statesinformer.topologyannotations import (
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
    node_reservation,
    system_qos_resource,
)
from koordlet.streaklog import Streak
from koordlet.system.node import CpuTopology, NodeInfo
from koordlet.system.validators import format_cpulist, parse_cpulist

log = logging.getLogger(__name__)

ZONE_TYPE = "Node"
"""NRT zone type of a NUMA node (upstream ``util.NodeZoneType``)."""
HUGEPAGE_RESOURCES = ("hugepages-1Gi", "hugepages-2Mi")

# kubelet topologyManagerPolicy -> NRT policy, per topologyManagerScope (upstream getTopologyPolicy).
_TOPOLOGY_POLICIES: Mapping[str, Mapping[str, str]] = {
    "container": {"single-numa-node": "SingleNUMANodeContainerLevel", "restricted": "RestrictedContainerLevel",
                  "best-effort": "BestEffortContainerLevel", "none": "None"},
    "pod": {"single-numa-node": "SingleNUMANodePodLevel", "restricted": "RestrictedPodLevel",
            "best-effort": "BestEffortPodLevel", "none": "None"},
}


def topology_policy(policy: str, scope: str) -> str:
    """The NRT ``topologyPolicies`` entry of kubelet's topology manager; ``None`` for anything unknown."""
    return _TOPOLOGY_POLICIES.get(scope, {}).get(policy, "None")


def logical_cores(cpus: Iterable[CpuTopology]) -> dict[int, int]:
    """CPU id -> logical core number: distinct (socket, core_id) pairs numbered in CPU id order."""
    numbers: dict[tuple[int, int], int] = {}
    out: dict[int, int] = {}
    for proc in sorted(cpus, key=lambda p: p.cpu):
        out[proc.cpu] = numbers.setdefault((proc.socket_id, proc.core_id), len(numbers))
    return out


def take_by_topology(node: NodeInfo, count: int) -> tuple[int, ...]:
    """The ``count`` CPUs kubelet's static policy reserves when ``reservedSystemCPUs`` is not set
    (kubelet ``takeByTopology`` on an idle node): whole sockets first, then whole cores, then single CPUs,
    lowest ids first.  E.g. 8 CPUs, two threads per core (siblings 0/4, 1/5...), count 2 -> {0, 4}."""
    procs = node.processors()
    if count <= 0:
        return ()
    if count >= len(procs):
        return tuple(sorted(p.cpu for p in procs))
    free = {p.cpu for p in procs}
    taken: list[int] = []

    def groups(key: Callable[[CpuTopology], object]) -> list[list[int]]:
        by: dict[object, list[int]] = {}
        for p in procs:
            by.setdefault(key(p), []).append(p.cpu)
        return sorted((sorted(g) for g in by.values()), key=lambda g: g[0])

    for group in (*groups(lambda p: p.socket_id), *groups(lambda p: (p.socket_id, p.core_id))):
        if len(taken) + len(group) <= count and free.issuperset(group):
            taken += group
            free.difference_update(group)
    # Single CPUs: fill the core already started first (kubelet's "fewest free CPUs" ordering), then by id.
    cores = logical_cores(procs)
    started = {cores[c] for c in taken}
    for cpu in sorted(free, key=lambda c: (cores[c] not in started, c)):
        if len(taken) == count:
            break
        taken.append(cpu)
    return tuple(sorted(taken))


def kubelet_reserved_cpus(node: NodeInfo, reservation: Reservation) -> tuple[int, ...]:
    """The CPUs kubelet's static policy keeps for the system (upstream GetStaticCPUManagerPolicyReservedCPUs)."""
    if reservation.cpus:
        return reservation.cpus
    return take_by_topology(node, math.ceil(reservation.cpu_milli / 1000))


def pod_cpu_allocs(pinned: Sequence[PinnedContainer], pods: Sequence[PodMeta]) -> list[dict[str, Any]]:
    """Upstream ``calGuaranteedCpu``: per pod, the union of its containers' pinned CPUs, by uid."""
    by_uid: dict[str, set[int]] = {}
    for entry in pinned:
        by_uid.setdefault(entry.pod_uid, set()).update(entry.cpus)
    known = {p.uid: p for p in pods}
    out = []
    for uid, cpus in sorted(by_uid.items()):
        if not cpus:
            continue
        alloc: dict[str, Any] = {}
        pod = known.get(uid)
        if pod is not None:
            alloc["namespace"], alloc["name"] = pod.pod.namespace, pod.pod.name
        alloc.update(uid=uid, cpuset=format_cpulist(sorted(cpus)), managedByKubelet=True)
        out.append(alloc)
    return out


def zones(node: NodeInfo, numa_memory: Mapping[int, int]) -> list[dict[str, Any]]:
    """One zone ``node-<n>`` per NUMA node (upstream ``calTopologyZoneList`` without huge pages: the
    HugePageReport gate is not implemented, so they count 0 and memory is the node's whole MemTotal).
    Raises :class:`KoordletError` when the NUMA nodes holding CPUs and those with memory disagree."""
    cpus_of: dict[int, int] = {}
    for proc in node.processors():
        cpus_of[max(proc.numa_node, 0)] = cpus_of.get(max(proc.numa_node, 0), 0) + 1
    ids = sorted({n.node for n in node.numa_nodes} | set(cpus_of))
    memory = dict(numa_memory) if numa_memory else {ids[0] if ids else 0: node.memory_total_bytes}
    if numa_memory and set(numa_memory) != set(ids):
        raise KoordletError(f"NUMA nodes with CPUs {ids} and with memory {sorted(numa_memory)} differ")
    out = []
    for n in ids:
        values = {"cpu": format_cpu_milli(cpus_of.get(n, 0) * 1000), "memory": format_memory_bytes(memory.get(n, 0)),
                  **dict.fromkeys(HUGEPAGE_RESOURCES, "0")}
        out.append({"name": f"node-{n}", "type": ZONE_TYPE,
                    "resources": [{"name": k, "capacity": v, "allocatable": v, "available": v}
                                  for k, v in sorted(values.items())]})
    return out


def _pools_json(pools: Sequence[SharedPool], reserved: frozenset[int]) -> list[dict[str, object]]:
    out = []
    for pool in pools:
        left = tuple(c for c in pool.cpus if c not in reserved)
        if left:
            out.append(SharedPool(pool.socket, pool.node, left).to_json())
    return out


@dataclass(frozen=True)
class HostTopology:
    """What the re-read gives besides :class:`NodeInfo`."""

    numa_memory: Mapping[int, int]
    basic: CPUBasicInfo


def build_report(node: NodeInfo, host: HostTopology, reservation: Reservation, manager: KubeletCPUManager,
                 pools: tuple[Sequence[SharedPool], Sequence[SharedPool]], pods: Sequence[PodMeta],
                 query_kubelet: bool, node_reserved: Mapping[str, Any] | None = None,
                 system_qos: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report (see the module doc); ``query_kubelet`` False on a plain host (no kubelet policy to say);
    ``node_reserved`` / ``system_qos``: :func:`node_reservation` / :func:`system_qos_resource` of the Node's
    annotations, whose CPUs leave the pools (system QoS CPUs only when exclusive, as upstream)."""
    node_reserved, system_qos = node_reserved or {}, system_qos or {}
    reserved_by_node = frozenset(parse_cpulist(node_reserved.get("reservedCPUs", "")))
    if system_qos.get("cpusetExclusive", True):
        reserved_by_node |= frozenset(parse_cpulist(system_qos.get("cpuset", "")))
    procs = node.processors()
    cores = logical_cores(procs)
    detail = [{"id": p.cpu, "core": cores[p.cpu], "socket": p.socket_id, "node": max(p.numa_node, 0)}
              for p in sorted(procs, key=lambda p: p.cpu)]
    policy: dict[str, Any] = {}
    allocs: list[dict[str, Any]] = []
    nrt_policy = "None"
    if query_kubelet:
        policy["policy"] = reservation.cpu_manager_policy
        if reservation.cpu_manager_policy_options:
            policy["options"] = dict(reservation.cpu_manager_policy_options)
        if manager.static:
            reserved = kubelet_reserved_cpus(node, reservation)
            if reserved:
                policy["reservedCPUs"] = format_cpulist(reserved)
            allocs = pod_cpu_allocs(manager.pinned, pods)
        nrt_policy = topology_policy(reservation.topology_manager_policy, reservation.topology_manager_scope)
    return {
        "cpuTopology": {"detail": detail} if detail else {},
        "cpuBasicInfo": host.basic.to_json(),
        "kubeletCPUManagerPolicy": policy,
        "podCPUAllocs": allocs,
        "cpuSharedPools": _pools_json(pools[0], reserved_by_node),
        "beCPUSharedPools": _pools_json(pools[1], reserved_by_node),
        "nodeReservation": dict(node_reserved),
        "systemQOSResource": dict(system_qos),
        "topologyPolicy": nrt_policy,
        "zones": zones(node, host.numa_memory),
    }


def annotation_reserved_cpus(node: NodeInfo, annotations: Mapping[str, str]) -> frozenset[int]:
    """The CPUs the Node's reservation and exclusive system-QoS annotations take out of the shared pools; none
    for an annotation that cannot be read (:class:`TopologySource` logs it)."""
    cpus: set[int] = set()
    with contextlib.suppress(KoordletError):
        cpus.update(parse_cpulist(node_reservation(node, annotations, take_by_topology).get("reservedCPUs", "")))
    try:
        system = system_qos_resource(annotations)
    except KoordletError:
        system = {}
    if system.get("cpusetExclusive", True):
        cpus.update(parse_cpulist(system.get("cpuset", "")))
    return frozenset(cpus)


class TopologyInputs(Protocol):
    """The states informer as the report reads it."""

    def node(self) -> NodeInfo: ...

    def set_node(self, node: NodeInfo) -> bool: ...

    def pods(self) -> Sequence[PodMeta]: ...

    def reservation(self) -> Reservation: ...

    def cpu_manager(self) -> KubeletCPUManager: ...

    def shared_pool_sets(self) -> tuple[tuple[SharedPool, ...], tuple[SharedPool, ...]] | None: ...

    def kube_node(self) -> KubeNodeInfo | None: ...


class TopologySource:
    """A daemon component: re-reads the CPU topology every ``interval_seconds`` (publishing a changed node to
    the informer) and builds the report on demand.  ``read_node`` / ``read_host`` raise on an unreadable
    host; the last good reading stays in force and the failure is logged once per streak."""

    name = "node-topology"

    def __init__(self, informer: TopologyInputs, read_node: Callable[[], NodeInfo],
                 read_host: Callable[[], HostTopology], interval_seconds: float, *, enabled: bool,
                 query_kubelet: bool) -> None:
        self._informer = informer
        self._read_node = read_node
        self._read_host = read_host
        self.interval_seconds = interval_seconds
        """``nodeCPUInfoIntervalSeconds``: how often the CPU topology is re-read."""
        self.enabled = enabled
        """Gate NodeTopologyReport: off, the CPU topology is still re-read but nothing is reported."""
        self._query_kubelet = query_kubelet
        self._host: HostTopology | None = None
        self._refused: dict[str, str] = {}
        self._streak = Streak(log)
        self._worker = Worker("koordlet-node-topology")
        self.reads = 0

    def refresh(self) -> bool:
        """Re-reads the node; returns whether the reading succeeded."""
        self.reads += 1
        try:
            node = self._read_node()
            host = self._read_host()
        except (KoordletError, OSError) as exc:
            self._streak.fail(type(exc).__name__, "cannot re-read the node's CPU topology, keeping the last one",
                              extra={"error": str(exc)})
            return False
        self._streak.ok("node CPU topology readable again")
        if self._informer.set_node(node):
            log.info("node CPU topology changed", extra={"online_cpus": format_cpulist(node.online_cpus),
                                                         "numa_nodes": len(node.numa_nodes)})
        self._host = host
        return True

    def current(self) -> dict[str, Any] | None:
        """The report, or None: gate off, the host not read yet, or the pods and kubelet's configuration not
        known yet (the pools would be a guess).  Never raises."""
        if not self.enabled or self._host is None:
            return None
        pools = self._informer.shared_pool_sets()
        if pools is None:
            return None
        node = self._informer.node()
        kube_node = self._informer.kube_node()
        annotations = kube_node.annotations if kube_node is not None else {}
        reserved = self._from_node(ANNOTATION_NODE_RESERVATION,
                                   lambda: node_reservation(node, annotations, take_by_topology))
        system_qos = self._from_node(ANNOTATION_SYSTEM_QOS_RESOURCE, lambda: system_qos_resource(annotations))
        try:
            return build_report(node, self._host, self._informer.reservation(), self._informer.cpu_manager(), pools,
                                self._informer.pods(), self._query_kubelet, reserved, system_qos)
        except KoordletError as exc:
            self._streak.fail("inconsistent", "node topology not reported", extra={"error": str(exc)})
            return None

    def _from_node(self, key: str, parse: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """A Node annotation's value in the report; one that cannot be read is reported empty (upstream logs it
        and goes on), with one warning per bad value."""
        try:
            value = parse()
        except KoordletError as exc:
            if self._refused.get(key) != str(exc):
                log.warning("node annotation refused, reported empty", extra={"annotation": key, "error": str(exc)})
            self._refused[key] = str(exc)
            return {}
        self._refused.pop(key, None)
        return value

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        """The first reading happens before returning, so the first report has a topology."""
        self.refresh()

        def step() -> float:
            self.refresh()
            return self.interval_seconds

        self._worker.loop(step, on_failure, first_wait=self.interval_seconds)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stop(timeout_seconds)
