"""The mutating webhook on pod CREATE, table-driven: each case is a pod, the profiles in the cluster and what the
pod must look like once the returned JSON patch is applied (JSON pointers; ABSENT for a member that must be gone).

Upstream reference: koordinator pkg/webhook/pod/mutating/cluster_colocation_profile.go (profiles, then
``mutatePodResourceSpec``) and extended_resource_spec.go (the annotation).  Worked example of the conversion:
a container of cpu "1" / memory "2Gi" in a koord-batch pod becomes ``kubernetes.io/batch-cpu: 1k`` (1000
milli-cores as ``resource.NewQuantity(1000, DecimalSI)`` serialises) and ``kubernetes.io/batch-memory: 2Gi``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from koordlet.companion.colocation import Decision, PriorityClassInfo, Profile, mutate
from tests.unit.companion.colocation.support import (
    ABSENT,
    DictView,
    apply_patch,
    container,
    patch_ops,
    pod,
    profile,
    resolve,
    review,
)

BE = {"qosClass": "BE", "priorityClassName": "koord-batch"}
ENABLED = {"koordinator.sh/enable-colocation": "true"}
IN_ENABLED_NS = {"namespaceSelector": {"matchLabels": ENABLED}}
ANN = "/metadata/annotations/node.koordinator.sh~1extended-resource-spec"
QOS = "/metadata/labels/koordinator.sh~1qosClass"
C0 = "/spec/containers/0/resources"
BATCH_CPU, BATCH_MEM = "kubernetes.io~1batch-cpu", "kubernetes.io~1batch-memory"


def spec_annotation(containers: Mapping[str, Mapping[str, Mapping[str, str]]]) -> str:
    return json.dumps({"containers": containers}, sort_keys=True, separators=(",", ":"))


ONE_CORE_2GI = {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "2Gi"}


@dataclass
class Case:
    profiles: Sequence[Profile]
    pod: dict[str, Any]
    expect: Mapping[str, Any]
    applied: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    draws: Sequence[int] | None = None
    """What ``rand(100)`` returns, in order; None: the profile must not draw at all."""
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: {"default": ENABLED})
    priority_classes: Mapping[str, PriorityClassInfo] | None = None
    remark: str = ""


CASES = {
    "be-profile-converts-cpu-and-memory": Case(
        [profile("batch", **IN_ENABLED_NS, **BE)], pod(), applied=("batch",), expect={
            QOS: "BE", "/spec/priorityClassName": "koord-batch", "/spec/priority": 5000,
            "/spec/preemptionPolicy": "PreemptLowerPriority",
            f"{C0}/limits": ONE_CORE_2GI, f"{C0}/requests": ONE_CORE_2GI,
            ANN: spec_annotation({"main": {"limits": ONE_CORE_2GI, "requests": ONE_CORE_2GI}})}),
    "cpu-milli-rounded-up-memory-canonical": Case(
        [profile("batch", **BE)],
        pod(containers=[container("a", "1500m", "1024Mi"), container("b", "0.0001", "1500M", limits=False)]),
        applied=("batch",), expect={
            f"{C0}/requests/{BATCH_CPU}": "1500", f"{C0}/limits/{BATCH_MEM}": "1Gi",
            f"/spec/containers/1/resources/requests/{BATCH_CPU}": "1",
            f"/spec/containers/1/resources/requests/{BATCH_MEM}": "1500M",
            "/spec/containers/1/resources/limits": ABSENT}),
    "requests-filled-from-limits": Case(
        [profile("batch", **BE)], pod(containers=[container("main", "2", "1Gi", requests=False)]),
        applied=("batch",), expect={
            f"{C0}/requests": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"},
            f"{C0}/limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}}),
    "init-containers-and-overhead-converted-annotation-lists-containers-only": Case(
        [profile("batch", **BE)],
        pod(initContainers=[container("init", "500m", "64Mi")], overhead={"cpu": "250m", "memory": "120Mi"}),
        applied=("batch",), expect={
            "/spec/initContainers/0/resources/limits": {"kubernetes.io/batch-cpu": "500",
                                                        "kubernetes.io/batch-memory": "64Mi"},
            "/spec/overhead": {"kubernetes.io/batch-cpu": "250", "kubernetes.io/batch-memory": "120Mi"},
            ANN: spec_annotation({"main": {"limits": ONE_CORE_2GI, "requests": ONE_CORE_2GI}})}),
    "koord-mid-converts-to-mid-resources-without-annotation": Case(
        [profile("mid", qosClass="LS", priorityClassName="koord-mid")], pod(), applied=("mid",), expect={
            "/spec/priority": 7000, f"{C0}/limits/kubernetes.io~1mid-cpu": "1k",
            f"{C0}/requests/kubernetes.io~1mid-memory": "2Gi", f"{C0}/limits/cpu": ABSENT, ANN: ABSENT}),
    "koord-free-keeps-cpu": Case(
        [profile("free", qosClass="BE", priorityClassName="koord-free")], pod(), applied=("free",), expect={
            "/spec/priority": 3000, "/spec/preemptionPolicy": "Never", f"{C0}/limits/cpu": "1", ANN: ABSENT}),
    "koord-prod-keeps-cpu": Case(
        [profile("prod", qosClass="LS", priorityClassName="koord-prod")], pod(), applied=("prod",), expect={
            QOS: "LS", "/spec/priority": 9000, f"{C0}/requests/cpu": "1", ANN: ABSENT}),
    "qos-be-alone-implies-batch": Case(
        [profile("be", qosClass="BE")], pod(), applied=("be",), expect={
            QOS: "BE", "/spec/priority": ABSENT, f"{C0}/limits/{BATCH_CPU}": "1k"}),
    "besteffort-pod-zero-cpu-becomes-batch": Case(
        [profile("tag", labels={"team": "x"})],
        pod(containers=[container("main", "0", limits=False)]), applied=("tag",), expect={
            "/metadata/labels/team": "x", f"{C0}/requests": {"kubernetes.io/batch-cpu": "0"},
            ANN: spec_annotation({"main": {"requests": {"kubernetes.io/batch-cpu": "0"}}})}),
    "probability-0-always-skips": Case(
        [profile("batch", probability=0, **BE)], pod(), skipped=("batch",), expect={
            QOS: ABSENT, f"{C0}/limits/cpu": "1", ANN: ABSENT}),
    "probability-100-applies-without-drawing": Case(
        [profile("batch", probability="100%", **BE)], pod(), applied=("batch",), expect={QOS: "BE"}),
    "probability-50-percent-draw-50-applies": Case(
        [profile("batch", probability="50%", **BE)], pod(), draws=[50], applied=("batch",), expect={QOS: "BE"}),
    "probability-50-percent-draw-51-skips": Case(
        [profile("batch", probability="50%", **BE)], pod(), draws=[51], skipped=("batch",), expect={QOS: ABSENT}),
    "probability-integer-is-the-percent": Case(
        [profile("batch", probability=30, **BE)], pod(), draws=[31], skipped=("batch",), expect={QOS: ABSENT}),
    "pod-selector-miss": Case(
        [profile("batch", selector={"matchLabels": {"app": "batch"}}, **BE)], pod(labels={"app": "web"}),
        expect={QOS: ABSENT, f"{C0}/limits/cpu": "1", ANN: ABSENT}),
    "pod-selector-expression-hit": Case(
        [profile("batch", selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["spark"]}]},
                 **BE)], pod(labels={"app": "spark"}), applied=("batch",), expect={QOS: "BE"}),
    "namespace-selector-miss": Case(
        [profile("batch", **IN_ENABLED_NS, **BE)], pod(), namespaces={"default": {}},
        expect={QOS: ABSENT, f"{C0}/limits/cpu": "1"}),
    "unknown-namespace-counts-as-matching-as-upstream": Case(
        [profile("batch", **IN_ENABLED_NS, **BE)], pod(namespace="fresh"), namespaces={}, applied=("batch",),
        expect={QOS: "BE"}, remark="namespace 'fresh' unknown"),
    "empty-namespace-selector-needs-no-namespace": Case(
        [profile("batch", namespaceSelector={}, **BE)], pod(namespace="fresh"), namespaces={}, applied=("batch",),
        expect={QOS: "BE"}),
    "namespace-taken-from-request-when-pod-has-none": Case(
        [profile("batch", **IN_ENABLED_NS, **BE)], pod(namespace=None), applied=("batch",),
        expect={QOS: "BE", "/metadata/namespace": ABSENT}),
    "profiles-applied-in-name-order": Case(
        [profile("b-last", labels={"tier": "b"}), profile("a-first", labels={"tier": "a", "first": "yes"}, **BE)],
        pod(), applied=("a-first", "b-last"), expect={"/metadata/labels/tier": "b", "/metadata/labels/first": "yes"}),
    "label-keys-mapping-copies-and-missing-copies-empty": Case(
        [profile("map", labelKeysMapping={"app": "app.kubernetes.io/name", "missing": "copied"})],
        pod(labels={"app": "web"}), applied=("map",), expect={
            "/metadata/labels/app.kubernetes.io~1name": "web", "/metadata/labels/copied": "",
            "/metadata/labels/app": "web"}),
    "annotation-keys-mapping": Case(
        [profile("map", annotationKeysMapping={"owner": "koordinator.sh/owner"})],
        {**pod(), "metadata": {"name": "app", "namespace": "default", "annotations": {"owner": "team-a"}}},
        applied=("map",), expect={"/metadata/annotations/koordinator.sh~1owner": "team-a"}),
    "label-suffixes-only-on-present-labels": Case(
        [profile("suffix", labelSuffixes={"app": "-batch", "absent": "-x"})], pod(labels={"app": "web"}),
        applied=("suffix",), expect={"/metadata/labels/app": "web-batch", "/metadata/labels/absent": ABSENT}),
    "scheduler-name-and-koordinator-priority": Case(
        [profile("sched", schedulerName="koord-scheduler", koordinatorPriority=1000)], pod(), applied=("sched",),
        expect={"/spec/schedulerName": "koord-scheduler", "/metadata/labels/koordinator.sh~1priority": "1000"}),
    "patch-merges-containers-replaces-tolerations": Case(
        [profile("patch", patch={"spec": {
            "terminationGracePeriodSeconds": 30, "tolerations": [{"key": "batch", "operator": "Exists"}],
            "containers": [{"name": "main", "env": [{"name": "MODE", "value": "batch"}]}]}})],
        pod(tolerations=[{"key": "old", "operator": "Exists"}],
            containers=[container("main", "1", "2Gi", env=[{"name": "A", "value": "1"}])]),
        applied=("patch",), expect={
            "/spec/terminationGracePeriodSeconds": 30, "/spec/tolerations": [{"key": "batch", "operator": "Exists"}],
            "/spec/containers/0/env": [{"name": "MODE", "value": "batch"}, {"name": "A", "value": "1"}],
            "/spec/containers/0/image": "busybox"}),
    "patch-deletes-a-container-by-merge-key": Case(
        [profile("drop-sidecar", patch={"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}, **BE)],
        pod(containers=[container("main", "1", "2Gi"), container("sidecar", "100m", "64Mi")]),
        applied=("drop-sidecar",), expect={
            "/spec/containers/1": ABSENT, "/spec/containers/0/name": "main",
            ANN: spec_annotation({"main": {"limits": ONE_CORE_2GI, "requests": ONE_CORE_2GI}})}),
    "skip-update-resources-profile-annotation": Case(
        [profile("keep", annotations={"config.koordinator.sh/skip-update-resources": ""}, **BE)], pod(),
        applied=("keep",), expect={QOS: "BE", "/spec/priority": 5000, f"{C0}/limits/cpu": "1", ANN: ABSENT}),
    "skip-update-resources-counts-even-when-its-profile-is-skipped": Case(
        [profile("a-keep", annotations={"config.koordinator.sh/skip-update-resources": "true"}, probability=0),
         profile("b-batch", **BE)], pod(), applied=("b-batch",), skipped=("a-keep",),
        expect={QOS: "BE", f"{C0}/limits/cpu": "1"}),
    "no-profile-manual-batch-pod-gets-annotation": Case(
        [], pod(labels={"koordinator.sh/qosClass": "BE"},
                containers=[container("main", requests=False, limits=False) | {"resources": {
                    "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}}}]),
        expect={f"{C0}/limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"},
                f"{C0}/requests": ABSENT,
                ANN: spec_annotation({"main": {"limits": ONE_CORE_2GI}})}),
    "batch-limit-without-request-gets-a-canonical-request": Case(
        [profile("batch", **BE)],
        pod(containers=[container("main") | {"resources": {"limits": {"kubernetes.io/batch-cpu": "1000"}}}]),
        applied=("batch",), expect={f"{C0}/requests": {"kubernetes.io/batch-cpu": "1k"},
                                    f"{C0}/limits": {"kubernetes.io/batch-cpu": "1000"}}),
    "priority-class-without-preemption-policy-clears-it": Case(
        [profile("batch", **BE)], pod(preemptionPolicy="Never"), applied=("batch",),
        priority_classes={"koord-batch": PriorityClassInfo(5100)},
        expect={"/spec/priority": 5100, "/spec/preemptionPolicy": ABSENT}),
}


def _rand(draws: Sequence[int] | None) -> Any:
    remaining = list(draws or ())

    def rand(n: int) -> int:
        assert n == 100
        assert remaining, "rand() called more often than the case expects"
        return remaining.pop(0)

    return rand, remaining


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_mutate_table(case: Case) -> None:
    view = DictView(case.profiles, case.namespaces)
    if case.priority_classes is not None:
        view.priority_classes = case.priority_classes
    rand, remaining = _rand(case.draws)
    response, decision = mutate(review(case.pod), view, rand=rand)
    assert remaining == [], "the case expected more draws"
    body = response["response"]
    assert body["uid"] == "7b1c8a2e" and body["allowed"] is True
    ops = patch_ops(response)
    mutated = apply_patch(case.pod, ops)
    for pointer, expected in case.expect.items():
        assert resolve(mutated, pointer) == expected, pointer
    assert decision == Decision(allowed=True, mutated=bool(ops), profiles=case.applied, skipped=case.skipped,
                                reason=decision.reason)
    assert case.remark in decision.reason
    # A second admission of the result changes nothing more: the webhook is idempotent on its own output
    # (kube-apiserver may call it again under reinvocationPolicy: IfNeeded).
    again, _ = mutate(review(mutated), DictView(), rand=rand)
    assert patch_ops(again) == []


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 20


def test_seeded_probability_applies_about_its_percent() -> None:
    """30% over 2000 seeded pods: upstream's ``rand(100) > 30`` skip rule applies to 31 of 100 draws."""
    view = DictView([profile("batch", probability="30%", **BE)])
    draw = random.Random(20).randrange
    applied = sum(bool(mutate(review(pod()), view, rand=draw)[1].profiles) for _ in range(2000))
    assert 0.27 < applied / 2000 < 0.35


def test_patch_operations_are_exact() -> None:
    """The docs' sample in full, as JSON patch operations: escaped keys, removals of the moved quantities."""
    view = DictView([profile("batch", labels={"koordinator.sh/mutated": "true"}, **BE)])
    ops = patch_ops(mutate(review(pod(containers=[container("main", "1", "2Gi", limits=False)])), view)[0])
    paths = {(op["op"], op["path"]): op.get("value") for op in ops}
    assert paths == {
        ("add", "/metadata/labels"): {"koordinator.sh/mutated": "true", "koordinator.sh/qosClass": "BE"},
        ("add", "/metadata/annotations"): {"node.koordinator.sh/extended-resource-spec": spec_annotation(
            {"main": {"requests": ONE_CORE_2GI}})},
        ("add", f"{C0}/requests/{BATCH_CPU}"): "1k",
        ("add", f"{C0}/requests/{BATCH_MEM}"): "2Gi",
        ("remove", f"{C0}/requests/cpu"): None,
        ("remove", f"{C0}/requests/memory"): None,
        ("add", "/spec/priorityClassName"): "koord-batch",
        ("add", "/spec/priority"): 5000,
        ("add", "/spec/preemptionPolicy"): "PreemptLowerPriority",
    }
