"""The load-aware scheduler extender: upstream LoadAwareScheduling semantics over kube-scheduler's
extender protocol (requests built the way kube-scheduler serialises ``extenderv1.ExtenderArgs``)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricStatus, format_time
from koordlet.companion.extender import (
    ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    DEFAULT_MEMORY_REQUEST,
    MAX_BODY_BYTES,
    REASON_NODE_METRIC_EXPIRED,
    REASON_UNKNOWN_NODE,
    AggregatedArgs,
    LoadAwareArgs,
    LoadAwareExtender,
    NodeStore,
    estimate_pod,
    make_server,
    parse_pod,
)
from koordlet.errors import ConfigError
from koordlet.system.httpserver import ServerLimits

GI = 1 << 30
NOW = 1_700_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pod(name: str = "web-0", *, cpu: str | None = None, memory: str | None = None, cpu_limit: str | None = None,
        memory_limit: str | None = None, labels: dict[str, str] | None = None, priority: int | None = None,
        uid: str | None = None, daemonset: bool = False, scheduled_at: float | None = None) -> dict[str, Any]:
    """A v1.Pod as kube-scheduler sends it (defaulted, with status)."""
    resources: dict[str, dict[str, str]] = {}
    for key, value in (("cpu", cpu), ("memory", memory)):
        if value is not None:
            resources.setdefault("requests", {})[key] = value
    for key, value in (("cpu", cpu_limit), ("memory", memory_limit)):
        if value is not None:
            resources.setdefault("limits", {})[key] = value
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                                "labels": labels or {"app": "web"}, "resourceVersion": "4711"}
    if daemonset:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                        "uid": "ds-1", "controller": True}]
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "nginx:1.25", "resources": resources,
                        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
    }
    if priority is not None:
        spec["priority"] = priority
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable" if resources else "BestEffort"}
    if scheduled_at is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True",
                                 "lastTransitionTime": format_time(scheduled_at)}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def node(name: str, cpu: str = "16", memory: str = "64Gi", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": annotations or {}},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                   "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def node_list(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": list(nodes)}


def metric(cpu: str, memory: str, *, updated: float = NOW - 10, pods: list[dict[str, Any]] | None = None,
           aggregated: list[dict[str, Any]] | None = None) -> NodeMetricStatus:
    """A NodeMetric status as koordlet reports it."""
    node_metric: dict[str, Any] = {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}},
                                   "systemUsage": {"resources": {"cpu": "200m", "memory": "1Gi"}}}
    if aggregated:
        node_metric["aggregatedNodeUsages"] = aggregated
    return NodeMetricStatus.from_json({"updateTime": format_time(updated), "nodeMetric": node_metric,
                                       "podsMetric": pods or []})


def pod_metric(name: str, cpu: str, memory: str, priority: str = "koord-prod") -> dict[str, Any]:
    return {"name": name, "namespace": "default", "podUsage": {"resources": {"cpu": cpu, "memory": memory}},
            "priority": priority, "qos": "LS"}


def make(args: LoadAwareArgs | None = None, clock: Clock | None = None) -> tuple[NodeStore, LoadAwareExtender, Clock]:
    clock = clock or Clock()
    store = NodeStore(args or LoadAwareArgs(), clock=clock)
    return store, LoadAwareExtender(store, clock=clock), clock


def add(store: NodeStore, name: str, status: NodeMetricStatus | None, **node_kwargs: Any) -> None:
    store.update_node_json(node(name, **node_kwargs))
    if status is not None:
        store.update_node_metric(name, status)


# ---------------------------------------------------------------------------------------------- args

def test_defaults_are_upstreams() -> None:
    args = LoadAwareArgs()
    assert args.filter_expired_node_metrics is True
    assert args.node_metric_expiration_seconds == 180
    assert args.enable_schedule_when_node_metrics_expired is False
    assert dict(args.resource_weights) == {"cpu": 1, "memory": 1}
    assert dict(args.usage_thresholds) == {"cpu": 65, "memory": 95}
    assert dict(args.estimated_scaling_factors) == {"cpu": 85, "memory": 70}
    assert not args.prod_usage_thresholds and args.aggregated is None
    assert LoadAwareArgs.from_json({}) == args


def test_sample_scheduler_config_loads(shared_dir: Path) -> None:
    args = LoadAwareArgs.load(shared_dir / "reference" / "koordinator-samples" / "related"
                              / "koord-scheduler-config-load-aware.yaml")
    assert args.node_metric_expiration_seconds == 300
    assert dict(args.usage_thresholds) == {"cpu": 75, "memory": 85}
    assert dict(args.prod_usage_thresholds) == {"cpu": 55, "memory": 65}
    assert args.score_according_prod_usage is True
    assert dict(args.estimated_scaling_factors) == {"cpu": 80, "memory": 70}
    assert args.aggregated is not None
    assert args.aggregated.filter_enabled and args.aggregated.score_enabled
    assert dict(args.aggregated.usage_thresholds) == {"cpu": 65, "memory": 75}


def test_args_from_bare_object_fill_partial_scaling_factors() -> None:
    args = LoadAwareArgs.from_document(json.dumps({"kind": "LoadAwareSchedulingArgs",
                                                   "estimatedScalingFactors": {"cpu": 50},
                                                   "EnableScheduleWhenNodeMetricsExpired": True}))
    assert dict(args.estimated_scaling_factors) == {"cpu": 50, "memory": 70}
    assert args.enable_schedule_when_node_metrics_expired is True


@pytest.mark.parametrize(("obj", "path"), [
    ({"usageThresholds": {"cpu": 150}}, "usageThresholds.cpu"),
    ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds"),
    ({"resourceWeights": {"cpu": "1"}}, "resourceWeights.cpu"),
    ({"aggregated": {"usageAggregationType": "p42"}}, "aggregated.usageAggregationType"),
    ({"filterExpiredNodeMetrics": "yes"}, "filterExpiredNodeMetrics"),
])
def test_bad_args_name_the_field(obj: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        LoadAwareArgs.from_json(obj)


def test_document_without_the_plugin_is_rejected() -> None:
    with pytest.raises(ConfigError, match="no LoadAwareScheduling"):
        LoadAwareArgs.from_document("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")


# ---------------------------------------------------------------------------------------------- estimation

def test_estimate_scales_the_larger_of_request_and_limit() -> None:
    factors = LoadAwareArgs().estimated_scaling_factors
    assert estimate_pod(parse_pod(pod(cpu="1", memory="1Gi", cpu_limit="2", memory_limit="2Gi")), factors) == (
        1700, round(2 * GI * 0.7))
    # round half away from zero on the scaled value (Go math.Round): 10m * 85% = 8.5 -> 9
    assert estimate_pod(parse_pod(pod(cpu="10m", memory="10")), factors) == (9, 7)


def test_estimate_defaults_when_nothing_is_set_and_caps_at_the_limit() -> None:
    factors = LoadAwareArgs().estimated_scaling_factors
    assert estimate_pod(parse_pod(pod()), factors) == (250, DEFAULT_MEMORY_REQUEST)
    capped = LoadAwareArgs.from_json({"estimatedScalingFactors": {"cpu": 100, "memory": 100}})
    # a request above the limit (allowed for extended resources, here forced) is capped at the limit
    assert estimate_pod(parse_pod(pod(cpu="2", cpu_limit="1", memory="1Gi")), capped.estimated_scaling_factors)[0] \
        == 1000


def test_estimate_counts_init_containers_and_overhead() -> None:
    obj = pod(cpu="500m", memory="256Mi")
    obj["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "3", "memory": "64Mi"}}}]
    obj["spec"]["overhead"] = {"cpu": "100m"}
    info = parse_pod(obj)
    assert info.requests["cpu"] == 3100 and info.requests["memory"] == 256 << 20


def test_batch_pods_estimate_batch_resources() -> None:
    obj = pod(labels={"koordinator.sh/priority-class": "koord-batch"})
    obj["spec"]["containers"][0]["resources"] = {"requests": {"kubernetes.io/batch-cpu": "2000",
                                                              "kubernetes.io/batch-memory": "1Gi"}}
    assert estimate_pod(parse_pod(obj), LoadAwareArgs().estimated_scaling_factors) == (1700, round(GI * 0.7))


# ---------------------------------------------------------------------------------------------- filter / score

def filter_used(store: NodeStore, name: str) -> tuple[int, int]:
    view = store.view(name)
    assert view is not None
    return view.filter_used


def args_body(pod_obj: dict[str, Any], *, names: list[str] | None = None,
              nodes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"Pod": pod_obj, "Nodes": nodes, "NodeNames": names}


def test_filter_rejects_nodes_over_threshold_and_orders_the_rest() -> None:
    store, extender, _ = make()
    # 16 cores, 64 GiB; the pod adds 1700m (10.6 %) and 0.7 GiB.
    store.update_node_metric("hot-cpu", metric("9", "10Gi"))        # 56 % + 10.6 % -> 67 % > 65 %
    store.update_node_metric("hot-mem", metric("1", "61Gi"))        # memory 95.3 % + 1.1 % > 95 %
    store.update_node_metric("warm", metric("6", "30Gi"))
    store.update_node_metric("cold", metric("1", "4Gi"))
    request = args_body(pod(cpu="1", memory="1Gi", cpu_limit="2"),
                        nodes=node_list(node("hot-cpu"), node("warm"), node("hot-mem"), node("cold")))
    result = extender.filter(request)
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["NodeNames"] is None and result["Error"] == ""
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["warm", "cold"]
    assert result["Nodes"]["items"][0] == node("warm")  # passed through untouched
    assert result["FailedNodes"] == {"hot-cpu": "node(s) cpu usage exceed threshold",
                                     "hot-mem": "node(s) memory usage exceed threshold"}

    request["Nodes"] = {"items": result["Nodes"]["items"]}
    scores = extender.prioritize(request)
    assert [set(s) for s in scores] == [{"Host", "Score"}] * 2
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert by_host["cold"] > by_host["warm"]
    assert all(0 <= s <= 10 for s in by_host.values())


def test_threshold_compares_the_rounded_percentage() -> None:
    store, extender, _ = make(LoadAwareArgs.from_json({"usageThresholds": {"cpu": 65}}))
    pod_obj = pod(cpu="10m")  # estimate 9m
    # 100 cores: 64.491 % rounds to 64, 65.491 % to 65 (passes: not above), 65.5 % to 66 (fails)
    add(store, "a", metric("64482m", "1Gi"), cpu="100")
    add(store, "b", metric("65482m", "1Gi"), cpu="100")
    add(store, "c", metric("65491m", "1Gi"), cpu="100")
    passed, failed = extender.filter_names(parse_pod(pod_obj), ["a", "b", "c"])
    assert passed == ["a", "b"] and set(failed) == {"c"}


def test_score_is_upstreams_least_used_scaled_to_ten() -> None:
    store, extender, _ = make()
    add(store, "n", metric("3", "8Gi"), cpu="10", memory="16Gi")
    info = parse_pod(pod(cpu="1", memory="1Gi"))  # estimate 850m, 0.7 GiB
    # cpu (10000 - 3850) * 100 // 10000 = 61; memory (16 - 8.7) Gi * 100 // 16 Gi = 45; (61 + 45) // 2 = 53
    assert extender.score_views(info, [store.view("n")]) == [53]
    assert extender.prioritize_names(info, ["n"]) == [("n", 5)]


def test_recently_assigned_pods_are_estimated_until_the_metric_catches_up() -> None:
    store, extender, clock = make()
    add(store, "n", metric("9", "8Gi", updated=NOW - 30))  # 56 %
    incoming = parse_pod(pod("new", cpu="500m"))           # +425m
    assert extender.filter_names(incoming, ["n"])[0] == ["n"]
    for i in range(2):  # two 1-core pods placed after the report: +850m each -> 56.3 + 2.7 + 10.6 > 65
        store.assign_pod("n", pod(f"web-{i}", cpu="1", memory="1Gi"), timestamp=NOW - 5)
    assert extender.filter_names(incoming, ["n"]) == ([], {"n": "node(s) cpu usage exceed threshold"})
    used_before = filter_used(store, "n")
    assert used_before[0] == 9000 + 2 * 850

    # The next report measures them (one at 2 cores) but was taken less than a report interval
    # (60 s) after they landed: still estimated, at max(estimate, measured), and their measured usage is
    # taken out of nodeUsage so nothing counts twice.
    clock.now = NOW + 30
    store.update_node_metric("n", metric("10", "10Gi", updated=NOW + 20,
                                         pods=[pod_metric("web-0", "2", "1Gi"), pod_metric("web-1", "100m", "1Gi")]))
    assert filter_used(store, "n")[0] == (10000 - 2100) + 2000 + 850

    # A report a full interval later reflects them: nodeUsage alone.
    clock.now = NOW + 90
    store.update_node_metric("n", metric("9", "10Gi", updated=NOW + 80,
                                         pods=[pod_metric("web-0", "2", "1Gi"), pod_metric("web-1", "100m", "1Gi")]))
    assert filter_used(store, "n")[0] == 9000
    store.unassign_pod("uid-web-0")
    assert filter_used(store, "n")[0] == 9000


def test_assignment_time_comes_from_the_pod_scheduled_condition() -> None:
    store, _, _ = make()
    add(store, "n", metric("1", "1Gi", updated=NOW - 10))
    store.assign_pod("n", pod("old", cpu="1", scheduled_at=NOW - 3600))  # an hour ago...
    assert filter_used(store, "n")[0] == 1000 + 850  # ...but the report has no usage for it: estimated
    store.update_node_metric("n", metric("1", "1Gi", updated=NOW - 5, pods=[pod_metric("old", "300m", "1Gi")]))
    assert filter_used(store, "n")[0] == 1000


def test_expired_metrics() -> None:
    store, extender, _ = make()
    add(store, "stale", metric("1", "1Gi", updated=NOW - 180))
    add(store, "fresh", metric("1", "1Gi", updated=NOW - 179))
    info = parse_pod(pod(cpu="100m"))
    assert extender.filter_names(info, ["stale", "fresh"]) == (["fresh"], {"stale": REASON_NODE_METRIC_EXPIRED})
    assert dict(extender.prioritize_names(info, ["stale", "fresh"]))["stale"] == 0

    lenient = LoadAwareArgs.from_json({"enableScheduleWhenNodeMetricsExpired": True})
    store, extender, _ = make(lenient)
    add(store, "stale", metric("15", "1Gi", updated=NOW - 600))  # way over, but not checked
    assert extender.filter_names(info, ["stale"]) == (["stale"], {})

    unchecked = LoadAwareArgs.from_json({"filterExpiredNodeMetrics": False})
    store, extender, _ = make(unchecked)
    add(store, "stale-hot", metric("15", "1Gi", updated=NOW - 600))
    add(store, "stale-cold", metric("1", "1Gi", updated=NOW - 600))
    assert extender.filter_names(info, ["stale-hot", "stale-cold"]) == (
        ["stale-cold"], {"stale-hot": "node(s) cpu usage exceed threshold"})
    assert extender.prioritize_names(info, ["stale-cold"]) == [("stale-cold", 0)]


def test_nodes_without_metrics_pass_and_unknown_nodes_fail() -> None:
    store, extender, _ = make()
    add(store, "no-koordlet", None)
    add(store, "metric-without-usage", None)
    store.update_node_metric("metric-without-usage", NodeMetricStatus(update_time=NOW))
    result = extender.filter(args_body(pod(cpu="1"), names=["no-koordlet", "metric-without-usage", "ghost"]))
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["no-koordlet", "metric-without-usage"]
    assert result["FailedNodes"] == {"ghost": REASON_UNKNOWN_NODE}
    scores = extender.prioritize(args_body(pod(cpu="1"), names=["no-koordlet", "metric-without-usage", "ghost"]))
    assert scores == [{"Host": "no-koordlet", "Score": 0}, {"Host": "metric-without-usage", "Score": 0},
                      {"Host": "ghost", "Score": 0}]

    store.remove_node("no-koordlet")
    store.remove_node_metric("metric-without-usage")
    assert store.view("no-koordlet") is None  # nothing left of it: forgotten
    assert extender.filter_names(parse_pod(pod()), ["no-koordlet", "metric-without-usage"]) == (
        ["metric-without-usage"], {"no-koordlet": REASON_UNKNOWN_NODE})


def test_node_annotation_overrides_thresholds() -> None:
    store, extender, _ = make()
    relaxed = {ANNOTATION_CUSTOM_USAGE_THRESHOLDS: json.dumps({"usageThresholds": {"cpu": 90}})}
    strict = {ANNOTATION_CUSTOM_USAGE_THRESHOLDS: '{"usageThresholds": {"memory": 20}}'}
    broken = {ANNOTATION_CUSTOM_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 90.5}}'}  # int64 does not decode
    for name in ("relaxed", "strict", "broken", "plain"):
        store.update_node_metric(name, metric("12", "16Gi"))  # 75 % cpu, 25 % memory
    nodes = node_list(node("relaxed", annotations=relaxed), node("strict", annotations=strict),
                      node("broken", annotations=broken), node("plain"))
    result = extender.filter(args_body(pod(cpu="100m"), nodes=nodes))
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["relaxed"]
    assert result["FailedNodes"] == {"strict": "node(s) memory usage exceed threshold",
                                     "broken": "node(s) cpu usage exceed threshold",
                                     "plain": "node(s) cpu usage exceed threshold"}
    # the annotation changes: the next request picks it up
    nodes["items"][0]["metadata"]["annotations"] = {}
    assert "relaxed" in extender.filter(args_body(pod(cpu="100m"), nodes=nodes))["FailedNodes"]


def test_a_request_never_changes_the_store() -> None:
    """kube-scheduler sends names only once the extender is nodeCacheCapable: a Nodes-form request that wrote
    its copy into the store would decide every later answer for that node."""
    store, extender, _ = make()
    add(store, "real", metric("9", "10Gi"))              # 16 cores: 56 % + the pod's 10.6 % > 65 %
    store.update_node_metric("visitor", metric("9", "10Gi"))  # a NodeMetric, but no Node object seen
    before = {name: store.view(name) for name in ("real", "visitor")}
    forged = {ANNOTATION_CUSTOM_USAGE_THRESHOLDS: json.dumps({"usageThresholds": {"cpu": 100, "memory": 100}})}
    request = args_body(pod(cpu="1", memory="1Gi", cpu_limit="2"),
                        nodes=node_list(node("real", cpu="1000", annotations=forged),
                                        node("visitor", cpu="1000", annotations=forged)))
    result = extender.filter(request)
    # The known node is answered from the store (the Node watch), whatever the request claims; the other from
    # the request's copy, for this answer only.
    assert result["FailedNodes"] == {"real": "node(s) cpu usage exceed threshold"}
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["visitor"]
    assert {name: store.view(name) for name in ("real", "visitor")} == before
    names_only = extender.filter(args_body(pod(cpu="1", memory="1Gi", cpu_limit="2"), names=["real", "visitor"]))
    assert names_only["FailedNodes"] == {"real": "node(s) cpu usage exceed threshold", "visitor": REASON_UNKNOWN_NODE}


def test_prod_pods_use_prod_thresholds_on_prod_usage() -> None:
    args = LoadAwareArgs.from_json({"prodUsageThresholds": {"cpu": 30}})
    store, extender, _ = make(args)
    pods = [pod_metric("prod-a", "4", "1Gi"), pod_metric("batch-a", "6", "1Gi", priority="koord-batch")]
    add(store, "n", metric("11", "4Gi", pods=pods))  # node 69 %, prod 25 %
    prod = parse_pod(pod(cpu="100m", priority=9000))
    batch = parse_pod(pod(cpu="100m", labels={"koordinator.sh/priority-class": "koord-batch"}))
    assert extender.filter_names(prod, ["n"]) == (["n"], {})
    assert extender.filter_names(batch, ["n"]) == ([], {"n": "node(s) cpu usage exceed threshold"})
    store.update_node_metric("n", metric("11", "4Gi", pods=[pod_metric("prod-a", "5", "1Gi")]))  # prod 31 %
    assert extender.filter_names(prod, ["n"])[1] == {"n": "node(s) cpu usage exceed threshold"}


def test_aggregated_usage_filters_on_the_percentile() -> None:
    args = LoadAwareArgs(aggregated=AggregatedArgs.from_json(
        {"usageThresholds": {"cpu": 50}, "usageAggregationType": "p99"}, "aggregated"))
    store, extender, _ = make(args)

    def window(duration: str, p99_cpu: str) -> dict[str, Any]:
        return {"duration": duration, "usage": {"p99": {"resources": {"cpu": p99_cpu, "memory": "1Gi"}}}}

    # the longest window that reports p99 (30m) decides
    add(store, "spiky", metric("2", "1Gi", aggregated=[window("5m0s", "2"), window("30m0s", "9")]))
    add(store, "calm", metric("2", "1Gi", aggregated=[window("5m0s", "9"), window("30m0s", "3")]))
    passed, failed = extender.filter_names(parse_pod(pod(cpu="100m")), ["spiky", "calm"])
    assert passed == ["calm"]
    assert failed == {"spiky": "node(s) cpu aggregated usage exceed threshold"}


def test_daemonset_pods_pass_every_known_node() -> None:
    store, extender, _ = make()
    add(store, "hot", metric("16", "64Gi"))
    add(store, "stale", metric("1", "1Gi", updated=NOW - 1000))
    assert extender.filter_names(parse_pod(pod(cpu="1", daemonset=True)), ["hot", "stale"]) == (["hot", "stale"], {})


def test_concurrent_updates_and_requests() -> None:
    store, extender, _ = make()
    names = [f"n{i}" for i in range(200)]
    for name in names:
        add(store, name, metric("1", "1Gi"))
    info = parse_pod(pod(cpu="100m"))
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for round_ in range(20):
                for name in names:
                    store.update_node_metric(name, metric(f"{round_ % 15}", "1Gi"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    for _ in range(50):
        passed, failed = extender.filter_names(info, names)
        assert len(passed) + len(failed) == len(names)
    thread.join()
    assert not errors


# ---------------------------------------------------------------------------------------------- HTTP

SMALL_BODY_LIMITS = ServerLimits(max_body_bytes=64 * 1024, max_active_requests=2, header_timeout_seconds=5.0,
                                 body_timeout_seconds=5.0, idle_timeout_seconds=5.0)


@pytest.fixture
def served() -> Iterator[tuple[NodeStore, str, int]]:
    store, extender, _ = make()
    add(store, "cold", metric("1", "4Gi"))
    add(store, "warm", metric("6", "30Gi"))
    add(store, "hot", metric("12", "4Gi"))
    server = make_server(extender, "127.0.0.1", 0, SMALL_BODY_LIMITS)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    host, port = server.server_address[0], server.server_address[1]
    try:
        yield store, str(host), int(port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def request(host: str, port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_http_round_trip(served: tuple[NodeStore, str, int]) -> None:
    _, host, port = served
    body = json.dumps({"Pod": pod(cpu="1", memory="1Gi"), "Nodes": None,
                       "NodeNames": ["hot", "warm", "cold", "ghost"]}).encode()
    status, raw = request(host, port, "POST", "/scheduler/filter", body)
    assert status == 200
    result = json.loads(raw)
    assert result == {"Nodes": None, "NodeNames": ["warm", "cold"],
                      "FailedNodes": {"hot": "node(s) cpu usage exceed threshold", "ghost": REASON_UNKNOWN_NODE},
                      "FailedAndUnresolvableNodes": {}, "Error": ""}

    body = json.dumps({"Pod": pod(cpu="1", memory="1Gi"), "NodeNames": result["NodeNames"]}).encode()
    status, raw = request(host, port, "POST", "/scheduler/prioritize", body)
    assert status == 200
    scores = json.loads(raw)
    assert [s["Host"] for s in scores] == ["warm", "cold"]
    assert scores[1]["Score"] > scores[0]["Score"]

    # the full Nodes form, as a scheduler without nodeCacheCapable sends it
    body = json.dumps({"Pod": pod(cpu="1"), "Nodes": node_list(node("cold"), node("hot"))}).encode()
    status, raw = request(host, port, "POST", "/filter", body)
    assert status == 200 and [n["metadata"]["name"] for n in json.loads(raw)["Nodes"]["items"]] == ["cold"]

    assert request(host, port, "GET", "/healthz") == (200, b"ok")


@pytest.mark.parametrize(("body", "message"), [
    (b'{"Pod": {', "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b'{"NodeNames": ["a"]}', "Pod: missing"),
    (b'{"Pod": {"metadata": {"name": "p"}}}', "neither Nodes nor NodeNames"),
    (b"[" * 3000, "not valid JSON"),  # deeper than the parser recurses
    (b'{"Pod": {"spec": {"containers": 5}}, "NodeNames": []}', "Pod.spec.containers: expected a list, got int"),
    (b'{"Pod": {"status": {"conditions": true}}, "NodeNames": []}', "Pod.status.conditions: expected a list"),
    (b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": []}',
     "invalid quantity"),
])
def test_bad_requests_get_400(served: tuple[NodeStore, str, int], body: bytes, message: str) -> None:
    _, host, port = served
    status, raw = request(host, port, "POST", "/filter", body)
    assert status == 400
    assert message in json.loads(raw)["Error"]


def test_unknown_endpoint_is_404(served: tuple[NodeStore, str, int]) -> None:
    _, host, port = served
    assert request(host, port, "POST", "/bind", b"{}")[0] == 404
    assert request(host, port, "GET", "/filter")[0] == 404


def test_the_body_cap_is_16_mib() -> None:
    assert MAX_BODY_BYTES == 16 * 1024 * 1024


def raw_exchange(host: str, port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends ``data`` as is and reads one answer (status, lower-cased headers, body)."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def test_a_body_over_the_cap_is_413_unread(served: tuple[NodeStore, str, int]) -> None:
    _, host, port = served
    # Announced over the cap and never sent: answered at once, from the header alone.
    status, headers, raw = raw_exchange(host, port, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n"
                                                    b"Content-Type: application/json\r\n\r\n")
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(raw)["Error"] == "filter: request body of 65537 bytes is over the limit of 65536 bytes"


def chunked(body: bytes, size: int) -> bytes:
    pieces = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)]
    return b"".join(pieces) + b"0\r\n\r\n"


def test_chunked_bodies_are_read_up_to_the_cap(served: tuple[NodeStore, str, int]) -> None:
    _, host, port = served
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = json.dumps({"Pod": pod(cpu="1", memory="1Gi"), "NodeNames": ["hot", "cold"]}).encode()
    status, _, raw = raw_exchange(host, port, head + chunked(body, 100))
    assert status == 200 and json.loads(raw)["NodeNames"] == ["cold"]

    too_big = json.dumps({"Pod": pod(), "NodeNames": ["n"] * 20_000}).encode()
    assert len(too_big) > SMALL_BODY_LIMITS.max_body_bytes
    status, _, raw = raw_exchange(host, port, head + chunked(too_big, 4096))
    assert status == 413 and "chunked request body over the limit of 65536 bytes" in json.loads(raw)["Error"]


@pytest.mark.parametrize(("head", "status", "message"), [
    (b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n", 400, "both Transfer-Encoding and Content-Length"),
    (b"Transfer-Encoding: gzip\r\n", 501, "only chunked is supported"),
    (b"Content-Length: +5\r\n", 400, "Content-Length: not one decimal number"),
    (b"", 411, "Content-Length header (or a chunked body) is required"),
])
def test_body_framing_errors(served: tuple[NodeStore, str, int], head: bytes, status: int, message: str) -> None:
    _, host, port = served
    got, _, raw = raw_exchange(host, port, b"POST /filter HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
    assert got == status and message in json.loads(raw)["Error"]
