"""Shadow mode (koordlet/qosmanager/shadow.py): modes switched at run time take effect in the next round, a shadow
round writes and evicts nothing and its decision says what it would have done, and the configured modes name only
strategies that exist."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import cast

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config.types import QoSManagerConfig
from koordlet.daemon.agent import shadow_modes
from koordlet.errors import ConfigError
from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.plugins import Plugin
from koordlet.qosmanager.evictor import Evictions
from koordlet.qosmanager.framework import Action, Decision, Options
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.reader import CgroupReader
from koordlet.qosmanager.registry import build_strategies, registry
from koordlet.qosmanager.shadow import MAX_INTENDED, Shadow
from koordlet.resourceexecutor import CgroupUpdate, ResourceExecutor
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.resourceexecutor.tc import TcNetQoS
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system import resources as r
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FakeNative
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, RecordingBackend, make_options, make_pod

BE = "kubepods/besteffort"
WRITERS = (ResourceExecutor, Evictions, CgroupReader, CoreSchedExecutor, CookieBook, SysctlExecutor, ResctrlExecutor)
"""The writers a strategy could be handed (the reader stands for the would-be values a shadow round reads back)."""


class EverySecond:
    """A strategy always enabled, every second."""

    def enabled(self, slo: NodeSLOSpec) -> bool:
        return True

    def interval(self) -> float:
        return 1.0


@dataclass
class Limiter(EverySecond):
    """Limits BE's CPU quota and evicts one pod every round, as a suppress or evict strategy would."""

    options: Options
    name: str = "limiter"
    quota: int = 50_000

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        (result,) = self.options.executor.apply([CgroupUpdate(r.CPU_CFS_QUOTA, BE, self.quota, "limiter: be quota")])
        evicted = self.options.evictor.evict(make_pod("be", "BE"), "EvictPodByNodeMemoryUsage", "node memory 78%")
        return Decision(self.name, self.options.clock(), Action.SUPPRESS, f"{result.outcome.value}, {evicted}")


def _rig(fake_cgroup_host: FakeHost, tmp_path: Path, modes: ShadowModes
         ) -> tuple[QoSManager, Limiter, RecordingBackend, MemoryAudit, FakeClock]:
    fake_cgroup_host.mkdir_cgroup(BE)
    backend = RecordingBackend()
    options = make_options(fake_cgroup_host, tmp_path, FakeInformer(), backend=backend)
    executor, evictor = cast(ResourceExecutor, options.executor), cast(Evictions, options.evictor)
    shadow = Shadow(modes, executor, evictor)
    limiters: list[Limiter] = []

    def new(deps: Options) -> Limiter:
        limiters.append(Limiter(deps))
        return limiters[-1]

    strategies = build_strategies(options, [Plugin("limiter", new)], shadow=shadow)
    mono = FakeClock(100.0)
    manager = QoSManager(options, strategies, NodeSLOHolder(), monotonic=mono, shadow=shadow)
    return manager, limiters[0], backend, executor._audit, mono  # type: ignore[return-value]


def _quota(host: FakeHost) -> str:
    return host.read_cgroup(BE, r.CPU_CFS_QUOTA).strip()


