"""NodeMetric spec: the collect policy koordlet obeys, with Koordinator's defaults and floors
(``pkg/koordlet/statesinformer/impl/states_nodemetric.go``: aggregate 300 s, floor 60 s; report every 60 s,
floor 30 s; node aggregates over 5m/10m/30m; memory without page cache)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.duration import duration_value, format_duration
from koordlet.apis.gojson import member
from koordlet.errors import ConfigError

DEFAULT_AGGREGATE_DURATION_SECONDS: Final = 300
MIN_AGGREGATE_DURATION_SECONDS: Final = 60
DEFAULT_REPORT_INTERVAL_SECONDS: Final = 60
MIN_REPORT_INTERVAL_SECONDS: Final = 30
DEFAULT_NODE_AGGREGATE_DURATIONS: Final[tuple[float, ...]] = (300.0, 600.0, 1800.0)
MAX_POLICY_SECONDS: Final = 7 * 24 * 3600
"""Upper bound of every collect-policy duration from a spec.  Koordinator sets none, but the policy arrives
from the companion and a report interval of 10**12 s (a valid int64) overflows the report timer's wait;
a week is far above any real window."""


class MemoryCollectPolicy(enum.Enum):
    """``nodeMemoryCollectPolicy``: which memory figure NodeMetric reports (the CRD's enum)."""

    WITHOUT_PAGE_CACHE = "usageWithoutPageCache"
    WITH_HOT_PAGE_CACHE = "usageWithHotPageCache"
    WITH_PAGE_CACHE = "usageWithPageCache"


def _json_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


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
        policy = member(gojson.mapping(spec, where, ConfigError, optional=False), "metricCollectPolicy")
        where = f"{where}.metricCollectPolicy"
        if policy is None:
            return cls()
        policy = gojson.mapping(policy, where, ConfigError, optional=False)

        durations = DEFAULT_NODE_AGGREGATE_DURATIONS
        aggregate_policy = member(policy, "nodeAggregatePolicy")
        if aggregate_policy is not None:
            path = f"{where}.nodeAggregatePolicy"
            raw = member(gojson.mapping(aggregate_policy, path, ConfigError, optional=False), "durations")
            if raw is not None:
                durations = tuple(_duration_item(item, f"{path}.durations[{i}]")
                                  for i, item in enumerate(gojson.array(raw, f"{path}.durations", ConfigError)))

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
    seconds = duration_value(value, where)
    if seconds <= 0:
        raise ConfigError(f"{where}: must be positive, got {value!r}")
    if seconds > MAX_POLICY_SECONDS:
        raise ConfigError(f"{where}: at most {MAX_POLICY_SECONDS} seconds, got {value!r}")
    return seconds
