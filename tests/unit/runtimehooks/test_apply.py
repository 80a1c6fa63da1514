"""A container's CFS quota is left out of the runtime's answer where the runtime's write could be refused
(the executor's v1 rule, injected here as a function), and only there."""

from __future__ import annotations

from collections.abc import Callable

from koordlet.apis.pod import Container, Pod
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import Adjustment, HookRequest, Stage

POD = Pod(uid="u1", name="be", namespace="ns", labels={}, annotations={}, kube_qos=None, phase="Pending",
          priority=5000, containers=(Container("c", ""),))
PARENT = "/kubepods/besteffort/podu1"
CREATE = HookRequest(Stage.PRE_CREATE_CONTAINER, POD, PARENT, POD.containers[0], "cid")


def bound(answer: bool, calls: list[str]) -> Callable[..., bool]:
    def quota_bound(parent: str, *, suppressible: bool = False) -> bool:
        calls.append(parent)
        return answer or suppressible

    return quota_bound


def adjustment(**values: object) -> Adjustment:
    return Adjustment(values=dict(values), owners=dict.fromkeys(values, "batchresource"))


def test_a_bounded_container_quota_is_left_to_the_reconciler() -> None:
    calls: list[str] = []
    deferred = adjustment(cpu_quota=100_000, cpu_shares=512)
    Applier(lambda updates: [], bound(True, calls)).defer_quota(CREATE, deferred)
    assert deferred.values == {"cpu_shares": 512} and "cpu_quota" not in deferred.owners
    assert calls == ["kubepods/besteffort/podu1"]
    kept = adjustment(cpu_quota=100_000)
    Applier(lambda updates: [], bound(False, calls)).defer_quota(CREATE, kept)
    assert kept.values == {"cpu_quota": 100_000}


def test_unlimited_pod_stages_and_no_executor_are_left_alone() -> None:
    calls: list[str] = []
    for values in ({"cpu_quota": -1}, {"cpu_shares": 2}):
        unchanged = adjustment(**values)
        Applier(lambda updates: [], bound(True, calls)).defer_quota(CREATE, unchanged)
        assert unchanged.values == values
    pod_stage = adjustment(cpu_quota=100_000)
    Applier(lambda updates: [], bound(True, calls)).defer_quota(HookRequest(Stage.PRE_RUN_POD_SANDBOX, POD, PARENT),
                                                                pod_stage)
    assert pod_stage.values == {"cpu_quota": 100_000} and calls == []
    Applier(lambda updates: []).defer_quota(CREATE, pod_stage)
    assert pod_stage.values == {"cpu_quota": 100_000}


def test_a_be_pods_container_quota_is_deferred_while_its_group_may_be_limited() -> None:
    # The BE group unlimited when the hook answers may be limited by cpusuppress before runc writes the quota
    # (v1 refuses a child's quota above it: the container would fail to start).
    calls: list[str] = []
    be_pod = Pod(uid="u2", name="be", namespace="ns", labels={"koordinator.sh/qosClass": "BE"}, annotations={},
                 kube_qos=None, phase="Pending", priority=5000, containers=(Container("c", ""),))
    request = HookRequest(Stage.PRE_CREATE_CONTAINER, be_pod, "/kubepods/besteffort/podu2", be_pod.containers[0], "c")
    deferred = adjustment(cpu_quota=100_000)
    Applier(lambda updates: [], bound(False, calls), defer_be_quota=True).defer_quota(request, deferred)
    assert "cpu_quota" not in deferred.values
    kept = adjustment(cpu_quota=100_000)
    Applier(lambda updates: [], bound(False, calls), defer_be_quota=True).defer_quota(CREATE, kept)  # not BE
    assert kept.values == {"cpu_quota": 100_000}
    # Without pods from kubelet (standalone) nothing would write a quota left out: the runtime sets it.
    standalone = adjustment(cpu_quota=100_000)
    Applier(lambda updates: [], bound(False, calls)).defer_quota(request, standalone)
    assert standalone.values == {"cpu_quota": 100_000}
