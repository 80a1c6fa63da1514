"""groupidentity: a pod's cpu.bvt_warp_ns from its class under the groupIdentity policy (upstream rule.go
and interceptor.go), cpu.idle=1 for BE where the kernel has no bvt, nothing when off or unsupported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.nodeslo import NodeSLOSpec, default_nodeslo_spec
from koordlet.apis.pod import Pod
from koordlet.config import gates as feature_gates
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import groupidentity
from koordlet.system.kubepaths import KubeQoS
from tests.unit.qosmanager.test_isolation_samples import holder_spec, sample

BVT_ONLY = {"cpu_bvt_warp_ns": True, "cpu_idle": False}
IDLE_ONLY = {"cpu_bvt_warp_ns": False, "cpu_idle": True}
PARENTS = {
    KubeQoS.GUARANTEED: "kubepods/pod{uid}",
    KubeQoS.BURSTABLE: "kubepods/burstable/pod{uid}",
    KubeQoS.BESTEFFORT: "kubepods/besteffort/pod{uid}",
}


def slo(**classes: Any) -> NodeSLOSpec:
    """The default NodeSLO with ``resourceQOSStrategy`` fields laid over it (``lsClass={"cpuQOS": ...}``,
    ``policies={...}``)."""
    return NodeSLOSpec.from_json({"resourceQOSStrategy": classes}).with_defaults()


def enabled(gi: dict[str, int] | None = None, policy: str | None = None) -> NodeSLOSpec:
    values = {"lsrClass": 2, "lsClass": 2, "beClass": -1, **(gi or {})}
    spec: dict[str, Any] = {k: {"cpuQOS": {"enable": True, "groupIdentity": v}} for k, v in values.items()}
    if policy is not None:
        spec["policies"] = {"cpuPolicy": policy}
    return slo(**spec)


def pod(qos: str | None, annotations: dict[str, str] | None = None, uid: str = "u1") -> Pod:
    labels = {LABEL_QOS: qos} if qos is not None else {}
    return Pod(uid=uid, name="p", namespace="ns", labels=labels, annotations=annotations or {}, kube_qos=None,
               phase="Pending", priority=None)


def run(p: Pod, spec: NodeSLOSpec | None, *, kube: KubeQoS = KubeQoS.BURSTABLE, probes: dict[str, bool] | None = None,
        gates: dict[str, bool] | None = None, stage: Stage = Stage.PRE_RUN_POD_SANDBOX) -> tuple[dict[str, object],
                                                                                            list[str]]:
    deps = HookDeps(gates={"GroupIdentity": True} if gates is None else gates,
                    probes=BVT_ONLY if probes is None else probes, nodeslo=lambda: spec)
    parent = PARENTS[kube].format(uid=p.uid)
    result = HookRunner([groupidentity.new(deps)]).run(HookRequest(stage, p, parent))
    return result.adjustment.writes, result.errors


def test_constants_match_upstream() -> None:
    assert groupidentity.GATE == "GroupIdentity"
    assert groupidentity.ANNOTATION_CPU_QOS == "koordinator.sh/cpuQOS"
    assert groupidentity.new(HookDeps()).stages == frozenset({Stage.PRE_RUN_POD_SANDBOX})


@pytest.mark.parametrize(("qos", "kube", "expected"), [
    ("LSE", KubeQoS.GUARANTEED, 1),
    ("LSR", KubeQoS.GUARANTEED, 1),
    ("LS", KubeQoS.BURSTABLE, 0),
    ("LS", KubeQoS.GUARANTEED, 0),
    ("BE", KubeQoS.BESTEFFORT, -1),
    # No class label (SYSTEM counts as none: upstream's map has no SYSTEM entry): by kube QoS.
    (None, KubeQoS.GUARANTEED, 1),
    (None, KubeQoS.BURSTABLE, 0),
    (None, KubeQoS.BESTEFFORT, -1),
    ("SYSTEM", KubeQoS.BESTEFFORT, -1),
    ("SYSTEM", KubeQoS.BURSTABLE, 0),
])
def test_pod_value_by_class_then_kube_qos(qos: str | None, kube: KubeQoS, expected: int) -> None:
    spec = enabled({"lsrClass": 1, "lsClass": 0})  # beClass -1
    assert run(pod(qos), spec, kube=kube) == ({"cpu_bvt_warp_ns": expected}, [])


def test_guaranteed_falls_back_to_ls_when_lsr_is_off() -> None:
    spec = slo(lsClass={"cpuQOS": {"enable": True, "groupIdentity": 1}})
    assert run(pod(None), spec, kube=KubeQoS.GUARANTEED) == ({"cpu_bvt_warp_ns": 1}, [])
    # LSR off: its pods get 0, BE (off too) 0.
    assert run(pod("LSR"), spec, kube=KubeQoS.GUARANTEED) == ({"cpu_bvt_warp_ns": 0}, [])
    assert run(pod("BE"), spec, kube=KubeQoS.BESTEFFORT) == ({"cpu_bvt_warp_ns": 0}, [])


def test_enabled_class_without_value_takes_the_default() -> None:
    spec = slo(beClass={"cpuQOS": {"enable": True}})
    assert run(pod("BE"), spec, kube=KubeQoS.BESTEFFORT) == ({"cpu_bvt_warp_ns": -1}, [])


def test_documented_sample_gives_ls_2_and_be_minus_1(shared_dir: Path) -> None:
    # W user-manuals/cpu-qos.md; qos-formula-examples.json: LS pod 2, BE pod -1.
    spec = holder_spec(sample(shared_dir, "slo-configs/cpu-qos-group-identity.yaml"), "cpu-qos-group-identity.yaml")
    assert run(pod("LS"), spec) == ({"cpu_bvt_warp_ns": 2}, [])
    assert run(pod("BE"), spec, kube=KubeQoS.BESTEFFORT) == ({"cpu_bvt_warp_ns": -1}, [])
    # lsrClass is not enabled by the sample: 0.
    assert run(pod("LSR"), spec, kube=KubeQoS.GUARANTEED) == ({"cpu_bvt_warp_ns": 0}, [])


def test_the_rule_follows_the_nodeslo_in_force(shared_dir: Path) -> None:
    # The rule is kept for the last NodeSLO seen; a new NodeSLO (a new object) gets its own.
    spec = holder_spec(sample(shared_dir, "slo-configs/cpu-qos-group-identity.yaml"), "cpu-qos-group-identity.yaml")
    assert groupidentity.rule_of(spec) is groupidentity.rule_of(spec)
    assert run(pod("LS"), spec) == ({"cpu_bvt_warp_ns": 2}, [])
    assert run(pod("LS"), default_nodeslo_spec()) == ({"cpu_bvt_warp_ns": 0}, [])
    assert run(pod("LS"), spec) == ({"cpu_bvt_warp_ns": 2}, [])


@pytest.mark.parametrize("spec", [
    default_nodeslo_spec(),  # every class disabled by default
    enabled(policy="coreSched"),
])
def test_off_or_other_policy_resets_to_zero(spec: NodeSLOSpec) -> None:
    # Upstream writes NoneCPUQOS (0) then, so the reconciler undoes an earlier value.
    for qos, kube in (("BE", KubeQoS.BESTEFFORT), ("LS", KubeQoS.BURSTABLE), ("LSR", KubeQoS.GUARANTEED)):
        assert run(pod(qos), spec, kube=kube) == ({"cpu_bvt_warp_ns": 0}, [])


def test_no_nodeslo_yet_writes_nothing() -> None:
    assert run(pod("BE"), None, kube=KubeQoS.BESTEFFORT) == ({}, [])


def test_empty_policy_counts_as_group_identity() -> None:
    spec = NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "policies": {}, "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}}}}).with_defaults()
    assert run(pod("BE"), spec, kube=KubeQoS.BESTEFFORT) == ({"cpu_bvt_warp_ns": -1}, [])


def test_gate_off_writes_nothing() -> None:
    assert run(pod("LS"), enabled(), gates={"GroupIdentity": False}) == ({}, [])


def test_gate_missing_from_the_table_takes_its_default() -> None:
    # GroupIdentity is a Beta gate, on by default: a partial table (a test, a tool) leaves it on.
    assert feature_gates.GATES[feature_gates.GROUP_IDENTITY].default is True
    assert run(pod("LS"), enabled(), gates={}) == run(pod("LS"), enabled())


def test_without_bvt_only_be_gets_cpu_idle() -> None:
    spec = enabled()
    assert run(pod("BE"), spec, kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == ({"cpu_idle": 1}, [])
    assert run(pod(None), spec, kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == ({"cpu_idle": 1}, [])
    for qos, kube in (("LS", KubeQoS.BURSTABLE), ("LSR", KubeQoS.GUARANTEED), ("SYSTEM", KubeQoS.BESTEFFORT)):
        assert run(pod(qos), spec, kube=kube, probes=IDLE_ONLY) == ({}, [])
    # BE at another value than -1, or BE switched off: cpu.idle back to 0.
    assert run(pod("BE"), enabled({"beClass": 0}), kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == ({"cpu_idle": 0}, [])
    assert run(pod("BE"), default_nodeslo_spec(), kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == (
        {"cpu_idle": 0}, [])
    assert run(pod(None), default_nodeslo_spec(), kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == (
        {"cpu_idle": 0}, [])
    # Under coreSched, cpu.idle belongs to the coresched hook: nothing here.
    assert run(pod("BE"), enabled(policy="coreSched"), kube=KubeQoS.BESTEFFORT, probes=IDLE_ONLY) == ({}, [])
    # An LS pod lowered to -1 by its annotation is not BE: cpu.idle would starve it.
    lowered = pod("LS", {"koordinator.sh/cpuQOS": '{"enable": true, "groupIdentity": -1}'})
    assert run(lowered, spec, probes=IDLE_ONLY) == ({}, [])


def test_unsupported_host_writes_nothing() -> None:
    assert run(pod("BE"), enabled(), kube=KubeQoS.BESTEFFORT, probes={}) == ({}, [])


@pytest.mark.parametrize(("qos", "annotation", "expected"), [
    ("LS", '{"enable": true, "groupIdentity": -1}', -1),
    ("LS", '{"enable": true, "groupIdentity": 1}', 1),
    ("LS", '{"enable": true}', 2),
    ("LS", '{"enable": false, "groupIdentity": 1}', 0),
    # The v1.6 blog's sample has no "enable": upstream treats that as disabled, 0.
    ("LS", '{"groupIdentity": 1}', 0),
    ("BE", '{"enable": true, "groupIdentity": 2}', -1),  # BE may not go up
    ("LSR", '{"enable": true, "groupIdentity": -1}', 2),  # LSR/LSE never change
])
def test_pod_annotation_overrides_ls_only(qos: str, annotation: str, expected: int) -> None:
    kube = {"LS": KubeQoS.BURSTABLE, "BE": KubeQoS.BESTEFFORT, "LSR": KubeQoS.GUARANTEED}[qos]
    assert run(pod(qos, {"koordinator.sh/cpuQOS": annotation}), enabled(), kube=kube) == (
        {"cpu_bvt_warp_ns": expected}, [])


def test_blog_sample_annotation_is_read(shared_dir: Path) -> None:
    import yaml

    doc = yaml.safe_load(sample(shared_dir, "pods/cpu-qos-pod-annotation.yaml"))
    annotations = doc["metadata"]["annotations"]
    assert run(pod("LS", annotations), enabled()) == ({"cpu_bvt_warp_ns": 0}, [])


@pytest.mark.parametrize(("annotation", "message"), [
    ("{not json", "not JSON"),
    ('{"groupIdentity": 3}', "groupIdentity"),
    ('{"groupIdentity": "1"}', "groupIdentity"),
    ('{"enable": "yes"}', "enable"),
    ("[1]", "must be an object"),
])
def test_bad_annotation_is_an_error_naming_pod_and_annotation(annotation: str, message: str) -> None:
    for qos, kube in (("LS", KubeQoS.BURSTABLE), ("BE", KubeQoS.BESTEFFORT)):
        writes, errors = run(pod(qos, {"koordinator.sh/cpuQOS": annotation}), enabled(), kube=kube)
        assert writes == {}
        assert len(errors) == 1 and errors[0].startswith("groupidentity: pod ns/p: annotation koordinator.sh/cpuQOS:")
        assert message in errors[0]


def test_systemd_parent_gives_the_kube_qos() -> None:
    deps = HookDeps(gates={"GroupIdentity": True}, probes=BVT_ONLY, nodeslo=lambda: enabled({"lsrClass": 1}))
    request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, pod(None), "kubepods-pod1234.slice")
    assert HookRunner([groupidentity.new(deps)]).run(request).adjustment.writes == {"cpu_bvt_warp_ns": 1}
    request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, pod(None), "kubepods-besteffort-pod1234.slice")
    assert HookRunner([groupidentity.new(deps)]).run(request).adjustment.writes == {"cpu_bvt_warp_ns": -1}


def test_containers_are_not_touched() -> None:
    deps = HookDeps(gates={"GroupIdentity": True}, probes=BVT_ONLY, nodeslo=enabled)
    runner = HookRunner([groupidentity.new(deps)])
    for stage in (Stage.PRE_CREATE_CONTAINER, Stage.POST_START_CONTAINER, Stage.PRE_REMOVE_POD_SANDBOX):
        result = runner.run(HookRequest(stage, pod("BE"), "kubepods/besteffort/podu1"))
        assert result.ran == [] and result.adjustment.empty()
