"""The fake kube-apiserver is as strict as the real one where this project's writes meet it: custom resources
against their CRD schemas (422 Invalid, unknown fields pruned with a warning or refused with Strict), Node resource
quantities, Eviction names, and graceful deletion with finalizers; all through the real ``kubernetes`` client."""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fixtures.fakeapiserver import FakeApiServer, make_node, make_pod
from tests.fixtures.fakevalidation import parse_quantity

SLO = "slo.koordinator.sh"


def _nodeslo(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{SLO}/v1alpha1", "kind": "NodeSLO", "metadata": {"name": name}, "spec": spec}


def _refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    return int(raised.value.status), json.loads(raised.value.body)


# ------------------------------------------------------------------------------------- custom resources


def test_custom_resource_type_errors_are_422_with_the_real_body(kube_api: Any) -> None:
    api = client.CustomObjectsApi(kube_api)
    bad = _nodeslo("n1", {"resourceUsedThresholdWithBE": {"enable": "yes", "cpuSuppressThresholdPercent": 65}})
    code, body = _refusal(api.create_cluster_custom_object, SLO, "v1alpha1", "nodeslos", bad)
    field = "spec.resourceUsedThresholdWithBE.enable"
    assert (code, body) == (422, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'NodeSLO.{SLO} "n1" is invalid: {field}: Invalid value: "string": {field} in body must be of '
                   'type boolean: "string"',
        "reason": "Invalid",
        "details": {"name": "n1", "group": SLO, "kind": "NodeSLO", "causes": [{
            "reason": "FieldValueTypeInvalid", "field": field,
            "message": f'Invalid value: "string": {field} in body must be of type boolean: "string"'}]},
        "code": 422})


