"""batchresource: BE containers' shares, quota and memory limit from batch resources (spec or the
extended-resource-spec annotation), with Koordinator's bounds."""

from __future__ import annotations

import json

import pytest

from koordlet.apis.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, LABEL_QOS
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.errors import KoordletError
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource


def be_pod(container: Container, annotations: dict[str, str] | None = None, qos: str = "BE") -> Pod:
    return Pod(uid="u1", name="batch", namespace="ns", labels={LABEL_QOS: qos}, annotations=annotations or {},
               kube_qos=None, phase="Pending", priority=5000, containers=(container,))


def run(pod: Pod, stage: Stage = Stage.PRE_CREATE_CONTAINER) -> tuple[dict[str, object], list[str]]:
    result = HookRunner([batchresource.new(HookDeps())]).run(HookRequest(stage, pod, "", pod.containers[0], "cid"))
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


def test_one_annotation_text_serves_every_pod_and_a_bad_one_names_each() -> None:
    """The parse is kept by the annotation's text: replicas share it, and each error still names its pod."""
    raw = json.dumps({"containers": {"c": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}})
    first = be_pod(Container("c", ""), {ANNOTATION_EXTENDED_RESOURCE_SPEC: raw})
    other = Pod(uid="u2", name="replica", namespace="ns", labels=first.labels, annotations=first.annotations,
                kube_qos=None, phase="Pending", priority=5000, containers=first.containers)
    assert batchresource.batch_resources(first, first.containers[0]) is batchresource.batch_resources(
        other, other.containers[0])
    bad = '{"containers": {"c": "x"}}'
    for name in ("one", "two", "one"):
        pod = Pod(uid=name, name=name, namespace="ns", labels={LABEL_QOS: "BE"},
                  annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: bad}, kube_qos=None, phase="Pending", priority=None,
                  containers=(Container("c", ""),))
        with pytest.raises(KoordletError, match=f"^pod ns/{name}: annotation .*containers.c: expected an object"):
            batchresource.batch_resources(pod, pod.containers[0])
        with pytest.raises(KoordletError, match=f"^pod ns/{name}: annotation "):
            batchresource.pod_batch_resources(pod)


# --- the pod level (PreRunPodSandbox, upstream SetPodResources) -------------------------------------------


def pod_of(*containers: Container, annotations: dict[str, str] | None = None, qos: str = "BE") -> Pod:
    return Pod(uid="u1", name="batch", namespace="ns", labels={LABEL_QOS: qos}, annotations=annotations or {},
               kube_qos=None, phase="Pending", priority=5000, containers=containers)


def run_pod(pod: Pod) -> tuple[dict[str, object], list[str]]:
    result = HookRunner([batchresource.new(HookDeps())]).run(
        HookRequest(Stage.PRE_RUN_POD_SANDBOX, pod, "/kubepods/besteffort/podu1"))
    return result.adjustment.values, result.errors


def batch(request_milli: int | None, limit_milli: int | None, memory: int | None = None) -> tuple[Resources, Resources]:
    return Resources(batch_cpu_milli=request_milli), Resources(batch_cpu_milli=limit_milli, batch_memory_bytes=memory)


def test_pod_values_are_the_sums_over_its_containers() -> None:
    """500m + 700m requested -> 1200 x 1024 / 1000 = 1228 shares; 1000m + 2000m limits -> 300 ms per 100 ms;
    256Mi + 512Mi memory limits -> 768Mi; a sidecar without any batch resource counts for nothing."""
    pod = pod_of(Container("a", "", *batch(500, 1000, 256 << 20)), Container("b", "", *batch(700, 2000, 512 << 20)),
                 Container("plain", ""))
    assert run_pod(pod) == ({"cpu_shares": 1228, "cpu_quota": 300_000, "memory_limit": 768 << 20}, [])


