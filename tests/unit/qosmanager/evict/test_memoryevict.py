"""The memoryevict strategy over fake v1 and v2 trees, with Koordinator's integer arithmetic.

Worked example (node base, 16 GiB = 17179869184 bytes, threshold 70%, lower 70 - 2 = 68%): the node uses
12.5 GiB -> 12.5 * 100 // 16 = 78%; release 17179869184 * (78 - 68) // 100 = 1717986918 bytes (1.6 GiB).
BE pods: be-mid (priority 5000, 2 GiB), be-low (5000, 1 GiB), be-big (5500, 3 GiB); the LS pod (6 GiB)
and the LSR pod (priority 1000!, 4 GiB) are never BEMemoryEvict victims.  Victim order: be-mid, be-low
(same priority, larger first), be-big; be-mid alone releases 2 GiB >= 1.6 GiB.

Failure policy: a failed eviction (backend error) releases nothing, leaves no pending pod and does not
start the cooldown; the round goes on to the next candidate, and the next round (one interval later)
tries the failed pods again."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager import evictpick, helpers
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins import memoryevict
from koordlet.qosmanager.plugins.memoryevict import calc
from koordlet.qosmanager.plugins.memoryevict.strategy import MemoryEvict
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.resources import MEMORY_LIMIT
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import (
    FakeClock,
    FakeInformer,
    RecordingBackend,
    make_node,
    make_options,
    make_pod,
    put_usage,
)

GIB = 1 << 30
MIB = 1 << 20
NODE_BYTES = 16 * GIB
NEED_78_68 = 1717986918


@dataclass
class EvictionCounter:
    evictions: list[tuple[str, str, str]] = field(default_factory=list)

    def pod_eviction(self, reason: str, pod_namespace: str, pod_name: str) -> None:
        self.evictions.append((reason, pod_namespace, pod_name))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def standard_pods() -> list[PodMeta]:
    return [
        make_pod("be-low", "BE", priority=5000),
        make_pod("be-big", "BE", priority=5500),
        make_pod("be-mid", "BE", priority=5000),
        make_pod("ls", "LS", priority=9000),
        make_pod("lsr", "LSR", priority=1000),
    ]


STANDARD_USAGE = {"uid-be-low": 1 * GIB, "uid-be-big": 3 * GIB, "uid-be-mid": 2 * GIB, "uid-ls": 6 * GIB,
                  "uid-lsr": 4 * GIB}


@dataclass
class World:
    host: FakeHost
    options: Options
    informer: FakeInformer
    backend: RecordingBackend
    metrics: EvictionCounter
    clock: FakeClock
    strategy: MemoryEvict

    def usage(self, node: float | None, pods: Mapping[str, float] | None = None) -> None:
        put_usage(self.options, node_memory=node, pod_memory=STANDARD_USAGE if pods is None else pods)

    def run(self, **threshold: Any) -> Decision:
        return self.strategy.run_once(slo(**threshold))

    def evicted(self) -> list[str]:
        return [key for key, _ in self.backend.evicted]


def slo(enable: bool = True, **threshold: Any) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"enable": enable,
                                                                                       **threshold}}))


def make_world(host: FakeHost, tmp_path: Path, pods: list[PodMeta] | None = None, *,
               gates: dict[str, bool] | None = None, config: QoSManagerConfig | None = None,
               fail: bool = False) -> World:
    clock = FakeClock(1_700_000_000.0)
    informer = FakeInformer(standard_pods() if pods is None else pods, make_node(memory_bytes=NODE_BYTES))
    backend = RecordingBackend(fail=fail)
    metrics = EvictionCounter()
    options = make_options(host, tmp_path, informer, clock=clock, backend=backend, metrics=metrics,
                           gates={"BEMemoryEvict": True} if gates is None else gates, config=config)
    strategy = memoryevict.new(options)
    assert isinstance(strategy, MemoryEvict)
    return World(host, options, informer, backend, metrics, clock, strategy)


# ------------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("used", "capacity", "threshold", "lower", "usage_pct", "release"),
    [
        (int(12.5 * GIB), NODE_BYTES, 70, None, 78, NEED_78_68),       # lower = 70 - 2
        (12 * GIB, NODE_BYTES, 75, None, 75, 343597383),               # exactly at the threshold: 16 GiB x 2%
        (int(12.5 * GIB), NODE_BYTES, 70, 60, 78, 3092376453),         # 16 GiB x 18%
        (800 * MIB, GIB, 70, None, 78, 107374182),                     # the kubepods example: 1 GiB x 10%
        (int(11.9 * GIB), NODE_BYTES, 75, None, 74, None),             # 74.37% rounds down, below 75
    ],
)
def test_calc(used: int, capacity: int, threshold: int, lower: int | None, usage_pct: int,
              release: int | None) -> None:
    assert calc.usage_percent(used, capacity) == usage_pct
    effective = calc.lower_percent(threshold, lower)
    assert effective == (threshold - 2 if lower is None else lower)
    if release is not None:
        assert calc.release_bytes(capacity, usage_pct, effective) == release


# ------------------------------------------------------------------------------------------ one round


@pytest.mark.parametrize(
    ("node_used", "threshold", "action", "evicted", "need"),
    [
        pytest.param(int(12.5 * GIB), {}, "evict", ["default/be-mid"], NEED_78_68, id="78%-default-threshold"),
        pytest.param(11 * GIB, {}, "none", [], None, id="68%-below"),
        pytest.param(12 * GIB, {"memoryEvictThresholdPercent": 75}, "evict", ["default/be-mid"], 343597383,
                     id="75%-at-threshold"),
        pytest.param(int(12.5 * GIB), {"memoryEvictThresholdPercent": 79}, "none", [], None, id="78%-below-79"),
        pytest.param(int(12.5 * GIB), {"memoryEvictLowerPercent": 60}, "evict", ["default/be-mid", "default/be-low"],
                     3092376453, id="lower-60-two-victims"),
        pytest.param(int(12.5 * GIB), {"memoryEvictLowerPercent": 10}, "evict",
                     ["default/be-mid", "default/be-low", "default/be-big"], 11682311045, id="every-BE-pod-never-LS"),
    ],
)
def test_threshold_and_victim_order(fake_cgroup_host: FakeHost, tmp_path: Path, node_used: int,
                                    threshold: dict[str, int], action: str, evicted: list[str],
                                    need: int | None) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(node_used)
    decision = world.run(**threshold)
    assert decision.action == action, decision.summary
    assert world.evicted() == evicted
    assert [e[2] for e in world.metrics.evictions] == [k.split("/")[1] for k in evicted]
    assert all(e[0] == "EvictPodByNodeMemoryUsage" for e in world.metrics.evictions)
    assert decision.numbers.get("need_release_bytes") == need
    if evicted:
        assert decision.numbers["released_bytes"] == sum(STANDARD_USAGE["uid-" + k.split("/")[1]] for k in evicted)


def test_summary_names_the_numbers(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert decision.summary == ("node memory 78% >= 70%: evicted default/be-mid (2.0 GiB, priority 5000) to "
                                "release 1.6 GiB; 0 pending")
    assert decision.numbers["usage_percent"] == 78
    assert decision.numbers["lower_percent"] == 68
    assert decision.numbers["capacity_bytes"] == NODE_BYTES
    assert decision.numbers["evicted"] == [{"pod": "default/be-mid", "usage_bytes": 2 * GIB, "priority": 5000,
                                            "trigger": "BEMemoryEvict"}]


def test_still_short_when_be_pods_run_out(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    decision = world.run(memoryEvictLowerPercent=10)
    # 16 GiB x 68% = 11682311045 needed, 6 GiB of BE released: 5239860101 bytes (4.9 GiB) short; LS/LSR untouched.
    assert decision.summary.endswith("; 0 pending; still 4.9 GiB short")
    assert "default/ls" not in world.evicted() and "default/lsr" not in world.evicted()


def test_pods_without_a_sample_go_last_within_their_priority(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    usage = dict(STANDARD_USAGE)
    del usage["uid-be-mid"]  # no fresh sample: counts 0 and follows be-low
    world.usage(int(12.5 * GIB), usage)
    world.run(memoryEvictLowerPercent=60)  # 2.88 GiB: be-low 1 GiB, be-mid 0, be-big 3 GiB
    assert world.evicted() == ["default/be-low", "default/be-mid", "default/be-big"]


def test_terminated_pods_are_not_victims(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = [make_pod("be-done", "BE", priority=1000, phase="Succeeded"), make_pod("be-low", "BE", priority=5000)]
    world = make_world(fake_cgroup_host, tmp_path, pods)
    world.usage(int(12.5 * GIB), {"uid-be-done": 5 * GIB, "uid-be-low": 1 * GIB})
    decision = world.run()
    assert world.evicted() == ["default/be-low"]
    assert decision.summary.endswith("; 0 pending; still 614.4 MiB short")


# ------------------------------------------------------------------------------------------ pending and cooldown


def test_pending_pod_counts_as_released_and_is_not_evicted_twice(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    assert world.run().action == "evict"
    assert world.evicted() == ["default/be-mid"]
    # The pod is still listed (the runtime is stopping it) and the samples still show the pressure.
    world.clock.advance(4.0)  # the cooldown is over
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert decision.action == "none", decision.summary
    assert world.evicted() == ["default/be-mid"]
    assert decision.numbers["pending_pods"] == ["default/be-mid"]
    assert decision.numbers["pending_released_bytes"] == 2 * GIB
    assert decision.summary == ("node memory 78% >= 70%: the 1.6 GiB to release is covered by 1 pending "
                                "eviction(s) (default/be-mid: 2.0 GiB)")


def test_a_pod_being_deleted_counts_as_pending_after_a_restart(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # A koordlet killed right after its eviction was granted starts with no pending record; kubelet lists the
    # victim with a deletionTimestamp while it stops it.  Evicting another pod for the same pressure would be a
    # storm: the deleting pod's memory counts as released and it is not evicted again.
    pods = standard_pods()
    pods[2] = dataclasses.replace(pods[2], pod=dataclasses.replace(pods[2].pod,
                                                                     deletion_timestamp="2026-11-26T02:00:00Z"))
    assert pods[2].pod.name == "be-mid" and pods[2].pod.deleting
    world = make_world(fake_cgroup_host, tmp_path, pods)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert world.evicted() == [], decision.summary
    assert decision.numbers["pending_pods"] == ["default/be-mid"]
    assert decision.numbers["pending_released_bytes"] == 2 * GIB
    # Deleting covers no more than it releases: a lower bound needing 4.48 GiB takes be-low and be-big too.
    world.clock.advance(4.0)
    world.run(memoryEvictLowerPercent=50)
    assert world.evicted() == ["default/be-low", "default/be-big"]


def test_pending_release_is_subtracted_before_the_next_victim(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    be_big = world.informer.pod_list[1]
    assert world.options.evictor.evict(be_big, "test", "evicted before this round")  # 3 GiB pending
    decision = world.run(memoryEvictLowerPercent=50)  # 16 GiB x 28% = 4.48 GiB; 3 GiB pending
    assert world.evicted() == ["default/be-big", "default/be-mid"]  # be-mid releases the last 1.48 GiB
    assert decision.numbers["released_bytes"] == 5 * GIB
    assert decision.summary.endswith("; 1 pending")


def test_pod_that_left_is_no_longer_pending(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    world.run()
    world.informer.pod_list = [p for p in world.informer.pod_list if p.pod.name != "be-mid"]
    world.clock.advance(4.0)
    world.usage(int(12.5 * GIB))
    decision = world.run()  # pressure remains after be-mid left: 1 GiB + 3 GiB for the 1.6 GiB
    assert world.evicted() == ["default/be-mid", "default/be-low", "default/be-big"]
    assert decision.numbers["pending_pods"] == []


@pytest.mark.parametrize(("after", "acts"), [(1.0, False), (3.9, False), (4.0, True)])
def test_cooldown_counts_from_the_last_eviction(fake_cgroup_host: FakeHost, tmp_path: Path, after: float,
                                                acts: bool) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    world.run()
    world.informer.pod_list = [p for p in world.informer.pod_list if p.pod.name != "be-mid"]  # be-mid is gone
    world.clock.advance(after)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert (decision.action == "evict") is acts, decision.summary
    assert world.evicted() == (["default/be-mid", "default/be-low", "default/be-big"] if acts
                               else ["default/be-mid"])
    if not acts:
        assert decision.summary.startswith(f"cooling down: last eviction {after:.1f} s ago, cool time 4 s")


def test_configured_cool_time(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, config=QoSManagerConfig(memory_evict_cool_time_seconds=10))
    world.usage(int(12.5 * GIB))
    world.run()
    world.informer.pod_list.pop(2)  # be-mid
    world.clock.advance(9.0)
    world.usage(int(12.5 * GIB))
    assert world.run().action == "none"
    world.clock.advance(1.0)
    world.usage(int(12.5 * GIB))
    assert world.run().action == "evict"


# ------------------------------------------------------------------------------------------ backend failure


def test_failed_backend_leaves_nothing_pending_and_retries_next_round(fake_cgroup_host: FakeHost,
                                                                      tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, fail=True)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert decision.action == "failed", decision.summary
    # Every BE pod was tried in order; none released anything.
    assert decision.numbers["failed"] == ["default/be-mid", "default/be-low", "default/be-big"]
    assert world.options.evictor.pending(world.informer.pods()) == set()
    assert world.metrics.evictions == []
    assert world.strategy.last_eviction is None  # no cooldown
    world.backend.fail = False
    world.clock.advance(1.0)  # the next interval
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert decision.action == "evict" and world.evicted() == ["default/be-mid"]


def test_partial_failure_moves_on_to_the_next_victim(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    @dataclass
    class FailFirst(RecordingBackend):
        def evict(self, pod: PodMeta, reason: str, message: str) -> None:
            if pod.pod.name == "be-mid":
                from koordlet.qosmanager.evictor import EvictionFailed

                raise EvictionFailed("container runtime timed out")
            super().evict(pod, reason, message)

    world = make_world(fake_cgroup_host, tmp_path)
    backend = FailFirst()
    world.options.evictor.backend = backend
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert [k for k, _ in backend.evicted] == ["default/be-low", "default/be-big"]  # 1 GiB < 1.6 GiB, then 3
    assert decision.action == "evict"
    assert decision.summary.endswith("; 0 pending; eviction failed for default/be-mid")


def test_the_way_to_evict_down_stops_the_walk_until_it_is_back(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """The companion answering UNAVAILABLE (restarting, its pod view not listed yet) for the first victim must
    not get the second evicted in its place when it answers again a moment later."""

    @dataclass
    class Down(RecordingBackend):
        down: bool = True

        def evict(self, pod: PodMeta, reason: str, message: str) -> None:
            if self.down:
                from koordlet.qosmanager.evictor import EvictionFailed

                self.down = False  # back for the next call: the walk must not make one
                raise EvictionFailed("EvictPod: UNAVAILABLE: the companion is starting", unreachable=True)
            super().evict(pod, reason, message)

    world = make_world(fake_cgroup_host, tmp_path)
    backend = Down()
    world.options.evictor.backend = backend
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert backend.evicted == [], "no other pod tried while the way to evict is down"
    assert decision.action == "failed", decision.summary
    assert decision.numbers["failed"] == ["default/be-mid"]
    assert "the way to evict is down, no other pod tried: EvictPod: UNAVAILABLE" in decision.summary
    assert world.strategy.last_eviction is None  # no cooldown: the next round retries
    world.clock.advance(1.0)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert decision.action == "evict" and [k for k, _ in backend.evicted] == ["default/be-mid"]


# ------------------------------------------------------------------------------------------ triggers and gates


@pytest.mark.parametrize(
    ("gates", "enable", "expected"),
    [
        ({"BEMemoryEvict": True}, True, True),
        ({"MemoryEvict": True}, True, True),
        ({"BEMemoryEvict": True}, False, False),
        ({}, True, False),
        ({"BEMemoryEvict": False, "MemoryEvict": False}, True, False),
    ],
)
def test_enabled_needs_a_gate_and_the_nodeslo_switch(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                     gates: dict[str, bool], enable: bool, expected: bool) -> None:
    world = make_world(fake_cgroup_host, tmp_path, gates=gates)
    assert world.strategy.enabled(slo(enable=enable)) is expected


def test_disabled_round_does_nothing(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    decision = world.strategy.run_once(slo(), enabled=False)
    assert decision.action == "none" and world.evicted() == []


def usage_variant_pods() -> list[PodMeta]:
    enabled = {"koordinator.sh/eviction-enabled": "true"}
    return [
        make_pod("ls-cheap", "LS", priority=5900, labels=enabled),
        make_pod("ls-sub", "LS", priority=5900, labels={**enabled, "koordinator.sh/priority": "1"}),
        make_pod("ls-prod", "LS", priority=9000, labels=enabled),       # above the priority threshold
        make_pod("be-unlabelled", "BE", priority=5000),                  # not eviction-enabled
        make_pod("be-nosample", "BE", priority=5000, labels=enabled),   # no usage sample
        make_pod("be-first", "BE", priority=5900, labels=enabled, annotations={
            "koordinator.sh/eviction-priority": "-1"}),
    ]


USAGE_VARIANT = {"uid-ls-cheap": 2 * GIB, "uid-ls-sub": 1 * GIB, "uid-ls-prod": 5 * GIB, "uid-be-unlabelled": 4 * GIB,
                 "uid-be-first": 512 * MIB}


def test_memory_evict_variant_picks_enabled_low_priority_pods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, usage_variant_pods(), gates={"MemoryEvict": True})
    world.usage(int(12.5 * GIB), USAGE_VARIANT)
    decision = world.run(evictEnabledPriorityThreshold=6000, memoryEvictLowerPercent=60)  # 2.88 GiB
    # eviction-priority -1 first, then by koordinator.sh/priority label (1 < 5900), then usage.
    assert world.evicted() == ["default/be-first", "default/ls-sub", "default/ls-cheap"]
    assert decision.numbers["triggers"] == ["MemoryEvict"]


def test_memory_evict_variant_needs_the_priority_threshold(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, usage_variant_pods(), gates={"MemoryEvict": True})
    world.usage(int(12.5 * GIB), USAGE_VARIANT)
    decision = world.run()
    assert decision.action == "skip"
    assert "evictEnabledPriorityThreshold is not set" in decision.summary
    assert world.evicted() == []


def test_both_triggers_share_one_release(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = [*standard_pods()[:3], make_pod("ls-cheap", "LS", priority=5900,
                                           labels={"koordinator.sh/eviction-enabled": "true"})]
    world = make_world(fake_cgroup_host, tmp_path, pods, gates={"BEMemoryEvict": True, "MemoryEvict": True})
    world.usage(int(12.5 * GIB), {**STANDARD_USAGE, "uid-ls-cheap": 2 * GIB})
    world.run(evictEnabledPriorityThreshold=6000, memoryEvictLowerPercent=40)  # 16 GiB x 38% = 6.08 GiB
    # BEMemoryEvict releases 6 GiB from every BE pod; MemoryEvict adds the LS pod for the rest.
    assert world.evicted() == ["default/be-mid", "default/be-low", "default/be-big", "default/ls-cheap"]


@pytest.mark.parametrize(
    ("annotation", "evicted", "ignored"),
    [
        ('["BEMemoryEvict"]', ["default/be-mid"], []),
        ('["MemoryEvict"]', ["default/be-low", "default/be-big"], ["annotation koordinator.sh/eviction-policy allows "
                                                                   "only MemoryEvict"]),
        ("not json", ["default/be-low", "default/be-big"], ["is not a JSON list of strings"]),
    ],
)
def test_eviction_policy_annotation(fake_cgroup_host: FakeHost, tmp_path: Path, annotation: str,
                                    evicted: list[str], ignored: list[str]) -> None:
    pods = standard_pods()
    pods[2] = make_pod("be-mid", "BE", priority=5000, annotations={"koordinator.sh/eviction-policy": annotation})
    world = make_world(fake_cgroup_host, tmp_path, pods)
    world.usage(int(12.5 * GIB))
    decision = world.run()
    assert world.evicted() == evicted
    assert len(decision.numbers["ignored"]) == len(ignored)
    for note, text in zip(decision.numbers["ignored"], ignored, strict=True):
        assert note.startswith("default/be-mid: ") and text in note


# ------------------------------------------------------------------------------------------ bad input


def test_no_node_sample_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(None)
    decision = world.run()
    assert decision.action == "skip" and "no fresh node memory sample" in decision.summary


def test_stale_node_sample_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    world.clock.advance(3 * 5.0 + 0.1)  # older than 3 memory-collect intervals
    decision = world.run()
    assert decision.action == "skip" and world.evicted() == []


def test_lower_not_below_threshold_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # The NodeSLO parser already rejects this; a spec built in code must not evict either.
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    spec = slo()
    assert spec.resource_used_threshold_with_be is not None
    spec = dataclasses.replace(spec, resource_used_threshold_with_be=dataclasses.replace(
        spec.resource_used_threshold_with_be, memory_evict_lower_percent=70))
    decision = world.strategy.run_once(spec)
    assert decision.action == "skip"
    assert decision.summary == "memoryEvictLowerPercent 70 must be below memoryEvictThresholdPercent 70"
    assert world.evicted() == []


def test_threshold_zero_is_koordinators_valid_extreme(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.usage(int(12.5 * GIB))
    decision = world.run(memoryEvictThresholdPercent=0)  # lower -2: release 16 GiB x 80% = 12.8 GiB
    assert decision.numbers["need_release_bytes"] == 13743895347
    assert world.evicted() == ["default/be-mid", "default/be-low", "default/be-big"]


# ------------------------------------------------------------------------------------------ kubepods base


def kubepods_world(host: FakeHost, tmp_path: Path, limit: str | None) -> World:
    pods = [make_pod("ls", "LS", priority=9000), make_pod("be-a", "BE", priority=5000),
            make_pod("be-b", "BE", priority=5000)]
    world = make_world(host, tmp_path, pods, config=QoSManagerConfig(memory_evict_base="kubepods"))
    host.mkdir_cgroup("kubepods")
    if limit is not None:
        host.write_cgroup("kubepods", MEMORY_LIMIT, limit)
    # 800 MiB used of a 1 GiB limit (78%); the node is nearly idle and would never trigger.
    world.usage(2 * GIB, {"uid-ls": 100 * MIB, "uid-be-a": 500 * MIB, "uid-be-b": 200 * MIB})
    return world


def test_kubepods_base_uses_the_parent_limit_and_pod_usage(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = kubepods_world(fake_cgroup_host, tmp_path, str(GIB))
    decision = world.run()
    assert decision.action == "evict", decision.summary
    assert world.evicted() == ["default/be-a"]  # 500 MiB >= 1 GiB x 10% = 102.4 MiB; be-b stays
    assert decision.numbers["need_release_bytes"] == 107374182
    assert decision.numbers["used_bytes"] == 800 * MIB and decision.numbers["capacity_bytes"] == GIB
    assert decision.numbers["source"] == world.options.reader.path("memory_limit", "kubepods")
    assert decision.summary.startswith("kubepods memory 78% >= 70%: evicted default/be-a (500.0 MiB, priority 5000)")


def test_kubepods_base_ignores_pods_outside_kubepods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = kubepods_world(fake_cgroup_host, tmp_path, str(GIB))
    outside = make_pod("host-app", "LS", priority=9000)
    world.informer.pod_list.append(PodMeta(pod=outside.pod, cgroup_dir="system.slice/app.service",
                                           containers=outside.containers, source="config"))
    put_usage(world.options, pod_memory={"uid-host-app": 900 * MIB})
    decision = world.run()
    assert decision.numbers["used_bytes"] == 800 * MIB


@pytest.mark.parametrize(
    ("limit", "why"),
    [
        ("garbage\n", "cannot read the kubepods memory limit in kubepods"),
        ("unlimited", "unlimited"),
        (None, "cannot read the kubepods memory limit in kubepods"),
        ("0\n", "is 0"),
        ("-5\n", "is -5"),
    ],
)
def test_kubepods_base_with_a_bad_limit_file_skips(fake_cgroup_host: FakeHost, tmp_path: Path, limit: str | None,
                                                   why: str) -> None:
    if limit == "unlimited":
        limit = "max\n" if fake_cgroup_host.mode == "v2" else "9223372036854771712\n"
    world = kubepods_world(fake_cgroup_host, tmp_path, limit)
    if limit is None:
        fake_cgroup_host.remove_cgroup_file("kubepods", MEMORY_LIMIT)
    decision = world.run()
    assert decision.action == "skip", decision.summary
    assert why in decision.summary
    assert world.options.reader.path("memory_limit", "kubepods") in decision.summary  # names the file
    assert world.evicted() == []


def test_kubepods_base_under_a_kube_parent(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    clock = FakeClock(1_700_000_000.0)
    pods = [make_pod("be-a", "BE", priority=5000, kube_parent="test/parent")]
    informer = FakeInformer(pods, make_node(memory_bytes=NODE_BYTES))
    backend = RecordingBackend()
    options = make_options(fake_cgroup_host, tmp_path, informer, clock=clock, backend=backend,
                           gates={"BEMemoryEvict": True}, kube_parent="test/parent",
                           config=QoSManagerConfig(memory_evict_base="kubepods"))
    fake_cgroup_host.mkdir_cgroup("test/parent/kubepods")
    fake_cgroup_host.write_cgroup("test/parent/kubepods", MEMORY_LIMIT, str(GIB))
    put_usage(options, pod_memory={"uid-be-a": 900 * MIB})
    decision = memoryevict.new(options).run_once(slo())
    assert decision.action == "evict", decision.summary
    assert backend.evicted == [("default/be-a", "EvictPodByNodeMemoryUsage")]


def test_evictpick_priority_defaults() -> None:
    # Koordinator GetPodPriorityValueWithDefault: spec priority, else the class default.
    assert evictpick.priority_with_default(make_pod("a", "BE", priority=5100).pod) == 5100
    assert evictpick.priority_with_default(make_pod("a", "BE").pod) == 5500
    assert evictpick.priority_with_default(make_pod("a", "BE", priority=0).pod) == 5500
    assert evictpick.priority_with_default(make_pod("a", "LS").pod) == 9500
    assert evictpick.priority_with_default(
        make_pod("a", "LS", labels={"koordinator.sh/priority-class": "koord-mid"}).pod) == 7500


# ------------------------------------------------------------------------------------------ woken rounds


def write_anon(world: World, anon: Sequence[int], page_cache: int = 0) -> None:
    """Each pod's memory.stat (in the informer's order) with ``anon`` bytes of anonymous memory."""
    prefix = "total_" if world.options.layout.controller_version == 1 else ""
    for meta, used in zip(world.informer.pod_list, anon, strict=True):
        world.host.write_memory_stat(meta.cgroup_dir, **{f"{prefix}active_anon": used,
                                                         f"{prefix}inactive_file": page_cache})


def test_a_woken_round_reads_usage_from_the_files_not_the_cache(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """A pressure trigger wakes memoryevict because usage just changed: the cache's pod samples (every
    memoryIntervalSeconds) still say 20%, the pods' memory.stat says 78%."""
    world = kubepods_world(fake_cgroup_host, tmp_path, str(GIB))
    world.clock.advance(1.0)
    world.usage(2 * GIB, {"uid-ls": 100 * MIB, "uid-be-a": 50 * MIB, "uid-be-b": 50 * MIB})
    write_anon(world, (100 * MIB, 500 * MIB, 200 * MIB), page_cache=300 * MIB)
    assert world.run().action == "none"  # a regular round believes the cache
    decision = world.strategy.run_woken(slo())
    assert decision.action == "evict", decision.summary
    assert world.evicted() == ["default/be-a"] and decision.numbers["used_bytes"] == 800 * MIB
    assert world.strategy.woken is False  # only that round


