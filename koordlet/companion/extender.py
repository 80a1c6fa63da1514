"""Load-aware scheduling as a kube-scheduler HTTP extender.

The semantics are Koordinator's ``LoadAwareScheduling`` plugin (``pkg/scheduler/plugins/loadaware``:
``load_aware.go``, ``helper.go``, ``estimator/default_estimator.go``; defaults from
``pkg/scheduler/apis/config/v1/defaults.go``), served over the extender protocol of
``k8s.io/kube-scheduler/extender/v1`` so a stock kube-scheduler can use it:

- ``POST .../filter`` takes ``ExtenderArgs{Pod, Nodes | NodeNames}`` and answers ``ExtenderFilterResult``;
- ``POST .../prioritize`` answers a ``HostPriorityList`` scored 0..10 (``MaxExtenderPriority``);
- ``GET /healthz`` answers ``ok``.

The extender types carry no JSON tags, so Go writes the capitalised field names (``"Pod"``, ``"NodeNames"``,
``"FailedNodes"``, ``"Host"``, ``"Score"``) and reads keys case-insensitively; this module does the same.

**Estimated usage** of a node, as upstream ``GetEstimatedUsed``: the NodeMetric's ``nodeUsage`` (or the
configured percentile of ``aggregatedNodeUsages``), minus the measured usage of pods that are being
estimated, plus the estimate of every assigned pod that the metric cannot reflect yet (no ``podsMetric``
entry, assigned after ``updateTime``, or assigned less than one report interval before it), plus the
estimate of the pod being scheduled.  A pod's estimate is ``max(request, limit) * factor%`` rounded half
away from zero and capped at the limit; with neither set it is 250m CPU and 200 MiB memory, unscaled.

**Filter**: a node is rejected when ``round(used / allocatable * 100) > threshold`` for a resource whose
threshold is not 0 (upstream ``filterNodeUsage``: a node exactly at its threshold passes).  Node annotation
``scheduling.koordinator.sh/usage-thresholds`` overrides the thresholds per node.  Pods of priority class
``koord-prod`` are checked against ``prodUsageThresholds`` (when set) and the sum of prod pods' usage.
A node whose NodeMetric is older than ``nodeMetricExpirationSeconds`` (or has no ``updateTime``) is
rejected with ``node(s) nodeMetric expired`` unless ``enableScheduleWhenNodeMetricsExpired`` (then it
passes unchecked); with ``filterExpiredNodeMetrics: false`` its stale usage is checked as usual.  A node
without a NodeMetric passes: load awareness is an optimisation and such a node may run no koordlet.
DaemonSet pods pass every node.

**Prioritize**: upstream's weighted least-used score, ``sum_r w_r * (alloc_r - used_r) * 100 // alloc_r
// sum w`` (0..100), divided by 10 with the remainder dropped for the extender's 0..10 range.  A node
without a usable, fresh NodeMetric scores 0.

**Assignments**: upstream learns pods placed on a node from the scheduler's pod informer (its
``podAssignCache``: ``Reserve`` plus informer add/update/delete).  An extender sees no Reserve and is not
told which node won, so :class:`NodeStore` exposes the same cache as :meth:`NodeStore.assign_pod` /
:meth:`NodeStore.unassign_pod`, to be driven by the companion's pod watch (a pod with ``spec.nodeName``,
timestamped by its ``PodScheduled`` condition as upstream does).  The extender does not implement the
``bind`` verb: binding would make it responsible for creating the Binding.

**Requests never change the store.**  The ``Nodes`` form carries whole Node objects, but the store follows
the companion's own Node watch: a node it knows is answered from there whatever the request claims, and a
node it has no Node object of is answered from the request's copy for that answer only.  Otherwise one
request could rewrite a real node's allocatable and thresholds for every later (names-only) answer.

**Serving** (:func:`make_server`): bodies up to 16 MiB (413 beyond, unread), deadlines on every request and
idle connection, at most 64 connections and two requests decoded at once (:data:`DEFAULT_LIMITS`).

**Cost**: everything that depends only on the node (allocatable, thresholds, the usage base above) is
computed when a Node, a NodeMetric or an assignment changes; a request costs the pod's estimate once
plus a few float operations per node.  Only ``cpu`` and ``memory`` are tracked: a threshold on another
resource is skipped (as upstream does for a resource the node lacks), a weight on one scores 0.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final, NamedTuple

import yaml

from koordlet.apis.extension import (
    RESOURCE_BATCH_CPU,
    RESOURCE_BATCH_MEMORY,
    RESOURCE_MID_CPU,
    RESOURCE_MID_MEMORY,
    PriorityClass,
    QoSClass,
    pod_qos,
    priority_class,
)
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import (
    DEFAULT_REPORT_INTERVAL_SECONDS,
    AggregationType,
    NodeMetric,
    NodeMetricStatus,
    ResourceMap,
    parse_duration,
    parse_time,
)
from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ConfigError, ParseError
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits
from koordlet.system.kubepaths import KubeQoS

log = logging.getLogger(__name__)

PLUGIN_NAME: Final = "LoadAwareScheduling"
ARGS_KIND: Final = "LoadAwareSchedulingArgs"
ANNOTATION_CUSTOM_USAGE_THRESHOLDS: Final = "scheduling.koordinator.sh/usage-thresholds"
ANNOTATION_NODE_RAW_ALLOCATABLE: Final = "node.koordinator.sh/raw-allocatable"

DEFAULT_MILLI_CPU_REQUEST: Final = 250
"""Estimate of a pod that sets neither a CPU request nor a limit (upstream ``DefaultMilliCPURequest``)."""
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
"""Estimate of a pod that sets neither a memory request nor a limit (``DefaultMemoryRequest``, 200 MiB)."""

MAX_NODE_SCORE: Final = 100
"""kube-scheduler ``framework.MaxNodeScore``: the plugin's score range."""
MAX_EXTENDER_PRIORITY: Final = 10
"""``extenderv1.MaxExtenderPriority``: kube-scheduler multiplies an extender's score by weight * 10."""

