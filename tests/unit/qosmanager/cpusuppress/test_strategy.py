"""The cpusuppress strategy over fake v1 and v2 trees: what lands in the besteffort cgroups, the
decision's numbers, policy switches, recovery and bad input.

Worked example used throughout (8 CPUs, 2 NUMA nodes with HT, threshold 65%): node 5.0 cores, LS pod
2.5, BE pod 2.0, so system = 5.0 - 2.5 - 2.0 = 0.5 and suppress = 8000 * 65 // 100 - 2500 - 500 = 2200
milli-cores: ceil -> 3 CPUs = HT pair (0,4) on NUMA 0 + CPU 2 on NUMA 1; quota 220000 us."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager.framework import Options
from koordlet.qosmanager.plugins import cpusuppress
from koordlet.qosmanager.plugins.cpusuppress.strategy import CPUSuppress, non_be
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import CPU_CFS_QUOTA, CPUSET_CPUS
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_options, make_pod, put_usage

BE_DIR = "kubepods/besteffort"
POD_DIR = "kubepods/besteffort/poduid-be"
BE_DIRS = (BE_DIR, POD_DIR, f"{POD_DIR}/be-a", f"{POD_DIR}/be-b", f"{POD_DIR}/sandbox")
"""``sandbox`` is in no pod's container list: found by walking the tree, as a pause container's is."""


@dataclass
class Recorder:
    suppress: list[tuple[str, float]] = field(default_factory=list)
    ls_used: list[float] = field(default_factory=list)

    def be_suppress_cores(self, policy: str, cores: float) -> None:
        self.suppress.append((policy, cores))

    def be_suppress_ls_used_cores(self, cores: float) -> None:
        self.ls_used.append(cores)

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


@dataclass
class World:
    host: FakeHost
    options: Options
    informer: FakeInformer
    metrics: Recorder
    strategy: CPUSuppress
    clock: FakeClock

    def cpuset(self, rel: str = BE_DIR) -> str:
        return format_cpulist(self.options.reader.read("cpuset_cpus", rel))

    def cpusets(self) -> set[str]:
        return {self.cpuset(d) for d in BE_DIRS}

    def quota(self) -> int:
        return int(self.options.reader.read("cpu_cfs_quota", BE_DIR))

    def kernel_normalise(self) -> None:
        """v2 keeps the period when only the quota is written ("max" reads back as "max 100000"); the
        fake tree stores what was written, so do what the kernel does."""
        if self.host.mode != "v2" or not self.host.cgroup_path(BE_DIR, CPU_CFS_QUOTA).exists():
            return
        text = self.host.read_cgroup(BE_DIR, CPU_CFS_QUOTA).split()
        if len(text) == 1:
            self.host.write_cgroup(BE_DIR, CPU_CFS_QUOTA, f"{text[0]} 100000\n")

    def usage(self, *, node: float, ls: float, be: float) -> None:
        put_usage(self.options, node_cpu=node, pod_cpu={"uid-ls": ls, "uid-be": be})

    def run(self, policy: str = "cpuset", enabled: bool = True, **threshold: Any) -> Any:
        decision = self.strategy.run_once(slo(policy, **threshold), enabled=enabled)
        self.kernel_normalise()
        return decision


def slo(policy: str = "cpuset", enable: bool = True, **threshold: Any) -> NodeSLOSpec:
    body = {"enable": enable, "cpuSuppressPolicy": policy, **threshold}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": body}))


def make_world(host: FakeHost, tmp_path: Path, *, cpus: int = 8, extra_pods: tuple[PodMeta, ...] = (),
               config: QoSManagerConfig | None = None, reservation: Reservation | None = None,
               be_cpuset: str | None = None, quota: str | None = None, gates: dict[str, bool] | None = None
               ) -> World:
    pods = [make_pod("ls", "LS"), make_pod("be", "BE", containers=("a", "b")), *extra_pods]
    informer = FakeInformer(pod_list=pods, node_info=make_node(cpus, numa_nodes=2),
                            reserved=reservation or Reservation())
    metrics = Recorder()
    clock = FakeClock(1_700_000_000.0)
    options = make_options(host, tmp_path, informer, clock=clock, metrics=metrics, config=config, gates=gates)
    host.mkdir_cgroup("kubepods/burstable/poduid-ls/ls-main")
    for rel in BE_DIRS:
        host.mkdir_cgroup(rel)
    host.write_cgroup("kubepods", CPUSET_CPUS, f"0-{cpus - 1}\n")
    for rel in BE_DIRS:
        host.write_cgroup(rel, CPUSET_CPUS, (be_cpuset or f"0-{cpus - 1}") + "\n")
    if quota is not None:
        host.write_cgroup(BE_DIR, CPU_CFS_QUOTA, quota)
    return World(host, options, informer, metrics, CPUSuppress(options), clock)


def quota_text(host: FakeHost, quota: int) -> str:
    if host.mode == "v2":
        return f"{'max' if quota == -1 else quota} 100000"
    return str(quota)


# ---------------------------------------------------------------------------------------------- cpuset


@pytest.mark.parametrize(
    ("cpus", "usage", "threshold", "config", "current", "extra", "reservation", "suppress", "cpuset", "why"),
    [
        # the worked example: 2.2 -> 3 CPUs
        (8, (5.0, 2.5, 2.0), {}, None, None, (), None, 2.2, "0,2,4", "suppress"),
        # LS 6.0 above the threshold: 5200 - 6000 - 500 = -1300 -> at least 2 CPUs, an HT pair
        (8, (7.5, 6.0, 1.0), {}, None, None, (), None, -1.3, "0,4", "minimum"),
        # ... or 3 with --be-min-cpuset-cpus=3
        (8, (7.5, 6.0, 1.0), {}, QoSManagerConfig(be_min_cpuset_cpus=3), None, (), None, -1.3, "0,2,4",
         "minimum"),
        # cpuSuppressMinPercent 40 floors it at 3200 -> 4 CPUs, one pair per NUMA node
        (8, (7.5, 6.0, 1.0), {"cpuSuppressMinPercent": 40}, None, None, (), None, 3.2, "0,2,4,6", "suppress"),
        # threshold 50: 4000 - 2500 - 500 = 1000 -> 1 -> minimum 2
        (8, (5.0, 2.5, 2.0), {"cpuSuppressThresholdPercent": 50}, None, None, (), None, 1.0, "0,4", "minimum"),
        # LS idle: 5200 - 0 - 500 = 4700 wants 5, but from 2 CPUs BE grows by ceil(0.8) = 1 per round
        (8, (2.5, 0.0, 2.0), {}, None, "0,4", (), None, 4.7, "0,2,4", "growth"),
        # 16 CPUs: 10400 - 0 - 500 = 9900 wants 10, grows by ceil(1.6) = 2 from 2
        (16, (2.5, 0.0, 2.0), {}, None, "0,8", (), None, 9.9, "0,4,8,12", "growth"),
        # 16 CPUs: 10400 - 3250 - 250 = 6900 -> 7: pairs (0,8) (4,12) (1,9), then CPU 5
        (16, (5.5, 3.25, 2.0), {}, None, None, (), None, 6.9, "0-1,4-5,8-9,12", "suppress"),
        # an LSE pod holds the pair (0,4): NUMA 1 is the larger bucket now: (2,6), then CPU 1
        (8, (5.0, 2.5, 2.0), {}, None, None,
         (make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: '{"cpuset": "0,4"}'}),), None, 2.2,
         "1-2,6", "suppress"),
        # reserved CPUs 0,4 and 1 core reserved: 5200 - 2500 - max(0.5, 1.0) = 1700 -> 2: pair (2,6)
        (8, (5.0, 2.5, 2.0), {}, None, None, (), Reservation(cpu_milli=1000, cpus=(0, 4)), 1.7, "2,6",
         "suppress"),
    ],
)
def test_cpuset_policy(fake_cgroup_host: FakeHost, tmp_path: Path, cpus: int, usage: tuple[float, float, float],
                       threshold: dict[str, Any], config: QoSManagerConfig | None, current: str | None,
                       extra: tuple[PodMeta, ...], reservation: Reservation | None, suppress: float, cpuset: str,
                       why: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path, cpus=cpus, config=config, be_cpuset=current, extra_pods=extra,
                   reservation=reservation, quota="50000")
    node, ls, be = usage
    w.usage(node=node, ls=ls, be=be)
    decision = w.run(**threshold)
    assert decision.action == "suppress", decision.summary
    assert decision.numbers["suppress_cores"] == suppress
    assert decision.numbers["be_cpuset"] == cpuset
    assert decision.numbers["limited_by"] == why
    assert w.cpusets() == {cpuset}  # besteffort, the pod, its containers and the unlisted sandbox
    assert w.metrics.suppress == [("cpuset", float(len(parse_cpulist(cpuset))))]
    assert w.metrics.ls_used == [ls]
    assert w.quota() == -1  # the cfsQuota policy is not in use: its quota is recovered
    assert fake_cgroup_host.read_cgroup(BE_DIR, CPU_CFS_QUOTA).strip() == quota_text(fake_cgroup_host, -1)


def test_summary_names_the_numbers(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run()
    assert decision.summary == ("BE limited to 3 CPUs (cpuset 0,2,4): LS usage 2.50 of 65% x 8 = 5.20 cores, "
                                "system 0.50 -> suppress 2.20 cores")
    assert decision.strategy == "cpusuppress" and decision.at == w.clock.now
    numbers = decision.numbers
    assert (numbers["capacity_cpus"], numbers["threshold_percent"], numbers["node_used_cores"]) == (8, 65, 5.0)
    assert (numbers["ls_used_cores"], numbers["system_used_cores"], numbers["be_cpus"]) == (2.5, 0.5, 3)
    assert (numbers["previous_cpuset"], numbers["growth_limit"], numbers["min_cpus"]) == ("0-7", 1, 2)


@pytest.mark.parametrize(
    ("usage", "current", "config", "suffix"),
    [
        ((7.5, 6.0, 1.0), None, None, "suppress -1.30 cores; raised to the minimum of 2 CPUs"),
        ((7.5, 6.0, 1.0), None, QoSManagerConfig(be_min_cpuset_cpus=1), "-> suppress -1.30 cores; raised to the "
                                                                        "minimum of 1 CPU"),
        ((2.5, 0.0, 2.0), "0,4", None, "suppress 4.70 cores; growth limited to +1 CPU per round (wants 5)"),
    ],
)
def test_summary_says_what_limited_the_count(fake_cgroup_host: FakeHost, tmp_path: Path,
                                             usage: tuple[float, float, float], current: str | None,
                                             config: QoSManagerConfig | None, suffix: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset=current, config=config)
    node, ls, be = usage
    w.usage(node=node, ls=ls, be=be)
    assert w.run().summary.endswith(suffix)


def test_growth_reaches_the_target_one_step_per_round(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset="0,4")
    seen = []
    for _ in range(4):
        w.clock.advance(1)
        w.usage(node=2.5, ls=0.0, be=2.0)  # wants ceil(4.7) = 5
        seen.append(w.run().numbers["be_cpuset"])
    assert seen == ["0,2,4", "0,2,4,6", "0-2,4,6", "0-2,4,6"]


def test_shrinking_is_not_limited(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.usage(node=7.5, ls=6.0, be=1.0)
    assert w.run().numbers["be_cpuset"] == "0,4"  # 8 -> 2 in one round


def test_reserved_quantity_counts_when_above_system_usage(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, reservation=Reservation(cpu_milli=1500))
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run()
    assert decision.numbers["suppress_cores"] == 1.2  # 5200 - 2500 - 1500
    assert "system 0.50 (reserved 1.50 counts)" in decision.summary


# ---------------------------------------------------------------------------------------------- quota


@pytest.mark.parametrize(
    ("current", "usage", "action", "quota"),
    [
        ("-1", (5.0, 2.5, 2.0), "suppress", 220_000),      # unset: straight to the target
        ("100000", (5.0, 2.5, 2.0), "suppress", 180_000),  # +120000 stepped to +80000
        ("215000", (5.0, 2.5, 2.0), "none", 215_000),      # |5000| < 8000: kept
        ("3000", (7.5, 6.0, 1.0), "suppress", 2000),       # the minimum, though |1000| < 8000
        ("300000", (5.0, 2.5, 2.0), "suppress", 220_000),  # decreases are not limited
    ],
)
def test_cfs_quota_policy(fake_cgroup_host: FakeHost, tmp_path: Path, current: str,
                          usage: tuple[float, float, float], action: str, quota: int) -> None:
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset="0,4")
    current_quota = int(current)
    fake_cgroup_host.write_cgroup(BE_DIR, CPU_CFS_QUOTA, quota_text(fake_cgroup_host, current_quota))
    node, ls, be = usage
    w.usage(node=node, ls=ls, be=be)
    decision = w.run("cfsQuota")
    assert decision.action == action, decision.summary
    if action == "none":
        assert decision.summary.startswith(f"BE quota kept at {current} us: target 220000 us differs by less than "
                                           "1% of the node (8000 us); LS usage 2.50")
    assert w.quota() == quota
    assert fake_cgroup_host.read_cgroup(BE_DIR, CPU_CFS_QUOTA).strip() == quota_text(fake_cgroup_host, quota)
    assert decision.numbers["quota_us"] == quota
    assert w.metrics.suppress == ([] if action == "none" else [("cfsQuota", quota / 100_000)])
    assert w.cpusets() == {"0-7"}  # the cpuset policy is not in use: BE gets every CPU back


def test_cfs_quota_summary(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, quota=quota_text(fake_cgroup_host, 100_000))
    w.usage(node=5.0, ls=2.5, be=2.0)
    assert w.run("cfsQuota").summary == (
        "BE quota 180000 us per 100000 us (1.80 cores): LS usage 2.50 of 65% x 8 = 5.20 cores, system 0.50 -> "
        "suppress 2.20 cores; growth limited to +80000 us per round")


def test_cfs_quota_recovers_cpuset_without_lse_cpus(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    lse = make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: '{"cpuset": "3,7"}'})
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset="0,4", extra_pods=(lse,),
                   reservation=Reservation(cpus=(0,)))
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run("cfsQuota")
    assert w.cpusets() == {"1-2,4-6"}


# ---------------------------------------------------------------------------------------------- switching


def test_switching_policies_recovers_the_other(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run("cpuset")
    assert (w.cpusets(), w.quota()) == ({"0,2,4"}, -1)
    w.clock.advance(1)
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run("cfsQuota")
    assert (w.cpusets(), w.quota()) == ({"0-7"}, 220_000)
    w.clock.advance(1)
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run("cpuset")
    assert (w.cpusets(), w.quota()) == ({"0,2,4"}, -1)


def test_quota_is_recovered_once_under_the_cpuset_policy(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, quota=quota_text(fake_cgroup_host, 50_000))
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run()
    assert w.quota() == -1
    fake_cgroup_host.write_cgroup(BE_DIR, CPU_CFS_QUOTA, quota_text(fake_cgroup_host, 70_000))  # someone else's
    w.clock.advance(1)
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run()
    assert w.quota() == 70_000  # Koordinator's recoverCFSQuotaIfNeed: only until recovered


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_disable_recovers_both(fake_cgroup_host: FakeHost, tmp_path: Path, policy: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.run(policy)
    assert (w.cpusets(), w.quota()) != ({"0-7"}, -1)
    decision = w.run(policy, enabled=False)
    assert decision.action == "recover"
    assert decision.summary == "BE recovered: cpuset 0-7, cfs quota unlimited"
    assert (w.cpusets(), w.quota()) == ({"0-7"}, -1)


def test_disable_without_samples_still_recovers(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset="0,4", quota=quota_text(fake_cgroup_host, 40_000))
    assert w.run(enabled=False).action == "recover"
    assert (w.cpusets(), w.quota()) == ({"0-7"}, -1)


# ---------------------------------------------------------------------------------------------- enabling


@pytest.mark.parametrize(
    ("gates", "enable", "enabled"),
    [({}, True, True), ({"BECPUSuppress": False}, True, False), ({}, False, False),
     ({"BECPUSuppress": True}, True, True)],
)
def test_enabled_needs_gate_and_nodeslo(fake_host: FakeHost, tmp_path: Path, gates: dict[str, bool], enable: bool,
                                        enabled: bool) -> None:
    w = make_world(fake_host, tmp_path, gates=gates)
    assert w.strategy.enabled(slo(enable=enable)) is enabled
    assert cpusuppress.NAME == "cpusuppress" and isinstance(cpusuppress.new(w.options), CPUSuppress)
    assert w.strategy.interval() == 1.0


def test_nodeslo_default_is_disabled(fake_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_host, tmp_path)
    assert not w.strategy.enabled(merge_over_defaults(NodeSLOSpec.from_json({})))


def test_non_be_filter_follows_kube_qos_too() -> None:
    ls = make_pod("ls", "LS")
    assert non_be(ls)
    assert not non_be(make_pod("be", "BE"))
    # labelled LS but in kubelet's BestEffort class: Koordinator's NonBEPodFilter counts it as BE
    odd = dataclasses.replace(ls, pod=dataclasses.replace(ls.pod, kube_qos=KubeQoS.BESTEFFORT))
    assert not non_be(odd)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_no_fresh_node_sample_skips(fake_cgroup_host: FakeHost, tmp_path: Path, policy: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path, be_cpuset="0,4")
    put_usage(w.options, pod_cpu={"uid-ls": 2.5})
    assert w.run(policy).action == "skip"
    w.usage(node=5.0, ls=2.5, be=2.0)
    w.clock.advance(10)  # older than 3 collect intervals
    decision = w.run(policy)
    assert decision.action == "skip" and "no fresh node CPU sample" in decision.summary
    assert w.cpusets() == {"0,4"} and w.metrics.suppress == []


def test_no_pods_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.informer.pod_list = []
    put_usage(w.options, node_cpu=1.0)
    assert w.run().action == "skip"


def _remove_besteffort(host: FakeHost) -> None:
    for path in sorted(host.cgroup_root.rglob("besteffort"), key=lambda p: len(p.parts)):
        if path.is_dir():
            shutil.rmtree(path)


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_vanished_besteffort_dir_skips(fake_cgroup_host: FakeHost, tmp_path: Path, policy: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    _remove_besteffort(fake_cgroup_host)
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run(policy)
    assert decision.action == "skip"
    assert decision.summary.startswith("cannot read BE's") and BE_DIR in decision.summary
    recovered = w.run(policy, enabled=False)  # nothing left to recover but the quota write, which reports it
    assert recovered.action == "recover"
    assert "failed" in recovered.summary and recovered.numbers["failed_writes"]


def test_besteffort_dir_vanishing_between_rounds(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.usage(node=5.0, ls=2.5, be=2.0)
    assert w.run().action == "suppress"
    _remove_besteffort(fake_cgroup_host)
    w.clock.advance(1)
    w.usage(node=5.0, ls=2.5, be=2.0)
    assert w.run().action == "skip"


@pytest.mark.parametrize(("policy", "file", "garbage"),
                         [("cpuset", CPUSET_CPUS, "0-3,zz\n"), ("cfsQuota", CPU_CFS_QUOTA, "lots\n")])
def test_garbage_in_cgroup_file_skips(fake_cgroup_host: FakeHost, tmp_path: Path, policy: str, file: Any,
                                      garbage: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    fake_cgroup_host.write_cgroup(BE_DIR, file, garbage)
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run(policy)
    assert decision.action == "skip"
    assert decision.summary.startswith(f"cannot read BE's {'cpuset' if policy == 'cpuset' else 'cfs quota'} in "
                                       f"{BE_DIR}: ")
    assert decision.numbers["suppress_cores"] == 2.2  # the computation is still reported


def test_garbage_annotation_is_named_in_the_decision(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    bad = make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: "{oops"})
    w = make_world(fake_cgroup_host, tmp_path, extra_pods=(bad,))
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run()
    assert decision.action == "suppress" and decision.numbers["be_cpuset"] == "0,2,4"
    assert decision.numbers["bad_annotations"][0].startswith("default/lse: scheduling.koordinator.sh/resource-status"
                                                             ": not JSON")


def test_every_cpu_exclusive_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    lse = make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: '{"cpuset": "0-7"}'})
    w = make_world(fake_cgroup_host, tmp_path, extra_pods=(lse,), quota=quota_text(fake_cgroup_host, 40_000))
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run()
    assert decision.action == "skip" and "no CPU left for BE" in decision.summary
    assert w.cpusets() == {"0-7"}
    recovered = w.run(enabled=False)  # only the quota to give back; no empty cpuset written
    assert recovered.action == "recover" and "failed" not in recovered.summary
    assert (w.cpusets(), w.quota()) == ({"0-7"}, -1)
