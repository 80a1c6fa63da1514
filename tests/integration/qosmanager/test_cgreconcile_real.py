"""cgreconcile's memory QoS on a real pure cgroup v2 kernel (the guest of ``python -m tests.vm``): the
strategy writes ``memory.high`` of a BE container from the BE class's ``memoryQOS``, and a BE process
allocating steadily is throttled there while a process of an LS pod (LS memory QoS off) grows freely.

v2 only: ``memory.high`` (like memory.min and memory.low) exists in cgroup v1 only on Alibaba Cloud Linux /
Anolis kernels; this host's v1 has none of them and the strategy writes nothing there (its unit tests cover
that skip), so there is no v1 effect to measure.

Worked example: the BE container requests 32 MiB of batch memory and is limited to 96 MiB; with
throttlingPercent 50, memory.high = 32 MiB + (96 - 32) MiB x 50 / 100 = 64 MiB (already page aligned).

What the kernel does about a task over memory.high (mm/memcontrol.c ``mem_cgroup_handle_over_high``, and
the "memory.high" entry of Documentation/admin-guide/cgroup-v2.rst): on its way back to user space the task
reclaims the excess; what cannot be reclaimed (anonymous memory, with no swap in the guest) makes it sleep,
the penalty growing with the square of the overage (about ``overage^2 x 64`` seconds per 256 KiB charged,
at most 2 s per return to user space).  So usage does not stop at the threshold: it creeps past it ever
more slowly, each charge over it counted in ``memory.events`` "high", and no OOM kill happens (memory.high
never invokes the OOM killer).  The test measures that: usage held within ``NEAR`` of memory.high while
the control process reaches its full size, the "high" count rising all along, then switching the strategy
off (memory.high back to max) lets the same BE process grow to its full size."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources
from koordlet.config.gates import CGROUP_RECONCILE as GATE
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.cgreconcile.strategy import CgroupReconcile
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from tests.fixtures.realcgroup import V2, RealCgroups
from tests.fixtures.waiting import wait_until
from tests.unit.qosmanager.fakes import FakeInformer, make_pod

MIB = 1 << 20
REQUEST = 32 * MIB
LIMIT = 96 * MIB
THROTTLING_PERCENT = 50
HIGH = 64 * MIB
"""REQUEST + (LIMIT - REQUEST) x THROTTLING_PERCENT / 100."""
TARGET = 200 * MIB
"""What each growing process wants to hold: ~3x memory.high, small next to the guest's 3 GiB."""
NEAR = 0.25
"""How far past memory.high usage may get while throttled.  Measured in the guest: 1.13 x high after 8 s
of watching, still creeping at ~0.6 MiB/s.  The kernel's penalty (see the module doc) is 0.16 s per
256 KiB at 5% over, 0.64 s at 10% and reaches its 2 s cap near 18%: past that usage grows by at most
128 KiB/s, so 25% is out of reach within the test's watch."""
SLOWDOWN = 10
"""BE's growth over the watch must be this many times slower than the free control's (measured: ~30)."""
OBSERVE_SECONDS = 8.0
"""How long BE is watched under memory.high at least (and until the control process is full)."""
GROW_TIMEOUT = 120.0
"""For a free process to touch 200 MiB in a TCG guest on a busy 2-CPU machine."""

# Touches every page it allocates, so its anonymous memory is exactly what it holds; 4 MiB steps as fast
# as it can (the control shows how fast that is unthrottled).
GROW = """
blocks = []
held = 0
while held < {target}:
    block = bytearray({step})
    block[::4096] = b"\\x01" * len(block[::4096])
    blocks.append(block)
    held += {step}
import signal
while True:
    signal.pause()  # holds the memory until the test kills it by PID
"""
STEP = 4 * MIB


def slo(enable_be: bool = True) -> NodeSLOSpec:
    """BE memory QoS on with throttling only (no min/low protection, so memory.high is the one effect);
    LS left at Koordinator's defaults (off)."""
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {"beClass": {"memoryQOS": {
        "enable": enable_be, "minLimitPercent": 0, "lowLimitPercent": 0,
        "throttlingPercent": THROTTLING_PERCENT}}}}))


@dataclass
class Sample:
    at: float
    current: int
    high_events: int


@dataclass
class Watch:
    samples: list[Sample] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return max(s.current for s in self.samples)


def anon(groups: RealCgroups, rel: str) -> int:
    stat = groups.memory_stat(rel)
    return stat["anon"]