def test_a_shadow_round_decides_as_active_and_changes_nothing(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    modes = ShadowModes(default=True, known=["limiter"])
    manager, _, backend, audit, mono = _rig(fake_cgroup_host, tmp_path, modes)
    before = _quota(fake_cgroup_host)
    manager.run_once(force=True)
    decision = manager.options.decisions.last("limiter")
    assert decision is not None and decision.shadow and decision.action is Action.SUPPRESS
    assert decision.summary == "intended, True"
    assert decision.intended[0].startswith(f"would set {fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_QUOTA)} to ")
    assert decision.intended[0].endswith("because limiter: be quota")
    assert decision.intended[1] == "would evict default/be because EvictPodByNodeMemoryUsage: node memory 78%"
    assert _quota(fake_cgroup_host) == before and backend.evicted == []
    assert [e.outcome for e in audit.entries] == ["intended"]
    assert decision.to_json()["shadow"] is True and len(decision.to_json()["intended"]) == 2

    # Active from the next round on, with no restart: the write and the eviction happen.
    modes.set("limiter", False)
    mono.advance(1.0)
    manager.run_once()
    active = manager.options.decisions.last("limiter")
    assert active is not None and not active.shadow and active.intended == ()
    assert active.summary == "written, True"  # the pod shadow mode "evicted" is pending: not evicted twice
    assert _quota(fake_cgroup_host) != before and backend.evicted == []
    assert [e.outcome for e in audit.entries] == ["intended", "written"]


def test_switching_to_shadow_mode_stops_writes_from_the_next_round(fake_cgroup_host: FakeHost,
                                                                   tmp_path: Path) -> None:
    modes = ShadowModes(known=["limiter"])
    manager, limiter, backend, _, mono = _rig(fake_cgroup_host, tmp_path, modes)
    manager.run_once(force=True)
    assert backend.evicted == [("default/be", "EvictPodByNodeMemoryUsage")]
    written = _quota(fake_cgroup_host)
    modes.set(None, True)  # the default: every strategy without an override of its own
    limiter.quota = 70_000
    mono.advance(1.0)
    manager.run_once()
    decision = manager.options.decisions.last("limiter")
    assert decision is not None and decision.shadow and len(decision.intended) == 1
    assert _quota(fake_cgroup_host) == written
    modes.set("limiter", False)  # an override beats the default
    assert not modes.shadow("limiter") and modes.to_json() == {"default": True, "strategies": {"limiter": False}}
    modes.set("limiter", None)
    assert modes.shadow("limiter")


def test_a_strategy_holds_no_writer_but_its_shadow_views(fake_host: FakeHost, tmp_path: Path) -> None:
    """Whatever a strategy writes through (cgroups, evictions, kernel knobs, resctrl, core scheduling, network QoS)
    is a view that follows its mode: none of the shared writers reaches a strategy as it is."""
    options = make_options(fake_host, tmp_path, FakeInformer())
    coresched = CoreSchedExecutor(FakeNative(), MemoryAudit(), FakeClock())
    sysctl = SysctlExecutor(fake_host.paths)
    resctrl = ResctrlExecutor(str(tmp_path / "resctrl"), FakeClock(), None)
    options = replace(options, coresched=coresched, cookies=CookieBook(coresched), sysctl=sysctl, resctrl=resctrl,
                      netqos=lambda policy: TcNetQoS("lo"))
    shadow = Shadow(ShadowModes(), cast(ResourceExecutor, options.executor), cast(Evictions, options.evictor),
                    sysctl=sysctl, resctrl=resctrl)
    shared = {id(getattr(options, f.name)) for f in fields(options)
              if isinstance(getattr(options, f.name), WRITERS)}
    assert len(shared) == 7
    for name in registry():
        own = shadow.options_for(name, options)
        assert [f.name for f in fields(own) if id(getattr(own, f.name)) in shared] == [], name
        assert own.netqos is not None and not isinstance(own.netqos("tc"), TcNetQoS)


def test_a_decision_lists_a_bounded_number_of_intentions(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    modes = ShadowModes(default=True)
    manager, limiter, _, _, _ = _rig(fake_cgroup_host, tmp_path, modes)
    writers = manager.shadow.writers["limiter"]  # type: ignore[union-attr]
    writers.begin_round(True)
    for n in range(MAX_INTENDED + 10):
        limiter.quota = 10_000 + n
        writers.apply([CgroupUpdate(r.CPU_CFS_QUOTA, BE, limiter.quota, "limiter: be quota")])
    assert len(writers.intended) == MAX_INTENDED


def test_configured_modes_name_known_strategies_only() -> None:
    modes = shadow_modes(QoSManagerConfig(shadow=False, shadow_strategies="cpuevict, memoryevict"))
    assert modes.to_json() == {"default": False, "strategies": {"cpuevict": True, "memoryevict": True}}
    assert shadow_modes(QoSManagerConfig(shadow=True)).shadow("cpusuppress")
    with pytest.raises(ConfigError, match=r"qos\.shadowStrategies: unknown strategy cpuevcit \(known: cpusuppress"):
        shadow_modes(QoSManagerConfig(shadow_strategies="cpuevcit"))
    with pytest.raises(ConfigError, match="unknown strategy 'nope'"):
        shadow_modes(QoSManagerConfig()).set("nope", True)
    with pytest.raises(ConfigError, match="cannot be dropped"):
        ShadowModes().set(None, None)



@dataclass
class Stepper(EverySecond):
    """Lowers BE's cpuset by one CPU per round from the one in force, as cpusuppress's growth limit reads it."""

    options: Options
    name: str = "stepper"

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        cpus = self.options.reader.read(r.CPUSET_CPUS, BE)
        wanted = cpus[:-1] or cpus
        self.options.executor.apply([CgroupUpdate(r.CPUSET_CPUS, BE, wanted, "stepper: be cpuset")])
        return Decision(self.name, 0.0, Action.SUPPRESS, f"{len(cpus)} -> {len(wanted)}", {"cpus": len(wanted)})


def test_a_shadow_round_goes_on_from_what_it_would_have_written(fake_cgroup_host: FakeHost,
                                                                 tmp_path: Path) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    fake_cgroup_host.write_cgroup(BE, r.CPUSET_CPUS, "0-3")
    decisions: dict[bool, list[object]] = {}
    for shadowed in (False, True):
        fake_cgroup_host.write_cgroup(BE, r.CPUSET_CPUS, "0-3")
        options = make_options(fake_cgroup_host, tmp_path / str(shadowed), FakeInformer())
        shadow = Shadow(ShadowModes(default=shadowed), cast(ResourceExecutor, options.executor),
                        cast(Evictions, options.evictor))
        strategies = build_strategies(options, [Plugin("stepper", lambda deps: Stepper(deps))], shadow=shadow)
        manager = QoSManager(options, strategies, NodeSLOHolder(), monotonic=FakeClock(100.0), shadow=shadow)
        for _ in range(3):
            manager.run_once(force=True)
            decisions.setdefault(shadowed, []).append(manager.options.decisions.last("stepper").numbers)  # type: ignore[union-attr]
        assert fake_cgroup_host.read_cgroup(BE, r.CPUSET_CPUS).strip() == ("0-3" if shadowed else "0")
    assert decisions[True] == decisions[False] == [{"cpus": 3}, {"cpus": 2}, {"cpus": 1}]
