"""The sysreconcile strategy on a fake /proc and /sys: gate, writes through the kernel knob executor,
rejected values (the value in force stays), knobs the kernel lacks, restore when unset or switched off, and
the same through the QoS manager and the NodeSLO holder."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager.framework import Action, Options
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.plugins.sysreconcile import NAME, SystemConfig
from koordlet.qosmanager.registry import build_strategies
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.sysctl import ORIGINALS_FILE, SysctlExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.nodeslo import NodeSLOHolder, merge_over_defaults
from koordlet.system.sysfiles import MEMCG_REAP_BACKGROUND, MIN_FREE_KBYTES, WATERMARK_SCALE_FACTOR, SysFile
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, make_node, make_options
from tests.unit.resourceexecutor.fakesysctl import with_features

GIB = 1 << 30
ON = {gates.SYSTEM_CONFIG: True}


def _options(fake_host: FakeHost, tmp_path: Path, gate: bool = True, **config: float) -> Options:
    vm = Path(fake_host.paths.proc_root, "sys", "vm")
    vm.mkdir(parents=True, exist_ok=True)
    for file, text in ((MIN_FREE_KBYTES, "67584"), (WATERMARK_SCALE_FACTOR, "10")):
        if not Path(file.path(fake_host.paths)).exists():
            Path(file.path(fake_host.paths)).write_text(text + "\n")
    options = make_options(fake_host, tmp_path, FakeInformer(node_info=make_node(memory_bytes=16 * GIB)),
                           gates={gates.SYSTEM_CONFIG: gate}, config=QoSManagerConfig(**config))
    executor = SysctlExecutor(fake_host.paths, options.clock, MemoryAudit(),
                              originals_path=str(tmp_path / "state" / ORIGINALS_FILE))
    return dataclasses.replace(options, sysctl=executor)


def _spec(system: dict[str, object] | None) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({} if system is None else {"systemStrategy": system}, "spec"))


def _read(fake_host: FakeHost, file: SysFile) -> str:
    return Path(file.path(fake_host.paths)).read_text().strip()


def test_gate_decides_whether_it_runs(fake_host: FakeHost, tmp_path: Path) -> None:
    assert not SystemConfig(_options(fake_host, tmp_path, gate=False)).enabled(_spec({"watermarkScaleFactor": 150}))
    assert SystemConfig(_options(fake_host, tmp_path)).enabled(_spec(None))
    assert NAME in [s.name for s in build_strategies(_options(fake_host, tmp_path))]


def test_sets_the_knobs_then_stays_quiet(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = SystemConfig(_options(fake_host, tmp_path))
    spec = _spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150})
    first = strategy.run_once(spec)
    # 16 GiB = 16777216 KiB; x100 / 10000 = 167772 KiB.
    assert (_read(fake_host, MIN_FREE_KBYTES), _read(fake_host, WATERMARK_SCALE_FACTOR)) == ("167772", "150")
    assert first.action is Action.APPLY
    assert first.summary == "set min_free_kbytes=167772, watermark_scale_factor=150"
    assert first.numbers["memory_total_bytes"] == 16 * GIB
    second = strategy.run_once(spec)
    assert (second.action, second.summary) == (Action.NONE, "kernel knobs as systemStrategy asks")


def test_a_rejected_value_leaves_the_last_good_one_in_force(fake_host: FakeHost, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    strategy = SystemConfig(_options(fake_host, tmp_path))
    strategy.run_once(_spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}))
    bad = _spec({"minFreeKbytesFactor": 1, "watermarkScaleFactor": 200})
    decision = strategy.run_once(bad)
    assert decision.action is Action.INVALID
    message = ("systemStrategy.minFreeKbytesFactor=1 x 16777216 KiB / 10000: min_free_kbytes: 1677 is outside "
               "[10240, 10485760]; the value in force stays")
    assert decision.numbers["rejected"] == {"min_free_kbytes": message}
    assert message in decision.summary
    assert _read(fake_host, MIN_FREE_KBYTES) == "167772"  # the last good value
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "200"  # the valid knob still applied
    # The same rejection next round is no news: decided quietly, logged once.
    assert strategy.run_once(bad).action is Action.NONE
    warnings = [r for r in caplog.records if r.name.endswith("sysreconcile.strategy") and r.levelno == logging.WARNING]
    assert len(warnings) == 1


def test_a_knob_the_kernel_lacks_is_reported_once(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = SystemConfig(_options(fake_host, tmp_path))
    spec = _spec({"memcgReapBackGround": 1})
    first = strategy.run_once(spec)
    assert first.action is Action.UNSUPPORTED
    assert "unsupported here: memcg_reap_background" in first.summary
    assert "this kernel has no memcg_reap_background" in first.numbers["unsupported"]["memcg_reap_background"]
    assert strategy.run_once(spec).action is Action.NONE


def test_an_alibaba_kernel_gets_memcg_reaping(fake_host: FakeHost, tmp_path: Path) -> None:
    reaper = Path(MEMCG_REAP_BACKGROUND.path(fake_host.paths))
    reaper.parent.mkdir(parents=True)
    reaper.write_text("0\n")
    strategy = SystemConfig(_options(fake_host, tmp_path))
    assert strategy.run_once(_spec({"memcgReapBackGround": 1})).action is Action.APPLY
    assert reaper.read_text().strip() == "1"
    strategy.run_once(_spec(None), enabled=False)
    assert reaper.read_text().strip() == "0"


def test_a_knob_no_longer_set_goes_back_to_the_value_found_at_start(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = SystemConfig(_options(fake_host, tmp_path))
    strategy.run_once(_spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}))
    decision = strategy.run_once(_spec({"watermarkScaleFactor": 150}))
    assert decision.action is Action.APPLY
    assert decision.numbers["restored"] == {"min_free_kbytes": "67584"}
    assert (_read(fake_host, MIN_FREE_KBYTES), _read(fake_host, WATERMARK_SCALE_FACTOR)) == ("67584", "150")


def test_switched_off_every_knob_it_set_goes_back(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = SystemConfig(_options(fake_host, tmp_path))
    strategy.run_once(_spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}))
    off = strategy.run_once(_spec(None), enabled=False)
    assert off.action is Action.RECOVER
    assert off.numbers["restored"] == {"min_free_kbytes": "67584", "watermark_scale_factor": "10"}
    assert (_read(fake_host, MIN_FREE_KBYTES), _read(fake_host, WATERMARK_SCALE_FACTOR)) == ("67584", "10")
    assert strategy.run_once(_spec(None), enabled=False).action is Action.NONE


def test_after_a_restart_switching_off_restores_the_operators_value(fake_host: FakeHost, tmp_path: Path) -> None:
    spec = _spec({"watermarkScaleFactor": 150})
    SystemConfig(_options(fake_host, tmp_path)).run_once(spec)
    restarted = SystemConfig(_options(fake_host, tmp_path))  # same state dir, the file holds koordlet's 150
    assert restarted.run_once(spec).action is Action.NONE
    restarted.run_once(spec, enabled=False)
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "10"


def test_without_a_writer_the_round_is_skipped(fake_host: FakeHost, tmp_path: Path) -> None:
    options = dataclasses.replace(_options(fake_host, tmp_path), sysctl=None)
    decision = SystemConfig(options).run_once(_spec({"watermarkScaleFactor": 150}))
    assert decision.action is Action.SKIP
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "10"


def test_through_the_manager_gate_and_nodeslo_holder(fake_host: FakeHost, tmp_path: Path) -> None:
    """The whole path: a NodeSLO out of the API's bounds is rejected by the holder (the last good one stays in
    force, so do its values), and turning the gate off gives the manager's last round, which restores."""
    options = _options(fake_host, tmp_path)
    holder = NodeSLOHolder()
    assert holder.offer_spec({"systemStrategy": {"watermarkScaleFactor": 150}}, "test")
    manager = QoSManager(options, [SystemConfig(options)], holder, monotonic=FakeClock(100.0))
    manager.run_once(force=True)
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "150"

    assert not holder.offer_spec({"systemStrategy": {"watermarkScaleFactor": 401}}, "test")
    assert "spec.systemStrategy.watermarkScaleFactor: must be 1..400, got 401" in str(holder.current().rejected)
    manager.run_once(force=True)
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "150"

    options.gates[gates.SYSTEM_CONFIG] = False  # type: ignore[index]
    manager.run_once(force=True)
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "10"
    decision = options.decisions.last(NAME)
    assert decision is not None and decision.action is Action.RECOVER


