"""NodeMetric status: the usage koordlet reports, written the way Go's ``encoding/json`` writes Koordinator's
structs and read back as leniently as Go's decoder (see :mod:`koordlet.apis.nodemetric`)."""

from __future__ import annotations

import enum
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain, repeat
from operator import itemgetter, mul
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.duration import format_duration, parse_duration
from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.gojson import member
from koordlet.apis.quantity import format_cpu_milli, format_memory_bytes, int_value, milli_value
from koordlet.errors import ParseError


class AggregationType(enum.Enum):
    """Keys of ``AggregatedUsage.usage`` (koordinator apis/extension: ``AggregationType``)."""

    AVG = "avg"
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"


def format_time(epoch_seconds: float) -> str:
    """``metav1.Time`` JSON: RFC 3339 in UTC, whole seconds (Go truncates the fraction)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.floor(epoch_seconds)))


def parse_time(text: str) -> float:
    """Epoch seconds of an RFC 3339 timestamp (``2022-03-30T11:50:17Z``, offsets and fractions accepted)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"invalid RFC 3339 time {text!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"invalid RFC 3339 time {text!r}: no time zone")
    try:
        return parsed.astimezone(UTC).timestamp()
    except OverflowError:  # "0001-01-01T00:00:00+01:00": before year 1 in UTC
        raise ValueError(f"invalid RFC 3339 time {text!r}: out of range") from None





@dataclass(frozen=True, slots=True)
class ResourceMap:
    """``ResourceMap{resources, devices}``: CPU in milli-cores and memory in bytes; None where unknown.

    koordlet reports CPU and memory only; device usage (``devices``, GPUs) is not collected, and other
    resource names met while parsing are ignored."""

    cpu_milli: int | None = None
    memory_bytes: int | None = None

    @classmethod
    def from_usage(cls, cpu_cores: float, memory_bytes: float) -> ResourceMap:
        """From measured usage, converting as Koordinator does: ``int64(cores*1000)`` and ``int64(bytes)``
        (truncation toward zero)."""
        return cls(cpu_milli=int(cpu_cores * 1000), memory_bytes=int(memory_bytes))

    def to_json(self) -> dict[str, Any]:
        resources: dict[str, str] = {}
        if self.cpu_milli is not None:
            resources["cpu"] = format_cpu_milli(self.cpu_milli)
        if self.memory_bytes is not None:
            resources["memory"] = format_memory_bytes(self.memory_bytes)
        return {"resources": resources} if resources else {}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> ResourceMap:
        if obj is None:
            return cls()
        fast = _usage_fast(obj)
        if fast is not None:
            return fast
        resources = member(gojson.mapping(obj, where, optional=False), "resources")
        if resources is None:
            return cls()
        resources = gojson.mapping(resources, f"{where}.resources", optional=False)
        try:
            cpu = resources.get("cpu")
            memory = resources.get("memory")
            return cls(
                cpu_milli=milli_value(cpu) if cpu is not None else None,
                memory_bytes=int_value(memory) if memory is not None else None,
            )
        except ParseError as exc:
            raise ParseError(f"{where}.resources: {exc}") from None


@dataclass(frozen=True, slots=True)
class AggregatedUsage:
    """Usage statistics over one window (``AggregatedUsage{usage, duration}``)."""

    duration_seconds: float
    usage: Mapping[AggregationType, ResourceMap]
    """One ResourceMap per statistic; an empty one means too few samples yet (cold start)."""

    def to_json(self) -> dict[str, Any]:
        # Go writes map keys sorted; AggregationType's declaration order is already alphabetical.
        usage = {kind.value: self.usage[kind].to_json() for kind in AggregationType if kind in self.usage}
        out: dict[str, Any] = {}
        if usage:
            out["usage"] = usage
        # metav1.Duration is a struct, so Go writes it even when zero.
        out["duration"] = format_duration(self.duration_seconds)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str) -> AggregatedUsage:
        obj = gojson.mapping(obj, where, optional=False)
        usage: dict[AggregationType, ResourceMap] = {}
        raw_usage = member(obj, "usage")
        for key, value in gojson.mapping(raw_usage, f"{where}.usage").items():
            kind = _AGGREGATION_BY_VALUE.get(key)
            if kind is None:
                raise ParseError(f"{where}.usage: unknown aggregation {key!r}")
            fast = _usage_fast(value)  # before the field path is formatted: ~30 per report
            usage[kind] = fast if fast is not None else ResourceMap.from_json(value, f"{where}.usage.{key}")
        duration = gojson.string(member(obj, "duration"), f"{where}.duration")
        try:
            seconds = parse_duration(duration) if duration else 0.0
        except ValueError as exc:
            raise ParseError(f"{where}.duration: {exc}") from None
        return cls(duration_seconds=seconds, usage=usage)


