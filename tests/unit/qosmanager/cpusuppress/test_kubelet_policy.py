"""cpusuppress under kubelet's CPU manager, over fake v1 and v2 trees (the worked example of
test_strategy.py: 8 CPUs, 2 NUMA nodes with HT -- NUMA 0 = 0,1,4,5, NUMA 1 = 2,3,6,7 -- suppress 2.2
cores -> 3 CPUs, the HT pair (0,4) and CPU 2).

* ``none``: BE's cpuset goes to besteffort, its pods and their containers (``applyCPUSetWithNonePolicy``);
* ``static``: besteffort and the pods get every CPU BE may use, the containers (sandbox included) the
  suppressed cpuset (upstream ``recoverCPUSetIfNeed`` to pod depth, then ``applyCPUSetWithStaticPolicy``);
* CPUs kubelet pinned to a Guaranteed container are never BE's: with the pair (2,6) pinned, NUMA 0 is
  the larger bucket: pair (0,4), then CPU 3 from NUMA 1;
* a pinned container's cgroup, and every directory above or below it, is never written."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.apis.extension import LABEL_QOS
from koordlet.qosmanager.plugins.cpusuppress.kubelet_policy import static_updates, touches, without_pinned
from koordlet.resourceexecutor import CgroupUpdate
from koordlet.statesinformer.cpumanager import KubeletCPUManager, PinnedContainer
from koordlet.system.resources import CPUSET_CPUS
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.cpusuppress.test_strategy import BE_DIR, POD_DIR, World, make_world
from tests.unit.qosmanager.fakes import make_pod

CONTAINERS = (f"{POD_DIR}/be-a", f"{POD_DIR}/be-b", f"{POD_DIR}/sandbox")
PARENTS = (BE_DIR, POD_DIR)
GUARANTEED = make_pod("g", "LSR", labels={LABEL_QOS: ""})
G_MAIN = GUARANTEED.containers[0].cgroup_dir
PIN_2_6 = KubeletCPUManager("static", (PinnedContainer("uid-g", "main", (2, 6), G_MAIN),))


def world(host: FakeHost, tmp_path: Path, kubelet: KubeletCPUManager) -> World:
    w = make_world(host, tmp_path, extra_pods=(GUARANTEED,))
    w.informer.kubelet = kubelet
    host.mkdir_cgroup(G_MAIN)
    host.write_cgroup(G_MAIN, CPUSET_CPUS, "2,6\n")  # what kubelet wrote for the container
    w.usage(node=5.0, ls=2.5, be=2.0)
    return w


def cpusets(w: World, dirs: tuple[str, ...]) -> dict[str, str]:
    return {d: w.cpuset(d) for d in dirs}


def test_none_policy_writes_every_be_directory(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path, KubeletCPUManager())
    decision = w.run()
    assert decision.numbers["be_cpuset"] == "0,2,4"
    assert w.cpusets() == {"0,2,4"}
    assert "be_parent_cpuset" not in decision.numbers and "kubelet_cpu_manager_policy" not in decision.numbers


def test_static_policy_limits_containers_and_keeps_pods_wide(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path, KubeletCPUManager("static"))
    decision = w.run()
    assert decision.action == "suppress", decision.summary
    assert cpusets(w, CONTAINERS) == dict.fromkeys(CONTAINERS, "0,2,4")
    assert cpusets(w, PARENTS) == dict.fromkeys(PARENTS, "0-7")
    assert decision.numbers["be_parent_cpuset"] == "0-7"
    assert decision.numbers["kubelet_cpu_manager_policy"] == "static"
    assert decision.summary.startswith("BE limited to 3 CPUs (cpuset 0,2,4) per container (kubelet static policy; "
                                       "besteffort and pod cgroups keep 0-7): ")


def test_pinned_cpus_are_never_be_s(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path, PIN_2_6)
    decision = w.run()
    assert decision.numbers["be_cpuset"] == "0,3-4"
    assert decision.numbers["kubelet_pinned_cpus"] == "2,6"
    assert decision.numbers["excluded_cpus"] == "2,6"
    assert cpusets(w, CONTAINERS) == dict.fromkeys(CONTAINERS, "0,3-4")
    assert cpusets(w, PARENTS) == dict.fromkeys(PARENTS, "0-1,3-5,7")
    assert w.cpuset(G_MAIN) == "2,6"
    # Recovering (suppress switched off) gives BE every CPU but the pinned ones.
    assert w.run(enabled=False).action == "recover"
    assert w.cpusets() == {"0-1,3-5,7"}
    assert w.cpuset(G_MAIN) == "2,6"


def test_static_growth_counts_from_what_the_containers_got(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """LS goes idle: 5200 - 0 - 500 = 4700 wants 5 CPUs; from the containers' 3, BE grows by ceil(0.8) = 1
    per round although the besteffort cgroup holds all 8."""
    w = world(fake_cgroup_host, tmp_path, KubeletCPUManager("static"))
    assert w.run().numbers["be_cpuset"] == "0,2,4"
    w.clock.now += 1
    w.usage(node=2.5, ls=0.0, be=2.0)
    decision = w.run()
    assert (decision.numbers["previous_cpuset"], decision.numbers["be_cpus"]) == ("0,2,4", 4)
    assert decision.numbers["limited_by"] == "growth"
    assert cpusets(w, CONTAINERS) == dict.fromkeys(CONTAINERS, decision.numbers["be_cpuset"])
    assert cpusets(w, PARENTS) == dict.fromkeys(PARENTS, "0-7")


def test_policy_switch_back_to_none_narrows_the_parents(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path, KubeletCPUManager("static"))
    w.run()
    w.informer.kubelet = KubeletCPUManager()
    w.clock.now += 1
    w.usage(node=5.0, ls=2.5, be=2.0)
    assert w.run().numbers["be_cpuset"] == "0,2,4"
    assert w.cpusets() == {"0,2,4"}


@pytest.mark.parametrize("policy", ["none", "static"])
def test_a_pinned_container_and_the_directories_around_it_are_never_written(
        fake_cgroup_host: FakeHost, tmp_path: Path, policy: str) -> None:
    """A container kubelet pinned below besteffort (a Guaranteed pod cannot be there; the guard holds
    wherever one is): neither it, its pod nor besteffort is written, the other BE pods are."""
    odd = make_pod("odd", "BE", labels={LABEL_QOS: ""})
    odd_main = odd.containers[0].cgroup_dir
    pinned = KubeletCPUManager(policy, (PinnedContainer("uid-odd", "main", (6,), odd_main),))
    w = make_world(fake_cgroup_host, tmp_path, extra_pods=(odd,))
    w.informer.kubelet = pinned
    fake_cgroup_host.mkdir_cgroup(odd_main)
    fake_cgroup_host.write_cgroup(odd.cgroup_dir, CPUSET_CPUS, "0-7\n")
    fake_cgroup_host.write_cgroup(odd_main, CPUSET_CPUS, "6\n")
    w.usage(node=5.0, ls=2.5, be=2.0)
    decision = w.run()
    assert decision.numbers["be_cpuset"] == "0,2,4"  # 6 is pinned: pair (0,4) from NUMA 0, then CPU 2
    assert decision.numbers["left_pinned"] == [BE_DIR, odd.cgroup_dir, odd_main]
    assert (w.cpuset(BE_DIR), w.cpuset(odd.cgroup_dir), w.cpuset(odd_main)) == ("0-7", "0-7", "6")
    written = CONTAINERS if policy == "static" else (POD_DIR, *CONTAINERS)
    assert cpusets(w, written) == dict.fromkeys(written, "0,2,4")


def test_state_file_trouble_is_in_the_decision(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    error = "/var/lib/kubelet/cpu_manager_state: not JSON: Expecting value: line 1 column 1 (char 0)"
    w = world(fake_cgroup_host, tmp_path, KubeletCPUManager("static", PIN_2_6.pinned, error))
    decision = w.run()
    assert decision.numbers["kubelet_state_error"] == error
    assert decision.summary.endswith(f"; kubelet's pinned CPUs are the last known: {error}")
    assert decision.numbers["be_cpuset"] == "0,3-4"  # the last known pins still hold


def test_static_updates_by_depth() -> None:
    dirs = (BE_DIR, POD_DIR, f"{POD_DIR}/c", "batch/a", "batch/a/x")
    assert [(u.rel_dir, u.value) for u in static_updates(dirs, BE_DIR, "1", "0-3", "o")] == [
        (BE_DIR, "0-3"), (POD_DIR, "0-3"), (f"{POD_DIR}/c", "1"), ("batch/a", "1"), ("batch/a/x", "1")]


def test_touches_above_below_and_at() -> None:
    pinned = ("kubepods/pod1/c",)
    assert [touches(d, pinned) for d in ("kubepods", "kubepods/pod1", "kubepods/pod1/c", "kubepods/pod1/c/x",
                                         "kubepods/pod1/c2", "kubepods/pod10")] == [True, True, True, True,
                                                                                    False, False]
    updates = [CgroupUpdate(CPUSET_CPUS, d, "0", "o") for d in ("kubepods/pod1", "kubepods/pod2")]
    kept, left = without_pinned(updates, pinned)
    assert ([u.rel_dir for u in kept], left) == (["kubepods/pod2"], ["kubepods/pod1"])
    assert without_pinned(updates, ()) == (updates, [])
