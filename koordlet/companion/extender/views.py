"""Everything a request needs of one node, precomputed: the threshold profile (args merged with the node's
annotation), the compact NodeMetric, the assigned pods and the estimated usage (upstream ``GetEstimatedUsed``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from koordlet.apis import gojson
from koordlet.apis.extension import PriorityClass
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import (
    DEFAULT_REPORT_INTERVAL_SECONDS,
    AggregationType,
    NodeMetricStatus,
    ResourceMap,
)
from koordlet.companion.extender.args import (
    CPU,
    MEMORY,
    LoadAwareArgs,
    aggregation_type,
    duration_seconds,
    int_map,
)
from koordlet.errors import ConfigError

log = logging.getLogger(__name__)

ANNOTATION_CUSTOM_USAGE_THRESHOLDS: Final = "scheduling.koordinator.sh/usage-thresholds"
ANNOTATION_NODE_RAW_ALLOCATABLE: Final = "node.koordinator.sh/raw-allocatable"


@dataclass(frozen=True, slots=True)
class Profile:
    """Upstream ``usageThresholdsFilterProfile`` (``CustomUsageThresholds`` merged with the args)."""

    thresholds: tuple[int, int]
    prod_thresholds: tuple[int, int] | None
    aggregation_type: AggregationType | None
    """Set when the node filters on a percentile."""
    aggregated_duration_seconds: float = 0.0


def _pair(thresholds: Mapping[str, int]) -> tuple[int, int]:
    return thresholds.get(CPU, 0), thresholds.get(MEMORY, 0)


def profile_of(args: LoadAwareArgs, annotation: str | None) -> Profile:
    """``generateUsageThresholdsFilterProfile``: the node annotation's thresholds where it sets them, else
    the args'; an annotation that does not decode is ignored as a whole."""
    usage, prod = args.usage_thresholds, args.prod_usage_thresholds
    aggregated = args.aggregated if args.aggregated is not None and args.aggregated.filter_enabled else None
    agg_thresholds = aggregated.usage_thresholds if aggregated else {}
    agg_type = aggregated.usage_aggregation_type if aggregated else None
    agg_duration = aggregated.usage_aggregated_duration_seconds if aggregated else 0.0
    if annotation:
        try:
            custom = gojson.mapping(json.loads(annotation), ANNOTATION_CUSTOM_USAGE_THRESHOLDS, ConfigError)
            where = ANNOTATION_CUSTOM_USAGE_THRESHOLDS
            custom_usage = int_map(member(custom, "usageThresholds"), f"{where}.usageThresholds", 0, 2**63 - 1)
            custom_prod = int_map(member(custom, "prodUsageThresholds"), f"{where}.prodUsageThresholds",
                                   0, 2**63 - 1)
            custom_agg = gojson.mapping(member(custom, "aggregatedUsage"), f"{where}.aggregatedUsage", ConfigError)
            agg_usage = int_map(member(custom_agg, "usageThresholds"), f"{where}.aggregatedUsage.usageThresholds",
                                 0, 2**63 - 1)
            agg_kind = aggregation_type(member(custom_agg, "usageAggregationType"),
                                         f"{where}.aggregatedUsage.usageAggregationType")
            agg_seconds = duration_seconds(member(custom_agg, "usageAggregatedDuration"),
                                            f"{where}.aggregatedUsage.usageAggregatedDuration")
        except (ValueError, TypeError, RecursionError) as exc:
            log.debug("ignoring node usage-thresholds annotation", extra={"reason": str(exc)})
        else:
            usage = custom_usage or usage
            prod = custom_prod or prod
            if agg_usage and agg_kind is not None:
                agg_thresholds, agg_type, agg_duration = agg_usage, agg_kind, agg_seconds
    if agg_type is not None:
        return Profile(_pair(agg_thresholds), _pair(prod) if prod else None, agg_type, agg_duration)
    return Profile(_pair(usage), _pair(prod) if prod else None, None)


