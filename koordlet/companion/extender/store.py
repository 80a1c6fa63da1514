"""The extender's per-node state, fed by the companion's Node, NodeMetric and pod watches."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import PriorityClass
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import DEFAULT_REPORT_INTERVAL_SECONDS, NodeMetric, NodeMetricStatus
from koordlet.companion.extender.args import CPU, MEMORY, LoadAwareArgs
from koordlet.companion.extender.pods import PodInfo, estimate_pod, parse_pod, quantity_value
from koordlet.companion.extender.table import GateTable
from koordlet.companion.extender.views import (
    ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    Assigned,
    NodeRecord,
    NodeView,
    Profile,
    build_view,
    compact,
    profile_of,
)
from koordlet.errors import ParseError

log = logging.getLogger(__name__)

_NO_ANNOTATIONS: Final[Mapping[str, str]] = {}


def _signature(cpu: Any, memory: Any, annotations: Mapping[str, str]) -> tuple[Any, ...]:
    """What a node's view depends on of its Node object: allocatable CPU and memory as written, and the two
    annotations that change thresholds and allocatable.  A Node update with the same signature changes nothing."""
    return (cpu, memory, annotations.get(ANNOTATION_CUSTOM_USAGE_THRESHOLDS),
            annotations.get(ANNOTATION_NODE_RAW_ALLOCATABLE))


class NodeStore:
    """Thread-safe per-node state: Node allocatable and annotations, the latest NodeMetric status, and
    the pods assigned to each node (upstream ``podAssignCache``).

    Writers (Node and NodeMetric watches, the pod watch) take the lock and rebuild the node's
    :class:`NodeView`; readers take the lock only to collect views.  Requests only read: what a request
    carries never changes the store (:meth:`request_views`)."""

    def __init__(self, args: LoadAwareArgs | None = None, clock: Callable[[], float] = time.time) -> None:
        self.args = args if args is not None else LoadAwareArgs()
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, NodeRecord] = {}
        self._views: dict[str, NodeView] = {}
        self._pod_nodes: dict[str, str] = {}
        self._table = GateTable(self.args)

    # -- nodes

    def update_node(self, name: str, allocatable: Mapping[str, Any],
                    annotations: Mapping[str, str] | None = None) -> None:
        """Records a Node's ``status.allocatable`` (quantities) and annotations.

        ``node.koordinator.sh/raw-allocatable`` replaces allocatable as upstream ``EstimateNode`` does
        when amplification is on."""
        annotations = annotations or {}
        self._update_node(name, _signature(allocatable.get(CPU), allocatable.get(MEMORY), annotations))

    def _update_node(self, name: str, signature: tuple[Any, ...]) -> None:
        alloc, profile = self._node_inputs(name, signature)
        with self._lock:
            record = self._records.get(name)
            if record is None:
                record = self._records[name] = NodeRecord(name)
            record.known, record.alloc, record.signature, record.profile = True, alloc, signature, profile
            self._rebuild(record)

    def _node_inputs(self, name: str, signature: tuple[Any, ...]) -> tuple[tuple[int, int], Profile]:
        """Allocatable (CPU milli-cores, memory bytes) and the threshold profile of a Node's signature."""
        cpu_text, mem_text, thresholds, raw = signature
        alloc_cpu = quantity_value(CPU, cpu_text, f"node {name}: allocatable.cpu") if cpu_text is not None else 0
        alloc_mem = quantity_value(MEMORY, mem_text, f"node {name}: allocatable.memory") if mem_text is not None else 0
        if raw:
            try:
                raw_alloc = gojson.mapping(json.loads(raw), ANNOTATION_NODE_RAW_ALLOCATABLE)
                if CPU in raw_alloc:
                    alloc_cpu = quantity_value(CPU, raw_alloc[CPU], f"{ANNOTATION_NODE_RAW_ALLOCATABLE}.cpu")
                if MEMORY in raw_alloc:
                    alloc_mem = quantity_value(MEMORY, raw_alloc[MEMORY], f"{ANNOTATION_NODE_RAW_ALLOCATABLE}.memory")
            except (ValueError, TypeError, RecursionError) as exc:  # upstream falls back to status.allocatable
                log.debug("ignoring raw-allocatable annotation", extra={"node": name, "reason": str(exc)})
        return (alloc_cpu, alloc_mem), profile_of(self.args, thresholds)

    def update_node_json(self, node: Any) -> None:
        """:meth:`update_node` from a ``v1.Node`` object."""
        node = gojson.mapping(node, "Node")
        metadata = gojson.mapping(member(node, "metadata"), "Node.metadata")
        name = member(metadata, "name")
        if not isinstance(name, str) or not name:
            raise ParseError("Node.metadata.name: missing")
        status = gojson.mapping(member(node, "status"), f"Node {name}.status")
        self.update_node(name, gojson.mapping(member(status, "allocatable"), f"Node {name}.status.allocatable"),
                         gojson.mapping(member(metadata, "annotations"), f"Node {name}.metadata.annotations"))

    def remove_node(self, name: str) -> None:
        with self._lock:
            record = self._records.get(name)
            if record is not None:
                record.known, record.signature = False, ()
                self._rebuild(record)

    # -- node metrics

    def update_node_metric(self, name: str, status: NodeMetricStatus,
                           report_interval_seconds: float = DEFAULT_REPORT_INTERVAL_SECONDS) -> None:
        """Records the latest NodeMetric status of a node and its spec's report interval."""
        with self._lock:
            record = self._records.get(name)
            if record is None:
                record = self._records[name] = NodeRecord(name)
            record.metric, record.has_metric = compact(status), True
            record.report_interval_seconds = float(report_interval_seconds)
            self._rebuild(record)

    def update_node_metric_json(self, obj: Any) -> None:
        """:meth:`update_node_metric` from a whole NodeMetric object."""
        metric = NodeMetric.from_json(obj)
        interval = (metric.collect_policy.report_interval_seconds if metric.collect_policy is not None
                    else DEFAULT_REPORT_INTERVAL_SECONDS)
        self.update_node_metric(metric.name, metric.status, interval)

    def remove_node_metric(self, name: str) -> None:
        with self._lock:
            record = self._records.get(name)
            if record is not None:
                record.metric, record.has_metric = None, False
                self._rebuild(record)

    # -- assignments

    def assign_pod(self, node_name: str, pod: Any, timestamp: float | None = None) -> None:
        """Records a pod placed on ``node_name`` (a ``v1.Pod`` object or a :class:`PodInfo`).

        The assignment time is ``timestamp``, else the pod's ``PodScheduled`` transition, else now, as in
        upstream ``podAssignCache.assign``.  Terminated pods are removed instead."""
        info = pod if isinstance(pod, PodInfo) else parse_pod(pod)
        if info.terminated:
            self.unassign_pod(info.uid)
            return
        if not node_name:
            return
        when = timestamp if timestamp is not None else (
            info.scheduled_time if info.scheduled_time is not None else self._clock())
        assigned = Assigned(info.namespace, info.name, info.priority is PriorityClass.PROD, when,
                             estimate_pod(info, self.args.estimated_scaling_factors))
        with self._lock:
            previous = self._pod_nodes.get(info.uid)
            if previous is not None and previous != node_name:
                self._drop_pod(previous, info.uid)
            record = self._records.get(node_name)
            if record is None:
                record = self._records[node_name] = NodeRecord(node_name)
            record.assigned[info.uid] = assigned
            self._pod_nodes[info.uid] = node_name
            self._rebuild(record)

    def unassign_pod(self, uid: str) -> None:
        """Forgets a pod (deleted, terminated or unreserved) by ``metadata.uid``."""
        with self._lock:
            node_name = self._pod_nodes.pop(uid, None)
            if node_name is not None:
                self._drop_pod(node_name, uid)

    def _drop_pod(self, node_name: str, uid: str) -> None:
        record = self._records.get(node_name)
        if record is not None and record.assigned.pop(uid, None) is not None:
            self._rebuild(record)

    # -- reading

    def views(self, names: Iterable[str]) -> list[NodeView | None]:
        """The current view of each named node, None for a node never heard of."""
        get = self._views.get
        with self._lock:
            return list(map(get, names))

    @contextlib.contextmanager
    def reading(self) -> Iterator[tuple[GateTable, Mapping[str, NodeView]]]:
        """The gate table and the views, held still (under the lock) while a request reads them: a node's slot
        is several array entries, which a concurrent rebuild must not change half-way through a read."""
        with self._lock:
            yield self._table, self._views

    def view(self, name: str) -> NodeView | None:
        with self._lock:
            return self._views.get(name)

    def request_views(self, items: list[Any]) -> tuple[list[str], list[NodeView | None], bool]:
        """The names and views of the ``items`` of a NodeList a request carries, in order, and whether every
        view is the store's own (no node answered from the request's copy); the store is never changed by them.

        A node the store knows (from the Node watch) is answered from the store: a request cannot rewrite
        a real node's allocatable or thresholds, for itself or for anyone after it.  A node the store has
        no Node object of gets a view built from the request's copy for this answer only (with the
        NodeMetric and assignments the store has for that name), as a scheduler without a Node watch on
        our side expects; the next request starts again from the store."""
        names: list[str] = []
        views: list[NodeView | None] = []
        append_name = names.append
        append_view = views.append
        unknown: list[tuple[int, str, tuple[Any, ...]]] = []
        get_view = self._views.get
        with self._lock:
            for item in items:
                # kube-scheduler writes Node objects with their canonical lower-case keys: index them directly
                # (an ABC isinstance per node costs as much as the whole filter), fall back on odd input.
                try:
                    name = item["metadata"]["name"]
                except (KeyError, TypeError):
                    name = None
                view = get_view(name) if type(name) is str and name else None
                if view is None or not view.known:
                    try:
                        metadata = item["metadata"]
                        allocatable = item["status"]["allocatable"]
                        annotations = metadata.get("annotations") or _NO_ANNOTATIONS
                        signature = _signature(allocatable.get(CPU), allocatable.get(MEMORY), annotations)
                    except (KeyError, TypeError, AttributeError):
                        name, signature = self._node_signature(item, f"Nodes.items[{len(names)}]")
                    if type(name) is not str or not name:
                        raise ParseError(f"Nodes.items[{len(names)}].metadata.name: expected a node name, "
                                         f"got {name!r}")
                    unknown.append((len(names), name, signature))
                append_name(name)
                append_view(view)
        for i, name, signature in unknown:
            views[i] = self._transient_view(name, signature)
        return names, views, not unknown

    def _transient_view(self, name: str, signature: tuple[Any, ...]) -> NodeView:
        """The view of a node from a request's copy of its Node, not stored."""
        alloc, profile = self._node_inputs(name, signature)
        with self._lock:
            stored = self._records.get(name)
            record = NodeRecord(name, known=True, alloc=alloc, signature=signature, profile=profile)
            if stored is not None:
                record.metric, record.has_metric = stored.metric, stored.has_metric
                record.report_interval_seconds = stored.report_interval_seconds
                record.assigned = stored.assigned
            return self._build_view(record)

    @staticmethod
    def _node_signature(item: Any, where: str) -> tuple[str, tuple[Any, ...]]:
        """The slow, case-insensitive and type-checked reading of a Node for :meth:`request_views`."""
        item = gojson.mapping(item, where)
        metadata = gojson.mapping(member(item, "metadata"), f"{where}.metadata")
        name = member(metadata, "name")
        status = gojson.mapping(member(item, "status"), f"{where}.status")
        allocatable = gojson.mapping(member(status, "allocatable"), f"{where}.status.allocatable")
        annotations = gojson.mapping(member(metadata, "annotations"), f"{where}.metadata.annotations")
        return name, _signature(member(allocatable, CPU), member(allocatable, MEMORY), annotations)

    # -- precomputation (lock held)

    def _rebuild(self, record: NodeRecord) -> None:
        if not record.known and not record.has_metric and not record.assigned:
            # Node, NodeMetric and pods all gone: forget the node (upstream podAssignCache.tryCleanup).
            self._records.pop(record.name, None)
            self._views.pop(record.name, None)
            self._table.drop(record.name)
            return
        view = self._views[record.name] = self._build_view(record)
        self._table.put(view)


    def _build_view(self, record: NodeRecord) -> NodeView:
        return build_view(self.args, record)
