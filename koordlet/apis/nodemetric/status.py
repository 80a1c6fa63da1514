"""NodeMetric status: the usage koordlet reports, written the way Go's ``encoding/json`` writes Koordinator's
structs and read back as leniently as Go's decoder (see :mod:`koordlet.apis.nodemetric`)."""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
            usage[kind] = ResourceMap.from_json(value, f"{where}.usage.{key}")
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
        obj = gojson.mapping(obj, where, optional=False)
        priority, qos = _classes_from_json(obj, where)
        return cls(
            name=gojson.string(member(obj, "name"), f"{where}.name"),
            namespace=gojson.string(member(obj, "namespace"), f"{where}.namespace"),
            pod_usage=ResourceMap.from_json(member(obj, "podUsage"), f"{where}.podUsage"),
            priority=priority,
            qos=qos,
        )


def _pods_metric(items: list[Any], where: str) -> tuple[PodMetricInfo, ...]:
    return tuple(PodMetricInfo.from_json(item, f"{where}[{i}]") for i, item in enumerate(items))


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
