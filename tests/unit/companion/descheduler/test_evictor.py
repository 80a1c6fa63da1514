"""The evictor: which pods its filter refuses and why, the per-round limits, and what the Eviction API's answers
(accepted, refused by a PodDisruptionBudget, pod gone) turn into."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from koordlet.apis.nodemetric import parse_time
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.cluster import PodInfo, Snapshot, parse_pod_info
from koordlet.companion.descheduler.evictor import (
    EVICT_ANNOTATION,
    EvictionCounts,
    Evictor,
    EvictorArgs,
    EvictorMetrics,
    Limits,
)
from koordlet.companion.descheduler.framework import Handle, Namespaces
from tests.fixtures.fakeapiserver import FakeApiServer
from tests.unit.companion.descheduler.scenario import PodSpec, Scenario


def pod(name: str = "web", *, namespace: str = "default", node: str = "n1", **kwargs: Any) -> PodInfo:
    return parse_pod_info(PodSpec(name, namespace, node, 100, 64, **kwargs).to_object())


def refusal(p: PodInfo, args: EvictorArgs | None = None, *, snap: Snapshot | None = None) -> str | None:
    return Evictor(None, args or EvictorArgs(), Limits(), dry_run=True, snap=snap).filter(p)


def test_an_owned_ordinary_pod_is_evictable() -> None:
    assert refusal(pod()) is None


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"owner": "DaemonSet"}, "pod is a DaemonSet pod"),
    ({"owner": None}, "pod does not have any ownerRefs"),
    ({"priority": 2_000_000_000}, "pod has system critical priority"),
    ({"priority_class_name": "system-cluster-critical"}, "pod has system critical priority"),
    ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, "pod is a mirror pod"),
    ({"annotations": {"kubernetes.io/config.source": "file"}}, "pod is a static pod"),
    ({"volumes": [{"name": "v", "emptyDir": {}}]}, "pod has local storage"),
    ({"volumes": [{"name": "v", "hostPath": {"path": "/data"}}]}, "pod has local storage"),
])
def test_filter_refuses(kwargs: dict[str, Any], reason: str) -> None:
    message = refusal(pod(**kwargs))
    assert message is not None and reason in message


def test_terminating_pod_is_refused() -> None:
    obj = PodSpec("web", "default", "n1", 100, 64).to_object()
    obj["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"
    assert "pod is terminating" in (refusal(parse_pod_info(obj)) or "")


def test_options_widen_or_narrow_the_filter() -> None:
    scratch = pod(volumes=[{"name": "v", "emptyDir": {}}])
    assert refusal(scratch, EvictorArgs(evict_local_storage_pods=True)) is None
    claim = pod(volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}])
    assert refusal(claim) is None
    assert "PVC" in (refusal(claim, EvictorArgs(ignore_pvc_pods=True)) or "")
    critical = pod(priority=2_000_000_000)
    assert refusal(critical, EvictorArgs(evict_system_critical_pods=True)) is None
    assert refusal(pod(owner=None), EvictorArgs(evict_all_bare_pods=True)) is None
    assert "not in failed phase" in (refusal(pod(owner=None), EvictorArgs(evict_failed_bare_pods=True)) or "")
    # Priority threshold: only pods below it (or without a priority).
    assert refusal(pod(priority=100), EvictorArgs(priority_threshold=100)) is not None
    assert refusal(pod(priority=99), EvictorArgs(priority_threshold=100)) is None
    assert refusal(pod(), EvictorArgs(priority_threshold=100)) is None
    assert refusal(pod(namespace="kube-system"), EvictorArgs(namespaces=Namespaces(exclude=("kube-system",))))
    selector = LabelSelector.from_json({"matchLabels": {"app": "web"}}, "labelSelector")
    assert refusal(pod(labels={"app": "db"}), EvictorArgs(label_selector=selector)) is not None
    assert refusal(pod(labels={"app": "web"}), EvictorArgs(label_selector=selector)) is None


def test_evict_annotation_overrides_every_check() -> None:
    assert refusal(pod(owner="DaemonSet", annotations={EVICT_ANNOTATION: ""})) is None


def test_node_fit_needs_another_node_that_takes_the_pod() -> None:
    scenario = Scenario()
    scenario.node("n1")
    scenario.node("n2", labels={"disk": "hdd"})
    scenario.pod("web", "n1", 100, 64, spec={"nodeSelector": {"disk": "ssd"}})
    snap = scenario.snapshot()
    web = snap.pods_by_node["n1"][0]
    assert "does not fit on any other node" in (refusal(web, EvictorArgs(node_fit=True), snap=snap) or "")
    assert refusal(web, EvictorArgs(node_fit=False), snap=snap) is None
    scenario.nodes["n2"].labels["disk"] = "ssd"
    snap = scenario.snapshot()
    assert refusal(snap.pods_by_node["n1"][0], EvictorArgs(node_fit=True), snap=snap) is None


def test_limits_refuse_and_are_recorded() -> None:
    registry = CollectorRegistry()
    counts = EvictionCounts()
    evictor = Evictor(None, EvictorArgs(), Limits(per_node=2, per_namespace=3, total=4), dry_run=True,
                      metrics=EvictorMetrics(registry), counts=counts)
    evictor.strategy = "LowNodeLoad"
    results = [evictor.evict(pod(f"a{i}", node="n1"), "test") for i in range(3)]
    assert results == [True, True, False]  # per node
    assert evictor.node_limit_reached("n1")
    results = [evictor.evict(pod(f"b{i}", node=f"m{i}"), "test") for i in range(2)]
    assert results == [True, False]  # the namespace "default" had its three
    assert evictor.evict(pod("c", namespace="other", node="m9"), "test") is True
    assert evictor.total_limit_reached()
    assert evictor.evict(pod("d", namespace="other2", node="m8"), "test") is False  # total
    assert counts.total == 4
    assert [r.result for r in evictor.records] == [
        "dry-run", "dry-run", "maximum number of pods per node reached", "dry-run",
        "maximum number of pods per namespace reached", "dry-run", "maximum number of pods total reached"]
    value = registry.get_sample_value("descheduler_pods_evicted_total", {
        "result": "maximum number of pods per node reached", "strategy": "LowNodeLoad", "namespace": "default",
        "node": "n1"})
    assert value == 1.0


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def test_eviction_api_answers(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = Scenario()
    scenario.node("n1")
    for name in ("ok", "guarded", "gone"):
        scenario.pod(name, "n1", 100, 64)
    scenario.seed(fake_apiserver)
    snap = scenario.snapshot()
    by_name = {p.name: p for p in snap.pods_by_node["n1"]}
    fake_apiserver.block_eviction("default", "guarded")
    fake_apiserver.delete("pods", "gone", "default")

    evictor = Evictor(api, EvictorArgs(), Limits(total=10), dry_run=False)
    assert evictor.evict(by_name["ok"], "test") is True
    assert evictor.evict(by_name["guarded"], "test") is False
    assert evictor.evict(by_name["gone"], "test") is False
    assert [r.result for r in evictor.records] == ["success", "blocked", "gone"]
    assert evictor.total_evicted == 1  # only the accepted eviction counts against the limits
    # Accepted: the pod, running on n1, is terminating until its kubelet is done with it.
    evicted = fake_apiserver.get("pods", "ok", "default")
    assert evicted is not None and evicted["metadata"]["deletionTimestamp"]
    assert fake_apiserver.get("pods", "guarded", "default") is not None


def test_dry_run_calls_no_api(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = Scenario()
    scenario.node("n1")
    scenario.pod("web", "n1", 100, 64)
    scenario.seed(fake_apiserver)
    evictor = Evictor(api, EvictorArgs(), Limits(), dry_run=True)
    assert evictor.evict(scenario.snapshot().pods_by_node["n1"][0], "test") is True
    assert fake_apiserver.evictions == []


def test_handle_cordons_a_node_unless_dry_run(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = Scenario()
    scenario.node("n1")
    scenario.seed(fake_apiserver)
    Handle(api, dry_run=True).cordon("n1")
    assert not (fake_apiserver.get("nodes", "n1") or {})["spec"].get("unschedulable")
    Handle(api).cordon("n1")
    assert (fake_apiserver.get("nodes", "n1") or {})["spec"]["unschedulable"] is True
    Handle(api).cordon("n1", unschedulable=False)
    assert (fake_apiserver.get("nodes", "n1") or {})["spec"]["unschedulable"] is False


def test_default_evictor_protections_and_age() -> None:
    args = EvictorArgs.from_json({"podProtections": {"defaultDisabled": ["DaemonSetPods", "PodsWithLocalStorage"],
                                                     "extraEnabled": ["PodsWithPVC"]},
                                  "minPodAge": "10m"}, "args", migration_controller=False)
    assert args.evict_daemonset_pods and args.evict_local_storage_pods and args.ignore_pvc_pods
    assert args.max_per_node is None and args.min_pod_age_seconds == 600.0

    scenario = Scenario()
    scenario.node("n1")
    scenario.pod("old-ds", "n1", 100, 64, owner="DaemonSet", spec={})
    scenario.pod("young", "n1", 100, 64)
    scenario.pod("never-started", "n1", 100, 64)
    objects = {p.name: p.to_object() for p in scenario.pods.values()}
    objects["old-ds"]["status"]["startTime"] = "2026-01-02T03:04:05Z"
    objects["young"]["status"]["startTime"] = "2026-01-02T03:04:05Z"
    snap = scenario.snapshot()
    snap.now = parse_time("2026-01-02T03:14:05Z")  # ten minutes after both started
    pods = {name: parse_pod_info(obj) for name, obj in objects.items()}
    assert refusal(pods["old-ds"], args, snap=snap) is None
    assert refusal(pods["young"], args, snap=snap) is None
    assert "minPodAge" in (refusal(pods["never-started"], args, snap=snap) or "")
    snap.now -= 1.0
    assert "minPodAge" in (refusal(pods["young"], args, snap=snap) or "")


def test_min_replicas_counts_the_owner_pods_of_the_round() -> None:
    scenario = Scenario()
    scenario.node("n1")
    scenario.pod("solo", "n1", 100, 64)
    snap = scenario.snapshot()
    args = EvictorArgs(min_replicas=2)
    assert "less than minReplicas of 2" in (refusal(snap.pods_by_node["n1"][0], args, snap=snap) or "")
    assert refusal(snap.pods_by_node["n1"][0], EvictorArgs(min_replicas=1), snap=snap) is None
