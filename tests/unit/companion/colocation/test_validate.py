"""The validating webhook: what koordinator pkg/webhook/pod/validating/cluster_colocation_profile.go refuses,
with apimachinery's field-error texts (one error alone, several as ``[a, b]``), answered with code 400."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.companion.colocation import validate
from tests.unit.companion.colocation.support import container, pod, review

BATCH = {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1Gi"}
REQUIRED_BE = ("labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with koordinator "
               "colocation resources")


def batch_pod(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    main = container("main") | {"resources": {"limits": dict(BATCH), "requests": dict(BATCH)}}
    return pod(labels=labels, containers=[main], **spec)


@pytest.mark.parametrize(("subject", "message"), [
    pytest.param(batch_pod({"koordinator.sh/qosClass": "BE"}, priority=5000), "", id="be-batch-ok"),
    pytest.param(batch_pod(priority=5000), REQUIRED_BE, id="batch-resources-need-be"),
    pytest.param(batch_pod({"koordinator.sh/qosClass": "LS"}, priority=5000), REQUIRED_BE, id="ls-with-batch"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "BE"}, priority=9500),
                 "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in "
                 "combination", id="be-prod"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "BE"}),
                 "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass= cannot be used in combination",
                 id="be-without-priority"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-mid"},
                     priority=9500), "", id="priority-class-label-wins"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=5000),
                 "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-batch cannot be used in "
                 "combination", id="lsr-batch"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=9000), "", id="lsr-prod-whole-cpus"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSE"}, priority=9000,
                     containers=[container("main", memory="1Gi")]),
                 "pod.spec.containers[*].resources.requests: Required value: LSR Pod must declare the requested "
                 "CPUs", id="lse-without-cpu"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=9000,
                     containers=[container("a", "500m"), container("b", "1")]),
                 'pod.spec.containers[*].resources.requests: Invalid value: "1500m": the requested CPUs of LSR Pod '
                 "must be integer", id="lsr-fractional-sum"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=9000,
                     containers=[container("a", "1500m")], overhead={"cpu": "500m"}), "", id="overhead-counts"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=9000,
                     containers=[container("a", "2")], initContainers=[container("init", "3500m")]),
                 'pod.spec.containers[*].resources.requests: Invalid value: "3500m": the requested CPUs of LSR Pod '
                 "must be integer", id="init-container-peak"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "LSR"}, priority=7000, containers=[container("a", "1500m")]),
                 "[Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-mid cannot be used in "
                 'combination, pod.spec.containers[*].resources.requests: Invalid value: "1500m": the requested CPUs '
                 "of LSR Pod must be integer]", id="two-errors-aggregated"),
    pytest.param(pod(labels={"koordinator.sh/qosClass": "unknown"}, priority=9000), "", id="unknown-qos-is-none"),
])
def test_create(subject: dict[str, Any], message: str) -> None:
    response, decision = validate(review(subject))
    assert decision.reason == message
    assert decision.allowed is (message == "")
    status = response["response"]["status"]
    assert status == ({"code": 200} if not message else {"code": 400, "message": message})


@pytest.mark.parametrize(("old_labels", "old_priority", "message"), [
    pytest.param({"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1000"}, 5000, "", id="unchanged"),
    pytest.param({"koordinator.sh/qosClass": "LS", "koordinator.sh/priority": "1000"}, 5000,
                 'labels.koordinator.sh/qosClass: Invalid value: "BE": field is immutable', id="qos-changed"),
    pytest.param({"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1000"}, 7000,
                 'spec.priority: Invalid value: "koord-batch": field is immutable', id="priority-class-changed"),
    pytest.param({"koordinator.sh/qosClass": "BE"}, 5999,
                 'labels.koordinator.sh/priority: Invalid value: "1000": field is immutable', id="sub-priority-added"),
])
def test_update_immutable_fields(old_labels: dict[str, str], old_priority: int, message: str) -> None:
    new = pod(labels={"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1000"}, priority=5000)
    old = pod(labels=old_labels, priority=old_priority)
    assert validate(review(new, operation="UPDATE", old=old))[1].reason == message


@pytest.mark.parametrize("request_kwargs", [
    pytest.param({"resource": "pods", "sub_resource": "status"}, id="subresource"),
    pytest.param({"resource": "configmaps"}, id="other-resource"),
    pytest.param({"operation": "DELETE"}, id="delete"),
    pytest.param({"operation": "CONNECT"}, id="connect"),
])
def test_not_validated(request_kwargs: dict[str, Any]) -> None:
    """Upstream skips subresources and other resources; this port answers only CREATE and UPDATE."""
    response, decision = validate(review(batch_pod(), **request_kwargs))
    assert decision.allowed and response["response"]["allowed"] is True


def test_update_without_old_object_is_a_bad_request() -> None:
    response, decision = validate(review(pod(), operation="UPDATE"))
    assert not decision.allowed
    assert response["response"]["status"]["code"] == 400
    assert "request.oldObject" in decision.reason
