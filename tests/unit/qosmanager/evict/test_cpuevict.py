"""The cpuevict strategy over fake v1 and v2 trees, with Koordinator's arithmetic in milli-cores.

BECPUEvict worked example (8 CPUs, lower 30%, upper 50%, usage threshold 90%): BE requests 8 cores of
batch-cpu, its real limit is 2 cores -> satisfaction 2000 / 8000 = 25% <= 30%; BE uses 1.9 cores = 95%
of its limit >= 90%; release 8000 x (0.50 - 0.25) = 2000m of batch-cpu request.  BE pods:
be-a (priority 5000, request 3000m, using 0.5 -> usage/request 0.17), be-b (5000, 1000m, 0.6 -> 0.6),
be-c (5500, 4000m, 0.8 -> 0.2).  Order: be-b, be-a (same priority, higher ratio first), be-c.
be-b releases 1000m, be-a 3000m more: 4000m >= 2000m, be-c stays.

CPUEvict worked example (8 CPUs = 8000m, threshold 70%, lower 68%): the node averages 6.0 cores ->
6000 x 100 // 8000 = 75%; release 8000 x (75 - 68) // 100 = 560m of usage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources
from koordlet.metriccache import names
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins import cpuevict
from koordlet.qosmanager.plugins.cpuevict import calc
from koordlet.qosmanager.plugins.cpuevict.strategy import CPUEvict, batch_request_milli
from koordlet.statesinformer.framework import PodMeta
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

COOL = 20.0
BE_SLO = {"cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 50}
ENABLED = {"koordinator.sh/eviction-enabled": "true"}


@dataclass
class EvictionCounter:
    evictions: list[tuple[str, str, str]] = field(default_factory=list)

    def pod_eviction(self, reason: str, pod_namespace: str, pod_name: str) -> None:
        self.evictions.append((reason, pod_namespace, pod_name))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def be_pod(name: str, priority: int, request_milli: int) -> PodMeta:
    return make_pod(name, "BE", priority=priority, requests=Resources(batch_cpu_milli=request_milli))


def be_pods() -> list[PodMeta]:
    return [be_pod("be-a", 5000, 3000), be_pod("be-b", 5000, 1000), be_pod("be-c", 5500, 4000),
            make_pod("ls", "LS", priority=9000), make_pod("lsr", "LSR", priority=1000)]


BE_POD_CPU = {"uid-be-a": 0.5, "uid-be-b": 0.6, "uid-be-c": 0.8, "uid-ls": 3.0, "uid-lsr": 1.0}


@dataclass
class World:
    options: Options
    informer: FakeInformer
    backend: RecordingBackend
    metrics: EvictionCounter
    clock: FakeClock
    strategy: CPUEvict

    def be_series(self, usage: Sequence[float], request: Sequence[float], limit: Sequence[float]) -> None:
        """BE samples one second apart, the last one now."""
        cache, now = self.options.cache, self.clock()
        for name, values in ((names.BE_CPU_USAGE, usage), (names.BE_CPU_REQUEST, request),
                             (names.BE_CPU_LIMIT, limit)):
            for i, value in enumerate(values):
                cache.append(name, (), now - (len(values) - 1 - i), value)

    def node_series(self, values: Sequence[float]) -> None:
        now = self.clock()
        for i, value in enumerate(values):
            self.options.cache.append(names.NODE_CPU_USAGE, (), now - (len(values) - 1 - i), value)

    def pod_cpu(self, usage: dict[str, float] | None = None) -> None:
        put_usage(self.options, pod_cpu=BE_POD_CPU if usage is None else usage)

    def run(self, **threshold: Any) -> Decision:
        return self.strategy.run_once(slo(**threshold))

    def evicted(self) -> list[str]:
        return [key for key, _ in self.backend.evicted]

    def settle(self) -> None:
        """Past the start-up cooldown."""
        self.clock.advance(COOL)


def slo(enable: bool = True, **threshold: Any) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"enable": enable,
                                                                                       **threshold}}))


def make_world(host: FakeHost, tmp_path: Path, pods: list[PodMeta] | None = None, *,
               gates: dict[str, bool] | None = None, fail: bool = False, settle: bool = True) -> World:
    clock = FakeClock(1_700_000_000.0)
    informer = FakeInformer(be_pods() if pods is None else pods, make_node(8))
    backend = RecordingBackend(fail=fail)
    metrics = EvictionCounter()
    options = make_options(host, tmp_path, informer, clock=clock, backend=backend, metrics=metrics,
                           gates={"BECPUEvict": True} if gates is None else gates)
    strategy = cpuevict.new(options)
    assert isinstance(strategy, CPUEvict)
    world = World(options, informer, backend, metrics, clock, strategy)
    if settle:
        world.settle()
    return world


def starved(world: World) -> None:
    """The worked example: 1.9 of 2 cores used, 8 cores requested."""
    world.be_series([1.9], [8.0], [2.0])
    world.pod_cpu()


# ------------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("lower", "upper", "error"),
    [
        (30, 50, None),
        (60, 60, None),                # upper == lower is allowed (Koordinator only refuses upper < lower)
        (None, 50, "must both be set"),
        (30, None, "must both be set"),
        (0, 50, "cpuEvictBESatisfactionLowerPercent 0 must be in (0, 60]"),
        (61, 70, "cpuEvictBESatisfactionLowerPercent 61 must be in (0, 60]"),
        (30, 100, "cpuEvictBESatisfactionUpperPercent 100 must be in (0, 100)"),
        (40, 30, "cpuEvictBESatisfactionUpperPercent 30 is below cpuEvictBESatisfactionLowerPercent 40"),
    ],
)
def test_satisfaction_config(lower: int | None, upper: int | None, error: str | None) -> None:
    found = calc.satisfaction_config_error(lower, upper)
    assert found == error if error is None else (found is not None and error in found)


@pytest.mark.parametrize(
    ("request_milli", "limit_milli", "lower", "upper", "release"),
    [
        (8000, 2000, 30, 50, 2000),     # the worked example
        (8000, 2400, 30, 50, 1600),     # exactly at lower (30%): 8000 x 0.2
        (8000, 2500, 30, 50, 0),        # 31.25% > 30%
        (8000, 1000, 30, 50, 3000),     # 12.5%
        (0, 2000, 30, 50, 0),           # no BE request
        (8000, 4000, 50, 50, 0),        # satisfaction == upper: gap 0
    ],
)
def test_release_by_satisfaction(request_milli: int, limit_milli: int, lower: int, upper: int, release: int) -> None:
    assert calc.release_by_satisfaction(request_milli, limit_milli, lower, upper) == release


@pytest.mark.parametrize(
    ("usage", "limit", "threshold", "busy"),
    [
        (1900, 2000, None, True),       # 95% >= 90% default
        (1790, 2000, None, False),      # 89.5%
        (1500, 2000, 75, True),
        (100, 900, None, True),         # a limit under one core always counts as busy
        (0, 0, None, False),            # no limit at all
    ],
)
def test_be_usage_high_enough(usage: float, limit: float, threshold: int | None, busy: bool) -> None:
    assert (calc.be_usage_refusal(usage, limit, threshold) is None) is busy


@pytest.mark.parametrize(
    ("interval", "configured", "window", "enough_at"),
    [(1.0, None, 1, 1), (1.0, 10, 10, 3), (1.0, 30, 30, 10), (2.0, 1, 2, 1)],
)
def test_window_and_sample_count(interval: float, configured: int | None, window: int, enough_at: int) -> None:
    assert calc.window_seconds(interval, configured) == window
    assert calc.enough_samples(window, interval, enough_at)
    assert not calc.enough_samples(window, interval, enough_at - 1)


def test_usage_arithmetic() -> None:
    assert calc.usage_percent(6.0, 8000) == 75
    assert calc.usage_percent(5.59, 8000) == 69  # 69.875 rounds down
    assert calc.release_by_usage(8000, 75, 68) == 560
    assert calc.usage_config_error(70, None, 6000) is None
    assert calc.usage_config_error(None, None, 6000) == "cpuEvictThresholdPercent is not set"
    assert calc.usage_config_error(70, 70, 6000) == "cpuEvictLowerPercent 70 must be below cpuEvictThresholdPercent 70"
    assert calc.usage_config_error(70, None, None) == "evictEnabledPriorityThreshold is not set"


def test_batch_request_sums_containers() -> None:
    pod = make_pod("be", "BE", containers=("a", "b"), requests=Resources(batch_cpu_milli=1500))
    assert batch_request_milli(pod) == 3000
    assert batch_request_milli(make_pod("ls", "LS")) == 0


# ------------------------------------------------------------------------------------------ BECPUEvict


def test_be_satisfaction_evicts_in_order(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    starved(world)
    decision = world.run(**BE_SLO)
    assert decision.action == "evict", decision.summary
    assert world.evicted() == ["default/be-b", "default/be-a"]
    assert world.metrics.evictions == [("EvictPodByBECPUSatisfaction", "default", "be-b"),
                                       ("EvictPodByBECPUSatisfaction", "default", "be-a")]
    n = decision.numbers
    assert n["be_satisfaction_avg"] == 0.25
    assert n["release_by_avg_milli"] == 2000 and n["be_need_release_milli"] == 2000
    assert n["released_request_milli"] == 4000
    assert decision.summary == (
        "BE CPU satisfaction 25% <= 30% (BE uses 95% of its 2.00-core limit): evicted default/be-b (request "
        "1000m, using 600m, priority 5000), default/be-a (request 3000m, using 500m, priority 5000) to release "
        "2000m of batch-cpu request; 0 pending")


@pytest.mark.parametrize(
    ("usage", "requested", "limit", "threshold", "note"),
    [
        pytest.param([1.79], [8.0], [2.0], {}, "BE uses 90% of its limit, below 90% (window average)",
                     id="usage-89.5%"),
        pytest.param([2.3], [8.0], [2.5], {}, "BE satisfaction 31% above 30%", id="satisfied"),
        pytest.param([1.9], [0.0], [2.0], {}, "BE requests no batch-cpu", id="no-request"),
        pytest.param([1.5], [8.0], [2.0], {"cpuEvictBEUsageThresholdPercent": 80},
                     "BE uses 75% of its limit, below 80%", id="configured-usage-threshold"),
    ],
)
def test_be_not_starved_does_nothing(fake_cgroup_host: FakeHost, tmp_path: Path, usage: list[float],
                                     requested: list[float], limit: list[float], threshold: dict[str, int],
                                     note: str) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series(usage, requested, limit)
    world.pod_cpu()
    decision = world.run(**BE_SLO, **threshold)
    assert decision.action == "none", decision.summary
    assert note in decision.summary
    assert world.evicted() == []


def test_limit_under_one_core_skips_the_usage_check(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series([0.1], [8.0], [0.8])  # 10%: 8000 x (0.5 - 0.1) = 3200m
    world.pod_cpu()
    decision = world.run(**BE_SLO)
    assert decision.numbers["be_need_release_milli"] == 3200
    assert world.evicted() == ["default/be-b", "default/be-a"]  # 1000 + 3000 >= 3200


def test_window_average_and_current_take_the_smaller_release(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # Window 10 s: limit avg 1.5 cores (satisfaction 18.75% -> 8000 x 0.3125 = 2500m), current 1 core
    # (12.5% -> 8000 x 0.375 = 3000m): release min(2500, 3000) = 2500m.
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series([1.9] * 5 + [0.95] * 5, [8.0] * 10, [2.0] * 5 + [1.0] * 5)
    world.pod_cpu()
    decision = world.run(**BE_SLO, cpuEvictTimeWindowSeconds=10)
    n = decision.numbers
    assert (n["window_seconds"], n["be_samples"]) == (10, 10)
    assert (n["be_limit_avg_milli"], n["be_limit_milli"]) == (1500, 1000)
    assert (n["release_by_avg_milli"], n["release_by_current_milli"], n["be_need_release_milli"]) == (2500, 3000, 2500)
    assert world.evicted() == ["default/be-b", "default/be-a"]


@pytest.mark.parametrize(("samples", "acts"), [(2, False), (3, True)])
def test_window_needs_a_third_of_its_samples(fake_cgroup_host: FakeHost, tmp_path: Path, samples: int,
                                              acts: bool) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series([1.9] * samples, [8.0] * samples, [2.0] * samples)
    world.pod_cpu()
    decision = world.run(**BE_SLO, cpuEvictTimeWindowSeconds=10)
    assert (decision.action == "evict") is acts, decision.summary
    if not acts:
        assert decision.action == "skip" and "not enough BE samples: 2 in the 10 s window" in decision.summary


def test_current_usage_low_cancels(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series([1.9] * 9 + [0.5], [8.0] * 10, [2.0] * 10)  # window avg 1.76 = 88%, now 0.5 = 25%
    world.pod_cpu()
    decision = world.run(**BE_SLO, cpuEvictTimeWindowSeconds=10, cpuEvictBEUsageThresholdPercent=80)
    assert decision.action == "none"
    assert "BE uses 25% of its limit, below 80% (now)" in decision.summary


@pytest.mark.parametrize(
    "threshold",
    [{}, {"cpuEvictBESatisfactionLowerPercent": 61, "cpuEvictBESatisfactionUpperPercent": 70},
     {**BE_SLO, "cpuEvictPolicy": "evictByAllocatable"}],
)
def test_invalid_or_unsupported_config_skips(fake_cgroup_host: FakeHost, tmp_path: Path,
                                             threshold: dict[str, Any]) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    starved(world)
    decision = world.run(**threshold)
    assert decision.action == "skip", decision.summary
    assert decision.summary.startswith("BECPUEvict: ")
    assert world.evicted() == []


def test_no_be_samples_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.pod_cpu()
    decision = world.run(**BE_SLO)
    assert decision.action == "skip" and "not enough BE samples: 0" in decision.summary


def test_ls_and_lsr_pods_are_never_be_victims(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    world.be_series([0.2], [8.0], [0.2])  # 2.5%, a limit under one core: 8000 x (0.6 - 0.025) = 4600m
    world.pod_cpu()
    decision = world.run(**{**BE_SLO, "cpuEvictBESatisfactionUpperPercent": 60})
    assert world.evicted() == ["default/be-b", "default/be-a", "default/be-c"]
    assert decision.numbers["released_request_milli"] == 8000


# ------------------------------------------------------------------------------------------ pending, cooldown, failure


def test_start_up_cooldown(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, settle=False)
    world.clock.advance(19.0)
    starved(world)
    decision = world.run(**BE_SLO)
    assert decision.action == "none"
    assert decision.summary == "cooling down: last eviction (or start) 19.0 s ago, cool time 20 s"
    world.clock.advance(1.0)
    starved(world)
    assert world.run(**BE_SLO).action == "evict"


def test_pending_pods_count_their_request(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    starved(world)
    assert world.options.evictor.evict(world.informer.pod_list[1], "test", "earlier round")  # be-b, 1000m
    decision = world.run(**BE_SLO)
    assert world.evicted() == ["default/be-b", "default/be-a"]  # be-a for the remaining 1000m
    assert decision.numbers["pending_pods"] == ["default/be-b"]
    assert decision.summary.endswith("; 1 pending")


def test_no_second_eviction_while_pending_after_cooldown(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path)
    starved(world)
    world.run(**BE_SLO)
    for step in (1.0, 18.0):  # 1 s and 19 s after the eviction
        world.clock.advance(step)
        starved(world)
        assert world.run(**BE_SLO).summary.startswith("cooling down")
    world.clock.advance(1.0)  # 20 s: the cooldown is over, both victims are still listed
    starved(world)
    decision = world.run(**BE_SLO)
    assert decision.action == "none", decision.summary
    assert "covered by 2 pending eviction(s) (default/be-a, default/be-b)" in decision.summary
    assert world.evicted() == ["default/be-b", "default/be-a"]


def test_failed_backend_retries_next_round(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, fail=True)
    starved(world)
    decision = world.run(**BE_SLO)
    assert decision.action == "failed"
    assert decision.numbers["failed"] == ["default/be-b", "default/be-a", "default/be-c"]
    assert world.options.evictor.pending(world.informer.pods()) == set()
    world.backend.fail = False
    world.clock.advance(1.0)  # no cooldown after a round with no eviction
    starved(world)
    assert world.run(**BE_SLO).action == "evict"


# ------------------------------------------------------------------------------------------ CPUEvict


def usage_pods() -> list[PodMeta]:
    return [
        make_pod("ls-x", "LS", priority=5000, labels=ENABLED),
        make_pod("be-y", "BE", priority=5000, labels=ENABLED),
        make_pod("ls-prod", "LS", priority=9000, labels=ENABLED),     # above evictEnabledPriorityThreshold
        make_pod("be-nolabel", "BE", priority=5000),                  # not eviction-enabled
        make_pod("be-nosample", "BE", priority=1000, labels=ENABLED),  # no CPU sample: not a candidate
    ]


USAGE_POD_CPU = {"uid-ls-x": 0.4, "uid-be-y": 0.3, "uid-ls-prod": 3.0, "uid-be-nolabel": 2.0}
USAGE_SLO = {"cpuEvictThresholdPercent": 70, "evictEnabledPriorityThreshold": 6000}


@pytest.mark.parametrize(
    ("node", "threshold", "evicted", "release"),
    [
        pytest.param(6.0, {}, ["default/ls-x", "default/be-y"], 560, id="75%-release-560m"),
        pytest.param(5.59, {}, [], None, id="69%-below"),
        pytest.param(6.0, {"cpuEvictThresholdPercent": 75, "cpuEvictLowerPercent": 72}, ["default/ls-x"], 240,
                     id="75%-lower-72-release-240m"),
    ],
)
def test_node_usage_evicts_enabled_low_priority_pods(fake_cgroup_host: FakeHost, tmp_path: Path, node: float,
                                                     threshold: dict[str, int], evicted: list[str],
                                                     release: int | None) -> None:
    world = make_world(fake_cgroup_host, tmp_path, usage_pods(), gates={"CPUEvict": True})
    world.node_series([node])
    world.pod_cpu(USAGE_POD_CPU)
    decision = world.run(**{**USAGE_SLO, **threshold})
    assert world.evicted() == evicted, decision.summary
    assert decision.numbers.get("usage_need_release_milli") == release
    assert all(e[0] == "EvictPodByNodeCPUUsage" for e in world.metrics.evictions)


def test_eviction_priority_annotation_goes_first(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = usage_pods()
    pods[1] = make_pod("be-y", "BE", priority=5000, labels=ENABLED,
                       annotations={"koordinator.sh/eviction-priority": "-1"})
    world = make_world(fake_cgroup_host, tmp_path, pods, gates={"CPUEvict": True})
    world.node_series([6.0])
    world.pod_cpu(USAGE_POD_CPU)
    world.run(**{**USAGE_SLO, "cpuEvictThresholdPercent": 75, "cpuEvictLowerPercent": 72})  # 240m: be-y's 300m
    assert world.evicted() == ["default/be-y"]


def test_cpu_evict_needs_its_config(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = make_world(fake_cgroup_host, tmp_path, usage_pods(), gates={"CPUEvict": True})
    world.node_series([6.0])
    world.pod_cpu(USAGE_POD_CPU)
    decision = world.run(cpuEvictThresholdPercent=70)
    assert decision.action == "skip"
    assert decision.summary == "CPUEvict: invalid config: evictEnabledPriorityThreshold is not set"


def test_both_triggers_share_the_victims(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = [*be_pods()[:3], make_pod("ls-x", "LS", priority=5000, labels=ENABLED)]
    world = make_world(fake_cgroup_host, tmp_path, pods, gates={"BECPUEvict": True, "CPUEvict": True})
    starved(world)
    world.node_series([6.0])
    world.pod_cpu({**BE_POD_CPU, "uid-ls-x": 0.4})
    decision = world.run(**BE_SLO, **USAGE_SLO)
    # BECPUEvict evicts be-b and be-a (600m + 500m of usage): CPUEvict's 560m is already released.
    assert world.evicted() == ["default/be-b", "default/be-a"]
    assert decision.numbers["released_used_milli"] == pytest.approx(1100)
    assert decision.numbers["triggers"] == ["BECPUEvict", "CPUEvict"]


@pytest.mark.parametrize(
    ("gates", "enable", "expected"),
    [({"BECPUEvict": True}, True, True), ({"CPUEvict": True}, True, True), ({"BECPUEvict": True}, False, False),
     ({}, True, False)],
)
def test_enabled(fake_cgroup_host: FakeHost, tmp_path: Path, gates: dict[str, bool], enable: bool,
                 expected: bool) -> None:
    world = make_world(fake_cgroup_host, tmp_path, gates=gates)
    assert world.strategy.enabled(slo(enable=enable)) is expected
    assert world.strategy.interval() == 1.0