REASON_NODE_METRIC_EXPIRED: Final = "node(s) nodeMetric expired"
REASON_USAGE_EXCEED_THRESHOLD: Final = "node(s) {} usage exceed threshold"
REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD: Final = "node(s) {} aggregated usage exceed threshold"
REASON_UNKNOWN_NODE: Final = "node(s) unknown to the load-aware extender: no Node object seen"

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Largest request body: ExtenderArgs of 5,000 node names is under 100 KiB; the full ``Nodes`` form of a
large cluster is tens of MiB and such a cluster configures the extender ``nodeCacheCapable`` (names only).
Decoded, a body takes several times its size, and the companion runs with a 512 MiB memory limit."""
MAX_ACTIVE_REQUESTS: Final = 2
"""Requests read, decoded and answered at once: the work holds the GIL anyway (kube-scheduler sends one pod's
filter, then its prioritize), and this bounds the memory of bodies in flight to twice the cap plus decoding."""
DEFAULT_LIMITS: Final = ServerLimits(max_connections=64, idle_timeout_seconds=90.0, header_timeout_seconds=10.0,
                                     body_timeout_seconds=30.0, write_timeout_seconds=30.0,
                                     max_body_bytes=MAX_BODY_BYTES, max_active_requests=MAX_ACTIVE_REQUESTS,
                                     slot_wait_seconds=10.0)
"""The extender's HTTP limits (kube-scheduler's default extender ``httpTimeout`` is 30 s)."""

_CPU: Final = "cpu"
_MEMORY: Final = "memory"
_NO_ANNOTATIONS: Final[Mapping[str, str]] = {}
_REASON_CPU: Final = REASON_USAGE_EXCEED_THRESHOLD.format(_CPU)
_REASON_MEMORY: Final = REASON_USAGE_EXCEED_THRESHOLD.format(_MEMORY)
_REASON_AGG_CPU: Final = REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD.format(_CPU)
_REASON_AGG_MEMORY: Final = REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD.format(_MEMORY)

_DEFAULT_RESOURCE_WEIGHTS: Final = {_CPU: 1, _MEMORY: 1}
_DEFAULT_USAGE_THRESHOLDS: Final = {_CPU: 65, _MEMORY: 95}
_DEFAULT_ESTIMATED_SCALING_FACTORS: Final = {_CPU: 85, _MEMORY: 70}


# ---------------------------------------------------------------------------------------------- JSON helpers



def _mapping(value: Any, where: str, error: type[ValueError] = ConfigError) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _int_map(value: Any, where: str, low: int, high: int | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, number in _mapping(value, where).items():
        if isinstance(number, bool) or not isinstance(number, int):
            raise ConfigError(f"{where}.{name}: expected an integer, got {number!r}")
        if number < low or (high is not None and number > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{where}.{name}: must be {bound}, got {number}")
        out[str(name)] = number
    return out


def _bool(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = member(obj, key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _aggregation_type(value: Any, where: str) -> AggregationType | None:
    if value in (None, ""):
        return None
    try:
        return AggregationType(value)
    except ValueError:
        choices = ", ".join(t.value for t in AggregationType)
        raise ConfigError(f"{where}: expected one of {choices}, got {value!r}") from None


def _duration_seconds(value: Any, where: str) -> float:
    """A ``metav1.Duration`` (``"5m"``); absent or zero means "the longest non-empty window"."""
    if value in (None, ""):
        return 0.0
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a duration string such as \"5m\", got {value!r}")
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if seconds < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    return seconds


def _round_half_away(value: float) -> int:
    """Go's ``math.Round`` for a non-negative float (Python's ``round`` rounds half to even)."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


# ---------------------------------------------------------------------------------------------- args

@dataclass(frozen=True, slots=True)
class AggregatedArgs:
    """``LoadAwareSchedulingAggregatedArgs``: filter and score on a percentile of ``aggregatedNodeUsages``."""

    usage_thresholds: Mapping[str, int] = field(default_factory=dict)
    """Percent thresholds on the percentile usage; filtering on aggregates needs these and a type."""
    usage_aggregation_type: AggregationType | None = None
    usage_aggregated_duration_seconds: float = 0.0
    """Window to filter on; 0 picks the longest window that reports the type."""
    score_aggregation_type: AggregationType | None = None
    """Percentile to score on; None scores on ``nodeUsage``."""
    score_aggregated_duration_seconds: float = 0.0

    @property
    def filter_enabled(self) -> bool:
        """Upstream ``filterWithAggregation``."""
        return bool(self.usage_thresholds) and self.usage_aggregation_type is not None

    @property
    def score_enabled(self) -> bool:
        """Upstream ``scoreWithAggregation``."""
        return self.score_aggregation_type is not None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> AggregatedArgs:
        obj = _mapping(obj, where)
        return cls(
            usage_thresholds=_int_map(member(obj, "usageThresholds"), f"{where}.usageThresholds", 0, 100),
            usage_aggregation_type=_aggregation_type(member(obj, "usageAggregationType"),
                                                     f"{where}.usageAggregationType"),
            usage_aggregated_duration_seconds=_duration_seconds(member(obj, "usageAggregatedDuration"),
                                                                f"{where}.usageAggregatedDuration"),
            score_aggregation_type=_aggregation_type(member(obj, "scoreAggregationType"),
                                                     f"{where}.scoreAggregationType"),
            score_aggregated_duration_seconds=_duration_seconds(member(obj, "scoreAggregatedDuration"),
                                                                f"{where}.scoreAggregatedDuration"),
        )