def test_a_woken_round_still_cools_down(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = kubepods_world(fake_cgroup_host, tmp_path, str(GIB))
    write_anon(world, (100 * MIB, 500 * MIB, 200 * MIB))
    assert world.strategy.run_woken(slo()).action == "evict"
    world.informer.pod_list = [p for p in world.informer.pod_list if p.pod.name != "be-a"]
    world.clock.advance(1.0)
    decision = world.strategy.run_woken(slo())
    assert decision.action == "none" and decision.summary.startswith("cooling down"), decision.summary
    assert world.evicted() == ["default/be-a"]


def test_fresh_usage_reads_the_files_now_and_follows_the_pods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = kubepods_world(fake_cgroup_host, tmp_path, str(GIB))
    fake_cgroup_host.write_proc("meminfo", "MemTotal:       4194304 kB\nMemAvailable:   1048576 kB\n")
    fresh = helpers.FreshMemory(world.options)
    pods = list(world.informer.pod_list)
    write_anon(world, (100 * MIB, 500 * MIB, 200 * MIB))
    first = fresh.usage(pods)
    assert first.node == 3 * GIB
    assert first.pods == {"uid-ls": 100 * MIB, "uid-be-a": 500 * MIB, "uid-be-b": 200 * MIB}
    write_anon(world, (100 * MIB, 600 * MIB, 200 * MIB))
    ghost = make_pod("ghost", "BE")  # listed, and its cgroup not made (or gone already)
    again = fresh.usage([*pods, ghost])
    assert again.pods == {"uid-ls": 100 * MIB, "uid-be-a": 600 * MIB, "uid-be-b": 200 * MIB}  # ghost: absent
    fresh.usage(pods[:1])
    assert len(fresh._files) == 2  # meminfo and the one pod still asked for: the others' files are closed