@pytest.mark.parametrize("cgroup_version", [V2])  # memory.high: v2 (or Anolis v1) only, see the module doc
def test_be_memory_high_throttles_a_growing_process(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    groups = real_cgroups
    prefix = groups.name
    be = make_pod("be", "BE", kube_parent=prefix, requests=Resources(batch_memory_bytes=REQUEST),
                  limits=Resources(batch_memory_bytes=LIMIT))
    ls = make_pod("ls", "LS", kube_parent=prefix, requests=Resources(memory_bytes=REQUEST),
                  limits=Resources(memory_bytes=LIMIT))
    rel = {name: meta.containers[0].cgroup_dir.removeprefix(prefix + "/") for name, meta in (("be", be), ("ls", ls))}
    for d in rel.values():
        groups.mkdir(d)
    layout = detect_layout(HostPaths())
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=FakeInformer([be, ls]),
                      cache=MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time),
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(), collector=CollectorConfig(), gates={GATE: True},
                      clock=time.time, decisions=DecisionLog(), kube_parent=prefix)
    strategy = CgroupReconcile(options)
    spec = slo()
    assert strategy.enabled(spec)

    decision = strategy.run_once(spec)
    assert decision.action == "reconcile", decision.summary
    assert decision.numbers["pod_values"]["default/be"]["containers"]["main"]["memory_high"] == HIGH
    assert set(decision.numbers["pod_values"]) == {"default/be"}  # LS memory QoS is off
    high_file = groups.path("memory", rel["be"]) / "memory.high"
    assert high_file.read_text().strip() == str(HIGH)
    assert (groups.path("memory", rel["ls"]) / "memory.high").read_text().strip() == "max"
    assert groups.memory_events(rel["be"])["high"] == 0

    grow = GROW.format(target=TARGET, step=STEP)
    started = time.monotonic()
    be_pid = groups.spawn(rel["be"], grow)
    groups.spawn(rel["ls"], grow)
    first_high = wait_until("BE usage to reach memory.high",
                            lambda: groups.memory_events(rel["be"])["high"] > 0 and time.monotonic(),
                            timeout=GROW_TIMEOUT)

    # Watch BE under memory.high for OBSERVE_SECONDS and until the free control process is full.
    watch = Watch()
    control_full: float | None = None
    while True:
        now = time.monotonic()
        events = groups.memory_events(rel["be"])
        watch.samples.append(Sample(now, groups.memory_usage(rel["be"]), events["high"]))
        if control_full is None and anon(groups, rel["ls"]) >= TARGET:
            control_full = now
        if control_full is not None and now - first_high >= OBSERVE_SECONDS:
            break
        assert now - started < GROW_TIMEOUT, "the control process never reached its full size"
        time.sleep(0.05)
    be_events = groups.memory_events(rel["be"])
    be_anon = anon(groups, rel["be"])
    first, last = watch.samples[0], watch.samples[-1]
    seconds = last.at - first.at
    print(f"\ncgreconcile memory.high {HIGH} B ({HIGH / MIB:.0f} MiB) on the BE container: over {seconds:.1f} s "
          f"BE memory.current {first.current / MIB:.1f} -> {last.current / MIB:.1f} MiB "
          f"(peak {watch.peak / MIB:.1f} MiB = {watch.peak / HIGH:.3f} x high, anon {be_anon / MIB:.1f} MiB), "
          f"memory.events high {first.high_events} -> {last.high_events}, max {be_events['max']}, "
          f"oom_kill {be_events['oom_kill']}; the unthrottled LS control held {TARGET / MIB:.0f} MiB "
          f"{control_full - started if control_full else float('nan'):.1f} s after start")
    be_rate = (last.current - first.current) / seconds
    assert control_full is not None
    control_rate = TARGET / (control_full - started)
    print(f"growth: BE {be_rate / MIB:.2f} MiB/s over memory.high, the control {control_rate / MIB:.2f} MiB/s free")
    assert last.high_events > first.high_events, "BE was not held at memory.high while watched"
    assert be_rate * SLOWDOWN <= control_rate
    assert watch.peak <= HIGH * (1 + NEAR), f"BE usage {watch.peak} went past memory.high {HIGH} by > {NEAR:.0%}"
    assert last.current >= HIGH, "BE stopped pressing against memory.high: it was not throttled but done"
    assert be_anon < TARGET - 2 * STEP
    assert be_events["oom_kill"] == 0 and be_events["max"] == 0

    # Switched off: memory.high is max again and the same process grows to its full size.
    off = strategy.run_once(spec, enabled=False)
    assert off.action == "recover", off.summary
    assert high_file.read_text().strip() == "max"
    lifted = time.monotonic()
    wait_until("the BE process to grow once memory.high is lifted", lambda: anon(groups, rel["be"]) >= TARGET,
               timeout=GROW_TIMEOUT)
    print(f"memory.high lifted: BE anon {be_anon / MIB:.1f} -> {TARGET / MIB:.0f} MiB "
          f"in {time.monotonic() - lifted:.1f} s")
    assert groups.memory_events(rel["be"])["oom_kill"] == 0
    groups.kill(be_pid)
