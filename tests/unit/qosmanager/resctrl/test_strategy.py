"""The resctrl strategy over a fake resctrl tree (``fakeresctrl``) and fake v1/v2 cgroup trees: the exact
schemata text per class and per pod on Intel and AMD, task moves, cleanup of groups of gone pods, switch-off,
bad input rejected before any write, and a host without resctrl reported once."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, ResctrlQOSCfg, merge_over_defaults
from koordlet.config.gates import RDT_RESCTRL as GATE
from koordlet.config.gates import RESCTRL as POD_GATE
from koordlet.isolation.resctrl.annotation import ANNOTATION_RESCTRL
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.plugins import resctrl
from koordlet.qosmanager.plugins.resctrl.strategy import NO_BACKEND, ResctrlQoS
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_options, make_pod
from tests.unit.qosmanager.resctrl.fakeresctrl import AMD, INTEL, FakeKernel, build_tree, make_executor
from tests.unit.resourceexecutor.fakes import MemoryAudit

LOGGER = "koordlet.qosmanager.plugins.resctrl.strategy"
FULL_11 = "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"


def slo(**classes: Mapping[str, Any]) -> NodeSLOSpec:
    """``slo(be={"enable": True, ...})``: resctrlQOS per class, merged over Koordinator's defaults."""
    names = {"lsr": "lsrClass", "ls": "lsClass", "be": "beClass"}
    strategy = {names[k]: {"resctrlQOS": dict(v)} for k, v in classes.items()}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": strategy}))


ALL_ON = slo(lsr={"enable": True}, ls={"enable": True}, be={"enable": True})
OFF = slo()


def with_class(spec: NodeSLOSpec, attr: str, **values: Any) -> NodeSLOSpec:
    """Bypasses the NodeSLO parser (which rejects these too) to feed the strategy values a spec built in code
    could hold."""
    strategy = spec.resource_qos_strategy
    assert strategy is not None
    cls = getattr(strategy, attr)
    cfg = dataclasses.replace(cls.resctrl_qos or ResctrlQOSCfg(), **values)
    return dataclasses.replace(spec, resource_qos_strategy=dataclasses.replace(
        strategy, **{attr: dataclasses.replace(cls, resctrl_qos=cfg)}))


@dataclass
class Env:
    host: FakeHost
    informer: FakeInformer
    kernel: FakeKernel
    strategy: ResctrlQoS
    clock: FakeClock

    def pod(self, name: str, qos: str, threads: Sequence[Sequence[int]] = ((),),
            annotations: Mapping[str, str] | None = None) -> PodMeta:
        containers = tuple(f"c{i}" for i in range(len(threads)))
        meta = make_pod(name, qos, containers=containers, annotations=annotations)
        self.host.mkdir_cgroup(meta.cgroup_dir)
        for container, tids in zip(meta.containers, threads, strict=True):
            self.host.mkdir_cgroup(container.cgroup_dir)
            self.host.write_cgroup(container.cgroup_dir, REGISTRY["tasks"], "".join(f"{t}\n" for t in tids))
        self.informer.pod_list.append(meta)
        return meta

    def run(self, spec: NodeSLOSpec = ALL_ON, enabled: bool = True) -> Decision:
        decision = self.strategy.run_once(spec, enabled)
        assert decision.strategy == "resctrl"
        return decision

    def writes(self) -> dict[str, str]:
        """Group -> the last schemata text written; the list is cleared."""
        last = dict(self.kernel.schemata_writes)
        self.kernel.schemata_writes.clear()
        return last


