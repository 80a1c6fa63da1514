"""Filter and prioritize: upstream's ``filterNodeUsage`` and least-used score over a :class:`NodeStore`, and the
extender protocol's ``ExtenderArgs`` / ``ExtenderFilterResult`` / ``HostPriorityList`` around them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import PriorityClass
from koordlet.apis.gojson import member
from koordlet.companion.extender.args import CPU, MEMORY
from koordlet.companion.extender.pods import PodInfo, estimate_pod, parse_pod
from koordlet.companion.extender.store import NodeStore
from koordlet.companion.extender.views import NodeView
from koordlet.errors import ParseError

MAX_NODE_SCORE: Final = 100
"""kube-scheduler ``framework.MaxNodeScore``: the plugin's score range."""
MAX_EXTENDER_PRIORITY: Final = 10
"""``extenderv1.MaxExtenderPriority``: kube-scheduler multiplies an extender's score by weight * 10."""

REASON_NODE_METRIC_EXPIRED: Final = "node(s) nodeMetric expired"
REASON_USAGE_EXCEED_THRESHOLD: Final = "node(s) {} usage exceed threshold"
REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD: Final = "node(s) {} aggregated usage exceed threshold"
REASON_UNKNOWN_NODE: Final = "node(s) unknown to the load-aware extender: no Node object seen"

_REASON_CPU: Final = REASON_USAGE_EXCEED_THRESHOLD.format(CPU)
_REASON_MEMORY: Final = REASON_USAGE_EXCEED_THRESHOLD.format(MEMORY)
_REASON_AGG_CPU: Final = REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD.format(CPU)
_REASON_AGG_MEMORY: Final = REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD.format(MEMORY)


