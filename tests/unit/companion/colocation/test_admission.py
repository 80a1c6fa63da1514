"""Admission outcomes other than a plain mutation: ignored requests, bad requests (400) and failed lookups (500),
which never raise out of ``mutate``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from koordlet.companion.colocation import Profile, mutate
from tests.unit.companion.colocation.support import DictView, apply_patch, container, patch_ops, pod, profile, review

BE = {"qosClass": "BE", "priorityClassName": "koord-batch"}


@pytest.mark.parametrize("request_kwargs", [
    pytest.param({"resource": "configmaps"}, id="other-resource"),
    pytest.param({"sub_resource": "status"}, id="subresource"),
    pytest.param({"operation": "UPDATE", "old": pod()}, id="update"),
    pytest.param({"operation": "DELETE"}, id="delete"),
])
def test_ignored_requests_are_allowed_unchanged(request_kwargs: dict[str, Any]) -> None:
    response, decision = mutate(review(pod(), **request_kwargs), DictView([profile("batch", **BE)]))
    assert response == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": "7b1c8a2e", "allowed": True, "status": {"code": 200}}}
    assert decision.allowed and not decision.mutated and decision.profiles == ()


def _bad(path: list[str], value: Any) -> dict[str, Any]:
    review_ = review(pod())
    target = review_
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return review_


@pytest.mark.parametrize(("subject", "text"), [
    pytest.param([], "AdmissionReview: must be an object", id="not-an-object"),
    pytest.param({"kind": "AdmissionReview"}, "AdmissionReview.request", id="no-request"),
    pytest.param(_bad(["request", "uid"], 5), "request.uid", id="bad-uid"),
    pytest.param(_bad(["request", "object"], None), "request.object", id="no-object"),
    pytest.param(_bad(["request", "object", "metadata", "labels"], {"a": 1}), "request.object.metadata.labels",
                 id="label-not-a-string"),
    pytest.param(_bad(["request", "object", "spec", "containers"], {"name": "x"}), "request.object.spec.containers",
                 id="containers-not-a-list"),
    pytest.param(_bad(["request", "object", "spec", "containers"], [container("a") | {"resources": {
        "limits": {"cpu": "lots"}}}]),
        "request.object.spec.containers[0].resources.limits.cpu: invalid quantity 'lots'", id="bad-quantity"),
    pytest.param(_bad(["request", "object", "spec", "priority"], "high"), "request.object.spec.priority",
                 id="bad-priority"),
])
def test_bad_requests_are_refused_with_400(subject: Any, text: str) -> None:
    response, decision = mutate(subject, DictView([profile("batch", **BE)]))
    status = response["response"]["status"]
    assert response["response"]["allowed"] is False and status["code"] == 400
    assert text in status["message"] and decision.reason == status["message"]
    assert not decision.allowed and not decision.mutated


class FailingView(DictView):
    def __init__(self, profiles: Sequence[Profile], fail: str) -> None:
        super().__init__(profiles, {"default": {"koordinator.sh/enable-colocation": "true"}})
        self.fail = fail

    def profiles(self) -> Sequence[Profile]:
        if self.fail == "profiles":
            raise RuntimeError("cache not synced")
        return super().profiles()

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        if self.fail == "namespace":
            raise RuntimeError("namespace cache not synced")
        return super().namespace_labels(name)


def test_missing_priority_class_is_a_500() -> None:
    view = DictView([profile("batch", **BE)], priority_classes={})
    response, decision = mutate(review(pod()), view)
    assert response["response"]["status"] == {
        "code": 500, "message": 'ClusterColocationProfile batch: priorityclasses.scheduling.k8s.io "koord-batch" '
                                "not found"}
    assert not decision.allowed and decision.profiles == ()


def test_failing_profile_list_is_a_500() -> None:
    response, _ = mutate(review(pod()), FailingView([profile("batch", **BE)], "profiles"))
    assert response["response"]["status"]["code"] == 500
    assert "cache not synced" in response["response"]["status"]["message"]


def test_failing_namespace_lookup_counts_as_matching() -> None:
    """Upstream ignores the namespace Get error (``!matched && err == nil``) and applies the profile."""
    selector = {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}}}
    _, decision = mutate(review(pod()), FailingView([profile("batch", **selector, **BE)], "namespace"))
    assert decision.profiles == ("batch",) and decision.mutated
    assert "namespace 'default' lookup failed" in decision.reason


def test_bad_existing_annotation_is_a_500() -> None:
    subject = pod()
    subject["metadata"]["annotations"] = {"node.koordinator.sh/extended-resource-spec": "{oops"}
    response, decision = mutate(review(subject), DictView())
    assert response["response"]["status"]["code"] == 500
    assert decision.reason.startswith("failed to get current extended resource spec, err: ")


@pytest.mark.parametrize(("patch", "text"), [
    pytest.param({"spec": {"containers": [{"image": "x"}]}}, "merge key", id="patch-refused"),
    pytest.param({"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "lots"}}}]}},
                 "ClusterColocationProfile patch: patched pod.spec.containers[0].resources.limits.cpu",
                 id="patch-writes-bad-quantity"),
    pytest.param({"metadata": {"labels": {"tier": 1}}}, "ClusterColocationProfile patch: patched pod.metadata.labels",
                 id="patch-writes-non-string-label"),
])
def test_failing_patch_is_a_500(patch: dict[str, Any], text: str) -> None:
    response, decision = mutate(review(pod()), DictView([profile("patch", patch=patch, **BE)]))
    assert response["response"]["status"]["code"] == 500
    assert text in decision.reason


def test_unmutated_pod_has_no_patch() -> None:
    response, decision = mutate(review(pod()), DictView([profile("other", selector={"matchLabels": {"x": "y"}})]))
    assert patch_ops(response) == [] and not decision.mutated and decision.allowed


def test_unexpected_error_is_answered_with_500() -> None:
    def broken_rand(n: int) -> int:
        raise RuntimeError("entropy exhausted")

    view = DictView([profile("batch", probability="50%", **BE)])
    response, decision = mutate(review(pod()), view, rand=broken_rand)
    assert response["response"] == {"uid": "7b1c8a2e", "allowed": False, "status": {
        "code": 500, "message": "internal error: RuntimeError: entropy exhausted"}}
    assert decision.reason == "internal error: RuntimeError: entropy exhausted"


def test_null_metadata_and_spec_members() -> None:
    """JSON null where an object belongs decodes as Go's zero value: the profile still applies."""
    subject = pod(containers=[container("main", "1", "1Gi") | {"resources": None}])
    subject["metadata"] = None
    subject["spec"]["overhead"] = None
    view = DictView([profile("batch", labels={"a": "b"}, **BE)])
    response, decision = mutate(review(subject), view)
    assert decision.allowed and decision.profiles == ("batch",)
    mutated = apply_patch(subject, patch_ops(response))
    assert mutated["metadata"] == {"labels": {"a": "b", "koordinator.sh/qosClass": "BE"}}
    nulls = {"metadata": None, "spec": None}
    response, decision = mutate(review(nulls), view)
    assert apply_patch(nulls, patch_ops(response))["spec"]["priority"] == 5000
