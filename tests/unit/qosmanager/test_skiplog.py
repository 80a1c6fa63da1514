"""Logs under a persistent fault: a strategy that skips (or fails) round after round for the same reason
logs the first round of the streak and, once, the round it acts again; never every round, even when each
round's summary carries new numbers."""

from __future__ import annotations

import dataclasses
import errno
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.gates import CGROUP_RECONCILE as MEMORY_QOS_GATE
from koordlet.errors import KoordletError
from koordlet.qosmanager.framework import Action, Decider, Decision
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.plugins.cgreconcile.strategy import CgroupReconcile
from koordlet.qosmanager.plugins.coresched.strategy import CoreSched
from koordlet.qosmanager.plugins.cpusuppress.strategy import CPUSuppress
from koordlet.resourceexecutor import CgroupUpdate, Outcome, ResourceExecutor, Result
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system.resources import CPU_CFS_QUOTA, CPUSET_CPUS
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.cpuburst.test_strategy import MAIN as BURST_MAIN
from tests.unit.qosmanager.cpuburst.test_strategy import RecordingExecutor
from tests.unit.qosmanager.cpuburst.test_strategy import make_world as burst_world
from tests.unit.qosmanager.cpuburst.test_strategy import slo as burst_slo
from tests.unit.qosmanager.evict.test_cpuevict import BE_SLO
from tests.unit.qosmanager.evict.test_cpuevict import make_world as cpuevict_world
from tests.unit.qosmanager.evict.test_memoryevict import GIB
from tests.unit.qosmanager.evict.test_memoryevict import make_world as memoryevict_world
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_options, make_pod, put_usage
from tests.unit.resourceexecutor.fakes import MemoryAudit, RecordingWriter

ROUNDS = 30
BE_DIR = "kubepods/besteffort"
BE_DIRS = (BE_DIR, "kubepods/besteffort/poduid-be", "kubepods/besteffort/poduid-be/be-main")


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[tuple[str, object, object]]:
    """(message, reason, rounds) of each record ``logger`` emitted."""
    return [(r.getMessage(), r.__dict__.get("reason"), r.__dict__.get("rounds"))
            for r in caplog.records if r.name == logger]


# ------------------------------------------------------------------------------------------ Decider


def test_skip_log_keys_streaks_on_the_reason_not_the_summary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.skiplog")
    clock = FakeClock(0.0)
    skips = Decider("cpusuppress", logging.getLogger("test.skiplog"), clock)
    script = ([("skip", "no_node_sample")] * 10 + [("suppress", None)] * 3 + [("skip", "no_pods")] * 4
              + [("skip", "no_node_sample")] * 5 + [("none", None)])
    for n, (action, reason) in enumerate(script):
        decision = skips(Action(action), f"round {n}: LS usage {n / 10:.2f}", reason=reason)  # new summary each round
        assert (decision.strategy, decision.at, decision.action) == ("cpusuppress", float(n), action)
        clock.advance(1.0)
    assert lines(caplog, "test.skiplog") == [
        ("QoS strategy skipped a round", "no_node_sample", None), ("QoS strategy resumed", "no_node_sample", 10),
        ("QoS strategy skipped a round", "no_pods", None), ("QoS strategy skipped a round", "no_node_sample", None),
        ("QoS strategy resumed", "no_node_sample", 5)]
    first, resumed = caplog.records[0], caplog.records[1]
    assert first.levelno == logging.INFO and first.__dict__["detail"] == "round 0: LS usage 0.00"
    assert first.__dict__["strategy"] == "cpusuppress"
    assert resumed.__dict__["seconds"] == 10.0 and resumed.__dict__["action"] == "suppress"


def test_a_skip_without_a_reason_is_refused() -> None:
    skips = Decider("cpusuppress", logging.getLogger("test.skiplog"), FakeClock(0.0))
    with pytest.raises(ValueError, match="cpusuppress: a skipped round needs a stable reason"):
        skips(Action.SKIP, "no pods known yet")


# ------------------------------------------------------------------------------------------ cpusuppress

CPUSUPPRESS_LOG = "koordlet.qosmanager.plugins.cpusuppress.strategy"


def suppress_world(host: FakeHost, tmp_path: Path, clock: FakeClock) -> CPUSuppress:
    informer = FakeInformer([make_pod("ls", "LS"), make_pod("be", "BE")], make_node(8))
    options = make_options(host, tmp_path, informer, clock=clock)
    host.mkdir_cgroup("kubepods/burstable/poduid-ls/ls-main")
    make_be_dirs(host)
    return CPUSuppress(options)


