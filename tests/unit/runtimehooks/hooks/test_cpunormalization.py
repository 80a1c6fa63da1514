"""CPU normalization in the hooks: LS (and unlabelled) quotas through the ``cpunormalization`` hook (gate
CPUNormalization), BE quotas through ``batchresource``, both divided by the node's ratio; and the reconciler
applying them to running pods, rescaling when the ratio changes.

Worked example (upstream ``math.Ceil(float64(quota) / ratio)``): a 2-CPU limit is 200000 us per 100 ms; on a
node whose ratio is 1.25 it becomes 160000 us, at 2.0 it becomes 100000 us.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.config import gates
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource, build_hooks, cpunormalization
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit
from tests.unit.runtimehooks.test_reconciler import FakeInformer, Recorder, be_pod, kubelet_pod, meta


def pod(qos: str | None, *limits_milli: int | None, annotations: dict[str, str] | None = None) -> Pod:
    containers = tuple(Container(f"c{i}", "", Resources(), Resources(cpu_milli=m)) for i, m in enumerate(limits_milli))
    return Pod(uid="u1", name="p", namespace="ns", labels={LABEL_QOS: qos} if qos else {},
               annotations=annotations or {}, kube_qos=None, phase="Running", priority=None, containers=containers)


def values(hook_module: Any, ratio: float | None, request: HookRequest) -> dict[str, object]:
    deps = HookDeps(cpu_normalization_ratio=lambda: ratio)
    result = HookRunner([hook_module.new(deps)]).run(request)
    assert result.errors == []
    return result.adjustment.values


def container_request(p: Pod, stage: Stage = Stage.PRE_CREATE_CONTAINER) -> HookRequest:
    return HookRequest(stage, p, "kubepods/burstable/podu1", p.containers[0], "cid")


def pod_request(p: Pod) -> HookRequest:
    return HookRequest(Stage.PRE_RUN_POD_SANDBOX, p, "kubepods/burstable/podu1")


# --- the LS hook ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qos", ["LS", None])
def test_ls_and_unlabelled_quotas_are_divided_by_the_ratio(qos: str | None) -> None:
    p = pod(qos, 2000, 1000)
    assert values(cpunormalization, 1.25, container_request(p)) == {"cpu_quota": 160_000}
    assert values(cpunormalization, 1.25, container_request(p, Stage.PRE_UPDATE_CONTAINER_RESOURCES)) == {
        "cpu_quota": 160_000}
    assert values(cpunormalization, 1.25, pod_request(p)) == {"cpu_quota": 240_000}  # ceil(300000 / 1.25)
    assert values(cpunormalization, 3.0, container_request(pod(qos, 1000))) == {"cpu_quota": 33_334}


@pytest.mark.parametrize("ratio", [1.0, 0.8])
def test_a_ratio_not_above_one_sets_kubelets_quota(ratio: float) -> None:
    # What brings back quotas scaled under an earlier ratio (the companion resets a disabled node to "1.00").
    assert values(cpunormalization, ratio, container_request(pod("LS", 2000))) == {"cpu_quota": 200_000}


@pytest.mark.parametrize(("p", "ratio"), [
    (pod("LS", 2000), None),    # no ratio on the node
    (pod("LSR", 2000), 2.0),    # bound pods keep their cpuset and the cpuset hook's quota
    (pod("BE", 2000), 2.0),     # BE: batchresource's business
    (pod(None, 2000, annotations={ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": "2-3"})}), 2.0),
    (pod("LS", None), 2.0),     # no limit: unlimited stays unlimited
])
def test_left_alone(p: Pod, ratio: float | None) -> None:
    assert values(cpunormalization, ratio, container_request(p)) == {}


def test_a_pod_with_an_unlimited_container_is_left_alone() -> None:
    assert values(cpunormalization, 2.0, pod_request(pod("LS", 2000, None))) == {}


def test_the_hook_exists_only_with_its_gate() -> None:
    on = [h.name for h in build_hooks(HookDeps(gates=gates.resolve({gates.CPU_NORMALIZATION: True})))]
    off = [h.name for h in build_hooks(HookDeps(gates=gates.resolve({})))]
    assert "cpunormalization" in on and "cpunormalization" not in off


# --- batchresource ----------------------------------------------------------------------------------------


def be(*limits: int | None) -> Pod:
    containers = tuple(Container(f"c{i}", "", Resources(batch_cpu_milli=500), Resources(batch_cpu_milli=m))
                       for i, m in enumerate(limits))
    return Pod(uid="u1", name="b", namespace="ns", labels={LABEL_QOS: "BE"}, annotations={}, kube_qos=None,
               phase="Running", priority=5000, containers=containers)


def test_batch_quota_is_divided_by_the_ratio() -> None:
    p = be(2000, 1000)
    assert values(batchresource, 1.25, container_request(p)) == {"cpu_shares": 512, "cpu_quota": 160_000}
    assert values(batchresource, 1.25, pod_request(p))["cpu_quota"] == 240_000
    assert values(batchresource, None, container_request(p))["cpu_quota"] == 200_000
    assert values(batchresource, 2.0, container_request(be(None)))["cpu_quota"] == -1


# --- the reconciler on a fake tree -------------------------------------------------------------------------


LS_POD_DIR = "kubepods/burstable/podnls-1"
LS_DIR = f"{LS_POD_DIR}/nls0c1"
BE_DIR = "kubepods/besteffort/podbe-1/be0c1"


def ls_pod() -> PodMeta:
    resources = {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    return meta(kubelet_pod("nls-1", "nls", labels={LABEL_QOS: "LS"}, containers=[{"name": "main",
                                                                                    "resources": resources}],
                            ids={"main": "containerd://nls0c1"}))


def test_reconciler_applies_and_rescales_when_the_ratio_changes(fake_host: FakeHost) -> None:
    executor = ResourceExecutor(fake_host.layout(), FakeClock(), MemoryAudit(), force_update_seconds=60.0)
    ratio: list[float | None] = [1.25]
    deps = HookDeps(gates=gates.resolve({gates.CPU_NORMALIZATION: True}), cpu_normalization_ratio=lambda: ratio[0])
    pods = [ls_pod(), be_pod()]
    for p in pods:
        fake_host.mkdir_cgroup(p.cgroup_dir)
        for c in p.containers:
            fake_host.mkdir_cgroup(c.cgroup_dir)
    reconciler = Reconciler(HookRunner(build_hooks(deps)), Applier(Recorder(executor)), FakeInformer(pods))

    def quotas() -> tuple[str, str, str]:
        return tuple(fake_host.read_cgroup(d, "cpu.cfs_quota_us").strip()  # type: ignore[return-value]
                     for d in (LS_POD_DIR, LS_DIR, BE_DIR))

    reconciler.reconcile(pods)
    # LS 2-CPU limit and BE 1000 batch-cpu limit, each divided by 1.25
    assert quotas() == ("160000", "160000", "80000")
    ratio[0] = 2.0  # the companion sent a new ratio: lower quotas (pod before container, the executor orders)
    reconciler.reconcile(pods)
    assert quotas() == ("100000", "100000", "50000")
    ratio[0] = 1.0  # normalization disabled ("1.00"): kubelet's values again
    reconciler.reconcile(pods)
    assert quotas() == ("200000", "200000", "100000")
