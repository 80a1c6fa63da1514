"""The node topology report (upstream ``states_noderesourcetopology.go`` ``calcNodeTopo``) and the CPU topology
re-read every ``nodeCPUInfoIntervalSeconds``.

Worked example (the node and pods of ``test_cpupools``: 8 CPUs, NUMA 0 = socket 0 = CPUs 0,1,4,5 and NUMA 1 =
socket 1 = CPUs 2,3,6,7, siblings i / i+4; LSE pod bound to 2, LSR pod bound to 6; kubelet's static policy
pinned 3 to Guaranteed pod ``g``, 5 to a pod no longer listed and 7 to the LS pod ``ls-g``, which Koordinator
places itself so it does not count):

* kubelet reserves 2 CPUs (kube+system reserved 1500m -> ceil = 2) without ``reservedSystemCPUs``: its static
  policy takes one whole core, the lowest: CPUs {0, 4} -> ``reservedCPUs: "0,4"`` (upstream keeps them in the
  shared pools: burstable pods may use them);
* LS pools: minus bound {2, 6} and pinned {3, 5}: NUMA 0 = 0-1,4 and NUMA 1 = 7;
* BE pools: minus the LSE pod's {2} only and pinned {3, 5}: NUMA 0 = 0-1,4 and NUMA 1 = 6-7;
* pod allocations: uid-g = 3 (default/g), uid-gone = 5 (no name: not in the pod list);
* zones: node-0 and node-1 with 4 CPUs and their NUMA memory each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from koordlet.apis.cpunormalization import CPUBasicInfo
from koordlet.config.load import load
from koordlet.errors import CgroupGone, KoordletError
from koordlet.statesinformer.cpumanager import KubeletCPUManager
from koordlet.statesinformer.cpupools import CPUPools, SharedPool
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.statesinformer.reservation import Reservation, reservation_from_configz
from koordlet.statesinformer.topology import (
    HostTopology,
    TopologySource,
    build_report,
    logical_cores,
    take_by_topology,
    topology_policy,
)
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.node import CpuTopology, NodeInfo
from koordlet.system.numamemory import read_numa_memory
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import make_node
from tests.unit.statesinformer.test_cpupools import PODS, STATE

GI = 1 << 30
STATIC = Reservation(cpu_milli=1500, cpu_manager_policy="static", cpu_manager_policy_options=(("full-pcpus-only",
                                                                                                 "true"),),
                     topology_manager_policy="single-numa-node", topology_manager_scope="pod")
HOST = HostTopology({0: 8 * GI, 1: 8 * GI}, CPUBasicInfo(cpu_model="Intel(R) Xeon(R) Platinum 8269CY",
                                                        hyper_thread_enabled=True, vendor_id="GenuineIntel"))


def zone(n: int, cpus: str, memory: str) -> dict[str, object]:
    values = {"cpu": cpus, "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": memory}
    return {"name": f"node-{n}", "type": "Node",
            "resources": [{"name": k, "capacity": v, "allocatable": v, "available": v} for k, v in values.items()]}


EXPECTED = {
    "cpuTopology": {"detail": [{"id": c, "core": c % 4, "socket": (c % 4) // 2, "node": (c % 4) // 2}
                               for c in range(8)]},
    "cpuBasicInfo": {"cpuModel": "Intel(R) Xeon(R) Platinum 8269CY", "hyperThreadEnabled": True,
                     "vendorID": "GenuineIntel"},
    "kubeletCPUManagerPolicy": {"policy": "static", "options": {"full-pcpus-only": "true"}, "reservedCPUs": "0,4"},
    "podCPUAllocs": [{"namespace": "default", "name": "g", "uid": "uid-g", "cpuset": "3", "managedByKubelet": True},
                     {"uid": "uid-gone", "cpuset": "5", "managedByKubelet": True}],
    "cpuSharedPools": [{"socket": 0, "node": 0, "cpuset": "0-1,4"}, {"socket": 1, "node": 1, "cpuset": "7"}],
    "beCPUSharedPools": [{"socket": 0, "node": 0, "cpuset": "0-1,4"}, {"socket": 1, "node": 1, "cpuset": "6-7"}],
    "nodeReservation": {},
    "systemQOSResource": {},
    "topologyPolicy": "SingleNUMANodePodLevel",
    "zones": [zone(0, "4", "8Gi"), zone(1, "4", "8Gi")],
}


@dataclass
class Inputs:
    """The states informer as the report reads it, over a real :class:`CPUPools` on a state file."""

    state: Path
    node_info: NodeInfo = field(default_factory=lambda: make_node(8, numa_nodes=2))
    pod_list: tuple[PodMeta, ...] = PODS
    reserved: Reservation = STATIC
    ready: bool = True
    set_nodes: int = 0
    kube: KubeNodeInfo | None = None

    def __post_init__(self) -> None:
        self._pools = CPUPools(str(self.state), self.node, self.pods, self.reservation, lambda: self.ready)

    def node(self) -> NodeInfo:
        return self.node_info

    def set_node(self, node: NodeInfo) -> bool:
        if node == self.node_info:
            return False
        self.node_info, self.set_nodes = node, self.set_nodes + 1
        return True

    def pods(self) -> Sequence[PodMeta]:
        return self.pod_list

    def reservation(self) -> Reservation:
        return self.reserved

    def cpu_manager(self) -> KubeletCPUManager:
        return self._pools.cpu_manager()

    def shared_pool_sets(self) -> tuple[tuple[SharedPool, ...], tuple[SharedPool, ...]] | None:
        return self._pools.pools()

    def kube_node(self) -> KubeNodeInfo | None:
        return self.kube


@pytest.fixture
def inputs(tmp_path: Path) -> Inputs:
    state = tmp_path / "cpu_manager_state"
    state.write_text(json.dumps(STATE))
    return Inputs(state)


def source(inputs: Inputs, *, enabled: bool = True, read_node: object = None, host: HostTopology = HOST,
           query_kubelet: bool = True) -> TopologySource:
    return TopologySource(inputs, read_node or inputs.node, lambda: host,  # type: ignore[arg-type]
                          interval_seconds=30.0, enabled=enabled, query_kubelet=query_kubelet)


def test_worked_example(inputs: Inputs) -> None:
    topo = source(inputs)
    assert topo.current() is None  # the host not read yet
    assert topo.refresh()
    assert topo.current() == EXPECTED


def test_gate_off_reports_nothing_but_still_rereads(inputs: Inputs) -> None:
    topo = source(inputs, enabled=False)
    assert topo.refresh()
    assert topo.current() is None


def test_unknown_until_pods_and_kubelet_configuration_are_known(inputs: Inputs) -> None:
    topo = source(inputs)
    topo.refresh()
    inputs.ready = False
    assert topo.current() is None
    inputs.ready = True
    assert topo.current() == EXPECTED


def test_plain_host_reports_no_kubelet_policy(inputs: Inputs) -> None:
    inputs.reserved = Reservation()
    topo = source(inputs, query_kubelet=False)
    topo.refresh()
    report = topo.current()
    assert report is not None
    assert (report["kubeletCPUManagerPolicy"], report["podCPUAllocs"], report["topologyPolicy"]) == ({}, [], "None")
    # kubelet's none policy: the policy is said, nothing reserved or allocated by kubelet.
    inputs.reserved = Reservation(cpu_milli=2000)
    report = build_report(inputs.node(), HOST, inputs.reserved, inputs.cpu_manager(), ((), ()), PODS, True)
    assert (report["kubeletCPUManagerPolicy"], report["podCPUAllocs"]) == ({"policy": "none"}, [])


def test_reserved_system_cpus_win_over_the_quantity(inputs: Inputs) -> None:
    inputs.reserved = replace(STATIC, cpus=(3, 7), cpu_milli=2000)
    topo = source(inputs)
    topo.refresh()
    report = topo.current()
    assert report is not None and report["kubeletCPUManagerPolicy"]["reservedCPUs"] == "3,7"


def test_cpu_topology_reread_publishes_a_changed_node(inputs: Inputs, caplog: pytest.LogCaptureFixture) -> None:
    """CPUs 4-7 go offline: the next re-read publishes the node, and the report (and pools) follow."""
    smaller = make_node(4, threads_per_core=1, numa_nodes=2)
    readings: list[NodeInfo | Exception] = [make_node(8, numa_nodes=2), smaller, CgroupGone("/sys/x: gone"), smaller]

    def read() -> NodeInfo:
        got = readings.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    topo = source(inputs, read_node=read, host=replace(HOST, basic=CPUBasicInfo()))
    assert topo.refresh() and inputs.set_nodes == 0  # same node: nothing published
    with caplog.at_level(logging.INFO):
        assert topo.refresh()
    assert inputs.set_nodes == 1 and inputs.node() is smaller
    assert any(r.getMessage() == "node CPU topology changed" for r in caplog.records)
    report = topo.current()
    assert report is not None and [d["id"] for d in report["cpuTopology"]["detail"]] == [0, 1, 2, 3]
    assert report["cpuBasicInfo"] == {}
    assert report["zones"] == [zone(0, "2", "8Gi"), zone(1, "2", "8Gi")]
    # A failed re-read keeps the last good node and is logged once.
    with caplog.at_level(logging.WARNING):
        assert not topo.refresh()
    assert inputs.node() is smaller and topo.current() == report
    assert topo.refresh() and topo.reads == 4


def test_node_reservation_annotation(inputs: Inputs, caplog: pytest.LogCaptureFixture) -> None:
    """The Node's ``node.koordinator.sh/reservation`` (sent down by the companion): 2 CPUs by quantity become
    kubelet's choice {0, 4} (upstream ``getNodeReserved``) and leave both pool lists; explicit CPUs win."""
    topo = source(inputs)
    topo.refresh()
    inputs.kube = KubeNodeInfo("node-1", annotations={
        "node.koordinator.sh/reservation": '{"resources":{"cpu":"1500m"},"applyPolicy":"ReservedCPUsOnly"}'})
    report = topo.current()
    assert report is not None
    assert report["nodeReservation"] == {"resources": {"cpu": "1500m"}, "reservedCPUs": "0,4",
                                         "applyPolicy": "ReservedCPUsOnly"}
    assert report["cpuSharedPools"] == [{"socket": 0, "node": 0, "cpuset": "1"},
                                        {"socket": 1, "node": 1, "cpuset": "7"}]
    assert report["beCPUSharedPools"] == [{"socket": 0, "node": 0, "cpuset": "1"},
                                          {"socket": 1, "node": 1, "cpuset": "6-7"}]
    inputs.kube = KubeNodeInfo("node-1", annotations={
        "node.koordinator.sh/reservation": '{"resources":{"cpu":"4"},"reservedCPUs":"1,5"}'})
    report = topo.current()
    assert report is not None and report["nodeReservation"]["reservedCPUs"] == "1,5"
    assert report["cpuSharedPools"][0]["cpuset"] == "0,4"
    inputs.kube = KubeNodeInfo("node-1", annotations={"node.koordinator.sh/reservation": '{"reservedCPUs": 3}'})
    with caplog.at_level(logging.WARNING):
        assert topo.current() == EXPECTED  # refused: none reported, as upstream on a bad annotation
        assert topo.current() == EXPECTED
    refused = [r for r in caplog.records if r.getMessage() == "node annotation refused, reported empty"]
    assert len(refused) == 1 and "reservedCPUs" in refused[0].__dict__["error"]


