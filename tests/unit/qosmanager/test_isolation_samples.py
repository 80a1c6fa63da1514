"""Koordinator's documented isolation samples (``../shared/reference/koordinator-samples``, see its INDEX.md)
run through our NodeSLO parsing and the coresched, resctrl and netqos strategies: the ConfigMaps operators
already have must give the behaviour the docs promise, and the samples the docs got wrong must be rejected
with the ConfigMap key named."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config.gates import CORE_SCHED as CORESCHED_GATE
from koordlet.config.gates import RDT_RESCTRL as RESCTRL_GATE
from koordlet.config.gates import RESCTRL as POD_GATE
from koordlet.errors import ConfigError, ParseError
from koordlet.isolation.resctrl.annotation import ANNOTATION_RESCTRL
from koordlet.qosmanager.plugins.coresched.strategy import CoreSched
from koordlet.qosmanager.plugins.netqos import NetQoSStrategy
from koordlet.qosmanager.plugins.resctrl.strategy import ResctrlQoS
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder, spec_json_from_text
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FakeNative
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, make_options, make_pod
from tests.unit.qosmanager.resctrl.fakeresctrl import INTEL, FakeKernel, build_tree, make_executor

M = 1_000_000
T0 = 1_700_000_000.0
ROUTE = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
         "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")


def sample(shared_dir: Path, rel: str) -> str:
    return (shared_dir / "reference" / "koordinator-samples" / rel).read_text(encoding="utf-8")


def holder_spec(text: str, where: str) -> NodeSLOSpec:
    """The sample as the file source would put it in force: rendered, offered, merged over the defaults."""
    holder = NodeSLOHolder()
    assert holder.offer_spec(spec_json_from_text(text, {}, where), where), holder.current().rejected
    return holder.current().spec


def with_pod(host: FakeHost, informer: FakeInformer, meta: PodMeta, tids: tuple[int, ...] = ()) -> PodMeta:
    host.mkdir_cgroup(meta.cgroup_dir)
    for container in meta.containers:
        host.mkdir_cgroup(container.cgroup_dir)
        host.write_cgroup(container.cgroup_dir, REGISTRY["tasks"], "".join(f"{t}\n" for t in tids))
    informer.pod_list.append(meta)
    return meta


# ------------------------------------------------------------------------------------------ coreSched


def test_cpu_qos_core_sched_sample_sets_cpu_idle_on_be_only(shared_dir: Path, fake_cgroup_host: FakeHost,
                                                            tmp_path: Path) -> None:
    # W user-manuals/cpu-qos.md: LS coreExpeller=true schedIdle=0, BE coreExpeller=false schedIdle=1.
    spec = holder_spec(sample(shared_dir, "slo-configs/cpu-qos-core-sched.yaml"), "cpu-qos-core-sched.yaml")
    qos = spec.resource_qos_strategy
    assert qos is not None and qos.policies is not None and qos.policies.cpu_policy == "coreSched"
    assert qos.ls_class is not None and qos.be_class is not None
    ls_cpu, be_cpu = qos.ls_class.cpu_qos, qos.be_class.cpu_qos
    assert ls_cpu is not None and be_cpu is not None
    assert (ls_cpu.enable, ls_cpu.core_expeller, ls_cpu.sched_idle) == (True, True, 0)
    assert (be_cpu.enable, be_cpu.core_expeller, be_cpu.sched_idle) == (True, False, 1)

    host = fake_cgroup_host
    host.mkdir_cgroup("kubepods/besteffort")
    host.mkdir_cgroup("kubepods/burstable")
    informer = FakeInformer()
    clock = FakeClock(T0)
    options = make_options(host, tmp_path, informer, clock=clock, gates={CORESCHED_GATE: True})
    options = dataclasses.replace(options, coresched=CoreSchedExecutor(FakeNative(), MemoryAudit(), clock))
    ls = with_pod(host, informer, make_pod("ls", "LS"), (100,))
    be = with_pod(host, informer, make_pod("be", "BE"), (200,))
    strategy = CoreSched(options)
    assert strategy.enabled(spec)
    decision = strategy.run_once(spec)

    def idle(rel_dir: str) -> str:
        return host.read_cgroup(rel_dir, REGISTRY["cpu_idle"]).strip()

    assert decision.action != "invalid", decision.summary
    assert idle(be.cgroup_dir) == "1" and idle("kubepods/besteffort") == "1"
    assert idle(ls.cgroup_dir) != "1" and idle("kubepods/burstable") != "1"


# ------------------------------------------------------------------------------------------ resctrl


def resctrl_rig(host: FakeHost, tmp_path: Path, gates: Mapping[str, bool]) -> tuple[ResctrlQoS, FakeKernel,
                                                                                       FakeInformer]:
    root = Path(host.paths.resctrl_root)
    build_tree(root, cbm_mask="7ff", domains=(0, 1), vendor=INTEL)  # an 11-way L3 on two caches
    host.write_proc("cpuinfo", f"processor\t: 0\nvendor_id\t: {INTEL}\nmodel name\t: fake\n")
    informer = FakeInformer()
    clock = FakeClock(T0)
    options = make_options(host, tmp_path, informer, clock=clock, gates=gates)
    kernel = FakeKernel(str(root))
    options = dataclasses.replace(options, resctrl=make_executor(root, kernel, clock))
    return ResctrlQoS(options), kernel, informer


def test_resctrl_llc_mba_sample_schemata(shared_dir: Path, fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # W blog release-v0.3.0: LS ways 0-100 %, BE 0-30 %, key spelled `MBAPercent`.
    text = sample(shared_dir, "slo-configs/resctrl-llc-mba.yaml")
    assert '"MBAPercent": 100' in text and '"mbaPercent"' not in text
    spec = holder_spec(text, "resctrl-llc-mba.yaml")
    qos = spec.resource_qos_strategy
    assert qos is not None and qos.ls_class is not None and qos.be_class is not None
    ls_cfg, be_cfg = qos.ls_class.resctrl_qos, qos.be_class.resctrl_qos
    assert ls_cfg is not None and be_cfg is not None
    assert (ls_cfg.enable, ls_cfg.cat_range_start_percent, ls_cfg.cat_range_end_percent, ls_cfg.mba_percent) == (
        True, 0, 100, 100)
    assert (be_cfg.enable, be_cfg.cat_range_start_percent, be_cfg.cat_range_end_percent, be_cfg.mba_percent) == (
        True, 0, 30, 100)

    strategy, kernel, informer = resctrl_rig(fake_cgroup_host, tmp_path, {RESCTRL_GATE: True})
    with_pod(fake_cgroup_host, informer, make_pod("ls", "LS"), (10,))
    with_pod(fake_cgroup_host, informer, make_pod("be", "BE"), (20,))
    assert strategy.enabled(spec)
    decision = strategy.run_once(spec)
    assert decision.action == "reconcile", decision.summary
    # 11 ways: 0-100 % = all 11 (7ff); 0-30 % = ceil(3.3) = 4 ways from the bottom (f).  MBA 100 % on Intel.
    assert dict(kernel.schemata_writes) == {"LS": "L3:0=7ff;1=7ff\nMB:0=100;1=100\n",
                                            "BE": "L3:0=f;1=f\nMB:0=100;1=100\n"}
    assert kernel.tasks("LS") == [10] and kernel.tasks("BE") == [20]


def test_mbapercent_key_matches_case_insensitively(shared_dir: Path) -> None:
    # 100 is also the default, so a value other than it shows the capitalised key is really read.
    text = sample(shared_dir, "slo-configs/resctrl-llc-mba.yaml").replace('"MBAPercent": 100', '"MBAPercent": 60')
    spec = holder_spec(text, "resctrl-llc-mba.yaml (MBAPercent 60)")
    qos = spec.resource_qos_strategy
    assert qos is not None and qos.be_class is not None and qos.be_class.resctrl_qos is not None
    assert qos.be_class.resctrl_qos.mba_percent == 60


def test_resctrl_pod_annotation_sample_schemata(shared_dir: Path, fake_cgroup_host: FakeHost,
                                                tmp_path: Path) -> None:
    # W blog release-v1.6.0: `node.koordinator.sh/resctrl` with LLC range [0,30] and MB 20 %.
    doc = yaml.safe_load(sample(shared_dir, "pods/resctrl-pod-annotation.yaml"))
    annotations = doc["metadata"]["annotations"]
    assert ANNOTATION_RESCTRL in annotations
    strategy, kernel, informer = resctrl_rig(fake_cgroup_host, tmp_path, {RESCTRL_GATE: True, POD_GATE: True})
    pod = with_pod(fake_cgroup_host, informer, make_pod("demo", "LS", annotations=annotations), (30, 31))
    spec = holder_spec("{}", "defaults")  # every class off: only the pod gate switches the strategy on
    assert strategy.enabled(spec)
    decision = strategy.run_once(spec)
    group = f"koordlet-{pod.uid}"
    expected = "L3:0=f;1=f\nMB:0=20;1=20\n"  # [0,30] of 11 ways = 4 ways (f); MB 20 % on Intel
    assert dict(kernel.schemata_writes) == {group: expected}, decision.summary
    assert kernel.schemata(group) == expected
    assert kernel.tasks(group) == [30, 31]


# ------------------------------------------------------------------------------------------ network QoS


@dataclasses.dataclass
class RecordingNetQoS:
    """A netqos backend that only records the plans handed to it."""

    policy: str
    plans: list[NetQoSPlan] = dataclasses.field(default_factory=list)
    cleared: int = 0

    def apply(self, plan: NetQoSPlan) -> None:
        self.plans.append(plan)

    def clear(self) -> None:
        self.cleared += 1

    def describe(self) -> dict[str, object]:
        return {}


def test_terway_qos_sample_plan(shared_dir: Path, fake_host: FakeHost, tmp_path: Path) -> None:
    # W user-manuals/network-qos-with-terwayqos.md: a `data:` fragment with no ConfigMap envelope; the
    # renderer takes it as it is (its top-level keys are ConfigMap keys).
    text = sample(shared_dir, "slo-configs/network-qos-terway-qos.yaml")
    assert "kind:" not in text and "data:" not in text
    spec = holder_spec(text, "network-qos-terway-qos.yaml")
    assert spec.system_strategy is not None and spec.system_strategy.total_network_bandwidth == "600M"

    fake_host.write_proc("net/route", ROUTE)
    fake_host.write_sys("class/net/eth0/speed", "10000\n")
    informer = FakeInformer([
        dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, ips=(ip,)))
        for meta, ip in ((make_pod("web", "LS"), "10.0.0.2"), (make_pod("batch", "BE"), "10.0.0.4"),
                         (make_pod("agent", "SYSTEM"), "10.0.0.5"))
    ])
    made: dict[str, RecordingNetQoS] = {}

    def backend(policy: str) -> RecordingNetQoS:
        made[policy] = RecordingNetQoS(policy)
        return made[policy]

    options = make_options(fake_host, tmp_path, informer, clock=FakeClock(T0),
                           gates={"TCNetworkQoS": True, "TerwayQoS": True})
    strategy = NetQoSStrategy(dataclasses.replace(options, netqos=backend))
    assert strategy.enabled(spec)
    decision = strategy.run_once(spec)
    assert decision.action == "apply", decision.summary
    assert list(made) == ["terway-qos"]
    (plan,) = made["terway-qos"].plans
    # total 600M bit/s; LS 50M guaranteed up to 100M, BE 10M up to 200M, SYSTEM the 540M left up to the total.
    assert (plan.interface, plan.total_bps) == ("eth0", 600 * M)
    assert plan.ls == ClassBandwidth(50 * M, 100 * M, 50 * M, 100 * M, ("10.0.0.2",))
    assert plan.be == ClassBandwidth(10 * M, 200 * M, 10 * M, 200 * M, ("10.0.0.4",))
    assert plan.system == ClassBandwidth(540 * M, 600 * M, 540 * M, 600 * M, ("10.0.0.5",))


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("rel", "bad_keys", "good_keys"), [
    # K docs/proposals/koordlet/20231208-support-netqos.md: trailing commas, a nested system-config, bare 1000M.
    ("slo-configs/network-qos-tc-proposal.yaml", ["resource-qos-config"],
     ["colocation-config", "resource-threshold-config"]),
    # K apis/configuration/slo_controller_config.go doc comment: the only blkioQOS example.
    ("slo-configs/api-doc-example-blkio-hostapp-cpunormalization.yaml",
     ["system-config", "resource-qos-config", "host-application-config"],
     ["colocation-config", "cpu-burst-config", "resource-threshold-config", "cpu-normalization-config"]),
], ids=["tc-proposal", "api-doc-blkio"])
def test_bad_samples_are_rejected_naming_the_key(shared_dir: Path, tmp_path: Path, rel: str, bad_keys: list[str],
                                                 good_keys: list[str]) -> None:
    text = sample(shared_dir, rel)
    with pytest.raises((ConfigError, ParseError)) as info:
        spec_json_from_text(text, {}, rel)
    message = str(info.value)
    assert message.startswith(f"{rel}: ")
    for key in bad_keys:
        assert f"{key}: invalid JSON" in message
    for key in good_keys:  # only the broken keys are blamed
        assert key not in message

    # Through the file source (the embedded companion): the bad keys are refused by name and fall back to
    # their defaults (no earlier good text), the good keys apply.
    path = tmp_path / "nodeslo.yaml"
    path.write_text(text, encoding="utf-8")
    holder = NodeSLOHolder()
    assert FileNodeSLOSource(str(path), holder).poll() is True
    state = holder.current()
    assert state.origin == f"file:{path}" and state.generation == 1
    assert state.rejected is not None
    for key in bad_keys:
        assert f"{key}: invalid JSON" in state.rejected
    for key in good_keys:
        assert f"{key}:" not in state.rejected
