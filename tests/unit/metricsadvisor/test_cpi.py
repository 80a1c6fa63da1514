"""CPI = cycles / instructions per container over a counting window, with perf injected: this host (and
the guest) has no PMU, so the real kernel answers ENOENT for both hardware events, which is the
"unsupported" path below."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config.types import CollectorConfig
from koordlet.errors import from_errno
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.cpi import CPICollector
from koordlet.native import PerfEvent, PerfReading
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import (
    T0,
    FakeInformer,
    Single,
    make_node,
    make_options,
    make_pod,
    mkdirs,
    samples,
)

CYCLES, INSTRUCTIONS = PerfEvent.CPU_CYCLES, PerfEvent.INSTRUCTIONS
CONFIG = CollectorConfig(cpi_interval_seconds=60.0, cpi_time_window_seconds=10.0)


@dataclass
class Counts:
    cycles: int
    instructions: int
    enabled_ns: int = 0
    running_ns: int = 0


@dataclass
class FakeGroup:
    perf: FakePerf
    cgroup_dir: str
    cpus: list[int]
    event_errors: dict[PerfEvent, int]
    enabled: bool = False
    closed: bool = False

    def enable(self) -> None:
        self.enabled = True

    def read(self) -> PerfReading:
        assert self.enabled and not self.closed
        failure = self.perf.read_errors.get(self.cgroup_dir)
        if isinstance(failure, Exception):
            raise failure
        if failure is not None:
            raise from_errno(failure, "perf read")
        c = self.perf.counts[self.cgroup_dir]
        values = {CYCLES: c.cycles, INSTRUCTIONS: c.instructions}
        # As native.PerfGroup.read: refused events have no value at all.
        return PerfReading({e: v for e, v in values.items() if e not in self.event_errors}, c.enabled_ns,
                           c.running_ns)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FakePerf:
    """Stands in for ``koordlet.native`` as ``Options.perf``: ``perf.PerfGroup.open_cgroup(...)``.

    ``refused`` maps an event to the errno perf_event_open gives it (everywhere, or only for ``dirs``);
    like the C core, a group whose every event is refused fails to open with that errno."""

    counts: dict[str, Counts] = field(default_factory=dict)
    refused: dict[PerfEvent, int] = field(default_factory=dict)
    refused_dirs: set[str] | None = None
    gone: set[str] = field(default_factory=set)
    read_errors: dict[str, int | Exception] = field(default_factory=dict)
    opened: list[FakeGroup] = field(default_factory=list)

    @property
    def PerfGroup(self) -> FakePerf:  # noqa: N802 - the module attribute it stands for
        return self

    def open_cgroup(self, cgroup_dir: str, cpus: Sequence[int], events: Sequence[PerfEvent]) -> FakeGroup:
        assert tuple(events) == (CYCLES, INSTRUCTIONS)
        if cgroup_dir in self.gone:
            raise from_errno(errno.ENOENT, cgroup_dir)
        applies = self.refused_dirs is None or cgroup_dir in self.refused_dirs
        refused = {e: err for e, err in self.refused.items() if applies}
        if len(refused) == len(events):
            raise from_errno(next(iter(refused.values())), f"perf_event_open(CPU_CYCLES, INSTRUCTIONS) on {cgroup_dir}")
        group = FakeGroup(self, cgroup_dir, list(cpus), refused)
        self.opened.append(group)
        return group


def start(host: FakeHost, tmp_path: Path, perf: FakePerf, *pods: object) -> Single:
    informer = FakeInformer(node_info=make_node(4))
    options = make_options(host, tmp_path, informer, gates={"CPICollector": True}, config=CONFIG, perf=perf)
    run = Single.start(CPICollector(), options)
    run.pods(*pods)  # type: ignore[arg-type]
    return run


def cpi(run: Single, pod: str, container: str) -> list[tuple[float, float]]:
    return samples(run.cache, names.CONTAINER_CPI, labels_of(pod=pod, container=container))


def test_gate_and_window_interval(fake_host: FakeHost, tmp_path: Path) -> None:
    collector = CPICollector()
    assert not collector.enabled(make_options(fake_host, tmp_path / "a"))
    options = make_options(fake_host, tmp_path / "b", config=CONFIG, gates={"CPICollector": True})
    assert collector.enabled(options)
    assert collector.interval(options) == 10.0  # ticks at the window so a window ends on time
    short = CollectorConfig(cpi_interval_seconds=5.0, cpi_time_window_seconds=10.0)
    assert collector.interval(make_options(fake_host, tmp_path / "c", config=short)) == 5.0


@pytest.mark.parametrize("mode", ["hybrid", "v2"])
def test_cpi_over_one_window_per_interval(fake_host: FakeHost, tmp_path: Path, mode: str) -> None:
    """Container x: 6e9 cycles / 3e9 instructions, multiplexed half the time (enabled 10 s, running 5 s):
    both scale by 2, CPI 2.0.  Container y: no task ever switched in (no times): raw 1.2e9 / 1.6e9 = 0.75.
    Container z retired no instruction: no CPI.  Windows start at T0 and T0+60 and end 10 s later."""
    host = fake_host
    host.set_mode(mode)
    a, b = make_pod("a", containers=("x", "y")), make_pod("b", containers=("z",))
    mkdirs(host, [a, b])
    unified = host.cgroup_root / "unified" if mode == "hybrid" else host.cgroup_root
    dirs = {c.container_id: str(unified / c.cgroup_dir) for p in (a, b) for c in p.containers}
    perf = FakePerf(counts={dirs["a-x"]: Counts(6_000_000_000, 3_000_000_000, 10**10, 5 * 10**9),
                            dirs["a-y"]: Counts(1_200_000_000, 1_600_000_000),
                            dirs["b-z"]: Counts(5_000, 0, 10**10, 10**10)})
    run = start(host, tmp_path, perf, a, b)
    run.tick()
    probe, *groups = perf.opened
    assert probe.cgroup_dir == str(unified) and probe.cpus == [0] and probe.closed
    assert sorted(g.cgroup_dir for g in groups) == sorted(dirs.values())
    assert all(g.cpus == [0, 1, 2, 3] and g.enabled and not g.closed for g in groups)
    run.tick(9.0)
    assert cpi(run, "uid-a", "a-x") == []  # the window is still open
    run.tick(1.0)
    assert cpi(run, "uid-a", "a-x") == [(T0 + 10, pytest.approx(2.0))]
    assert cpi(run, "uid-a", "a-y") == [(T0 + 10, pytest.approx(0.75))]
    assert cpi(run, "uid-b", "b-z") == []
    assert all(g.closed for g in groups)
    opened = len(perf.opened)
    for _ in range(4):
        run.tick(10.0)  # T0+20 .. T0+50: between windows
    assert len(perf.opened) == opened
    run.tick(10.0)  # T0+60: the next window
    assert len(perf.opened) == opened + 1 + 3  # a support probe again, then the three containers


def test_no_pmu_degrades_to_unsupported_once(fake_host: FakeHost, tmp_path: Path) -> None:
    """What this host's kernel answers: both hardware events ENOENT, so the group does not open at all
    (the C core raises CgroupGone for ENOENT).  The collector records why, opens nothing per container,
    writes nothing and does not ask again."""
    host = fake_host
    host.set_mode("v2")
    pod = make_pod("a")
    mkdirs(host, [pod])
    perf = FakePerf(refused={CYCLES: errno.ENOENT, INSTRUCTIONS: errno.ENOENT})
    collector_run = start(host, tmp_path, perf, pod)
    for _ in range(10):
        collector_run.tick(10.0)
    collector = collector_run.collector
    assert isinstance(collector, CPICollector)
    assert collector.unsupported_reason is not None
    assert "perf_event_open(CPU_CYCLES, INSTRUCTIONS)" in collector.unsupported_reason
    assert "No such file or directory" in collector.unsupported_reason
    assert perf.opened == []
    assert collector_run.cache.series(names.CONTAINER_CPI) == []


def test_one_refused_event_is_unsupported_too(fake_host: FakeHost, tmp_path: Path) -> None:
    """cycles count but instructions are refused (EOPNOTSUPP): CPI cannot be formed; the probe names the
    event and errno, and closes its group."""
    host = fake_host
    host.set_mode("v2")
    pod = make_pod("a")
    mkdirs(host, [pod])
    perf = FakePerf(refused={INSTRUCTIONS: errno.EOPNOTSUPP})
    run = start(host, tmp_path, perf, pod)
    run.tick()
    run.tick(60.0)
    collector = run.collector
    assert isinstance(collector, CPICollector)
    assert collector.unsupported_reason == f"INSTRUCTIONS: errno {errno.EOPNOTSUPP}"
    assert len(perf.opened) == 1 and perf.opened[0].closed


def test_a_v1_only_host_has_no_perf_cgroups(fake_host: FakeHost, tmp_path: Path) -> None:
    pod = make_pod("a")
    mkdirs(fake_host, [pod])
    run = start(fake_host, tmp_path, FakePerf(), pod)
    run.tick()
    collector = run.collector
    assert isinstance(collector, CPICollector)
    assert collector.unsupported_reason is not None and "no cgroup v2 hierarchy" in collector.unsupported_reason


def test_no_containers_no_probe(fake_host: FakeHost, tmp_path: Path) -> None:
    fake_host.set_mode("v2")
    perf = FakePerf()
    run = start(fake_host, tmp_path, perf)
    run.tick()
    assert perf.opened == []


def test_containers_that_go_or_fail_are_skipped_alone(fake_host: FakeHost, tmp_path: Path) -> None:
    """x vanished before its window opened, y's read fails at the end, z's pod left mid-window (its group is
    closed then, no sample), w refuses instructions on its own CPUs although the root probe counted both:
    only v gives a CPI (3e9 / 2e9 = 1.5) and every opened group ends closed."""
    host = fake_host
    host.set_mode("v2")
    a = make_pod("a", containers=("x", "y", "v", "w"))
    b = make_pod("b", containers=("z",))
    mkdirs(host, [a, b])
    d = {c.container_id: str(host.cgroup_root / c.cgroup_dir) for p in (a, b) for c in p.containers}
    counts = {path: Counts(3_000_000_000, 2_000_000_000) for path in d.values()}
    perf = FakePerf(counts=counts, gone={d["a-x"]}, read_errors={d["a-y"]: errno.EIO},
                    refused={INSTRUCTIONS: errno.ENOENT}, refused_dirs={d["a-w"]})
    run = start(host, tmp_path, perf, a, b)
    run.tick()
    run.pods(a)
    run.tick(10.0)
    assert run.cache.series(names.CONTAINER_CPI) == [labels_of(pod="uid-a", container="a-v")]
    assert cpi(run, "uid-a", "a-v") == [(T0 + 10, pytest.approx(1.5))]
    assert all(g.closed for g in perf.opened)
    collector = run.collector
    assert isinstance(collector, CPICollector) and collector.unsupported_reason is None


def test_an_unexpected_read_failure_ends_the_window_anyway(fake_host: FakeHost, tmp_path: Path) -> None:
    """A read raising what the collector does not expect reaches the advisor's guard; the window is still
    over, its groups closed, and the next one opens on schedule at T0+60 and gives a CPI (4 / 2 = 2.0)."""
    host = fake_host
    host.set_mode("v2")
    pod = make_pod("a")
    mkdirs(host, [pod])
    path = str(host.cgroup_root / pod.containers[0].cgroup_dir)
    perf = FakePerf(counts={path: Counts(4, 2)}, read_errors={path: RuntimeError("driver bug")})
    run = start(host, tmp_path, perf, pod)
    run.tick()
    with pytest.raises(RuntimeError, match="driver bug"):
        run.tick(10.0)
    assert all(g.closed for g in perf.opened)
    del perf.read_errors[path]
    for _ in range(5):
        run.tick(10.0)
    assert len(perf.opened) == 4  # probe + container, twice
    run.tick(10.0)
    assert cpi(run, "uid-a", "a-main") == [(T0 + 70, 2.0)]


def test_the_real_perf_module_is_the_default() -> None:
    from koordlet.metricsadvisor.framework import Options

    assert Options.perf is native
