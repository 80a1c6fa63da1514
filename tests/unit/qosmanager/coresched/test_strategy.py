"""The coresched strategy over fake v1 and v2 trees and a fake ``koordlet.native``: the exact prctl sequence
(op, pid, scope) for groups, exclusive / none policies, expeller groups, tasks joining, pods leaving and
switch-off; the ``cpu.idle`` values written; the unsupported kernel reported once with the BE fallback."""

from __future__ import annotations

import dataclasses
import errno
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import LABEL_CORE_SCHED_GROUP
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.gates import CORE_SCHED as GATE
from koordlet.isolation.coresched.rules import LABEL_CORE_SCHED_POLICY
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.plugins import coresched
from koordlet.qosmanager.plugins.coresched.strategy import NO_BACKEND, CoreSched
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FIRST_COOKIE, TG, FakeNative, T
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, make_options, make_pod

LOGGER = "koordlet.qosmanager.plugins.coresched.strategy"
BE_DIR = "kubepods/besteffort"
LS_DIR = "kubepods/burstable"
C1, C2, C3 = FIRST_COOKIE, FIRST_COOKIE + 1, FIRST_COOKIE + 2
PROBE = ("get", 0, T)


def slo(*, policy: str = "coreSched", ls: Mapping[str, Any] | None = None, be: Mapping[str, Any] | None = None,
        lsr: Mapping[str, Any] | None = None) -> NodeSLOSpec:
    strategy: dict[str, Any] = {"policies": {"cpuPolicy": policy}}
    for name, cfg in (("lsClass", ls), ("beClass", be), ("lsrClass", lsr)):
        if cfg is not None:
            strategy[name] = {"cpuQOS": dict(cfg)}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": strategy}))


# The seed's example: LS enabled with coreExpeller, BE enabled with schedIdle.
SEED = slo(ls={"enable": True, "coreExpeller": True, "schedIdle": 0},
           be={"enable": True, "coreExpeller": False, "schedIdle": 1})
LS_ON = slo(ls={"enable": True, "coreExpeller": False}, be={"enable": True, "coreExpeller": False})


@dataclass
class Env:
    host: FakeHost
    informer: FakeInformer
    native: FakeNative
    strategy: CoreSched
    clock: FakeClock

    def pod(self, name: str, qos: str, pids: Sequence[Sequence[int]] = ((),), labels: Mapping[str, str] | None = None
            ) -> PodMeta:
        containers = tuple(f"c{i}" for i in range(len(pids)))
        meta = make_pod(name, qos, containers=containers, labels=labels)
        self.host.mkdir_cgroup(meta.cgroup_dir)
        for container, container_pids in zip(meta.containers, pids, strict=True):
            self.host.mkdir_cgroup(container.cgroup_dir)
            self.procs(container.cgroup_dir, container_pids)
        self.informer.pod_list.append(meta)
        return meta

    def procs(self, rel_dir: str, pids: Sequence[int]) -> None:
        self.host.write_cgroup(rel_dir, "cgroup.procs", "".join(f"{p}\n" for p in pids), subsystem="cpu")

    def idle(self, rel_dir: str) -> str:
        return self.host.read_cgroup(rel_dir, REGISTRY["cpu_idle"]).strip()

    def run(self, spec: NodeSLOSpec = LS_ON, enabled: bool = True) -> Decision:
        decision = self.strategy.run_once(spec, enabled)
        assert decision.strategy == "coresched"
        return decision


def make_env(host: FakeHost, tmp_path: Path, native: FakeNative | None = None, *, backend: bool = True) -> Env:
    host.mkdir_cgroup(BE_DIR)
    host.mkdir_cgroup(LS_DIR)
    informer = FakeInformer()
    clock = FakeClock(1_700_000_000.0)
    options = make_options(host, tmp_path, informer, clock=clock, gates={GATE: True})
    native = native or FakeNative()
    if backend:
        options = dataclasses.replace(options, coresched=CoreSchedExecutor(native, MemoryAudit(), clock))
    return Env(host, informer, native, CoreSched(options), clock)


