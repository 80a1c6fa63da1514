"""cpusuppress under kubelet's static CPU manager on the real hierarchy of each cgroup version (v1 on the
host, pure v2 in the guest), with the real states informer reading a ``cpu_manager_state`` file.

``<prefix>/kubepods/pod<g>/g-main`` is a Guaranteed container kubelet pinned to the node's last CPU;
``<prefix>/kubepods/besteffort/pod<be>/{be1,be2,sandbox}`` are BE containers.  A process sleeps in
``g-main``, ``be1`` and ``be2`` so the kernel's own view of each task (``Cpus_allowed_list``) is checked
as well as the files.  The threshold (1%) leaves BE its minimum of one CPU.

1. Pinned: the pinned CPU is never BE's; ``g-main`` keeps its cpuset; BE's containers get the suppressed
   cpuset.
2. The Guaranteed pod ends (kubelet drops its entry): BE's containers get one CPU while besteffort and the
   BE pod keep every CPU, so kubelet's reconcile writing its shared pool back into a BE container (what it
   does under the static policy) succeeds even on v1, and the next round narrows the container again
   (Koordinator #546)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Container, Pod
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, Config, HostConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache, names
from koordlet.metriccache.cache import pod_labels
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import Decision, DecisionLog, Options
from koordlet.qosmanager.plugins.cpusuppress import CPUSuppress
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import read_node_info
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures.realcgroup import RealCgroups

SLEEP = "import signal; signal.pause()"
G_UID = "0c1d2e3f-0000-4000-8000-00000000000g"
BE_UID = "0c1d2e3f-0000-4000-8000-0000000000be"
G_POD = f"kubepods/pod{G_UID}"
BE_POD = f"kubepods/besteffort/pod{BE_UID}"
BE_DIR = "kubepods/besteffort"
BE_CONTAINERS = (f"{BE_POD}/be1", f"{BE_POD}/be2", f"{BE_POD}/sandbox")
SLO = merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {
    "enable": True, "cpuSuppressPolicy": "cpuset", "cpuSuppressThresholdPercent": 1}}))


def pod_meta(prefix: str, rel_dir: str, uid: str, qos: KubeQoS, containers: tuple[str, ...]) -> PodMeta:
    pod = Pod(uid=uid, name=uid[-2:], namespace="default", labels={}, annotations={}, kube_qos=qos,
              phase="Running", priority=None, containers=tuple(Container(c, f"containerd://{c}") for c in containers))
    return PodMeta(pod=pod, cgroup_dir=f"{prefix}/{rel_dir}",
                   containers=tuple(ContainerMeta(c, c, f"{prefix}/{rel_dir}/{c}") for c in containers))


def cpus_allowed(pid: int) -> str:
    """The kernel's view of the task: ``Cpus_allowed_list`` in /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return format_cpulist(parse_cpulist(line.split(":", 1)[1]))
    raise AssertionError(f"/proc/{pid}/status has no Cpus_allowed_list")


@dataclass
class Rig:
    groups: RealCgroups
    informer: StatesInformer
    cache: MetricCache
    strategy: CPUSuppress
    state_file: Path

    def cpuset(self, rel: str) -> str:
        """What the kernel holds; an empty v2 cpuset.cpus is the parent's, read as its effective set."""
        text = self.groups.cpuset_cpus(rel)
        if not text and self.groups.version == 2:
            text = (self.groups.path("cpuset", rel) / "cpuset.cpus.effective").read_text().strip()
        return format_cpulist(parse_cpulist(text))

    def write_state(self, entries: dict[str, dict[str, str]], default: str) -> None:
        """As kubelet does: a whole new checkpoint renamed over the old one."""
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"policyName": "static", "defaultCpuSet": default, "entries": entries,
                                   "checksum": 0}))
        os.replace(tmp, self.state_file)

    def round(self) -> Decision:
        now = time.time()
        self.cache.append(names.NODE_CPU_USAGE, (), now, 0.1)
        self.cache.append(names.POD_CPU_USAGE, pod_labels(BE_UID), now, 0.05)
        decision = self.strategy.run_once(SLO)
        assert decision.action == "suppress", decision.summary
        return decision


