"""The extender's gates (the filter and score reduced to comparisons with the pod's estimate) answer exactly as
upstream's formulas do: random clusters, args and pods, each answer compared with a straightforward per-node
computation of the formulas."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from koordlet.apis.extension import PriorityClass
from koordlet.apis.nodemetric import AggregationType, NodeMetricStatus, format_time
from koordlet.companion.extender import (
    ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    MAX_NODE_SCORE,
    REASON_NODE_METRIC_EXPIRED,
    REASON_UNKNOWN_NODE,
    AggregatedArgs,
    LoadAwareArgs,
    LoadAwareExtender,
    NodeStore,
    NodeView,
    PodInfo,
    estimate_pod,
    parse_pod,
)
from koordlet.companion.extender.gates import EST_MAX, fail_from, node_gates
from koordlet.companion.extender.loadaware import (
    REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD,
    REASON_USAGE_EXCEED_THRESHOLD,
    encode_host_priorities,
)
from tests.unit.companion.test_extender import NOW, Clock, node, node_list, pod

# -- the reference: upstream's filterNodeUsage and least-used score, per node, spelled out


def reference_filter(args: LoadAwareArgs, view: NodeView | None, pod_info: PodInfo, now: float) -> str | None:
    if view is None or not view.known:
        return REASON_UNKNOWN_NODE
    if pod_info.daemonset or not view.has_metric:
        return None
    if args.filter_expired_node_metrics and now >= view.expires_at:
        return None if args.enable_schedule_when_node_metrics_expired else REASON_NODE_METRIC_EXPIRED
    if not view.node_metric_ok:
        return None
    est = estimate_pod(pod_info, args.estimated_scaling_factors)
    prod = pod_info.priority is PriorityClass.PROD and view.prod_thresholds is not None
    thresholds = view.prod_thresholds if prod and view.prod_thresholds is not None else view.thresholds
    used = view.prod_used if prod else view.filter_used
    reason = REASON_USAGE_EXCEED_THRESHOLD if prod or not view.aggregated_filter \
        else REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD
    for i, (resource, total) in enumerate((("cpu", view.alloc_cpu), ("memory", view.alloc_mem))):
        if thresholds[i] and total and round_half_away((used[i] + est[i]) / total * 100) > thresholds[i]:
            return reason.format(resource)
    return None


def round_half_away(value: float) -> float:
    """Go's math.Round."""
    return math.copysign(math.floor(abs(value) + 0.5), value)