def make_env(host: FakeHost, tmp_path: Path, *, vendor: str = INTEL, gates: Mapping[str, bool] | None = None,
             **tree: Any) -> Env:
    root = Path(host.paths.resctrl_root)
    build_tree(root, vendor=vendor, **tree)
    host.write_proc("cpuinfo", f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: fake\n")
    informer = FakeInformer()
    clock = FakeClock(1_700_000_000.0)
    options = make_options(host, tmp_path, informer, clock=clock, gates=gates if gates is not None else {GATE: True})
    kernel = FakeKernel(str(root))
    options = dataclasses.replace(options, resctrl=make_executor(root, kernel, clock, amd=vendor == AMD))
    return Env(host, informer, kernel, ResctrlQoS(options), clock)


@pytest.fixture
def env(fake_cgroup_host: FakeHost, tmp_path: Path) -> Env:
    return make_env(fake_cgroup_host, tmp_path)


@pytest.fixture
def pod_env(fake_cgroup_host: FakeHost, tmp_path: Path) -> Env:
    return make_env(fake_cgroup_host, tmp_path, gates={GATE: True, POD_GATE: True})


# ------------------------------------------------------------------------------------------ enabled


@pytest.mark.parametrize(("gates", "spec", "expected"), [
    ({GATE: True}, ALL_ON, True),
    ({GATE: True}, slo(be={"enable": True}), True),
    ({GATE: True}, OFF, False),             # every class off by default
    ({GATE: False}, ALL_ON, False),
    ({GATE: False, POD_GATE: True}, OFF, True),  # pod groups alone
])
def test_enabled(fake_host: FakeHost, tmp_path: Path, gates: dict[str, bool], spec: NodeSLOSpec,
                 expected: bool) -> None:
    options = make_options(fake_host, tmp_path, FakeInformer(), gates=gates)
    assert ResctrlQoS(options).enabled(spec) is expected


def test_factory(fake_host: FakeHost, tmp_path: Path) -> None:
    options = make_options(fake_host, tmp_path, FakeInformer(), gates={GATE: True})
    strategy = resctrl.new(options)
    assert strategy.name == resctrl.NAME == "resctrl"
    assert strategy.interval() == options.config.reconcile_interval_seconds


# ------------------------------------------------------------------------------------------ class schemata


@pytest.mark.parametrize(("tree", "spec", "expected"), [
    # Koordinator's defaults: BE 0..30 % with MBA 100, LSR and LS the whole cache.
    ({"cbm_mask": "7ff"}, ALL_ON,
     {"LSR": FULL_11, "LS": FULL_11, "BE": "L3:0=f;1=f\nMB:0=100;1=100\n"}),
    ({"cbm_mask": "fffff"}, ALL_ON,
     {"LSR": "L3:0=fffff;1=fffff\nMB:0=100;1=100\n", "LS": "L3:0=fffff;1=fffff\nMB:0=100;1=100\n",
      "BE": "L3:0=3f;1=3f\nMB:0=100;1=100\n"}),
    ({"cbm_mask": "7ff"},
     slo(ls={"enable": True, "catRangeStartPercent": 30, "catRangeEndPercent": 100, "mbaPercent": 90},
         be={"enable": True, "catRangeStartPercent": 10, "catRangeEndPercent": 50, "mbaPercent": 35}),
     {"LS": "L3:0=7f0;1=7f0\nMB:0=90;1=90\n", "BE": "L3:0=3c;1=3c\nMB:0=40;1=40\n"}),
    ({"cbm_mask": "fffff", "domains": (0, 1, 2, 3)},
     slo(be={"enable": True, "catRangeStartPercent": 25, "catRangeEndPercent": 50, "mbaPercent": 20}),
     {"BE": "L3:0=3e0;1=3e0;2=3e0;3=3e0\nMB:0=20;1=20;2=20;3=20\n"}),
    ({"cbm_mask": "7ff", "mba": False}, slo(be={"enable": True}), {"BE": "L3:0=f;1=f\n"}),
    ({"cbm_mask": "7ff", "cat": ("L3CODE", "L3DATA"), "mba": False}, slo(be={"enable": True}),
     {"BE": "L3CODE:0=f;1=f\nL3DATA:0=f;1=f\n"}),
])
def test_class_schemata_text(fake_host: FakeHost, tmp_path: Path, tree: dict[str, Any], spec: NodeSLOSpec,
                             expected: dict[str, str]) -> None:
    env = make_env(fake_host, tmp_path, **tree)
    decision = env.run(spec)
    assert env.writes() == expected
    assert env.kernel.groups() == sorted(expected)
    assert decision.action == "reconcile"
    assert decision.numbers["writes"] == len(expected)
    # The same text again is not rewritten.
    assert env.run(spec).action == "none" and env.writes() == {}


@pytest.mark.parametrize(("vendor", "mba", "ls_text", "be_text"), [
    (INTEL, 35, "MB:0=100;1=100", "MB:0=40;1=40"),
    (AMD, 35, "MB:0=2048;1=2048", "MB:0=56;1=56"),
    (AMD, 50, "MB:0=2048;1=2048", "MB:0=80;1=80"),
])
def test_intel_percent_versus_amd_units(fake_host: FakeHost, tmp_path: Path, vendor: str, mba: int, ls_text: str,
                                        be_text: str) -> None:
    env = make_env(fake_host, tmp_path, vendor=vendor, cbm_mask="fffff")
    decision = env.run(slo(ls={"enable": True}, be={"enable": True, "mbaPercent": mba}))
    writes = env.writes()
    assert writes["LS"] == f"L3:0=fffff;1=fffff\n{ls_text}\n"
    assert writes["BE"] == f"L3:0=3f;1=3f\n{be_text}\n"
    assert decision.numbers["host"]["vendor"] == vendor


def test_decision_numbers(env: Env) -> None:
    decision = env.run(slo(be={"enable": True, "mbaPercent": 35}))
    be = decision.numbers["classes"]["BE"]
    assert be == {"catRangeStartPercent": 0, "catRangeEndPercent": 30, "mbaPercent": 35,
                  "cat": {"L3": {"0": "f", "1": "f"}}, "mb": {"0": 40, "1": 40},
                  "lines": ["L3:0=f;1=f", "MB:0=40;1=40"]}
    assert decision.numbers["host"]["cat"]["L3"] == {"cbm_mask": "7ff", "ways": 11, "min_cbm_bits": 1,
                                                     "domains": [0, 1]}
    assert decision.summary.startswith("resctrl: BE L3 0-30% MB 35%; 1 schemata writes")


# ------------------------------------------------------------------------------------------ tasks


def test_threads_join_their_class_group(env: Env) -> None:
    env.pod("lse", "LSE", [[10]])
    env.pod("lsr", "LSR", [[20, 21]])
    env.pod("ls", "LS", [[30], [31, 32]])
    env.pod("be", "BE", [[40, 41]])
    env.kernel._set_tasks("", [1, 10, 20, 21, 30, 31, 32, 40, 41])
    decision = env.run()
    assert env.kernel.tasks("LSR") == [10, 20, 21]
    assert env.kernel.tasks("LS") == [30, 31, 32]
    assert env.kernel.tasks("BE") == [40, 41]
    assert env.kernel.tasks("") == [1]
    assert decision.numbers["tasks"]["LS"] == {"assigned": 3, "already": 0, "gone": 0, "failed": 0}
    assert "8 tasks moved" in decision.summary
    again = env.run()
    assert again.action == "none" and again.numbers["tasks"]["LS"]["already"] == 3


def test_new_threads_and_exited_ones(env: Env) -> None:
    pod = env.pod("be", "BE", [[40]])
    env.run()
    env.host.write_cgroup(pod.containers[0].cgroup_dir, REGISTRY["tasks"], "40\n41\n42\n")
    env.kernel.exited.add(42)
    decision = env.run()
    assert env.kernel.tasks("BE") == [40, 41]
    assert decision.numbers["tasks"]["BE"] == {"assigned": 1, "already": 1, "gone": 1, "failed": 0}
    assert decision.numbers["problems"] == []


def test_only_classes_switched_on_get_tasks_and_terminated_pods_are_skipped(env: Env) -> None:
    env.pod("ls", "LS", [[30]])
    env.pod("be", "BE", [[40]])
    done = env.pod("done", "BE", [[50]])
    env.informer.pod_list[-1] = dataclasses.replace(done, pod=dataclasses.replace(done.pod, phase="Succeeded"))
    env.run(slo(be={"enable": True}))
    assert env.kernel.groups() == ["BE"]
    assert env.kernel.tasks("BE") == [40]


def test_vanished_container_cgroup_is_skipped(env: Env) -> None:
    pod = make_pod("ghost", "BE")  # no cgroup directories
    env.informer.pod_list.append(pod)
    decision = env.run(slo(be={"enable": True}))
    assert decision.numbers["problems"] == [] and env.kernel.tasks("BE") == []


# ------------------------------------------------------------------------------------------ switching off


def test_class_switched_off_removes_the_group_it_made_and_resets_one_it_found(env: Env) -> None:
    Path(env.kernel.root, "LS").mkdir()  # made by someone else before koordlet started
    Path(env.kernel.root, "LS", "schemata").write_text(FULL_11)
    Path(env.kernel.root, "LS", "tasks").write_text("")
    env.pod("be", "BE", [[40]])
    env.run(slo(ls={"enable": True, "catRangeEndPercent": 50}, be={"enable": True}))
    assert env.kernel.dirs == [("mkdir", "BE")]
    env.writes()
    decision = env.run(slo(lsr={"enable": True}))
    assert env.kernel.groups() == ["LS", "LSR"]
    assert env.kernel.tasks("") == [40]  # BE's tasks went back to the root with the group
    assert env.writes() == {"LSR": FULL_11, "LS": FULL_11}
    assert decision.numbers["removed"] == ["BE"] and decision.numbers["reset"] == ["LS"]


def test_switch_off_undoes_everything(pod_env: Env) -> None:
    env = pod_env
    Path(env.kernel.root, "koordlet-left-over").mkdir()  # an earlier koordlet's pod group
    Path(env.kernel.root, "koordlet-left-over", "tasks").write_text("")
    env.pod("ls", "LS", [[30]])
    env.pod("p", "LS", [[60]], annotations={ANNOTATION_RESCTRL: '{"llc":{"schemata":{"range":[0,50]}}}'})
    env.run(slo(ls={"enable": True}, be={"enable": True}))
    assert env.kernel.groups() == ["BE", "LS", "koordlet-uid-p"]
    decision = env.run(ALL_ON, enabled=False)
    assert decision.action == "recover"
    assert env.kernel.groups() == []
    assert sorted(env.kernel.tasks("")) == [30, 60]
    assert decision.numbers["removed"] == ["BE", "LS", "koordlet-uid-p"]
    assert env.run(ALL_ON, enabled=False).action == "none"


# ------------------------------------------------------------------------------------------ pod groups


def test_pod_group_from_the_annotation(pod_env: Env) -> None:
    env = pod_env
    text = ('{"llc":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheID":1,"range":[0,30]}]},'
            '"mb":{"schemata":{"percent":35}}}')
    env.pod("p", "BE", [[70, 71]], annotations={ANNOTATION_RESCTRL: text})
    env.pod("be", "BE", [[40]])
    decision = env.run(slo(be={"enable": True}))
    writes = env.writes()
    assert writes["koordlet-uid-p"] == "L3:0=1f8;1=f\nMB:0=40;1=40\n"
    assert env.kernel.tasks("koordlet-uid-p") == [70, 71]
    assert env.kernel.tasks("BE") == [40]  # the annotated pod left its class group
    assert decision.numbers["pods"]["koordlet-uid-p"]["lines"] == ["L3:0=1f8;1=f", "MB:0=40;1=40"]


def test_pod_group_of_a_gone_pod_is_removed(pod_env: Env) -> None:
    env = pod_env
    pod = env.pod("p", "LS", [[70]], annotations={ANNOTATION_RESCTRL: "{}"})
    env.run(OFF)
    assert env.kernel.groups() == ["koordlet-uid-p"]
    assert env.writes() == {"koordlet-uid-p": FULL_11}
    env.informer.pod_list.remove(pod)
    decision = env.run(OFF)
    assert env.kernel.groups() == [] and env.kernel.tasks("") == [70]
    assert decision.numbers["removed"] == ["koordlet-uid-p"] and decision.action == "reconcile"


def test_without_the_pod_gate_annotated_pods_stay_in_their_class(env: Env) -> None:
    env.pod("p", "BE", [[70]], annotations={ANNOTATION_RESCTRL: '{"mb":{"schemata":{"percent":10}}}'})
    env.run(slo(be={"enable": True}))
    assert env.kernel.groups() == ["BE"] and env.kernel.tasks("BE") == [70]


def test_pod_group_recreated_after_removal_behind_our_back(pod_env: Env) -> None:
    env = pod_env
    env.pod("p", "LS", [[70]], annotations={ANNOTATION_RESCTRL: "{}"})
    env.run(OFF)
    env.kernel.rmdir(str(Path(env.kernel.root, "koordlet-uid-p")))
    env.run(OFF)
    assert env.kernel.groups() == ["koordlet-uid-p"] and env.kernel.tasks("koordlet-uid-p") == [70]


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("values", "fragment"), [
    ({"cat_range_start_percent": 50, "cat_range_end_percent": 20},
     "resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent..catRangeEndPercent: start 50 must be below end 20"),
    ({"cat_range_end_percent": 120},
     "resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent..catRangeEndPercent end: must be 0..100, got 120"),
    ({"cat_range_start_percent": -10},
     "resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent..catRangeEndPercent start: must be 0..100"),
    ({"cat_range_start_percent": 10, "cat_range_end_percent": 15},
     "resourceQOSStrategy.beClass.resctrlQOS.catRange 10..15: 10..15 % of 11 cache ways"),
    ({"mba_percent": 0}, "resourceQOSStrategy.beClass.resctrlQOS.mbaPercent: must be 1..100, got 0"),
])
def test_bad_class_setting_rejects_the_round_before_any_write(
        env: Env, caplog: pytest.LogCaptureFixture, values: dict[str, Any], fragment: str) -> None:
    env.pod("ls", "LS", [[30]])
    bad = with_class(ALL_ON, "be_class", **values)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        decision = env.run(bad)
        env.run(bad)
    assert decision.action == "error"
    assert fragment in decision.summary and fragment in decision.numbers["error"]
    assert env.kernel.schemata_writes == [] and env.kernel.dirs == [] and env.kernel.tasks("") == []
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_bad_class_setting_keeps_what_is_in_force(env: Env) -> None:
    env.run(slo(be={"enable": True, "catRangeEndPercent": 50}))
    env.writes()
    decision = env.run(with_class(slo(be={"enable": True}), "be_class", cat_range_end_percent=101))
    assert decision.numbers["in_force"] == ["BE"]
    assert env.kernel.schemata("BE") == "L3:0=3f;1=3f\nMB:0=100;1=100\n"