def test_sched_features_are_switched_and_restored(fake_host: FakeHost, tmp_path: Path) -> None:
    options = _options(fake_host, tmp_path)
    kernel = with_features(fake_host.paths)
    assert options.sysctl is not None
    options = dataclasses.replace(options, sysctl=SysctlExecutor(fake_host.paths, options.clock, MemoryAudit(),
                                                                 writer=kernel))
    strategy = SystemConfig(options)
    spec = _spec({"schedFeatures": {"HRTICK": True, "GENTLE_FAIR_SLEEPERS": False, "bad-name": True}})
    first = strategy.run_once(spec)
    assert first.action is Action.INVALID
    assert first.numbers["written"] == {"sched_features:GENTLE_FAIR_SLEEPERS": "NO_GENTLE_FAIR_SLEEPERS",
                                        "sched_features:HRTICK": "HRTICK"}
    assert "sched_features:bad-name" in first.numbers["rejected"]
    assert Path(kernel.path).read_text().split() == ["NO_GENTLE_FAIR_SLEEPERS", "HRTICK", "WAKEUP_PREEMPTION"]
    strategy.run_once(_spec({"schedFeatures": {"HRTICK": True}}))  # GENTLE_FAIR_SLEEPERS no longer asked for
    assert Path(kernel.path).read_text().split() == ["GENTLE_FAIR_SLEEPERS", "HRTICK", "WAKEUP_PREEMPTION"]
    off = strategy.run_once(_spec(None), enabled=False)
    assert off.numbers["restored"] == {"sched_features:HRTICK": "0"}
    assert Path(kernel.path).read_text().split() == ["GENTLE_FAIR_SLEEPERS", "NO_HRTICK", "WAKEUP_PREEMPTION"]


