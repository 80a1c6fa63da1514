"""Shared doubles for QoS strategy tests: an informer holding given pods, a settable clock, pods built
in a line, and :func:`make_options` wiring a real ResourceExecutor and MetricCache over a FakeHost tree,
so a strategy's intents land in the fake cgroup files and tests read them back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache, names
from koordlet.metriccache.cache import labels_of
from koordlet.qosmanager.evictor import Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.statesinformer.cpumanager import KubeletCPUManager
from koordlet.statesinformer.framework import ContainerMeta, PodMeta, PodsCallback
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.kubepaths import CgroupDriver, KubeQoS, container_dir, pod_dir
from koordlet.system.layout import CgroupMode
from koordlet.system.node import CpuTopology, NodeInfo, NumaNode
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

__all__ = ["FakeClock", "FakeInformer", "MemoryAudit", "RecordingBackend", "make_node", "make_options",
           "make_pod", "put_usage"]

_NO_RESOURCES = Resources()
_KUBE_QOS = {"LSE": KubeQoS.GUARANTEED, "LSR": KubeQoS.GUARANTEED, "LS": KubeQoS.BURSTABLE,
             "BE": KubeQoS.BESTEFFORT, "SYSTEM": KubeQoS.BURSTABLE}


def make_node(cpus: int = 8, *, threads_per_core: int = 2, numa_nodes: int = 1,
              memory_bytes: int = 16 << 30) -> NodeInfo:
    """A node of ``cpus`` logical CPUs: CPU i is thread i // cores of core i % cores (Linux numbering:
    siblings are ``i`` and ``i + cores``), cores split evenly over NUMA nodes / sockets."""
    cores = cpus // threads_per_core
    per_node = max(1, cores // numa_nodes)
    topo = []
    for cpu in range(cpus):
        core = cpu % cores
        node = min(core // per_node, numa_nodes - 1)
        topo.append(CpuTopology(cpu=cpu, core_id=core, socket_id=node, numa_node=node))
    numa = tuple(NumaNode(n, tuple(c.cpu for c in topo if c.numa_node == n)) for n in range(numa_nodes))
    return NodeInfo(kernel_release="5.10.0-test", online_cpus=tuple(range(cpus)), cpus=tuple(topo),
                    numa_nodes=numa, memory_total_bytes=memory_bytes, cgroup_mode=CgroupMode.V1,
                    cgroup_driver=CgroupDriver.CGROUPFS)


def make_pod(name: str, qos: str = "LS", *, uid: str | None = None, priority: int | None = None,
             containers: Sequence[str] = ("main",), labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None, requests: Resources = _NO_RESOURCES,
             limits: Resources = _NO_RESOURCES, phase: str = "Running", kube_parent: str = "",
             driver: CgroupDriver = CgroupDriver.CGROUPFS) -> PodMeta:
    """A pod labelled with QoS class ``qos`` in its kube QoS directory, one container per name (ids
    ``<name>-<container>``), each container with the same requests and limits."""
    uid = uid or f"uid-{name}"
    kube_qos = _KUBE_QOS[qos]
    all_labels = {LABEL_QOS: qos, **(labels or {})}
    base = pod_dir(driver, kube_qos, uid)
    pdir = f"{kube_parent}/{base}" if kube_parent else base
    metas, specs = [], []
    for c in containers:
        cid = f"{name}-{c}".replace("_", "-")
        cdir = container_dir(driver, kube_qos, uid, f"containerd://{cid}")
        metas.append(ContainerMeta(name=c, container_id=cid, cgroup_dir=f"{kube_parent}/{cdir}" if kube_parent
                                   else cdir))
        specs.append(Container(name=c, container_id=f"containerd://{cid}", requests=requests, limits=limits))
    pod = Pod(uid=uid, name=name, namespace="default", labels=all_labels, annotations=dict(annotations or {}),
              kube_qos=kube_qos, phase=phase, priority=priority, containers=tuple(specs))
    return PodMeta(pod=pod, cgroup_dir=pdir, containers=tuple(metas))


@dataclass
class FakeInformer:
    """The informer protocol over a mutable pod list."""

    pod_list: list[PodMeta] = field(default_factory=list)
    node_info: NodeInfo = field(default_factory=make_node)
    reserved: Reservation = field(default_factory=Reservation)
    kubelet: KubeletCPUManager = field(default_factory=KubeletCPUManager)
    kube: KubeNodeInfo | None = None
    """The Node's facts as the companion would send them (None: not sent)."""

    def kube_node(self) -> KubeNodeInfo | None:
        return self.kube

    def pods(self) -> tuple[PodMeta, ...]:
        return tuple(self.pod_list)

    def node(self) -> NodeInfo:
        return self.node_info

    def reservation(self) -> Reservation:
        return self.reserved

    def cpu_manager(self) -> KubeletCPUManager:
        return self.kubelet

    def subscribe(self, callback: PodsCallback) -> None:
        return None


@dataclass
class RecordingBackend:
    """An eviction backend that records (pod key, reason) and can be told to fail."""

    name: str = "recording"
    evicted: list[tuple[str, str]] = field(default_factory=list)
    fail: bool = False

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        from koordlet.qosmanager.evictor import EvictionFailed

        if self.fail:
            raise EvictionFailed("injected failure")
        self.evicted.append((pod.pod.key, reason))


def make_options(host: FakeHost, tmp_path: Path, informer: FakeInformer, *, clock: FakeClock | None = None,
                 gates: Mapping[str, bool] | None = None, config: QoSManagerConfig | None = None,
                 backend: Any = None, kube_parent: str = "", probes: Mapping[str, bool] | None = None,
                 metrics: Any = None) -> Options:
    """Options over ``host``'s tree: a real ResourceExecutor (audit in memory), a real MetricCache on
    ``tmp_path`` driven by ``clock`` (wall-clock seconds), and :class:`RecordingBackend` for evictions."""
    clock = clock or FakeClock(1_700_000_000.0)
    layout = host.layout()
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), clock)
    executor = ResourceExecutor(layout, clock, MemoryAudit())
    evictions = Evictions(backend if backend is not None else RecordingBackend(), clock, MemoryAudit())
    extra: dict[str, Any] = {"metrics": metrics} if metrics is not None else {}
    return Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache, executor=executor,
                   evictor=evictions, reader=CgroupReader(layout), config=config or QoSManagerConfig(),
                   collector=CollectorConfig(), gates=dict(gates or {}), clock=clock, decisions=DecisionLog(),
                   kube_parent=kube_parent, probes=dict(probes or {}), **extra)


def put_usage(options: Options, *, node_cpu: float | None = None, node_memory: float | None = None,
              pod_cpu: Mapping[str, float] | None = None, pod_memory: Mapping[str, float] | None = None,
              container_cpu: Mapping[str, float] | None = None) -> None:
    """Appends samples at the clock's current time (pods by UID, containers by bare id)."""
    now = options.clock()
    cache = options.cache
    if node_cpu is not None:
        cache.append(names.NODE_CPU_USAGE, (), now, node_cpu)
    if node_memory is not None:
        cache.append(names.NODE_MEMORY_USAGE, (), now, node_memory)
    for uid, value in (pod_cpu or {}).items():
        cache.append(names.POD_CPU_USAGE, labels_of(pod=uid), now, value)
    for uid, value in (pod_memory or {}).items():
        cache.append(names.POD_MEMORY_USAGE, labels_of(pod=uid), now, value)
    for cid, value in (container_cpu or {}).items():
        cache.append(names.CONTAINER_CPU_USAGE, labels_of(container=cid), now, value)
