"""Node load arithmetic of LowNodeLoad (upstream ``plugins/loadaware/utilization_util.go`` and
``utils/sorter``): usage from NodeMetric, thresholds as quantities of allocatable, node classes, the node and
pod orders.  No I/O."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from koordlet.apis.extension import PriorityClass
from koordlet.apis.quantity import int_value, milli_value
from koordlet.companion.descheduler.cluster import CPU, MEMORY, PODS, NodeInfo, PodInfo, Snapshot

log = logging.getLogger(__name__)

MIN_PERCENT: Final = 0.0
MAX_PERCENT: Final = 100.0
RAW_ALLOCATABLE_ANNOTATION: Final = "node.koordinator.sh/raw-allocatable"
"""The un-amplified allocatable of a node whose CPU is normalized or amplified (percentages use it)."""
DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
EVICTION_COST_ANNOTATION: Final = "scheduling.koordinator.sh/eviction-cost"

_KOORD_PRIORITY_ORDER: Final = {PriorityClass.NONE.value: 5, PriorityClass.PROD.value: 4,
                                PriorityClass.MID.value: 3, PriorityClass.BATCH.value: 2, PriorityClass.FREE.value: 1}
_KOORD_QOS_ORDER: Final = {"": 5, "SYSTEM": 4, "LSE": 4, "LSR": 3, "LS": 2, "BE": 1}
_KUBE_QOS_ORDER: Final = {"Guaranteed": 3, "Burstable": 2, "BestEffort": 1}
Resources = dict[str, int]


@dataclass
class NodeUsage:
    """One node of a pool: its pods and usage (mutated as pods are planned away or onto it)."""

    node: NodeInfo
    allocatable: Mapping[str, int]
    all_pods: list[PodInfo]
    prod_pods: list[PodInfo]
    usage: Resources
    prod_usage: Resources
    pod_metrics: Mapping[tuple[str, str], Mapping[str, int]]
    low: Resources = field(default_factory=dict)
    high: Resources = field(default_factory=dict)
    prod_low: Resources = field(default_factory=dict)
    prod_high: Resources = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    def current(self, prod: bool) -> Resources:
        return self.prod_usage if prod else self.usage

    def high_threshold(self, prod: bool) -> Resources:
        return self.prod_high if prod else self.high


def raw_allocatable(node: NodeInfo) -> Mapping[str, int]:
    """``GetNodeRawAllocatableFromNode``: the raw-allocatable annotation, else ``status.allocatable``."""
    text = node.raw.get("metadata", {}).get("annotations", {}).get(RAW_ALLOCATABLE_ANNOTATION)
    if not text:
        return node.allocatable
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        return {str(k): milli_value(v) if k == CPU else int_value(v) for k, v in parsed.items()}
    except (ValueError, TypeError) as exc:
        log.warning("descheduler: bad raw-allocatable annotation, using the node's allocatable",
                    extra={"node": node.name, "annotation": RAW_ALLOCATABLE_ANNOTATION, "error": str(exc)})
        return node.allocatable


def node_usages(nodes: Iterable[NodeInfo], resource_names: Iterable[str], snap: Snapshot,
                expiration_seconds: float) -> dict[str, NodeUsage]:
    """``getNodeUsage``: system usage plus the usage of every pod the node's NodeMetric reports; nodes
    without a NodeMetric, or with an expired one, are left out."""
    names = list(resource_names)
    out: dict[str, NodeUsage] = {}
    for node in nodes:
        updated = snap.metric_update_times.get(node.name)
        if node.name not in snap.system_usage or updated is None:
            log.info("descheduler: node has no NodeMetric with a node usage, not considered", extra={"node": node.name})
            continue
        if expiration_seconds > 0 and snap.now - updated >= expiration_seconds:
            log.info("descheduler: NodeMetric has expired", extra={"node": node.name,
                                                               "expiration_seconds": expiration_seconds})
            continue
        pods = snap.pods_by_node.get(node.name, [])
        prod_pods = [p for p in pods if p.koord_priority == PriorityClass.PROD.value]
        prod_keys = {p.key for p in prod_pods}
        metrics = snap.node_pod_usage.get(node.name, {})
        system = snap.system_usage[node.name]
        usage: Resources = {}
        prod_usage: Resources = {}
        for name in names:
            usage[name] = system.get(name, 0) + sum(m.get(name, 0) for m in metrics.values())
            prod_usage[name] = sum(m.get(name, 0) for key, m in metrics.items() if key in prod_keys)
        usage[PODS] = len(pods)
        prod_usage[PODS] = len(prod_pods)
        out[node.name] = NodeUsage(node, raw_allocatable(node), list(pods), prod_pods, usage, prod_usage, metrics)
    return out


def new_thresholds(use_deviation: bool, low: Mapping[str, float], high: Mapping[str, float],
                   prod_low: Mapping[str, float], prod_high: Mapping[str, float]
                   ) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float]]:
    """``newThresholds``: every resource named anywhere (and memory) gets thresholds; a resource without a
    low threshold is unbounded (100%, or 0 deviation)."""
    lows, highs, prod_lows, prod_highs = dict(low), dict(high), dict(prod_low), dict(prod_high)
    filler = MIN_PERCENT if use_deviation else MAX_PERCENT
    for name in (*low, *high, *prod_low, *prod_high, MEMORY):
        if name not in lows:
            lows[name] = highs[name] = filler
        if name not in prod_lows:
            prod_lows[name] = prod_highs[name] = filler
    return lows, highs, prod_lows, prod_highs


def _normalize(percent: float) -> float:
    return min(MAX_PERCENT, max(MIN_PERCENT, percent))


def resource_threshold(allocatable: Mapping[str, int], name: str, percent: float) -> int:
    """``resourceThreshold``: ``percent`` of allocatable, truncated (CPU in milli-cores)."""
    return int(percent * 0.01 * allocatable.get(name, 0))


def _average_percent(usages: Iterable[NodeUsage], prod: bool) -> dict[str, float]:
    totals: dict[str, float] = {}
    count = 0
    for node in usages:
        count += 1
        for name, used in node.current(prod).items():
            capacity = node.allocatable.get(name, 0)
            if capacity:
                totals[name] = totals.get(name, 0.0) + used / capacity * 100.0
    return {name: total / count for name, total in totals.items()} if count else {}


def set_thresholds(usages: Mapping[str, NodeUsage], low: Mapping[str, float], high: Mapping[str, float],
                   prod_low: Mapping[str, float], prod_high: Mapping[str, float], resource_names: Iterable[str],
                   use_deviation: bool) -> None:
    """``getNodeThresholds``: fills each node's low/high (and prod) thresholds as quantities."""
    average = _average_percent(usages.values(), False) if use_deviation else {}
    prod_average = _average_percent(usages.values(), True) if use_deviation else {}
    names = list(resource_names)
    for node in usages.values():
        alloc = node.allocatable
        for name in names:
            if not use_deviation:
                node.low[name] = resource_threshold(alloc, name, low.get(name, 0.0))
                node.high[name] = resource_threshold(alloc, name, high.get(name, 0.0))
                node.prod_low[name] = resource_threshold(alloc, name, prod_low.get(name, 0.0))
                node.prod_high[name] = resource_threshold(alloc, name, prod_high.get(name, 0.0))
                continue
            capacity = alloc.get(name, 0)
            if low.get(name, 0.0) == MIN_PERCENT:
                node.low[name] = node.high[name] = capacity
            else:
                node.low[name] = resource_threshold(alloc, name, _normalize(average.get(name, 0.0) - low[name]))
                node.high[name] = resource_threshold(alloc, name,
                                                     _normalize(average.get(name, 0.0) + high.get(name, 0.0)))
            if prod_low.get(name, 0.0) == MIN_PERCENT:
                node.prod_low[name] = node.prod_high[name] = capacity
            else:
                node.prod_low[name] = resource_threshold(
                    alloc, name, _normalize(prod_average.get(name, 0.0) - prod_low[name]))
                node.prod_high[name] = resource_threshold(
                    alloc, name, _normalize(prod_average.get(name, 0.0) + prod_high.get(name, 0.0)))