@dataclass(frozen=True, slots=True)
class LoadAwareArgs:
    """``LoadAwareSchedulingArgs`` with upstream's defaults (``SetDefaults_LoadAwareSchedulingArgs``)."""

    filter_expired_node_metrics: bool = True
    """Reject nodes whose NodeMetric is stale (unless ``enable_schedule_when_node_metrics_expired``)."""
    node_metric_expiration_seconds: int = 180
    """Age of ``status.updateTime`` from which a NodeMetric counts as expired."""
    enable_schedule_when_node_metrics_expired: bool = False
    """Let expired nodes through the filter unchecked instead of rejecting them."""
    resource_weights: Mapping[str, int] = field(default_factory=lambda: dict(_DEFAULT_RESOURCE_WEIGHTS))
    """Weights of the least-used score per resource."""
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: dict(_DEFAULT_USAGE_THRESHOLDS))
    """Percent of allocatable above which a node is filtered; 0 disables a resource."""
    prod_usage_thresholds: Mapping[str, int] = field(default_factory=dict)
    """Percent thresholds for prod pods against the prod pods' usage; empty disables."""
    score_according_prod_usage: bool = False
    """Score prod pods on the prod pods' usage instead of the node's."""
    estimated_scaling_factors: Mapping[str, int] = field(
        default_factory=lambda: dict(_DEFAULT_ESTIMATED_SCALING_FACTORS))
    """Percent of ``max(request, limit)`` a new pod is expected to use."""
    aggregated: AggregatedArgs | None = None
    """Percentile-based filtering and scoring; None uses ``nodeUsage``."""

    def __post_init__(self) -> None:
        if self.node_metric_expiration_seconds <= 0:
            raise ConfigError("LoadAwareSchedulingArgs.nodeMetricExpirationSeconds: must be positive, got "
                              f"{self.node_metric_expiration_seconds}")
        if not self.resource_weights or not any(self.resource_weights.values()):
            raise ConfigError("LoadAwareSchedulingArgs.resourceWeights: at least one weight must be positive")

    @property
    def score_with_aggregation(self) -> bool:
        return self.aggregated is not None and self.aggregated.score_enabled

    @classmethod
    def from_json(cls, obj: Any, where: str = "LoadAwareSchedulingArgs") -> LoadAwareArgs:
        """Decodes the plugin's ``args`` object and applies the defaults; an error names the field path.

        As upstream: empty ``resourceWeights``/``usageThresholds`` take the defaults, and
        ``estimatedScalingFactors`` is completed resource by resource."""
        obj = _mapping(obj, where)
        kind = member(obj, "kind")
        if kind not in (None, ARGS_KIND):
            raise ConfigError(f"{where}.kind: expected {ARGS_KIND}, got {kind!r}")
        expiration = member(obj, "nodeMetricExpirationSeconds")
        if expiration is None:
            expiration = 180
        elif isinstance(expiration, bool) or not isinstance(expiration, int):
            raise ConfigError(f"{where}.nodeMetricExpirationSeconds: expected an integer, got {expiration!r}")
        elif expiration <= 0:
            raise ConfigError(f"{where}.nodeMetricExpirationSeconds: must be positive, got {expiration}")
        weights = _int_map(member(obj, "resourceWeights"), f"{where}.resourceWeights", 1, 100)
        thresholds = _int_map(member(obj, "usageThresholds"), f"{where}.usageThresholds", 0, 100)
        factors = dict(_DEFAULT_ESTIMATED_SCALING_FACTORS)
        factors.update(_int_map(member(obj, "estimatedScalingFactors"), f"{where}.estimatedScalingFactors", 0, 100))
        aggregated = member(obj, "aggregated")
        return cls(
            filter_expired_node_metrics=_bool(obj, "filterExpiredNodeMetrics", where, True),
            node_metric_expiration_seconds=expiration,
            enable_schedule_when_node_metrics_expired=_bool(obj, "enableScheduleWhenNodeMetricsExpired", where,
                                                            False),
            resource_weights=weights or dict(_DEFAULT_RESOURCE_WEIGHTS),
            usage_thresholds=thresholds or dict(_DEFAULT_USAGE_THRESHOLDS),
            prod_usage_thresholds=_int_map(member(obj, "prodUsageThresholds"), f"{where}.prodUsageThresholds",
                                           0, 100),
            score_according_prod_usage=_bool(obj, "scoreAccordingProdUsage", where, False),
            estimated_scaling_factors=factors,
            aggregated=AggregatedArgs.from_json(aggregated, f"{where}.aggregated") if aggregated is not None
            else None,
        )

    @classmethod
    def from_document(cls, text: str) -> LoadAwareArgs:
        """The args in a YAML or JSON document that is one of: the ``LoadAwareSchedulingArgs`` object, a
        ``KubeSchedulerConfiguration`` (the first profile's ``pluginConfig`` entry named
        ``LoadAwareScheduling``), or a ConfigMap holding such a configuration under any ``data`` key.

        Lines holding only ``...`` are dropped first: Koordinator's documentation elides parts of its
        samples that way, and ``...`` is a YAML document end marker or a syntax error where it appears."""
        cleaned = "\n".join(line for line in text.splitlines() if line.strip() != "...")
        try:
            document = yaml.safe_load(cleaned)
        except yaml.YAMLError as exc:
            raise ConfigError(f"scheduler config: not YAML or JSON: {exc}") from None
        args = _find_args(document, "scheduler config")
        if args is None:
            raise ConfigError(f"scheduler config: no {PLUGIN_NAME} pluginConfig and no {ARGS_KIND} object")
        return cls.from_json(args[1], args[0])

    @classmethod
    def load(cls, path: str | Path) -> LoadAwareArgs:
        """:meth:`from_document` on a file."""
        return cls.from_document(Path(path).read_text(encoding="utf-8"))