def test_restarted_with_the_gate_off_the_previous_runs_values_go_back(fake_host: FakeHost, tmp_path: Path) -> None:
    """Gates are start-up flags: switching SystemConfig off means a restart, and the manager never calls a
    strategy that was never enabled.  The originals the executor kept in the state dir make one round run."""
    SystemConfig(_options(fake_host, tmp_path)).run_once(_spec({"minFreeKbytesFactor": 100,
                                                                "watermarkScaleFactor": 150}))
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "150"

    options = _options(fake_host, tmp_path, gate=False)  # the new process: same state dir, gate off
    holder = NodeSLOHolder()
    assert holder.offer_spec({"systemStrategy": {"watermarkScaleFactor": 150}}, "test")
    strategy = SystemConfig(options)
    manager = QoSManager(options, [strategy], holder, monotonic=FakeClock(100.0))
    manager.run_once(force=True)
    assert (_read(fake_host, MIN_FREE_KBYTES), _read(fake_host, WATERMARK_SCALE_FACTOR)) == ("67584", "10")
    decision = options.decisions.last(NAME)
    assert decision is not None and decision.action is Action.RECOVER
    manager.run_once(force=True)  # the manager's closing round for a strategy no longer enabled
    assert not strategy.enabled(holder.current().spec)
    assert options.sysctl is not None and options.sysctl.restorable() == {}


def test_restarted_with_the_knob_unset_it_goes_back(fake_host: FakeHost, tmp_path: Path) -> None:
    SystemConfig(_options(fake_host, tmp_path)).run_once(_spec({"watermarkScaleFactor": 150}))
    restarted = SystemConfig(_options(fake_host, tmp_path))
    decision = restarted.run_once(_spec(None))
    assert decision.numbers["restored"] == {"watermark_scale_factor": "10"}
    assert _read(fake_host, WATERMARK_SCALE_FACTOR) == "10"


