"""The QoS manager: intervals, enable/disable transitions, failure isolation, NodeSLO source polling."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.errors import ConfigError
from koordlet.plugins import Plugin
from koordlet.qosmanager.framework import Action, Decision, DecisionLog, Options
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.registry import build_strategies, registry
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_options


@dataclass
class Probe:
    """A strategy that records its calls; enabled by the NodeSLO threshold switch."""

    name: str
    every: float = 1.0
    fail: bool = False
    calls: list[bool] = field(default_factory=list)

    def enabled(self, slo: NodeSLOSpec) -> bool:
        threshold = slo.resource_used_threshold_with_be
        return bool(threshold and threshold.enable)

    def interval(self) -> float:
        return self.every

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        self.calls.append(enabled)
        if self.fail:
            raise RuntimeError(f"{self.name} broke")
        return Decision(self.name, 0.0, "none" if enabled else "recover", "ok")


@dataclass
class Timings:
    runs: list[tuple[str, bool]] = field(default_factory=list)

    def strategy_run(self, strategy: str, seconds: float, ok: bool) -> None:
        self.runs.append((strategy, ok))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def _manager(fake_host: FakeHost, tmp_path: Path, strategies: list[Probe], enable: bool = True
             ) -> tuple[QoSManager, FakeClock, NodeSLOHolder, Options]:
    options = make_options(fake_host, tmp_path, FakeInformer(), metrics=Timings())
    holder = NodeSLOHolder()
    holder.offer_spec({"resourceUsedThresholdWithBE": {"enable": enable}}, "test")
    mono = FakeClock(100.0)
    return QoSManager(options, strategies, holder, monotonic=mono), mono, holder, options


def test_each_strategy_at_its_interval(fake_host: FakeHost, tmp_path: Path) -> None:
    fast, slow = Probe("fast", 1.0), Probe("slow", 5.0)
    manager, mono, _, _ = _manager(fake_host, tmp_path, [fast, slow])
    for _ in range(10):
        wait = manager.run_once()
        assert wait == pytest.approx(1.0)
        mono.advance(1.0)
    assert len(fast.calls) == 10 and len(slow.calls) == 2


def test_disable_runs_recovery_once_then_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    probe = Probe("p")
    manager, mono, holder, options = _manager(fake_host, tmp_path, [probe])
    manager.run_once()
    holder.offer_spec({"resourceUsedThresholdWithBE": {"enable": False}}, "test")
    for _ in range(3):
        mono.advance(1.0)
        manager.run_once()
    assert probe.calls == [True, False]
    decision = options.decisions.last("p")
    assert decision is not None and decision.action == "recover"


def test_never_enabled_never_runs(fake_host: FakeHost, tmp_path: Path) -> None:
    probe = Probe("p")
    manager, _, _, _ = _manager(fake_host, tmp_path, [probe], enable=False)
    manager.run_once(force=True)
    assert probe.calls == []


def test_a_failing_strategy_is_isolated_and_logged_once(fake_host: FakeHost, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    bad, good = Probe("bad", fail=True), Probe("good")
    manager, mono, _, options = _manager(fake_host, tmp_path, [bad, good])
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            manager.run_once()
            mono.advance(1.0)
    assert len(good.calls) == 3 and len(bad.calls) == 3
    assert [r.getMessage() for r in caplog.records if getattr(r, "strategy", None) == "bad"] == ["QoS strategy failed"]
    decision = options.decisions.last("bad")
    assert decision is not None and decision.action == "error" and "bad broke" in decision.summary
    assert ("bad", False) in options.metrics.runs and ("good", True) in options.metrics.runs  # type: ignore[attr-defined]


def test_source_polled_each_round(fake_host: FakeHost, tmp_path: Path) -> None:
    probe = Probe("p")
    options = make_options(fake_host, tmp_path, FakeInformer())
    holder = NodeSLOHolder()
    path = tmp_path / "nodeslo.yaml"
    mono = FakeClock(100.0)
    manager = QoSManager(options, [probe], holder, FileNodeSLOSource(str(path), holder), monotonic=mono)
    manager.run_once()
    assert probe.calls == []
    path.write_text("resourceUsedThresholdWithBE: {enable: true}\n")
    mono.advance(1.0)
    manager.run_once()
    assert probe.calls == [True]


def test_decision_log_keeps_last_and_acted_history() -> None:
    log = DecisionLog(history=2)
    for i, action in enumerate(["none", "suppress", "evict", "skip", "suppress"]):
        log.record(Decision("s", float(i), action, action))
    last = log.last("s")
    assert last is not None and last.at == 4.0
    assert [d.action for d in log.history()] == ["evict", "suppress"]


def test_decision_action_is_the_enum_and_its_json_the_plain_word() -> None:
    decision = Decision("s", 1.0, "suppress", "BE limited")
    assert decision.action is Action.SUPPRESS and decision.action == "suppress"
    assert json.loads(json.dumps(decision.to_json()))["action"] == "suppress"
    with pytest.raises(ValueError):
        Decision("s", 1.0, "suppressed", "a word no strategy uses")


def test_registry_rejects_duplicates_and_builds_all(fake_host: FakeHost, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="duplicate QoS strategy name 'x'"):
        registry([Plugin("x", lambda o: Probe("x")), Plugin("x", lambda o: Probe("x"))])
    options = make_options(fake_host, tmp_path, FakeInformer())
    names = [s.name for s in build_strategies(options)]
    assert names == ["cpusuppress", "cpuburst", "cpuevict", "memoryevict", "cgreconcile", "blkio", "coresched",
                     "netqos", "resctrl", "sysreconcile"]
    assert list(registry()) == names
