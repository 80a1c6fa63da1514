"""The ``slo-controller-config`` ConfigMap (koordinator ``apis/configuration/slo_controller_config.go``) and the
NodeSLO spec it yields for one node.

Each ``data`` key holds a JSON document.  The strategy keys (``resource-threshold-config``, ``resource-qos-config``,
``cpu-burst-config``, ``system-config``) are ``{clusterStrategy, nodeStrategies[{name, nodeSelector, ...}]}``; the
others (``colocation-config``, ``host-application-config``, ``cpu-normalization-config``,
``resource-amplification-config``) hold the cluster values at the top level next to ``nodeConfigs``.  For a node,
the cluster values are laid over Koordinator's defaults and then the *first* node entry whose ``nodeSelector``
matches the node's labels is laid over that (set fields win; objects merge, lists replace).  A nil selector
matches nothing, an empty one everything (``metav1.LabelSelector``).

Keys are independent: a key that is not valid JSON, or that holds an invalid field, falls back to its defaults and
its :class:`ConfigError` (naming the key and the field path) is returned, while every other key still applies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, TypeVar

import yaml

from koordlet.apis.gojson import loads, member
from koordlet.apis.nodemetric import MAX_POLICY_SECONDS
from koordlet.apis.nodeslo import (
    CPUBurstStrategy,
    HostApplicationSpec,
    JsonObject,
    NodeSLOSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
    default_cpu_burst_strategy,
    default_resource_qos_strategy,
    default_resource_threshold_strategy,
    default_system_strategy,
    merge_json,
)
from koordlet.apis.nodeslo.fields import (
    bool_field,
    duration_list_field,
    enum_field,
    float_field,
    float_map_field,
    int_field,
    list_field,
    map_field,
    nested,
    show,
    str_field,
    str_list_field,
    str_map_field,
)
from koordlet.errors import ConfigError, ParseError

CONFIGMAP_NAME: Final = "slo-controller-config"
COLOCATION_CONFIG_KEY: Final = "colocation-config"
RESOURCE_THRESHOLD_CONFIG_KEY: Final = "resource-threshold-config"
RESOURCE_QOS_CONFIG_KEY: Final = "resource-qos-config"
CPU_BURST_CONFIG_KEY: Final = "cpu-burst-config"
SYSTEM_CONFIG_KEY: Final = "system-config"
HOST_APPLICATION_CONFIG_KEY: Final = "host-application-config"
CPU_NORMALIZATION_CONFIG_KEY: Final = "cpu-normalization-config"
RESOURCE_AMPLIFICATION_CONFIG_KEY: Final = "resource-amplification-config"

CALCULATE_POLICIES: Final = ("usage", "request", "maxUsageRequest")
MID_RECLAIM_MODES: Final = ("static",)
"""Koordinator's ``MidReclaimMode`` values (unset: the prediction-based formula)."""
MEMORY_COLLECT_POLICIES: Final = ("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache")
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")

# ------------------------------------------------------------------------------------------ node selection


@dataclass(frozen=True)
class LabelSelectorRequirement(JsonObject):
    """One ``matchExpressions`` entry."""

    key: str | None = str_field("key")
    """Label key."""
    operator: str | None = enum_field("operator", SELECTOR_OPERATORS)
    """``In``, ``NotIn``, ``Exists`` or ``DoesNotExist``."""
    values: tuple[str, ...] | None = str_list_field("values")
    """Values for In/NotIn; must be empty for Exists/DoesNotExist."""

    def check(self, where: str) -> None:
        # Kubernetes' rules (LabelSelectorAsSelector): a key, an operator, values exactly for In/NotIn.
        if not self.key:
            raise ConfigError(f"{where}.key: must be a non-empty label key")
        if self.operator is None:
            raise ConfigError(f"{where}.operator: must be one of {', '.join(SELECTOR_OPERATORS)}")
        if self.operator in ("In", "NotIn") and not self.values:
            raise ConfigError(f"{where}.values: must be non-empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ConfigError(f"{where}.values: must be empty for operator {self.operator}, got {list(self.values)}")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (NotIn also holds when the label is absent)."""
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key or ""] in (self.values or ())
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True)
class LabelSelector(JsonObject):
    """``metav1.LabelSelector``: all ``matchLabels`` and all ``matchExpressions`` must hold."""

    match_labels: Mapping[str, str] | None = str_map_field("matchLabels")
    """Labels that must be present with these values."""
    match_expressions: tuple[LabelSelectorRequirement, ...] | None = list_field(
        "matchExpressions", LabelSelectorRequirement)
    """Set-based requirements."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` is selected (an empty selector selects every node)."""
        if any(labels.get(key) != value for key, value in (self.match_labels or {}).items()):
            return False
        return all(requirement.matches(labels) for requirement in self.match_expressions or ())


