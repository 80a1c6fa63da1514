"""Core scheduling in shadow mode (koordlet/isolation/coresched/shadow.py): the coresched strategy decides round by
round exactly as in active mode on the same scenario, asks the kernel only for cookies (PR_SCHED_CORE_GET), writes
no cpu.idle and audits each cookie it would have given; switched to active it starts from the real cookies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from koordlet.apis.extension import LABEL_CORE_SCHED_GROUP
from koordlet.config.gates import CORE_SCHED as GATE
from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.isolation.coresched.rules import LABEL_CORE_SCHED_POLICY
from koordlet.qosmanager.evictor import Evictions
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.plugins.coresched.strategy import CoreSched
from koordlet.qosmanager.shadow import Shadow, StrategyWriters
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FakeNative
from tests.unit.qosmanager.coresched.test_strategy import BE_DIR, LS_DIR, SEED, Env
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, make_options

NAME = "coresched"


@dataclasses.dataclass
class Side:
    env: Env
    writers: StrategyWriters | None
    audit: MemoryAudit
    """The cgroup executor's audit (intended cpu.idle and cookie calls in shadow mode)."""
    prctl_audit: MemoryAudit

    def run(self, enabled: bool = True) -> Decision:
        if self.writers is not None:
            self.writers.begin_round(True)
        decision = self.env.run(SEED, enabled)
        if self.writers is not None:
            decision = dataclasses.replace(decision, shadow=True, intended=tuple(self.writers.intended))
        return decision


def side(host: FakeHost, tmp_path: Path, *, shadow: bool) -> Side:
    host.mkdir_cgroup(BE_DIR)
    host.mkdir_cgroup(LS_DIR)
    informer, clock, native, prctl_audit = FakeInformer(), FakeClock(1_700_000_000.0), FakeNative(), MemoryAudit()
    options = make_options(host, tmp_path, informer, clock=clock, gates={GATE: True})
    coresched = CoreSchedExecutor(native, prctl_audit, clock)
    options = dataclasses.replace(options, coresched=coresched, cookies=CookieBook(coresched))
    executor = options.executor
    assert isinstance(executor, ResourceExecutor) and isinstance(options.evictor, Evictions)
    writers = None
    if shadow:
        modes = ShadowModes(default=True, known=[NAME])
        box = Shadow(modes, executor, options.evictor)
        options = box.options_for(NAME, options)
        writers = box.writers[NAME]
    return Side(Env(host, informer, native, CoreSched(options), clock), writers, executor._audit,  # type: ignore[arg-type]
                prctl_audit)


def scenario(s: Side) -> list[Decision]:
    """Pods start, tasks join, a pod turns to policy none, a group's only task exits and a new pod joins that
    group, then the strategy is switched off."""
    env = s.env
    a = env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    env.pod("b", "LS", [[200]], labels={LABEL_CORE_SCHED_GROUP: "g2"})
    env.pod("d", "BE", [[400]])
    decisions = [s.run()]
    env.procs(a.containers[0].cgroup_dir, [100, 101, 102])
    decisions.append(s.run())
    labels = {**a.pod.labels, LABEL_CORE_SCHED_POLICY: "none"}
    env.informer.pod_list[0] = dataclasses.replace(a, pod=dataclasses.replace(a.pod, labels=labels))
    decisions.append(s.run())
    env.native.exited.add(200)
    env.pod("e", "LS", [[500]], labels={LABEL_CORE_SCHED_GROUP: "g2"})
    decisions.append(s.run())
    decisions.append(s.run(enabled=False))
    return decisions


def comparable(decision: Decision) -> tuple[Any, ...]:
    """A decision without what only the mode changes: cookie values (the kernel's are addresses, shadow mode
    numbers its own), the write counts by outcome, and the shadow marks."""
    numbers = dict(decision.numbers)
    groups = numbers.pop("groups", {})
    cookies: dict[int, int] = {}
    numbers["groups"] = {g: (cookies.setdefault(v["cookie"], len(cookies)), v["tasks"]) for g, v in groups.items()}
    for key in ("writes", "intended"):
        numbers.pop(key, None)
    return decision.action, decision.summary, numbers


def test_a_shadow_run_decides_as_an_active_run_and_changes_no_cookie(tmp_path: Path) -> None:
    active = side(FakeHost(tmp_path / "active"), tmp_path / "a", shadow=False)
    shadow = side(FakeHost(tmp_path / "shadow"), tmp_path / "s", shadow=True)
    idle_before = _idle(shadow.env.host)
    active_decisions, shadow_decisions = scenario(active), scenario(shadow)

    assert [comparable(d) for d in shadow_decisions] == [comparable(d) for d in active_decisions]
    assert [d.action for d in active_decisions] == ["reconcile", "reconcile", "reconcile", "reconcile", "recover"]
    assert active.env.native.cookies  # the scenario does give cookies in active mode
    # Shadow mode: the kernel was only asked, and no cgroup file changed.
    assert {op for op, _, _ in shadow.env.native.calls} == {"get"}
    assert shadow.env.native.cookies == {}
    assert _idle(shadow.env.host) == idle_before
    assert shadow.prctl_audit.entries == []
    intended = [e for e in shadow.audit.entries if e.resource == "core_sched"]
    assert all(e.outcome == "intended" for e in shadow.audit.entries)
    assert [e.new.split(" for pids ")[1] for e in intended[:4]] == ["100 101", "200", "400", "102"]
    assert intended[0].owner == "coresched: group 'default/g1-expeller' for default/a/c0"
    first = shadow_decisions[0]
    assert first.shadow and any("pid:100" in line and "create" in line for line in first.intended)


def test_switched_to_active_the_strategy_starts_from_the_real_cookies(tmp_path: Path) -> None:
    s = side(FakeHost(tmp_path / "host"), tmp_path / "m", shadow=True)
    s.env.pod("a", "LS", [[100, 101]], labels={LABEL_CORE_SCHED_GROUP: "g1"})
    s.run()
    assert s.env.native.cookies == {}
    assert s.writers is not None
    s.writers.begin_round(False)  # active: what the shadow rounds believed is dropped
    decision = s.env.run(SEED)
    assert len(decision.numbers["new_cookies"]) == 1 and decision.numbers["tasks_assigned"] == 2
    cookie = s.env.native.cookies[100]
    assert cookie and s.env.native.cookies == {100: cookie, 101: cookie}
    # Back in shadow mode the copy starts from the book in force: nothing more to give.
    s.env.native.take_calls()
    again = s.run()
    assert again.action == "none" and again.intended == ()
    assert {op for op, _, _ in s.env.native.take_calls()} <= {"get"}


def _idle(host: FakeHost) -> dict[str, str]:
    read: Callable[[str], str] = lambda d: host.read_cgroup(d, REGISTRY["cpu_idle"]).strip()  # noqa: E731
    return {d: read(d) for d in (BE_DIR, LS_DIR)}
