"""tc hook: the pod cgroup's net_cls.classid is the HTB class our tc backend made for the pod's network
QoS class (upstream 1:2 SYSTEM, 1:3 LSE/LSR/LS, 1:4 BE); only with gate TCNetworkQoS, policy tc and
net_cls on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.nodeslo import NodeSLOSpec, default_nodeslo_spec
from koordlet.apis.pod import Pod
from koordlet.resourceexecutor.tc import CLASS_MINOR, ROOT_CLASS
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import tc
from koordlet.system.resources import NET_CLS_CLASSID
from tests.unit.qosmanager.test_isolation_samples import holder_spec, sample

PROBES = {"net_cls_classid": True}
TC_ON = {"TCNetworkQoS": True}


def pod(qos: str | None) -> Pod:
    return Pod(uid="u1", name="p", namespace="ns", labels={LABEL_QOS: qos} if qos else {}, annotations={},
               kube_qos=None, phase="Pending", priority=None)


def run(p: Pod, parent: str = "kubepods/burstable/podu1", *, spec: NodeSLOSpec | None = None,
        gates: dict[str, bool] | None = None, probes: dict[str, bool] | None = None,
        stage: Stage = Stage.PRE_RUN_POD_SANDBOX) -> tuple[dict[str, object], list[str]]:
    slo = spec if spec is not None else default_nodeslo_spec()
    deps = HookDeps(gates=TC_ON if gates is None else gates, probes=PROBES if probes is None else probes,
                    nodeslo=lambda: slo)
    result = HookRunner([tc.new(deps)]).run(HookRequest(stage, p, parent))
    return result.adjustment.writes, result.errors


def test_classids_are_the_backend_handles_and_upstream_values() -> None:
    # Upstream convertToHexClassId(1, minor): "0x10002" / "0x10003" / "0x10004".
    assert {name: tc.classid(name) for name in ("system", "ls", "be")} == {
        "system": 0x10002, "ls": 0x10003, "be": 0x10004}
    assert {name: 0x10000 | minor for name, minor in CLASS_MINOR.items()} == {
        name: tc.classid(name) for name in CLASS_MINOR}
    assert ROOT_CLASS == 0x10001 and tc.classid("ls") >> 16 == ROOT_CLASS >> 16
    validator = NET_CLS_CLASSID.validator
    assert validator is not None and validator.check(tc.classid("be")) == 0x10004  # the executor accepts it
    assert tc.GATE == "TCNetworkQoS" and tc.new(HookDeps()).stages == frozenset({Stage.PRE_RUN_POD_SANDBOX})


@pytest.mark.parametrize(("qos", "parent", "expected"), [
    ("SYSTEM", "kubepods/burstable/podu1", 0x10002),
    ("LSE", "kubepods/podu1", 0x10003),
    ("LSR", "kubepods/podu1", 0x10003),
    ("LS", "kubepods/burstable/podu1", 0x10003),
    ("BE", "kubepods/besteffort/podu1", 0x10004),
    # No class label: the kube QoS of the cgroup parent, as the netqos strategy classifies the pod's IPs.
    (None, "kubepods/besteffort/podu1", 0x10004),
    (None, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu1.slice", 0x10003),
    (None, "kubepods-besteffort-podu1.slice", 0x10004),
    (None, "kubepods-podu1.slice", 0x10003),
])
def test_classid_per_class(qos: str | None, parent: str, expected: int) -> None:
    assert run(pod(qos), parent) == ({"net_cls_classid": expected}, [])


def test_pod_of_no_class_is_left_alone() -> None:
    assert run(pod(None), "") == ({}, [])
    assert run(pod(None), "/some/other/parent") == ({}, [])


def test_sample_pods_and_default_policy(shared_dir: Path) -> None:
    import yaml

    for rel, expected in (("pods/be-pod-demo-no-resources.yaml", 0x10004), ("pods/ls-pod-demo-nginx.yaml", 0x10003)):
        labels = yaml.safe_load(sample(shared_dir, rel))["metadata"]["labels"]
        p = Pod(uid="u1", name="p", namespace="ns", labels=labels, annotations={}, kube_qos=None, phase="Pending",
                priority=None)
        assert run(p) == ({"net_cls_classid": expected}, [])


@pytest.mark.parametrize(("gates", "probes"), [
    ({}, PROBES),
    ({"TCNetworkQoS": False}, PROBES),
    ({"TerwayQoS": True}, PROBES),
    (TC_ON, {}),
    (TC_ON, {"net_cls_classid": False}),  # cgroup v2: no net_cls
])
def test_gate_off_or_no_net_cls_does_nothing(gates: dict[str, bool], probes: dict[str, bool]) -> None:
    assert run(pod("BE"), gates=gates, probes=probes) == ({}, [])


def test_terway_policy_or_no_nodeslo_does_nothing(shared_dir: Path) -> None:
    spec = holder_spec(sample(shared_dir, "slo-configs/network-qos-terway-qos.yaml"), "network-qos-terway-qos.yaml")
    assert run(pod("BE"), spec=spec) == ({}, [])
    deps = HookDeps(gates=TC_ON, probes=PROBES)  # NodeSLO not known yet
    result = HookRunner([tc.new(deps)]).run(HookRequest(Stage.PRE_RUN_POD_SANDBOX, pod("BE"), "kubepods/podu1"))
    assert result.adjustment.empty() and result.errors == []


def test_bad_cgroup_parent_is_an_error_naming_the_pod() -> None:
    writes, errors = run(pod(None), "kubepods/../etc")
    assert writes == {} and len(errors) == 1 and errors[0].startswith("tc: pod ns/p: cgroup parent")


def test_containers_are_not_touched() -> None:
    for stage in (Stage.PRE_CREATE_CONTAINER, Stage.POST_START_CONTAINER, Stage.PRE_REMOVE_POD_SANDBOX):
        assert run(pod("BE"), stage=stage) == ({}, [])


def annotated(annotation: str, uid: str = "u1") -> Pod:
    return Pod(uid=uid, name="p", namespace="ns", labels={LABEL_QOS: "LS"},
               annotations={"koordinator.sh/networkQOS": annotation}, kube_qos=None, phase="Pending", priority=None)


def test_pod_with_own_bandwidth_gets_its_own_class() -> None:
    from koordlet.isolation.netqos.podlimit import pod_minor

    minor = pod_minor("u1")
    assert 0x10 <= minor <= 0xFFFF and minor == pod_minor("u1")  # derived from the UID, stable
    for text in ('{"egressLimit": "50M"}', '{"ingressLimit": "10M", "egressLimit": "0"}',
                 '{"IngressLimit": "1k"}'):  # Go's encoding/json matches field names case-insensitively
        assert run(annotated(text)) == ({"net_cls_classid": 0x10000 | minor}, []), text


@pytest.mark.parametrize("text", [
    '{"egressLimit": "0", "ingressLimit": "0"}',  # limits nothing: its class
    "{}", "",
    "not json", '{"egressLimit": 50}', '{"egressLimit": "-5M"}', "[1]",  # malformed: counted as none, like upstream
])
def test_pod_without_a_usable_limit_gets_its_class(text: str) -> None:
    assert run(annotated(text)) == ({"net_cls_classid": 0x10003}, [])
