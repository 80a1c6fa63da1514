"""NodeMetric (``slo.koordinator.sh/v1alpha1``): the collect policy koordlet obeys and the status it reports.

JSON names, defaults and floors follow Koordinator: ``apis/slo/v1alpha1/nodemetric_types.go`` for the shape,
``pkg/koordlet/statesinformer/impl/states_nodemetric.go`` for the defaults (aggregate 300 s, floor 60 s;
report every 60 s, floor 30 s; node aggregates over 5m/10m/30m; memory without page cache).

The status serialises the way Go's ``encoding/json`` writes Koordinator's structs, so the scheduler, the
SLO controller and existing dashboards read it unchanged:

- quantities are Kubernetes canonical strings: CPU from milli-cores (``resource.NewMilliQuantity(m, DecimalSI)``:
  ``"138m"``, ``"2"``, ``"1k"``), memory from bytes (``resource.NewQuantity(b, BinarySI)``: ``"1815637738"``, or
  ``"17828Ki"`` when the count is a multiple of 1024);
- durations are Go ``time.Duration`` strings (``"5m0s"``), times RFC 3339 in UTC to the second;
- ``omitempty`` is honoured where Go honours it: empty lists, empty strings and nil pointers are left out, while
  the ``nodeUsage``/``systemUsage`` structs are always written (``omitempty`` does not apply to structs), as
  ``{}`` when they hold nothing.

Parsing is the reverse and as lenient as Go's decoder where that matters for hand-written specs: object keys
match case-insensitively (``encoding/json`` does; see the samples INDEX), unknown keys are ignored.  Values of
the wrong type are rejected with an error naming the field path.
"""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.gojson import member
from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ConfigError, ParseError

API_VERSION: Final = "slo.koordinator.sh/v1alpha1"
KIND: Final = "NodeMetric"

DEFAULT_AGGREGATE_DURATION_SECONDS: Final = 300
MIN_AGGREGATE_DURATION_SECONDS: Final = 60
DEFAULT_REPORT_INTERVAL_SECONDS: Final = 60
MIN_REPORT_INTERVAL_SECONDS: Final = 30
DEFAULT_NODE_AGGREGATE_DURATIONS: Final[tuple[float, ...]] = (300.0, 600.0, 1800.0)
MAX_POLICY_SECONDS: Final = 7 * 24 * 3600
"""Upper bound of every collect-policy duration from a spec.  Koordinator sets none, but the policy arrives
from the companion and a report interval of 10**12 s (a valid int64) overflows the report timer's wait;
a week is far above any real window."""


class AggregationType(enum.Enum):
    """Keys of ``AggregatedUsage.usage`` (koordinator apis/extension: ``AggregationType``)."""

    AVG = "avg"
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"


class MemoryCollectPolicy(enum.Enum):
    """``nodeMemoryCollectPolicy``: which memory figure NodeMetric reports (the CRD's enum)."""

    WITHOUT_PAGE_CACHE = "usageWithoutPageCache"
    WITH_HOT_PAGE_CACHE = "usageWithHotPageCache"
    WITH_PAGE_CACHE = "usageWithPageCache"


# ---------------------------------------------------------------------------------------------- quantities

_DECIMAL_SUFFIXES: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def _decimal_si(mantissa: int, exponent: int) -> str:
    """Kubernetes' canonical DecimalSI text of ``mantissa * 10**exponent`` (apimachinery int64Amount
    AsCanonicalBytes): strip factors of ten, then lower the exponent to a multiple of three."""
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's modulo is never negative: -1 -> 2, -2 -> 1, as Go's switch maps them
    mantissa *= 10**shift
    exponent -= shift
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    return f"{mantissa}{suffix}" if suffix is not None else f"{mantissa}e{exponent}"


def format_cpu_milli(milli: int) -> str:
    """A CPU quantity as Kubernetes writes ``NewMilliQuantity(milli, DecimalSI)``: ``138m``, ``2``, ``1k``."""
    return _decimal_si(milli, -3)