class NodeView(NamedTuple):
    """Everything a request needs of one node, recomputed whenever its inputs change.

    A tuple of numbers and strings: the garbage collector stops tracking it, so 5,000 of them add nothing
    to a full collection."""

    name: str
    known: bool
    """A Node object (allocatable) has been seen."""
    alloc_cpu: int
    alloc_mem: int
    thresholds: tuple[int, int]
    prod_thresholds: tuple[int, int] | None
    aggregated_filter: bool
    has_metric: bool
    """A NodeMetric exists; without one the node passes and scores 0."""
    node_metric_ok: bool
    """The NodeMetric's ``status.nodeMetric`` is set."""
    expires_at: float
    """Time from which the metric is expired (``-inf`` when it has no ``updateTime``)."""
    filter_used: tuple[int, int]
    """Estimated usage for the filter without the incoming pod (non-prod pods)."""
    prod_used: tuple[int, int]
    """Prod pods' usage plus prod assignments' estimates (prod pods' filter and, if enabled, score)."""
    score_used: tuple[int, int]
    """Estimated usage for the score without the incoming pod (non-prod pods)."""
    signature: tuple[Any, ...] = ()
    """The Node's raw allocatable and annotations this view was built from (to spot a changed Node)."""


Usage = tuple[int | None, int | None]
"""CPU milli-cores and memory bytes, None where the metric does not report the resource."""


class Metric(NamedTuple):
    """The part of a NodeMetric status the plugin reads, as flat tuples (untracked by the GC, unlike
    the parsed status objects, which would make every full collection walk every node's pods)."""

    update_time: float | None
    node_metric_ok: bool
    node_usage: Usage | None
    aggregated: tuple[tuple[float, str, int | None, int | None], ...]
    """``(duration seconds, aggregation type, cpu, memory)`` per window and type that reports something."""
    pods: tuple[tuple[str, str, bool, int | None, int | None], ...]
    """``(namespace, name, is prod, cpu, memory)`` per pod that reports something."""


class Assigned(NamedTuple):
    """A pod placed on the node: its key, prod or not, when it was placed, and its estimate (CPU, memory)."""

    namespace: str
    name: str
    prod: bool
    timestamp: float
    estimate: tuple[int, int]


@dataclass(slots=True)
class NodeRecord:
    """The inputs of one node's view, as the watches last reported them (held under the store's lock)."""

    name: str
    known: bool = False
    alloc: tuple[int, int] = (0, 0)
    signature: tuple[Any, ...] = ()
    profile: Profile | None = None
    metric: Metric | None = None
    has_metric: bool = False
    report_interval_seconds: float = float(DEFAULT_REPORT_INTERVAL_SECONDS)
    assigned: dict[str, Assigned] = field(default_factory=dict)


def _resources(usage: ResourceMap | None) -> Usage | None:
    if usage is None or (usage.cpu_milli is None and usage.memory_bytes is None):
        return None
    return usage.cpu_milli, usage.memory_bytes


def compact(status: NodeMetricStatus) -> Metric:
    """The :class:`Metric` of a parsed NodeMetric status."""
    info = status.node_metric
    aggregated: list[tuple[float, str, int | None, int | None]] = []
    if info is not None:
        for window in info.aggregated_node_usages:
            for kind, usage in window.usage.items():
                if (values := _resources(usage)) is not None:
                    aggregated.append((window.duration_seconds, kind.value, values[0], values[1]))
    pods = tuple((pm.namespace, pm.name, pm.priority is PriorityClass.PROD, values[0], values[1])
                 for pm in status.pods_metric if (values := _resources(pm.pod_usage)) is not None)
    return Metric(status.update_time, info is not None, _resources(info.node_usage) if info is not None else None,
                   tuple(aggregated), pods)


def target_aggregated_usage(metric: Metric, duration: float, kind: AggregationType) -> Usage | None:
    """Upstream ``getTargetAggregatedUsage``: the window of ``duration``, or for 0 the longest window
    reporting ``kind`` (falling back to ``nodeUsage`` when the node reports windows but none of ``kind``)."""
    if not metric.node_metric_ok or not metric.aggregated:
        return None
    if duration == 0:
        best: Usage | None = None
        best_duration = 0.0
        for seconds, name, cpu, memory in metric.aggregated:
            if name == kind.value and seconds > best_duration:
                best, best_duration = (cpu, memory), seconds
        return best if best is not None else metric.node_usage
    for seconds, name, cpu, memory in metric.aggregated:
        if seconds == duration and name == kind.value:
            return cpu, memory
    return None