@pytest.mark.parametrize(("value", "reported", "ls_numa0"), [
    ('{"cpuset":"1,0"}', {"cpuset": "0-1"}, "4"),  # exclusive by default: out of the pools
    ('{"cpuset":"0-1","cpusetExclusive":false}', {"cpuset": "0-1", "cpusetExclusive": False}, "0-1,4"),
    ('{"cpuset":"0-"}', {}, "0-1,4"),  # refused: reported empty
])
def test_system_qos_resource_annotation(inputs: Inputs, value: str, reported: dict[str, object],
                                        ls_numa0: str) -> None:
    topo = source(inputs)
    topo.refresh()
    inputs.kube = KubeNodeInfo("node-1", annotations={"node.koordinator.sh/system-qos-resource": value})
    report = topo.current()
    assert report is not None and report["systemQOSResource"] == reported
    assert report["cpuSharedPools"][0]["cpuset"] == ls_numa0


def test_numa_nodes_disagreeing_is_not_reported(inputs: Inputs) -> None:
    topo = source(inputs, host=replace(HOST, numa_memory={0: GI}))
    topo.refresh()
    assert topo.current() is None


def test_logical_cores_are_numbered_across_sockets() -> None:
    """sysfs core_id restarts on each socket: CPUs 0 and 2 both have core_id 0 but are not siblings."""
    cpus = [CpuTopology(0, 0, 0, 0), CpuTopology(1, 1, 0, 0), CpuTopology(2, 0, 1, 1), CpuTopology(3, 1, 1, 1),
            CpuTopology(4, 0, 0, 0), CpuTopology(5, 1, 0, 0), CpuTopology(6, 0, 1, 1), CpuTopology(7, 1, 1, 1)]
    assert logical_cores(cpus) == {0: 0, 1: 1, 2: 2, 3: 3, 4: 0, 5: 1, 6: 2, 7: 3}