def format_memory_bytes(count: int) -> str:
    """A byte quantity as Kubernetes writes ``NewQuantity(count, BinarySI)``.

    Below 1024 in magnitude Kubernetes switches to DecimalSI (so 1000 is ``1k``); otherwise every factor of
    1024 becomes a binary suffix (``17828Ki``) and anything else stays a plain integer (``1815637738``)."""
    if -1024 < count < 1024:
        return _decimal_si(count, 0)
    exponent = 0
    while count % 1024 == 0 and exponent < max(_BINARY_SUFFIXES):
        count //= 1024
        exponent += 1
    return f"{count}{_BINARY_SUFFIXES[exponent]}"


# ---------------------------------------------------------------------------------------------- durations

_NANOS_PER_UNIT: Final = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9,
                          "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (``time.ParseDuration``: ``"5m"``, ``"1h30m"``, ``"1.5s"``, ``"-2m"``).

    Raises ValueError naming the text."""
    rest = text
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"invalid duration {text!r}")
    nanos = Decimal(0)
    pos = 0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected a number and a unit (ns, us, ms, s, m, h)")
        nanos += Decimal(match.group(1)) * _NANOS_PER_UNIT[match.group(2)]
        pos = match.end()
    return sign * float(nanos / 10**9)


def _fraction(value: int, precision: int) -> tuple[str, int]:
    """Go's fmtFrac: the low ``precision`` digits of ``value`` as a fraction without trailing zeros."""
    digits: list[str] = []
    for _ in range(precision):
        digit = value % 10
        if digit or digits:
            digits.append(str(digit))
        value //= 10
    return ("." + "".join(reversed(digits)) if digits else ""), value


