"""cpusuppress on a standalone host over fake v1 and v2 trees: BE workloads are limited through their own
cgroups, LS workloads never, and the besteffort directory only while a pod found there is listed.

Worked example (8 CPUs, 2 NUMA nodes with HT, threshold 65%), the one of test_strategy.py with two BE
workloads: node 5.0 cores, LS workload ``web`` 2.5, BE workloads ``batch-a`` (cgroup ``batch/a``, with
sub-cgroups) and ``batch-b`` (systemd unit ``b.service``: ``system.slice/b.service``) 1.0 each, so system
= 0.5 and suppress = 5200 - 2500 - 500 = 2200 milli-cores: cpuset 0,2,4 in every BE cgroup, or a BE quota
of 220000 us split equally: 110000 us per workload.  ``web`` starts with sentinel values (cpuset 0-7,
quota 70000 us) that must never change."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Pod
from koordlet.config.types import WorkloadConfig
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins.cpusuppress.strategy import CPUSuppress
from koordlet.qosmanager.plugins.cpusuppress.targets import be_targets
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import DISCOVERED_SOURCE, workload_pods
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import CPU_CFS_QUOTA, CPUSET_CPUS
from koordlet.system.validators import format_cpulist
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_options, put_usage

A = "batch/a"
B = "system.slice/b.service"
WEB = "web"
A_TREE = (A, f"{A}/worker", f"{A}/worker/x")
BE_DIRS = (*A_TREE, B)
BESTEFFORT = "kubepods/besteffort"
DISCOVERED = f"{BESTEFFORT}/poduid-found"
WORKLOADS = (WorkloadConfig(name="batch-a", cgroup_path=A, qos_class="BE", priority=5000),
             WorkloadConfig(name="batch-b", systemd_unit="b.service", qos_class="BE", priority=5000),
             WorkloadConfig(name="web", cgroup_path=WEB, qos_class="LS"))
USAGE = {"standalone-batch-a": 1.0, "standalone-batch-b": 1.0, "standalone-web": 2.5}


def slo(policy: str = "cpuset", **threshold: Any) -> NodeSLOSpec:
    body = {"enable": True, "cpuSuppressPolicy": policy, **threshold}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": body}))


def discovered_be_pod() -> PodMeta:
    pod = Pod(uid="found", name="podfound", namespace="kubepods", labels={}, annotations={},
              kube_qos=KubeQoS.BESTEFFORT, phase="Running", priority=None)
    return PodMeta(pod=pod, cgroup_dir=DISCOVERED, containers=(), source=DISCOVERED_SOURCE)


@dataclass
class World:
    host: FakeHost
    options: Options
    informer: FakeInformer
    clock: FakeClock
    strategy: CPUSuppress

    def normalise(self) -> None:
        """v2 keeps the period when only the quota is written; the fake stores what was written."""
        if self.host.mode != "v2":
            return
        for rel in (A, B, WEB, BESTEFFORT):
            path = self.host.cgroup_path(rel, CPU_CFS_QUOTA)
            if path.exists() and len(path.read_text().split()) == 1:
                path.write_text(f"{path.read_text().strip()} 100000\n")

    def run(self, policy: str = "cpuset", enabled: bool = True, **threshold: Any) -> Decision:
        put_usage(self.options, node_cpu=5.0, pod_cpu=USAGE)
        decision = self.strategy.run_once(slo(policy, **threshold), enabled=enabled)
        self.normalise()
        self.clock.advance(1)
        return decision

    def cpuset(self, rel: str) -> str:
        return format_cpulist(self.options.reader.read("cpuset_cpus", rel))

    def quota(self, rel: str) -> int:
        return int(self.options.reader.read("cpu_cfs_quota", rel))

    def set_quota(self, rel: str, quota: int) -> None:
        text = (f"{'max' if quota < 0 else quota} 100000" if self.host.mode == "v2" else str(quota)) + "\n"
        self.host.write_cgroup(rel, CPU_CFS_QUOTA, text)

    def web_untouched(self) -> bool:
        return self.cpuset(WEB) == "0-7" and self.quota(WEB) == 70_000


def make_world(host: FakeHost, tmp_path: Path, *, workloads: tuple[WorkloadConfig, ...] = WORKLOADS,
               extra: tuple[PodMeta, ...] = (), dirs: tuple[str, ...] = (*BE_DIRS, WEB)) -> World:
    informer = FakeInformer(pod_list=[*workload_pods(workloads), *extra], node_info=make_node(8, numa_nodes=2))
    clock = FakeClock(1_700_000_000.0)
    options = make_options(host, tmp_path, informer, clock=clock)
    for rel in dirs:
        host.mkdir_cgroup(rel)
        host.write_cgroup(rel, CPUSET_CPUS, "0-7\n")
    for parent in ("batch", "system.slice", "kubepods", BESTEFFORT):
        if host.cgroup_path(parent, CPUSET_CPUS).exists():
            host.write_cgroup(parent, CPUSET_CPUS, "0-7\n")
    world = World(host, options, informer, clock, CPUSuppress(options))
    world.set_quota(WEB, 70_000)
    return world


# ---------------------------------------------------------------------------------------------- targets


def test_targets_on_a_kubernetes_node_are_the_besteffort_dir_only() -> None:
    from tests.unit.qosmanager.fakes import make_pod

    targets = be_targets(BESTEFFORT, [make_pod("ls", "LS"), make_pod("be", "BE")])
    assert (targets.roots, targets.besteffort, targets.only_besteffort) == ((BESTEFFORT,), True, True)


def test_targets_of_a_standalone_host() -> None:
    pods = [*workload_pods(WORKLOADS), discovered_be_pod()]
    targets = be_targets(BESTEFFORT, pods)
    assert targets.roots == (BESTEFFORT, A, B)  # besteffort first, then workloads by path
    assert targets.workload_dirs == (A, B) and not targets.only_besteffort
    # Without a listed pod below it (discoverKubepods off, or no BE pod there) besteffort is left alone.
    assert be_targets(BESTEFFORT, workload_pods(WORKLOADS)).roots == (A, B)


def test_nested_be_workloads_get_no_share_of_their_own() -> None:
    nested = (WorkloadConfig(name="outer", cgroup_path="batch", qos_class="BE"),
              WorkloadConfig(name="inner", cgroup_path="batch/a", qos_class="BE"),
              WorkloadConfig(name="yarn", cgroup_path=f"{BESTEFFORT}/yarn", qos_class="BE"))
    targets = be_targets(BESTEFFORT, [*workload_pods(nested), discovered_be_pod()])
    assert targets.roots == (BESTEFFORT, "batch")
    assert targets.workload_dirs == ("batch", "batch/a", f"{BESTEFFORT}/yarn")  # all get the cpuset


def test_a_be_workload_holding_a_non_be_pod_is_left_alone() -> None:
    odd = (WorkloadConfig(name="batch", cgroup_path="batch", qos_class="BE"),
           WorkloadConfig(name="api", cgroup_path="batch/api", qos_class="LS"),
           WorkloadConfig(name="root", cgroup_path="/", qos_class="BE"))
    targets = be_targets(BESTEFFORT, workload_pods(odd))
    assert targets.roots == ()
    assert targets.left_alone == ("standalone/root: its cgroup is the hierarchy root",
                                  "standalone/batch: its cgroup batch holds LS pod standalone/api")


# ---------------------------------------------------------------------------------------------- cpuset


def test_cpuset_policy_limits_every_be_workload_tree_and_not_ls(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.set_quota(A, 40_000)
    decision = w.run()
    assert decision.action == "suppress", decision.summary
    assert decision.numbers["suppress_cores"] == 2.2
    assert {rel: w.cpuset(rel) for rel in BE_DIRS} == dict.fromkeys(BE_DIRS, "0,2,4")  # sub-cgroups too
    assert (w.quota(A), w.quota(B)) == (-1, -1)  # the cfsQuota policy is recovered in each
    assert w.web_untouched()
    assert decision.numbers["targets"] == [A, B]
    assert decision.summary.startswith(f"BE limited to 3 CPUs (cpuset 0,2,4) in {A}, {B}: LS usage 2.50")


def test_quota_recovered_once_per_workload_cgroup(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, workloads=WORKLOADS[:1] + WORKLOADS[2:])
    w.run()
    assert w.quota(A) == -1
    w.set_quota(A, 50_000)  # an operator's, after the recovery: kept
    w.set_quota(B, 60_000)
    w.informer.pod_list = workload_pods(WORKLOADS)  # batch-b appears: its quota is recovered once
    w.run()
    assert (w.quota(A), w.quota(B)) == (50_000, -1)
    assert w.web_untouched()


# ---------------------------------------------------------------------------------------------- quota


def test_cfs_quota_is_split_equally_and_adds_up_to_the_target(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    for rel in BE_DIRS:
        fake_cgroup_host.write_cgroup(rel, CPUSET_CPUS, "0,4\n")
    decision = w.run("cfsQuota")
    assert decision.action == "suppress", decision.summary
    assert (w.quota(A), w.quota(B)) == (110_000, 110_000)
    assert w.quota(A) + w.quota(B) == decision.numbers["target_quota_us"] == decision.numbers["quota_us"] == 220_000
    assert decision.numbers["quota_shares_us"] == {A: 110_000, B: 110_000}
    assert {w.cpuset(rel) for rel in BE_DIRS} == {"0-7"}  # the cpuset policy is recovered in each tree
    assert w.web_untouched()
    assert decision.summary.startswith("BE quota 220000 us per 100000 us (2.20 cores) split equally over 2 BE "
                                       f"cgroups ({A} 110000 us, {B} 110000 us): LS usage 2.50")


def test_besteffort_with_a_discovered_pod_takes_an_equal_share(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, extra=(discovered_be_pod(),), dirs=(*BE_DIRS, WEB, DISCOVERED))
    decision = w.run("cfsQuota")
    shares = decision.numbers["quota_shares_us"]
    assert shares == {BESTEFFORT: 73_334, A: 73_333, B: 73_333}  # the remainder to the first
    assert sum(w.quota(rel) for rel in shares) == 220_000
    assert w.web_untouched()


def test_besteffort_without_a_listed_pod_is_left_alone(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, dirs=(*BE_DIRS, WEB, DISCOVERED))
    w.set_quota(BESTEFFORT, 30_000)
    w.run("cfsQuota")
    w.run("cpuset")
    assert (w.quota(BESTEFFORT), w.cpuset(BESTEFFORT), w.cpuset(DISCOVERED)) == (30_000, "0-7", "0-7")


@pytest.mark.parametrize(
    ("current", "action", "quotas"),
    [
        ((50_000, 50_000), "suppress", (90_000, 90_000)),      # total 100000 +120000 stepped to +80000
        ((50_000, -1), "suppress", (110_000, 110_000)),        # one unlimited: BE is, straight to the target
        ((100_000, 115_000), "none", (107_500, 107_500)),      # |220000 - 215000| < 8000: total kept, evened out
        ((110_000, 110_000), "none", (110_000, 110_000)),      # nothing to do
    ],
)
def test_quota_plan_works_on_the_total(fake_cgroup_host: FakeHost, tmp_path: Path, current: tuple[int, int],
                                       action: str, quotas: tuple[int, int]) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.set_quota(A, current[0])
    w.set_quota(B, current[1])
    decision = w.run("cfsQuota")
    assert decision.action == action, decision.summary
    assert (w.quota(A), w.quota(B)) == quotas
    assert ("shares evened out" in decision.summary) is (current == (100_000, 115_000))


def test_each_cgroup_keeps_the_minimum(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    put_usage(w.options, node_cpu=7.5, pod_cpu={"standalone-web": 7.0})
    decision = w.strategy.run_once(slo("cfsQuota"))
    w.normalise()
    assert decision.numbers["suppress_cores"] < 0
    assert decision.numbers["target_quota_us"] == 4000  # 2 cgroups x 2000 us
    assert (w.quota(A), w.quota(B)) == (2000, 2000)


def test_a_restarted_workload_gets_its_share_at_once(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.run("cfsQuota")
    assert w.quota(B) == 110_000
    fake_cgroup_host.rmdir_cgroup(B)  # systemd re-creates the unit's cgroup on restart: unlimited again
    fake_cgroup_host.mkdir_cgroup(B)
    fake_cgroup_host.write_cgroup(B, CPUSET_CPUS, "0-7\n")
    decision = w.run("cfsQuota")  # well within the executor's rewrite period
    assert decision.numbers["previous_quota_us"] == -1
    assert (w.quota(A), w.quota(B)) == (110_000, 110_000)


# ---------------------------------------------------------------------------------------------- switching


def test_switching_policies_recovers_the_other_in_each_workload(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.run("cfsQuota")
    assert ({w.cpuset(d) for d in BE_DIRS}, w.quota(A), w.quota(B)) == ({"0-7"}, 110_000, 110_000)
    w.run("cpuset")
    assert ({w.cpuset(d) for d in BE_DIRS}, w.quota(A), w.quota(B)) == ({"0,2,4"}, -1, -1)
    recovered = w.run(enabled=False)
    assert recovered.action == "recover"
    assert recovered.summary == f"BE recovered in {A}, {B}: cpuset 0-7, cfs quota unlimited"
    assert ({w.cpuset(d) for d in BE_DIRS}, w.quota(A), w.quota(B)) == ({"0-7"}, -1, -1)
    assert w.web_untouched()


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_a_workload_without_cgroup_does_not_stop_the_others(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                           policy: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path, dirs=(*A_TREE, WEB))  # b.service is not running
    decision = w.run(policy)
    assert decision.action == "suppress", decision.summary
    assert decision.numbers["targets"] == [A]
    assert decision.numbers["unreadable"][0].startswith(f"{B}: ")
    assert f"; not limited, unreadable: {B}: " in decision.summary
    if policy == "cfsQuota":
        assert w.quota(A) == 220_000  # the only readable BE cgroup carries BE's whole quota
    else:
        assert {w.cpuset(d) for d in A_TREE} == {"0,2,4"}
    assert w.web_untouched()


@pytest.mark.parametrize(("policy", "what"), [("cpuset", "cpuset"), ("cfsQuota", "cfs quota")])
def test_no_readable_workload_skips(fake_cgroup_host: FakeHost, tmp_path: Path, policy: str, what: str) -> None:
    w = make_world(fake_cgroup_host, tmp_path, dirs=(WEB,))
    decision = w.run(policy)
    assert decision.action == "skip"
    assert decision.summary.startswith(f"cannot read BE's {what} in {A}: ") and f"; {B}: " in decision.summary
    assert w.web_untouched()


def test_only_ls_workloads_skip_with_the_reason(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, workloads=WORKLOADS[2:])
    decision = w.run()
    assert decision.action == "skip"
    assert decision.summary == ("no BE cgroup to suppress: no BE workload is configured and no BE pod was found "
                                f"under {BESTEFFORT}")
    assert w.run(enabled=False).action == "none"
    assert w.web_untouched()


def test_a_be_workload_holding_an_ls_workload_is_never_limited(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    odd = (WorkloadConfig(name="batch", cgroup_path="batch", qos_class="BE"),
           WorkloadConfig(name="api", cgroup_path="batch/api", qos_class="LS"))
    w = make_world(fake_cgroup_host, tmp_path, workloads=odd, dirs=("batch", "batch/api"))
    put_usage(w.options, node_cpu=5.0, pod_cpu={"standalone-batch": 1.0, "standalone-api": 2.5})
    decision = w.strategy.run_once(slo())
    assert decision.action == "skip"
    assert decision.numbers["left_alone"] == ["standalone/batch: its cgroup batch holds LS pod standalone/api"]
    assert {w.cpuset("batch"), w.cpuset("batch/api")} == {"0-7"}
    assert w.quota("batch") == -1


def test_kubernetes_decisions_are_unchanged(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Pods from kubelet (no standalone source): the besteffort dir alone, no target list in the numbers."""
    w = make_world(fake_cgroup_host, tmp_path)
    w.informer.pod_list = [dataclasses.replace(p, source="kubelet") for p in w.informer.pod_list]
    decision = w.run()
    assert decision.action == "skip" and "targets" not in decision.numbers
    assert decision.summary.startswith(f"cannot read BE's cpuset in {BESTEFFORT}: ")


def test_a_unit_without_a_cpuset_cgroup_still_has_its_quota_recovered(fake_host: FakeHost, tmp_path: Path) -> None:
    """v1: systemd makes a unit's cgroup in cpu/cpuacct/memory but never in cpuset.  Under the cpuset
    policy the unit cannot be limited (the decision says so), but a quota left from the cfsQuota policy
    must not stay in force."""
    w = make_world(fake_host, tmp_path, dirs=(*A_TREE, WEB))
    fake_host.mkdir_cgroup(B, subsystems=("cpu", "cpuacct", "memory"))
    w.run("cfsQuota")
    assert (w.quota(A), w.quota(B)) == (110_000, 110_000)
    decision = w.run("cpuset")
    assert decision.action == "suppress" and decision.numbers["unreadable"][0].startswith(f"{B}: ")
    assert (w.quota(A), w.quota(B)) == (-1, -1)
    assert {w.cpuset(d) for d in A_TREE} == {"0,2,4"}