def make_rig(groups: RealCgroups, tmp_path: Path) -> Rig:
    native.configure_fd_budget()
    prefix = groups.name
    paths = HostPaths()
    node = read_node_info(paths, native)
    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir()
    config = Config(host=HostConfig(var_lib_kubelet_root_dir=str(kubelet_dir), cgroup_kube_parent=prefix))
    layout = detect_layout(paths)
    informer = StatesInformer(config, layout, CgroupDriver.CGROUPFS, node)
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache,
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(be_min_cpuset_cpus=1), collector=CollectorConfig(),
                      gates=gates.resolve({}), clock=time.time, decisions=DecisionLog(), kube_parent=prefix)
    return Rig(groups, informer, cache, CPUSuppress(options), kubelet_dir / "cpu_manager_state")


def test_static_policy_keeps_pinned_cpus_and_limits_be_per_container(real_cgroups: RealCgroups,
                                                                        tmp_path: Path) -> None:
    rig = make_rig(real_cgroups, tmp_path)
    prefix = real_cgroups.name
    online = read_node_info(HostPaths(), native).online_cpus
    assert len(online) >= 2, f"the test needs two CPUs, the host has {online}"
    pinned = online[-1]
    shared = format_cpulist(c for c in online if c != pinned)
    everything = format_cpulist(online)
    for rel in (f"{G_POD}/g-main", *BE_CONTAINERS):
        real_cgroups.mkdir(rel)  # v1: cpus and mems copied from the parent
    real_cgroups.write("cpuset", f"{G_POD}/g-main", "cpuset.cpus", str(pinned))  # kubelet's exclusive CPU
    g_pid = real_cgroups.spawn(f"{G_POD}/g-main", SLEEP)
    be_pids = [real_cgroups.spawn(rel, SLEEP) for rel in BE_CONTAINERS[:2]]
    guaranteed = pod_meta(prefix, G_POD, G_UID, KubeQoS.GUARANTEED, ("g-main",))
    besteffort = pod_meta(prefix, BE_POD, BE_UID, KubeQoS.BESTEFFORT, ("be1", "be2"))
    rig.write_state({G_UID: {"g-main": str(pinned)}}, shared)
    rig.informer.set_pods([guaranteed, besteffort])
    rig.informer.set_reservation(Reservation(cpu_manager_policy="static"))

    # 1. Pinned: BE is limited to its minimum of one CPU, never the pinned one.
    decision = rig.round()
    be_cpuset = decision.numbers["be_cpuset"]
    assert str(pinned) not in be_cpuset.split(",") and len(parse_cpulist(be_cpuset)) == 1, decision.summary
    assert decision.numbers["kubelet_pinned_cpus"] == str(pinned)
    assert rig.cpuset(f"{G_POD}/g-main") == str(pinned)
    assert cpus_allowed(g_pid) == str(pinned)
    assert {rel: rig.cpuset(rel) for rel in BE_CONTAINERS} == dict.fromkeys(BE_CONTAINERS, be_cpuset)
    assert {rig.cpuset(BE_DIR), rig.cpuset(BE_POD)} == {shared}
    assert [cpus_allowed(pid) for pid in be_pids] == [be_cpuset, be_cpuset]

    # 2. The Guaranteed pod ends: its CPU goes back to the shared pool, BE's parents widen to every CPU
    # while the containers stay limited.
    real_cgroups.kill(g_pid)
    rig.write_state({}, everything)
    rig.informer.set_pods([besteffort])
    decision = rig.round()
    be_cpuset = decision.numbers["be_cpuset"]
    assert len(parse_cpulist(be_cpuset)) == 1 and decision.numbers["kubelet_pinned_cpus"] == "", decision.summary
    assert {rig.cpuset(BE_DIR), rig.cpuset(BE_POD)} == {everything}
    assert {rel: rig.cpuset(rel) for rel in BE_CONTAINERS} == dict.fromkeys(BE_CONTAINERS, be_cpuset)
    assert [cpus_allowed(pid) for pid in be_pids] == [be_cpuset, be_cpuset]
    # kubelet's reconcile writes its shared pool into a BE container: the pod cgroup admits it.
    real_cgroups.write("cpuset", BE_CONTAINERS[0], "cpuset.cpus", everything)
    assert cpus_allowed(be_pids[0]) == everything
    # The executor reads its values back every resourceForceUpdateSeconds and repairs drift: forgetting stands
    # for that.
    rig.strategy.options.executor.forget()
    rig.round()
    assert rig.cpuset(BE_CONTAINERS[0]) == be_cpuset and cpus_allowed(be_pids[0]) == be_cpuset