def test_the_group_identity_switch_an_earlier_run_set_is_not_taken_over(fake_host: FakeHost, tmp_path: Path) -> None:
    """The group identity runtime hook writes the same switch; restoring it at start would flip it under
    running LS pods until the hook's next reconcile."""
    switch = Path(fake_host.paths.proc_root, "sys", "kernel", "sched_group_identity_enabled")
    switch.parent.mkdir(parents=True, exist_ok=True)
    switch.write_text("0\n")
    SystemConfig(_options(fake_host, tmp_path)).run_once(_spec({"schedGroupIdentityEnabled": 1}))
    restarted = SystemConfig(_options(fake_host, tmp_path, gate=False))
    assert not restarted.enabled(_spec(None))
    assert switch.read_text().strip() == "1"


def test_in_shadow_mode_the_knobs_are_decided_as_in_active_mode_and_left_untouched(fake_host: FakeHost,
                                                                                   tmp_path: Path) -> None:
    """The same NodeSLO edits in shadow mode and then in active mode give the same decisions; shadow mode writes
    nothing and audits what it would have written."""
    steps = [(_spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}), True),
             (_spec({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}), True),
             (_spec({"watermarkScaleFactor": 150}), True),
             (_spec(None), False)]
    options = _options(fake_host, tmp_path)
    assert isinstance(options.sysctl, SysctlExecutor)
    shadow = Shadow(ShadowModes(default=True), ResourceExecutor(options.layout, options.clock, None), options.evictor,
                    sysctl=options.sysctl)
    shadowed = SystemConfig(shadow.options_for(NAME, options))
    writers = shadow.writers[NAME]
    decided = []
    for spec, enabled in steps:
        writers.begin_round(True)
        decision = shadowed.run_once(spec, enabled)
        decided.append((decision.action, decision.summary, list(writers.intended)))
        assert (_read(fake_host, MIN_FREE_KBYTES), _read(fake_host, WATERMARK_SCALE_FACTOR)) == ("67584", "10")
    audit = options.sysctl._audit
    assert isinstance(audit, MemoryAudit) and {e.outcome for e in audit.entries} == {"intended"}
    assert options.sysctl.restorable() == {}  # nothing written, nothing to put back

    active = SystemConfig(_options(fake_host, tmp_path))
    assert [(d.action, d.summary) for d in (active.run_once(spec, enabled) for spec, enabled in steps)] == [
        (action, summary) for action, summary, _ in decided]
    assert [len(intended) for _, _, intended in decided] == [2, 0, 1, 1]
    first = decided[0][2][0]
    assert "min_free_kbytes to '167772' because sysreconcile: systemStrategy.minFreeKbytesFactor=100" in first


def test_in_shadow_mode_sched_features_are_decided_and_left_untouched(fake_host: FakeHost, tmp_path: Path) -> None:
    options = _options(fake_host, tmp_path)
    kernel = with_features(fake_host.paths)
    executor = SysctlExecutor(fake_host.paths, options.clock, MemoryAudit(), writer=kernel)
    options = dataclasses.replace(options, sysctl=executor)
    shadow = Shadow(ShadowModes(default=True), ResourceExecutor(options.layout, options.clock, None), options.evictor,
                    sysctl=executor)
    strategy = SystemConfig(shadow.options_for(NAME, options))
    writers = shadow.writers[NAME]
    before = Path(kernel.path).read_text()
    decisions = []
    for spec, enabled in ((_spec({"schedFeatures": {"HRTICK": True, "GENTLE_FAIR_SLEEPERS": False}}), True),
                          (_spec({"schedFeatures": {"HRTICK": True}}), True), (_spec(None), False)):
        writers.begin_round(True)
        decisions.append(strategy.run_once(spec, enabled))
        assert Path(kernel.path).read_text() == before
    assert decisions[0].numbers["written"] == {"sched_features:GENTLE_FAIR_SLEEPERS": "NO_GENTLE_FAIR_SLEEPERS",
                                               "sched_features:HRTICK": "HRTICK"}
    assert decisions[1].numbers["restored"] == {"sched_features:GENTLE_FAIR_SLEEPERS": "1"}
    assert (decisions[2].action, decisions[2].numbers["restored"]) == (Action.RECOVER, {"sched_features:HRTICK": "0"})
    assert executor.restorable() == {}
