"""memoryevict on the real hierarchy of each cgroup version (issue 4 acceptance; v1 on the host, v2 in
the guest): a memory-limited test parent ``<prefix>/kubepods`` (512 MiB: v1 limit_in_bytes, v2 memory.max),
an LS pod holding 50 MiB, a small BE pod holding 30 MiB and a BE pod allocating steadily; the real
collectors feed the metric cache every second and memoryevict compares the pods' usage with the kubepods
limit (``memory_evict_base=kubepods``), threshold 60%.

The agent loop runs in a thread, as the daemon's would: every second collect, then decide.  The test
thread polls every 10 ms whether the growing process is alive and when usage crossed 60% by two
measures: the pods' memory.stat anonymous memory (what the pod collector reads) and the kubepods page
counter (v1 memory.usage_in_bytes, v2 memory.current: exact at every instant).  From the memory.stat
crossing the bound is one interval plus the round's cost (crossing right after a collection is seen by
the next one, which kills at once); the kernel refreshes memory.stat lazily (periodic memcg stats flush,
~2 s), so from the page counter's crossing it may take up to that much longer.  Both delays are printed."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.metricsadvisor import framework as advisor_framework
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.qosmanager.evictor import Backend, Evictions, KillBackend
from koordlet.qosmanager.framework import Decision, DecisionLog, Options
from koordlet.qosmanager.plugins.memoryevict import MemoryEvict
from koordlet.qosmanager.reader import CgroupReader
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import read_node_info
from tests.fixtures.cleanup import Cleanup
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fixedpods import Informer, alive
from tests.fixtures.memorypressure import pod_meta
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until
from tests.unit.qosmanager.fakes import RecordingBackend

MIB = 1 << 20
LIMIT = 512 * MIB
THRESHOLD_PERCENT = 60
INTERVAL = 1.0
ROUND_COST_ALLOWANCE = 0.3
"""What one collect + decide + kill may add to the interval on this 2-CPU host."""
KERNEL_STAT_LAG = 2.0
"""How stale memory.stat may be (the kernel's periodic memcg stats flush, FLUSH_TIME = 2 s)."""
COOL = 4.0
REFILL = 300 * MIB
"""What the small BE pod allocates after the first eviction: usage ~74%, over the threshold again."""

# Children touch every page they allocate, so anonymous usage is exactly what they hold.
HOLD = """
import signal
block = bytearray({size})
block[::4096] = b"\\x01" * len(block[::4096])
while True:
    signal.pause()  # holds the memory until the test kills it by PID
"""
GROW = """
import time
blocks = []
held = 0
while True:
    if held < {max_bytes}:
        block = bytearray({step})
        block[::4096] = b"\\x01" * len(block[::4096])
        blocks.append(block)
        held += {step}
    time.sleep({pause})
"""
GROW_STEP = 10 * MIB
GROW_PAUSE = 0.1  # ~100 MiB/s
GROW_SECONDS = 60.0
"""Give-up bound for the processes to touch their memory: the TCG v2 guest does ~10 MiB/s, not 100."""


@dataclass
class Rig:
    groups: RealCgroups
    advisor: MetricsAdvisor
    strategy: MemoryEvict
    backend: Backend
    pods: dict[str, PodMeta]
    on_failure: Callable[[BaseException], None]
    """Gets what ends the agent loop's thread, as a koordlet component's does."""
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    """What each collect + decide (+ kill) took."""
    touch_bytes_per_second: float = 0.0
    """How fast processes touched new memory here (measured by :func:`populate`)."""
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def rel(self, name: str) -> str:
        return self.pods[name].containers[0].cgroup_dir.removeprefix(self.groups.name + "/")

    def used(self) -> int:
        """The pods' anonymous memory summed, from the pod directories' memory.stat the collector reads
        (the kubepods directory's own totals refresh on another schedule)."""
        total = 0
        for meta in self.pods.values():
            stat = self.groups.memory_stat(meta.cgroup_dir.removeprefix(self.groups.name + "/"))
            total += sum(stat[k] for k in ("inactive_anon", "active_anon", "unevictable"))
        return total

    def charged(self) -> int:
        """The kubepods page counter (v1 memory.usage_in_bytes, v2 memory.current): exact at every instant
        (anonymous memory plus a little cache and kernel memory)."""
        return self.groups.memory_usage("kubepods")

    def percent(self) -> int:
        return self.used() * 100 // LIMIT

    @property
    def cool(self) -> float:
        return self.strategy.options.config.memory_evict_cool_time_seconds

    def set_cool(self, seconds: float) -> None:
        """Another cooldown (before :meth:`start`)."""
        options = self.strategy.options
        self.strategy = MemoryEvict(dataclasses.replace(options, config=dataclasses.replace(
            options.config, memory_evict_cool_time_seconds=seconds)))

    def start(self, spec: NodeSLOSpec) -> None:
        def loop() -> None:
            try:
                due = time.monotonic()
                while not self.stop.is_set():
                    began = time.monotonic()
                    self.advisor.run_once(force=True)
                    decision = self.strategy.run_once(spec)
                    self.decisions.append((time.monotonic(), decision))
                    self.round_seconds.append(self.decisions[-1][0] - began)
                    due += INTERVAL
                    self.stop.wait(max(0.0, due - time.monotonic()))
            except BaseException as exc:
                self.on_failure(exc)

        self.thread = threading.Thread(target=loop, name="agent-loop", daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
            if self.thread.is_alive():
                raise RuntimeError("the agent loop still runs 10 s after it was told to stop")

    def evictions(self) -> list[tuple[float, Decision]]:
        return [(t, d) for t, d in self.decisions if d.action == "evict"]

    def watch(self, until: float, pid: int) -> Watch:
        """Polls every 10 ms until ``until`` (monotonic) or ``pid`` is dead after both crossings."""
        seen = Watch()
        while time.monotonic() < until and not (seen.stat and seen.charge and seen.dead):
            now = time.monotonic()
            if seen.charge is None and self.charged() * 100 // LIMIT >= THRESHOLD_PERCENT:
                seen.charge = now
            if seen.stat is None and self.percent() >= THRESHOLD_PERCENT:
                seen.stat = now
            if seen.dead is None and not alive(pid):
                seen.dead = now
            time.sleep(0.01)
        return seen


@dataclass
class Watch:
    """When (monotonic) the threshold was crossed by each measure, and when the process was dead."""

    charge: float | None = None
    """By the page counter (v1 memory.usage_in_bytes, v2 memory.current): the true moment."""
    stat: float | None = None
    """By memory.stat's anonymous memory, what the pod collector reads: the kernel refreshes these
    counters lazily (on this 6.x kernel every ~2 s: the memcg stats flush is periodic), so they show a
    crossing up to that much later than the page counter."""
    dead: float | None = None


@pytest.fixture
def rig_factory(real_cgroups: RealCgroups, tmp_path: Path,
                failures: ComponentFailures) -> Iterator[Callable[[str], Rig]]:
    made: list[Rig] = []

    def make(backend_kind: str) -> Rig:
        native.configure_fd_budget()
        groups = real_cgroups
        prefix = groups.name
        pods = {"ls": pod_meta(prefix, KubeQoS.BURSTABLE, "ls"),
                "be1": pod_meta(prefix, KubeQoS.BESTEFFORT, "be1"),
                "be2": pod_meta(prefix, KubeQoS.BESTEFFORT, "be2")}
        groups.mkdir("kubepods")
        groups.set_memory_limit("kubepods", LIMIT)
        for meta in pods.values():
            groups.mkdir(meta.containers[0].cgroup_dir.removeprefix(prefix + "/"))
        paths = HostPaths()
        layout = detect_layout(paths)
        cache = MetricCache(CacheSettings(path=tmp_path / f"metrics-{backend_kind}.db"), time.time)
        informer = Informer(tuple(pods.values()), read_node_info(paths, native))
        collector = CollectorConfig(memory_interval_seconds=INTERVAL, res_used_interval_seconds=INTERVAL)
        advisor = MetricsAdvisor(
            advisor_framework.Options(paths=paths, layout=layout, driver=CgroupDriver.CGROUPFS, cache=cache,
                                      informer=informer, config=collector, gates=gates.resolve({}),
                                      clock=time.time),
            build_collectors())
        backend: Backend = KillBackend(layout) if backend_kind == "kill" else RecordingBackend()
        options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache,
                          executor=ResourceExecutor(layout, time.time, None), evictor=Evictions(backend, time.time),
                          reader=CgroupReader(layout),
                          config=QoSManagerConfig(memory_evict_base="kubepods", memory_evict_cool_time_seconds=COOL),
                          collector=collector, gates={"BEMemoryEvict": True}, clock=time.time,
                          decisions=DecisionLog(), kube_parent=prefix)
        rig = Rig(groups, advisor, MemoryEvict(options), backend, pods,
                  failures.callback(f"memoryevict loop ({backend_kind})"))
        made.append(rig)
        return rig

    yield make
    with Cleanup("memoryevict rigs") as cleanup:
        for rig in made:
            cleanup.attempt("stop the agent loop", rig.halt)


def slo() -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {
        "enable": True, "memoryEvictThresholdPercent": THRESHOLD_PERCENT}}))