def _find_args(document: Any, where: str) -> tuple[str, Any] | None:
    if not isinstance(document, Mapping):
        return None
    kind = member(document, "kind")
    if kind == ARGS_KIND:
        return where, document
    if kind == "ConfigMap":
        for key, value in _mapping(member(document, "data"), f"{where}.data").items():
            if isinstance(value, str):
                try:
                    inner = yaml.safe_load("\n".join(ln for ln in value.splitlines() if ln.strip() != "..."))
                except yaml.YAMLError as exc:
                    raise ConfigError(f"{where}.data.{key}: not YAML or JSON: {exc}") from None
                found = _find_args(inner, f"{where}.data.{key}")
                if found is not None:
                    return found
        return None
    profiles = member(document, "profiles")
    if isinstance(profiles, list):
        for i, profile in enumerate(profiles):
            plugin_config = member(profile, "pluginConfig") if isinstance(profile, Mapping) else None
            for j, entry in enumerate(plugin_config if isinstance(plugin_config, list) else ()):
                if isinstance(entry, Mapping) and member(entry, "name") == PLUGIN_NAME:
                    return f"{where}.profiles[{i}].pluginConfig[{j}].args", member(entry, "args") or {}
    return None


# ---------------------------------------------------------------------------------------------- pods

@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the plugin needs of a ``v1.Pod``, parsed once."""

    uid: str
    namespace: str
    name: str
    priority: PriorityClass
    """``GetPodPriorityClassWithDefault``: label, else priority band, else PROD (BATCH for BE pods)."""
    daemonset: bool
    requests: Mapping[str, int]
    """Pod requests (containers, init containers, overhead) in milli-cores for CPU, units otherwise."""
    limits: Mapping[str, int]
    node_name: str = ""
    scheduled_time: float | None = None
    """``lastTransitionTime`` of a true ``PodScheduled`` condition."""
    terminated: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def _value_of(resource: str, text: Any, where: str) -> int:
    if not isinstance(text, str | int | float) or isinstance(text, bool):
        raise ParseError(f"{where}: expected a quantity, got {text!r}")
    return milli_value(text) if resource == _CPU else int_value(text)


def _resource_list(obj: Any, where: str) -> dict[str, int]:
    return {str(name): _value_of(str(name), quantity, f"{where}.{name}")
            for name, quantity in _mapping(obj, where, ParseError).items()}


def _add(into: dict[str, int], values: Mapping[str, int]) -> None:
    for name, value in values.items():
        into[name] = into.get(name, 0) + value


def _max_into(into: dict[str, int], values: Mapping[str, int]) -> None:
    for name, value in values.items():
        if value > into.get(name, 0):
            into[name] = value


def _pod_resources(spec: Mapping[str, Any], key: str, where: str) -> dict[str, int]:
    """``resourcehelper.PodRequests`` / ``PodLimits`` (without pod-level resources): the sum over
    containers, raised to the largest init container (restartable sidecars run alongside everything
    started after them), plus the pod overhead."""
    total: dict[str, int] = {}
    for i, container in enumerate(_list(member(spec, "containers"), f"{where}.containers")):
        resources = _mapping(member(_mapping(container, f"{where}.containers[{i}]", ParseError), "resources"),
                             f"{where}.containers[{i}].resources", ParseError)
        _add(total, _resource_list(member(resources, key), f"{where}.containers[{i}].resources.{key}"))
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for i, container in enumerate(_list(member(spec, "initContainers"), f"{where}.initContainers")):
        container = _mapping(container, f"{where}.initContainers[{i}]", ParseError)
        resources = _mapping(member(container, "resources"), f"{where}.initContainers[{i}].resources", ParseError)
        values = _resource_list(member(resources, key), f"{where}.initContainers[{i}].resources.{key}")
        if member(container, "restartPolicy") == "Always":
            _add(total, values)
            _add(sidecars, values)
            _max_into(init_max, sidecars)
        else:
            running = dict(values)
            _add(running, sidecars)
            _max_into(init_max, running)
    _max_into(total, init_max)
    overhead = _resource_list(member(spec, "overhead"), f"{where}.overhead")
    if key == "requests":
        _add(total, overhead)
    else:
        # PodLimits adds the overhead only to resources that have a limit.
        _add(total, {name: value for name, value in overhead.items() if total.get(name)})
    return total


def parse_pod(obj: Any, where: str = "Pod") -> PodInfo:
    """Parses a ``v1.Pod`` object; raises ParseError naming the field path."""
    pod = _mapping(obj, where, ParseError)
    if not pod:
        raise ParseError(f"{where}: missing")
    metadata = _mapping(member(pod, "metadata"), f"{where}.metadata", ParseError)
    spec = _mapping(member(pod, "spec"), f"{where}.spec", ParseError)
    status = _mapping(member(pod, "status"), f"{where}.status", ParseError)
    labels = _mapping(member(metadata, "labels"), f"{where}.metadata.labels", ParseError)
    requests = _pod_resources(spec, "requests", f"{where}.spec")
    limits = _pod_resources(spec, "limits", f"{where}.spec")

    raw_priority = member(spec, "priority")
    priority = priority_class(raw_priority if isinstance(raw_priority, int) else None,
                              {str(k): str(v) for k, v in labels.items()})
    if priority is PriorityClass.NONE:
        # GetPodQoSClassWithDefault, then prod for everything but BE.
        kube_qos_text = member(status, "qosClass")
        try:
            kube_qos = KubeQoS(kube_qos_text) if kube_qos_text else None
        except ValueError:
            kube_qos = None
        if kube_qos is None:
            besteffort = not any(requests.get(r) or limits.get(r) for r in (_CPU, _MEMORY))
            kube_qos = KubeQoS.BESTEFFORT if besteffort else KubeQoS.BURSTABLE
        qos = pod_qos({str(k): str(v) for k, v in labels.items()}, kube_qos)
        priority = PriorityClass.BATCH if qos is QoSClass.BE else PriorityClass.PROD

    owners = _list(member(metadata, "ownerReferences"), f"{where}.metadata.ownerReferences")
    daemonset = any(isinstance(o, Mapping) and member(o, "kind") == "DaemonSet" for o in owners)
    scheduled: float | None = None
    for condition in _list(member(status, "conditions"), f"{where}.status.conditions"):
        if (isinstance(condition, Mapping) and member(condition, "type") == "PodScheduled"
                and member(condition, "status") == "True"):
            text = member(condition, "lastTransitionTime")
            if isinstance(text, str) and text:
                try:
                    scheduled = parse_time(text)
                except ValueError as exc:
                    raise ParseError(f"{where}.status.conditions: {exc}") from None
    namespace = str(member(metadata, "namespace") or "")
    name = str(member(metadata, "name") or "")
    return PodInfo(
        uid=str(member(metadata, "uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        priority=priority,
        daemonset=daemonset,
        requests=requests,
        limits=limits,
        node_name=str(member(spec, "nodeName") or ""),
        scheduled_time=scheduled,
        terminated=member(status, "phase") in ("Succeeded", "Failed"),
    )


_TRANSLATED: Final = {
    PriorityClass.BATCH: {_CPU: RESOURCE_BATCH_CPU, _MEMORY: RESOURCE_BATCH_MEMORY},
    PriorityClass.MID: {_CPU: RESOURCE_MID_CPU, _MEMORY: RESOURCE_MID_MEMORY},
}
_CPU_LIKE: Final = frozenset({_CPU, RESOURCE_BATCH_CPU})
_MEMORY_LIKE: Final = frozenset({_MEMORY, RESOURCE_BATCH_MEMORY})


def estimate_pod(pod: PodInfo, factors: Mapping[str, int]) -> tuple[int, int]:
    """Upstream ``DefaultEstimator.EstimatePod`` for CPU (milli-cores) and memory (bytes).

    A batch or mid pod is estimated on its extended resources (``kubernetes.io/batch-cpu``...), as
    ``TranslateResourceNameByPriorityClass`` does; a free pod has no such resource and estimates 0."""
    out = [0, 0]
    for i, resource in enumerate((_CPU, _MEMORY)):
        if pod.priority in (PriorityClass.PROD, PriorityClass.NONE):
            real = resource
        else:
            real = _TRANSLATED.get(pod.priority, {}).get(resource, "")
        limit = pod.limits.get(real, 0)
        quantity = max(limit, pod.requests.get(real, 0))
        if quantity == 0:
            out[i] = (DEFAULT_MILLI_CPU_REQUEST if real in _CPU_LIKE
                      else DEFAULT_MEMORY_REQUEST if real in _MEMORY_LIKE else 0)
            continue
        estimated = _round_half_away(float(quantity) * float(factors.get(resource, 0)) / 100)
        out[i] = limit if 0 < limit < estimated else estimated
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------- node store

@dataclass(frozen=True, slots=True)
class _Profile:
    """Upstream ``usageThresholdsFilterProfile`` (``CustomUsageThresholds`` merged with the args)."""

    thresholds: tuple[int, int]
    prod_thresholds: tuple[int, int] | None
    aggregation_type: AggregationType | None
    """Set when the node filters on a percentile."""
    aggregated_duration_seconds: float = 0.0


def _pair(thresholds: Mapping[str, int]) -> tuple[int, int]:
    return thresholds.get(_CPU, 0), thresholds.get(_MEMORY, 0)


def _profile(args: LoadAwareArgs, annotation: str | None) -> _Profile:
    """``generateUsageThresholdsFilterProfile``: the node annotation's thresholds where it sets them, else
    the args'; an annotation that does not decode is ignored as a whole."""
    usage, prod = args.usage_thresholds, args.prod_usage_thresholds
    aggregated = args.aggregated if args.aggregated is not None and args.aggregated.filter_enabled else None
    agg_thresholds = aggregated.usage_thresholds if aggregated else {}
    agg_type = aggregated.usage_aggregation_type if aggregated else None
    agg_duration = aggregated.usage_aggregated_duration_seconds if aggregated else 0.0
    if annotation:
        try:
            custom = _mapping(json.loads(annotation), ANNOTATION_CUSTOM_USAGE_THRESHOLDS)
            where = ANNOTATION_CUSTOM_USAGE_THRESHOLDS
            custom_usage = _int_map(member(custom, "usageThresholds"), f"{where}.usageThresholds", 0, 2**63 - 1)
            custom_prod = _int_map(member(custom, "prodUsageThresholds"), f"{where}.prodUsageThresholds",
                                   0, 2**63 - 1)
            custom_agg = _mapping(member(custom, "aggregatedUsage"), f"{where}.aggregatedUsage")
            agg_usage = _int_map(member(custom_agg, "usageThresholds"), f"{where}.aggregatedUsage.usageThresholds",
                                 0, 2**63 - 1)
            agg_kind = _aggregation_type(member(custom_agg, "usageAggregationType"),
                                         f"{where}.aggregatedUsage.usageAggregationType")
            agg_seconds = _duration_seconds(member(custom_agg, "usageAggregatedDuration"),
                                            f"{where}.aggregatedUsage.usageAggregatedDuration")
        except (ValueError, TypeError, RecursionError) as exc:
            log.debug("ignoring node usage-thresholds annotation", extra={"reason": str(exc)})
        else:
            usage = custom_usage or usage
            prod = custom_prod or prod
            if agg_usage and agg_kind is not None:
                agg_thresholds, agg_type, agg_duration = agg_usage, agg_kind, agg_seconds
    if agg_type is not None:
        return _Profile(_pair(agg_thresholds), _pair(prod) if prod else None, agg_type, agg_duration)
    return _Profile(_pair(usage), _pair(prod) if prod else None, None)


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


