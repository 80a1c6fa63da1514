"""Filter and prioritize: upstream's ``filterNodeUsage`` and least-used score over a :class:`NodeStore`, and the
extender protocol's ``ExtenderArgs`` / ``ExtenderFilterResult`` / ``HostPriorityList`` around them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import PriorityClass
from koordlet.apis.gojson import member
from koordlet.companion.extender.args import CPU, MEMORY
from koordlet.companion.extender.gates import EST_MAX
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

    # filter_views and score_views apply upstream's formulas to views, node by node (the ``Nodes`` form, whose
    # nodes may be the request's own).  The names-only form (nodeCacheCapable, what large clusters configure)
    # compares the pod's estimate with the store's gate table instead (filter_names, _host_scores; see
    # :mod:`koordlet.companion.extender.gates`), falling back on the formulas for a node without gates and for a
    # pod estimated beyond their range.  The per-node loops allocate no container per node but the answer's.

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
        est_cpu, est_mem = estimate_pod(pod, self.args.estimated_scaling_factors)
        is_prod = pod.priority is PriorityClass.PROD
        now = self._clock()
        append = passed.append
        for name, view in zip(names, views, strict=True):
            reason = self._filter_one(view, est_cpu, est_mem, is_prod, now)
            if reason is None:
                append(name)
            else:
                failed[name] = reason
        return passed, failed

    def _filter_one(self, view: NodeView | None, est_cpu: int, est_mem: int, is_prod: bool,
                    now: float) -> str | None:
        """Upstream's filter of one node for a non-DaemonSet pod: the reason it fails, None when it passes."""
        args = self.args
        if view is None or not view.known:
            return REASON_UNKNOWN_NODE
        if not view.has_metric:
            return None
        if args.filter_expired_node_metrics and now >= view.expires_at:
            return None if args.enable_schedule_when_node_metrics_expired else REASON_NODE_METRIC_EXPIRED
        if not view.node_metric_ok:
            return None
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
            return _REASON_AGG_CPU if aggregated else _REASON_CPU
        total = view.alloc_mem
        if thr_mem and total and (used_mem + est_mem) / total * 100 >= thr_mem + 0.5:
            return _REASON_AGG_MEMORY if aggregated else _REASON_MEMORY
        return None

    def score_views(self, pod: PodInfo, views: list[NodeView | None]) -> list[int]:
        """Upstream scores (0..100) per node, in input order."""
        est_cpu, est_mem = estimate_pod(pod, self.args.estimated_scaling_factors)
        prod = pod.priority is PriorityClass.PROD and self.args.score_according_prod_usage
        now = self._clock()
        return [self._score_one(view, est_cpu, est_mem, prod, now) for view in views]

    def _score_one(self, view: NodeView | None, est_cpu: int, est_mem: int, prod: bool, now: float) -> int:
        """Upstream's score (0..100) of one node."""
        if (view is None or not view.known or not view.has_metric or now >= view.expires_at
                or not view.node_metric_ok):
            return 0
        used_cpu, used_mem = view.prod_used if prod else view.score_used
        used_cpu += est_cpu
        used_mem += est_mem
        cap = view.alloc_cpu
        score = self._w_cpu * ((cap - used_cpu) * MAX_NODE_SCORE // cap) if cap and used_cpu <= cap else 0
        cap = view.alloc_mem
        if cap and used_mem <= cap:
            score += self._w_mem * ((cap - used_mem) * MAX_NODE_SCORE // cap)
        return score // self._w_sum

    def filter_names(self, pod: PodInfo, names: list[str]) -> tuple[list[str], dict[str, str]]:
        """:meth:`filter_views` of the named nodes as the store has them."""
        args = self.args
        est_cpu, est_mem = estimate_pod(pod, args.estimated_scaling_factors)
        if pod.daemonset or not (0 <= est_cpu <= EST_MAX and 0 <= est_mem <= EST_MAX):
            return self.filter_views(pod, names, self.store.views(names))
        is_prod = pod.priority is PriorityClass.PROD
        now = self._clock()
        expired = None if args.enable_schedule_when_node_metrics_expired else REASON_NODE_METRIC_EXPIRED
        passed: list[str] = []
        failed: dict[str, str] = {}
        append = passed.append
        with self.store.reading() as (table, views):
            slots = table.slots
            view_of = views.get
            expires = table.expires
            cpu_from, mem_from, aggregated = ((table.prod_cpu_from, table.prod_mem_from, table.prod_aggregated)
                                              if is_prod else (table.cpu_from, table.mem_from, table.aggregated))
            for name in names:
                slot = slots.get(name, -1)  # -1, not None: the comparisons below stay on ints
                if slot < 0:
                    reason = self._filter_one(view_of(name), est_cpu, est_mem, is_prod, now)
                elif now >= expires[slot]:
                    reason = expired
                elif est_cpu >= cpu_from[slot]:
                    reason = _REASON_AGG_CPU if aggregated[slot] else _REASON_CPU
                elif est_mem >= mem_from[slot]:
                    reason = _REASON_AGG_MEMORY if aggregated[slot] else _REASON_MEMORY
                else:
                    append(name)
                    continue
                if reason is None:
                    append(name)
                else:
                    failed[name] = reason
        return passed, failed

    def _host_scores(self, pod: PodInfo, names: list[str]) -> list[int]:
        """The extender scores (0..10) of the named nodes as the store has them."""
        args = self.args
        est_cpu, est_mem = estimate_pod(pod, args.estimated_scaling_factors)
        if not (0 <= est_cpu <= EST_MAX and 0 <= est_mem <= EST_MAX):
            return _extender_scores(self.score_views(pod, self.store.views(names)))
        prod = pod.priority is PriorityClass.PROD and args.score_according_prod_usage
        now = self._clock()
        w_cpu, w_mem, w_sum = self._w_cpu, self._w_mem, self._w_sum
        out: list[int] = []
        append = out.append
        with self.store.reading() as (table, views):
            slots = table.slots
            view_of = views.get
            expires, cpu_alloc, mem_alloc = table.score_expires, table.cpu_alloc, table.mem_alloc
            cpu_free, mem_free = ((table.prod_cpu_free, table.prod_mem_free) if prod
                                  else (table.cpu_free, table.mem_free))
            for name in names:
                slot = slots.get(name, -1)
                if slot < 0:
                    score = self._score_one(view_of(name), est_cpu, est_mem, prod, now)
                elif now >= expires[slot]:
                    score = 0
                else:
                    free = cpu_free[slot]
                    score = w_cpu * ((free - est_cpu) * MAX_NODE_SCORE // cpu_alloc[slot]) if est_cpu <= free else 0
                    free = mem_free[slot]
                    if est_mem <= free:
                        score += w_mem * ((free - est_mem) * MAX_NODE_SCORE // mem_alloc[slot])
                    score //= w_sum
                append(score * MAX_EXTENDER_PRIORITY // MAX_NODE_SCORE)
        return out

    def prioritize_names(self, pod: PodInfo, names: list[str]) -> list[tuple[str, int]]:
        """Extender scores (0..10) per node."""
        return list(zip(names, self._host_scores(pod, names), strict=True))

    # -- protocol

    def _decode(self, body: Any) -> tuple[PodInfo, list[str], list[NodeView | None] | None, list[Any] | None]:
        """The pod, the candidate names, their views when a node is answered from the request's copy of it (else
        None: the store's gate table answers by name), and the NodeList items when the request has them."""
        args = gojson.mapping(body, "ExtenderArgs")
        pod = parse_pod(member(args, "Pod"))
        nodes = member(args, "Nodes")
        if nodes is not None:
            items = member(gojson.mapping(nodes, "ExtenderArgs.Nodes"), "items") or []
            if not isinstance(items, list):
                raise ParseError("ExtenderArgs.Nodes.items: expected a list")
            names, views, all_stored = self.store.request_views(items)
            return pod, names, None if all_stored else views, items
        names = member(args, "NodeNames")
        if names is None:
            raise ParseError("ExtenderArgs: neither Nodes nor NodeNames is set")
        # set(map(type, ...)) runs in C: a generator over 5,000 names costs as much as the filter itself.
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise ParseError("ExtenderArgs.NodeNames: expected a list of node names")
        return pod, names, None, None

    def filter(self, body: Any) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``; the result uses the form of the request.

        Raises ParseError for a request that is not ExtenderArgs."""
        pod, names, views, items = self._decode(body)
        if views is None:
            passed, failed = self.filter_names(pod, names)
        else:
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
        names, scores = self._prioritized(body)
        return [{"Host": name, "Score": score} for name, score in zip(names, scores, strict=True)]

    def prioritize_body(self, body: Any) -> bytes:
        """:meth:`prioritize` as the HTTP answer's bytes (what ``json.dumps`` of it with compact separators gives),
        made without building and encoding a dict per node: for 5,000 nodes that was half the request's cost."""
        return encode_host_priorities(*self._prioritized(body))

    def _prioritized(self, body: Any) -> tuple[list[str], list[int]]:
        pod, names, views, _ = self._decode(body)
        if views is None:
            return names, self._host_scores(pod, names)
        return names, _extender_scores(self.score_views(pod, views))


def _extender_scores(scores: list[int]) -> list[int]:
    """Upstream scores (0..100) scaled to the extender's 0..10."""
    return [score * MAX_EXTENDER_PRIORITY // MAX_NODE_SCORE for score in scores]


_SCORE_TAILS: Final = tuple(f"{score}}}".encode() for score in range(MAX_EXTENDER_PRIORITY + 1))
_HOST_HEADS: dict[str, bytes] = {}
"""Node name -> ``{"Host":"<name>","Score":`` (JSON-escaped as ``json.dumps`` escapes it)."""
HOST_HEADS_KEPT: Final = 100_000
"""Encoded names kept between requests; past it the cache starts afresh (a request may carry any names)."""


def encode_host_priorities(names: list[str], scores: list[int]) -> bytes:
    """``json.dumps([{"Host": name, "Score": score}, ...], separators=(",", ":"))`` as bytes, byte for byte."""
    heads = _HOST_HEADS
    if len(heads) > HOST_HEADS_KEPT:
        heads.clear()
    parts: list[bytes] = []
    append = parts.append
    for name, score in zip(names, scores, strict=True):
        head = heads.get(name)
        if head is None:
            head = heads[name] = f'{{"Host":{json.dumps(name)},"Score":'.encode()
        append(head + _SCORE_TAILS[score] if 0 <= score <= MAX_EXTENDER_PRIORITY
               else head + f"{score}}}".encode())
    return b"[" + b",".join(parts) + b"]"
