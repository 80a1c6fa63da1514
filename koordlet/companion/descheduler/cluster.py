"""One descheduling round's view of the cluster: nodes, the pods bound to them and the node usage NodeMetric
reports, listed from kube-apiserver at the start of the round (upstream reads the same objects through its
informers; a fresh list per round keeps the descheduler stateless between rounds)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client

from koordlet.apis import gojson
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import parse_time
from koordlet.apis.pod import pod_from_json
from koordlet.apis.quantity import int_value, milli_value
from koordlet.companion.extender.pods import parse_pod
from koordlet.companion.kube.client import NODEMETRIC_PLURAL, SLO_GROUP, SLO_VERSION, call_json
from koordlet.companion.metricdecode import decode_status
from koordlet.errors import ParseError

log = logging.getLogger(__name__)

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
LIST_PAGE_SIZE: Final = 500
"""Objects per list request; kube-apiserver pages large lists with ``continue`` tokens."""


@dataclass(frozen=True)
class NodeInfo:
    """What the descheduler needs of a ``v1.Node``."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    """``status.allocatable``: CPU in milli-cores, memory in bytes, other resources (pods...) in units."""
    unschedulable: bool
    taints: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any]
    ready: bool = True
    """False when the ``Ready`` condition is present and not True (upstream ``IsReady``)."""


@dataclass(frozen=True)
class PodInfo:
    """What the descheduler needs of a ``v1.Pod``."""

    namespace: str
    name: str
    uid: str
    node: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owners: tuple[Mapping[str, Any], ...]
    """``metadata.ownerReferences``."""
    priority: int | None
    """``spec.priority`` (None when the pod has none)."""
    requests: Mapping[str, int]
    """Pod requests (containers, init containers, overhead): CPU in milli-cores, memory in bytes."""
    raw: Mapping[str, Any]
    phase: str = ""
    priority_class_name: str = ""
    koord_priority: str = ""
    """Koordinator priority class with its default (``koord-prod``, ``koord-batch``...)."""
    koord_qos: str = ""
    """Koordinator QoS class with its default (``LSR``, ``LS``, ``BE``...; "" when unknown)."""
    kube_qos: str = ""
    """Kubernetes QoS class (``Guaranteed``, ``Burstable``, ``BestEffort``)."""
    creation_time: float = 0.0
    """``metadata.creationTimestamp``, seconds since the epoch (0 when absent)."""

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Snapshot:
    """The cluster at the start of one round."""

    nodes: dict[str, NodeInfo]
    pods_by_node: dict[str, list[PodInfo]]
    """Pods bound to each node that is in :attr:`nodes` and not finished (Succeeded/Failed pods hold nothing)."""
    usage: dict[str, Mapping[str, int]]
    """Node usage from NodeMetric ``status.nodeMetric.nodeUsage`` (CPU milli-cores, memory bytes); a node with
    no NodeMetric, or one whose update time is unknown, is absent.  Freshness is a plugin's own argument
    (``nodeMetricExpirationSeconds``): check :meth:`usage_if_fresh`."""
    metric_update_times: dict[str, float] = field(default_factory=dict)
    """NodeMetric ``status.updateTime`` per node, seconds since the epoch."""
    pod_usage: dict[tuple[str, str], Mapping[str, int]] = field(default_factory=dict)
    """``status.podsMetric`` usage per (namespace, name), from every NodeMetric."""
    system_usage: dict[str, Mapping[str, int]] = field(default_factory=dict)
    """``status.nodeMetric.systemUsage`` per node (what is not any pod's)."""
    node_pod_usage: dict[str, dict[tuple[str, str], Mapping[str, int]]] = field(default_factory=dict)
    """``status.podsMetric`` of each node's own NodeMetric."""
    now: float = 0.0
    """When the snapshot was taken (seconds since the epoch)."""

    def pods(self) -> Iterator[PodInfo]:
        for pods in self.pods_by_node.values():
            yield from pods

    def usage_if_fresh(self, node: str, max_age_seconds: float) -> Mapping[str, int] | None:
        """Node usage when its NodeMetric was updated within ``max_age_seconds`` of :attr:`now`, else None
        (upstream ``isNodeMetricExpired``: such a node is left out of the round)."""
        updated = self.metric_update_times.get(node)
        if updated is None or node not in self.usage:
            return None
        if max_age_seconds > 0 and self.now - updated >= max_age_seconds:
            return None
        return self.usage[node]


def _quantity(resource: str, value: Any, where: str) -> int:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ParseError(f"{where}: expected a quantity, got {value!r}")
    try:
        return milli_value(value) if resource == CPU else int_value(value)
    except ValueError as exc:
        raise ParseError(f"{where}: {exc}") from None


def _str_map(obj: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in gojson.mapping(obj, where).items()}


def parse_node(obj: Any) -> NodeInfo:
    """A ``v1.Node`` as :class:`NodeInfo`; ParseError naming the field path on bad input."""
    node = gojson.mapping(obj, "Node")
    metadata = gojson.mapping(member(node, "metadata"), "Node.metadata")
    name = str(member(metadata, "name") or "")
    where = f"Node {name}"
    spec = gojson.mapping(member(node, "spec"), f"{where}.spec")
    status = gojson.mapping(member(node, "status"), f"{where}.status")
    allocatable_obj = gojson.mapping(member(status, "allocatable"), f"{where}.status.allocatable")
    allocatable = {str(res): _quantity(str(res), value, f"{where}.status.allocatable.{res}")
                   for res, value in allocatable_obj.items()}
    taints = tuple(gojson.mapping(t, f"{where}.spec.taints[{i}]")
                   for i, t in enumerate(gojson.array(member(spec, "taints"), f"{where}.spec.taints")))
    ready = all(member(c, "status") == "True" for c in gojson.array(member(status, "conditions"),
                                                                   f"{where}.status.conditions")
                if isinstance(c, Mapping) and member(c, "type") == "Ready")
    return NodeInfo(name=name, labels=_str_map(member(metadata, "labels"), f"{where}.metadata.labels"),
                    allocatable=allocatable, unschedulable=bool(member(spec, "unschedulable")), taints=taints,
                    raw=node, ready=ready)


def _timestamp(text: str, where: str) -> float:
    if not text:
        return 0.0
    try:
        return parse_time(text)
    except ValueError as exc:
        raise ParseError(f"{where}: {exc}") from None


def parse_pod_info(obj: Any) -> PodInfo:
    """A ``v1.Pod`` as :class:`PodInfo`; ParseError naming the field path on bad input."""
    pod = gojson.mapping(obj, "Pod")
    metadata = gojson.mapping(member(pod, "metadata"), "Pod.metadata")
    where = f"Pod {member(metadata, 'namespace')}/{member(metadata, 'name')}"
    try:
        parsed = parse_pod(pod, where)
        generic = pod_from_json(pod)
    except ParseError as exc:
        # Quantity errors do not name the pod; the log line must say which one was skipped.
        raise ParseError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    spec = gojson.mapping(member(pod, "spec"), f"{where}.spec")
    status = gojson.mapping(member(pod, "status"), f"{where}.status")
    owners = tuple(gojson.mapping(o, f"{where}.metadata.ownerReferences[{i}]") for i, o in enumerate(
        gojson.array(member(metadata, "ownerReferences"), f"{where}.metadata.ownerReferences")))
    raw_priority = member(spec, "priority")
    return PodInfo(
        namespace=parsed.namespace,
        name=parsed.name,
        uid=parsed.uid,
        node=parsed.node_name,
        labels=_str_map(member(metadata, "labels"), f"{where}.metadata.labels"),
        annotations=_str_map(member(metadata, "annotations"), f"{where}.metadata.annotations"),
        owners=owners,
        priority=raw_priority if isinstance(raw_priority, int) and not isinstance(raw_priority, bool) else None,
        requests={res: parsed.requests.get(res, 0) for res in (CPU, MEMORY)} | {
            res: value for res, value in parsed.requests.items() if res not in (CPU, MEMORY)},
        raw=pod,
        phase=str(member(status, "phase") or ""),
        priority_class_name=str(member(spec, "priorityClassName") or ""),
        koord_priority=parsed.priority.value,
        koord_qos=generic.qos.value,
        kube_qos=generic.kube_qos.value if generic.kube_qos is not None else "",
        creation_time=_timestamp(generic.creation_timestamp, f"{where}.metadata.creationTimestamp"),
    )


def _list_all(fn: Callable[..., Any], *args: Any, timeout: float, **kwargs: Any) -> list[Any]:
    items: list[Any] = []
    token = ""
    while True:
        extra = {"_continue": token} if token else {}
        body = call_json(fn, *args, limit=LIST_PAGE_SIZE, timeout=timeout, **kwargs, **extra)
        items.extend(body.get("items") or [])
        token = str((body.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


def build_snapshot(nodes: list[Any], pods: list[Any], node_metrics: list[Any], now: float) -> Snapshot:
    """A :class:`Snapshot` from listed objects; an object that does not parse is logged with its name and left
    out (one bad pod must not stop descheduling the rest of the cluster)."""
    snap = Snapshot(nodes={}, pods_by_node={}, usage={}, now=now)
    for obj in nodes:
        try:
            node = parse_node(obj)
        except ParseError as exc:
            log.warning("descheduler: skipping a node", extra={"error": str(exc)})
            continue
        snap.nodes[node.name] = node
        snap.pods_by_node[node.name] = []
    for obj in pods:
        try:
            pod = parse_pod_info(obj)
        except ParseError as exc:
            log.warning("descheduler: skipping a pod", extra={"error": str(exc)})
            continue
        if pod.node in snap.pods_by_node and pod.phase not in ("Succeeded", "Failed"):
            snap.pods_by_node[pod.node].append(pod)
    for obj in node_metrics:
        try:
            metric = gojson.mapping(obj, "NodeMetric", optional=False)
            name = str(member(gojson.mapping(member(metric, "metadata"), "NodeMetric.metadata"), "name") or "")
            status = decode_status(member(metric, "status"), f"NodeMetric {name}.status")
        except ParseError as exc:
            log.warning("descheduler: skipping a NodeMetric", extra={"error": str(exc)})
            continue
        if status.update_time is not None:
            snap.metric_update_times[name] = status.update_time
        usage = status.node_metric.node_usage if status.node_metric is not None else None
        if usage is not None and usage.cpu_milli is not None and usage.memory_bytes is not None:
            snap.usage[name] = {CPU: usage.cpu_milli, MEMORY: usage.memory_bytes}
        if status.node_metric is not None:
            system = status.node_metric.system_usage
            snap.system_usage[name] = {CPU: system.cpu_milli or 0, MEMORY: system.memory_bytes or 0}
        on_node = snap.node_pod_usage.setdefault(name, {})
        for pod_metric in status.pods_metric:
            pod_usage = pod_metric.pod_usage
            values = {CPU: pod_usage.cpu_milli or 0, MEMORY: pod_usage.memory_bytes or 0}
            on_node[(pod_metric.namespace, pod_metric.name)] = values
            snap.pod_usage[(pod_metric.namespace, pod_metric.name)] = values
    return snap


def list_snapshot(api_client: client.ApiClient, *, timeout: float = 30.0,
                  clock: Callable[[], float] = time.time) -> Snapshot:
    """Lists nodes, pods and NodeMetrics; raises KubeApiError when a list fails (the round is skipped)."""
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    nodes = _list_all(core.list_node, timeout=timeout)
    pods = _list_all(core.list_pod_for_all_namespaces, timeout=timeout)
    metrics = _list_all(custom.list_cluster_custom_object, SLO_GROUP, SLO_VERSION, NODEMETRIC_PLURAL,
                        timeout=timeout)
    return build_snapshot(nodes, pods, metrics, clock())