_AGGREGATION_BY_VALUE: dict[Any, AggregationType] = {kind.value: kind for kind in AggregationType}


def _aggregated_list(obj: Any, where: str) -> tuple[AggregatedUsage, ...]:
    return tuple(AggregatedUsage.from_json(item, f"{where}[{i}]")
                 for i, item in enumerate(gojson.array(obj, where)))


@dataclass(frozen=True, slots=True)
class NodeMetricInfo:
    """``NodeMetricInfo``: the node's and the system's usage (NUMA usages are not reported)."""

    node_usage: ResourceMap = ResourceMap()
    """Average over the aggregate duration."""
    aggregated_node_usages: tuple[AggregatedUsage, ...] = ()
    system_usage: ResourceMap = ResourceMap()
    """Daemons and kernel: node usage minus pods and host applications, averaged like ``node_usage``."""
    aggregated_system_usages: tuple[AggregatedUsage, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodeUsage": self.node_usage.to_json()}
        if self.aggregated_node_usages:
            out["aggregatedNodeUsages"] = [a.to_json() for a in self.aggregated_node_usages]
        out["systemUsage"] = self.system_usage.to_json()
        if self.aggregated_system_usages:
            out["aggregatedSystemUsages"] = [a.to_json() for a in self.aggregated_system_usages]
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str) -> NodeMetricInfo:
        obj = gojson.mapping(obj, where, optional=False)
        return cls(
            node_usage=ResourceMap.from_json(member(obj, "nodeUsage"), f"{where}.nodeUsage"),
            aggregated_node_usages=_aggregated_list(member(obj, "aggregatedNodeUsages"),
                                                    f"{where}.aggregatedNodeUsages"),
            system_usage=ResourceMap.from_json(member(obj, "systemUsage"), f"{where}.systemUsage"),
            aggregated_system_usages=_aggregated_list(member(obj, "aggregatedSystemUsages"),
                                                      f"{where}.aggregatedSystemUsages"),
        )


_PRIORITY_BY_VALUE = {p.value: p for p in PriorityClass}
_QOS_BY_VALUE = {q.value: q for q in QoSClass}
_POD_METRIC_KEYS = frozenset({"name", "namespace", "podUsage", "priority", "qos"})
_USAGE_KEYS = frozenset({"resources"})
_RESOURCE_KEYS = frozenset({"cpu", "memory"})
_FAST_DIGITS = 18
"""Texts short enough for ``int()`` (as in :mod:`koordlet.apis.quantity`)."""
_BINARY_SCALES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


_new = object.__new__


def _resource_map(cpu_milli: int | None, memory_bytes: int | None) -> ResourceMap:
    """``ResourceMap(cpu_milli, memory_bytes)`` without the frozen dataclass's ``__init__`` (which sets each
    field through ``object.__setattr__``): the slots are written directly, half the cost, for the ~130 maps of
    every report a companion decodes."""
    usage = _new(ResourceMap)
    _SET_CPU(usage, cpu_milli)
    _SET_MEMORY(usage, memory_bytes)
    return usage


def _quantity_fast(text: Any, milli: bool) -> int | None:
    """A quantity in the canonical forms koordlets write (``"138m"``, ``"2"`` for CPU; ``"1815637738"``,
    ``"17828Ki"`` for memory), as :func:`milli_value` / :func:`int_value` read them; None for anything else
    (the caller then takes those, which handle every form or raise)."""
    if type(text) is not str or not text.isascii() or len(text) > _FAST_DIGITS:
        return None
    if text.isdigit():
        return int(text) * 1000 if milli else int(text)
    if milli:
        return int(text[:-1]) if text[-1:] == "m" and text[:-1].isdigit() else None
    scale = _BINARY_SCALES.get(text[-2:])
    return int(text[:-2]) * scale if scale is not None and text[:-2].isdigit() else None


_UNUSUAL: Final = object()
"""What :func:`_amount_fast` gives for an amount the fast path does not take."""


