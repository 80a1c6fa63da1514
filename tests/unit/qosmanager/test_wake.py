"""Woken rounds (issue 23): a wake runs the strategy at once, besides its interval; woken rounds of one strategy
are ``wake_debounce`` apart however many wakes come; a woken eviction round still cools down."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.qosmanager.framework import Action, Decision
from koordlet.qosmanager.manager import QoSManager
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_options


@dataclass
class Woke:
    """A strategy recording whether each round was a woken one (:class:`Wakeable`)."""

    name: str = "memoryevict"
    every: float = 10.0
    act: bool = False
    rounds: list[str] = field(default_factory=list)

    def enabled(self, slo: NodeSLOSpec) -> bool:
        return True

    def interval(self) -> float:
        return self.every

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        self.rounds.append("regular")
        return Decision(self.name, 0.0, Action.EVICT if self.act else Action.NONE, "r")

    def run_woken(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        self.rounds.append("woken")
        return Decision(self.name, 0.0, Action.EVICT if self.act else Action.NONE, "w")


@dataclass
class WokenMetrics:
    woken: list[tuple[str, bool]] = field(default_factory=list)

    def woken_round(self, strategy: str, acted: bool) -> None:
        self.woken.append((strategy, acted))

    def __getattr__(self, name: str) -> object:
        return lambda *args: None


def _manager(fake_host: FakeHost, tmp_path: Path, strategy: Woke, debounce: float = 0.5
             ) -> tuple[QoSManager, FakeClock, WokenMetrics]:
    metrics = WokenMetrics()
    options = make_options(fake_host, tmp_path, FakeInformer(), metrics=metrics)
    mono = FakeClock(100.0)
    manager = QoSManager(options, [strategy], NodeSLOHolder(), monotonic=mono, wake_debounce=debounce)
    manager.run_once()  # the first regular round; the next is 10 s away
    return manager, mono, metrics


def test_a_wake_runs_the_strategy_at_once_and_keeps_its_schedule(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = Woke()
    manager, mono, metrics = _manager(fake_host, tmp_path, strategy)
    mono.advance(2.0)
    assert manager.run_once() == pytest.approx(8.0)  # nothing due, nothing woken
    manager.wake(["memoryevict"], "psi kubepods-memory-some")
    assert manager.run_once() == pytest.approx(8.0)
    assert strategy.rounds == ["regular", "woken"]
    decision = manager.options.decisions.last("memoryevict")
    assert decision is not None and decision.woken_by == "psi kubepods-memory-some"
    assert decision.to_json()["woken_by"] == "psi kubepods-memory-some"
    mono.advance(8.0)
    manager.run_once()
    assert strategy.rounds == ["regular", "woken", "regular"]
    assert metrics.woken == [("memoryevict", False)]
    assert manager.wake_counts() == {"memoryevict": {"received": 1, "woken_rounds_acted": 0,
                                                     "woken_rounds_quiet": 1, "folded": 0}}


def test_a_storm_of_wakes_is_one_round_per_debounce(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = Woke(act=True)
    manager, mono, metrics = _manager(fake_host, tmp_path, strategy, debounce=0.5)
    manager.wake(["memoryevict"], "psi a")
    manager.run_once()
    for _ in range(20):  # 20 firings within 0.2 s
        manager.wake(["memoryevict"], "psi b")
    mono.advance(0.2)
    # Still inside the debounce: no round, and the loop is told to come back when it ends.
    assert manager.run_once() == pytest.approx(0.3)
    mono.advance(0.3)
    manager.run_once()
    assert strategy.rounds == ["regular", "woken", "woken"]
    counts = manager.wake_counts()["memoryevict"]
    assert counts == {"received": 21, "woken_rounds_acted": 2, "woken_rounds_quiet": 0, "folded": 19}
    assert metrics.woken == [("memoryevict", True), ("memoryevict", True)]


def test_a_wake_for_a_strategy_not_run_is_ignored(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = Woke()
    manager, _, _ = _manager(fake_host, tmp_path, strategy)
    manager.wake(["cpuevict"], "psi besteffort-cpu-some")
    manager.run_once()
    assert strategy.rounds == ["regular"] and manager.wake_counts() == {}


def test_a_wake_wakes_the_loop_thread(fake_host: FakeHost, tmp_path: Path) -> None:
    """The daemon's loop sleeps until the next interval; a wake from another thread ends that sleep."""
    strategy = Woke(every=3600.0)
    manager, _, _ = _manager(fake_host, tmp_path, strategy)
    ran = threading.Event()
    original = strategy.run_woken

    def woken(slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        ran.set()
        return original(slo, enabled)

    strategy.run_woken = woken  # type: ignore[method-assign]
    failures: list[BaseException] = []
    manager.start(failures.append)
    try:
        manager.wake(["memoryevict"], "psi node-memory-some")
        assert ran.wait(10), "the woken round did not run within 10 s of the wake"
    finally:
        manager.stop(5)
    assert not failures and not manager.running
