"""cpusuppress on the real hierarchy of each cgroup version (v1 on the host, pure v2 in the guest): one LS
and two BE busy loops under ``<prefix>/kubepods/{burstable,besteffort}``, the real collectors feeding the
metric cache, the real executor writing the besteffort cgroups.

Each round is what the agent does every second: collect, decide, then the next interval runs under the
decision; BE's usage over that interval is measured from the kernel's count for the besteffort cgroup (v1
``cpuacct.usage``, v2 ``cpu.stat`` usage_usec).  On v2 the busy loops sit in leaf cgroups only (no
internal processes) and a fresh cgroup's empty ``cpuset.cpus`` means "the parent's": the strategy always
writes BE's explicitly, which is what the rounds read back.

Threshold 75% on this 2-CPU host leaves 1.5 cores to share: with LS idle BE keeps both CPUs (1.5 minus a
few tenths of system usage rounds up to 2), with one LS loop at ~1 core BE is left at most 0.5 core."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Container, Pod
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.metricsadvisor import framework as advisor_framework
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import Decision, DecisionLog, Options
from koordlet.qosmanager.plugins.cpusuppress import CPUSuppress
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import NodeInfo, read_node_info
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures.realcgroup import RealCgroups

BUSY = "while True: pass"
INTERVAL = 1.0
THRESHOLD_PERCENT = 75
TOLERANCE_CORES = 0.05
CFS_PERIOD_SECONDS = 0.1
BE_DIR = "kubepods/besteffort"


@dataclass
class Informer:
    pod_list: tuple[PodMeta, ...]
    node_info: NodeInfo

    def pods(self) -> Sequence[PodMeta]:
        return self.pod_list

    def node(self) -> NodeInfo:
        return self.node_info

    def reservation(self) -> Reservation:
        return Reservation()

    def subscribe(self, callback: object) -> None:
        return None


def pod_meta(prefix: str, qos: KubeQoS, uid: str, container_ids: Sequence[str]) -> PodMeta:
    qdir = "kubepods/burstable" if qos is KubeQoS.BURSTABLE else BE_DIR
    pod_dir = f"{prefix}/{qdir}/pod{uid}"
    containers = tuple(ContainerMeta(name=c, container_id=c, cgroup_dir=f"{pod_dir}/{c}") for c in container_ids)
    pod = Pod(uid=uid, name=uid, namespace="default", labels={}, annotations={}, kube_qos=qos, phase="Running",
              priority=None, containers=tuple(Container(c, c) for c in container_ids))
    return PodMeta(pod=pod, cgroup_dir=pod_dir, containers=containers)


@dataclass
class Round:
    phase: str
    decision: Decision
    target_cores: float
    """What the decision enforces: BE's CPU count, or its quota / period."""
    be_used: float
    """BE's usage over the interval after the decision from its second CFS period on, as the kernel counts it."""
    be_used_whole: float
    """The same over the whole interval, for the record."""


@dataclass
class Rig:
    groups: RealCgroups
    advisor: MetricsAdvisor
    strategy: CPUSuppress
    ls_rel: str
    rounds: list[Round] = field(default_factory=list)

    def be_usage_ns(self) -> int:
        return self.groups.cpu_usage_ns(BE_DIR)

    def cpuset(self) -> str:
        return self.groups.cpuset_cpus(BE_DIR)

    def quota(self) -> int:
        quota, period = self.groups.cpu_quota(BE_DIR)
        assert period == 100_000, period  # the strategy's quotas are per Koordinator's 100 ms period
        return quota

    def round(self, phase: str, slo: NodeSLOSpec) -> Round:
        """Collect the interval that just ended, decide, and measure BE over the next interval.

        The measurement starts one CFS period after the decision: every quota write (v1 ``cfs_quota_us``,
        v2 ``cpu.max``) refills the group's runtime (kernel ``tg_set_cfs_bandwidth``), so in the period of
        the write BE may run a full extra quota whatever the new value; from the next period on the quota
        is what binds."""
        self.advisor.run_once(force=True)
        decision = self.strategy.run_once(slo)
        decided = time.monotonic()
        assert decision.action in ("suppress", "none"), decision.summary
        if decision.numbers["policy"] == "cpuset":
            target = float(len(parse_cpulist(self.cpuset())))
            assert target == decision.numbers["be_cpus"], (self.cpuset(), decision.summary)
        else:
            assert self.quota() == decision.numbers["quota_us"], decision.summary
            target = self.quota() / 100_000
        whole = self.be_usage_ns()
        time.sleep(CFS_PERIOD_SECONDS)
        before, start = self.be_usage_ns(), time.monotonic()
        time.sleep(max(0.0, decided + INTERVAL - start))
        after, end = self.be_usage_ns(), time.monotonic()
        used = (after - before) / 1e9 / (end - start)
        result = Round(phase, decision, target, used, (after - whole) / 1e9 / (end - decided))
        self.rounds.append(result)
        print(f"{phase:>8}: target {target:.3f} cores, BE measured {used:.3f} (whole interval "
              f"{result.be_used_whole:.3f}) | {decision.summary}")
        return result