def populate(rig: Rig, grow_max: int) -> dict[str, int]:
    pids = {"ls": rig.groups.spawn(rig.rel("ls"), HOLD.format(size=50 * MIB)),
            "be2": rig.groups.spawn(rig.rel("be2"), HOLD.format(size=30 * MIB))}
    # Both hold their memory before BE starts growing.
    began = time.monotonic()
    wait_until("the LS and small BE pods to hold their memory", lambda: rig.used() >= 80 * MIB, timeout=GROW_SECONDS)
    rig.touch_bytes_per_second = 80 * MIB / (time.monotonic() - began)  # with two interpreters' start: a floor
    assert rig.percent() < THRESHOLD_PERCENT - 30, rig.used()
    pids["be1"] = rig.groups.spawn(rig.rel("be1"), GROW.format(max_bytes=grow_max, step=GROW_STEP, pause=GROW_PAUSE))
    return pids


def test_growing_be_pod_is_killed_within_one_interval(rig_factory: Callable[[str], Rig]) -> None:
    rig = rig_factory("kill")
    pids = populate(rig, grow_max=330 * MIB)  # stops at ~85% of the limit: never near an OOM
    # The cooldown must outlast the 300 MiB allocation below, which takes ~20 s in the TCG guest (0.2 s on
    # the host): twice what it should take at the speed measured here.
    rig.set_cool(max(COOL, 2 * REFILL / rig.touch_bytes_per_second))
    rig.advisor.run_once(force=True)  # counters' baselines
    rig.start(slo())
    seen = rig.watch(time.monotonic() + GROW_SECONDS, pids["be1"])
    assert seen.charge and seen.stat and seen.dead, (seen, [d.summary for _, d in rig.decisions])
    (first_at, first), *later = rig.evictions()
    print(f"\nmemoryevict: {THRESHOLD_PERCENT}% crossed -> BE process dead: {seen.dead - seen.stat:.3f} s after "
          f"memory.stat showed it, {seen.dead - seen.charge:.3f} s after the page counter did "
          f"(stats lagged {seen.stat - seen.charge:.3f} s); rounds took {min(rig.round_seconds):.3f}.."
          f"{max(rig.round_seconds):.3f} s | {first.summary}")
    assert seen.dead - seen.stat <= INTERVAL + ROUND_COST_ALLOWANCE, first.summary
    assert seen.dead - seen.charge <= INTERVAL + KERNEL_STAT_LAG + ROUND_COST_ALLOWANCE, first.summary
    assert not later
    assert [e["pod"] for e in first.numbers["evicted"]] == ["default/be1"]  # releasing it sufficed
    assert alive(pids["ls"]) and alive(pids["be2"])

    # Push usage over the threshold again right away (~74%): the cooldown holds the next eviction back.
    pids["be2b"] = rig.groups.spawn(rig.rel("be2"), HOLD.format(size=REFILL))
    # memory.stat shows the new allocation only after the kernel's periodic stats flush (~2 s on v1).
    wait_until("usage over the threshold again", lambda: rig.percent() >= THRESHOLD_PERCENT,
               timeout=first_at + rig.cool - time.monotonic())
    deadline = max(first_at + rig.cool, time.monotonic()) + 2 * INTERVAL
    while time.monotonic() < deadline and len(rig.evictions()) < 2:
        time.sleep(0.05)
    rig.halt()
    (_, first_again), (second_at, second) = rig.evictions()
    assert first_again is first
    between = [d for t, d in rig.decisions if first_at < t < second_at]
    assert len(between) >= 3 and all(d.summary.startswith("cooling down") for d in between), \
        [d.summary for d in between]
    assert second.at - first.at >= rig.cool - 0.2, (first.at, second.at)
    # The killed BE pod is still listed (pending) but holds nothing now: the next victim is the other BE pod.
    assert second.numbers["pending_pods"] == ["default/be1"]
    assert [e["pod"] for e in second.numbers["evicted"]] == ["default/be2"]
    assert alive(pids["ls"])


