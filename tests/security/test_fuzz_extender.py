"""Fuzzing of the scheduler extender's request decoding (koordlet/companion/extender/).

kube-scheduler posts ``ExtenderArgs`` (``Pod`` plus ``Nodes`` or ``NodeNames``) to ``/filter`` and
``/prioritize``; the pod is a tenant's object.  The handler's contract: JSON that is not ExtenderArgs is a
``ParseError`` (400), anything else escaping is a 500 and counts as a crash here.  The store the extender reads
is also fed Node and Pod objects from the apiserver (``update_node_json``, ``assign_pod``) and a node annotation
a node owner writes (custom usage thresholds, raw allocatable).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.companion.extender import LoadAwareExtender, NodeStore, make_server, parse_pod
from koordlet.errors import ParseError
from tests.security.fuzzkit import decode, fuzz_settings, junk_json, k8s_time, quantity_text, raw_bytes, shaped

_RESOURCE_NAMES = st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory",
                                   "kubernetes.io/mid-cpu", "nvidia.com/gpu", "CPU", ""])
resource_list = st.dictionaries(_RESOURCE_NAMES, st.one_of(quantity_text, st.integers(), st.floats()), max_size=4)
container = shaped({"name": st.text(max_size=10),
                    "resources": shaped({"requests": resource_list, "limits": resource_list}),
                    "restartPolicy": st.sampled_from(["Always", "OnFailure", ""])})
labels = st.dictionaries(
    st.sampled_from(["koordinator.sh/qosClass", "koordinator.sh/priority-class", "app", ""]),
    st.one_of(st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", "koord-batch", "koord-prod", "koord-free"]),
              st.text(max_size=10)), max_size=3)
metadata = shaped({"name": st.text(max_size=20), "namespace": st.text(max_size=20), "uid": st.text(max_size=36),
                   "labels": labels, "annotations": st.dictionaries(st.text(max_size=20), st.text(max_size=40)),
                   "ownerReferences": st.lists(shaped({"kind": st.sampled_from(["DaemonSet", "ReplicaSet"]),
                                                       "name": st.text(max_size=8)}), max_size=2)})
condition = shaped({"type": st.sampled_from(["PodScheduled", "Ready"]), "status": st.sampled_from(["True", "False"]),
                    "lastTransitionTime": k8s_time})
pod = shaped({
    "metadata": metadata,
    "spec": shaped({"containers": st.lists(container, max_size=3), "initContainers": st.lists(container, max_size=2),
                    "overhead": resource_list, "priority": st.one_of(st.integers(), st.sampled_from([5000, 9000])),
                    "nodeName": st.text(max_size=10)}),
    "status": shaped({"qosClass": st.sampled_from(["Guaranteed", "Burstable", "BestEffort", "x"]),
                      "phase": st.sampled_from(["Running", "Succeeded", "Failed", "Pending"]),
                      "conditions": st.lists(condition, max_size=3)}),
})
"""A v1.Pod as the scheduler sends it, any field wrong, missing or in another case."""

usage_thresholds = st.dictionaries(_RESOURCE_NAMES, st.one_of(st.integers(-5, 200), junk_json(3)), max_size=3)
thresholds_annotation = st.one_of(
    st.builds(json.dumps, shaped({
        "usageThresholds": usage_thresholds, "prodUsageThresholds": usage_thresholds,
        "aggregatedUsage": shaped({"usageThresholds": usage_thresholds,
                                   "usageAggregationType": st.sampled_from(["avg", "p50", "p90", "p95", "p99", "x"]),
                                   "usageAggregatedDuration": st.sampled_from(["5m", "-5m", "0s", "x", ""])})})),
    st.text(max_size=30),
)
raw_allocatable_annotation = st.one_of(st.builds(json.dumps, shaped({"cpu": quantity_text, "memory": quantity_text})),
                                       st.text(max_size=30))
node_annotations = st.one_of(
    st.fixed_dictionaries({}, optional={
        "scheduling.koordinator.sh/usage-thresholds": thresholds_annotation,
        "node.koordinator.sh/raw-allocatable": raw_allocatable_annotation}),
    junk_json(6),
)
node = shaped({
    "metadata": shaped({"name": st.one_of(st.sampled_from(["node-a", "node-b"]), st.text(max_size=10)),
                        "annotations": node_annotations}),
    "status": shaped({"allocatable": resource_list, "capacity": resource_list}),
})
node_names = st.lists(st.one_of(st.sampled_from(["node-a", "node-b"]), st.text(max_size=10)), max_size=5)
extender_args = shaped({
    "Pod": pod,
    "Nodes": shaped({"items": st.lists(node, max_size=4), "apiVersion": st.just("v1"), "kind": st.just("NodeList")}),
    "NodeNames": node_names,
}, junk_rate=6)
"""``ExtenderArgs``: kube-scheduler sends ``Nodes`` or ``NodeNames`` (nodeCacheCapable)."""


def _extender() -> LoadAwareExtender:
    store = NodeStore()
    store.update_node("node-a", {"cpu": "8", "memory": "32Gi"})
    return LoadAwareExtender(store)


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@fuzz_settings(200)
@given(args=st.one_of(extender_args, extender_args, junk_json()))
@example(args={"Pod": {"metadata": {"name": "p"}, "spec": {}, "status": {"conditions": 5}}, "NodeNames": []})
@example(args={"Pod": {"metadata": {"name": "p", "ownerReferences": 7}}, "NodeNames": []})
def test_extender_args(verb: str, args: Any) -> None:
    """A decoded request body: the filter/prioritize result or ParseError (400)."""
    decode(f"extender.{verb}(ExtenderArgs)", lambda: getattr(_extender(), verb)(args), (ParseError,))


@pytest.fixture
def extender_url() -> Iterator[tuple[str, int]]:
    """The real HTTP server of the extender on loopback (one per test, all its examples)."""
    server = make_server(_extender())
    thread = threading.Thread(target=server.serve_forever, name="fuzz-extender", daemon=True)
    thread.start()
    yield server.server_address[0], server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(10)


def _post(address: tuple[str, int], path: str, body: bytes) -> int:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


@fuzz_settings(200)
@given(verb=st.sampled_from(["filter", "prioritize"]),
       body=st.one_of(st.builds(lambda v: json.dumps(v).encode(), extender_args), raw_bytes))
@example(verb="filter", body=b"[" * 3000)
@example(verb="prioritize", body=b'{"Pod": ' + b"[" * 3000)
def test_extender_http_body(extender_url: tuple[str, int], verb: str, body: bytes) -> None:
    """Any body posted to the real server: an answer (200, or 400 for what is not ExtenderArgs), never a 500
    or a dropped connection; the server keeps answering."""
    status = decode(f"extender HTTP POST /{verb} (body)", lambda: _post(extender_url, f"/{verb}", body), ())
    assert status in (200, 400), status


@fuzz_settings(250)
@given(obj=st.one_of(pod, junk_json()))
def test_parse_pod(obj: Any) -> None:
    decode("extender.parse_pod", lambda: parse_pod(obj), (ParseError,))


@fuzz_settings(200)
@given(obj=st.one_of(node, junk_json()))
@example(obj={"metadata": {"name": "n", "annotations": {"node.koordinator.sh/raw-allocatable": 5}},
              "status": {"allocatable": {}}})
def test_update_node_json(obj: Any) -> None:
    """A Node from the apiserver's watch; its annotations are written by whoever may edit the Node."""
    decode("extender.NodeStore.update_node_json", lambda: NodeStore().update_node_json(obj), (ParseError,))


@fuzz_settings(200)
@given(obj=st.one_of(pod, junk_json()))
def test_assign_pod(obj: Any) -> None:
    """A Pod from the apiserver's watch (the assign cache): any tenant's pod spec."""
    decode("extender.NodeStore.assign_pod", lambda: _extender().store.assign_pod("node-a", obj, 1.0), (ParseError,))