@dataclass(frozen=True)
class NodeCfgProfile(JsonObject):
    """The ``name`` and ``nodeSelector`` every node-level entry carries inline."""

    name: str | None = str_field("name")
    """Label for humans and consoles."""
    node_selector: LabelSelector | None = field(default=None, metadata=nested("nodeSelector", LabelSelector))
    """Nodes the entry applies to; nil selects no node."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether the entry applies to a node with ``labels``."""
        return self.node_selector is not None and self.node_selector.matches(labels)


# ------------------------------------------------------------------------------------------ other keys


@dataclass(frozen=True)
class AggregatePolicy(JsonObject):
    """``metricAggregatePolicy``."""

    durations: tuple[str, ...] | None = duration_list_field("durations")
    """Windows of the aggregated node usage NodeMetric reports ("5m", "10m", "30m")."""


@dataclass(frozen=True)
class ColocationStrategy(JsonObject):
    """``colocation-config``: how the SLO controller computes batch/mid resources for a node."""

    enable: bool | None = bool_field("enable")
    """Whether colocation is on; off removes batch-cpu/batch-memory from the node (default false)."""
    metric_aggregate_duration_seconds: int | None = int_field("metricAggregateDurationSeconds", 1, MAX_POLICY_SECONDS)
    """NodeMetric aggregation window (default 300)."""
    metric_report_interval_seconds: int | None = int_field("metricReportIntervalSeconds", 1, MAX_POLICY_SECONDS)
    """NodeMetric report interval (default 60)."""
    metric_aggregate_policy: AggregatePolicy | None = field(
        default=None, metadata=nested("metricAggregatePolicy", AggregatePolicy))
    """Aggregation windows of NodeMetric."""
    metric_memory_collect_policy: str | None = enum_field("metricMemoryCollectPolicy", MEMORY_COLLECT_POLICIES)
    """Which memory figure NodeMetric reports."""
    cpu_reclaim_threshold_percent: int | None = int_field("cpuReclaimThresholdPercent", 0)
    """Share of node CPU that may be reclaimed for batch (default 60)."""
    cpu_calculate_policy: str | None = enum_field("cpuCalculatePolicy", CALCULATE_POLICIES)
    """``usage`` (default) or ``maxUsageRequest``."""
    memory_reclaim_threshold_percent: int | None = int_field("memoryReclaimThresholdPercent", 0)
    """Share of node memory that may be reclaimed for batch (default 65)."""
    memory_calculate_policy: str | None = enum_field("memoryCalculatePolicy", CALCULATE_POLICIES)
    """``usage`` (default), ``request`` or ``maxUsageRequest``."""
    degrade_time_minutes: int | None = int_field("degradeTimeMinutes", 1)
    """NodeMetric age after which batch resources are reset (default 15)."""
    update_time_threshold_seconds: int | None = int_field("updateTimeThresholdSeconds", 1)
    """Force an update of batch resources after this long (default 300)."""
    resource_diff_threshold: float | None = float_field("resourceDiffThreshold", 0.0, 1.0)
    """Relative change that triggers an update (default 0.1)."""
    mid_cpu_threshold_percent: int | None = int_field("midCPUThresholdPercent", 0, 100)
    """Cap of mid-cpu as a share of allocatable (default 100)."""
    mid_memory_threshold_percent: int | None = int_field("midMemoryThresholdPercent", 0, 100)
    """Cap of mid-memory as a share of allocatable (default 100)."""
    mid_unallocated_percent: int | None = int_field("midUnallocatedPercent", 0, 100)
    """Share of unallocated resources added to mid (default 0)."""
    mid_reclaim_mode: str | None = enum_field("midReclaimMode", MID_RECLAIM_MODES)
    """``static``: mid is a fixed share of the node's capacity (the two ``midStatic*`` keys) instead of the
    prediction-based formula (unset, the default)."""
    mid_static_cpu_reserved_percent: int | None = int_field("midStaticCPUReservedPercent", 0, 100)
    """Share of node CPU capacity that is mid-cpu under ``midReclaimMode: static`` (default 0)."""
    mid_static_memory_reserved_percent: int | None = int_field("midStaticMemoryReservedPercent", 0, 100)
    """Share of node memory capacity that is mid-memory under ``midReclaimMode: static`` (default 0)."""
    batch_cpu_threshold_percent: int | None = int_field("batchCPUThresholdPercent", 0)
    """Optional cap of batch-cpu as a share of the node total."""
    batch_memory_threshold_percent: int | None = int_field("batchMemoryThresholdPercent", 0)
    """Optional cap of batch-memory as a share of the node total."""