def test_no_second_eviction_while_the_first_is_pending(rig_factory: Callable[[str], Rig]) -> None:
    rig = rig_factory("record")
    pids = populate(rig, grow_max=260 * MIB)  # grows past 60% then holds (~70%), below the 512 MiB limit
    rig.advisor.run_once(force=True)
    rig.start(slo())
    give_up = time.monotonic() + GROW_SECONDS
    while rig.percent() < THRESHOLD_PERCENT and time.monotonic() < give_up:
        time.sleep(0.05)
    assert rig.percent() >= THRESHOLD_PERCENT, rig.used()
    # Two rounds past the cooldown of the first eviction, the pressure still there.
    give_up = time.monotonic() + COOL + 5 * INTERVAL
    while time.monotonic() < give_up and not (
            rig.evictions() and time.monotonic() > rig.evictions()[0][0] + COOL + 2 * INTERVAL):
        time.sleep(0.1)
    rig.halt()
    assert rig.percent() >= THRESHOLD_PERCENT
    assert isinstance(rig.backend, RecordingBackend)
    assert rig.backend.evicted == [("default/be1", "EvictPodByNodeMemoryUsage")]
    after = [d for t, d in rig.decisions if t >= rig.evictions()[0][0] + COOL]
    assert after and all(d.action == "none" and "covered by 1 pending" in d.summary for d in after), \
        [d.summary for d in after]
    assert all(alive(p) for p in pids.values())  # the recording backend never killed anything


