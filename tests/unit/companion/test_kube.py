"""The companion's kube adapters against the fake apiserver, through the real ``kubernetes`` client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from koordlet.companion.kube import (
    ApplyResult,
    ConfigMapWatcher,
    EvictionResult,
    KubeApiError,
    LeaderElector,
    NodeBatchResourceWriter,
    NodeMetricWriter,
    NodeSLOWriter,
    NodeWatcher,
    WatchEvent,
    WriteBackoff,
    evict_pod,
    make_api_client,
    make_in_cluster_client,
    patch_node_batch_resources,
)
from koordlet.companion.kube.client import BATCH_CPU, BATCH_MEMORY, MERGE_PATCH
from koordlet.errors import ConfigError
from tests.fixtures.fakeapiserver import FakeApiServer, Fault, RecordedRequest, make_configmap, make_node
from tests.fixtures.fakekubelet import TlsFiles


def close(api_client: Any) -> None:
    api_client.close()  # unannotated in the client


def leading(elector: LeaderElector) -> bool:
    """``is_leader`` read through a call, so the type checker does not narrow it across sleeps."""
    return elector.is_leader


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def owner_of(node: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a companion object must carry for ``node`` (a stored Node)."""
    return {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"], "uid": node["metadata"]["uid"]}


def pod(name: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


# ------------------------------------------------------------------------------------- clients


def test_client_sends_token_and_trusts_ca(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(make_node("n1"))
    nodes: Any = client.CoreV1Api(api).list_node(_preload_content=False)
    assert nodes.status == 200
    assert fake_apiserver.requests[-1].authorization == f"Bearer {fake_apiserver.token}"


def test_token_file_is_reread_after_rotation(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    writer = NodeSLOWriter(api)
    assert writer.get("n1") is None
    fake_apiserver.set_expected_token("rotated")
    with pytest.raises(KubeApiError) as excinfo:
        writer.get("n1")
    assert excinfo.value.status == 401 and not excinfo.value.temporary
    fake_apiserver.token_file.write_text("rotated\n")
    assert writer.get("n1") is None
    assert fake_apiserver.requests[-1].authorization == "Bearer rotated"


def test_untrusted_ca_is_a_connection_error(
    fake_apiserver: FakeApiServer, kubelet_tls: TlsFiles
) -> None:
    api_client = make_api_client(fake_apiserver.host, fake_apiserver.token_file, kubelet_tls.other_ca_cert)
    with pytest.raises(KubeApiError) as excinfo:
        NodeSLOWriter(api_client, timeout_seconds=2).get("n1")
    assert excinfo.value.status == 0 and excinfo.value.temporary
    close(api_client)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_client_skips_verification(fake_apiserver: FakeApiServer) -> None:
    api_client = make_api_client(fake_apiserver.host, fake_apiserver.token_file, insecure=True)
    try:
        assert NodeSLOWriter(api_client).list()["items"] == []
    finally:
        close(api_client)


def test_client_config_errors(tmp_path: Path, fake_apiserver: FakeApiServer) -> None:
    with pytest.raises(ConfigError, match="token_file"):
        make_api_client(fake_apiserver.host, tmp_path / "missing", fake_apiserver.ca_file)
    with pytest.raises(ConfigError, match="ca_file"):
        make_api_client(fake_apiserver.host, None, tmp_path / "missing.crt")
    with pytest.raises(ConfigError, match="not both"):
        make_api_client(fake_apiserver.host, None, fake_apiserver.ca_file, insecure=True)
    with pytest.raises(ConfigError, match="in-cluster"):
        make_in_cluster_client(environ={})


def test_in_cluster_client(fake_apiserver: FakeApiServer) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(fake_apiserver.port)}
    api_client = make_in_cluster_client(environ, fake_apiserver.token_file, fake_apiserver.ca_file)
    try:
        assert NodeSLOWriter(api_client).list()["items"] == []
    finally:
        close(api_client)


# ------------------------------------------------------------------------------------- watchers


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []

    def __call__(self, event: WatchEvent) -> None:
        with self.lock:
            self.events.append((event.type, event.object["metadata"]["name"]))

    def seen(self, *expected: tuple[str, str]) -> Callable[[], bool]:
        def check() -> bool:
            with self.lock:
                return all(e in self.events for e in expected)
        return check


FAST: dict[str, Any] = {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.2, "request_timeout_seconds": 3.0}


@pytest.fixture
def node_watcher(api: client.ApiClient) -> Iterator[tuple[NodeWatcher, Recorder]]:
    recorder = Recorder()
    watcher = NodeWatcher(api, recorder, watch_timeout_seconds=30, **FAST)
    try:
        yield watcher, recorder
    finally:
        watcher.stop()


def test_node_watcher_lists_then_follows_changes(
    fake_apiserver: FakeApiServer, node_watcher: tuple[NodeWatcher, Recorder]
) -> None:
    watcher, recorder = node_watcher
    fake_apiserver.seed(make_node("a"))
    watcher.start()
    assert watcher.wait_synced(5)
    assert wait_until(recorder.seen(("ADDED", "a")))
    assert watcher.get("a") is not None and watcher.get("a")["kind"] == "Node"  # type: ignore[index]
    fake_apiserver.seed(make_node("b"))
    fake_apiserver.modify("nodes", "a", lambda n: n["metadata"]["labels"].update(pool="batch"))
    fake_apiserver.delete("nodes", "b")
    assert wait_until(recorder.seen(("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")))
    assert watcher.get("a")["metadata"]["labels"]["pool"] == "batch"  # type: ignore[index]
    assert watcher.get("b") is None
    assert watcher.resource_version == str(fake_apiserver.resource_version)
    assert watcher.lists == 1


def _disconnect(fake_apiserver: FakeApiServer) -> None:
    """Drops the watch and makes every new watch fail until clear_faults()."""
    fake_apiserver.fail_next(10_000, Fault.HTTP_500, when=lambda r: r.verb == "watch")
    fake_apiserver.drop_watches(abrupt=True)
    assert fake_apiserver.wait_for(lambda: fake_apiserver.active_watches == 0)


def test_node_watcher_resumes_after_dropped_watch_without_relisting(
    fake_apiserver: FakeApiServer, node_watcher: tuple[NodeWatcher, Recorder]
) -> None:
    watcher, recorder = node_watcher
    fake_apiserver.seed(make_node("a"))
    watcher.start()
    assert watcher.wait_synced(5) and fake_apiserver.wait_for_watches(1)
    _disconnect(fake_apiserver)
    fake_apiserver.seed(make_node("while-away"))
    fake_apiserver.delete("nodes", "a")
    failed_watches = fake_apiserver.count("watch")
    assert fake_apiserver.wait_for(lambda: fake_apiserver.count("watch") > failed_watches)  # still retrying
    fake_apiserver.clear_faults()
    assert wait_until(recorder.seen(("ADDED", "while-away"), ("DELETED", "a")))
    assert watcher.lists == 1 and watcher.errors >= 2
    # Resumed from the version it had, not from scratch.
    resumed = [r for r in fake_apiserver.requests if r.verb == "watch"][-1]
    assert resumed.query["resourceVersion"] != "0"


def test_node_watcher_relists_after_410_and_reports_the_gap(
    fake_apiserver: FakeApiServer, node_watcher: tuple[NodeWatcher, Recorder]
) -> None:
    watcher, recorder = node_watcher
    fake_apiserver.seed(make_node("a"))
    fake_apiserver.seed(make_node("b"))
    watcher.start()
    assert watcher.wait_synced(5) and fake_apiserver.wait_for_watches(1)
    _disconnect(fake_apiserver)
    fake_apiserver.delete("nodes", "a")
    fake_apiserver.modify("nodes", "b", lambda n: n["metadata"]["labels"].update(changed="yes"))
    fake_apiserver.seed(make_node("c"))
    fake_apiserver.compact()
    fake_apiserver.clear_faults()
    assert wait_until(recorder.seen(("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "c")))
    assert watcher.lists == 2
    assert sorted(n["metadata"]["name"] for n in watcher.items()) == ["b", "c"]
    fake_apiserver.seed(make_node("d"))  # and it watches again
    assert wait_until(recorder.seen(("ADDED", "d")))


def test_watch_reopens_after_server_timeout(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    recorder = Recorder()
    watcher = NodeWatcher(api, recorder, watch_timeout_seconds=1, **FAST)
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        assert wait_until(lambda: watcher.watches >= 2, 5)
        fake_apiserver.seed(make_node("late"))
        assert wait_until(recorder.seen(("ADDED", "late")))
        assert watcher.errors == 0 and watcher.lists == 1
    finally:
        watcher.stop()


def test_node_watcher_for_one_node(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    recorder = Recorder()
    fake_apiserver.seed(make_node("mine"))
    fake_apiserver.seed(make_node("other"))
    watcher = NodeWatcher(api, recorder, node_name="mine", **FAST)
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        fake_apiserver.modify("nodes", "other", lambda n: n["metadata"]["labels"].update(x="1"))
        fake_apiserver.modify("nodes", "mine", lambda n: n["metadata"]["labels"].update(x="1"))
        assert wait_until(recorder.seen(("MODIFIED", "mine")))
        assert all(name == "mine" for _, name in recorder.events)
    finally:
        watcher.stop()


def test_configmap_watcher(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    seen: list[dict[str, str] | None] = []
    lock = threading.Lock()

    def on_change(cm: dict[str, Any] | None) -> None:
        with lock:
            seen.append(None if cm is None else dict(cm.get("data") or {}))

    fake_apiserver.seed(make_configmap("unrelated", "koordinator-system", {"k": "v"}))
    watcher = ConfigMapWatcher(api, on_change, **FAST)
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        assert wait_until(lambda: seen == [None])  # absent: the caller falls back to defaults
        assert watcher.configmap is None
        fake_apiserver.seed(make_configmap("slo-controller-config", "koordinator-system",
                                           {"colocation-config": '{"enable": true}'}))
        assert wait_until(lambda: len(seen) == 2)
        assert seen[1] == {"colocation-config": '{"enable": true}'}
        fake_apiserver.modify("configmaps", "slo-controller-config",
                              lambda cm: cm["data"].update({"colocation-config": '{"enable": false}'}),
                              namespace="koordinator-system")
        assert wait_until(lambda: len(seen) == 3)
        assert watcher.data == {"colocation-config": '{"enable": false}'}
        fake_apiserver.delete("configmaps", "slo-controller-config", namespace="koordinator-system")
        assert wait_until(lambda: len(seen) == 4 and seen[-1] is None)
        assert all(r.query.get("fieldSelector") == "metadata.name=slo-controller-config"
                   for r in fake_apiserver.requests if r.resource == "configmaps")
    finally:
        watcher.stop()


def test_configmap_watcher_reports_a_deletion_missed_during_a_410_once(
    fake_apiserver: FakeApiServer, api: client.ApiClient
) -> None:
    seen: list[dict[str, Any] | None] = []
    fake_apiserver.seed(make_configmap("slo-controller-config", "koordinator-system", {"k": "v"}))
    watcher = ConfigMapWatcher(api, seen.append, **FAST)
    watcher.start()
    try:
        assert watcher.wait_synced(5) and fake_apiserver.wait_for_watches(1)
        _disconnect(fake_apiserver)
        fake_apiserver.delete("configmaps", "slo-controller-config", namespace="koordinator-system")
        fake_apiserver.compact()
        fake_apiserver.clear_faults()
        assert wait_until(lambda: watcher.lists == 2 and fake_apiserver.active_watches == 1)
        assert [None if cm is None else cm["data"] for cm in seen] == [{"k": "v"}, None]
    finally:
        watcher.stop()


def test_watcher_callback_failure_does_not_stop_it(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    calls: list[str] = []

    def on_event(event: WatchEvent) -> None:
        calls.append(event.object["metadata"]["name"])
        raise RuntimeError("bad callback")

    watcher = NodeWatcher(api, on_event, **FAST)
    watcher.start()
    try:
        assert watcher.wait_synced(5)
        fake_apiserver.seed(make_node("x"))
        fake_apiserver.seed(make_node("y"))
        assert wait_until(lambda: calls == ["x", "y"])
    finally:
        watcher.stop()


def test_watcher_stop_is_prompt(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    watcher = NodeWatcher(api, None, watch_timeout_seconds=300, **FAST)
    watcher.start()
    assert watcher.wait_synced(5) and fake_apiserver.wait_for_watches(1)
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 2


# ------------------------------------------------------------------------------------- node status


def test_patch_node_batch_resources_sets_and_removes(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(make_node("n1"))
    node = patch_node_batch_resources(api, "n1", 15000, 32 * 2**30)
    for part in ("capacity", "allocatable"):
        assert node["status"][part][BATCH_CPU] == "15000"
        assert node["status"][part][BATCH_MEMORY] == str(32 * 2**30)
        assert node["status"][part]["cpu"] == "16"  # the rest untouched
    request = fake_apiserver.requests[-1]
    assert (request.verb, request.subresource, request.content_type) == ("patch", "status", MERGE_PATCH)
    patch_node_batch_resources(api, "n1", None, 1024)
    stored = fake_apiserver.get("nodes", "n1")
    assert stored is not None
    assert BATCH_CPU not in stored["status"]["capacity"] and BATCH_CPU not in stored["status"]["allocatable"]
    assert stored["status"]["allocatable"][BATCH_MEMORY] == "1024"
    patch_node_batch_resources(api, "n1", None, None)
    stored = fake_apiserver.get("nodes", "n1")
    assert stored is not None and BATCH_MEMORY not in stored["status"]["capacity"]
    assert stored["status"]["capacity"] == {"cpu": "16", "memory": "65536Mi", "pods": "110"}


def test_patch_node_batch_resources_errors(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    with pytest.raises(ValueError, match="batch-cpu"):
        patch_node_batch_resources(api, "n1", -1, None)
    with pytest.raises(KubeApiError) as excinfo:
        patch_node_batch_resources(api, "missing", 1, 1)
    assert excinfo.value.status == 404 and excinfo.value.reason == "NotFound"
    fake_apiserver.seed(make_node("n1"))
    fake_apiserver.fail_next(1, Fault.HTTP_500)
    with pytest.raises(KubeApiError) as excinfo:
        patch_node_batch_resources(api, "n1", 1, 1)
    assert excinfo.value.status == 500 and excinfo.value.temporary


def test_timeout_is_a_temporary_error(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(make_node("n1"))
    fake_apiserver.fail_next(1, Fault.DELAY, delay_seconds=3)
    with pytest.raises(KubeApiError) as excinfo:
        patch_node_batch_resources(api, "n1", 1, 1, timeout_seconds=0.3)
    assert excinfo.value.status == 0 and excinfo.value.temporary


# ------------------------------------------------------------------------------------- custom resources


SLO_SPEC = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65}}


def writes(fake_apiserver: FakeApiServer, resource: str) -> int:
    return sum(fake_apiserver.count(verb, resource) for verb in ("create", "update", "patch"))


def test_nodeslo_writer_creates_then_updates_only_on_change(
    fake_apiserver: FakeApiServer, api: client.ApiClient
) -> None:
    node = fake_apiserver.seed(make_node("n1"))
    writer = NodeSLOWriter(api)
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.CREATED
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None and stored["spec"] == SLO_SPEC and stored["kind"] == "NodeSLO"
    # Owned by its Node: the garbage collector deletes it with the node.
    assert stored["metadata"]["ownerReferences"] == [owner_of(node)]
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.UNCHANGED
    assert writes(fake_apiserver, "nodeslos") == 1
    changed = {"resourceUsedThresholdWithBE": {"enable": False}}
    assert writer.apply("n1", changed) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None and stored["spec"] == changed and stored["metadata"]["generation"] == 2
    assert writes(fake_apiserver, "nodeslos") == 2


def test_nodeslo_writer_retries_a_conflict(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(make_node("n1"))
    writer = NodeSLOWriter(api)
    writer.apply("n1", SLO_SPEC)
    # Another writer changes the object between our read and our write.
    fake_apiserver.fail_next(1, Fault.STATUS, status=409, when=lambda r: r.verb == "update")
    changed = {"resourceUsedThresholdWithBE": {"enable": False}}
    assert writer.apply("n1", changed) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None and stored["spec"] == changed
    assert fake_apiserver.count("update", "nodeslos") == 2


def test_nodeslo_writer_adopts_an_existing_object(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node = fake_apiserver.seed(make_node("n1"))
    other_owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-keep"}
    fake_apiserver.seed({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                         "metadata": {"name": "n1", "ownerReferences": [other_owner]}, "spec": SLO_SPEC})
    writer = NodeSLOWriter(api)
    # Made before owners were set (or by someone else): one write adds the Node, keeping other owners.
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None and stored["metadata"]["ownerReferences"] == [other_owner, owner_of(node)]
    assert stored["spec"] == SLO_SPEC
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.UNCHANGED
    assert writes(fake_apiserver, "nodeslos") == 1
    # The owner is looked up once per object created or adopted, not per write.
    assert fake_apiserver.count("get", "nodes") == 1


NODE_METRIC_STATUS = {
    "updateTime": "2026-01-02T03:04:05Z",
    "nodeMetric": {"nodeUsage": {"resources": {"cpu": "2500m", "memory": "8Gi"}}},
    "podsMetric": [{"name": "web", "namespace": "default", "podUsage": {"resources": {"cpu": "500m"}}}],
}
COLLECT_POLICY = {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
                  "nodeMemoryCollectPolicy": "usageWithoutPageCache"}


def test_nodemetric_writer_creates_then_writes_status_through_subresource(
    fake_apiserver: FakeApiServer, api: client.ApiClient
) -> None:
    node = fake_apiserver.seed(make_node("n1"))
    writer = NodeMetricWriter(api)
    assert writer.apply("n1", NODE_METRIC_STATUS, COLLECT_POLICY) is ApplyResult.CREATED
    stored = fake_apiserver.get("nodemetrics", "n1")
    assert stored is not None
    assert stored["metadata"]["ownerReferences"] == [owner_of(node)]
    assert stored["status"] == NODE_METRIC_STATUS and stored["spec"] == {"metricCollectPolicy": COLLECT_POLICY}
    assert fake_apiserver.count("update", "nodemetrics", subresource="status") == 1

    assert writer.apply("n1", NODE_METRIC_STATUS, COLLECT_POLICY) is ApplyResult.UNCHANGED
    assert writes(fake_apiserver, "nodemetrics") == 2

    newer = NODE_METRIC_STATUS | {"updateTime": "2026-01-02T03:05:05Z"}
    assert writer.apply("n1", newer, COLLECT_POLICY) is ApplyResult.UPDATED
    assert fake_apiserver.count("update", "nodemetrics", subresource="status") == 2
    assert fake_apiserver.count("update", "nodemetrics", subresource="") == 0

    policy = COLLECT_POLICY | {"reportIntervalSeconds": 30}
    assert writer.apply("n1", newer, policy) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodemetrics", "n1")
    assert stored is not None and stored["spec"]["metricCollectPolicy"] == policy and stored["status"] == newer
    assert fake_apiserver.count("update", "nodemetrics", subresource="") == 1
    assert writer.apply("n1", newer, None) is ApplyResult.UNCHANGED


def test_kubectl_get_nodemetric_equivalent(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    writer = NodeMetricWriter(api)
    for node in ("n2", "n1"):
        fake_apiserver.seed(make_node(node))
        writer.apply(node, NODE_METRIC_STATUS, COLLECT_POLICY)
    listed = writer.list()
    assert listed["kind"] == "NodeMetricList" and listed["apiVersion"] == "slo.koordinator.sh/v1alpha1"
    assert listed["metadata"]["resourceVersion"] == str(fake_apiserver.resource_version)
    assert [m["metadata"]["name"] for m in listed["items"]] == ["n1", "n2"]
    assert all(m["status"] == NODE_METRIC_STATUS for m in listed["items"])
    one = writer.list(field_selector="metadata.name=n2")
    assert [m["metadata"]["name"] for m in one["items"]] == ["n2"]
    request = fake_apiserver.requests[-1]
    assert request.path == "/apis/slo.koordinator.sh/v1alpha1/nodemetrics" and request.verb == "list"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refuse(fake_apiserver: FakeApiServer, resource: str, name: str, status: int, count: int = 100) -> None:
    """Every write (create/update/patch) of ``resource/name`` is refused with ``status`` (the next ``count``)."""
    def matches(request: RecordedRequest) -> bool:
        # A create names the object in its body, not in its path.
        named = request.name or ((request.body or {}).get("metadata") or {}).get("name")
        return request.resource == resource and named == name and request.verb in ("create", "update", "patch")

    fake_apiserver.fail_next(count, Fault.STATUS, status=status, when=matches)


def test_nodemetric_writer_adopts_and_keeps_the_owner(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node = fake_apiserver.seed(make_node("n1"))
    fake_apiserver.seed({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                         "metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": COLLECT_POLICY},
                         "status": NODE_METRIC_STATUS})
    writer = NodeMetricWriter(api)
    assert writer.apply("n1", NODE_METRIC_STATUS, COLLECT_POLICY) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodemetrics", "n1")
    assert stored is not None and stored["metadata"]["ownerReferences"] == [owner_of(node)]
    assert stored["status"] == NODE_METRIC_STATUS
    assert fake_apiserver.count("update", "nodemetrics", subresource="status") == 0
    newer = NODE_METRIC_STATUS | {"updateTime": "2026-01-02T03:05:05Z"}
    assert writer.apply("n1", newer, COLLECT_POLICY) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodemetrics", "n1")
    assert stored is not None and stored["metadata"]["ownerReferences"] == [owner_of(node)]
    assert fake_apiserver.count("update", "nodemetrics", subresource="") == 1  # the adoption only


def test_no_object_is_created_for_a_node_that_does_not_exist(
    fake_apiserver: FakeApiServer, api: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing would garbage-collect it: a NodeMetric for a name no Node has is refused, and backs off.
    writer = NodeMetricWriter(api)
    assert writer.apply("ghost", NODE_METRIC_STATUS) is ApplyResult.DEFERRED
    assert fake_apiserver.get("nodemetrics", "ghost") is None
    assert fake_apiserver.count("create", "nodemetrics") == 0
    assert writer.backoff.retry_in("ghost") > 0
    assert any("node ghost does not exist" in r.__dict__.get("error", "") for r in caplog.records)
    slo = NodeSLOWriter(api)
    assert slo.apply("ghost", SLO_SPEC) is ApplyResult.DEFERRED
    assert fake_apiserver.count("create", "nodeslos") == 0


def test_node_lookup_replaces_the_get(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    node = fake_apiserver.seed(make_node("n1"))
    looked_up: list[str] = []

    def lookup(name: str) -> dict[str, Any] | None:
        looked_up.append(name)
        return node if name == "n1" else None

    writer = NodeSLOWriter(api, node_lookup=lookup)
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.CREATED
    assert writer.apply("n2", SLO_SPEC) is ApplyResult.DEFERRED
    assert looked_up == ["n1", "n2"] and fake_apiserver.count("get", "nodes") == 0
    stored = fake_apiserver.get("nodeslos", "n1")
    assert stored is not None and stored["metadata"]["ownerReferences"] == [owner_of(node)]


@pytest.mark.parametrize("status", [400, 403, 404, 413, 422])
def test_a_permanent_refusal_backs_off_that_object_only(
    fake_apiserver: FakeApiServer, api: client.ApiClient, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    for name in ("bad", "good"):
        fake_apiserver.seed(make_node(name))
    clock = FakeClock()
    writer = NodeMetricWriter(api)
    writer.backoff = WriteBackoff("NodeMetric", initial_seconds=2.0, max_seconds=8.0, clock=clock)
    refuse(fake_apiserver, "nodemetrics", "bad", status)
    caplog.set_level(logging.DEBUG, logger="koordlet.companion.kube")

    assert writer.apply("bad", NODE_METRIC_STATUS) is ApplyResult.DEFERRED  # no exception for the writer loop
    assert writer.apply("good", NODE_METRIC_STATUS) is ApplyResult.CREATED
    tried = len(fake_apiserver.requests)
    # While it backs off the object costs no request; the other node's writes go on.
    for _ in range(5):
        assert writer.apply("bad", NODE_METRIC_STATUS) is ApplyResult.DEFERRED
    assert len(fake_apiserver.requests) == tried
    newer = NODE_METRIC_STATUS | {"updateTime": "2026-01-02T03:05:05Z"}
    assert writer.apply("good", newer) is ApplyResult.UPDATED

    # Exponential, capped: 2, 4, 8, 8 s.
    pauses = [writer.backoff.retry_in("bad")]
    for _ in range(3):
        clock.now += pauses[-1]
        assert writer.apply("bad", NODE_METRIC_STATUS) is ApplyResult.DEFERRED
        pauses.append(writer.backoff.retry_in("bad"))
    assert pauses == [2.0, 4.0, 8.0, 8.0]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.__dict__.get("object") == "bad"]
    assert len(warnings) == 1, "logged once per streak"
    assert warnings[0].__dict__["status"] == status

    # Once the cluster accepts it again, the next try after the pause writes it and the streak ends.
    fake_apiserver.clear_faults()
    clock.now += 8.0
    assert writer.apply("bad", NODE_METRIC_STATUS) is ApplyResult.CREATED
    assert writer.backoff.backing_off() == {}
    assert [(r.getMessage(), r.__dict__["object"], r.__dict__["refusals"]) for r in caplog.records
            if r.getMessage() == "write accepted again"] == [("write accepted again", "bad", 4)]


@pytest.mark.parametrize("status", [401, 408, 429, 500, 503])
def test_temporary_errors_are_raised_not_backed_off(
    fake_apiserver: FakeApiServer, api: client.ApiClient, status: int
) -> None:
    fake_apiserver.seed(make_node("n1"))
    writer = NodeSLOWriter(api)
    refuse(fake_apiserver, "nodeslos", "n1", status, count=1)
    with pytest.raises(KubeApiError) as excinfo:
        writer.apply("n1", SLO_SPEC)
    assert excinfo.value.status == status and not excinfo.value.permanent
    assert writer.backoff.backing_off() == {}
    assert writer.apply("n1", SLO_SPEC) is ApplyResult.CREATED  # the caller's retry goes through at once


def test_conflicts_that_never_settle_stay_retryable(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(make_node("n1"))
    writer = NodeSLOWriter(api)
    writer.apply("n1", SLO_SPEC)
    refuse(fake_apiserver, "nodeslos", "n1", 409, count=3)
    with pytest.raises(KubeApiError) as excinfo:
        writer.apply("n1", {"x": 1})
    assert excinfo.value.status == 409 and not excinfo.value.permanent
    assert writer.backoff.backing_off() == {}


def test_write_backoff_calls_back_when_the_pause_ends() -> None:
    due: list[str] = []
    fired = threading.Event()

    def on_retry(key: str) -> None:
        due.append(key)
        fired.set()

    backoff = WriteBackoff("NodeSLO", initial_seconds=0.05, max_seconds=0.05, on_retry=on_retry)
    err = KubeApiError(422, "Invalid", "spec.x: bad")
    backoff.failed("a", err)
    backoff.failed("b", err)
    backoff.succeeded("b")  # cancels b's timer
    assert fired.wait(5.0)
    assert wait_until(lambda: backoff.retry_in("a") == 0)
    assert due == ["a"]
    backoff.failed("c", err)
    backoff.close()  # no callback after close: the cancelled timer's thread ends without calling back
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("write-backoff-")])
    assert due == ["a"]


def test_write_backoff_is_bounded_and_forgets() -> None:
    clock = FakeClock()
    backoff = WriteBackoff("NodeMetric", max_objects=3, clock=clock)
    err = KubeApiError(403, "Forbidden", "no")
    for name in ("a", "b", "c", "d"):
        backoff.failed(name, err)
    assert sorted(backoff.backing_off()) == ["b", "c", "d"]  # the oldest streak went
    backoff.forget("c")
    assert sorted(backoff.backing_off()) == ["b", "d"]
    with pytest.raises(ConfigError):
        WriteBackoff("x", initial_seconds=10, max_seconds=1)


def test_batch_resource_writer_backs_off_a_node_it_cannot_patch(
    fake_apiserver: FakeApiServer, api: client.ApiClient
) -> None:
    fake_apiserver.seed(make_node("n1"))
    writer = NodeBatchResourceWriter(api)
    with pytest.raises(ValueError, match="batch-cpu"):
        writer.apply("n1", -1, None)
    assert writer.apply("gone", 1000, 1024) is ApplyResult.DEFERRED  # 404: the node went
    assert writer.apply("gone", 1000, 1024) is ApplyResult.DEFERRED
    assert fake_apiserver.count("patch", "nodes", name="gone") == 1
    assert writer.apply("n1", 1000, 1024) is ApplyResult.UPDATED
    stored = fake_apiserver.get("nodes", "n1")
    assert stored is not None and stored["status"]["allocatable"][BATCH_CPU] == "1000"
    fake_apiserver.fail_next(1, Fault.HTTP_500)
    with pytest.raises(KubeApiError):
        writer.apply("n1", 1000, 1024)


# ------------------------------------------------------------------------------------- leader election


class Overlap:
    """Samples two electors in a thread and records whether both ever claimed leadership at once."""

    def __init__(self, *electors: LeaderElector) -> None:
        self.electors = electors
        self.both = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if sum(e.is_leader for e in self.electors) > 1:
                self.both = True
            time.sleep(0.002)

    def stop(self) -> bool:
        self._stop.set()
        self._thread.join()
        return self.both


def elector(api: client.ApiClient, identity: str, log: list[str]) -> LeaderElector:
    return LeaderElector(
        api, "koord-companion", "koordinator-system", identity,
        lease_duration=1.0, renew_deadline=0.6, retry_period=0.1, request_timeout_seconds=2.0,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
    )


def test_leader_election_takes_over_after_expiry(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    log: list[str] = []
    a, b = elector(api, "a", log), elector(api, "b", log)
    overlap = Overlap(a, b)
    a.start()
    assert wait_until(lambda: a.is_leader)
    b.start()
    try:
        time.sleep(0.5)
        assert leading(a) and not leading(b)
        a.stop(release=False)  # a crashes: it neither renews nor releases
        stopped = time.monotonic()
        assert not leading(a)
        assert wait_until(lambda: b.is_leader, 5)
        assert time.monotonic() - stopped >= 0.3  # waited for the lease (1s, from b's last sighting) to expire
        lease = fake_apiserver.get("leases", "koord-companion", "koordinator-system")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
        assert lease["spec"]["leaseDurationSeconds"] == 1
    finally:
        b.stop()
        a.stop()
    assert not overlap.stop()
    assert log == ["a started", "a stopped", "b started", "b stopped"]
    lease = fake_apiserver.get("leases", "koord-companion", "koordinator-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""  # b released it


def test_leader_release_hands_over_quickly(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    log: list[str] = []
    a = elector(api, "a", log)
    a.start()
    assert wait_until(lambda: a.is_leader)
    b = LeaderElector(api, "koord-companion", "koordinator-system", "b",
                      lease_duration=10.0, renew_deadline=6.0, retry_period=0.1)
    b.start()
    try:
        time.sleep(0.3)
        assert not leading(b)
        a.stop()  # releases
        assert wait_until(lambda: b.is_leader, 3)  # well before the 10s lease of b's own config
    finally:
        b.stop()


def test_leader_steps_down_when_it_cannot_renew(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    log: list[str] = []
    a, b = elector(api, "a", log), elector(api, "b", log)
    overlap = Overlap(a, b)
    a.start()
    assert wait_until(lambda: a.is_leader)
    b.start()
    try:
        fake_apiserver.fail_next(10_000, Fault.HTTP_500, when=lambda r: r.resource == "leases")
        started = time.monotonic()
        assert wait_until(lambda: not a.is_leader, 3)
        assert time.monotonic() - started <= 1.5  # renew_deadline (0.6s) after the last renewal that got through
        assert wait_until(lambda: "a stopped" in log)
        time.sleep(0.3)
        assert not leading(a) and not leading(b)  # nobody can write the lease
        fake_apiserver.clear_faults()
        assert wait_until(lambda: a.is_leader or b.is_leader, 5)
    finally:
        a.stop()
        b.stop()
    assert not overlap.stop()


def test_leader_election_config_is_validated(api: client.ApiClient) -> None:
    with pytest.raises(ConfigError, match="renew_deadline"):
        LeaderElector(api, "l", "ns", "id", lease_duration=5, renew_deadline=10, retry_period=2)
    with pytest.raises(ConfigError, match="identity"):
        LeaderElector(api, "l", "ns", "")


# ------------------------------------------------------------------------------------- eviction


def test_evict_pod(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    fake_apiserver.seed(pod("be-1", "batch"))
    fake_apiserver.seed(pod("be-2", "batch"))
    fake_apiserver.block_eviction("batch", "be-2")
    assert evict_pod(api, "batch", "be-1", 30) is EvictionResult.EVICTED
    assert fake_apiserver.get("pods", "be-1", "batch") is None
    assert evict_pod(api, "batch", "be-2", 0) is EvictionResult.BLOCKED_BY_PDB
    assert fake_apiserver.get("pods", "be-2", "batch") is not None
    assert evict_pod(api, "batch", "be-1") is EvictionResult.GONE
    assert fake_apiserver.evictions == [
        {"namespace": "batch", "name": "be-1", "gracePeriodSeconds": 30, "blocked": False, "budget": None},
        {"namespace": "batch", "name": "be-2", "gracePeriodSeconds": 0, "blocked": True, "budget": None},
    ]
    request = next(r for r in fake_apiserver.requests if r.verb == "evict")
    assert request.body["apiVersion"] == "policy/v1" and request.body["kind"] == "Eviction"
    fake_apiserver.fail_next(1, Fault.HTTP_500)
    with pytest.raises(KubeApiError) as excinfo:
        evict_pod(api, "batch", "be-2")
    assert excinfo.value.status == 500