@pytest.mark.parametrize(("count", "expected"), [
    (0, ()),
    (1, (0,)),
    (2, (0, 4)),  # one whole core (kubelet's doc example)
    (3, (0, 1, 4)),
    (4, (0, 1, 4, 5)),  # the whole socket 0
    (5, (0, 1, 2, 4, 5)),
    (9, tuple(range(8))),
])
def test_take_by_topology(count: int, expected: tuple[int, ...]) -> None:
    assert take_by_topology(make_node(8, numa_nodes=2), count) == expected


@pytest.mark.parametrize(("policy", "scope", "expected"), [
    ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
    ("restricted", "pod", "RestrictedPodLevel"),
    ("best-effort", "container", "BestEffortContainerLevel"),
    ("none", "pod", "None"),
    ("", "", "None"),
    ("single-numa-node", "", "None"),  # upstream: an unknown scope is None
])
def test_topology_policy(policy: str, scope: str, expected: str) -> None:
    assert topology_policy(policy, scope) == expected


def test_configz_fields_of_the_report() -> None:
    got = reservation_from_configz({"kubeletconfig": {
        "cpuManagerPolicy": "static", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "topologyManagerPolicy": "restricted", "topologyManagerScope": "container"}})
    assert (got.cpu_manager_policy_options, got.topology_manager_policy, got.topology_manager_scope) == (
        (("full-pcpus-only", "true"),), "restricted", "container")
    with pytest.raises(KoordletError, match="cpuManagerPolicyOptions"):
        reservation_from_configz({"kubeletconfig": {"cpuManagerPolicyOptions": {"a": 1}}})