@pytest.mark.parametrize(("text", "fragment"), [
    ("{oops", "not JSON"),
    ('{"llc":{"schemata":{"range":[80,20]}}}', "llc.schemata.range: start 80 must be below end 20"),
    ('{"llc":{"schemata":{"range":[0,200]}}}', "llc.schemata.range end: must be 0..100, got 200"),
    ('{"llc":{"schemata":{"range":[10,15]}}}', "llc.schemata.range: 10..15 % of 11 cache ways"),
    ('{"mb":{"schemata":{"percent":-3}}}', "mb.schemata.percent: must be 0..100, got -3"),
    ('{"llc":{"schemataPerCache":[{"cacheID":7,"range":[0,50]}]}}', "llc.schemataPerCache: cacheID 7 unknown"),
])
def test_bad_annotation_skips_only_that_pod_and_keeps_its_group(pod_env: Env, text: str, fragment: str) -> None:
    env = pod_env
    good = '{"llc":{"schemata":{"range":[0,50]}}}'
    pod = env.pod("p", "LS", [[70]], annotations={ANNOTATION_RESCTRL: good})
    env.pod("q", "LS", [[80]], annotations={ANNOTATION_RESCTRL: "{}"})
    env.run(OFF)
    env.writes()
    env.informer.pod_list[0] = dataclasses.replace(pod, pod=dataclasses.replace(
        pod.pod, annotations={ANNOTATION_RESCTRL: text}))
    env.pod("r", "LS", [[90]], annotations={ANNOTATION_RESCTRL: '{"mb":{"schemata":{"percent":50}}}'})
    decision = env.run(OFF)
    assert decision.action == "error"
    error = f"pod default/p (uid-p): annotation {ANNOTATION_RESCTRL}: "
    assert any(e.startswith(error) and fragment in e for e in decision.numbers["errors"]), decision.numbers["errors"]
    assert fragment in decision.summary
    # p's group keeps its last good schemata and task; r still gets its group.
    assert env.writes() == {"koordlet-uid-r": "L3:0=7ff;1=7ff\nMB:0=50;1=50\n"}
    assert env.kernel.groups() == ["koordlet-uid-p", "koordlet-uid-q", "koordlet-uid-r"]
    assert env.kernel.schemata("koordlet-uid-p") == "L3:0=3f;1=3f\nMB:0=100;1=100\n"
    assert env.kernel.tasks("koordlet-uid-p") == [70]