def make_rig(groups: RealCgroups, tmp_path: Path, config: QoSManagerConfig) -> Rig:
    native.configure_fd_budget()
    prefix = groups.name
    ls = pod_meta(prefix, KubeQoS.BURSTABLE, "ls", ["ls1"])
    be = pod_meta(prefix, KubeQoS.BESTEFFORT, "be", ["be1", "be2"])
    for container in (*ls.containers, *be.containers):
        groups.mkdir(container.cgroup_dir.removeprefix(prefix + "/"))  # cpuset cpus/mems copied from the parent
    for container in be.containers:
        groups.spawn(container.cgroup_dir.removeprefix(prefix + "/"), BUSY)
    paths = HostPaths()
    layout = detect_layout(paths)
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    informer = Informer((ls, be), read_node_info(paths))
    advisor = MetricsAdvisor(
        advisor_framework.Options(paths=paths, layout=layout, driver=CgroupDriver.CGROUPFS, cache=cache,
                                  informer=informer, config=CollectorConfig(), gates=gates.resolve({}),
                                  clock=time.time),
        build_collectors())
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache,
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout), config=config,
                      collector=CollectorConfig(), gates=gates.resolve({}), clock=time.time, decisions=DecisionLog(),
                      kube_parent=prefix)
    rig = Rig(groups, advisor, CPUSuppress(options), ls.containers[0].cgroup_dir.removeprefix(prefix + "/"))
    rig.advisor.run_once(force=True)  # the first sample of each counter only sets a baseline
    time.sleep(INTERVAL)
    return rig


def slo(policy: str) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": policy, "cpuSuppressThresholdPercent": THRESHOLD_PERCENT}}))


def run_scenario(rig: Rig, policy: str, recover_rounds: int) -> tuple[list[Round], list[Round], list[Round]]:
    spec = slo(policy)
    idle = [rig.round("idle", spec) for _ in range(2)]
    ls_pid = rig.groups.spawn(rig.ls_rel, BUSY)
    rig.advisor.run_once(force=True)
    time.sleep(INTERVAL)  # the interval in which LS load stepped up: the next round sees it
    busy = [rig.round("ls-busy", spec) for _ in range(3)]
    rig.groups.kill(ls_pid)
    rig.advisor.run_once(force=True)
    time.sleep(INTERVAL)  # the interval in which LS stopped
    recovered = [rig.round("ls-idle", spec) for _ in range(recover_rounds)]
    return idle, busy, recovered


def _assert_within_target(rounds: Sequence[Round]) -> None:
    for r in rounds:
        assert r.be_used <= r.target_cores + TOLERANCE_CORES, (r.phase, r.target_cores, r.be_used, r.decision.summary)


def test_cpuset_policy_suppresses_and_regrows(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    # Koordinator's minimum of 2 CPUs would leave nothing to suppress on this 2-CPU host: BE could never
    # lose a CPU.  A minimum of 1 lets the policy act here; the arithmetic is otherwise Koordinator's.
    rig = make_rig(real_cgroups, tmp_path, QoSManagerConfig(be_min_cpuset_cpus=1))
    idle, busy, recovered = run_scenario(rig, "cpuset", recover_rounds=2)
    assert all(r.target_cores == 2 for r in idle), [r.decision.summary for r in idle]
    assert idle[-1].be_used > 1.5  # both BE loops ran on both CPUs
    # Within one interval of the LS step BE is down to one CPU and stays there.
    assert all(r.target_cores == 1 for r in busy), [r.decision.summary for r in busy]
    _assert_within_target(idle + busy + recovered)
    # LS stopped: BE grows back by at most ceil(10% x 2) = 1 CPU per round, and does get it back.
    previous = busy[-1].target_cores
    for r in recovered:
        assert r.target_cores - previous <= r.decision.numbers["growth_limit"] == 1
        previous = r.target_cores
    assert recovered[0].target_cores == 2 and recovered[-1].be_used > 1.5
    assert rig.quota() == -1  # the other policy stays recovered


def test_cfs_quota_policy_suppresses_and_regrows(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    rig = make_rig(real_cgroups, tmp_path, QoSManagerConfig())
    idle, busy, recovered = run_scenario(rig, "cfsQuota", recover_rounds=4)
    _assert_within_target(idle + busy + recovered)
    # The LS step cuts BE's quota in the first round after it: 1.5 - LS - system.  LS's one busy thread gets
    # between 0.75 and 1 core while BE still holds 1.5 cores of quota on the 2 CPUs (CI once measured 0.9, so
    # the target was 0.602): the cut is what matters, at least 0.5 core below the idle quota.
    assert busy[0].target_cores <= 0.75 and busy[0].target_cores < idle[-1].target_cores - 0.5
    # LS stopped: the quota climbs by at most 10% x 2 CPUs x 100000 = 20000 us per round.
    previous = busy[-1].decision.numbers["quota_us"]
    for r in recovered:
        quota = r.decision.numbers["quota_us"]
        assert 0 <= quota - previous <= 20_000, (previous, quota, r.decision.summary)
        previous = quota
    assert recovered[-1].decision.numbers["quota_us"] > busy[-1].decision.numbers["quota_us"]
    assert recovered[-1].be_used > busy[-1].be_used
    # The cpuset policy is not in use: BE keeps every CPU of the node.
    assert rig.cpuset() == format_cpulist(read_node_info(HostPaths()).online_cpus)