def reference_score(args: LoadAwareArgs, view: NodeView | None, pod_info: PodInfo, now: float) -> int:
    if (view is None or not view.known or not view.has_metric or now >= view.expires_at
            or not view.node_metric_ok):
        return 0
    est = estimate_pod(pod_info, args.estimated_scaling_factors)
    prod = pod_info.priority is PriorityClass.PROD and args.score_according_prod_usage
    used = view.prod_used if prod else view.score_used
    weights = args.resource_weights
    score = 0
    for i, (resource, total) in enumerate((("cpu", view.alloc_cpu), ("memory", view.alloc_mem))):
        requested = used[i] + est[i]
        if total and requested <= total:
            score += weights.get(resource, 0) * ((total - requested) * MAX_NODE_SCORE // total)
    return score // sum(weights.values())


# -- random clusters

ARGS = [
    LoadAwareArgs(),
    LoadAwareArgs(prod_usage_thresholds={"cpu": 55, "memory": 65}, score_according_prod_usage=True,
                  estimated_scaling_factors={"cpu": 80, "memory": 70}),
    LoadAwareArgs(usage_thresholds={"cpu": 0, "memory": 80}, enable_schedule_when_node_metrics_expired=True,
                  resource_weights={"cpu": 3, "memory": 1}),
    LoadAwareArgs(filter_expired_node_metrics=False, usage_thresholds={"cpu": 100, "memory": 1},
                  resource_weights={"cpu": 1, "memory": 0, "gpu": 2}),
    LoadAwareArgs(aggregated=AggregatedArgs(usage_thresholds={"cpu": 50, "memory": 70},
                                            usage_aggregation_type=AggregationType.P95,
                                            score_aggregation_type=AggregationType.AVG)),
]


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    cpu = rng.choice(["0", "1", "3", "16", "96", "250m", "1001m"])
    memory = rng.choice(["0", "1", "1Gi", "64Gi", "1000001", "3Ki"])
    annotations: dict[str, str] = {}
    if rng.random() < 0.3:
        custom: dict[str, Any] = {"usageThresholds": {"cpu": rng.randint(0, 120), "memory": rng.randint(0, 100)}}
        if rng.random() < 0.5:
            custom["prodUsageThresholds"] = {"cpu": rng.randint(0, 100)}
        annotations[ANNOTATION_CUSTOM_USAGE_THRESHOLDS] = json.dumps(custom)
    return node(name, cpu=cpu, memory=memory, annotations=annotations)


def random_metric(rng: random.Random, name: str) -> NodeMetricStatus:
    def usage() -> dict[str, Any]:
        return {"resources": {"cpu": f"{rng.randint(0, 100_000)}m", "memory": str(rng.randint(0, 80 << 30))}}

    doc: dict[str, Any] = {}
    if rng.random() < 0.9:
        doc["updateTime"] = format_time(NOW - rng.choice([0, 10, 170, 179, 180, 181, 600]))
    if rng.random() < 0.9:
        doc["nodeMetric"] = {"nodeUsage": usage(), "aggregatedNodeUsages": [
            {"usage": {"p95": usage(), "avg": usage()}, "duration": "5m0s"}]}
    doc["podsMetric"] = [{"name": f"{name}-p{i}", "namespace": "default", "podUsage": usage(),
                          "priority": rng.choice(["koord-prod", "koord-batch"]), "qos": "LS"}
                         for i in range(rng.randint(0, 4))]
    return NodeMetricStatus.from_json(doc)


def random_pod(rng: random.Random, name: str) -> dict[str, Any]:
    cpu = rng.choice([None, "0", "1m", "100m", "1", "7", "64", "1000", "9999999999999999"])
    memory = rng.choice([None, "1", "1Mi", "1Gi", "50Gi", "1Ei", "9999Ei"])
    labels = {"koordinator.sh/priority-class": rng.choice(["koord-prod", "koord-batch", "koord-mid"])} \
        if rng.random() < 0.5 else None
    return pod(name, cpu=cpu, memory=memory, cpu_limit=rng.choice([None, cpu, "2"]), labels=labels,
               priority=rng.choice([None, 9000, 5000]), daemonset=rng.random() < 0.05)


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("seed", range(4))
def test_gates_answer_as_the_formulas(args: LoadAwareArgs, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    store = NodeStore(args, clock=clock)
    extender = LoadAwareExtender(store, clock=clock)
    names = [f"n{i}" for i in range(60)]
    for name in names:
        if rng.random() < 0.95:
            store.update_node_json(random_node(rng, name))
        if rng.random() < 0.85:
            store.update_node_metric(name, random_metric(rng, name))
        for j in range(rng.randint(0, 3)):
            store.assign_pod(name, random_pod(rng, f"{name}-a{j}"), timestamp=NOW - rng.choice([1, 30, 100]))
    names.append("never-heard-of")
    assert_answers_as_the_formulas(rng, store, extender, clock, names)
    # Nodes, metrics and pods going away and coming back: slots freed and reused, views rebuilt.
    for name in rng.sample(names[:-1], 20):
        rng.choice([store.remove_node, store.remove_node_metric])(name)
    for name in rng.sample(names[:-1], 10):
        store.update_node_json(random_node(rng, name))
        store.update_node_metric(name, random_metric(rng, name))
    rng.shuffle(names)
    assert_answers_as_the_formulas(rng, store, extender, clock, names)


def assert_answers_as_the_formulas(rng: random.Random, store: NodeStore, extender: LoadAwareExtender, clock: Clock,
                                   names: list[str]) -> None:
    """Both forms' answers (the views' gates and the store's gate table) against the reference."""
    args = store.args
    views = store.views(names)
    known = {name for name, view in zip(names, views, strict=True) if view is not None and view.known}
    for i in range(40):
        pod_json = random_pod(rng, f"incoming-{i}")
        info = parse_pod(pod_json)
        expected = {name: reference_filter(args, view, info, clock.now)
                    for name, view in zip(names, views, strict=True)}
        passed = [name for name in names if expected[name] is None]
        failed = {name: reason for name, reason in expected.items() if reason is not None}
        scores = [reference_score(args, view, info, clock.now) for view in views]
        assert extender.filter_views(info, names, views) == (passed, failed)
        assert extender.filter_names(info, names) == (passed, failed)
        assert extender.score_views(info, views) == scores
        body = {"Pod": pod_json, "Nodes": None, "NodeNames": names}
        assert extender.filter(body) == {"Nodes": None, "NodeNames": passed, "FailedNodes": failed,
                                         "FailedAndUnresolvableNodes": {}, "Error": ""}
        assert extender.prioritize(body) == [{"Host": name, "Score": score * 10 // MAX_NODE_SCORE}
                                             for name, score in zip(names, scores, strict=True)]
        assert extender.prioritize_body(body) == json.dumps(extender.prioritize(body), separators=(",", ":")).encode()
        # The Nodes form: answered by name when the store knows every node, else from the views.
        for items in ([node(name) for name in names if name in known],
                      [node(name) for name in names]):
            nodes_body = {"Pod": pod_json, "Nodes": node_list(*items), "NodeNames": None}
            item_names, item_views, _ = store.request_views(items)
            expected_passed, expected_failed = extender.filter_views(info, item_names, item_views)
            answer = extender.filter(nodes_body)
            assert answer["FailedNodes"] == expected_failed
            assert [item["metadata"]["name"] for item in answer["Nodes"]["items"]] == expected_passed
            assert [entry["Score"] for entry in extender.prioritize(nodes_body)] == [
                score * 10 // MAX_NODE_SCORE for score in extender.score_views(info, item_views)]
            assert extender.prioritize_body(nodes_body) == json.dumps(extender.prioritize(nodes_body),
                                                                      separators=(",", ":")).encode()


def test_fail_from_is_the_first_failing_estimate() -> None:
    rng = random.Random(1)
    for _ in range(5000):
        total = rng.choice([1, 2, 3, 7, 100, 999, 1000, 4096, rng.randint(1, 10**6), rng.randint(1, 2**70)])
        used = rng.randint(-2 * total, 2 * total)
        threshold = rng.choice([1, 50, 65, 99, 100, 101, 200, rng.randint(1, 2**63)])

        def fails(e: int, used: int = used, total: int = total, threshold: int = threshold) -> bool:
            return (used + e) / total * 100 >= threshold + 0.5

        first = fail_from(used, total, threshold)
        if first == math.inf:
            assert not fails(EST_MAX), (used, total, threshold)
        else:
            assert isinstance(first, int) and 0 <= first <= EST_MAX
            assert fails(first) and (first == 0 or not fails(first - 1)), (used, total, threshold)
        if total <= 1000:  # small enough to walk: the failing estimates are exactly those from the first on
            assert [fails(e) for e in range(4 * total + 10)] == [e >= first for e in range(4 * total + 10)]


def test_fail_from_edges() -> None:
    assert fail_from(10, 100, 0) == math.inf  # threshold off
    assert fail_from(10, 0, 65) == math.inf  # no allocatable: never checked
    assert fail_from(10, -100, 65) is None  # not monotone: the formula decides
    assert fail_from(10**400, 3, 65) is None  # overflows: the formula decides (and raises)
    assert fail_from(0, 1000, 2**63 - 1) == math.inf  # beyond every estimate the gates answer for
    assert fail_from(EST_MAX, 1, 50) == 0


def test_negative_allocatable_and_huge_estimates_take_the_formulas() -> None:
    clock = Clock()
    store = NodeStore(LoadAwareArgs(), clock=clock)
    extender = LoadAwareExtender(store, clock=clock)
    store.update_node_json(node("neg", cpu="-4", memory="64Gi"))
    store.update_node_json(node("ok", cpu="4", memory="64Gi"))
    status = NodeMetricStatus.from_json({"updateTime": format_time(NOW - 10), "nodeMetric": {
        "nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}}})
    for name in ("neg", "ok"):
        store.update_node_metric(name, status)
    views = store.views(["neg", "ok"])
    assert views[0] is not None and node_gates(store.args, views[0])[0] is None  # the formulas answer it
    for info in (parse_pod(pod("small", cpu="1")), parse_pod(pod("huge", cpu="99999999999999999999"))):
        passed, failed = extender.filter_names(info, ["neg", "ok"])
        expected = {name: reference_filter(store.args, view, info, clock.now) for name, view in
                    zip(["neg", "ok"], views, strict=True)}
        assert failed == {name: reason for name, reason in expected.items() if reason is not None}
        assert passed == [name for name, reason in expected.items() if reason is None]
        assert [score for _, score in extender.prioritize_names(info, ["neg", "ok"])] == [
            reference_score(store.args, v, info, clock.now) * 10 // MAX_NODE_SCORE for v in views]


def test_the_gate_table_follows_nodes_added_and_removed_in_bulk() -> None:
    """Names are compacted (copied side by side) as nodes are added; a name with a lone surrogate (JSON allows
    the escape) copies too, and freed slots are reused."""
    clock = Clock()
    store = NodeStore(LoadAwareArgs(), clock=clock)
    extender = LoadAwareExtender(store, clock=clock)
    rng = random.Random(3)
    names = [f"bulk-{i}" for i in range(300)] + ["odd-\ud800-node"]
    for name in names:
        store.update_node_json(node(name, cpu=rng.choice(["4", "16"])))
        store.update_node_metric(name, random_metric(rng, name))
    for name in names[:100]:
        store.remove_node(name)
        store.remove_node_metric(name)
    for name in names[:50]:
        store.update_node_json(node(name))
        store.update_node_metric(name, random_metric(rng, name))
    views = store.views(names)
    for pod_json in (pod("a", cpu="1", memory="1Gi"), pod("b", cpu="8", memory="20Gi", labels={
            "koordinator.sh/priority-class": "koord-batch"})):
        info = parse_pod(pod_json)
        assert extender.filter_names(info, names) == extender.filter_views(info, names, views)
        body = {"Pod": pod_json, "Nodes": None, "NodeNames": names}
        assert [entry["Score"] for entry in extender.prioritize(body)] == [
            score * 10 // MAX_NODE_SCORE for score in extender.score_views(info, views)]


@pytest.mark.parametrize("names", [[], ["n"], ['quote"d', "back\\slash", "ünïcode-ñode", "tab\tname", "日本"]])
def test_the_prioritize_body_is_json_dumps_of_the_list(names: list[str]) -> None:
    """The HTTP answer's bytes, made without a dict per node, are what json.dumps of the HostPriorityList gives
    (names escaped as json escapes them, any score, and names cached across requests)."""
    scores = [(7 * i) % 11 for i in range(len(names))]
    expected = json.dumps([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)],
                          separators=(",", ":")).encode()
    assert encode_host_priorities(names, scores) == expected
    assert encode_host_priorities(names, scores) == expected  # from the cache of encoded names
    assert encode_host_priorities(names, [123] * len(names)) == json.dumps(
        [{"Host": n, "Score": 123} for n in names], separators=(",", ":")).encode()
