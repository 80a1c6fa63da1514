"""LowNodeLoad (upstream ``plugins/loadaware/low_node_load.go`` + ``utilization_util.go``): evicts pods from
nodes whose real usage (NodeMetric) stays above the high thresholds to make room on nodes under the low ones.

Per node pool (the top-level thresholds form the first pool): classify the nodes, keep the overloaded ones
that the anomaly detector confirms over consecutive rounds, and evict their pods in upstream's order while the
source is still over its high threshold and the targets still have room under theirs.  The room is the sum of
``high - usage`` over the targets; with ``nodeFit`` each candidate pod must also fit one target whose usage
plus the pod's stays under that target's high threshold, and the pod's usage is then booked on that target,
so no target is planned above its high threshold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.companion.descheduler.anomaly import BasicDetector, DetectorCache, State
from koordlet.companion.descheduler.cluster import PODS, NodeInfo, PodInfo, Snapshot
from koordlet.companion.descheduler.evictor import Evictor
from koordlet.companion.descheduler.framework import Handle
from koordlet.companion.descheduler.lownodeload_args import AnomalyCondition, LowNodeLoadArgs, NodePool, parse_args
from koordlet.companion.descheduler.nodefit import node_fit_reasons, requested_on
from koordlet.companion.descheduler.utilization import (
    Classes,
    NodeUsage,
    classify,
    new_thresholds,
    node_usages,
    overutilized,
    set_thresholds,
    sort_nodes_by_usage,
    sort_pods_for_eviction,
    usage_percentages,
)

NAME: Final = "LowNodeLoad"

__all__ = ["NAME", "LowNodeLoad", "Placement", "new_plugin", "parse_args"]


@dataclass(frozen=True)
class Placement:
    """Where a pod evicted from ``source`` was planned to go (``target`` "" without nodeFit)."""

    pod: PodInfo
    source: str
    target: str
    usage: Mapping[str, int]
    prod: bool


class LowNodeLoad:
    """The balance plugin; its anomaly detectors persist across rounds (the runner keeps the instance)."""

    name = NAME

    def __init__(self, args: LowNodeLoadArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.log = handle.log
        # A detector forgotten between two rounds could never count consecutive rounds: keep it at least one
        # interval (upstream cmd/koord-descheduler raises detectorCacheTimeout to deschedulingInterval).
        ttl = max(args.detector_cache_timeout_seconds, handle.interval_seconds)
        self._node_detectors = DetectorCache(ttl, handle.clock)
        self._prod_detectors = DetectorCache(ttl, handle.clock)
        self.placements: list[Placement] = []
        """What the last :meth:`balance` evicted (or, dry-run, would have) and where it was planned to go."""

    # ------------------------------------------------------------------------------------------ filters

    def _selected(self, pod: PodInfo) -> bool:
        selectors = [s.selector for s in self.args.pod_selectors if s.selector is not None]
        return not selectors or any(s.matches(pod.labels) for s in selectors)

    def pod_filter(self, pod: PodInfo, evictor: Evictor) -> bool:
        """Evictor filter, ``podSelectors`` (any), ``evictableNamespaces``."""
        namespaces = self.args.evictable_namespaces
        if namespaces is not None and not namespaces.allows(pod.namespace):
            return False
        return self._selected(pod) and evictor.filter(pod) is None

    # ------------------------------------------------------------------------------------------ anomaly

    def _abnormal(self, nodes: list[NodeUsage], cache: DetectorCache, condition: AnomalyCondition
                  ) -> list[NodeUsage]:
        """``filterRealAbnormalNodes``."""
        if condition.consecutive_abnormalities == 1:
            return nodes
        out = []
        for node in nodes:
            detector = cache.get(node.name) or BasicDetector(
                node.name, consecutive_abnormalities=condition.consecutive_abnormalities,
                consecutive_normalities=condition.consecutive_normalities,
                timeout_seconds=condition.timeout_seconds, clock=self.handle.clock)
            if detector.mark(False) is State.ANOMALY:
                out.append(node)
            cache.set(node.name, detector)
        return out

    @staticmethod
    def _reset(nodes: Iterable[NodeUsage], cache: DetectorCache) -> None:
        for node in nodes:
            detector = cache.get(node.name)
            if detector is not None:
                detector.reset()

    def relieved(self, node: NodeUsage, prod: bool) -> None:
        """``node`` went under its high thresholds during the round: its detector starts over."""
        self._reset([node], self._prod_detectors if prod else self._node_detectors)

    @staticmethod
    def _mark_normal(nodes: Iterable[NodeUsage], cache: DetectorCache) -> None:
        for node in nodes:
            detector = cache.get(node.name)
            if detector is not None:
                detector.mark(True)

    # ------------------------------------------------------------------------------------------ balance

    def balance(self, snap: Snapshot, evictor: Evictor) -> None:
        self.placements = []
        if self.args.paused:
            self.log.info("LowNodeLoad is paused and will do nothing")
            return
        processed: set[str] = set()
        for pool in self.args.node_pools:
            self._process_pool(pool, snap, evictor, processed)

    def _pool_nodes(self, pool: NodePool, snap: Snapshot, processed: set[str]) -> list[NodeInfo]:
        # Upstream filterNodes: a pool without a selector takes every node, even one an earlier pool drained.
        if pool.node_selector is None:
            return list(snap.nodes.values())
        return [n for n in snap.nodes.values() if n.name not in processed and pool.node_selector.matches(n.labels)]

    def _process_pool(self, pool: NodePool, snap: Snapshot, evictor: Evictor, processed: set[str]) -> None:
        nodes = self._pool_nodes(pool, snap, processed)
        if not nodes:
            self.log.info("LowNodeLoad: no nodes in pool", extra={"pool": pool.name})
            return
        low, high, prod_low, prod_high = new_thresholds(pool.use_deviation_thresholds, pool.low_thresholds,
                                                        pool.high_thresholds, pool.prod_low_thresholds,
                                                        pool.prod_high_thresholds)
        names = list(low)
        usages = node_usages(nodes, names, snap, self.args.node_metric_expiration_seconds)
        set_thresholds(usages, low, high, prod_low, prod_high, names, pool.use_deviation_thresholds)
        classes = classify(usages.values())
        self.log.info("LowNodeLoad: pool classified", extra={
            "pool": pool.name, "nodes": len(nodes), "low_nodes": len(classes.low), "high_nodes": len(classes.high),
            "prod_low_nodes": len(classes.prod_low), "prod_high_nodes": len(classes.prod_high),
            "both_low_nodes": len(classes.both_low), "low_thresholds": low, "high_thresholds": high})
        if not classes.high and not classes.prod_high:
            return
        abnormal = self._abnormal(classes.high, self._node_detectors, pool.anomaly_condition)
        abnormal_prod = self._abnormal(classes.prod_high, self._prod_detectors, pool.anomaly_condition)
        if not abnormal and not abnormal_prod:
            self.log.info("LowNodeLoad: no node overloaded for enough consecutive rounds yet",
                          extra={"pool": pool.name})
            return
        if not classes.low and not classes.prod_low and not classes.both_low:
            self.log.info("LowNodeLoad: no node is underutilized, nothing to do", extra={"pool": pool.name})
            return
        self._reset(classes.low, self._node_detectors)
        self._reset(classes.prod_low, self._prod_detectors)
        self._reset(classes.both_low, self._node_detectors)
        all_low = len(classes.low) + len(classes.prod_low) + len(classes.both_low)
        if all_low <= self.args.number_of_nodes or all_low == len(nodes):
            return
        sort_nodes_by_usage(abnormal, pool.resource_weights, ascending=False, prod=False)
        sort_nodes_by_usage(abnormal_prod, pool.resource_weights, ascending=False, prod=True)
        _Round(self, pool, snap, evictor, names, usages, high, prod_high).run(abnormal, abnormal_prod, classes)
        self._mark_normal(abnormal, self._node_detectors)
        self._mark_normal(abnormal_prod, self._prod_detectors)
        processed.update(n.name for n in classes.high)


def _reason(node: NodeUsage, prod: bool, percents: Mapping[str, float]) -> str:
    """``overUtilizedEvictionReason``."""
    kind = "prod" if prod else "node"
    used = usage_percentages(node, prod)
    over = overutilized(node.current(prod), node.high_threshold(prod))
    parts = [f"{kind} {name} usage({used.get(name, 0.0):.2f}%)>threshold({percents.get(name, 0.0):.2f}%)"
             for name in sorted(percents) if name in over]
    return "node is overutilized, " + ", ".join(parts)


class _Round:
    """One pool's eviction pass (``evictPodsFromSourceNodes``)."""

    def __init__(self, plugin: LowNodeLoad, pool: NodePool, snap: Snapshot, evictor: Evictor, names: list[str],
                 usages: Mapping[str, NodeUsage], high: Mapping[str, float], prod_high: Mapping[str, float]) -> None:
        self.plugin = plugin
        self.pool = pool
        self.evictor = evictor
        self.names = names
        self.percents = {False: high, True: prod_high}
        # Requests already on each target plus those planned to move there, for the fit of the next pod.
        self.requested = {name: requested_on(snap.pods_by_node.get(name, [])) for name in usages}

    def _available(self, targets: list[NodeUsage], prod: bool) -> dict[str, int]:
        """``targetAvailableUsage``: the room under the high thresholds, summed over ``targets``."""
        return {name: sum(t.high_threshold(prod)[name] - t.current(prod)[name] for t in targets)
                for name in self.names}

    def run(self, sources: list[NodeUsage], prod_sources: list[NodeUsage], classes: Classes) -> None:
        low_targets = sorted(classes.low, key=lambda n: n.name)
        both = sorted(classes.both_low, key=lambda n: n.name)
        prod_targets = sorted(classes.prod_low, key=lambda n: n.name)
        only_node = self._available(low_targets, False)
        both_node = self._available(both, False)
        prod_only = self._available(prod_targets, True)
        both_prod = self._available(both, True)
        node_total = {name: only_node[name] + both_node[name] for name in self.names}
        targets = low_targets + both
        sort_nodes_by_usage(targets, self.pool.resource_weights, ascending=True, prod=False)
        self._balance(sources, targets, node_total, prod=False)
        # What the node pass left of the both-low room is all the prod pass may still use there.
        for name in self.names:
            both_node[name] = min(both_node[name], node_total[name])
        prod_total = {name: prod_only[name] + min(both_prod[name], both_node[name]) for name in self.names}
        prod_all = prod_targets + both
        sort_nodes_by_usage(prod_all, self.pool.resource_weights, ascending=True, prod=True)
        self._balance(prod_sources, prod_all, prod_total, prod=True)

    def _fits_with_threshold(self, pod: PodInfo, metric: Mapping[str, int], targets: list[NodeUsage],
                             prod: bool) -> str | None:
        """``podFitsAnyNodeWithThreshold``: the first target the pod fits whose usage stays at or under its high
        threshold with the pod's usage added; the usage (and the requests) are booked there."""
        for target in targets:
            if target.name == pod.node:
                continue
            if node_fit_reasons(pod, target.node, self.requested[target.name]):
                continue
            usage = target.current(prod)
            limits = target.high_threshold(prod)
            added = {name: (1 if name == PODS else metric.get(name, 0)) for name in limits if name in usage}
            if any(usage[name] + added[name] > limits[name] for name in added):
                continue
            for name, amount in added.items():
                usage[name] += amount
            booked = self.requested[target.name]
            for name, amount in pod.requests.items():
                booked[name] = booked.get(name, 0) + amount
            booked[PODS] = booked.get(PODS, 0) + 1
            return target.name
        return None

    def _balance(self, sources: list[NodeUsage], targets: list[NodeUsage], available: dict[str, int],
                 prod: bool) -> None:
        """``balancePods``."""
        if not targets:
            return
        for source in sources:
            planned: dict[tuple[str, str], str] = {}
            removable: list[PodInfo] = []
            for pod in source.prod_pods if prod else source.all_pods:
                if not self.plugin.pod_filter(pod, self.evictor):
                    continue
                if self.plugin.args.node_fit:
                    metric = source.pod_metrics.get(pod.key)
                    target = self._fits_with_threshold(pod, metric, targets, prod) if metric is not None else None
                    if target is None:
                        continue
                    planned[pod.key] = target
                removable.append(pod)
            if not removable:
                continue
            sort_pods_for_eviction(source, removable, self.pool.resource_weights, prod)
            if not self._evict_pods(source, removable, available, planned, prod):
                return

    def _keep_going(self, source: NodeUsage, available: Mapping[str, int], prod: bool) -> bool:
        """``continueEvictionCond``: the source is still over its high threshold and the targets have room."""
        if not overutilized(source.current(prod), source.high_threshold(prod)):
            self.plugin.relieved(source, prod)
            return False
        return all(available.get(name, 1) >= 1 for name in self.names)

    def _evict_pods(self, source: NodeUsage, pods: list[PodInfo], available: dict[str, int],
                    planned: Mapping[tuple[str, str], str], prod: bool) -> bool:
        """``evictPods``; False once the round's total limit is reached (no source can evict any more)."""
        plugin = self.plugin
        for pod in pods:
            if not self._keep_going(source, available, prod):
                return True
            if self.evictor.total_limit_reached():
                return False
            if self.evictor.node_limit_reached(source.name):
                return True
            if not plugin.pod_filter(pod, self.evictor):
                continue
            if plugin.args.dry_run:
                plugin.log.info("LowNodeLoad dry-run: would evict pod",
                                extra={"pod": str(pod), "node": source.name, "pool": self.pool.name})
            elif not self.evictor.evict(pod, _reason(source, prod, self.percents[prod])):
                continue
            metric = source.pod_metrics.get(pod.key)
            if metric is None:
                continue
            plugin.placements.append(Placement(pod, source.name, planned.get(pod.key, ""), dict(metric), prod))
            for name in available:
                amount = 1 if name == PODS else metric.get(name, 0)
                available[name] -= amount
                source.usage[name] = source.usage.get(name, 0) - amount
                if prod:
                    source.prod_usage[name] = source.prod_usage.get(name, 0) - amount
        return True


def new_plugin(args: Mapping[str, Any] | None, handle: Handle) -> LowNodeLoad:
    """The registry's factory: parses ``args`` (ConfigError naming the field) and builds the plugin."""
    return LowNodeLoad(parse_args(args), handle)