def format_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` writes it: ``5m0s``, ``1h0m0s``, ``1.5s``, ``500ms``."""
    nanos = round(seconds * 10**9)
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos == 0:
        return "0s"
    if nanos < 10**9:
        if nanos < 10**3:
            return f"{sign}{nanos}ns"
        precision, unit = (3, "µs") if nanos < 10**6 else (6, "ms")
        frac, whole = _fraction(nanos, precision)
        return f"{sign}{whole}{frac}{unit}"
    frac, whole_seconds = _fraction(nanos, 9)
    text = f"{whole_seconds % 60}{frac}s"
    minutes = whole_seconds // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        if minutes // 60:
            text = f"{minutes // 60}h{text}"
    return sign + text


# ---------------------------------------------------------------------------------------------- time

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
    return parsed.astimezone(UTC).timestamp()


# ---------------------------------------------------------------------------------------------- JSON helpers



def _object(value: Any, where: str, error: type[ValueError]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str, error: type[ValueError]) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ParseError(f"{where}: expected a string, got {value!r}")
    return value


def _json_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


# ---------------------------------------------------------------------------------------------- status

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
        resources = member(_object(obj, where, ParseError), "resources")
        if resources is None:
            return cls()
        resources = _object(resources, f"{where}.resources", ParseError)
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
        obj = _object(obj, where, ParseError)
        usage: dict[AggregationType, ResourceMap] = {}
        raw_usage = member(obj, "usage")
        for key, value in _object(raw_usage if raw_usage is not None else {}, f"{where}.usage", ParseError).items():
            try:
                kind = AggregationType(key)
            except ValueError:
                raise ParseError(f"{where}.usage: unknown aggregation {key!r}") from None
            usage[kind] = ResourceMap.from_json(value, f"{where}.usage.{key}")
        duration = _string(member(obj, "duration"), f"{where}.duration")
        try:
            seconds = parse_duration(duration) if duration else 0.0
        except ValueError as exc:
            raise ParseError(f"{where}.duration: {exc}") from None
        return cls(duration_seconds=seconds, usage=usage)


def _aggregated_list(obj: Any, where: str) -> tuple[AggregatedUsage, ...]:
    return tuple(AggregatedUsage.from_json(item, f"{where}[{i}]")
                 for i, item in enumerate(_list(obj, where, ParseError)))


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
        obj = _object(obj, where, ParseError)
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
    cpu, memory = resources.get("cpu"), resources.get("memory")
    if (cpu is not None and type(cpu) is not str) or (memory is not None and type(memory) is not str):
        return None
    try:
        return ResourceMap(cpu_milli=milli_value(cpu) if cpu is not None else None,
                           memory_bytes=int_value(memory) if memory is not None else None)
    except ParseError:
        return None


def _pod_metric_fast(obj: Any) -> PodMetricInfo | None:
    """The fast path of :meth:`PodMetricInfo.from_json` (a companion decodes ~100 of these per report)."""
    if type(obj) is not dict or not obj.keys() <= _POD_METRIC_KEYS:
        return None
    name, namespace = obj.get("name", ""), obj.get("namespace", "")
    priority_text, qos_text = obj.get("priority") or "", obj.get("qos") or ""
    if type(priority_text) is not str or type(qos_text) is not str:
        return None  # the checked path names the bad field (a list would not even be a dict key)
    priority = _PRIORITY_BY_VALUE.get(priority_text)
    qos = _QOS_BY_VALUE.get(qos_text)
    if type(name) is not str or type(namespace) is not str or priority is None or qos is None:
        return None
    usage = _usage_fast(obj.get("podUsage"))
    if usage is None:
        return None
    return PodMetricInfo(name=name, namespace=namespace, pod_usage=usage, priority=priority, qos=qos)


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
        if self.priority is not PriorityClass.NONE:
            out["priority"] = self.priority.value
        if self.qos is not QoSClass.NONE:
            out["qos"] = self.qos.value
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PodMetricInfo:
        fast = _pod_metric_fast(obj)
        if fast is not None:
            return fast
        obj = _object(obj, where, ParseError)
        priority_text = _string(member(obj, "priority"), f"{where}.priority")
        qos_text = _string(member(obj, "qos"), f"{where}.qos")
        priority = _PRIORITY_BY_VALUE.get(priority_text)
        if priority is None:
            raise ParseError(f"{where}.priority: unknown priority class {priority_text!r}")
        qos = _QOS_BY_VALUE.get(qos_text)
        if qos is None:
            raise ParseError(f"{where}.qos: unknown QoS class {qos_text!r}")
        return cls(
            name=_string(member(obj, "name"), f"{where}.name"),
            namespace=_string(member(obj, "namespace"), f"{where}.namespace"),
            pod_usage=ResourceMap.from_json(member(obj, "podUsage"), f"{where}.podUsage"),
            priority=priority,
            qos=qos,
        )


@dataclass(frozen=True, slots=True)
class ReclaimableMetric:
    """``ReclaimableMetric{resource}``: what prod pods requested but are predicted not to use."""

    resource: ResourceMap

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource.to_json()}


@dataclass(frozen=True, slots=True)
class NodeMetricStatus:
    """``NodeMetricStatus``; the fields koordlet fills every report interval."""

    update_time: float | None = None
    """Epoch seconds of the report."""
    node_metric: NodeMetricInfo | None = None
    pods_metric: tuple[PodMetricInfo, ...] = ()
    prod_reclaimable_metric: ReclaimableMetric | None = None

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
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "status") -> NodeMetricStatus:
        if obj is None:
            return cls()
        obj = _object(obj, where, ParseError)
        update_time = _string(member(obj, "updateTime"), f"{where}.updateTime")
        try:
            when = parse_time(update_time) if update_time else None
        except ValueError as exc:
            raise ParseError(f"{where}.updateTime: {exc}") from None
        node_metric = member(obj, "nodeMetric")
        reclaimable = member(obj, "prodReclaimableMetric")
        return cls(
            update_time=when,
            node_metric=NodeMetricInfo.from_json(node_metric, f"{where}.nodeMetric") if node_metric is not None
            else None,
            pods_metric=tuple(PodMetricInfo.from_json(item, f"{where}.podsMetric[{i}]")
                              for i, item in enumerate(_list(member(obj, "podsMetric"), f"{where}.podsMetric",
                                                             ParseError))),
            prod_reclaimable_metric=ReclaimableMetric(ResourceMap.from_json(
                member(_object(reclaimable, f"{where}.prodReclaimableMetric", ParseError), "resource"),
                f"{where}.prodReclaimableMetric.resource")) if reclaimable is not None else None,
        )


# ---------------------------------------------------------------------------------------------- spec

def _seconds_field(obj: Mapping[str, Any], key: str, where: str, default: float, floor: float) -> float:
    value = member(obj, key)
    if value is None:
        return default
    # Go decodes these into *int64: a fraction, a string or a bool does not decode.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key}: expected an integer number of seconds, got {value!r}")
    if value > MAX_POLICY_SECONDS:
        raise ConfigError(f"{where}.{key}: at most {MAX_POLICY_SECONDS} seconds, got {value}")
    # Koordinator raises a value below the floor to the floor (util.MaxInt64) rather than rejecting it.
    return float(max(value, floor))


@dataclass(frozen=True, slots=True)
class NodeMetricCollectPolicy:
    """``spec.metricCollectPolicy``: how koordlet aggregates and how often it reports.

    :meth:`from_spec` applies Koordinator's defaults and floors to a NodeMetric spec.  Building the policy
    directly (from koordlet's own config, or in tests) checks only that every duration is positive, so a
    test may report every 50 ms; configuration that must obey Koordinator's floors goes through
    :meth:`from_spec`."""

    aggregate_duration_seconds: float = float(DEFAULT_AGGREGATE_DURATION_SECONDS)
    """Window of the ``nodeUsage``/``systemUsage``/``podUsage`` averages (floor 60 from a spec)."""
    report_interval_seconds: float = float(DEFAULT_REPORT_INTERVAL_SECONDS)
    """Time between reports (floor 30 from a spec)."""
    node_aggregate_durations: tuple[float, ...] = DEFAULT_NODE_AGGREGATE_DURATIONS
    """Windows of ``aggregatedNodeUsages`` and ``aggregatedSystemUsages``, in report order."""
    node_memory_collect_policy: MemoryCollectPolicy = MemoryCollectPolicy.WITHOUT_PAGE_CACHE

    def __post_init__(self) -> None:
        for name in ("aggregate_duration_seconds", "report_interval_seconds"):
            value = getattr(self, name)
            if not value > 0 or math.isinf(value):
                raise ConfigError(f"metricCollectPolicy.{name}: must be a positive number of seconds, got {value!r}")
        for i, seconds in enumerate(self.node_aggregate_durations):
            if not seconds > 0 or math.isinf(seconds):
                raise ConfigError(
                    f"metricCollectPolicy.nodeAggregatePolicy.durations[{i}]: must be positive, got {seconds!r}")

    @classmethod
    def from_spec(cls, spec: Any, where: str = "spec") -> NodeMetricCollectPolicy:
        """The policy of a NodeMetric ``spec`` object: fields it sets override the defaults (Koordinator
        decodes the spec over its default spec), values below a floor are raised to it.

        ``None`` or a spec without ``metricCollectPolicy`` gives the defaults.  Raises ConfigError naming the
        field path for a value of the wrong type, an unparsable duration or an unknown memory policy."""
        if spec is None:
            return cls()
        policy = member(_object(spec, where, ConfigError), "metricCollectPolicy")
        where = f"{where}.metricCollectPolicy"
        if policy is None:
            return cls()
        policy = _object(policy, where, ConfigError)

        durations = DEFAULT_NODE_AGGREGATE_DURATIONS
        aggregate_policy = member(policy, "nodeAggregatePolicy")
        if aggregate_policy is not None:
            path = f"{where}.nodeAggregatePolicy"
            raw = member(_object(aggregate_policy, path, ConfigError), "durations")
            if raw is not None:
                durations = tuple(_duration_item(item, f"{path}.durations[{i}]")
                                  for i, item in enumerate(_list(raw, f"{path}.durations", ConfigError)))

        memory = MemoryCollectPolicy.WITHOUT_PAGE_CACHE
        raw_memory = member(policy, "nodeMemoryCollectPolicy")
        if raw_memory is not None:
            try:
                memory = MemoryCollectPolicy(raw_memory)
            except ValueError:
                choices = ", ".join(m.value for m in MemoryCollectPolicy)
                raise ConfigError(
                    f"{where}.nodeMemoryCollectPolicy: expected one of {choices}, got {raw_memory!r}") from None

        return cls(
            aggregate_duration_seconds=_seconds_field(policy, "aggregateDurationSeconds", where,
                                                      DEFAULT_AGGREGATE_DURATION_SECONDS,
                                                      MIN_AGGREGATE_DURATION_SECONDS),
            report_interval_seconds=_seconds_field(policy, "reportIntervalSeconds", where,
                                                   DEFAULT_REPORT_INTERVAL_SECONDS, MIN_REPORT_INTERVAL_SECONDS),
            node_aggregate_durations=durations,
            node_memory_collect_policy=memory,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``metricCollectPolicy`` object with every field set."""
        return {
            "aggregateDurationSeconds": _json_number(self.aggregate_duration_seconds),
            "reportIntervalSeconds": _json_number(self.report_interval_seconds),
            "nodeAggregatePolicy": {"durations": [format_duration(d) for d in self.node_aggregate_durations]},
            "nodeMemoryCollectPolicy": self.node_memory_collect_policy.value,
        }


def _duration_item(value: Any, where: str) -> float:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a duration string such as \"5m\", got {value!r}")
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if seconds <= 0:
        raise ConfigError(f"{where}: must be positive, got {value!r}")
    if seconds > MAX_POLICY_SECONDS:
        raise ConfigError(f"{where}: at most {MAX_POLICY_SECONDS} seconds, got {value!r}")
    return seconds


# ---------------------------------------------------------------------------------------------- object

@dataclass(frozen=True, slots=True)
class NodeMetric:
    """A whole NodeMetric object (cluster-scoped, named after its node)."""

    name: str
    collect_policy: NodeMetricCollectPolicy | None = None
    """The spec's policy with defaults applied; None when the spec sets none."""
    status: NodeMetricStatus = field(default_factory=NodeMetricStatus)

    @property
    def effective_policy(self) -> NodeMetricCollectPolicy:
        return self.collect_policy if self.collect_policy is not None else NodeMetricCollectPolicy()

    def to_json(self) -> dict[str, Any]:
        spec = {"metricCollectPolicy": self.collect_policy.to_json()} if self.collect_policy is not None else {}
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": spec,
            "status": self.status.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Any) -> NodeMetric:
        """Parses a NodeMetric object (``kubectl get nodemetric -o json``, or YAML loaded to a dict).

        Raises ConfigError for a bad spec and ParseError for a bad status or envelope."""
        obj = _object(obj, "NodeMetric", ParseError)
        api_version, kind = member(obj, "apiVersion"), member(obj, "kind")
        if api_version not in (None, API_VERSION) or kind not in (None, KIND):
            raise ParseError(f"NodeMetric: expected {API_VERSION} {KIND}, got {api_version} {kind}")
        metadata = _object(member(obj, "metadata") or {}, "metadata", ParseError)
        spec = member(obj, "spec")
        has_policy = spec is not None and member(_object(spec, "spec", ConfigError), "metricCollectPolicy") is not None
        return cls(
            name=_string(member(metadata, "name"), "metadata.name"),
            collect_policy=NodeMetricCollectPolicy.from_spec(spec) if has_policy else None,
            status=NodeMetricStatus.from_json(member(obj, "status")),
        )