def _amount_fast(value: Any, milli: bool) -> Any:
    """An amount as :func:`_quantity_fast`, else as the checked reader has it; None when absent, :data:`_UNUSUAL`
    when it does not parse (the caller then takes the checked path, which names what is wrong)."""
    if value is None:
        return None
    amount = _quantity_fast(value, milli)
    if amount is not None:
        return amount
    if type(value) is not str:
        return _UNUSUAL
    try:
        return milli_value(value) if milli else int_value(value)
    except ParseError:
        return _UNUSUAL


def _usage_fast(obj: Any) -> ResourceMap | None:
    """A ``ResourceMap`` in the exact shape koordlets send, decoded without building error paths; None when
    anything is unusual (the caller then takes the checked path, which names what is wrong)."""
    if obj is None:
        return ResourceMap()
    if type(obj) is not dict or not obj.keys() <= _USAGE_KEYS:
        return None
    resources = obj.get("resources")
    if resources is None:
        return ResourceMap()
    if type(resources) is not dict or not resources.keys() <= _RESOURCE_KEYS:
        return None
    cpu_milli = _amount_fast(resources.get("cpu"), True)
    memory_bytes = _amount_fast(resources.get("memory"), False)
    if cpu_milli is _UNUSUAL or memory_bytes is _UNUSUAL:
        return None
    return _resource_map(cpu_milli, memory_bytes)


def _pod_metric_fast(obj: Any) -> PodMetricInfo | None:
    """The fast path of :meth:`PodMetricInfo.from_json` (a companion decodes ~100 of these per report)."""
    if type(obj) is not dict or not obj.keys() <= _POD_METRIC_KEYS:
        return None
    get = obj.get
    name, namespace = get("name", ""), get("namespace", "")
    if type(name) is not str or type(namespace) is not str:
        return None
    try:  # a list or an object here is unhashable (TypeError); the checked path names the bad field
        priority = _PRIORITY_BY_VALUE[get("priority", "")]
        qos = _QOS_BY_VALUE[get("qos", "")]
    except (KeyError, TypeError):
        return None
    usage = _usage_fast(get("podUsage"))
    if usage is None:
        return None
    info = _new(PodMetricInfo)
    _SET_POD_NAME(info, name)
    _SET_POD_NAMESPACE(info, namespace)
    _SET_POD_USAGE(info, usage)
    _SET_POD_PRIORITY(info, priority)
    _SET_POD_QOS(info, qos)
    return info


def _classes_to_json(out: dict[str, Any], priority: PriorityClass, qos: QoSClass) -> dict[str, Any]:
    """``out`` with ``priority`` and ``qos`` added unless NONE (Go's omitempty)."""
    if priority is not PriorityClass.NONE:
        out["priority"] = priority.value
    if qos is not QoSClass.NONE:
        out["qos"] = qos.value
    return out


def _classes_from_json(obj: Mapping[str, Any], where: str) -> tuple[PriorityClass, QoSClass]:
    """The ``priority`` and ``qos`` members; ParseError naming the field when one is not a known class."""
    priority_text = gojson.string(member(obj, "priority"), f"{where}.priority")
    qos_text = gojson.string(member(obj, "qos"), f"{where}.qos")
    priority = _PRIORITY_BY_VALUE.get(priority_text)
    if priority is None:
        raise ParseError(f"{where}.priority: unknown priority class {priority_text!r}")
    qos = _QOS_BY_VALUE.get(qos_text)
    if qos is None:
        raise ParseError(f"{where}.qos: unknown QoS class {qos_text!r}")
    return priority, qos


