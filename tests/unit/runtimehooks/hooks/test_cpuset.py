"""cpuset: the container's cpuset.cpus from resource-status (quota unset), the node's shared pools for LS
and NUMA-pinned pods, "" for BestEffort; garbage pod or node annotations are errors naming them."""

from __future__ import annotations

import json

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS
from koordlet.apis.pod import Container, Pod
from koordlet.errors import KoordletError
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import cpuset
from koordlet.system.kubepaths import KubeQoS

POOLS = json.dumps([{"socket": 0, "node": 0, "cpuset": "0-7"}, {"socket": 1, "node": 1, "cpuset": "8-15"}])


def pod(qos: str | None = None, status: object = None, kube_qos: KubeQoS | None = KubeQoS.BURSTABLE) -> Pod:
    annotations = {}
    if status is not None:
        annotations[ANNOTATION_RESOURCE_STATUS] = status if isinstance(status, str) else json.dumps(status)
    return Pod(uid="u1", name="p", namespace="ns", labels={LABEL_QOS: qos} if qos else {}, annotations=annotations,
               kube_qos=kube_qos, phase="Pending", priority=9000, containers=(Container("c", ""),))


def run(p: Pod, pools: str | None = POOLS, stage: Stage = Stage.PRE_CREATE_CONTAINER,
        ) -> tuple[dict[str, object], list[str]]:
    hook = cpuset.new(HookDeps(shared_pools=lambda: pools))
    result = HookRunner([hook]).run(HookRequest(stage, p, "", p.containers[0], "cid"))
    return result.adjustment.values, result.errors


@pytest.mark.parametrize(("p", "pools", "expected"), [
    # 1. resource-status cpuset: bound, quota unset; the node is not needed
    (pod("LSR", {"cpuset": "2-5"}, KubeQoS.GUARANTEED), POOLS, {"cpuset_cpus": "2-5", "cpu_quota": -1}),
    (pod("LSE", {"cpuset": "0,4"}, KubeQoS.GUARANTEED), None, {"cpuset_cpus": "0,4", "cpu_quota": -1}),
    (pod("LSR", {"cpuset": "3", "numaNodeResources": [{"node": 1}]}), POOLS, {"cpuset_cpus": "3", "cpu_quota": -1}),
    # 2. numaNodeResources: the pools of those NUMA nodes, in the annotation's order
    (pod("LS", {"numaNodeResources": [{"node": 1}]}), POOLS, {"cpuset_cpus": "8-15"}),
    (pod("LS", {"numaNodeResources": [{"node": 1}, {"node": 0}]}), POOLS, {"cpuset_cpus": "8-15,0-7"}),
    (pod("LS", {"cpuset": "", "numaNodeResources": [{"node": 7}]}), POOLS, {"cpuset_cpus": ""}),
    # 3. LS: all shared pools
    (pod("LS"), POOLS, {"cpuset_cpus": "0-7,8-15"}),
    (pod("LS", {"cpuset": ""}), POOLS, {"cpuset_cpus": "0-7,8-15"}),
    (pod("LS"), "[]", {"cpuset_cpus": ""}),
    # 4. BestEffort: "" (the suppress policy owns BE's cpuset), with or without the node
    (pod("BE", kube_qos=KubeQoS.BESTEFFORT), POOLS, {"cpuset_cpus": ""}),
    (pod("BE", kube_qos=KubeQoS.BESTEFFORT), None, {"cpuset_cpus": ""}),
    (pod(None, kube_qos=KubeQoS.BESTEFFORT), POOLS, {"cpuset_cpus": ""}),
    (pod("BE", kube_qos=None), POOLS, {"cpuset_cpus": ""}),
])
def test_cpuset_values(p: Pod, pools: str | None, expected: dict[str, object]) -> None:
    assert run(p, pools) == (expected, [])


def test_update_stage_too() -> None:
    assert run(pod("LSR", {"cpuset": "2-5"}), stage=Stage.PRE_UPDATE_CONTAINER_RESOURCES) == (
        {"cpuset_cpus": "2-5", "cpu_quota": -1}, [])


@pytest.mark.parametrize(("p", "pools"), [
    (pod("LS"), None),  # node topology not known yet
    (pod("LS", {"numaNodeResources": [{"node": 0}]}), None),
    (pod(None, kube_qos=KubeQoS.BURSTABLE), POOLS),  # unlabelled: upstream depends on the kubelet policy
    (pod(None, kube_qos=KubeQoS.GUARANTEED), POOLS),
    (pod("SYSTEM"), POOLS),
    (pod("LSR", kube_qos=KubeQoS.GUARANTEED), POOLS),  # LSR not bound yet
])
def test_left_alone(p: Pod, pools: str | None) -> None:
    assert run(p, pools) == ({}, [])


