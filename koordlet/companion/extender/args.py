"""``LoadAwareSchedulingArgs``: the plugin's arguments with upstream's defaults, read from the args object, a
KubeSchedulerConfiguration or a ConfigMap holding one (``pkg/scheduler/apis/config/v1/defaults.go``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from koordlet.apis import gojson
from koordlet.apis.duration import duration_value
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import AggregationType
from koordlet.errors import ConfigError

PLUGIN_NAME: Final = "LoadAwareScheduling"
ARGS_KIND: Final = "LoadAwareSchedulingArgs"

CPU: Final = "cpu"
MEMORY: Final = "memory"

_DEFAULT_RESOURCE_WEIGHTS: Final = {CPU: 1, MEMORY: 1}
_DEFAULT_USAGE_THRESHOLDS: Final = {CPU: 65, MEMORY: 95}
_DEFAULT_ESTIMATED_SCALING_FACTORS: Final = {CPU: 85, MEMORY: 70}


def int_map(value: Any, where: str, low: int, high: int | None) -> dict[str, int]:
    """A ``map[string]int64`` of percentages or weights, each within ``low``..``high`` (None: unbounded)."""
    out: dict[str, int] = {}
    for name, number in gojson.mapping(value, where, ConfigError).items():
        if isinstance(number, bool) or not isinstance(number, int):
            raise ConfigError(f"{where}.{name}: expected an integer, got {number!r}")
        if number < low or (high is not None and number > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{where}.{name}: must be {bound}, got {number}")
        out[str(name)] = number
    return out


def _bool(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    return gojson.boolean(obj, key, where, default, ConfigError)


def aggregation_type(value: Any, where: str) -> AggregationType | None:
    """An ``AggregationType`` name (``p95``...); absent or empty is None (use ``nodeUsage``)."""
    if value in (None, ""):
        return None
    try:
        return AggregationType(value)
    except ValueError:
        choices = ", ".join(t.value for t in AggregationType)
        raise ConfigError(f"{where}: expected one of {choices}, got {value!r}") from None


def duration_seconds(value: Any, where: str) -> float:
    """A ``metav1.Duration`` (``"5m"``); absent or zero means "the longest non-empty window"."""
    if value in (None, ""):
        return 0.0
    seconds = duration_value(value, where)
    if seconds < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    return seconds


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
        obj = gojson.mapping(obj, where, ConfigError)
        return cls(
            usage_thresholds=int_map(member(obj, "usageThresholds"), f"{where}.usageThresholds", 0, 100),
            usage_aggregation_type=aggregation_type(member(obj, "usageAggregationType"),
                                                     f"{where}.usageAggregationType"),
            usage_aggregated_duration_seconds=duration_seconds(member(obj, "usageAggregatedDuration"),
                                                                f"{where}.usageAggregatedDuration"),
            score_aggregation_type=aggregation_type(member(obj, "scoreAggregationType"),
                                                     f"{where}.scoreAggregationType"),
            score_aggregated_duration_seconds=duration_seconds(member(obj, "scoreAggregatedDuration"),
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
        obj = gojson.mapping(obj, where, ConfigError)
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
        weights = int_map(member(obj, "resourceWeights"), f"{where}.resourceWeights", 1, 100)
        thresholds = int_map(member(obj, "usageThresholds"), f"{where}.usageThresholds", 0, 100)
        factors = dict(_DEFAULT_ESTIMATED_SCALING_FACTORS)
        factors.update(int_map(member(obj, "estimatedScalingFactors"), f"{where}.estimatedScalingFactors", 0, 100))
        aggregated = member(obj, "aggregated")
        return cls(
            filter_expired_node_metrics=_bool(obj, "filterExpiredNodeMetrics", where, True),
            node_metric_expiration_seconds=expiration,
            enable_schedule_when_node_metrics_expired=_bool(obj, "enableScheduleWhenNodeMetricsExpired", where,
                                                            False),
            resource_weights=weights or dict(_DEFAULT_RESOURCE_WEIGHTS),
            usage_thresholds=thresholds or dict(_DEFAULT_USAGE_THRESHOLDS),
            prod_usage_thresholds=int_map(member(obj, "prodUsageThresholds"), f"{where}.prodUsageThresholds",
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
        args = _find_args(_load_document(text, "scheduler config"), "scheduler config")
        if args is None:
            raise ConfigError(f"scheduler config: no {PLUGIN_NAME} pluginConfig and no {ARGS_KIND} object")
        return cls.from_json(args[1], args[0])

    @classmethod
    def load(cls, path: str | Path) -> LoadAwareArgs:
        """:meth:`from_document` on a file."""
        return cls.from_document(Path(path).read_text(encoding="utf-8"))


def _load_document(text: str, where: str) -> Any:
    """A YAML or JSON document without its ``...`` lines (see :meth:`LoadAwareArgs.from_document`)."""
    try:
        return yaml.safe_load("\n".join(line for line in text.splitlines() if line.strip() != "..."))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML or JSON: {exc}") from None


def _find_args(document: Any, where: str) -> tuple[str, Any] | None:
    if not isinstance(document, Mapping):
        return None
    kind = member(document, "kind")
    if kind == ARGS_KIND:
        return where, document
    if kind == "ConfigMap":
        for key, value in gojson.mapping(member(document, "data"), f"{where}.data", ConfigError).items():
            if isinstance(value, str):
                found = _find_args(_load_document(value, f"{where}.data.{key}"), f"{where}.data.{key}")
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