@dataclass(frozen=True, slots=True)
class PodMetricInfo:
    """One pod's usage (``PodMetricInfo{name, namespace, podUsage, priority, qos}``)."""

    name: str
    namespace: str
    pod_usage: ResourceMap
    priority: PriorityClass = PriorityClass.NONE
    """Koordinator priority class with its default (``GetPodPriorityClassWithDefault``); NONE is omitted."""
    qos: QoSClass = QoSClass.NONE
    """Koordinator QoS class with its default (``GetPodQoSClassWithDefault``); NONE is omitted."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.namespace:
            out["namespace"] = self.namespace
        out["podUsage"] = self.pod_usage.to_json()
        return _classes_to_json(out, self.priority, self.qos)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PodMetricInfo:
        fast = _pod_metric_fast(obj)
        if fast is not None:
            return fast
        obj = gojson.mapping(obj, where, optional=False)
        priority, qos = _classes_from_json(obj, where)
        return cls(
            name=gojson.string(member(obj, "name"), f"{where}.name"),
            namespace=gojson.string(member(obj, "namespace"), f"{where}.namespace"),
            pod_usage=ResourceMap.from_json(member(obj, "podUsage"), f"{where}.podUsage"),
            priority=priority,
            qos=qos,
        )


# The slots' own setters, for the decoders' direct construction (_resource_map, _pod_metric_fast).
_SET_CPU = vars(ResourceMap)["cpu_milli"].__set__
_SET_MEMORY = vars(ResourceMap)["memory_bytes"].__set__
_SET_POD_NAME = vars(PodMetricInfo)["name"].__set__
_SET_POD_NAMESPACE = vars(PodMetricInfo)["namespace"].__set__
_SET_POD_USAGE = vars(PodMetricInfo)["pod_usage"].__set__
_SET_POD_PRIORITY = vars(PodMetricInfo)["priority"].__set__
_SET_POD_QOS = vars(PodMetricInfo)["qos"].__set__


def _pods_metric(items: list[Any], where: str) -> tuple[PodMetricInfo, ...]:
    """``podsMetric``: the fast path per entry, the checked one (with the entry's field path) where it declines."""
    pods: list[PodMetricInfo] = []
    append = pods.append
    for i, item in enumerate(items):
        fast = _pod_metric_fast(item)
        append(fast if fast is not None else PodMetricInfo.from_json(item, f"{where}[{i}]"))
    return tuple(pods)


@dataclass(frozen=True, slots=True)
class HostApplicationMetricInfo:
    """One host application's usage (``HostApplicationMetricInfo{name, usage, priority, qos}``); priority
    and QoS are the NodeSLO entry's as written (no defaults), omitted when empty."""

    name: str
    usage: ResourceMap
    priority: PriorityClass = PriorityClass.NONE
    qos: QoSClass = QoSClass.NONE

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        out["usage"] = self.usage.to_json()
        return _classes_to_json(out, self.priority, self.qos)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> HostApplicationMetricInfo:
        obj = gojson.mapping(obj, where, optional=False)
        priority, qos = _classes_from_json(obj, where)
        return cls(name=gojson.string(member(obj, "name"), f"{where}.name"),
                   usage=ResourceMap.from_json(member(obj, "usage"), f"{where}.usage"), priority=priority, qos=qos)


@dataclass(frozen=True, slots=True)
class ReclaimableMetric:
    """``ReclaimableMetric{resource}``: what prod pods requested but are predicted not to use."""

    resource: ResourceMap

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource.to_json()}


@dataclass(frozen=True, slots=True)
class PeakMetric:
    """``PeakMetric{resource}``: the predicted peak of prod pods (system usage included, safety margin applied,
    requests of pods without a prediction counted in)."""

    resource: ResourceMap

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource.to_json()}


def _resource_member(obj: Mapping[str, Any], key: str, where: str) -> ResourceMap | None:
    """``obj[key].resource`` of a ReclaimableMetric or PeakMetric; None when ``key`` is absent."""
    value = member(obj, key)
    if value is None:
        return None
    return ResourceMap.from_json(member(gojson.mapping(value, f"{where}.{key}", optional=False), "resource"),
                                 f"{where}.{key}.resource")