@pytest.mark.parametrize(("p", "expected"), [
    (pod("LSR", {"cpuset": "2"}, KubeQoS.GUARANTEED), {"cpu_quota": -1}),  # upstream UnsetPodCPUQuota
    (pod("LSE", {"cpuset": "0,4"}, KubeQoS.GUARANTEED), {"cpu_quota": -1}),
    (pod("LS", {"numaNodeResources": [{"node": 1}]}), {}),  # shares a pool: kubelet's quota stays
    (pod("LS"), {}),
    (pod("BE", kube_qos=KubeQoS.BESTEFFORT), {}),
])
def test_pod_stage_unsets_the_quota_of_bound_pods_only(p: Pod, expected: dict[str, object]) -> None:
    hook = cpuset.new(HookDeps(shared_pools=lambda: POOLS))
    result = HookRunner([hook]).run(HookRequest(Stage.PRE_RUN_POD_SANDBOX, p))
    assert result.ran == ["cpuset"] and result.errors == []
    assert result.adjustment.values == expected


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"cpuset": 5}', "cpuset: expected a string, got 5"),
    ('{"cpuset": "0-a"}', "cpuset '0-a': bad list element '0-a'"),
    ('{"cpuset": "5-2"}', "descending range"),
    ('{"numaNodeResources": {"node": 0}}', "numaNodeResources: expected a list"),
    ('{"numaNodeResources": [3]}', "numaNodeResources[0]: expected an object"),
    ('{"numaNodeResources": [{"node": "0"}]}', "numaNodeResources[0].node: expected an integer, got '0'"),
])
def test_garbage_resource_status_is_an_error_naming_pod_and_annotation(raw: str, message: str) -> None:
    values, errors = run(pod("LSR", raw))
    assert values == {}
    assert len(errors) == 1
    assert errors[0].startswith("cpuset: pod ns/p: annotation scheduling.koordinator.sh/resource-status")
    assert message in errors[0]


@pytest.mark.parametrize(("raw", "message"), [
    ("bad-fmt", "not JSON"),
    ('{"cpuset": "0-7"}', "expected a JSON list"),
    ('["0-7"]', "[0]: expected an object"),
    ('[{"node": 0, "cpuset": 7}]', "[0].cpuset: expected a string, got 7"),
    ('[{"node": 0, "cpuset": "x"}]', "[0].cpuset 'x'"),
    ('[{"node": true, "cpuset": "0"}]', "[0].node: expected an integer, got True"),
])
def test_garbage_shared_pools_is_an_error_naming_pod_and_annotation(raw: str, message: str) -> None:
    values, errors = run(pod("LS"), raw)
    assert values == {}
    assert len(errors) == 1
    assert errors[0].startswith("cpuset: pod ns/p: node annotation node.koordinator.sh/cpu-shared-pools")
    assert message in errors[0]


def test_parses_are_kept_by_text_and_errors_still_name_each_pod() -> None:
    good = pod("LSR", {"cpuset": "1-2"})
    twin = Pod(uid="u2", name="twin", namespace="ns", labels=good.labels, annotations=good.annotations,
               kube_qos=good.kube_qos, phase="Pending", priority=9000, containers=good.containers)
    assert cpuset.resource_status(good) is cpuset.resource_status(twin)
    pools = cpuset.shared_pools(POOLS, good)
    pools.append(cpuset.SharedPool(9, 9, "9"))  # the caller's own list: the kept parse is not touched
    assert cpuset.shared_pools(POOLS, twin) == [cpuset.SharedPool(0, 0, "0-7"), cpuset.SharedPool(1, 1, "8-15")]
    for name in ("a", "b", "a"):
        bad = Pod(uid=name, name=name, namespace="ns", labels={}, annotations={ANNOTATION_RESOURCE_STATUS: "{"},
                  kube_qos=None, phase="Pending", priority=None)
        with pytest.raises(KoordletError, match=f"^pod ns/{name}: annotation scheduling[.]koordinator"):
            cpuset.resource_status(bad)
        with pytest.raises(KoordletError, match=f"^pod ns/{name}: node annotation "):
            cpuset.shared_pools("[1]", bad)


def test_garbage_shared_pools_do_not_matter_to_bound_or_besteffort_pods() -> None:
    assert run(pod("LSR", {"cpuset": "1"}), "bad-fmt") == ({"cpuset_cpus": "1", "cpu_quota": -1}, [])
    assert run(pod("BE", kube_qos=KubeQoS.BESTEFFORT), "bad-fmt") == ({"cpuset_cpus": ""}, [])


def test_source_is_read_per_call() -> None:
    current: list[str | None] = [None]
    hook = cpuset.new(HookDeps(shared_pools=lambda: current[0]))
    runner = HookRunner([hook])
    p = pod("LS")
    request = HookRequest(Stage.PRE_CREATE_CONTAINER, p, "", p.containers[0], "cid")
    assert runner.run(request).adjustment.values == {}
    current[0] = POOLS
    assert runner.run(request).adjustment.values == {"cpuset_cpus": "0-7,8-15"}