@pytest.fixture
def env(fake_cgroup_host: FakeHost, tmp_path: Path) -> Env:
    return make_env(fake_cgroup_host, tmp_path)


def add_cookie(leader: int, *others: int) -> list[tuple[str, int, Any]]:
    """Koordinator addCookie: get, create, get, then share_from the leader and share_to the others."""
    return [("get", leader, T), ("create", leader, TG), ("get", leader, T), ("share_from", leader, T),
            *(("share_to", p, TG) for p in others)]


def assign(sibling: int, *targets: int) -> list[tuple[str, int, Any]]:
    """Koordinator assignCookie: check the sibling still holds the cookie, pull it, push it."""
    return [("get", sibling, T), ("share_from", sibling, T), *(("share_to", p, TG) for p in targets)]


# ------------------------------------------------------------------------------------------ enabled


@pytest.mark.parametrize(("gate", "policy", "expected"), [
    (True, "coreSched", True),
    (False, "coreSched", False),
    (True, "groupIdentity", False),
])
def test_enabled_needs_the_gate_and_the_core_sched_policy(fake_host: FakeHost, tmp_path: Path, gate: bool,
                                                          policy: str, expected: bool) -> None:
    options = make_options(fake_host, tmp_path, FakeInformer(), gates={GATE: gate})
    assert CoreSched(options).enabled(slo(policy=policy)) is expected


def test_defaults_are_off_and_the_factory_builds_the_strategy(fake_host: FakeHost, tmp_path: Path) -> None:
    options = make_options(fake_host, tmp_path, FakeInformer(), gates={GATE: True})
    strategy = coresched.new(options)
    assert strategy.name == coresched.NAME == "coresched"
    assert not strategy.enabled(merge_over_defaults(NodeSLOSpec.from_json({})))  # groupIdentity by default
    assert strategy.interval() == options.config.reconcile_interval_seconds


# ------------------------------------------------------------------------------------------ cookies


def test_two_pods_of_one_group_share_one_cookie(env: Env) -> None:
    a = env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    decision = env.run()
    assert env.native.take_calls() == [PROBE, *add_cookie(100, 101), *assign(100, 200)]
    assert env.native.cookies == {100: C1, 101: C1, 200: C1}
    assert decision.action == "reconcile"
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 3}}
    assert decision.numbers["new_cookies"] == ["default/g1"]
    assert decision.numbers["tasks_assigned"] == 3
    assert decision.numbers["supported"] is True
    assert env.strategy._book is not None
    assert env.strategy._book.containers[(a.uid, a.containers[0].container_id)].pids == {100, 101}

    # Nothing new: no prctl at all (the kernel was probed once), no write.
    again = env.run()
    assert env.native.take_calls() == []
    assert again.action == "none", again.summary


def test_groups_are_isolated_and_unlabelled_pods_share_group_empty(env: Env) -> None:
    env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g2"})
    env.pod("c", "LS", [[300]])
    env.pod("d", "BE", [[400]])
    env.run()
    assert env.native.take_calls() == [PROBE, *add_cookie(100), *add_cookie(200), *add_cookie(300),
                                       *assign(300, 400)]
    assert env.native.cookies == {100: C1, 200: C2, 300: C3, 400: C3}


def test_exclusive_policy_groups_by_pod_uid(env: Env) -> None:
    env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200, 201]], labels={LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "exclusive"})
    env.pod("c", "LS", [[300]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    decision = env.run()
    assert env.native.take_calls() == [PROBE, *add_cookie(100), *add_cookie(200, 201), *assign(100, 300)]
    assert env.native.cookies == {100: C1, 200: C2, 201: C2, 300: C1}
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 2}, "uid-b": {"cookie": C2, "tasks": 2}}


def test_none_policy_is_left_at_cookie_zero(env: Env) -> None:
    env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "none"})
    env.pod("s", "SYSTEM", [[900]])
    decision = env.run()
    assert env.native.take_calls() == [PROBE]
    assert env.native.cookies == {}
    assert decision.numbers["containers_disabled"] == 2
    assert decision.action == "none"


