"""The hook framework: name order, one owner per field, nothing half-applied, failure policies,
disabled stages and a duration per hook."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from koordlet.apis.pod import Container, Pod
from koordlet.errors import ConfigError
from koordlet.runtimehooks.framework import (
    FailurePolicy,
    Hook,
    HookCallRecorder,
    HookContext,
    HookRequest,
    HookRunner,
    Stage,
    failure_policy,
)
from koordlet.shadowmodes import ShadowModes
from koordlet.system.resources import CPU_IDLE
from tests.unit.resourceexecutor.fakes import IntendedSink

POD = Pod(uid="u1", name="p", namespace="ns", labels={}, annotations={}, kube_qos=None, phase="Pending",
          priority=None, containers=(Container("c", ""),))
CREATE = HookRequest(Stage.PRE_CREATE_CONTAINER, POD, "kubepods/podu1", POD.containers[0], "cid")


def hook(name: str, fn: Callable[[HookContext], None], *stages: Stage) -> Hook:
    return Hook(name, f"test hook {name}", frozenset(stages or (Stage.PRE_CREATE_CONTAINER,)), fn)


def setter(field: str, value: object) -> Callable[[HookContext], None]:
    return lambda ctx: ctx.set(field, value)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool, float]] = []

    def observe_hook(self, hook: str, stage: str, ok: bool, seconds: float) -> None:
        self.calls.append((hook, stage, ok, seconds))


def test_hooks_run_in_name_order_and_merge() -> None:
    order: list[str] = []

    def fn(name: str, field: str, value: object) -> Callable[[HookContext], None]:
        def run(ctx: HookContext) -> None:
            order.append(name)
            ctx.set(field, value)
        return run

    runner = HookRunner([hook("cpuset", fn("cpuset", "cpuset_cpus", "0-3")),
                         hook("batchresource", fn("batchresource", "cpu_shares", 512)),
                         hook("groupidentity", fn("groupidentity", "cpu_quota", -1))])
    result = runner.run(CREATE)
    assert order == ["batchresource", "cpuset", "groupidentity"]
    assert result.adjustment.values == {"cpu_shares": 512, "cpuset_cpus": "0-3", "cpu_quota": -1}
    assert result.adjustment.owners["cpuset_cpus"] == "cpuset"
    assert result.errors == [] and not result.failed


def test_a_field_set_by_two_hooks_is_an_error_of_the_second_and_nothing_of_it_applies() -> None:
    def second(ctx: HookContext) -> None:
        ctx.set("memory_limit", 1 << 30)
        ctx.set("cpu_shares", 2)

    runner = HookRunner([hook("a", setter("cpu_shares", 1024)), hook("b", second)])
    result = runner.run(CREATE)
    assert result.errors == ["b: cpu_shares is set by both hook a and hook b"]
    assert result.adjustment.values == {"cpu_shares": 1024}  # b's memory_limit is not half-applied


def test_map_keys_are_owned_separately() -> None:
    runner = HookRunner([hook("a", lambda c: c.set_entry("env", "A", "1")),
                         hook("b", lambda c: c.set_entry("env", "B", "2")),
                         hook("c", lambda c: c.set_entry("env", "A", "3"))])
    result = runner.run(CREATE)
    assert result.adjustment.maps == {"env": {"A": "1", "B": "2"}}
    assert result.errors == ["c: env.A is set by both hook a and hook c"]


@pytest.mark.parametrize(("policy", "ran", "failed", "values"), [
    (FailurePolicy.IGNORE, ["a", "b", "c"], False, {"cpu_shares": 2, "cpu_quota": 1000}),
    (FailurePolicy.FAIL, ["a", "b"], True, {"cpu_shares": 2}),
])
def test_failure_policies(policy: FailurePolicy, ran: list[str], failed: bool, values: dict[str, object]) -> None:
    def broken(ctx: HookContext) -> None:
        ctx.set("memory_limit", 5)
        raise ValueError("annotation garbage")

    metrics = Recorder()
    runner = HookRunner([hook("a", setter("cpu_shares", 2)), hook("b", broken), hook("c", setter("cpu_quota", 1000))],
                        policy, metrics)
    result = runner.run(CREATE)
    assert result.ran == ran and result.failed is failed
    assert result.errors == ["b: annotation garbage"]
    assert result.adjustment.values == values
    assert [(h, s, ok) for h, s, ok, _ in metrics.calls] == [
        (name, "PreCreateContainer", name != "b") for name in ran]
    assert all(seconds >= 0 for *_, seconds in metrics.calls)


def test_stages_select_hooks_and_disabled_stages_run_nothing() -> None:
    pod_hook = hook("pod", setter("cgroup_parent", "kubepods/besteffort/podu1"), Stage.PRE_RUN_POD_SANDBOX)
    runner = HookRunner([pod_hook, hook("ctr", setter("cpu_shares", 2))], disabled=[Stage.PRE_CREATE_CONTAINER])
    assert runner.run(CREATE).ran == []
    sandbox = runner.run(HookRequest(Stage.PRE_RUN_POD_SANDBOX, POD))
    assert sandbox.ran == ["pod"] and sandbox.adjustment.values == {"cgroup_parent": "kubepods/besteffort/podu1"}


def test_unknown_fields_are_the_hooks_error() -> None:
    result = HookRunner([hook("a", setter("cpu_sharez", 2))]).run(CREATE)
    assert result.errors and result.errors[0].startswith("a: hook a: unknown field 'cpu_sharez'")


def test_cgroup_writes_name_a_registered_descriptor() -> None:
    result = HookRunner([hook("idle", lambda ctx: ctx.write(CPU_IDLE, 1))]).run(CREATE)
    assert result.adjustment.writes == {"cpu_idle": 1}
    assert result.adjustment.owners == {"cgroup.cpu_idle": "idle"}
    # A descriptor the executor does not know (not the registry's object) is the hook's error.
    stray = dataclasses.replace(CPU_IDLE, description="a copy")
    result = HookRunner([hook("stray", lambda ctx: ctx.write(stray, 1))]).run(CREATE)
    assert result.errors == ["stray: hook stray: unknown cgroup resource 'cpu_idle'"]
    assert result.adjustment.writes == {}


def test_duplicate_names_and_bad_policy_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="duplicate runtime hook names: a"):
        HookRunner([hook("a", setter("cpu_shares", 2)), hook("a", setter("cpu_quota", 2))])
    assert failure_policy("") is FailurePolicy.IGNORE
    assert failure_policy("Fail") is FailurePolicy.FAIL
    with pytest.raises(ConfigError, match="must be Ignore or Fail, got 'fail'"):
        failure_policy("fail")


def test_a_hook_in_shadow_mode_decides_and_the_answer_does_not_carry_it() -> None:
    ran: list[str] = []

    def tracked(name: str, fn: Callable[[HookContext], None]) -> Callable[[HookContext], None]:
        def run(ctx: HookContext) -> None:
            ran.append(name)
            fn(ctx)
        return run

    modes, sink, recorder = ShadowModes(known=["cpuset", "batchresource", "coresched"], kind="hook"), \
        IntendedSink(), HookCallRecorder(clock=lambda: 5.0)
    runner = HookRunner([hook("cpuset", tracked("cpuset", setter("cpuset_cpus", "0-3"))),
                         hook("batchresource", tracked("batchresource", setter("cpu_shares", 512))),
                         hook("coresched", tracked("coresched", setter("memory_limit", 1 << 30)))],
                        recorder=recorder, shadow=modes, shadow_sink=sink)
    assert runner.run(CREATE, transport="nri").adjustment.values == {
        "cpu_shares": 512, "cpuset_cpus": "0-3", "memory_limit": 1 << 30}
    modes.set("cpuset", True)
    modes.set("coresched", True)
    ran.clear()
    result = runner.run(CREATE, transport="nri")
    assert result.adjustment.values == {"cpu_shares": 512}
    assert result.intended.values == {"cpuset_cpus": "0-3", "memory_limit": 1 << 30}
    assert result.intended.owners == {"cpuset_cpus": "cpuset", "memory_limit": "coresched"}
    assert ran == ["batchresource", "coresched", "cpuset"]  # every hook runs, whatever its mode
    assert sorted(sink.counted) == [("cpuset_cpus", "runtimehooks/cpuset"), ("memory_limit", "runtimehooks/coresched")]
    call = recorder.recent(1)[0]
    intended = {"cpuset_cpus": "0-3", "memory_limit": 1 << 30}
    assert (call.adjustment, call.intended) == ({"cpu_shares": 512}, intended)
    assert call.to_json()["intended"] == intended
    # The reconciler's rounds repeat the same intention for every pod each round: not counted again.
    runner.run(CREATE, transport="reconciler")
    assert len(sink.counted) == 2
    modes.set(None, True)
    assert runner.run(CREATE, transport="nri").adjustment.empty()


def test_two_hooks_setting_one_field_conflict_in_shadow_mode_too() -> None:
    modes = ShadowModes(kind="hook")
    modes.set("b", True)
    runner = HookRunner([hook("a", setter("cpu_shares", 1024)), hook("b", setter("cpu_shares", 2))], shadow=modes)
    result = runner.run(CREATE)
    assert result.errors == ["b: cpu_shares is set by both hook a and hook b"]
    assert result.adjustment.values == {"cpu_shares": 1024} and result.intended.empty()