def overutilized(usage: Mapping[str, int], thresholds: Mapping[str, int]) -> dict[str, int]:
    """``isNodeOverutilized``: the resources above their threshold (empty: not overutilized)."""
    return {name: usage[name] for name, limit in thresholds.items() if name in usage and usage[name] > limit}


def underutilized(usage: Mapping[str, int], thresholds: Mapping[str, int]) -> bool:
    """``isNodeUnderutilized``: every resource at or below its threshold."""
    return all(usage[name] <= limit for name, limit in thresholds.items() if name in usage)


@dataclass
class Classes:
    """``classifyNodes``."""

    low: list[NodeUsage] = field(default_factory=list)
    high: list[NodeUsage] = field(default_factory=list)
    prod_low: list[NodeUsage] = field(default_factory=list)
    prod_high: list[NodeUsage] = field(default_factory=list)
    both_low: list[NodeUsage] = field(default_factory=list)


def classify(usages: Iterable[NodeUsage]) -> Classes:
    """Low: under every low threshold and schedulable; high: over some high threshold; a low node is also
    split by its prod usage, as is a node in between."""
    out = Classes()
    for node in usages:
        prod_over = bool(overutilized(node.prod_usage, node.prod_high))
        prod_under = not node.node.unschedulable and underutilized(node.prod_usage, node.prod_low)
        if not node.node.unschedulable and underutilized(node.usage, node.low):
            if prod_over:
                out.prod_high.append(node)
            elif prod_under:
                out.both_low.append(node)
            else:
                out.low.append(node)
        elif overutilized(node.usage, node.high):
            out.high.append(node)
        elif prod_over:
            out.prod_high.append(node)
        elif prod_under:
            out.prod_low.append(node)
    return out