_Usage = tuple[int | None, int | None]
"""CPU milli-cores and memory bytes, None where the metric does not report the resource."""


class _Metric(NamedTuple):
    """The part of a NodeMetric status the plugin reads, as flat tuples (untracked by the GC, unlike
    the parsed status objects, which would make every full collection walk every node's pods)."""

    update_time: float | None
    node_metric_ok: bool
    node_usage: _Usage | None
    aggregated: tuple[tuple[float, str, int | None, int | None], ...]
    """``(duration seconds, aggregation type, cpu, memory)`` per window and type that reports something."""
    pods: tuple[tuple[str, str, bool, int | None, int | None], ...]
    """``(namespace, name, is prod, cpu, memory)`` per pod that reports something."""


class _Assigned(NamedTuple):
    namespace: str
    name: str
    prod: bool
    timestamp: float
    estimate: tuple[int, int]


@dataclass(slots=True)
class _NodeRecord:
    name: str
    known: bool = False
    alloc: tuple[int, int] = (0, 0)
    signature: tuple[Any, ...] = ()
    profile: _Profile | None = None
    metric: _Metric | None = None
    has_metric: bool = False
    report_interval_seconds: float = float(DEFAULT_REPORT_INTERVAL_SECONDS)
    assigned: dict[str, _Assigned] = field(default_factory=dict)