def default_colocation_strategy() -> ColocationStrategy:
    """Koordinator's colocation defaults (disabled; 300/60 s metrics; reclaim 60/65 % by usage...)."""
    return ColocationStrategy(
        enable=False, metric_aggregate_duration_seconds=300, metric_report_interval_seconds=60,
        cpu_reclaim_threshold_percent=60, cpu_calculate_policy="usage", memory_reclaim_threshold_percent=65,
        memory_calculate_policy="usage", degrade_time_minutes=15, update_time_threshold_seconds=300,
        resource_diff_threshold=0.1, mid_cpu_threshold_percent=100, mid_memory_threshold_percent=100,
        mid_unallocated_percent=0, mid_static_cpu_reserved_percent=0, mid_static_memory_reserved_percent=0)


@dataclass(frozen=True)
class HostApplicationCfg(JsonObject):
    """``host-application-config``: the applications of a node (a matching node entry replaces the list)."""

    applications: tuple[HostApplicationSpec, ...] | None = list_field("applications", HostApplicationSpec)
    """Host applications under QoS management."""


@dataclass(frozen=True)
class ModelRatioCfg(JsonObject):
    """CPU normalization ratios of one CPU model."""

    base_ratio: float | None = float_field("baseRatio", 0.0)
    """Ratio with neither hyper-threading nor turbo."""
    hyper_thread_enabled_ratio: float | None = float_field("hyperThreadEnabledRatio", 0.0)
    """Ratio with hyper-threading."""
    turbo_enabled_ratio: float | None = float_field("turboEnabledRatio", 0.0)
    """Ratio with turbo."""
    hyper_thread_turbo_enabled_ratio: float | None = float_field("hyperThreadTurboEnabledRatio", 0.0)
    """Ratio with both."""


@dataclass(frozen=True)
class CPUNormalizationStrategy(JsonObject):
    """``cpu-normalization-config``."""

    enable: bool | None = bool_field("enable")
    """Whether nodes get a CPU normalization ratio (default false)."""
    default_ratio: float | None = float_field("defaultRatio", 0.0)
    """Ratio of models missing from ``ratioModel``."""
    ratio_model: Mapping[str, ModelRatioCfg] | None = map_field("ratioModel", ModelRatioCfg)
    """Ratios by CPU model name as BasicInfo reports it."""


@dataclass(frozen=True)
class ResourceAmplificationStrategy(JsonObject):
    """``resource-amplification-config``."""

    enable: bool | None = bool_field("enable")
    """Whether the configured ratios apply (default false; the CPU normalization ratio applies regardless)."""
    resource_amplification_ratio: Mapping[str, float] | None = float_map_field("resourceAmplificationRatio")
    """Resource name -> how much more of it the scheduler may allocate than the node has.  A ratio below 1 is
    accepted here and refused per node by the calculation, as upstream does."""


# ------------------------------------------------------------------------------------------ rendering

T = TypeVar("T", bound=JsonObject)