@dataclass(frozen=True, slots=True)
class NodeMetricStatus:
    """``NodeMetricStatus``; the fields koordlet fills every report interval."""

    update_time: float | None = None
    """Epoch seconds of the report."""
    node_metric: NodeMetricInfo | None = None
    pods_metric: tuple[PodMetricInfo, ...] = ()
    prod_reclaimable_metric: ReclaimableMetric | None = None
    prod_peak_metric: PeakMetric | None = None
    host_application_metric: tuple[HostApplicationMetricInfo, ...] = ()
    """Usage of the NodeSLO's host applications, by name."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.update_time is not None:
            out["updateTime"] = format_time(self.update_time)
        if self.node_metric is not None:
            out["nodeMetric"] = self.node_metric.to_json()
        if self.pods_metric:
            out["podsMetric"] = [p.to_json() for p in self.pods_metric]
        if self.prod_reclaimable_metric is not None:
            out["prodReclaimableMetric"] = self.prod_reclaimable_metric.to_json()
        if self.prod_peak_metric is not None:
            out["prodPeakMetric"] = self.prod_peak_metric.to_json()
        if self.host_application_metric:
            out["hostApplicationMetric"] = [a.to_json() for a in self.host_application_metric]
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "status") -> NodeMetricStatus:
        if obj is None:
            return cls()
        fast = _status_fast(obj)  # the shape koordlets send; None sends anything else down the checked path
        if fast is not None:
            return fast
        obj = gojson.mapping(obj, where, optional=False)
        update_time = gojson.string(member(obj, "updateTime"), f"{where}.updateTime")
        try:
            when = parse_time(update_time) if update_time else None
        except ValueError as exc:
            raise ParseError(f"{where}.updateTime: {exc}") from None
        node_metric = member(obj, "nodeMetric")
        reclaimable = _resource_member(obj, "prodReclaimableMetric", where)
        peak = _resource_member(obj, "prodPeakMetric", where)
        return cls(
            update_time=when,
            node_metric=NodeMetricInfo.from_json(node_metric, f"{where}.nodeMetric") if node_metric is not None
            else None,
            pods_metric=_pods_metric(gojson.array(member(obj, "podsMetric"), f"{where}.podsMetric"),
                                     f"{where}.podsMetric"),
            prod_reclaimable_metric=ReclaimableMetric(reclaimable) if reclaimable is not None else None,
            prod_peak_metric=PeakMetric(peak) if peak is not None else None,
            host_application_metric=tuple(
                HostApplicationMetricInfo.from_json(item, f"{where}.hostApplicationMetric[{i}]")
                for i, item in enumerate(gojson.array(member(obj, "hostApplicationMetric"),
                                                      f"{where}.hostApplicationMetric"))),
        )


# --- The fast decoder ---------------------------------------------------------------------------------------
#
# A companion decodes every node's report every interval: ~100 pods and ~30 aggregated usages each.  The checked
# decoder above walks them one field at a time, building the field path it would name in an error.  The decoder
# below takes only the exact shape koordlets write (canonical keys, no nulls, the quantity forms they print),
# checks each column of the pod list at once (C loops: map, set, join) and builds the objects without their
# dataclass __init__.  It returns None as soon as anything is unusual, and the checked decoder then decodes (or
# names what is wrong): so for every status it accepts, it gives exactly what the checked decoder gives.

_STATUS_KEYS: Final = frozenset({"updateTime", "nodeMetric", "podsMetric", "prodReclaimableMetric", "prodPeakMetric",
                                 "hostApplicationMetric"})
_NODE_INFO_KEYS: Final = frozenset({"nodeUsage", "aggregatedNodeUsages", "systemUsage", "aggregatedSystemUsages"})
_AGGREGATED_KEYS: Final = frozenset({"usage", "duration"})
_RESOURCE_KEY_SET: Final = frozenset({"resource"})
_HOST_APP_KEYS: Final = frozenset({"name", "usage", "priority", "qos"})
_DICTS: Final = {dict}
_STRS: Final = {str}
_CUT_LAST: Final = itemgetter(slice(None, -1))
_NO_RESOURCES: Final[dict[str, Any]] = {}
_GET: Final[Callable[..., Any]] = dict.get
_DURATIONS: dict[str, float] = {}
"""Seconds of the duration texts met so far: koordlets send the same few windows ("5m0s") in every report."""
_MAX_DURATIONS: Final = 64

_SET_AGG_DURATION = vars(AggregatedUsage)["duration_seconds"].__set__
_SET_AGG_USAGE = vars(AggregatedUsage)["usage"].__set__


def _dicts_with_keys(items: list[Any], keys: frozenset[str]) -> bool:
    """Whether every item is a dict whose keys are all in ``keys``."""
    return set(map(type, items)) == _DICTS and keys.issuperset(chain.from_iterable(items))


def _amounts(texts: list[Any], milli: bool) -> list[Any] | None:
    """The amounts of a column of quantities (None where absent), as :func:`_amount_fast` reads each; None when
    one does not parse.  The usual columns (all ``"138m"``, all plain byte counts) are checked and converted
    whole."""
    if texts and set(map(type, texts)) == _STRS:
        joined = "".join(texts)
        shortest = min(map(len, texts))
        if joined.isascii() and shortest > 0 and max(map(len, texts)) <= _FAST_DIGITS:
            if joined.isdigit():  # every text plain digits: cores or bytes
                return list(map(mul, map(int, texts), repeat(1000))) if milli else list(map(int, texts))
            n = len(texts)
            # every text digits then one "m": n "m"s in all, each text ending with one, and digits otherwise
            if (milli and shortest > 1 and joined.count("m") == n and sum(map(str.endswith, texts, repeat("m"))) == n
                    and joined.replace("m", "").isdigit()):
                return list(map(int, map(_CUT_LAST, texts)))
    amounts = [_amount_fast(text, milli) for text in texts]
    return None if _UNUSUAL in amounts else amounts


def _resource_maps(usages: list[Any]) -> list[ResourceMap] | None:
    """ResourceMaps of a column of ``{"resources": {"cpu": .., "memory": ..}}`` objects; None when unusual."""
    if not usages:
        return []
    if not _dicts_with_keys(usages, _USAGE_KEYS):
        return None
    resources = list(map(_GET, usages, repeat("resources")))
    if None in resources:  # a pod not measured yet: "podUsage": {}
        resources = [_NO_RESOURCES if r is None else r for r in resources]
    if not _dicts_with_keys(resources, _RESOURCE_KEYS):
        return None
    cpu = _amounts(list(map(_GET, resources, repeat("cpu"))), True)
    memory = _amounts(list(map(_GET, resources, repeat("memory"))), False)
    if cpu is None or memory is None:
        return None
    maps = list(map(_new, repeat(ResourceMap, len(usages))))
    deque(map(_SET_CPU, maps, cpu), 0)
    deque(map(_SET_MEMORY, maps, memory), 0)
    return maps


def _classes(items: list[Any]) -> tuple[list[PriorityClass], list[QoSClass]] | None:
    """The ``priority`` and ``qos`` columns (absent is NONE); None when one is not a known class."""
    try:  # a list or an object is unhashable (TypeError): the checked path names it
        priorities = list(map(_PRIORITY_BY_VALUE.get, map(_GET, items, repeat("priority"), repeat(""))))
        qos = list(map(_QOS_BY_VALUE.get, map(_GET, items, repeat("qos"), repeat(""))))
    except TypeError:
        return None
    if None in priorities or None in qos:
        return None
    return priorities, qos  # type: ignore[return-value]  # None excluded just above


def _pods_fast(items: Any) -> tuple[PodMetricInfo, ...] | None:
    """``podsMetric`` decoded a column at a time; None when anything is unusual."""
    if items is None:
        return ()
    if type(items) is not list:
        return None
    if not items:
        return ()
    if not _dicts_with_keys(items, _POD_METRIC_KEYS):
        return None
    names = list(map(_GET, items, repeat("name"), repeat("")))
    namespaces = list(map(_GET, items, repeat("namespace"), repeat("")))
    if set(map(type, names)) != _STRS or set(map(type, namespaces)) != _STRS:
        return None
    classes = _classes(items)
    usages = _resource_maps(list(map(_GET, items, repeat("podUsage"))))
    if classes is None or usages is None:
        return None
    pods = list(map(_new, repeat(PodMetricInfo, len(items))))
    deque(map(_SET_POD_NAME, pods, names), 0)
    deque(map(_SET_POD_NAMESPACE, pods, namespaces), 0)
    deque(map(_SET_POD_USAGE, pods, usages), 0)
    deque(map(_SET_POD_PRIORITY, pods, classes[0]), 0)
    deque(map(_SET_POD_QOS, pods, classes[1]), 0)
    return tuple(pods)


def _duration_fast(text: Any) -> float | None:
    """Seconds of an aggregation window's duration text; None when it is not a string or does not parse."""
    if text is None or text == "":
        return 0.0
    if type(text) is not str:
        return None
    seconds = _DURATIONS.get(text)
    if seconds is None:
        try:
            seconds = parse_duration(text)
        except ValueError:
            return None
        if len(_DURATIONS) < _MAX_DURATIONS:  # bounded: a hostile node cannot grow it
            _DURATIONS[text] = seconds
    return seconds