def test_unreadable_host_info_is_an_error_naming_the_file(env: Env) -> None:
    Path(env.kernel.root, "info", "L3", "cbm_mask").write_text("zz\n")
    decision = env.run()
    assert decision.action == "error"
    assert "info/L3/cbm_mask: cannot parse 'zz' (base 16)" in decision.summary
    assert env.kernel.dirs == []


# ------------------------------------------------------------------------------------------ unsupported


def test_no_resctrl_mount_is_unsupported_and_logged_once(fake_host: FakeHost, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from koordlet.resourceexecutor.resctrl import ResctrlExecutor

    clock = FakeClock(1_700_000_000.0)
    options = make_options(fake_host, tmp_path, FakeInformer(), clock=clock, gates={GATE: True})
    options = dataclasses.replace(options, resctrl=ResctrlExecutor(fake_host.paths.resctrl_root, clock, None))
    strategy = ResctrlQoS(options)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = strategy.run_once(ALL_ON)
        second = strategy.run_once(ALL_ON)
    assert first.action == second.action == "unsupported"
    assert "does not exist" in first.numbers["reason"] and first.summary.startswith("resctrl QoS not applied: ")
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    assert strategy.run_once(ALL_ON, enabled=False).action == "none"


def test_no_executor_is_unsupported(fake_host: FakeHost, tmp_path: Path) -> None:
    strategy = ResctrlQoS(make_options(fake_host, tmp_path, FakeInformer(), gates={GATE: True}))
    decision = strategy.run_once(ALL_ON)
    assert decision.action == "unsupported" and decision.numbers["reason"] == NO_BACKEND


def test_each_bad_annotation_is_logged_once(pod_env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env = pod_env
    env.pod("p", "LS", [[70]], annotations={ANNOTATION_RESCTRL: "{oops"})
    env.pod("q", "LS", [[80]], annotations={ANNOTATION_RESCTRL: '{"mb":{"schemata":{"percent":500}}}'})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        decisions = [env.run(OFF) for _ in range(3)]
    assert [len(d.numbers["errors"]) for d in decisions] == [2, 2, 2]
    assert len([r for r in caplog.records if r.name == LOGGER]) == 2
    assert env.kernel.groups() == [] and env.kernel.schemata_writes == []


# ------------------------------------------------------------------------------------------ shadow mode


def test_in_shadow_mode_the_groups_are_decided_as_in_active_mode_and_resctrl_is_untouched(
        fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Classes on, steady, one off, an annotated pod gone, switched off: in shadow mode and in active mode on two
    identical hosts, equal decisions; the shadow host's resctrl tree keeps its groups, schemata and tasks."""
    gates = {GATE: True, POD_GATE: True}
    shadow_env = make_env(fake_cgroup_host, tmp_path / "s", gates=gates)
    active_env = make_env(FakeHost(tmp_path / "active-host", mode=fake_cgroup_host.mode), tmp_path / "a", gates=gates)
    audit = MemoryAudit()
    executor = shadow_env.strategy.options.resctrl
    assert isinstance(executor, ResctrlExecutor)
    shadow = Shadow(ShadowModes(default=True), ResourceExecutor(shadow_env.host.layout(), shadow_env.clock, audit),
                    shadow_env.strategy.options.evictor, resctrl=executor)
    shadow_env.strategy = ResctrlQoS(shadow.options_for("resctrl", shadow_env.strategy.options))
    writers = shadow.writers["resctrl"]
    steps = [(ALL_ON, True), (ALL_ON, True), (slo(ls={"enable": True}, be={"enable": True}), True), ("drop", True),
             (ALL_ON, False), (ALL_ON, False)]

    def run(env: Env, shadowed: bool) -> list[tuple[str, str]]:
        env.pod("ls", "LS", [[30, 31]])
        env.pod("be", "BE", [[40]])
        annotated = env.pod("p", "LS", [[60]],
                            annotations={ANNOTATION_RESCTRL: '{"llc":{"schemata":{"range":[0,50]}}}'})
        decided = []
        for spec, enabled in steps:
            env.clock.advance(1)
            if spec == "drop":
                env.informer.pod_list.remove(annotated)
                spec = slo(ls={"enable": True}, be={"enable": True})
            if shadowed:
                writers.begin_round(True)
            decision = env.run(spec, enabled)  # type: ignore[arg-type]
            decided.append((str(decision.action), decision.summary))
        return decided

    before = (shadow_env.kernel.groups(), shadow_env.kernel.tasks(""))
    in_shadow = run(shadow_env, True)
    assert (shadow_env.kernel.groups(), shadow_env.kernel.tasks("")) == before
    assert shadow_env.kernel.schemata_writes == []
    assert {e.outcome for e in audit.entries} == {"intended"} and audit.entries
    assert run(active_env, False) == in_shadow