def _load_json(key: str, text: Any) -> Mapping[str, Any]:
    if not isinstance(text, str):
        raise ConfigError(f"{key}: must be a JSON string, got {show(text)}")

    def reject_constant(name: str) -> Any:
        raise ConfigError(f"{key}: invalid JSON: {name} is not a JSON value")

    try:
        obj = loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{key}: invalid JSON: {err}") from None
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{key}: must be a JSON object, got {show(obj)}")
    return obj


def render_key(data: Mapping[str, Any], key: str, cls: type[T], default: T, node_labels: Mapping[str, str],
               *, cluster_key: str | None = "clusterStrategy", nodes_key: str = "nodeStrategies") -> T:
    """The value of one ConfigMap key for a node: defaults, then the cluster values, then the first matching
    node entry.  Raises ConfigError naming the key and field path; a missing key yields ``default``."""
    if key not in data:
        return default
    cfg = _load_json(key, data[key])
    cluster_where = f"{key}: {cluster_key}" if cluster_key else key
    cluster_obj = member(cfg, cluster_key) if cluster_key else cfg
    cluster = cls.from_json({} if cluster_obj is None else cluster_obj, cluster_where)
    merged = merge_json(default.to_json(), cluster.to_json())
    where = cluster_where
    raw_nodes = member(cfg, nodes_key)
    if raw_nodes is not None and not isinstance(raw_nodes, list):
        raise ConfigError(f"{key}: {nodes_key}: must be a list, got {show(raw_nodes)}")
    chosen: T | None = None
    for index, entry in enumerate(raw_nodes or ()):
        entry_where = f"{key}: {nodes_key}[{index}]"
        profile = NodeCfgProfile.from_json(entry, entry_where)
        strategy = cls.from_json(entry, entry_where)  # every entry is validated, not only the matching one
        if chosen is None and profile.matches(node_labels):
            chosen = strategy
            where = f"{entry_where} (over {cluster_where})"
    if chosen is not None:
        merged = merge_json(merged, chosen.to_json())
    return cls.from_json(merged, where)


def _guarded(key: str, errors: list[ConfigError], default: T, render: Callable[[], T]) -> T:
    try:
        return render()
    except ConfigError as err:
        errors.append(err if str(err).startswith(key) else ConfigError(f"{key}: {err}"))
        return default


def render_nodeslo(data: Mapping[str, Any], node_labels: Mapping[str, str]
                   ) -> tuple[NodeSLOSpec, tuple[ConfigError, ...]]:
    """The NodeSLO spec the SLO controller would write for a node with ``node_labels``, plus one error per
    ConfigMap key that was bad input (that key fell back to its defaults; the others applied)."""
    errors: list[ConfigError] = []

    def key_value(key: str, cls: type[T], default: T) -> T:
        return _guarded(key, errors, default, lambda: render_key(data, key, cls, default, node_labels))

    threshold = key_value(RESOURCE_THRESHOLD_CONFIG_KEY, ResourceThresholdStrategy,
                          default_resource_threshold_strategy())
    qos = key_value(RESOURCE_QOS_CONFIG_KEY, ResourceQOSStrategy, default_resource_qos_strategy())
    burst = key_value(CPU_BURST_CONFIG_KEY, CPUBurstStrategy, default_cpu_burst_strategy())
    system = key_value(SYSTEM_CONFIG_KEY, SystemStrategy, default_system_strategy())
    host_apps = _guarded(HOST_APPLICATION_CONFIG_KEY, errors, HostApplicationCfg(), lambda: render_key(
        data, HOST_APPLICATION_CONFIG_KEY, HostApplicationCfg, HostApplicationCfg(), node_labels,
        cluster_key=None, nodes_key="nodeConfigs"))
    spec = NodeSLOSpec(resource_used_threshold_with_be=threshold, resource_qos_strategy=qos,
                       cpu_burst_strategy=burst, system_strategy=system, extensions=MappingProxyType({}),
                       host_applications=host_apps.applications)
    return spec, tuple(errors)