def test_numa_memory_from_sysfs(fake_host: FakeHost) -> None:
    fake_host.set_cpu_topology([(0, 0, 0, 0), (1, 1, 0, 1)])
    fake_host.write_sys("devices/system/node/node0/meminfo", "Node 0 MemTotal:       8388608 kB\n"
                                                              "Node 0 MemFree:        1 kB\n")
    fake_host.write_sys("devices/system/node/node1/meminfo", "Node 1 MemTotal:       4194304 kB\n")
    assert read_numa_memory(fake_host.paths) == {0: 8 * GI, 1: 4 * GI}
    fake_host.write_sys("devices/system/node/node1/meminfo", "Node 1 MemFree: 3 kB\n")
    with pytest.raises(KoordletError, match="node1/meminfo: no 'Node 1 MemTotal' line"):
        read_numa_memory(fake_host.paths)


def test_node_annotations_keep_cpus_out_of_the_hooks_pools(fake_host: FakeHost, tmp_path: Path) -> None:
    """The pools the cpuset hook places LS containers on leave out what the Node reserves (upstream's hooks read
    the same pools the NodeResourceTopology carries); a bad annotation reserves nothing."""
    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir()
    (kubelet_dir / "cpu_manager_state").write_text(json.dumps(STATE))
    config_file = tmp_path / "koordlet.yaml"
    config_file.write_text(f"host: {{varLibKubeletRootDir: {kubelet_dir}}}\n")
    informer = StatesInformer(load(config_file), fake_host.layout(), CgroupDriver.CGROUPFS,
                              make_node(8, numa_nodes=2))
    informer.set_pods(list(PODS))
    informer.set_reservation(replace(STATIC, cpu_milli=0))
    assert informer.shared_pools() == ('[{"socket":0,"node":0,"cpuset":"0-1,4"},'
                                       '{"socket":1,"node":1,"cpuset":"7"}]')
    informer.set_kube_node(KubeNodeInfo("node-1", annotations={
        "node.koordinator.sh/reservation": '{"reservedCPUs":"1"}',
        "node.koordinator.sh/system-qos-resource": '{"cpuset":"7"}'}))
    assert informer.node_reserved_cpus() == frozenset({1, 7})
    assert informer.shared_pools() == '[{"socket":0,"node":0,"cpuset":"0,4"}]'
    informer.set_kube_node(KubeNodeInfo("node-1", annotations={"node.koordinator.sh/reservation": "{oops"}))
    assert informer.node_reserved_cpus() == frozenset()