def _most_requested(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * 1000 // capacity


def node_score(usage: Mapping[str, int], allocatable: Mapping[str, int], weights: Mapping[str, int]) -> int:
    """``ResourceUsageScorer``: weighted mean of usage per mille of allocatable."""
    score = weight_sum = 0
    for name, used in usage.items():
        weight = weights.get(name, 0)
        score += _most_requested(used, allocatable.get(name, 0)) * weight
        weight_sum += weight
    return score // weight_sum if weight_sum else 0


def sort_nodes_by_usage(nodes: list[NodeUsage], weights: Mapping[str, int], *, ascending: bool, prod: bool) -> None:
    """``sortNodesByUsage`` (ties by name, so a round is reproducible)."""
    nodes.sort(key=lambda n: n.name)
    nodes.sort(key=lambda n: node_score(n.current(prod), n.allocatable, weights), reverse=not ascending)


def _pod_usage_score(usage: Mapping[str, int], exceeded: Mapping[str, int], weights: Mapping[str, int]) -> float:
    """``ResourceUsageScorerPod``: highest (2) for a pod whose usage equals what the node is over by."""
    score = 0.0
    weight_sum = 0
    for name, used in usage.items():
        weight = weights.get(name, 0)
        capacity = exceeded.get(name, 0)
        if capacity == 0:
            part = 0.0
        else:
            ratio = used / capacity
            part = 1 / ratio + 1 if ratio >= 1 else ratio
        score += part * weight
        weight_sum += weight
    return score / weight_sum if weight_sum else 0.0


def _int_annotation(pod: PodInfo, key: str) -> int:
    try:
        return int(pod.annotations.get(key, "0"))
    except ValueError:
        return 0


def sort_pods_for_eviction(node: NodeUsage, pods: list[PodInfo], weights: Mapping[str, int], prod: bool) -> None:
    """``sortPodsOnOneOverloadedNode``: lowest Koordinator priority class, priority, Kubernetes QoS, Koordinator
    QoS, deletion cost and eviction cost first; then the pods whose usage best matches what the node is over
    by (only over-used resources weigh), pods without a metric last; newest first."""
    over = overutilized(node.current(prod), node.high_threshold(prod))
    exceeded = {name: used - node.high_threshold(prod)[name] for name, used in over.items()}
    over_weights = {name: weights.get(name, 0) for name in over}

    def key(pod: PodInfo) -> tuple[int, int, int, int, int, int, int, float, float]:
        metric = node.pod_metrics.get(pod.key)
        return (
            _KOORD_PRIORITY_ORDER.get(pod.koord_priority, 5),
            pod.priority or 0,
            _KUBE_QOS_ORDER.get(pod.kube_qos, 0),
            _KOORD_QOS_ORDER.get(pod.koord_qos, 5),
            _int_annotation(pod, DELETION_COST_ANNOTATION),
            _int_annotation(pod, EVICTION_COST_ANNOTATION),
            0 if metric is not None else 1,
            -_pod_usage_score(metric, exceeded, over_weights) if metric is not None else 0.0,
            -pod.creation_time,
        )

    pods.sort(key=key)


def usage_percentages(node: NodeUsage, prod: bool) -> dict[str, float]:
    return {name: 100.0 * used / node.allocatable[name] for name, used in node.current(prod).items()
            if node.allocatable.get(name)}