def make_be_dirs(host: FakeHost) -> None:
    for rel in BE_DIRS:
        host.mkdir_cgroup(rel)
    host.write_cgroup("kubepods", CPUSET_CPUS, "0-7\n")
    for rel in BE_DIRS:
        host.write_cgroup(rel, CPUSET_CPUS, "0-7\n")


def remove_be_dirs(host: FakeHost) -> None:
    for path in sorted(host.cgroup_root.rglob("besteffort"), key=lambda p: len(p.parts)):
        if path.is_dir():
            shutil.rmtree(path)


def suppress_slo(policy: str = "cpuset") -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": policy}}))


def test_cpusuppress_missing_be_cgroup_logs_once_then_its_return_once(
        fake_cgroup_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=CPUSUPPRESS_LOG)
    clock = FakeClock(1_700_000_000.0)
    strategy = suppress_world(fake_cgroup_host, tmp_path, clock)
    remove_be_dirs(fake_cgroup_host)
    summaries = set()
    for n in range(ROUNDS):
        put_usage(strategy.options, node_cpu=3.0 + n / 100, pod_cpu={"uid-ls": 1.0 + n / 100, "uid-be": 1.0})
        decision = strategy.run_once(suppress_slo())
        assert decision.action == "skip" and decision.summary.startswith("cannot read BE's cpuset"), decision.summary
        summaries.add(decision.numbers["suppress_cores"])
        clock.advance(1.0)
    assert len(summaries) == ROUNDS  # every round computed something new, and skipped for the same reason
    assert lines(caplog, CPUSUPPRESS_LOG) == [("QoS strategy skipped a round", "be_cpuset_unreadable", None)]
    make_be_dirs(fake_cgroup_host)
    for _ in range(3):
        put_usage(strategy.options, node_cpu=3.0, pod_cpu={"uid-ls": 1.0, "uid-be": 1.0})
        assert strategy.run_once(suppress_slo()).action == "suppress"
        clock.advance(1.0)
    assert lines(caplog, CPUSUPPRESS_LOG) == [("QoS strategy skipped a round", "be_cpuset_unreadable", None),
                                              ("QoS strategy resumed", "be_cpuset_unreadable", ROUNDS)]
    assert caplog.records[-1].__dict__["seconds"] == float(ROUNDS)