class LoadAwareExtender:
    """Filter and prioritize over a :class:`NodeStore`, in process or behind :func:`make_server`."""

    def __init__(self, store: NodeStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.args = store.args
        self._clock = clock
        weights = self.args.resource_weights
        self._w_cpu = weights.get(CPU, 0)
        self._w_mem = weights.get(MEMORY, 0)
        self._w_sum = sum(weights.values())

    # -- core

    # The per-node loops allocate no container per node (names and views come as parallel lists, scores
    # leave as plain ints): at 5,000 nodes a tuple per node means a garbage collection every request.

    def filter_views(self, pod: PodInfo, names: list[str], views: list[NodeView | None]) -> tuple[list[str],
                                                                                                   dict[str, str]]:
        """Names that pass, and the failed ones with upstream's reason."""
        passed: list[str] = []
        failed: dict[str, str] = {}
        if pod.daemonset:
            for name, view in zip(names, views, strict=True):
                if view is None or not view.known:
                    failed[name] = REASON_UNKNOWN_NODE
                else:
                    passed.append(name)
            return passed, failed
        args = self.args
        est_cpu, est_mem = estimate_pod(pod, args.estimated_scaling_factors)
        is_prod = pod.priority is PriorityClass.PROD
        now = self._clock()
        check_expired = args.filter_expired_node_metrics
        expired_passes = args.enable_schedule_when_node_metrics_expired
        append = passed.append
        for name, view in zip(names, views, strict=True):
            if view is None or not view.known:
                failed[name] = REASON_UNKNOWN_NODE
                continue
            if not view.has_metric:
                append(name)
                continue
            if check_expired and now >= view.expires_at:
                if expired_passes:
                    append(name)
                else:
                    failed[name] = REASON_NODE_METRIC_EXPIRED
                continue
            if not view.node_metric_ok:
                append(name)
                continue
            prod_thresholds = view.prod_thresholds
            if is_prod and prod_thresholds is not None:
                thr_cpu, thr_mem = prod_thresholds
                used_cpu, used_mem = view.prod_used
                aggregated = False
            else:
                thr_cpu, thr_mem = view.thresholds
                used_cpu, used_mem = view.filter_used
                aggregated = view.aggregated_filter
            # round(u) > thr  <=>  u >= thr + 0.5 for u >= 0, exactly as Go's math.Round compares.
            total = view.alloc_cpu
            if thr_cpu and total and (used_cpu + est_cpu) / total * 100 >= thr_cpu + 0.5:
                failed[name] = _REASON_AGG_CPU if aggregated else _REASON_CPU
                continue
            total = view.alloc_mem
            if thr_mem and total and (used_mem + est_mem) / total * 100 >= thr_mem + 0.5:
                failed[name] = _REASON_AGG_MEMORY if aggregated else _REASON_MEMORY
                continue
            append(name)
        return passed, failed

    def score_views(self, pod: PodInfo, views: list[NodeView | None]) -> list[int]:
        """Upstream scores (0..100) per node, in input order."""
        args = self.args
        est_cpu, est_mem = estimate_pod(pod, args.estimated_scaling_factors)
        prod = pod.priority is PriorityClass.PROD and args.score_according_prod_usage
        now = self._clock()
        w_cpu, w_mem, w_sum = self._w_cpu, self._w_mem, self._w_sum
        out: list[int] = []
        append = out.append
        for view in views:
            if (view is None or not view.known or not view.has_metric or now >= view.expires_at
                    or not view.node_metric_ok):
                append(0)
                continue
            used_cpu, used_mem = view.prod_used if prod else view.score_used
            used_cpu += est_cpu
            used_mem += est_mem
            cap = view.alloc_cpu
            score = w_cpu * ((cap - used_cpu) * MAX_NODE_SCORE // cap) if cap and used_cpu <= cap else 0
            cap = view.alloc_mem
            if cap and used_mem <= cap:
                score += w_mem * ((cap - used_mem) * MAX_NODE_SCORE // cap)
            append(score // w_sum)
        return out

    def filter_names(self, pod: PodInfo, names: list[str]) -> tuple[list[str], dict[str, str]]:
        return self.filter_views(pod, names, self.store.views(names))

    def prioritize_names(self, pod: PodInfo, names: list[str]) -> list[tuple[str, int]]:
        """Extender scores (0..10) per node."""
        scores = self.score_views(pod, self.store.views(names))
        return [(name, score * MAX_EXTENDER_PRIORITY // MAX_NODE_SCORE) for name, score in zip(names, scores,
                                                                                                 strict=True)]

    # -- protocol

    def _decode(self, body: Any) -> tuple[PodInfo, list[str], list[NodeView | None], list[Any] | None]:
        """The pod, the candidate names and their views, and the NodeList items when the request has them."""
        args = gojson.mapping(body, "ExtenderArgs")
        pod = parse_pod(member(args, "Pod"))
        nodes = member(args, "Nodes")
        if nodes is not None:
            items = member(gojson.mapping(nodes, "ExtenderArgs.Nodes"), "items") or []
            if not isinstance(items, list):
                raise ParseError("ExtenderArgs.Nodes.items: expected a list")
            names, views = self.store.request_views(items)
            return pod, names, views, items
        names = member(args, "NodeNames")
        if names is None:
            raise ParseError("ExtenderArgs: neither Nodes nor NodeNames is set")
        if not isinstance(names, list) or not all(type(n) is str for n in names):
            raise ParseError("ExtenderArgs.NodeNames: expected a list of node names")
        return pod, names, self.store.views(names), None

    def filter(self, body: Any) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``; the result uses the form of the request.

        Raises ParseError for a request that is not ExtenderArgs."""
        pod, names, views, items = self._decode(body)
        passed, failed = self.filter_views(pod, names, views)
        if items is None:
            return {"Nodes": None, "NodeNames": passed, "FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                    "Error": ""}
        if failed:
            items = [item for name, item in zip(names, items, strict=True) if name not in failed]
        return {"Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items},
                "NodeNames": None, "FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}

    def prioritize(self, body: Any) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList``."""
        pod, names, views, _ = self._decode(body)
        scores = self.score_views(pod, views)
        return [{"Host": name, "Score": score * MAX_EXTENDER_PRIORITY // MAX_NODE_SCORE}
                for name, score in zip(names, scores, strict=True)]
