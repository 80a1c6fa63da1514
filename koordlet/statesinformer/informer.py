"""The states informer: one pod list for everyone, from kubelet (Kubernetes) or from the host (standalone).

Readers get an immutable tuple that is replaced, never mutated, so they need no lock; subscribers are
called after each change from the informer's thread.  In standalone mode a thread rescans the kubepods
tree every sync interval and right after a pod directory appears or goes (PLEG, inotify).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from koordlet.apis.pod import Pod
from koordlet.apis.tenantpolicy import TenantPolicy
from koordlet.component import Worker
from koordlet.config.types import Config
from koordlet.errors import KoordletError, ParseError
from koordlet.statesinformer.cpumanager import KubeletCPUManager
from koordlet.statesinformer.cpupools import CPUPools, SharedPool
from koordlet.statesinformer.framework import ContainerMeta, PodMeta, PodsCallback
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.statesinformer.reservation import Reservation, reservation_from_resources
from koordlet.statesinformer.standalone import scan_kubepods, workload_pods
from koordlet.statesinformer.topology import annotation_reserved_cpus
from koordlet.system.kubepaths import (
    CgroupDriver,
    KubeQoS,
    container_dir,
    parse_container_id,
    pod_dir,
    qos_dir,
    under_parent,
)
from koordlet.system.layout import CgroupLayout
from koordlet.system.node import NodeInfo

log = logging.getLogger(__name__)


def kubelet_pod_meta(pod: Pod, driver: CgroupDriver, parent: str = "") -> PodMeta:
    """A kubelet pod with the cgroup directories kubelet and the runtime gave it."""
    qos = pod.kube_qos or KubeQoS.BESTEFFORT
    try:
        rel_dir = under_parent(parent, pod_dir(driver, qos, pod.uid))
    except ParseError:
        rel_dir = ""
    containers = []
    for c in pod.containers:
        cdir, cid = "", ""
        if c.container_id and rel_dir:
            try:
                cid = parse_container_id(c.container_id).id
                cdir = under_parent(parent, container_dir(driver, qos, pod.uid, c.container_id))
            except ParseError:
                cid, cdir = "", ""
        containers.append(ContainerMeta(name=c.name, container_id=cid, cgroup_dir=cdir))
    return PodMeta(pod=pod, cgroup_dir=rel_dir, containers=tuple(containers), source="kubelet")


class StatesInformer:
    """Pods and node facts; a daemon component."""

    name = "statesinformer"

    def __init__(self, config: Config, layout: CgroupLayout, driver: CgroupDriver, node: NodeInfo,
                 pleg_factory: Callable[[Sequence[str], Callable[[], None]], object] | None = None) -> None:
        self._config = config
        self._layout = layout
        self._driver = driver
        self._node = node
        self._pods: tuple[PodMeta, ...] = ()
        self._discovered: dict[str, PodMeta] = {}
        """The kubepods tree's pods of the last standalone scan, by cgroup directory (reused while unchanged)."""
        self._kube_node: KubeNodeInfo | None = None
        self._callbacks: list[PodsCallback] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._worker = Worker("koordlet-statesinformer")
        self._pleg_factory = pleg_factory
        self._pleg: object | None = None
        self.tenant = TenantPolicy.from_config(config.tenant)
        """Pod labels and annotations are tenant input: every published pod is reviewed first."""
        self.syncs = 0
        node_config = config.node
        self._reservation = reservation_from_resources(
            {k: v for k, v in (("cpu", node_config.reserved_cpu), ("memory", node_config.reserved_memory)) if v},
            "node")
        self._pods_synced = False
        # On a plain host the reservation is the configured one; with kubelet it is known once /configz is read.
        self._reservation_known = config.standalone
        self._cpu_pools = CPUPools.under(config.host.var_lib_kubelet_root_dir, self.node, self.pods,
                                         self.reservation, lambda: self._pods_synced and self._reservation_known,
                                         self.node_reserved_cpus)
        self._node_reserved: tuple[object, object, frozenset[int]] = (None, None, frozenset())

    # ------------------------------------------------------------------------------ StatesInformer

    def pods(self) -> tuple[PodMeta, ...]:
        return self._pods

    def node(self) -> NodeInfo:
        return self._node

    def set_node(self, node: NodeInfo) -> bool:
        """The node's facts re-read (CPU topology, every ``nodeCPUInfoIntervalSeconds``); replaces, never
        mutates, so readers need no lock.  Returns whether anything changed."""
        if node == self._node:
            return False
        self._node = node
        return True

    def reservation(self) -> Reservation:
        """CPU and memory the node keeps back from pods (kubelet's, or the plain host's configured one)."""
        return self._reservation

    def set_reservation(self, reservation: Reservation) -> None:
        self._reservation = reservation
        self._reservation_known = True

    def cpu_manager(self) -> KubeletCPUManager:
        """kubelet's CPU manager policy and the CPUs its static policy pinned to containers."""
        return self._cpu_pools.cpu_manager()

    def shared_pools(self) -> str | None:
        """The node's ``node.koordinator.sh/cpu-shared-pools`` (JSON text), None until the first pod list and
        kubelet's configuration are known (:mod:`koordlet.statesinformer.cpupools`)."""
        return self._cpu_pools.annotation()

    def node_reserved_cpus(self) -> frozenset[int]:
        """CPUs the Node's ``node.koordinator.sh/reservation`` and exclusive ``system-qos-resource`` keep out of
        the shared pools (none until the companion sent the Node; a bad annotation keeps none, and the topology
        report says why).  Cached per Node and node facts, both replaced, never mutated."""
        kube, node = self._kube_node, self._node
        cached_kube, cached_node, cpus = self._node_reserved
        if cached_kube is kube and cached_node is node:
            return cpus
        cpus = frozenset() if kube is None else annotation_reserved_cpus(node, kube.annotations)
        self._node_reserved = (kube, node, cpus)
        return cpus

    def shared_pool_sets(self) -> tuple[tuple[SharedPool, ...], tuple[SharedPool, ...]] | None:
        """The LS and BE shared pools (node topology report), None while unknown like :meth:`shared_pools`."""
        return self._cpu_pools.pools()

    def kube_node(self) -> KubeNodeInfo | None:
        """The Node's facts from the companion (``set_kube_node``); None until it sent them."""
        return self._kube_node

    def set_kube_node(self, node: KubeNodeInfo | None) -> None:
        """Called by the companion's NodeSLO watch with each Node it sends (validated already)."""
        self._kube_node = node

    def subscribe(self, callback: PodsCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

    # ------------------------------------------------------------------------------ updates

    def set_pods(self, pods: Sequence[PodMeta]) -> bool:
        """Publishes a new list, each pod reviewed by the tenant policy (keys it may not use dropped); returns
        False (and notifies nobody) when nothing changed."""
        ordered = tuple(sorted(self._review(pods), key=lambda p: p.uid))
        self._pods_synced = True
        if ordered == self._pods:
            return False
        self._pods = ordered
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(ordered)
            except Exception:
                log.exception("pods subscriber failed")
        return True

    def _review(self, pods: Sequence[PodMeta]) -> list[PodMeta]:
        # Configured workloads (standalone) are the operator's own: trusted with every key.
        reviews = self.tenant.review_all([(m.pod, m.source == "config") for m in pods],
                                         memory_capacity_bytes=self._node.memory_total_bytes,
                                         node_cpus=self._node.online_cpus or None)
        out = []
        for meta, (pod, refusals) in zip(pods, reviews, strict=True):
            self.tenant.note(pod, refusals)
            out.append(meta if pod is meta.pod else PodMeta(pod, meta.cgroup_dir, meta.containers, meta.source))
        return out

    def set_kubelet_pods(self, pods: Sequence[Pod]) -> None:
        """The kubelet source's callback: the pods kubelet runs (terminated ones hold no cgroups)."""
        parent = self._config.host.cgroup_kube_parent
        self.set_pods([kubelet_pod_meta(p, self._driver, parent) for p in pods if not p.terminated])

    def sync_standalone(self) -> bool:
        """Rescans the host (configured workloads + kubepods tree) and publishes the result."""
        pods = workload_pods(self._config.workloads)
        if self._config.discover_kubepods:
            configured = {p.uid for p in pods}
            found = scan_kubepods(self._layout, self._driver, self._config.host.cgroup_kube_parent,
                                  self._discovered)
            self._discovered = {p.cgroup_dir: p for p in found}
            pods += [p for p in found if p.uid not in configured]
        self.syncs += 1
        return self.set_pods(pods)

    def trigger(self) -> None:
        """Asks for a rescan soon (PLEG saw a pod directory appear or go)."""
        self._wake.set()

    def pleg_dirs(self) -> list[str]:
        """The QoS directories of the cpu hierarchy whose pod entries signal pod changes."""
        try:
            root = self._layout.controller_root("cpu")
        except KoordletError:
            return []
        parent = self._config.host.cgroup_kube_parent
        return [f"{root}/{under_parent(parent, qos_dir(self._driver, q))}" for q in KubeQoS]

    # ------------------------------------------------------------------------------ component

    @property
    def running(self) -> bool:
        """Standalone: whether the rescan thread is alive; with kubelet there is no thread (the kubelet source
        drives it), so it runs as long as the daemon does."""
        return self._worker.running or not self._config.standalone

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        """Standalone: the first scan happens before returning, so collectors start with pods."""
        if not self._config.standalone:
            return  # the kubelet source drives set_kubelet_pods
        self.sync_standalone()
        if self._pleg_factory is not None:
            self._pleg = self._pleg_factory(self.pleg_dirs(), self.trigger)
            self._pleg.start()  # type: ignore[attr-defined]
        interval = self._config.kubelet.sync_interval_seconds

        stopping = self._worker.stopping

        def loop() -> None:
            try:
                while not stopping.is_set():
                    self._wake.wait(interval)
                    self._wake.clear()
                    if stopping.is_set():
                        break
                    self.sync_standalone()
                    # At most 5 rescans a second however busy the runtime is (Koordinator's PLEG rate).
                    stopping.wait(0.2)
            except BaseException as exc:
                on_failure(exc)

        self._worker.start(loop)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stopping.set()
        self._wake.set()
        if self._pleg is not None:
            self._pleg.stop(timeout_seconds)  # type: ignore[attr-defined]
        self._worker.stop(timeout_seconds)