def _resources(usage: ResourceMap | None) -> _Usage | None:
    if usage is None or (usage.cpu_milli is None and usage.memory_bytes is None):
        return None
    return usage.cpu_milli, usage.memory_bytes


def _compact(status: NodeMetricStatus) -> _Metric:
    info = status.node_metric
    aggregated: list[tuple[float, str, int | None, int | None]] = []
    if info is not None:
        for window in info.aggregated_node_usages:
            for kind, usage in window.usage.items():
                if (values := _resources(usage)) is not None:
                    aggregated.append((window.duration_seconds, kind.value, values[0], values[1]))
    pods = tuple((pm.namespace, pm.name, pm.priority is PriorityClass.PROD, values[0], values[1])
                 for pm in status.pods_metric if (values := _resources(pm.pod_usage)) is not None)
    return _Metric(status.update_time, info is not None, _resources(info.node_usage) if info is not None else None,
                   tuple(aggregated), pods)


def _target_aggregated_usage(metric: _Metric, duration: float, kind: AggregationType) -> _Usage | None:
    """Upstream ``getTargetAggregatedUsage``: the window of ``duration``, or for 0 the longest window
    reporting ``kind`` (falling back to ``nodeUsage`` when the node reports windows but none of ``kind``)."""
    if not metric.node_metric_ok or not metric.aggregated:
        return None
    if duration == 0:
        best: _Usage | None = None
        best_duration = 0.0
        for seconds, name, cpu, memory in metric.aggregated:
            if name == kind.value and seconds > best_duration:
                best, best_duration = (cpu, memory), seconds
        return best if best is not None else metric.node_usage
    for seconds, name, cpu, memory in metric.aggregated:
        if seconds == duration and name == kind.value:
            return cpu, memory
    return None


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
        self._records: dict[str, _NodeRecord] = {}
        self._views: dict[str, NodeView] = {}
        self._pod_nodes: dict[str, str] = {}

    # -- nodes

    def update_node(self, name: str, allocatable: Mapping[str, Any],
                    annotations: Mapping[str, str] | None = None) -> None:
        """Records a Node's ``status.allocatable`` (quantities) and annotations.

        ``node.koordinator.sh/raw-allocatable`` replaces allocatable as upstream ``EstimateNode`` does
        when amplification is on."""
        annotations = annotations or {}
        signature = (allocatable.get(_CPU), allocatable.get(_MEMORY),
                     annotations.get(ANNOTATION_CUSTOM_USAGE_THRESHOLDS),
                     annotations.get(ANNOTATION_NODE_RAW_ALLOCATABLE))
        self._update_node(name, signature)

    def _update_node(self, name: str, signature: tuple[Any, ...]) -> None:
        alloc, profile = self._node_inputs(name, signature)
        with self._lock:
            record = self._records.get(name)
            if record is None:
                record = self._records[name] = _NodeRecord(name)
            record.known, record.alloc, record.signature, record.profile = True, alloc, signature, profile
            self._rebuild(record)

    def _node_inputs(self, name: str, signature: tuple[Any, ...]) -> tuple[tuple[int, int], _Profile]:
        """Allocatable (CPU milli-cores, memory bytes) and the threshold profile of a Node's signature."""
        cpu_text, mem_text, thresholds, raw = signature
        alloc_cpu = _value_of(_CPU, cpu_text, f"node {name}: allocatable.cpu") if cpu_text is not None else 0
        alloc_mem = _value_of(_MEMORY, mem_text, f"node {name}: allocatable.memory") if mem_text is not None else 0
        if raw:
            try:
                raw_alloc = _mapping(json.loads(raw), ANNOTATION_NODE_RAW_ALLOCATABLE, ParseError)
                if _CPU in raw_alloc:
                    alloc_cpu = _value_of(_CPU, raw_alloc[_CPU], f"{ANNOTATION_NODE_RAW_ALLOCATABLE}.cpu")
                if _MEMORY in raw_alloc:
                    alloc_mem = _value_of(_MEMORY, raw_alloc[_MEMORY], f"{ANNOTATION_NODE_RAW_ALLOCATABLE}.memory")
            except (ValueError, TypeError, RecursionError) as exc:  # upstream falls back to status.allocatable
                log.debug("ignoring raw-allocatable annotation", extra={"node": name, "reason": str(exc)})
        return (alloc_cpu, alloc_mem), _profile(self.args, thresholds)

    def update_node_json(self, node: Any) -> None:
        """:meth:`update_node` from a ``v1.Node`` object."""
        node = _mapping(node, "Node", ParseError)
        metadata = _mapping(member(node, "metadata"), "Node.metadata", ParseError)
        name = member(metadata, "name")
        if not isinstance(name, str) or not name:
            raise ParseError("Node.metadata.name: missing")
        status = _mapping(member(node, "status"), f"Node {name}.status", ParseError)
        self.update_node(name, _mapping(member(status, "allocatable"), f"Node {name}.status.allocatable", ParseError),
                         _mapping(member(metadata, "annotations"), f"Node {name}.metadata.annotations", ParseError))

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
                record = self._records[name] = _NodeRecord(name)
            record.metric, record.has_metric = _compact(status), True
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
        assigned = _Assigned(info.namespace, info.name, info.priority is PriorityClass.PROD, when,
                             estimate_pod(info, self.args.estimated_scaling_factors))
        with self._lock:
            previous = self._pod_nodes.get(info.uid)
            if previous is not None and previous != node_name:
                self._drop_pod(previous, info.uid)
            record = self._records.get(node_name)
            if record is None:
                record = self._records[node_name] = _NodeRecord(node_name)
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
            return [get(name) for name in names]

    def view(self, name: str) -> NodeView | None:
        with self._lock:
            return self._views.get(name)

    def request_views(self, items: list[Any]) -> tuple[list[str], list[NodeView | None]]:
        """The names and views of the ``items`` of a NodeList a request carries, in order; the store is
        never changed by them.

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
                        signature = (allocatable.get(_CPU), allocatable.get(_MEMORY),
                                     annotations.get(ANNOTATION_CUSTOM_USAGE_THRESHOLDS),
                                     annotations.get(ANNOTATION_NODE_RAW_ALLOCATABLE))
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
        return names, views

    def _transient_view(self, name: str, signature: tuple[Any, ...]) -> NodeView:
        """The view of a node from a request's copy of its Node, not stored."""
        alloc, profile = self._node_inputs(name, signature)
        with self._lock:
            stored = self._records.get(name)
            record = _NodeRecord(name, known=True, alloc=alloc, signature=signature, profile=profile)
            if stored is not None:
                record.metric, record.has_metric = stored.metric, stored.has_metric
                record.report_interval_seconds = stored.report_interval_seconds
                record.assigned = stored.assigned
            return self._build_view(record)

    @staticmethod
    def _node_signature(item: Any, where: str) -> tuple[str, tuple[Any, ...]]:
        """The slow, case-insensitive and type-checked reading of a Node for :meth:`request_views`."""
        item = _mapping(item, where, ParseError)
        metadata = _mapping(member(item, "metadata"), f"{where}.metadata", ParseError)
        name = member(metadata, "name")
        status = _mapping(member(item, "status"), f"{where}.status", ParseError)
        allocatable = _mapping(member(status, "allocatable"), f"{where}.status.allocatable", ParseError)
        annotations = _mapping(member(metadata, "annotations"), f"{where}.metadata.annotations", ParseError)
        return name, (member(allocatable, _CPU), member(allocatable, _MEMORY),
                      annotations.get(ANNOTATION_CUSTOM_USAGE_THRESHOLDS),
                      annotations.get(ANNOTATION_NODE_RAW_ALLOCATABLE))

    # -- precomputation (lock held)

    def _rebuild(self, record: _NodeRecord) -> None:
        if not record.known and not record.has_metric and not record.assigned:
            # Node, NodeMetric and pods all gone: forget the node (upstream podAssignCache.tryCleanup).
            self._records.pop(record.name, None)
            self._views.pop(record.name, None)
            return
        self._views[record.name] = self._build_view(record)

    def _build_view(self, record: _NodeRecord) -> NodeView:
        args = self.args
        profile = record.profile if record.profile is not None else _profile(args, None)
        metric = record.metric
        update_time = metric.update_time if metric is not None else None
        filter_used = prod_used = score_used = (0, 0)
        if metric is not None and metric.node_metric_ok:
            force_all = False
            score_usage = metric.node_usage
            if args.aggregated is not None and args.aggregated.score_aggregation_type is not None:
                score_usage = _target_aggregated_usage(metric, args.aggregated.score_aggregated_duration_seconds,
                                                       args.aggregated.score_aggregation_type)
                force_all = score_usage is None
            if profile.aggregation_type is not None:
                filter_usage = _target_aggregated_usage(metric, profile.aggregated_duration_seconds,
                                                        profile.aggregation_type)
            else:
                filter_usage = metric.node_usage
            interval = record.report_interval_seconds
            assigned = record.assigned.values()
            filter_used = _estimated_used(assigned, metric, interval, filter_usage, False, force_all)
            score_used = _estimated_used(assigned, metric, interval, score_usage, False, force_all)
            prod_used = _estimated_used(assigned, metric, interval, None, True, force_all)
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


