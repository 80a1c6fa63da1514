"""MemoryAllocatableEvict and CPUAllocatableEvict on the real hierarchy of each cgroup version (v1 on the host,
v2 in the guest): three koord-batch pods labelled eviction-enabled, each a real process in its own pod cgroup
under the test prefix; the real collectors sample them, the strategy compares their batch requests with the
Node's allocatable (as the companion delivers it) and kills the victim through the real kill backend.

Worked example: batch-memory requests 600 + 400 + 200 MiB = 1200 MiB against 1000 MiB allocatable -> 120% >
110%: release (1.2 - 0.9) x 1000 MiB = 300 MiB; the largest request (b-600, 600 MiB) goes alone.  CPU: batch-cpu
requests 3000 + 2000 + 1000m against 5000 -> 120%: release 6000 - 0.9 x 5000 = 1500m: b-600 (3000m) alone.
The pods use a few MiB: the usage threshold is nowhere near, only the allocatable trigger acts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.metricsadvisor import framework as advisor_framework
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.qosmanager import helpers
from koordlet.qosmanager.evictor import Evictions, KillBackend
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.cpuevict import CPUEvict
from koordlet.qosmanager.plugins.memoryevict import MemoryEvict
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import read_node_info
from tests.fixtures.fixedpods import alive
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until
from tests.integration.qosmanager.test_memoryevict_real import HOLD
from tests.unit.qosmanager.fakes import FakeInformer

MIB = 1 << 20
SIZES = {"b-600": 600, "b-400": 400, "b-200": 200}
"""Each pod's batch request: MiB of batch-memory and x5 milli-cores of batch-cpu."""
NODE = KubeNodeInfo(name="node-a", capacity={"cpu": "8", "memory": "16Gi"},
                    allocatable={"kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": f"{1000 * MIB}"})
SLO = {"enable": True, "allocatableEvictPriorityThreshold": 5999,
       "memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 90,
       "cpuAllocatableEvictThresholdPercent": 110, "cpuAllocatableEvictLowerPercent": 90}


def batch_pod(prefix: str, name: str, size_mib: int) -> PodMeta:
    pod_dir = f"{prefix}/kubepods/besteffort/pod{name}"
    requests = Resources(batch_cpu_milli=size_mib * 5, batch_memory_bytes=size_mib * MIB)
    pod = Pod(uid=name, name=name, namespace="default", labels={"koordinator.sh/eviction-enabled": "true"},
              annotations={}, kube_qos=KubeQoS.BESTEFFORT, phase="Running", priority=5000,
              containers=(Container("c", "c", requests=requests),))
    return PodMeta(pod=pod, cgroup_dir=pod_dir, containers=(ContainerMeta("c", "c", f"{pod_dir}/c"),))


@dataclass
class Rig:
    advisor: MetricsAdvisor
    options: Options
    pids: dict[str, int]


@pytest.fixture
def rig(real_cgroups: RealCgroups, tmp_path: Path) -> Iterator[Rig]:
    native.configure_fd_budget()
    prefix = real_cgroups.name
    pods = {name: batch_pod(prefix, name, size) for name, size in SIZES.items()}
    pids: dict[str, int] = {}
    for name, meta in pods.items():
        rel = meta.containers[0].cgroup_dir.removeprefix(prefix + "/")
        real_cgroups.mkdir(rel)
        pids[name] = real_cgroups.spawn(rel, HOLD.format(size=4 * MIB))
    wait_until("the pods to hold their memory",
               lambda: all(real_cgroups.memory_usage(m.cgroup_dir.removeprefix(prefix + "/")) >= 4 * MIB
                           for m in pods.values()), timeout=60)
    paths = HostPaths()
    layout = detect_layout(paths)
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    informer = FakeInformer(list(pods.values()), read_node_info(paths, native), kube=NODE)
    collector = CollectorConfig(memory_interval_seconds=1.0, res_used_interval_seconds=1.0)
    advisor = MetricsAdvisor(advisor_framework.Options(paths=paths, layout=layout, driver=CgroupDriver.CGROUPFS,
                                                       cache=cache, informer=informer, config=collector,
                                                       gates=gates.resolve({}), clock=time.time),
                             build_collectors())
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache,
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(KillBackend(layout), time.time),
                      reader=CgroupReader(layout), config=QoSManagerConfig(cpu_evict_cool_time_seconds=0),
                      collector=collector, gates={"MemoryAllocatableEvict": True, "CPUAllocatableEvict": True},
                      clock=time.time, decisions=DecisionLog(), kube_parent=prefix)
    yield Rig(advisor, options, pids)


def sampled(rig: Rig) -> None:
    """Collects until every pod has a CPU and a memory sample (CPU usage needs two readings)."""
    pods = rig.options.informer.pods()

    def every_pod() -> bool:
        rig.advisor.run_once(force=True)
        cpu, memory = helpers.cpu_usage(rig.options, pods), helpers.memory_usage(rig.options, pods)
        return all(m.uid in cpu.pods and m.uid in memory.pods for m in pods)

    wait_until("a usage sample of every pod", every_pod, timeout=30, poll=0.5)


@pytest.mark.parametrize("strategy", [MemoryEvict, CPUEvict])
def test_the_largest_batch_request_is_killed_for_the_allocatable(rig: Rig, strategy: type) -> None:
    sampled(rig)
    decision = strategy(rig.options).run_once(merge_over_defaults(NodeSLOSpec.from_json(
        {"resourceUsedThresholdWithBE": SLO})))
    assert decision.action == "evict", decision.summary
    assert [e["pod"] for e in decision.numbers["evicted"]] == ["default/b-600"], decision.summary
    wait_until("b-600's process to be killed", lambda: not alive(rig.pids["b-600"]), timeout=10)
    assert alive(rig.pids["b-400"]) and alive(rig.pids["b-200"])