def _windows_fast(lists: tuple[Any, ...]) -> tuple[tuple[AggregatedUsage, ...], ...] | None:
    """Each of ``lists`` (``aggregatedNodeUsages``, ``aggregatedSystemUsages``) decoded, their ResourceMaps a
    column at a time; None when anything is unusual."""
    windows: list[Any] = []
    for items in lists:
        if items is not None:
            if type(items) is not list:
                return None
            windows += items
    if not windows:
        return (), ()
    if not _dicts_with_keys(windows, _AGGREGATED_KEYS):
        return None
    usages = list(map(_GET, windows, repeat("usage"), repeat({})))
    if set(map(type, usages)) != _DICTS:
        return None
    try:
        kinds = list(map(_AGGREGATION_BY_VALUE.__getitem__, chain.from_iterable(usages)))
    except (KeyError, TypeError):
        return None
    maps = _resource_maps(list(chain.from_iterable(map(dict.values, usages))))
    seconds = list(map(_duration_fast, map(_GET, windows, repeat("duration"))))
    if maps is None or None in seconds:
        return None
    out = list(map(_new, repeat(AggregatedUsage, len(windows))))
    deque(map(_SET_AGG_DURATION, out, seconds), 0)
    at = 0
    for window, usage in zip(out, usages, strict=True):
        count = len(usage)
        _SET_AGG_USAGE(window, dict(zip(kinds[at:at + count], maps[at:at + count], strict=True)))
        at += count
    split = len(lists[0]) if lists[0] is not None else 0
    return tuple(out[:split]), tuple(out[split:])