def render_colocation(data: Mapping[str, Any], node_labels: Mapping[str, str]
                      ) -> tuple[ColocationStrategy, tuple[ConfigError, ...]]:
    """The colocation strategy for a node (cluster values, then the first matching ``nodeConfigs`` entry)."""
    errors: list[ConfigError] = []
    default = default_colocation_strategy()
    strategy = _guarded(COLOCATION_CONFIG_KEY, errors, default, lambda: render_key(
        data, COLOCATION_CONFIG_KEY, ColocationStrategy, default, node_labels,
        cluster_key=None, nodes_key="nodeConfigs"))
    return strategy, tuple(errors)


def render_cpu_normalization(data: Mapping[str, Any], node_labels: Mapping[str, str]
                             ) -> tuple[CPUNormalizationStrategy, tuple[ConfigError, ...]]:
    """The CPU normalization strategy for a node (disabled by default)."""
    errors: list[ConfigError] = []
    default = CPUNormalizationStrategy(enable=False)
    strategy = _guarded(CPU_NORMALIZATION_CONFIG_KEY, errors, default, lambda: render_key(
        data, CPU_NORMALIZATION_CONFIG_KEY, CPUNormalizationStrategy, default, node_labels,
        cluster_key=None, nodes_key="nodeConfigs"))
    return strategy, tuple(errors)


def render_resource_amplification(data: Mapping[str, Any], node_labels: Mapping[str, str]
                                  ) -> tuple[ResourceAmplificationStrategy, tuple[ConfigError, ...]]:
    """The resource amplification strategy for a node (disabled by default)."""
    errors: list[ConfigError] = []
    default = ResourceAmplificationStrategy(enable=False)
    strategy = _guarded(RESOURCE_AMPLIFICATION_CONFIG_KEY, errors, default, lambda: render_key(
        data, RESOURCE_AMPLIFICATION_CONFIG_KEY, ResourceAmplificationStrategy, default, node_labels,
        cluster_key=None, nodes_key="nodeConfigs"))
    return strategy, tuple(errors)


def key_errors(data: Mapping[str, Any]) -> dict[str, str]:
    """ConfigMap key -> why it is refused.  Validation does not depend on the node (every node entry is
    checked), so one render with no labels finds every bad key."""
    errors: dict[str, str] = {}
    for key, text in data.items():
        if not isinstance(text, str):
            errors[key] = f"{key}: must be a string, got {type(text).__name__}"
    _, problems = render_nodeslo(data, {})
    _, colocation_problems = render_colocation(data, {})
    _, normalization_problems = render_cpu_normalization(data, {})
    _, amplification_problems = render_resource_amplification(data, {})
    for problem in (*problems, *colocation_problems, *normalization_problems, *amplification_problems):
        text = str(problem)
        found = next((k for k in data if text.startswith(k)), None)
        if found is not None:
            errors.setdefault(found, text)
    return errors


def keep_last_good(good: Mapping[str, str], data: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The ConfigMap data to render from after ``data`` replaced the one whose good keys were ``good``, and
    the refused keys with why.

    A refused key keeps its text from ``good`` (or, never good, is left out so it renders its defaults): a
    typo in one key does not change the NodeSLO in force, while the other keys of the same edit still apply."""
    errors = key_errors(data)
    kept = {key: text for key, text in data.items() if key not in errors and isinstance(text, str)}
    for key in errors:
        if key in good:
            kept[key] = good[key]
    return kept, errors


def configmap_data_from_yaml(text: str) -> dict[str, str]:
    """The ``data`` of a ConfigMap written as YAML: a full manifest, a ``data:``-only patch, or bare data keys.

    Raises ParseError when the text is not valid YAML (a Helm template, say) or holds no mapping."""
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise ParseError(f"not valid YAML: {err}") from None
    except RecursionError:  # PyYAML's parser recurses per nesting level
        raise ParseError("not valid YAML: nested too deeply") from None
    if len(documents) != 1 or not isinstance(documents[0], Mapping):
        raise ParseError(f"expected one YAML mapping, got {len(documents)} document(s)")
    doc = documents[0]
    data = doc.get("data") if "data" in doc else doc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ParseError(f"ConfigMap data must be a mapping, got {show(data)}")
    # Only string values are ConfigMap data; a stray non-string (a doc fragment) is not a config key.
    return {str(key): value for key, value in data.items() if isinstance(value, str)}
