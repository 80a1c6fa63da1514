"""PSI triggers (issue 23): the trigger option, widening without CAP_SYS_RESOURCE, and the watcher's thread
logic against a fake poll (the real kernel: tests/integration/qosmanager/test_pressure_real.py)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.config.types import QoSManagerConfig
from koordlet.errors import ConfigError, NativeError
from koordlet.qosmanager import pressure
from koordlet.qosmanager.pressure import PressureWatcher, TriggerSpec, parse_triggers, pressure_path
from koordlet.system.kubepaths import CgroupDriver
from tests.fixtures.fakehost import FakeHost


def test_the_default_triggers_parse() -> None:
    specs = parse_triggers(QoSManagerConfig().pressure_triggers)
    assert [(s.name, s.text, s.wakes) for s in specs] == [
        ("node-memory-some", "some 70000 1000000", ("memoryevict",)),
        ("kubepods-memory-some", "some 70000 1000000", ("memoryevict",)),
        ("besteffort-cpu-some", "some 600000 1000000", ("cpuevict",)),
    ]


def test_empty_means_no_triggers() -> None:
    assert parse_triggers("") == [] and parse_triggers(" ; ") == []


@pytest.mark.parametrize(("value", "says"), [
    ("node memory some 70000", "must be '<scope> <resource> <some|full> <stall_us> <window_us>'"),
    ("pod memory some 70000 1000000", "scope 'pod' is none of node, kubepods, besteffort"),
    ("node disk some 70000 1000000", "resource 'disk' is none of memory, cpu"),
    ("node memory most 70000 1000000", "'most' is neither some nor full"),
    ("node memory some 70ms 1s", "stall and window must be microseconds"),
    ("node memory some 70000 100000", "window 100000 us is outside the kernel's 500000-10000000"),
    ("node memory some 2000000 1000000", "stall 2000000 us must be positive and at most the window"),
    ("node memory some 0 1000000", "must be positive"),
    ("node memory some 1 1000000; node memory some 2 1000000", "node-memory-some given twice"),
])
def test_a_bad_trigger_is_named(value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"qos\.pressureTriggers") as caught:
        parse_triggers(value)
    assert says in str(caught.value)


@pytest.mark.parametrize(("text", "widened"), [
    ("some 70000 1000000", "some 140000 2000000"),
    ("full 500000 3000000", "full 666666 4000000"),
    ("some 100000 2000000", "some 100000 2000000"),
])
def test_without_cap_sys_resource_a_window_widens_to_2s_multiples(text: str, widened: str) -> None:
    kind, stall, window = text.split()
    spec = TriggerSpec("node", "memory", kind, int(stall), int(window))
    assert spec.widened().text == widened
    assert (spec.widened().note != "") == (text != widened)


def test_cap_sys_resource_is_read_from_the_effective_set(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001fffeffffff\n")  # this host: everything but bit 24
    assert not pressure.has_cap_sys_resource(str(status))
    status.write_text("CapEff:\t000001ffffffffff\n")
    assert pressure.has_cap_sys_resource(str(status))
    assert not pressure.has_cap_sys_resource(str(tmp_path / "absent"))


def test_paths_node_and_cgroups(fake_host: FakeHost) -> None:
    fake_host.set_mode("hybrid")  # per-cgroup PSI in the unified tree, as on this test host
    layout = fake_host.layout()
    node, kubepods, be = parse_triggers(QoSManagerConfig().pressure_triggers)
    assert pressure_path(layout, CgroupDriver.CGROUPFS, "", node) == fake_host.paths.proc("pressure", "memory")
    assert pressure_path(layout, CgroupDriver.CGROUPFS, "", kubepods) == (
        f"{layout.unified_dir('kubepods')}/memory.pressure")
    assert pressure_path(layout, CgroupDriver.SYSTEMD, "", be) == (
        f"{layout.unified_dir('kubepods.slice/kubepods-besteffort.slice')}/cpu.pressure")


# ------------------------------------------------------------------------------------------ the watcher


@dataclass
class FakeTrigger:
    path: str
    text: str
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class Kernel:
    """Stands in for open + poll: ``missing`` paths answer ENOENT; ``fire``/``break_`` name what the next poll
    reports."""

    missing: set[str] = field(default_factory=set)
    opened: list[FakeTrigger] = field(default_factory=list)
    fire: set[str] = field(default_factory=set)
    break_: set[str] = field(default_factory=set)
    polls: list[int] = field(default_factory=list)

    def open(self, path: str, text: str) -> Any:
        if path in self.missing:
            raise NativeError(errno.ENOENT, f"PSI trigger {text!r} on {path}")
        trigger = FakeTrigger(path, text)
        self.opened.append(trigger)
        return trigger

    def poll(self, triggers: Sequence[Any], timeout_ms: int) -> native.PsiPoll:
        self.polls.append(len(triggers))
        fired = [t for t in triggers if t.path in self.fire]
        broken = [t for t in triggers if t.path in self.break_]
        self.fire, self.break_ = set(), set()
        return native.PsiPoll(fired, broken)


@dataclass
class Sink:
    wakes: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def wake(self, strategies: Sequence[str], cause: str) -> None:
        self.wakes.append((tuple(strategies), cause))


@dataclass
class Fired:
    fired: list[tuple[str, float]] = field(default_factory=list)

    def psi_trigger_fired(self, trigger: str, at: float) -> None:
        self.fired.append((trigger, at))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watcher(kernel: Kernel, paths: dict[str, str | Exception] | None = None
             ) -> tuple[PressureWatcher, Sink, Fired, Clock]:
    specs = parse_triggers(QoSManagerConfig().pressure_triggers)
    paths = paths or {"node-memory-some": "/proc/pressure/memory", "kubepods-memory-some": "/kp/memory.pressure",
                      "besteffort-cpu-some": "/be/cpu.pressure"}
    sink, fired, clock = Sink(), Fired(), Clock()
    watcher = PressureWatcher(specs, paths, sink, fired, clock=clock, monotonic=clock, poll=kernel.poll,
                              open_trigger=kernel.open)
    return watcher, sink, fired, clock


def test_a_firing_wakes_its_strategies_once_naming_every_trigger() -> None:
    kernel = Kernel()
    watcher, sink, fired, clock = _watcher(kernel)
    kernel.fire = {"/proc/pressure/memory", "/kp/memory.pressure"}
    assert watcher.poll_once(10) == ["node-memory-some", "kubepods-memory-some"]
    assert sink.wakes == [(("memoryevict",), "psi node-memory-some,kubepods-memory-some")]
    assert fired.fired == [("node-memory-some", 1000.0), ("kubepods-memory-some", 1000.0)]
    clock.now = 1002.0
    kernel.fire = {"/be/cpu.pressure"}
    watcher.poll_once(10)
    assert sink.wakes[-1] == (("cpuevict",), "psi besteffort-cpu-some")
    status = {s["name"]: s for s in watcher.status()}
    assert status["node-memory-some"] == {
        "name": "node-memory-some", "path": "/proc/pressure/memory", "trigger": "some 70000 1000000",
        "wakes": ["memoryevict"], "registered": True, "error": "", "note": "", "fired": 1, "last_fired": 1000.0}
    assert status["besteffort-cpu-some"]["last_fired"] == 1002.0
    assert kernel.polls == [3, 3]  # one poll over every trigger


def test_a_missing_cgroup_is_retried_and_a_removed_one_registered_again() -> None:
    kernel = Kernel(missing={"/kp/memory.pressure"})
    watcher, sink, _, clock = _watcher(kernel)
    watcher.poll_once(10)
    kp = next(s for s in watcher.status() if s["name"] == "kubepods-memory-some")
    assert not kp["registered"] and kp["error"] == "/kp/memory.pressure missing"
    kernel.missing.clear()
    clock.now += pressure.RETRY_SECONDS - 1
    watcher.poll_once(10)
    assert kernel.polls[-1] == 2  # not retried before its time
    clock.now += 1
    watcher.poll_once(10)
    assert kernel.polls[-1] == 3
    kernel.break_ = {"/kp/memory.pressure"}  # the cgroup went away: POLLERR
    watcher.poll_once(10)
    kp_trigger = next(t for t in kernel.opened if t.path == "/kp/memory.pressure")
    assert kp_trigger.closed and sink.wakes == []
    kp = next(s for s in watcher.status() if s["name"] == "kubepods-memory-some")
    assert not kp["registered"] and "went away" in kp["error"]
    clock.now += pressure.RETRY_SECONDS
    watcher.poll_once(10)
    assert next(s for s in watcher.status() if s["name"] == "kubepods-memory-some")["registered"]


def test_a_trigger_without_a_path_says_why_and_the_others_run() -> None:
    kernel = Kernel()
    paths: dict[str, str | Exception] = {"node-memory-some": "/proc/pressure/memory",
                                         "kubepods-memory-some": NativeError(errno.ENOENT, "no cgroup v2 hierarchy"),
                                         "besteffort-cpu-some": "/be/cpu.pressure"}
    watcher, _, _, clock = _watcher(kernel, paths)
    for _ in range(3):
        watcher.poll_once(10)
        clock.now += pressure.RETRY_SECONDS
    kp = next(s for s in watcher.status() if s["name"] == "kubepods-memory-some")
    assert not kp["registered"] and "no cgroup v2 hierarchy" in kp["error"]
    assert kernel.polls == [2, 2, 2]


def test_stop_closes_the_triggers() -> None:
    kernel = Kernel()
    watcher, _, _, _ = _watcher(kernel)
    failures: list[BaseException] = []
    watcher.start(failures.append)
    assert watcher.running
    watcher.stop(5)
    assert not watcher.running and not failures
    assert kernel.opened and all(t.closed for t in kernel.opened)