def build_view(args: LoadAwareArgs, record: NodeRecord) -> NodeView:
    """The view of ``record`` under ``args``: every number a filter or score reads."""
    profile = record.profile if record.profile is not None else profile_of(args, None)
    metric = record.metric
    update_time = metric.update_time if metric is not None else None
    filter_used = prod_used = score_used = (0, 0)
    if metric is not None and metric.node_metric_ok:
        force_all = False
        score_usage = metric.node_usage
        if args.aggregated is not None and args.aggregated.score_aggregation_type is not None:
            score_usage = target_aggregated_usage(metric, args.aggregated.score_aggregated_duration_seconds,
                                                   args.aggregated.score_aggregation_type)
            force_all = score_usage is None
        if profile.aggregation_type is not None:
            filter_usage = target_aggregated_usage(metric, profile.aggregated_duration_seconds,
                                                    profile.aggregation_type)
        else:
            filter_usage = metric.node_usage
        interval = record.report_interval_seconds
        assigned = record.assigned.values()
        filter_used = estimated_used(assigned, metric, interval, filter_usage, False, force_all)
        score_used = estimated_used(assigned, metric, interval, score_usage, False, force_all)
        prod_used = estimated_used(assigned, metric, interval, None, True, force_all)
    return NodeView(
        name=record.name,
        known=record.known,
        alloc_cpu=record.alloc[0],
        alloc_mem=record.alloc[1],
        thresholds=profile.thresholds,
        prod_thresholds=profile.prod_thresholds,
        aggregated_filter=profile.aggregation_type is not None,
        has_metric=record.has_metric,
        node_metric_ok=metric is not None and metric.node_metric_ok,
        expires_at=(update_time + args.node_metric_expiration_seconds) if update_time is not None
        else -math.inf,
        filter_used=filter_used,
        prod_used=prod_used,
        score_used=score_used,
        signature=record.signature,
    )


def estimated_used(assigned_pods: Iterable[Assigned], metric: Metric, interval: float, node_usage: Usage | None,
                    prod: bool, force_all: bool) -> tuple[int, int]:
    """Upstream ``GetEstimatedUsed`` without the incoming pod's estimate."""
    pod_metrics = {(namespace, name): (cpu, memory) for namespace, name, is_prod, cpu, memory in metric.pods
                   if is_prod or not prod}
    updated = metric.update_time if metric.update_time is not None else -math.inf
    used = [0, 0]
    estimated: set[tuple[str, str]] = set()
    for assigned in assigned_pods:
        if prod and not assigned.prod:
            continue
        key = (assigned.namespace, assigned.name)
        measured = pod_metrics.get(key)
        ts = assigned.timestamp
        # missedLatestUpdateTime, stillInTheReportInterval, or no usable score aggregate
        if measured is None or ts > updated or (ts < updated and updated - ts < interval) or force_all:
            for i in (0, 1):
                value = assigned.estimate[i]
                actual = measured[i] if measured is not None else None
                used[i] += actual if actual is not None and actual > value else value
            estimated.add(key)
    actual_sum = [0, 0]
    estimated_actual = [0, 0]
    for key, usage in pod_metrics.items():
        target = estimated_actual if key in estimated else actual_sum
        for i in (0, 1):
            target[i] += usage[i] or 0
    if prod:
        used[0] += actual_sum[0]
        used[1] += actual_sum[1]
    elif node_usage is not None:
        for i in (0, 1):
            quantity = node_usage[i]
            if quantity is None:
                continue
            if estimated_actual[i] and quantity >= estimated_actual[i]:
                quantity -= estimated_actual[i]
            used[i] += quantity
    return used[0], used[1]