@pytest.mark.parametrize(("second", "expected"), [
    # b has no batch-cpu limit: it may use any CPU, so the pod may too (upstream: -1 once one is unlimited).
    (batch(700, None, 512 << 20), {"cpu_shares": 1228, "cpu_quota": -1, "memory_limit": 768 << 20}),
    # b has no batch-memory limit: the pod's memory is unlimited.
    (batch(700, 2000), {"cpu_shares": 1228, "cpu_quota": 300_000, "memory_limit": -1}),
    # b requests nothing: the requests of the others still make the shares.
    ((Resources(), Resources(batch_cpu_milli=2000, batch_memory_bytes=512 << 20)),
     {"cpu_shares": 512, "cpu_quota": 300_000, "memory_limit": 768 << 20}),
])
def test_a_container_without_a_limit_makes_the_pod_unlimited(second: tuple[Resources, Resources],
                                                             expected: dict[str, object]) -> None:
    pod = pod_of(Container("a", "", *batch(500, 1000, 256 << 20)), Container("b", "", *second))
    assert run_pod(pod) == (expected, [])


def test_pod_values_keep_the_kernel_bounds() -> None:
    huge = [Container(f"c{i}", "", *batch(200_000, 2)) for i in range(2)]  # 4m of limit: 400 µs < 1000
    assert run_pod(pod_of(*huge)) == ({"cpu_shares": 262144, "cpu_quota": 1000, "memory_limit": -1}, [])


def test_pod_values_from_the_annotation_when_the_request_has_no_container_specs() -> None:
    """The RuntimeHookService and NRI sandbox requests carry no containers: the webhook's annotation does."""
    spec = {"containers": {
        "a": {"requests": {"kubernetes.io/batch-cpu": "1k"},
              "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}},
        "b": {"requests": {"kubernetes.io/batch-cpu": "500"},
              "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}},
        "none": {}}}
    pod = pod_of(annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(spec)})
    assert run_pod(pod) == ({"cpu_shares": 1536, "cpu_quota": 250_000, "memory_limit": (1 << 30) + (256 << 20)}, [])


def test_the_container_specs_win_over_the_annotation() -> None:
    """The reconciler's pods come with kubelet's full spec: that is the truth, the annotation a copy."""
    stale = {"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "4k"},
                                  "limits": {"kubernetes.io/batch-cpu": "4k"}}}}
    pod = pod_of(Container("a", "", *batch(500, 1000, 256 << 20)),
                 annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(stale)})
    assert run_pod(pod) == ({"cpu_shares": 512, "cpu_quota": 100_000, "memory_limit": 256 << 20}, [])


@pytest.mark.parametrize("pod", [
    pod_of(Container("a", "", *batch(500, 1000, 256 << 20)), qos="LS"),  # not BE
    pod_of(Container("a", "", *batch(500, 1000)), qos="LSR"),
    pod_of(Container("a", "")),  # BE without batch resources
    pod_of(),  # BE, no containers and no annotation
    pod_of(annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: '{"containers": {"a": {}}}'}),
])
def test_pod_left_alone(pod: Pod) -> None:
    assert run_pod(pod) == ({}, [])


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", "not JSON"),
    ('{"containers": "a"}', 'expected {"containers": {...}}'),
    ('{"containers": {"a": []}}', "containers.a: expected an object"),
    # A garbage entry of any container spoils the sums: nothing is set rather than a wrong pod total.
    ('{"containers": {"a": {"limits": {"kubernetes.io/batch-cpu": "1k"}},'
     ' "b": {"limits": {"kubernetes.io/batch-memory": "lots"}}}}', "containers.b.limits"),
])
def test_garbage_annotation_at_the_pod_stage_is_an_error_naming_the_pod(raw: str, message: str) -> None:
    values, errors = run_pod(pod_of(annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: raw}))
    assert values == {}
    assert len(errors) == 1 and "pod ns/batch: annotation node.koordinator.sh/extended-resource-spec" in errors[0]
    assert message in errors[0]