def test_custom_resource_required_enum_bounds_pattern_and_int_or_string(kube_api: Any) -> None:
    api = client.CustomObjectsApi(kube_api)
    topology = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                "metadata": {"name": "n1"}, "topologyPolicies": ["None"],
                "zones": [{"name": "node-0", "resources": [{"name": "cpu", "capacity": "4x", "allocatable": True,
                                                           "available": 4}]}]}
    code, body = _refusal(api.create_cluster_custom_object, "topology.node.k8s.io", "v1alpha1",
                          "noderesourcetopologies", topology)
    assert code == 422
    causes = {(c["field"], c["reason"]): c["message"] for c in body["details"]["causes"]}
    assert causes[("zones[0].type", "FieldValueRequired")] == "Required value"
    assert causes[("zones[0].resources[0].allocatable", "FieldValueTypeInvalid")] == (
        'Invalid value: "boolean": zones[0].resources[0].allocatable in body must be of type integer,string: '
        '"boolean"')
    assert causes[("zones[0].resources[0].capacity", "FieldValueInvalid")].startswith(
        'Invalid value: "4x": zones[0].resources[0].capacity in body should match \'^(\\+|-)?')
    assert body["message"].startswith('NodeResourceTopology.topology.node.k8s.io "n1" is invalid: [')
    metric = {"apiVersion": f"{SLO}/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
              "spec": {"metricCollectPolicy": {"nodeMemoryCollectPolicy": "everything"}}}
    code, body = _refusal(api.create_cluster_custom_object, SLO, "v1alpha1", "nodemetrics", metric)
    [cause] = body["details"]["causes"]
    assert cause == {"reason": "FieldValueNotSupported", "field": "spec.metricCollectPolicy.nodeMemoryCollectPolicy",
                     "message": 'Unsupported value: "everything": supported values: "usageWithHotPageCache", '
                                '"usageWithoutPageCache", "usageWithPageCache"'}
    high = _nodeslo("n1", {"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 101}})
    code, body = _refusal(api.create_cluster_custom_object, SLO, "v1alpha1", "nodeslos", high)
    [cause] = body["details"]["causes"]
    assert cause["message"] == ("Invalid value: 101: spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent in "
                                "body should be less than or equal to 100")


def test_unknown_fields_are_pruned_with_a_warning_or_refused_when_strict(fake_apiserver: FakeApiServer,
                                                                         kube_api: Any) -> None:
    api = client.CustomObjectsApi(kube_api)
    slo = _nodeslo("n1", {"resourceUsedThresholdWithBE": {"enable": True, "typo": 1}, "extensions": {"any": {"x": 1}}})
    answer = kube_api.call_api(*kube_api.param_serialize(
        "POST", "/apis/slo.koordinator.sh/v1alpha1/nodeslos", header_params={"Content-Type": "application/json",
                                                                            "Accept": "application/json"},
        body=slo, auth_settings=["BearerToken"]))
    assert answer.status == 201
    assert answer.getheader("Warning") == '299 - "unknown field \\"spec.resourceUsedThresholdWithBE.typo\\""'
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None
    assert stored["spec"] == {"resourceUsedThresholdWithBE": {"enable": True}, "extensions": {"any": {"x": 1}}}
    slo["metadata"]["name"] = "n2"
    code, body = _refusal(api.create_cluster_custom_object, SLO, "v1alpha1", "nodeslos", slo,
                          field_validation="Strict")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == ('NodeSLO in version "v1alpha1" cannot be handled as a NodeSLO: strict decoding error: '
                               'unknown field "spec.resourceUsedThresholdWithBE.typo"')
    assert fake_apiserver.get("nodeslos", "n2") is None


def test_updates_patches_and_status_writes_are_validated(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    api = client.CustomObjectsApi(kube_api)
    api.create_cluster_custom_object(SLO, "v1alpha1", "nodeslos", _nodeslo("n1", {}))
    code, body = _refusal(api.patch_cluster_custom_object, SLO, "v1alpha1", "nodeslos", "n1",
                          {"spec": {"cpuBurstStrategy": {"cpuBurstPercent": "lots"}}})
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.cpuBurstStrategy.cpuBurstPercent"
    metric = api.create_cluster_custom_object(SLO, "v1alpha1", "nodemetrics", {
        "apiVersion": f"{SLO}/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"}, "spec": {}})
    code, body = _refusal(api.replace_cluster_custom_object_status, SLO, "v1alpha1", "nodemetrics", "n1",
                          metric | {"status": {"updateTime": "yesterday"}})
    assert code == 422
    assert body["details"]["causes"][0]["message"] == ('Invalid value: "yesterday": status.updateTime in body must be '
                                                       'of type date-time: "yesterday"')


# ------------------------------------------------------------------------------------- built-in objects


def test_node_status_quantities(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    fake_apiserver.seed(make_node("n1"))
    core = client.CoreV1Api(kube_api)
    # kubernetes.io/batch-cpu is a native resource name (the kubernetes.io domain): milli-values are fine.
    core.patch_node_status("n1", {"status": {"allocatable": {"kubernetes.io/batch-cpu": "1500m"}}})
    # An extended resource must be whole.
    code, body = _refusal(core.patch_node_status, "n1", {"status": {"capacity": {"example.com/dev": "500m"}}})
    assert code == 422 and body["message"].startswith('Node "n1" is invalid: ')
    assert [(c["field"], c["reason"], c["message"].rpartition(": ")[2]) for c in body["details"]["causes"]] == [
        ("status.capacity.example.com/dev", "FieldValueInvalid", "must be an integer")]
    code, body = _refusal(core.patch_node_status, "n1", {"status": {"allocatable": {"memory": "-1Gi"}}})
    assert code == 422 and body["details"]["causes"][0]["message"] == ('Invalid value: "-1Gi": must be greater than '
                                                                       'or equal to 0')
    code, body = _refusal(core.patch_node_status, "n1", {"status": {"allocatable": {"memory": "lots"}}})
    assert code == 400 and "quantities must match the regular expression" in body["message"]
    stored = fake_apiserver.get("nodes", "n1")
    assert stored is not None and stored["status"]["allocatable"]["memory"] == "65536Mi"


def test_quantity_parsing() -> None:
    assert parse_quantity("1500m") == 1.5
    assert parse_quantity("2Ki") == 2048
    assert parse_quantity("1e3") == 1000
    assert parse_quantity("1.5.5") is None and parse_quantity("") is None


def test_eviction_names_its_pod(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    fake_apiserver.seed(make_pod("web", "default", "n1"))
    core = client.CoreV1Api(kube_api)
    other = client.V1Eviction(metadata=client.V1ObjectMeta(name="db", namespace="default"))
    code, body = _refusal(core.create_namespaced_pod_eviction, "web", "default", other)
    assert (code, body["reason"], body["message"]) == (400, "BadRequest",
                                                       "name in URL does not match name in Eviction object")
    elsewhere = client.V1Eviction(metadata=client.V1ObjectMeta(name="web", namespace="prod"))
    code, body = _refusal(core.create_namespaced_pod_eviction, "web", "default", elsewhere)
    assert (code, body["message"]) == (400, "the namespace of the provided object does not match the namespace sent "
                                            "on the request")
    assert fake_apiserver.get("pods", "web", "default") is not None
    assert fake_apiserver.evictions == []


# ------------------------------------------------------------------------------------- graceful deletion


def _epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def test_a_running_pod_is_deleted_gracefully(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    fake_apiserver.seed(make_pod("web", "default", "n1"))
    core = client.CoreV1Api(kube_api)
    before = time.time()
    core.delete_namespaced_pod("web", "default")
    pod = fake_apiserver.get("pods", "web", "default")
    assert pod is not None
    meta = pod["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30  # terminationGracePeriodSeconds' default
    assert int(before) + 30 <= _epoch(meta["deletionTimestamp"]) <= time.time() + 30
    # Another delete may shorten the period (the timestamp moves by as much), not lengthen it.
    core.delete_namespaced_pod("web", "default", grace_period_seconds=60)
    assert fake_apiserver.get("pods", "web", "default")["metadata"]["deletionGracePeriodSeconds"] == 30
    core.delete_namespaced_pod("web", "default", grace_period_seconds=10)
    shortened = fake_apiserver.get("pods", "web", "default")["metadata"]
    assert shortened["deletionGracePeriodSeconds"] == 10
    assert _epoch(shortened["deletionTimestamp"]) == _epoch(meta["deletionTimestamp"]) - 20
    # An update keeps the marks.
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"},
                                                              "deletionTimestamp": None}})
    assert fake_apiserver.get("pods", "web", "default")["metadata"]["deletionTimestamp"] == shortened[
        "deletionTimestamp"]
    # kubelet, once the containers are gone.
    assert fake_apiserver.finish_deletion("pods", "web", "default")
    assert fake_apiserver.get("pods", "web", "default") is None


def test_pods_deleted_at_once(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    core = client.CoreV1Api(kube_api)
    unscheduled = make_pod("pending", "default", "")
    finished = make_pod("done", "default", "n1") | {"status": {"phase": "Succeeded"}}
    for pod in (unscheduled, finished, make_pod("forced", "default", "n1")):
        fake_apiserver.seed(pod)
    core.delete_namespaced_pod("pending", "default")
    core.delete_namespaced_pod("done", "default")
    core.delete_namespaced_pod("forced", "default", grace_period_seconds=0)
    assert fake_apiserver.list_objects("pods", "default") == []


def test_watchers_see_modified_then_deleted(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    fake_apiserver.seed(make_pod("web", "default", "n1"))
    start = str(fake_apiserver.resource_version)
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod_eviction("web", "default", client.V1Eviction(
        metadata=client.V1ObjectMeta(name="web", namespace="default"),
        delete_options=client.V1DeleteOptions(grace_period_seconds=5)))
    assert fake_apiserver.get("pods", "web", "default")["metadata"]["deletionGracePeriodSeconds"] == 5
    fake_apiserver.finish_deletion("pods", "web", "default")
    raw = kube_api.call_api(*kube_api.param_serialize(
        "GET", "/api/v1/namespaces/default/pods", query_params=[("watch", "true"), ("resourceVersion", start),
                                                                ("timeoutSeconds", "1")],
        header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]))
    events = [json.loads(line) for line in raw.read().decode().splitlines() if line]
    assert [(e["type"], bool(e["object"]["metadata"].get("deletionTimestamp"))) for e in events] == [
        ("MODIFIED", True), ("DELETED", True)]


def test_finalizers_hold_an_object_until_the_last_is_removed(fake_apiserver: FakeApiServer, kube_api: Any) -> None:
    api = client.CustomObjectsApi(kube_api)
    slo = _nodeslo("n1", {}) | {"metadata": {"name": "n1", "finalizers": ["example.com/keep", "example.com/two"]}}
    api.create_cluster_custom_object(SLO, "v1alpha1", "nodeslos", slo)
    api.delete_cluster_custom_object(SLO, "v1alpha1", "nodeslos", "n1")
    held = fake_apiserver.get("nodeslos", "n1")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    code, body = _refusal(api.patch_cluster_custom_object, SLO, "v1alpha1", "nodeslos", "n1",
                          {"metadata": {"finalizers": ["example.com/keep", "example.com/two", "example.com/new"]}})
    assert code == 422
    assert body["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "metadata.finalizers",
        "message": 'Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers '
                   '[]string{"example.com/new"}'}]
    api.patch_cluster_custom_object(SLO, "v1alpha1", "nodeslos", "n1",
                                    {"metadata": {"finalizers": ["example.com/two"]}})
    assert fake_apiserver.get("nodeslos", "n1") is not None
    api.patch_cluster_custom_object(SLO, "v1alpha1", "nodeslos", "n1", {"metadata": {"finalizers": None}})
    assert fake_apiserver.get("nodeslos", "n1") is None