def test_in_shadow_mode_the_eviction_is_decided_and_nothing_is_killed(rig_factory: Callable[[str], Rig]) -> None:
    """The scenario of the test above, with the kill backend and memoryevict in shadow mode: the same decisions
    (one eviction of the growing pod, then the pressure covered by it as pending), and every process alive."""
    rig = rig_factory("kill")
    options = rig.strategy.options
    shadow = Shadow(ShadowModes(default=True), cast(ResourceExecutor, options.executor),
                    cast(Evictions, options.evictor))
    rig.strategy = MemoryEvict(shadow.options_for("memoryevict", options))
    shadow.writers["memoryevict"].begin_round(True)  # every round of this rig's loop is a shadow round
    pids = populate(rig, grow_max=260 * MIB)
    rig.advisor.run_once(force=True)
    rig.start(slo())
    give_up = time.monotonic() + GROW_SECONDS
    while time.monotonic() < give_up and not (
            rig.evictions() and time.monotonic() > rig.evictions()[0][0] + COOL + 2 * INTERVAL):
        time.sleep(0.1)
    rig.halt()
    (_, decided), *later = rig.evictions()
    assert not later and [e["pod"] for e in decided.numbers["evicted"]] == ["default/be1"], decided.summary
    after = [d for t, d in rig.decisions if t >= rig.evictions()[0][0] + COOL]
    assert after and all(d.action == "none" and "covered by 1 pending" in d.summary for d in after), \
        [d.summary for d in after]
    assert all(alive(p) for p in pids.values())  # decided, and nothing killed
    (attempt,) = cast(Evictions, options.evictor).recent(10)
    assert (attempt.pod, attempt.outcome, attempt.backend) == ("default/be1", "intended", "shadow")
