"""Quantities as apimachinery writes them, the QoS and priority class a pod defaults to, and the annotation."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.apis.extension import PriorityClass
from koordlet.companion.colocation.resources import canonical, kube_qos, pod_priority_class, set_extended_resource_spec
from tests.unit.companion.colocation.support import container, pod

ANNOTATION = "node.koordinator.sh/extended-resource-spec"


@pytest.mark.parametrize(("text", "expected"), [
    ("1000", "1k"), ("1500", "1500"), ("2000", "2k"), ("0", "0"), ("0.5", "500m"), ("1.5", "1500m"),
    ("100m", "100m"), ("1000m", "1"), ("4k", "4k"), ("1e3", "1e3"), ("1.5e3", "1500"), ("1E3", "1e3"),
    ("1E", "1E"), ("1024Mi", "1Gi"), ("3456Mi", "3456Mi"), ("1536Mi", "1536Mi"), ("0.5Gi", "512Mi"),
    ("1Ki", "1Ki"), ("512Ki", "512Ki"), ("1000Ki", "1000Ki"), ("0.5Ki", "512"), ("1.5Ki", "1536"),
    ("1G", "1G"), ("1000000000", "1G"), ("1500M", "1500M"), ("128974848", "128974848"), (2048, "2048"),
    ("1n", "1n"), ("0.1n", "1n"), ("-1", "-1"), ("-1.5", "-1500m"),
])
def test_canonical(text: str | int, expected: str) -> None:
    assert canonical(text) == expected


@pytest.mark.parametrize(("containers", "spec", "expected"), [
    ([container("a", "1", "1Gi")], {}, "Guaranteed"),
    ([container("a", "1", "1Gi", limits=False)], {}, "Burstable"),
    ([container("a")], {}, "BestEffort"),
    ([container("a", "0", "0")], {}, "BestEffort"),
    ([container("a", "1", "1Gi"), container("b")], {}, "Burstable"),
    ([container("a", "1", "1Gi")], {"initContainers": [container("i", "1")]}, "Burstable"),
    # Literally kubectl's rule: limits alone are Burstable.  kube-apiserver defaults requests from limits
    # before admission, so a webhook never sees such a pod from a real cluster.
    ([container("a", "1", "1Gi", requests=False)], {}, "Burstable"),
    ([container("a")], {"resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                      "requests": {"cpu": "1", "memory": "1Gi"}}}, "Guaranteed"),
    ([container("a", "1", "1Gi")], {"resources": {}}, "BestEffort"),
])
def test_kube_qos(containers: list[dict[str, Any]], spec: dict[str, Any], expected: str) -> None:
    assert kube_qos(pod(containers=containers, **spec)) == expected


def test_kube_qos_prefers_status() -> None:
    subject = pod() | {"status": {"qosClass": "Burstable"}}
    assert kube_qos(subject) == "Burstable"


@pytest.mark.parametrize(("labels", "priority", "containers", "expected"), [
    ({}, 5500, None, PriorityClass.BATCH),
    ({}, 7999, None, PriorityClass.MID),
    ({}, 3000, None, PriorityClass.FREE),
    ({}, 100, None, PriorityClass.PROD),  # outside every band: Guaranteed -> LSR -> prod
    ({"koordinator.sh/priority-class": "koord-batch"}, 9500, None, PriorityClass.BATCH),
    ({"koordinator.sh/priority-class": "bogus"}, 5500, None, PriorityClass.PROD),  # unknown label: none, not 5500
    ({"koordinator.sh/qosClass": "BE"}, None, None, PriorityClass.BATCH),
    ({"koordinator.sh/qosClass": "SYSTEM"}, None, None, PriorityClass.PROD),
    ({}, None, [container("a")], PriorityClass.BATCH),
    ({}, None, [container("a", "1")], PriorityClass.PROD),
])
def test_pod_priority_class(labels: dict[str, str], priority: int | None, containers: Any,
                            expected: PriorityClass) -> None:
    spec = {} if priority is None else {"priority": priority}
    assert pod_priority_class(pod(labels=labels, containers=containers, **spec)) is expected


def test_annotation_rewritten_only_when_its_content_changes() -> None:
    batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}
    subject = pod(containers=[container("a") | {"resources": {"requests": dict(batch)}}])
    set_extended_resource_spec(subject)
    written = subject["metadata"]["annotations"][ANNOTATION]
    assert written == '{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"500",' \
                      '"kubernetes.io/batch-memory":"1Gi"}}}}'
    # The same requirements spelled differently count as unchanged.
    subject["metadata"]["annotations"][ANNOTATION] = \
        '{"containers":{"a":{"limits":{},"requests":{"kubernetes.io/batch-cpu":"0.5k","kubernetes.io/batch-memory":' \
        '"1024Mi"}}},"extra":1}'
    set_extended_resource_spec(subject)
    assert "0.5k" in subject["metadata"]["annotations"][ANNOTATION]
    # Without batch resources any more, the annotation is rewritten to the empty spec, as upstream.
    subject["spec"]["containers"][0]["resources"] = {}
    set_extended_resource_spec(subject)
    assert subject["metadata"]["annotations"][ANNOTATION] == "{}"


@pytest.mark.parametrize("text", ['{"containers":', '{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"x"}}}}',
                                  '[1]', '{"containers":{"a":[]}}'])
def test_invalid_annotation_raises(text: str) -> None:
    subject = pod()
    subject["metadata"]["annotations"] = {ANNOTATION: text}
    with pytest.raises(ValueError):
        set_extended_resource_spec(subject)


def test_null_annotation_is_an_empty_spec() -> None:
    subject = pod()
    subject["metadata"]["annotations"] = {ANNOTATION: "null"}
    set_extended_resource_spec(subject)
    assert subject["metadata"]["annotations"][ANNOTATION] == "null"
