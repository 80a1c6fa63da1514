"""Self-test of the fake kube-apiserver over raw HTTPS: what the companion's tests rely on it to do."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.fakeapiserver import (
    FakeApiServer,
    Fault,
    disruption_status,
    label_selector_matches,
    make_configmap,
    make_node,
    merge_patch,
)

NODESLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"


class Raw:
    """A bare HTTPS client (http.client) that trusts the fake's CA and sends its token."""

    def __init__(self, server: FakeApiServer, token: str | None = None) -> None:
        self.server = server
        self.context = ssl.create_default_context(cafile=server.ca_file)
        self.token = server.token if token is None else token

    def _connection(self, timeout: float = 5.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.server.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        conn = self._connection()
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def watch(self, path: str, timeout: float = 5.0) -> Iterator[dict[str, Any]]:
        """Yields the events of a watch stream until the server ends it."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
            response = conn.getresponse()
            assert response.status == 200
            assert response.getheader("Transfer-Encoding") == "chunked"
            while line := response.readline():
                yield json.loads(line)
        finally:
            conn.close()


@pytest.fixture
def raw(fake_apiserver: FakeApiServer) -> Raw:
    return Raw(fake_apiserver)


def nodeslo(name: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": name, **meta}, "spec": spec or {}}


def test_rejects_wrong_token_with_status(fake_apiserver: FakeApiServer) -> None:
    code, body = Raw(fake_apiserver, token="wrong").request("GET", "/api/v1/nodes")
    assert code == 401
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized"


def test_list_carries_resource_version_and_filters(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(make_node("node-a", labels={"pool": "batch"}))
    fake_apiserver.seed(make_node("node-b", labels={"pool": "online"}))
    code, body = raw.request("GET", "/api/v1/nodes")
    assert code == 200
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(fake_apiserver.resource_version)
    assert [n["metadata"]["name"] for n in body["items"]] == ["node-a", "node-b"]
    assert all(int(n["metadata"]["resourceVersion"]) <= fake_apiserver.resource_version for n in body["items"])
    _, by_label = raw.request("GET", "/api/v1/nodes?labelSelector=pool%3Dbatch")
    assert [n["metadata"]["name"] for n in by_label["items"]] == ["node-a"]
    _, by_name = raw.request("GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b")
    assert [n["metadata"]["name"] for n in by_name["items"]] == ["node-b"]


def test_label_selector_syntax() -> None:
    labels = {"a": "1", "b": "2"}
    assert label_selector_matches("a=1,b==2", labels)
    assert label_selector_matches("a in (1, 3), !c, b", labels)
    assert not label_selector_matches("a notin (1)", labels)
    assert not label_selector_matches("b!=2", labels)


def test_watch_from_resource_version_replays_later_events_only(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(make_node("before"))
    since = fake_apiserver.resource_version
    fake_apiserver.seed(make_node("after"))
    fake_apiserver.modify("nodes", "before", lambda n: n["metadata"]["labels"].update(x="y"))
    fake_apiserver.delete("nodes", "after")
    events = list(raw.watch(f"/api/v1/nodes?watch=true&resourceVersion={since}&timeoutSeconds=1"))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > since


def test_watch_without_version_starts_with_current_objects_then_streams(
    fake_apiserver: FakeApiServer, raw: Raw
) -> None:
    fake_apiserver.seed(make_node("existing"))
    events: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: events.extend(raw.watch("/api/v1/nodes?watch=true&timeoutSeconds=2")))
    reader.start()
    assert fake_apiserver.wait_for_watches(1)
    fake_apiserver.seed(make_node("new"))
    reader.join(10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "existing"), ("ADDED", "new")]


def test_watch_from_compacted_version_gets_410_expired(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(make_node("n"))
    old = fake_apiserver.resource_version
    fake_apiserver.seed(make_node("m"))
    fake_apiserver.compact()
    (event,) = raw.watch(f"/api/v1/nodes?watch=true&resourceVersion={old}")
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_bookmarks_carry_the_latest_version(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.set_bookmark_interval(0.1)
    fake_apiserver.seed(make_configmap("other", "ns", {}))
    since = fake_apiserver.resource_version
    events = list(raw.watch(f"/api/v1/nodes?watch=true&resourceVersion={since}&allowWatchBookmarks=true"
                            "&timeoutSeconds=1"))
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["object"]["metadata"]["resourceVersion"] == str(since)


def test_create_conflicts_with_409_already_exists(raw: Raw) -> None:
    code, created = raw.request("POST", NODESLOS, nodeslo("n1") | {"status": {"x": 1}})
    assert code == 201
    assert created["metadata"]["generation"] == 1 and "status" not in created  # status subresource
    code, body = raw.request("POST", NODESLOS, nodeslo("n1"))
    assert code == 409 and body["reason"] == "AlreadyExists"


def test_update_checks_resource_version(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    _, created = raw.request("POST", NODESLOS, nodeslo("n1", {"a": 1}))
    stale = created["metadata"]["resourceVersion"]
    code, updated = raw.request("PUT", f"{NODESLOS}/n1", created | {"spec": {"a": 2}})
    assert code == 200 and updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(stale)
    code, body = raw.request("PUT", f"{NODESLOS}/n1", created | {"spec": {"a": 3}})
    assert code == 409 and body["reason"] == "Conflict"
    unversioned = nodeslo("n1", {"a": 4})
    code, body = raw.request("PUT", f"{NODESLOS}/n1", unversioned)
    assert code == 422  # custom resources refuse unconditional updates
    assert fake_apiserver.get("nodeslos", "n1") == updated


def test_noop_update_keeps_version(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    _, created = raw.request("POST", NODESLOS, nodeslo("n1", {"a": 1}))
    version = fake_apiserver.resource_version
    code, same = raw.request("PUT", f"{NODESLOS}/n1", created)
    assert code == 200 and same == created and fake_apiserver.resource_version == version


def test_status_subresource_writes_only_status(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    # NodeMetric: its schema has a status to write (NodeSLO's status declares no field: all of it is pruned).
    metrics = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
    spec = {"metricCollectPolicy": {"reportIntervalSeconds": 60}}
    _, created = raw.request("POST", metrics, nodeslo("n1", spec) | {"kind": "NodeMetric"})
    code, after = raw.request("PUT", f"{metrics}/n1/status", created | {
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 9}},
        "status": {"updateTime": "2026-01-02T03:04:05Z"}})
    assert code == 200 and after["spec"] == spec and after["status"] == {"updateTime": "2026-01-02T03:04:05Z"}
    code, main = raw.request("PUT", f"{metrics}/n1", after | {"status": {"updateTime": "2027-01-02T03:04:05Z"}})
    assert main["status"] == {"updateTime": "2026-01-02T03:04:05Z"}  # the main endpoint keeps status


def test_merge_patch_semantics(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(make_node("n1"))
    patch = {"metadata": {"labels": {"new": "1", "kubernetes.io/hostname": None}},
             "status": {"capacity": {"kubernetes.io/batch-cpu": "1000", "pods": None}}}
    code, node = raw.request("PATCH", "/api/v1/nodes/n1/status", patch, "application/merge-patch+json")
    assert code == 200
    assert node["status"]["capacity"] == {"cpu": "16", "memory": "65536Mi", "kubernetes.io/batch-cpu": "1000"}
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "n1"}  # /status ignores metadata
    code, node = raw.request("PATCH", "/api/v1/nodes/n1", patch, "application/strategic-merge-patch+json")
    assert code == 200
    assert node["metadata"]["labels"] == {"new": "1"}
    assert node["status"]["capacity"]["kubernetes.io/batch-cpu"] == "1000"  # main endpoint keeps status
    code, body = raw.request("PATCH", "/api/v1/nodes/n1", [{"op": "add"}], "application/json-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": True}}
    code, _ = raw.request("PATCH", "/api/v1/nodes/n1", stale, "application/merge-patch+json")
    assert code == 409


def test_merge_patch_function_follows_rfc7386() -> None:
    # RFC 7386 appendix A examples.
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch(["a", "b"], ["c", "d"]) == ["c", "d"]
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}


def test_get_and_delete_not_found_are_status_objects(raw: Raw) -> None:
    code, body = raw.request("GET", f"{NODESLOS}/missing")
    assert code == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["message"] == 'nodeslos.slo.koordinator.sh "missing" not found'
    code, body = raw.request("DELETE", "/api/v1/namespaces/x/configmaps/missing")
    assert code == 404


def test_eviction_deletes_or_answers_429(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    fake_apiserver.seed(pod)
    fake_apiserver.seed(pod | {"metadata": {"name": "q", "namespace": "ns"}})
    fake_apiserver.block_eviction("ns", "q")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"}}
    code, _ = raw.request("POST", "/api/v1/namespaces/ns/pods/p/eviction", eviction)
    assert code == 201 and fake_apiserver.get("pods", "p", "ns") is None
    code, body = raw.request("POST", "/api/v1/namespaces/ns/pods/q/eviction",
                             eviction | {"metadata": {"name": "q", "namespace": "ns"}})
    assert code == 429 and body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert fake_apiserver.get("pods", "q", "ns") is not None
    code, _ = raw.request("POST", "/api/v1/namespaces/ns/pods/p/eviction", eviction)
    assert code == 404


def _running_pod(name: str, labels: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {}, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


def _pdb(name: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"selector": selector, **spec}}


def test_eviction_honours_the_pod_disruption_budget(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    for name in ("a", "b"):
        fake_apiserver.seed(_running_pod(name, {"app": "batch"}))
    fake_apiserver.seed(_running_pod("c", {"app": "other"}))
    fake_apiserver.seed(_running_pod("pending", {"app": "batch"}, phase="Pending"))
    fake_apiserver.seed(_pdb("keep-one", {"matchLabels": {"app": "batch"}}, minAvailable=1))
    evicted: list[tuple[str, str]] = []
    fake_apiserver.on_eviction(lambda ns, name: evicted.append((ns, name)))
    def eviction(name: str) -> dict[str, Any]:
        return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}

    # Two healthy of which one must stay: one disruption allowed, then none.
    code, _ = raw.request("POST", "/api/v1/namespaces/ns/pods/a/eviction", eviction("a"))
    assert code == 201
    budget = fake_apiserver.get("poddisruptionbudgets", "keep-one", "ns")
    assert budget["status"]["disruptionsAllowed"] == 0 and "a" in budget["status"]["disruptedPods"]
    code, body = raw.request("POST", "/api/v1/namespaces/ns/pods/b/eviction", eviction("b"))
    assert code == 429
    assert body["details"]["causes"][0]["message"] == ("The disruption budget keep-one needs 1 healthy pods and "
                                                       "has 1 currently")
    assert fake_apiserver.get("pods", "b", "ns") is not None
    # Not covered, and not yet running: no budget applies.
    assert raw.request("POST", "/api/v1/namespaces/ns/pods/c/eviction", eviction("c"))[0] == 201
    assert raw.request("POST", "/api/v1/namespaces/ns/pods/pending/eviction", eviction("pending"))[0] == 201
    assert evicted == [("ns", "a"), ("ns", "c"), ("ns", "pending")]
    assert [(e["name"], e["blocked"], e["budget"]) for e in fake_apiserver.evictions] == [
        ("a", False, "keep-one"), ("b", True, "keep-one"), ("c", False, None), ("pending", False, None)]


def test_a_pod_under_two_budgets_cannot_be_evicted(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(_running_pod("a", {"app": "batch", "tier": "x"}))
    fake_apiserver.seed(_pdb("one", {"matchLabels": {"app": "batch"}}, maxUnavailable=1))
    fake_apiserver.seed(_pdb("two", {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                             maxUnavailable="100%"))
    code, body = raw.request("POST", "/api/v1/namespaces/ns/pods/a/eviction",
                             {"kind": "Eviction", "metadata": {"name": "a"}})
    assert code == 500 and "more than one PodDisruptionBudget" in body["message"]


def test_disruption_status_counts_like_the_controller() -> None:
    pods = [_running_pod(str(i), {"app": "x"}) for i in range(4)] + [_running_pod("p", {"app": "x"}, "Pending")]
    budget = _pdb("b", {"matchLabels": {"app": "x"}}, minAvailable="50%")
    budget["metadata"]["generation"] = 3
    status = disruption_status(budget, pods)
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"],
            status["disruptionsAllowed"], status["observedGeneration"]) == (5, 4, 3, 1, 3)
    assert disruption_status(_pdb("n", None), pods)["expectedPods"] == 0  # a null selector covers nothing
    assert disruption_status(_pdb("e", {}, maxUnavailable=0), pods)["disruptionsAllowed"] == 0


def test_fault_injection_matches_requests(fake_apiserver: FakeApiServer, raw: Raw) -> None:
    fake_apiserver.seed(make_node("n1"))
    fake_apiserver.fail_next(1, Fault.STATUS, status=503, when=lambda r: r.verb == "get")
    assert raw.request("GET", "/api/v1/nodes")[0] == 200  # a list does not match
    code, body = raw.request("GET", "/api/v1/nodes/n1")
    assert code == 503 and body["kind"] == "Status"
    assert raw.request("GET", "/api/v1/nodes/n1")[0] == 200
    assert fake_apiserver.count("get", "nodes") == 2 and fake_apiserver.count("list") == 1


def test_bad_selector_is_400_for_list_and_watch(raw: Raw) -> None:
    assert raw.request("GET", "/api/v1/nodes?labelSelector=a%20in%20(b")[0] == 400
    assert raw.request("GET", "/api/v1/nodes?watch=true&fieldSelector=metadata.name")[0] == 400


def test_namespaced_resources_need_a_namespace_to_write(raw: Raw) -> None:
    code, _ = raw.request("POST", "/api/v1/configmaps", make_configmap("c", "ns", {}))
    assert code == 404
    code, created = raw.request("POST", "/api/v1/namespaces/ns/configmaps", make_configmap("c", "ns", {}))
    assert code == 201 and created["metadata"]["namespace"] == "ns"
    _, everywhere = raw.request("GET", "/api/v1/configmaps")
    assert [c["metadata"]["name"] for c in everywhere["items"]] == ["c"]