def test_pod_turning_to_none_policy_is_cleared(env: Env) -> None:
    a = env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    env.native.take_calls()
    labels = {**a.pod.labels, LABEL_CORE_SCHED_POLICY: "none"}
    env.informer.pod_list[0] = dataclasses.replace(a, pod=dataclasses.replace(a.pod, labels=labels))
    decision = env.run()
    # Clear: share_to from a fresh relay thread, which holds the default cookie 0.
    assert env.native.take_calls() == [("share_to", 100, TG), ("share_to", 101, TG)]
    assert env.native.cookies == {100: 0, 101: 0, 200: C1}
    assert decision.numbers["tasks_cleared"] == 2
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 1}}
    assert env.run().action == "none"
    assert env.native.take_calls() == []


def test_class_without_enable_gets_no_cookie(env: Env) -> None:
    env.pod("a", "LS", [[100]])
    env.pod("b", "BE", [[200]])
    env.run(slo(ls={"enable": True}, be={"enable": False}))
    assert env.native.take_calls() == [PROBE, *add_cookie(100)]


def test_expeller_classes_get_their_own_group(env: Env) -> None:
    # The seed's config: LS has coreExpeller, BE has not; same label, different cookies.
    env.pod("ls", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "team"})
    env.pod("ls2", "LS", [[101]], labels={LABEL_CORE_SCHED_GROUP: "team"})
    env.pod("be", "BE", [[200]], labels={LABEL_CORE_SCHED_GROUP: "team"})
    decision = env.run(SEED)
    assert env.native.take_calls() == [PROBE, *add_cookie(100), *assign(100, 101), *add_cookie(200)]
    assert env.native.cookies == {100: C1, 101: C1, 200: C2}
    assert decision.numbers["groups"] == {"default/team": {"cookie": C2, "tasks": 1},
                                          "default/team-expeller": {"cookie": C1, "tasks": 2}}
    assert decision.numbers["rule"]["lsClass"] == {"enable": True, "coreExpeller": True, "schedIdle": False}


def test_a_new_pid_joins_its_group_and_an_exited_one_leaves(env: Env) -> None:
    a = env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    env.native.take_calls()
    env.procs(a.containers[0].cgroup_dir, [101, 102])
    decision = env.run()
    # 100 left the cgroup: it is no sibling any more; 101 still holds the cookie and shares it with 102.
    assert env.native.take_calls() == assign(101, 102)
    assert env.native.cookies[102] == C1
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 2}}
    assert decision.numbers["tasks_assigned"] == 1


def test_a_sibling_that_lost_the_cookie_is_skipped(env: Env) -> None:
    a = env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    b = env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    env.native.take_calls()
    env.native.cookies[100] = 0  # PID reused by an unrelated task, say
    env.procs(b.containers[0].cgroup_dir, [200, 201])
    env.run()
    assert env.native.take_calls() == [("get", 100, T), *assign(200, 201)]
    assert env.native.cookies[201] == C1
    del a


def test_group_without_a_valid_sibling_starts_over_with_a_new_cookie(env: Env) -> None:
    a = env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    env.native.take_calls()
    env.native.cookies[100] = 0
    env.procs(a.containers[0].cgroup_dir, [100, 101])
    decision = env.run()
    assert env.native.take_calls() == [("get", 100, T), *add_cookie(100, 101)]
    assert env.native.cookies == {100: C2, 101: C2}
    assert decision.numbers["new_cookies"] == ["default/g1"]


def test_a_leader_that_exited_hands_over_to_the_next_task(env: Env) -> None:
    env.native.exited.add(100)
    env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    decision = env.run()
    assert env.native.take_calls() == [PROBE, ("get", 100, T), *add_cookie(101)]
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 1}}
    assert decision.numbers["tasks_gone"] == 1