def _node_info_fast(obj: Any) -> NodeMetricInfo | None:
    if type(obj) is not dict or not obj.keys() <= _NODE_INFO_KEYS:
        return None
    node_usage = _usage_fast(obj.get("nodeUsage"))
    system_usage = _usage_fast(obj.get("systemUsage"))
    windows = _windows_fast((obj.get("aggregatedNodeUsages"), obj.get("aggregatedSystemUsages")))
    if node_usage is None or system_usage is None or windows is None:
        return None
    return NodeMetricInfo(node_usage, windows[0], system_usage, windows[1])


def _resource_fast(obj: Any) -> ResourceMap | None:
    """``{"resource": ResourceMap}`` (prodReclaimableMetric, prodPeakMetric); None when unusual."""
    if type(obj) is not dict or not obj.keys() <= _RESOURCE_KEY_SET:
        return None
    return _usage_fast(obj.get("resource"))


def _host_apps_fast(items: Any) -> tuple[HostApplicationMetricInfo, ...] | None:
    if items is None:
        return ()
    if type(items) is not list or not _dicts_with_keys(items, _HOST_APP_KEYS):
        return None
    apps = []
    for item in items:
        name = item.get("name", "")
        usage = _usage_fast(item.get("usage"))
        priority = _PRIORITY_BY_VALUE.get(item.get("priority", "")) if type(item.get("priority", "")) is str else None
        qos = _QOS_BY_VALUE.get(item.get("qos", "")) if type(item.get("qos", "")) is str else None
        if type(name) is not str or usage is None or priority is None or qos is None:
            return None
        apps.append(HostApplicationMetricInfo(name, usage, priority, qos))
    return tuple(apps)


def _status_fast(obj: Any) -> NodeMetricStatus | None:
    """:meth:`NodeMetricStatus.from_json` of a status in the shape koordlets send; None for anything else."""
    if type(obj) is not dict or not obj.keys() <= _STATUS_KEYS:
        return None
    text = obj.get("updateTime")
    when: float | None = None
    if text is not None and text != "":
        if type(text) is not str:
            return None
        try:
            when = parse_time(text)
        except ValueError:
            return None
    raw_node = obj.get("nodeMetric")
    node_metric = _node_info_fast(raw_node) if raw_node is not None else None
    pods = _pods_fast(obj.get("podsMetric"))
    if (raw_node is not None and node_metric is None) or pods is None:
        return None
    reclaimable = peak = None
    if (raw := obj.get("prodReclaimableMetric")) is not None:
        if (resource := _resource_fast(raw)) is None:
            return None
        reclaimable = ReclaimableMetric(resource)
    if (raw := obj.get("prodPeakMetric")) is not None:
        if (resource := _resource_fast(raw)) is None:
            return None
        peak = PeakMetric(resource)
    host_apps = _host_apps_fast(obj.get("hostApplicationMetric"))
    if host_apps is None:
        return None
    return NodeMetricStatus(when, node_metric, pods, reclaimable, peak, host_apps)