def test_cpusuppress_without_node_samples_logs_once(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # The collector is down: no fresh sample for many rounds, then it is back.
    caplog.set_level(logging.DEBUG, logger=CPUSUPPRESS_LOG)
    clock = FakeClock(1_700_000_000.0)
    strategy = suppress_world(fake_cgroup_host, tmp_path, clock)
    for _ in range(ROUNDS):
        assert strategy.run_once(suppress_slo()).action == "skip"
        clock.advance(1.0)
    put_usage(strategy.options, node_cpu=3.0, pod_cpu={"uid-ls": 1.0, "uid-be": 1.0})
    assert strategy.run_once(suppress_slo()).action == "suppress"
    assert lines(caplog, CPUSUPPRESS_LOG) == [("QoS strategy skipped a round", "no_node_sample", None),
                                              ("QoS strategy resumed", "no_node_sample", ROUNDS)]


def test_cpusuppress_write_refused_with_a_new_value_every_round_logs_once(
        fake_cgroup_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The quota write fails (EIO) round after round, each round with another quota as LS usage moves: the
    # executor and the strategy each say so once, and once more when the write lands again.
    caplog.set_level(logging.DEBUG)
    clock = FakeClock(1_700_000_000.0)
    strategy = suppress_world(fake_cgroup_host, tmp_path, clock)
    quota_file = str(fake_cgroup_host.cgroup_path(BE_DIR, CPU_CFS_QUOTA))
    writer = RecordingWriter(fail={quota_file: errno.EIO})
    options = dataclasses.replace(strategy.options, executor=ResourceExecutor(
        strategy.options.layout, clock, MemoryAudit(), writer=writer))
    strategy = CPUSuppress(options)
    for n in range(ROUNDS):
        ls = 0.5 + n / 20  # system stays 0.5 core: BE's quota moves with LS
        put_usage(options, node_cpu=ls + 1.5, pod_cpu={"uid-ls": ls, "uid-be": 1.0})
        decision = strategy.run_once(suppress_slo("cfsQuota"))
        assert decision.action == "suppress" and "writes failed" in decision.summary, decision.summary
        clock.advance(1.0)
    assert len({text for path, text in writer.attempts if path == quota_file}) == ROUNDS
    executor_log = "koordlet.resourceexecutor.executor"
    assert lines(caplog, executor_log) == [("cgroup update not applied", "failed:EIO", None)]
    assert [m for m, _, _ in lines(caplog, CPUSUPPRESS_LOG)] == ["cpusuppress writes failed"]
    writer.fail.clear()
    put_usage(options, node_cpu=2.0, pod_cpu={"uid-ls": 0.5, "uid-be": 1.0})
    assert "failed" not in strategy.run_once(suppress_slo("cfsQuota")).summary
    assert lines(caplog, executor_log) == [("cgroup update not applied", "failed:EIO", None),
                                           ("cgroup write succeeds again", "failed:EIO", ROUNDS)]
    assert [m for m, _, rounds in lines(caplog, CPUSUPPRESS_LOG)] == ["cpusuppress writes failed",
                                                                      "cpusuppress writes succeed again"]


# ------------------------------------------------------------------------------------------ eviction strategies


def test_cpuevict_waiting_for_samples_logs_once(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    # "not enough BE samples: <n> in the 30 s window": n grows every round, the reason stays.
    logger = "koordlet.qosmanager.plugins.cpuevict.strategy"
    caplog.set_level(logging.DEBUG, logger=logger)
    world = cpuevict_world(fake_cgroup_host, tmp_path)
    world.pod_cpu()
    skipped = 0
    while (decision := world.run(**BE_SLO, cpuEvictTimeWindowSeconds=30)).action == "skip":
        skipped += 1
        world.clock.advance(1.0)
        world.be_series([1.9], [8.0], [2.0])
        world.pod_cpu()
    assert skipped >= 5 and decision.action == "evict", decision.summary
    evicted = [r.__dict__["summary"] for r in caplog.records
               if r.name == logger and r.getMessage() == "QoS strategy evicted pods"]
    assert len(evicted) == 1 and "evicted default/be-b" in evicted[0]
    assert [line for line in lines(caplog, logger) if line[0] != "QoS strategy evicted pods"] == [
        ("QoS strategy skipped a round", "be_not_enough_samples", None),
        ("QoS strategy resumed", "be_not_enough_samples", skipped)]


def test_memoryevict_failing_evictions_log_once_per_streak(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Every eviction fails (a PodDisruptionBudget, the companion gone): the strategy retries every round.
    logger = "koordlet.qosmanager.plugins.memoryevict.strategy"
    caplog.set_level(logging.DEBUG)
    world = memoryevict_world(fake_cgroup_host, tmp_path, fail=True)
    for n in range(ROUNDS):
        world.usage(int(12.5 * GIB) + n * (1 << 20))
        assert world.run().action == "failed"
        world.clock.advance(1.0)
    assert [(m, reason) for m, reason, _ in lines(caplog, logger)] == [
        ("QoS strategy evictions failed", "eviction_failed")]
    world.backend.fail = False
    world.usage(int(12.5 * GIB))
    assert world.run().action == "evict"
    records = [r for r in caplog.records if r.name == logger]
    assert len(records) == 3 and records[1].getMessage() == "QoS strategy evicted pods"
    assert "evicted default/be-mid" in records[1].__dict__["summary"]
    assert lines(caplog, logger)[2] == ("QoS strategy evictions no longer failing", "eviction_failed", ROUNDS)
    # The evictor tried each BE pod every round: one line per pod for the streak, one when be-mid's went through.
    evictor = [(r.getMessage(), r.__dict__["pod"], r.__dict__["reason"], r.__dict__.get("rounds"))
               for r in caplog.records if r.name == "koordlet.qosmanager.evictor"]
    assert evictor == [("pod eviction failed", "default/be-mid", "EvictionFailed", None),
                       ("pod eviction failed", "default/be-low", "EvictionFailed", None),
                       ("pod eviction failed", "default/be-big", "EvictionFailed", None),
                       ("pod eviction launched after failing", "default/be-mid", "EvictionFailed", ROUNDS)]


# ------------------------------------------------------------------------------------------ cgreconcile


def test_cgreconcile_missing_kubepods_logs_once(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    logger = "koordlet.qosmanager.plugins.cgreconcile.strategy"
    caplog.set_level(logging.DEBUG, logger=logger)
    clock = FakeClock(1_700_000_000.0)
    options = make_options(fake_cgroup_host, tmp_path, FakeInformer([make_pod("ls", "LS")]), clock=clock,
                           gates={MEMORY_QOS_GATE: True})
    strategy = CgroupReconcile(options)
    spec = merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "lsClass": {"memoryQOS": {"enable": True}}}}))
    for _ in range(ROUNDS):
        assert strategy.run_once(spec).action == "skip"
        clock.advance(1.0)
    assert lines(caplog, logger) == [("QoS strategy skipped a round", "kubepods_missing", None)]
    fake_cgroup_host.mkdir_cgroup("kubepods/burstable/poduid-ls/ls-main")
    for _ in range(3):
        strategy.run_once(spec)
        clock.advance(1.0)
    streaks = [line for line in lines(caplog, logger) if line[0].startswith("QoS strategy ")]
    if fake_cgroup_host.mode == "v2":
        assert streaks == [("QoS strategy skipped a round", "kubepods_missing", None),
                           ("QoS strategy resumed", "kubepods_missing", ROUNDS)]
    else:  # v1 has no memory QoS files (Anolis only): the skip goes on for another reason, said once
        assert streaks == [("QoS strategy skipped a round", "kubepods_missing", None),
                           ("QoS strategy skipped a round", "no_memory_qos_file", None)]


# ------------------------------------------------------------------------------------------ errors


def test_coresched_failing_rounds_log_once(fake_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    logger = "koordlet.qosmanager.plugins.coresched.strategy"
    caplog.set_level(logging.DEBUG, logger=logger)
    clock = FakeClock(1_700_000_000.0)
    strategy = CoreSched(make_options(fake_host, tmp_path, FakeInformer(), clock=clock))
    count = iter(range(ROUNDS))

    def broken(slo: NodeSLOSpec, now: float) -> Decision:
        raise KoordletError(f"round {next(count)} broke")

    monkeypatch.setattr(strategy, "_reconcile", broken)
    for _ in range(ROUNDS):
        assert strategy.run_once(suppress_slo()).action == "error"
        clock.advance(1.0)
    monkeypatch.undo()
    assert strategy.run_once(suppress_slo()).action != "error"
    assert [line for line in lines(caplog, logger) if line[0].startswith("coresched ")] == [
        ("coresched round failed", "KoordletError", None), ("coresched rounds succeed again", "KoordletError", ROUNDS)]


@dataclasses.dataclass
class Flaky:
    """A strategy that raises, with a new message each round, while ``broken``."""

    name: str = "flaky"
    broken: bool = True
    rounds: int = 0

    def enabled(self, slo: NodeSLOSpec) -> bool:
        return True

    def interval(self) -> float:
        return 1.0

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        self.rounds += 1
        if self.broken:
            raise RuntimeError(f"broke in round {self.rounds}")
        return Decision(self.name, 0.0, "none", "ok")


def test_manager_logs_a_strategy_failing_every_round_once(fake_host: FakeHost, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    logger = "koordlet.qosmanager.manager"
    caplog.set_level(logging.DEBUG, logger=logger)
    flaky = Flaky()
    clock = FakeClock(1_700_000_000.0)
    manager = QoSManager(make_options(fake_host, tmp_path, FakeInformer(), clock=clock), [flaky], NodeSLOHolder(),
                         monotonic=clock)
    for _ in range(ROUNDS):
        manager.run_once()
        clock.advance(1.0)
    flaky.broken = False
    for _ in range(3):
        manager.run_once()
        clock.advance(1.0)
    assert flaky.rounds == ROUNDS + 3
    assert lines(caplog, logger) == [("QoS strategy failed", "RuntimeError", None),
                                     ("QoS strategy runs again", "RuntimeError", ROUNDS)]
    assert {r.__dict__.get("strategy") for r in caplog.records if r.name == logger} == {"flaky"}
    assert caplog.records[0].levelno == logging.ERROR and caplog.records[0].exc_info is not None


def test_cpuburst_write_refused_every_round_logs_once(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    logger = "koordlet.qosmanager.plugins.cpuburst.strategy"
    caplog.set_level(logging.DEBUG, logger=logger)
    w = burst_world(fake_cgroup_host, tmp_path)
    refusing = True

    class Refusing(RecordingExecutor):
        def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
            results = super().apply(updates)
            return [dataclasses.replace(r, outcome=Outcome.FAILED, error=f"Input/output error ({r.update.value})")
                    if refusing and r.update.key == "cpu_cfs_burst" and r.update.rel_dir == BURST_MAIN else r
                    for r in results]

    w.strategy.options = dataclasses.replace(w.options, executor=Refusing(w.executor.inner))
    for n in range(ROUNDS):
        decision = w.run(burst_slo("cpuBurstOnly", cpuBurstPercent=100 + n))  # another value every round
        assert "writes failed" in decision.summary, decision.summary
    refusing = False
    assert "writes failed" not in w.run(burst_slo("cpuBurstOnly", cpuBurstPercent=50)).summary
    assert [(m, rounds) for m, _, rounds in lines(caplog, logger)] == [
        ("cpuburst writes failed", None), ("cpuburst writes succeed again", ROUNDS)]
