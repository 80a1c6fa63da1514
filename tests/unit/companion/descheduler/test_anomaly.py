"""Consecutive-round anomaly detection, alone and as LowNodeLoad uses it across rounds."""

from __future__ import annotations

from koordlet.companion.descheduler.anomaly import BasicDetector, DetectorCache, State
from koordlet.companion.descheduler.evictor import Evictor, EvictorArgs, Limits
from koordlet.companion.descheduler.framework import Handle
from koordlet.companion.descheduler.lownodeload import new_plugin
from tests.unit.companion.descheduler.scenario import Scenario


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def detector(clock: FakeClock, abnormal: int = 2, normal: int = 1, timeout: float = 60.0) -> BasicDetector:
    return BasicDetector("n1", consecutive_abnormalities=abnormal, consecutive_normalities=normal,
                         timeout_seconds=timeout, clock=clock)


def test_anomaly_needs_more_than_the_configured_consecutive_rounds() -> None:
    d = detector(FakeClock(), abnormal=2)
    assert [d.mark(False) for _ in range(3)] == [State.OK, State.OK, State.ANOMALY]


def test_a_normal_round_restarts_the_count() -> None:
    d = detector(FakeClock(), abnormal=2)
    assert d.mark(False) is State.OK and d.mark(False) is State.OK
    assert d.mark(True) is State.OK
    assert [d.mark(False) for _ in range(3)] == [State.OK, State.OK, State.ANOMALY]


def test_anomaly_ends_after_enough_normal_rounds_or_the_timeout() -> None:
    clock = FakeClock()
    d = detector(clock, abnormal=1, normal=1, timeout=60.0)
    d.mark(False)
    assert d.mark(False) is State.ANOMALY
    assert d.mark(True) is State.ANOMALY  # one normal round is not more than one
    assert d.mark(True) is State.OK

    d.mark(False)
    assert d.mark(False) is State.ANOMALY
    clock.now += 61.0
    assert d.state is State.OK
    d.mark(False)
    assert d.mark(False) is State.ANOMALY
    d.reset()
    assert d.state is State.OK and d.counter.consecutive_abnormalities == 0


def test_detector_cache_forgets_after_its_ttl() -> None:
    clock = FakeClock()
    cache = DetectorCache(300.0, clock)
    d = detector(clock)
    cache.set("n1", d)
    clock.now += 299.0
    assert cache.get("n1") is d
    clock.now += 2.0
    assert cache.get("n1") is None


def hot_and_cold() -> Scenario:
    scenario = Scenario()
    scenario.node("hot")
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024)
    scenario.node("cold")
    scenario.node("mid")
    for i in range(4):
        scenario.pod(f"mid-{i}", "mid", 1000, 1024)
    return scenario


def test_lownodeload_evicts_only_once_the_node_was_hot_for_enough_rounds() -> None:
    clock = FakeClock()
    scenario = hot_and_cold()
    scenario.metric_time = clock.now
    plugin = new_plugin({"lowThresholds": {"cpu": 20, "memory": 30}, "highThresholds": {"cpu": 50, "memory": 60},
                         "anomalyCondition": {"consecutiveAbnormalities": 2}}, Handle(None, clock=clock))
    evicted_per_round = []
    for _ in range(3):
        snap = scenario.snapshot(clock.now)
        evictor = Evictor(None, EvictorArgs(), Limits(), dry_run=True, snap=snap)
        plugin.balance(snap, evictor)
        evicted_per_round.append(len(evictor.records))
        clock.now += 60.0
        scenario.metric_time = clock.now
    # Rounds 1 and 2 only count (more than two hot rounds are needed); round 3 evicts: 12400m - 3 x 2000m
    # is under the 8000m threshold.
    assert evicted_per_round == [0, 0, 3]
