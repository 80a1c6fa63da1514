"""batchresource: BE containers' shares, quota and memory limit from batch resources (spec or the
extended-resource-spec annotation), with Koordinator's bounds."""

from __future__ import annotations

import json

import pytest

from koordlet.apis.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, LABEL_QOS
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource


def be_pod(container: Container, annotations: dict[str, str] | None = None, qos: str = "BE") -> Pod:
    return Pod(uid="u1", name="batch", namespace="ns", labels={LABEL_QOS: qos}, annotations=annotations or {},
               kube_qos=None, phase="Pending", priority=5000, containers=(container,))


def run(pod: Pod, stage: Stage = Stage.PRE_CREATE_CONTAINER) -> tuple[dict[str, object], list[str]]:
    result = HookRunner([batchresource.new()]).run(HookRequest(stage, pod, "", pod.containers[0], "cid"))
    return result.adjustment.values, result.errors


@pytest.mark.parametrize(("requests", "limits", "expected"), [
    (Resources(batch_cpu_milli=1000), Resources(batch_cpu_milli=2000, batch_memory_bytes=1 << 30),
     {"cpu_shares": 1024, "cpu_quota": 200_000, "memory_limit": 1 << 30}),
    (Resources(batch_cpu_milli=1), Resources(batch_cpu_milli=5), {"cpu_shares": 2, "cpu_quota": 1000}),
    (Resources(batch_cpu_milli=500_000), Resources(), {"cpu_shares": 262144, "cpu_quota": -1}),
    (Resources(batch_memory_bytes=1 << 20), Resources(batch_memory_bytes=2 << 20),
     {"cpu_shares": 2, "cpu_quota": -1, "memory_limit": 2 << 20}),
])
def test_values_from_the_container_spec(requests: Resources, limits: Resources, expected: dict[str, object]) -> None:
    values, errors = run(be_pod(Container("c", "", requests, limits)))
    assert values == expected and errors == []


def test_values_from_the_extended_resource_spec_annotation() -> None:
    spec = {"containers": {"c": {"requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1Gi"},
                                 "limits": {"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "2Gi"}}}}
    pod = be_pod(Container("c", ""), {ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(spec)})
    assert run(pod) == ({"cpu_shares": 1024, "cpu_quota": 400_000, "memory_limit": 2 << 30}, [])
    assert run(pod, Stage.PRE_UPDATE_CONTAINER_RESOURCES)[0]["cpu_quota"] == 400_000


@pytest.mark.parametrize("pod", [
    be_pod(Container("c", "", Resources(batch_cpu_milli=1000)), qos="LS"),  # not BE
    be_pod(Container("c", "")),  # BE without batch resources
    be_pod(Container("c", ""), {ANNOTATION_EXTENDED_RESOURCE_SPEC: '{"containers": {"other": {}}}'}),
])
def test_left_alone(pod: Pod) -> None:
    assert run(pod) == ({}, [])


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", "not JSON"),
    ('{"containers": []}', 'expected {"containers": {...}}'),
    ('{"containers": {"c": {"limits": {"kubernetes.io/batch-cpu": "lots"}}}}', "containers.c.limits"),
])
def test_garbage_annotation_is_an_error_naming_it(raw: str, message: str) -> None:
    values, errors = run(be_pod(Container("c", ""), {ANNOTATION_EXTENDED_RESOURCE_SPEC: raw}))
    assert values == {}
    assert len(errors) == 1 and "pod ns/batch: annotation node.koordinator.sh/extended-resource-spec" in errors[0]
    assert message in errors[0]