def test_gone_pods_are_forgotten_and_an_empty_group_gets_a_new_cookie(env: Env) -> None:
    env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    env.native.take_calls()
    del env.informer.pod_list[0]
    decision = env.run()
    assert env.native.take_calls() == []
    assert decision.numbers["groups"] == {"default/g1": {"cookie": C1, "tasks": 1}}
    env.informer.pod_list.clear()
    assert env.run().numbers["groups"] == {}
    env.pod("c", "LS", [[300]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run()
    assert env.native.take_calls() == add_cookie(300)
    assert env.native.cookies[300] == C2


def test_moving_to_another_group_takes_the_new_groups_cookie(env: Env) -> None:
    a = env.pod("a", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g2"})
    env.run()
    env.native.take_calls()
    env.informer.pod_list[0] = dataclasses.replace(
        a, pod=dataclasses.replace(a.pod, labels={**a.pod.labels, LABEL_CORE_SCHED_GROUP: "g2"}))
    decision = env.run()
    assert env.native.take_calls() == assign(200, 100)
    assert env.native.cookies == {100: C2, 200: C2}
    assert decision.numbers["groups"] == {"default/g2": {"cookie": C2, "tasks": 2}}


def test_switch_off_clears_every_cookie_and_resets_cpu_idle(env: Env) -> None:
    a = env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    b = env.pod("b", "BE", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.run(SEED)
    env.native.take_calls()
    assert env.idle(BE_DIR) == "1" and env.idle(b.cgroup_dir) == "1"
    env.procs(a.containers[0].cgroup_dir, [100, 101, 102])  # forked since: inherited the cookie
    env.native.cookies[102] = C1
    off = env.run(SEED, enabled=False)
    # Containers in key order (pod UID, container id): uid-a then uid-b.
    assert env.native.take_calls() == [("share_to", 100, TG), ("share_to", 101, TG), ("share_to", 102, TG),
                                       ("share_to", 200, TG)]
    assert set(env.native.cookies.values()) == {0}
    assert env.idle(BE_DIR) == "0" and env.idle(b.cgroup_dir) == "0"
    assert off.action == "recover"
    assert off.numbers["tasks_cleared"] == 4 and off.numbers["containers_cleared"] == 2
    assert off.numbers["idle_reset"] == sorted([BE_DIR, b.cgroup_dir])
    nothing = env.run(SEED, enabled=False)
    assert nothing.action == "none" and env.native.take_calls() == []


def test_garbage_in_cgroup_procs_is_a_problem_naming_the_cgroup(env: Env) -> None:
    a = env.pod("a", "LS", [[100]])
    env.host.write_cgroup(a.containers[0].cgroup_dir, "cgroup.procs", "100\nabc\n", subsystem="cpu")
    decision = env.run()
    assert env.native.take_calls() == [PROBE]
    assert decision.numbers["problems"] == [f"{a.containers[0].cgroup_dir}: cgroup.procs holds 'abc', not a pid"]
    assert "1 problems" in decision.summary


def test_a_vanished_container_cgroup_is_no_error(env: Env) -> None:
    env.pod("a", "LS", [[100]])
    meta = make_pod("ghost", "LS")  # its cgroups were never made
    env.informer.pod_list.append(meta)
    decision = env.run()
    assert env.native.take_calls() == [PROBE, *add_cookie(100)]
    assert decision.numbers["problems"] == []


# ------------------------------------------------------------------------------------------ cpu.idle


def test_sched_idle_sets_cpu_idle_on_the_qos_and_pod_dirs(env: Env) -> None:
    be = env.pod("be", "BE", [[200]])
    ls = env.pod("ls", "LS", [[100]])
    decision = env.run(SEED)
    assert env.idle(BE_DIR) == "1"
    assert env.idle(be.cgroup_dir) == "1"
    assert env.idle(ls.cgroup_dir) == "0"
    assert env.idle(LS_DIR) == "0"
    assert decision.numbers["idle_dirs"] == sorted([BE_DIR, be.cgroup_dir])
    assert decision.numbers["writes"] == 2

    # schedIdle back to 0: the strategy gives back what it set.
    changed = env.run(slo(be={"enable": True, "schedIdle": 0}))
    assert env.idle(BE_DIR) == "0" and env.idle(be.cgroup_dir) == "0"
    assert changed.numbers["writes"] == 2 and changed.numbers["idle_dirs"] == []


def test_ls_sched_idle_marks_the_burstable_dir(env: Env) -> None:
    ls = env.pod("ls", "LS", [[100]])
    env.run(slo(ls={"enable": False, "schedIdle": 1}))
    assert env.idle(LS_DIR) == "1" and env.idle(ls.cgroup_dir) == "1"
    assert env.idle(BE_DIR) == "0"


def test_a_kernel_without_cpu_idle_is_reported_not_raised(fake_host: FakeHost, tmp_path: Path) -> None:
    fake_host.set_mode("v1", features=())
    env = make_env(fake_host, tmp_path)
    env.pod("be", "BE", [[200]])
    decision = env.run(SEED)
    assert decision.numbers["refused"] == 2
    assert len(decision.numbers["problems"]) == 2 and "unsupported" in decision.numbers["problems"][0]


# ------------------------------------------------------------------------------------------ unsupported


def unsupported_native() -> FakeNative:
    return FakeNative(fail=dict.fromkeys(("get", "create", "share_to", "share_from"), errno.EINVAL))


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_unsupported_kernel_is_reported_once_and_be_falls_back_to_cpu_idle(
        fake_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str) -> None:
    fake_host.set_mode(mode)
    env = make_env(fake_host, tmp_path, unsupported_native())
    be = env.pod("be", "BE", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    ls = env.pod("ls", "LS", [[100]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    caplog.set_level(logging.INFO, logger=LOGGER)

    first = env.run(LS_ON)  # schedIdle 0 everywhere: the fallback alone asks for cpu.idle
    assert first.action == "unsupported"
    reason = first.numbers["unsupported_reason"]
    assert reason.startswith("PR_SCHED_CORE get pid 0 scope thread: ")
    assert reason.endswith("Invalid argument (kernel built without CONFIG_SCHED_CORE)")
    assert reason in first.summary
    assert first.numbers["supported"] is False
    assert env.idle(BE_DIR) == "1" and env.idle(be.cgroup_dir) == "1"
    assert env.idle(ls.cgroup_dir) == "0"
    assert first.numbers["idle_dirs"] == sorted([BE_DIR, be.cgroup_dir])

    later = [env.run(LS_ON) for _ in range(3)]
    assert [d.action for d in later] == ["none"] * 3
    assert all(d.numbers["unsupported_reason"] == reason for d in later)
    # One probe: the executor remembers the verdict until its retry interval passes; no cookie call at all.
    assert env.native.take_calls() == [PROBE]
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("WARNING", "core scheduling unsupported on this node; BE falls back to cpu.idle=1")]

    # After the retry interval the kernel is asked again (still no), silently; cpu.idle is rewritten once the
    # executor's force-update window passed, which is a plain reconcile.
    env.clock.advance(601)
    assert env.run(LS_ON).action == "reconcile"
    assert env.native.take_calls() == [PROBE]
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1

    off = env.run(LS_ON, enabled=False)
    assert off.action == "recover" and env.idle(BE_DIR) == "0" and env.idle(be.cgroup_dir) == "0"
    assert env.native.take_calls() == []


def test_no_backend_is_unsupported_with_the_fallback(fake_host: FakeHost, tmp_path: Path) -> None:
    env = make_env(fake_host, tmp_path, backend=False)
    be = env.pod("be", "BE", [[200]])
    decision = env.run(LS_ON)
    assert decision.action == "unsupported" and decision.numbers["unsupported_reason"] == NO_BACKEND
    assert env.idle(BE_DIR) == "1" and env.idle(be.cgroup_dir) == "1"
    assert env.run(LS_ON).action == "none"


def test_core_scheduling_lost_mid_round_switches_to_the_fallback(env: Env,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    be = env.pod("be", "BE", [[200]])
    env.native.fail["create"] = errno.ENODEV  # SMT turned off after the probe
    caplog.set_level(logging.WARNING, logger=LOGGER)
    decision = env.run(LS_ON)
    assert decision.action == "unsupported"
    assert "no SMT siblings" in decision.numbers["unsupported_reason"]
    assert env.native.take_calls() == [PROBE, ("get", 200, T), ("create", 200, TG)]
    assert env.idle(be.cgroup_dir) == "1"
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