def _estimated_used(assigned_pods: Iterable[_Assigned], metric: _Metric, interval: float, node_usage: _Usage | None,
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


# ---------------------------------------------------------------------------------------------- extender

class LoadAwareExtender:
    """Filter and prioritize over a :class:`NodeStore`, in process or behind :func:`make_server`."""

    def __init__(self, store: NodeStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.args = store.args
        self._clock = clock
        weights = self.args.resource_weights
        self._w_cpu = weights.get(_CPU, 0)
        self._w_mem = weights.get(_MEMORY, 0)
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
        args = _mapping(body, "ExtenderArgs", ParseError)
        pod = parse_pod(member(args, "Pod"))
        nodes = member(args, "Nodes")
        if nodes is not None:
            items = member(_mapping(nodes, "ExtenderArgs.Nodes", ParseError), "items") or []
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


# ---------------------------------------------------------------------------------------------- HTTP

class _Handler(LimitedRequestHandler):
    server: _ExtenderHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("extender request", extra={"client": self.client_address[0], "line": format % args})

    def _send(self, status: HTTPStatus, payload: Any, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, {"Error": message})

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        if self.path.split("?", 1)[0].rstrip("/") in ("/healthz", "/readyz"):
            self._send(HTTPStatus.OK, b"ok", "text/plain; charset=utf-8")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        # kube-scheduler posts to urlPrefix + "/" + verb; route on the verb whatever the prefix.
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        extender = self.server.extender
        handlers: dict[str, Callable[[Any], Any]] = {"filter": extender.filter, "prioritize": extender.prioritize}
        handler = handlers.get(verb)
        if handler is None:
            self.close_connection = True  # its body stays unread (and is drained before the close)
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path} (filter, prioritize)")
            return
        try:
            with self.request_slot():
                status, answer = self._answer(verb, handler, self.read_body())
        except RequestRefused as exc:
            status, answer = exc.status, {"Error": f"{verb}: {exc.message}"}
        self._send(status, answer)

    def _answer(self, verb: str, handler: Callable[[Any], Any], raw: bytes | bytearray) -> tuple[HTTPStatus, Any]:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            return HTTPStatus.BAD_REQUEST, {"Error": f"{verb}: request body is not valid JSON: {exc}"}
        try:
            return HTTPStatus.OK, handler(body)
        except (ParseError, RecursionError) as exc:
            return HTTPStatus.BAD_REQUEST, {"Error": f"{verb}: not ExtenderArgs: {exc}"}
        except Exception as exc:  # the scheduler gets an answer, the log the traceback
            log.exception("extender request failed", extra={"verb": verb})
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"Error": f"{verb}: internal error: {exc}"}


class _ExtenderHTTPServer(LimitedHTTPServer):
    def __init__(self, address: tuple[str, int], extender: LoadAwareExtender, limits: ServerLimits) -> None:
        super().__init__(address, _Handler, limits)
        self.extender = extender


def make_server(extender: LoadAwareExtender, host: str = "127.0.0.1", port: int = 0,
                limits: ServerLimits = DEFAULT_LIMITS) -> LimitedHTTPServer:
    """A bound (not yet serving) HTTP server for ``extender``; call ``serve_forever()`` in a thread and
    ``shutdown()`` then ``server_close()`` to stop.  Port 0 picks a free port (``server_address``).

    ``limits`` bounds connections, request time and body size (:data:`DEFAULT_LIMITS`)."""
    return _ExtenderHTTPServer((host, port), extender, limits)
