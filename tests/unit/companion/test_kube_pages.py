"""A big cluster through the watcher: lists come in pages (``limit``/``continue``, client-go's 500 by default), a
continue token that expired restarts the list without pages, and a Pod is kept as the few fields the companion
reads (:func:`koordlet.companion.podfields.pod_fields`), the same to every reader as the whole object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from koordlet.apis.pod import pod_from_json
from koordlet.companion.extender.pods import parse_pod
from koordlet.companion.kube import ResourceWatcher, WatchEvent
from koordlet.companion.podfields import pod_fields, pod_identity
from tests.conftest import shared_path
from tests.fixtures.fakeapiserver import FakeApiServer, make_pod
from tests.fixtures.waiting import wait_until

SAMPLES = shared_path() / "reference/koordinator-samples/pods"


def pods_watcher(api: Any, events: list[WatchEvent], page_size: int, list_fn: Any = None) -> ResourceWatcher:
    return ResourceWatcher(list_fn or client.CoreV1Api(api).list_pod_for_all_namespaces, events.append,
                           name="pods", page_size=page_size, trim=pod_fields, keep=pod_identity)


def test_the_list_comes_in_pages_and_the_watch_resumes_from_it(fake_apiserver: FakeApiServer,
                                                               kube_api: Any) -> None:
    for i in range(7):
        fake_apiserver.seed(make_pod(f"p{i}", "default", "node-1"))
    events: list[WatchEvent] = []
    watcher = pods_watcher(kube_api, events, page_size=3)
    watcher.start()
    try:
        assert watcher.wait_synced(10)
        assert sorted(e.object["metadata"]["name"] for e in events) == [f"p{i}" for i in range(7)]
        lists = [r for r in fake_apiserver.requests if r.resource == "pods" and r.verb == "list"]
        assert [r.query.get("limit") for r in lists] == ["3", "3", "3"]
        assert [bool(r.query.get("continue")) for r in lists] == [False, True, True]
        fake_apiserver.seed(make_pod("late", "default", "node-1"))
        wait_until("the watch event", lambda: any(e.object["metadata"]["name"] == "late" for e in events))
    finally:
        watcher.stop()


def test_an_expired_continue_token_restarts_the_list_without_pages(fake_apiserver: FakeApiServer,
                                                                  kube_api: Any) -> None:
    for i in range(5):
        fake_apiserver.seed(make_pod(f"p{i}", "default", "node-1"))
    core = client.CoreV1Api(kube_api)
    calls = []

    def listing(**kwargs: Any) -> Any:
        answer = core.list_pod_for_all_namespaces(**kwargs)
        calls.append(kwargs.get("limit"))
        if len(calls) == 1:  # the cluster moves on and etcd compacts: the first page's token is too old now
            fake_apiserver.seed(make_pod("p5", "default", "node-1"))
            fake_apiserver.compact()
        return answer

    events: list[WatchEvent] = []
    watcher = pods_watcher(kube_api, events, page_size=2, list_fn=listing)
    watcher.start()
    try:
        assert watcher.wait_synced(10)
    finally:
        watcher.stop()
    assert calls[:2] == [2, None]  # the first page, (the refused continue,) the whole list; then the watch
    assert sorted(e.object["metadata"]["name"] for e in events) == [f"p{i}" for i in range(6)], "each pod once"


def _sample_pods() -> list[str]:
    names = []
    for path in sorted(SAMPLES.glob("*.yaml")) if SAMPLES.is_dir() else []:
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        if any(isinstance(d, dict) and d.get("kind") == "Pod" and isinstance(d.get("spec"), dict)
               for d in documents):
            names.append(path.name)
    return names


@pytest.mark.parametrize("sample", _sample_pods())
def test_the_kept_fields_read_as_the_whole_pod(shared_dir: Path, sample: str) -> None:
    for document in yaml.safe_load_all((shared_dir / "reference/koordinator-samples/pods" / sample).read_text()):
        if not (isinstance(document, dict) and document.get("kind") == "Pod" and isinstance(document.get("spec"),
                                                                                            dict)):
            continue
        metadata = document.setdefault("metadata", {})
        metadata.setdefault("namespace", "default")
        metadata.setdefault("uid", f"uid-{metadata.get('name')}")
        document["spec"].setdefault("nodeName", "node-1")
        document.setdefault("status", {"phase": "Running", "qosClass": "Burstable", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-26T10:00:00Z"}]})
        kept = pod_fields(document)
        assert pod_from_json(kept) == pod_from_json(document)
        assert parse_pod(kept) == parse_pod(document)


def test_a_heavy_pod_keeps_a_small_part(tmp_path: Path) -> None:
    pod = make_pod("web", "default", "node-1")
    pod["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(pod) * 20,
        "scheduling.koordinator.sh/resource-status": '{"cpuset": "2-3"}'}
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {"x": 1}}}] * 50
    pod["spec"]["containers"][0].update(env=[{"name": f"E{i}", "value": "v" * 50} for i in range(100)],
                                        resources={"requests": {"cpu": "1"}})
    kept = pod_fields(pod)
    assert kept["metadata"]["annotations"] == {"scheduling.koordinator.sh/resource-status": '{"cpuset": "2-3"}'}
    assert kept["spec"]["containers"] == [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]
    assert len(json.dumps(kept)) * 20 < len(json.dumps(pod))


def test_the_cache_keeps_only_who_a_pod_is_and_a_relist_still_tells_changes(fake_apiserver: FakeApiServer,
                                                                            kube_api: Any) -> None:
    """The pods watcher hands on trimmed pods and caches :func:`pod_identity` of each (the companion keeps its
    own state per pod); a relist after the watch expired still hands on exactly what changed: the pod modified
    meanwhile, and the pod deleted meanwhile as its identity, which the companion's deletion path reads."""
    for i in range(5):
        fake_apiserver.seed(make_pod(f"p{i}", "default", "node-1"))
    events: list[WatchEvent] = []
    watcher = pods_watcher(kube_api, events, page_size=2)
    watcher.start()
    try:
        assert watcher.wait_synced(10)
        kept = watcher.get("p1", "default")
        assert kept is not None and set(kept) == {"metadata", "spec"} and kept["spec"] == {"nodeName": "node-1"}
        assert set(kept["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}
        assert "containers" in events[0].object["spec"], "the callback gets the trimmed pod, not the kept part"
    finally:
        watcher.stop()
    deleted = fake_apiserver.get("pods", "p3", "default")
    fake_apiserver.delete("pods", "p3", "default")
    changed = fake_apiserver.get("pods", "p0", "default")
    changed["metadata"]["labels"] = {"koordinator.sh/qosClass": "BE"}
    fake_apiserver.seed(changed)
    events.clear()
    watcher._relist()  # what the watch loop does after a 410 Gone
    kinds = sorted((e.type, e.object["metadata"]["name"]) for e in events)
    assert kinds == [("DELETED", "p3"), ("MODIFIED", "p0")]
    gone = next(e.object for e in events if e.type == "DELETED")
    assert pod_from_json(gone).uid == deleted["metadata"]["uid"] and pod_from_json(gone).node_name == "node-1"
    assert {w["metadata"]["name"] for w in watcher.items()} == {"p0", "p1", "p2", "p4"}
