"""The hook runner's tenant gate: every request reviewed before a hook sees it, failing closed; the gate's view of
the pod list (kubelet's requests, other pods' exclusive CPUs) indexed once per list."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS
from koordlet.apis.pod import Resources
from koordlet.apis.tenantpolicy import TenantPolicy
from koordlet.runtimehooks.framework import FailurePolicy, Hook, HookContext, HookRequest, HookRunner, Stage
from koordlet.runtimehooks.tenant import TenantGate
from koordlet.statesinformer.framework import PodMeta
from tests.unit.qosmanager.fakes import make_node, make_pod

SEEN: list[HookRequest] = []


def _record(ctx: HookContext) -> None:
    SEEN.append(ctx.request)


RECORD = Hook("record", "keeps the request", frozenset({Stage.PRE_CREATE_CONTAINER}), _record)


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN.clear()


def request(meta: PodMeta, *, cgroup_parent: str | None = None) -> HookRequest:
    pod = dataclasses.replace(meta.pod, kube_qos=None)
    return HookRequest(Stage.PRE_CREATE_CONTAINER, pod, meta.cgroup_dir if cgroup_parent is None else cgroup_parent,
                       pod.containers[0], meta.containers[0].container_id)


class Pods:
    def __init__(self, pods: Sequence[PodMeta]) -> None:
        self.list = tuple(pods)
        self.calls = 0

    def __call__(self) -> Sequence[PodMeta]:
        self.calls += 1
        return self.list


def test_hooks_see_the_reviewed_pod() -> None:
    meta = make_pod("p", "SYSTEM")
    gate = TenantGate(TenantPolicy(), Pods([]), lambda: make_node(4))
    result = HookRunner([RECORD], tenant=gate).run(request(meta))
    assert result.errors == []
    assert LABEL_QOS not in SEEN[0].pod.labels
    assert [r.key for r in gate.policy.refused(meta.uid)] == ["qosClassSystem"]


def test_a_clean_pod_is_passed_as_is() -> None:
    meta = make_pod("p", "LS")
    req = request(meta)
    HookRunner([RECORD], tenant=TenantGate(TenantPolicy(), Pods([]), lambda: make_node(4))).run(req)
    assert len(SEEN) == 1 and SEEN[0] is req


@pytest.mark.parametrize("policy", [FailurePolicy.IGNORE, FailurePolicy.FAIL])
def test_a_failing_review_runs_no_hook(policy: FailurePolicy) -> None:
    def broken(_request: HookRequest) -> HookRequest:
        raise RuntimeError("boom")

    result = HookRunner([RECORD], policy=policy, tenant=broken).run(request(make_pod("p", "LS")))
    assert SEEN == [] and result.errors == ["tenant policy: boom"] and result.failed is (policy is FailurePolicy.FAIL)


def test_stage_without_hooks_skips_the_review() -> None:
    calls: list[HookRequest] = []

    def gate(req: HookRequest) -> HookRequest:
        calls.append(req)
        return req

    meta = make_pod("p", "LS")
    sandbox = HookRequest(Stage.PRE_RUN_POD_SANDBOX, meta.pod, meta.cgroup_dir)
    assert HookRunner([RECORD], tenant=gate).run(sandbox).ran == [] and calls == []


def test_unknown_cgroup_parent_is_judged_strictly() -> None:
    # No kube QoS and a parent that names none: BestEffort's 1000 is the floor.
    meta = make_pod("p", "LS", annotations={"koordinator.sh/oom-score-adj": "999"})
    gate = TenantGate(TenantPolicy(), Pods([]), lambda: make_node(4))
    HookRunner([RECORD], tenant=gate).run(request(meta, cgroup_parent="/not/a/kube/parent"))
    assert "koordinator.sh/oom-score-adj" not in SEEN[0].pod.annotations


def test_gate_uses_the_informers_pod_and_other_pods_claims() -> None:
    quarter = Resources(memory_bytes=(16 << 30) // 4)
    kubelet = make_pod("p", "LS", annotations={"koordinator.sh/oom-score-adj": "750"}, requests=quarter)
    owner = make_pod("db", "LSR", annotations={ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": "1"})})
    thief = make_pod("t", "LS", annotations={ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": "1"})})
    pods = Pods([kubelet, owner])
    gate = TenantGate(TenantPolicy(), pods, lambda: make_node(4, memory_bytes=16 << 30))
    runner = HookRunner([RECORD], tenant=gate)
    runtime = dataclasses.replace(kubelet.pod, containers=(dataclasses.replace(kubelet.pod.containers[0],
                                                                               requests=Resources()),))
    runner.run(dataclasses.replace(request(kubelet), pod=dataclasses.replace(runtime, kube_qos=None)))
    index = gate._claims
    runner.run(request(thief))
    runner.run(request(owner))
    assert "koordinator.sh/oom-score-adj" in SEEN[0].pod.annotations  # kubelet's request: floor 750
    assert ANNOTATION_RESOURCE_STATUS not in SEEN[1].pod.annotations
    assert ANNOTATION_RESOURCE_STATUS in SEEN[2].pod.annotations  # its own claim
    assert pods.calls == 3 and gate._claims is index  # one index for the unchanged list
    pods.list = (owner,)
    runner.run(request(thief))
    assert gate._claims is not index


def test_configured_workloads_are_trusted() -> None:
    meta = dataclasses.replace(make_pod("w", "SYSTEM"), source="config")
    gate = TenantGate(TenantPolicy(), Pods([meta]), lambda: make_node(4))
    HookRunner([RECORD], tenant=gate).run(request(meta))
    assert SEEN[0].pod.labels[LABEL_QOS] == "SYSTEM"
