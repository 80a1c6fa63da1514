"""The advisor: collectors grouped by interval into one batch read, scheduling without drift, pod changes
delivered once, failures contained and counted; the registry; and every collector end to end."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config.types import CollectorConfig
from koordlet.errors import ConfigError
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor import registry
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.framework import FileGroup, Options
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, FakeClock, FakeInformer, make_options, make_pod, mkdirs


@dataclass
class Recorder:
    """A collector that tracks one file and records what the advisor hands it."""

    name: str
    every: float
    on: bool = True
    fail_with: Exception | None = None
    files: FileGroup | None = None
    slot: int = -1
    pods_seen: list[tuple[str, ...]] = field(default_factory=list)
    collected: list[tuple[float, int | None]] = field(default_factory=list)

    def enabled(self, options: Options) -> bool:
        return self.on

    def interval(self, options: Options) -> float:
        return self.every

    def setup(self, options: Options, files: FileGroup) -> None:
        assert self.files is None, "setup runs once"
        self.files = files
        self.slot = files.track((self.name, "stat"), options.paths.proc("sys/kernel/osrelease"), native.Kind.RAW)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        self.pods_seen.append(tuple(p.uid for p in pods))

    def collect(self, batch: native.BatchResult, now: float) -> None:
        self.collected.append((now, batch.get(self.slot)))
        if self.fail_with is not None:
            raise self.fail_with


def advisor_with(host: FakeHost, tmp_path: Path, collectors: Sequence[Recorder],
                 informer: FakeInformer | None = None) -> tuple[MetricsAdvisor, FakeClock]:
    clock = FakeClock(100.0)
    options = make_options(host, tmp_path, informer or FakeInformer(), clock=clock)
    return MetricsAdvisor(options, collectors, monotonic=clock), clock


def test_equal_intervals_share_one_group_and_disabled_collectors_never_start(fake_host: FakeHost,
                                                                              tmp_path: Path) -> None:
    a, b, c, off = Recorder("a", 1.0), Recorder("b", 1.0), Recorder("c", 5.0), Recorder("off", 1.0, on=False)
    advisor, _ = advisor_with(fake_host, tmp_path, [a, b, c, off])
    assert advisor.collectors == ["a", "b", "c"]
    assert a.files is b.files and a.files is not c.files
    assert off.files is None
    assert a.files is not None and sorted(map(str, a.files.keys())) == ["('a', 'stat')", "('b', 'stat')"]


def test_groups_run_when_due_on_a_drift_free_schedule(fake_host: FakeHost, tmp_path: Path) -> None:
    """1 s and 5 s groups from t=100.  A tick that runs 0.25 s late (t=101.25) keeps the 1 s group on
    102, 103...; the 5 s group runs at 100 and 105.  run_once returns the wait until the next due group."""
    fast, slow = Recorder("fast", 1.0), Recorder("slow", 5.0)
    advisor, clock = advisor_with(fake_host, tmp_path, [fast, slow])
    assert advisor.run_once() == 1.0  # both ran at 100; fast is next at 101
    clock.now = 101.25
    assert advisor.run_once() == pytest.approx(0.75)
    for t in (101.5, 102.0, 103.0, 104.0, 105.0):
        clock.now = t
        advisor.run_once()
    assert [t for t, _ in fast.collected] == [100.0, 101.25, 102.0, 103.0, 104.0, 105.0]
    assert [t for t, _ in slow.collected] == [100.0, 105.0]
    assert fast.collected[0][1] == len("6.1.0-fake\n")  # the batch read the group's file
    advisor.run_once(force=True)
    assert len(fast.collected) == 7 and len(slow.collected) == 3
    assert advisor.ticks == 8


def test_pod_changes_reach_every_collector_once(fake_host: FakeHost, tmp_path: Path) -> None:
    informer = FakeInformer([make_pod("a")])
    one, two = Recorder("one", 1.0), Recorder("two", 7.0)
    advisor, clock = advisor_with(fake_host, tmp_path, [one, two], informer)
    advisor.run_once()
    clock.advance(1.0)
    advisor.run_once()  # FakeInformer hands out a new tuple each call: equal pods still count as a change
    informer.pod_list.append(make_pod("b"))
    advisor.run_once(force=True)
    assert one.pods_seen[-1] == two.pods_seen[-1] == ("uid-a", "uid-b")
    assert len(one.pods_seen) == len(two.pods_seen) == 3


def test_same_pod_list_object_is_not_redelivered(fake_host: FakeHost, tmp_path: Path) -> None:
    pods = (make_pod("a"),)

    class Fixed(FakeInformer):
        def pods(self) -> tuple[PodMeta, ...]:
            return pods

    rec = Recorder("r", 1.0)
    advisor, _ = advisor_with(fake_host, tmp_path, [rec], Fixed())
    for _ in range(3):
        advisor.run_once(force=True)
    assert rec.pods_seen == [("uid-a",)]


def test_a_failing_collector_neither_stops_the_others_nor_floods_the_log(
        fake_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad, good = Recorder("bad", 1.0, fail_with=ValueError("boom")), Recorder("good", 1.0)
    advisor, _ = advisor_with(fake_host, tmp_path, [bad, good])
    with caplog.at_level(logging.ERROR, logger="koordlet.metricsadvisor.advisor"):
        for _ in range(3):
            advisor.run_once(force=True)
    assert len(good.collected) == 3
    assert advisor.errors == {("bad", "ValueError"): 3}
    assert [r.message for r in caplog.records] == ["collector failed"]


def test_thread_runs_and_stops_and_reports_a_broken_loop(fake_host: FakeHost, tmp_path: Path,
                                                         failures: ComponentFailures) -> None:
    class Broken(FakeInformer):
        def pods(self) -> tuple[PodMeta, ...]:
            raise RuntimeError("informer gone")

    rec = Recorder("r", 0.01)
    options = make_options(fake_host, tmp_path / "ok", FakeInformer())
    ran = threading.Event()
    advisor = MetricsAdvisor(options, [rec])
    original = rec.collect

    def collect(batch: native.BatchResult, now: float) -> None:
        original(batch, now)
        ran.set()

    rec.collect = collect  # type: ignore[method-assign]
    advisor.start(failures.callback("metricsadvisor"))
    assert ran.wait(10.0)
    advisor.stop(5.0)
    assert rec.files is not None and rec.files.keys() == []  # stop closes the groups

    broken = MetricsAdvisor(make_options(fake_host, tmp_path / "broken", Broken()), [Recorder("x", 1.0)])
    broken.start(failures.callback("broken metricsadvisor"))
    try:
        error = failures.wait_for("broken metricsadvisor")
    finally:
        broken.stop(5.0)
    assert isinstance(error, RuntimeError) and "informer gone" in str(error)


def test_no_collectors_waits_a_second(fake_host: FakeHost, tmp_path: Path) -> None:
    advisor, _ = advisor_with(fake_host, tmp_path, [Recorder("off", 1.0, on=False)])
    assert advisor.run_once() == 1.0


def test_registry_builds_every_collector_in_dependency_order() -> None:
    built = [c.name for c in build_collectors()]
    assert built == ["noderesource", "podresource", "podmemory", "throttled", "beresource", "hostapp", "sysresource",
                     "psi", "cpi"]
    # sysresource derives from samples written earlier in the same tick.
    assert built.index("sysresource") > max(built.index("noderesource"), built.index("podresource"),
                                            built.index("hostapp"))


def test_registry_rejects_duplicates_and_misnamed_collectors(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = list(registry.PLUGINS)
    monkeypatch.setattr(registry, "PLUGINS", (*plugins, plugins[0]))
    with pytest.raises(ConfigError, match="duplicate collector name 'noderesource'"):
        build_collectors()
    monkeypatch.setattr(registry, "PLUGINS", (Plugin("psi", plugins[0].new),))
    with pytest.raises(ConfigError, match="registered as 'psi' calls itself 'noderesource'"):
        build_collectors()


def test_every_collector_end_to_end(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Two ticks 1 s apart through the real registry: node 0.5 s busy of /proc/stat -> 0.5 cores, the pod
    0.25 s of CPU -> 0.25 cores, so system = 0.25; BE usage 0.25; memory 16 - 6 = 10 GiB on the node, 1 GiB
    anon in the pod -> 9 GiB system."""
    host = fake_cgroup_host
    hz = os.sysconf("SC_CLK_TCK")  # USER_HZ, the unit of /proc/stat
    pod = make_pod("a", "BE", containers=())
    mkdirs(host, [pod])
    host.mkdir_cgroup(pod.cgroup_dir)
    host.set_meminfo(total_kb=16 << 20, available_kb=6 << 20)
    clock = FakeClock(T0)
    config = CollectorConfig(memory_interval_seconds=1.0, psi_interval_seconds=1.0)
    options = make_options(host, tmp_path, FakeInformer([pod]), clock=clock, config=config,
                           gates={"PSICollector": True})
    advisor = MetricsAdvisor(options, build_collectors(), monotonic=clock)
    assert advisor.collectors == ["noderesource", "podresource", "podmemory", "throttled", "beresource",
                                  "hostapp", "sysresource", "psi"]

    def state(busy_ticks: int, usage_usec: int) -> None:
        host.write_proc("stat", f"cpu  {busy_ticks} 0 0 100000 0 0 0 0 0 0\n")
        for rel in (pod.cgroup_dir, "kubepods/besteffort"):
            if host.mode == "v1":
                host.write_cgroup(rel, "cpuacct.usage", f"{usage_usec * 1000}\n")
            else:
                host.write_cpu_stat(rel, usage_usec=usage_usec)
        stat = {"total_active_anon": 1 << 30} if host.mode == "v1" else {"active_anon": 1 << 30, "anon": 1 << 30}
        host.write_memory_stat(pod.cgroup_dir, **stat)

    state(1000, 1_000_000)
    advisor.run_once(force=True)
    state(1000 + hz // 2, 1_250_000)
    clock.advance(1.0)
    advisor.run_once(force=True)
    cache = options.cache
    assert cache.latest(names.NODE_CPU_USAGE, ()) == (T0 + 1, pytest.approx(0.5))
    assert cache.latest(names.POD_CPU_USAGE, labels_of(pod="uid-a")) == (T0 + 1, pytest.approx(0.25))
    assert cache.latest(names.BE_CPU_USAGE, ()) == (T0 + 1, pytest.approx(0.25))
    assert cache.latest(names.SYSTEM_CPU_USAGE, ()) == (T0 + 1, pytest.approx(0.25))
    assert cache.latest(names.SYSTEM_MEMORY_USAGE, ()) == (T0 + 1, 9 * 2**30)
    assert cache.latest(names.NODE_PSI, labels_of(resource="io", kind="some")) == (T0 + 1, 0.0)
    assert advisor.errors == {}


def test_after_a_stall_the_next_tick_is_a_full_interval_away(fake_host: FakeHost, tmp_path: Path) -> None:
    """Due at 101, the thread wakes at 104.6 (stalled 3.6 s): one collection at 104.6, the next at 105.6,
    never two back to back (a rate over ~0 s of a 10 ms-granular counter is 0 or absurd)."""
    rec = Recorder("r", 1.0)
    advisor, clock = advisor_with(fake_host, tmp_path, [rec])
    advisor.run_once()
    clock.now = 104.6
    assert advisor.run_once() == pytest.approx(1.0)
    assert advisor.run_once() == pytest.approx(1.0)  # called again at once: nothing is due
    clock.now = 105.6
    advisor.run_once()
    assert [t for t, _ in rec.collected] == [100.0, 104.6, 105.6]
