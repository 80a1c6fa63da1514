"""``LowNodeLoadArgs`` (upstream ``types_loadaware.go``) with ``SetDefaults_LowNodeLoadArgs``,
``SetDefaults_LowNodeLoadNodePools``, the v1alpha2 conversion that turns the top-level thresholds into a first
pool named ``__default_node_pool__``, and ``ValidateLowLoadUtilizationArgs``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.duration import duration_value
from koordlet.apis.gojson import member
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.cluster import CPU, MEMORY
from koordlet.companion.descheduler.framework import Namespaces
from koordlet.errors import ConfigError

DEFAULT_POOL_NAME: Final = "__default_node_pool__"
DEFAULT_NODE_METRIC_EXPIRATION_SECONDS: Final = 180
DEFAULT_DETECTOR_CACHE_TIMEOUT_SECONDS: Final = 300.0
DEFAULT_ANOMALY_TIMEOUT_SECONDS: Final = 60.0
DEFAULT_CONSECUTIVE_ABNORMALITIES: Final = 5
DEFAULT_CONSECUTIVE_NORMALITIES: Final = 3


@dataclass(frozen=True)
class AnomalyCondition:
    """``LoadAnomalyCondition``: a node is abnormal after *more than* ``consecutive_abnormalities`` overloaded
    rounds in a row (1: at once)."""

    timeout_seconds: float = DEFAULT_ANOMALY_TIMEOUT_SECONDS
    consecutive_abnormalities: int = DEFAULT_CONSECUTIVE_ABNORMALITIES
    consecutive_normalities: int = DEFAULT_CONSECUTIVE_NORMALITIES


@dataclass(frozen=True)
class NodePool:
    """``LowNodeLoadNodePool`` after inheriting the top-level defaults."""

    name: str
    node_selector: LabelSelector | None
    use_deviation_thresholds: bool
    high_thresholds: Mapping[str, float]
    """Percent of allocatable per resource (``cpu``, ``memory``, ``pods``...)."""
    low_thresholds: Mapping[str, float]
    prod_high_thresholds: Mapping[str, float]
    prod_low_thresholds: Mapping[str, float]
    resource_weights: Mapping[str, int]
    anomaly_condition: AnomalyCondition


@dataclass(frozen=True)
class PodSelector:
    name: str
    selector: LabelSelector | None


@dataclass(frozen=True)
class LowNodeLoadArgs:
    paused: bool = False
    dry_run: bool = False
    """The plugin's own dry-run: it logs the pods it would evict and never calls the evictor."""
    number_of_nodes: int = 0
    """Act only when more than this many nodes are under the low thresholds."""
    node_metric_expiration_seconds: int = DEFAULT_NODE_METRIC_EXPIRATION_SECONDS
    evictable_namespaces: Namespaces | None = None
    pod_selectors: tuple[PodSelector, ...] = ()
    node_fit: bool = True
    detector_cache_timeout_seconds: float = DEFAULT_DETECTOR_CACHE_TIMEOUT_SECONDS
    node_pools: tuple[NodePool, ...] = ()
    """The default pool (top-level thresholds and node selector) first, then ``nodePools`` in order."""


def _bool(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    return gojson.boolean(obj, key, where, default, ConfigError)


def _int(obj: Mapping[str, Any], key: str, where: str, default: int, low: int) -> int:
    value = member(obj, key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}.{key}: expected an integer >= {low}, got {value!r}")
    return value


def _thresholds(obj: Any, where: str) -> dict[str, float] | None:
    """A ``ResourceThresholds`` map; None when absent (a pool then inherits the top-level one)."""
    if obj is None:
        return None
    out: dict[str, float] = {}
    for name, value in gojson.mapping(obj, where, ConfigError).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}.{name}: expected a percentage, got {value!r}")
        if value < 0:
            raise ConfigError(f"{where}.{name}: percentage must be greater than or equal to 0, got {value!r}")
        out[str(name)] = float(value)
    return out


def _weights(obj: Any, where: str) -> dict[str, int] | None:
    if obj is None:
        return None
    out: dict[str, int] = {}
    for name, value in gojson.mapping(obj, where, ConfigError).items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}.{name}: expected an integer weight, got {value!r}")
        out[str(name)] = value
    return out


def _anomaly(obj: Any, where: str, defaults: AnomalyCondition) -> AnomalyCondition | None:
    if obj is None:
        return None
    body = gojson.mapping(obj, where, ConfigError)
    timeout_raw = member(body, "timeout")
    timeout = defaults.timeout_seconds if timeout_raw in (None, "") else duration_value(timeout_raw,
                                                                                         f"{where}.timeout")
    if timeout <= 0:
        # The detector falls back to its own 60 s for a zero timeout (anomaly.NewBasicDetector).
        timeout = DEFAULT_ANOMALY_TIMEOUT_SECONDS
    # A zero count inherits the default (SetDefaults_LowNodeLoadArgs / SetDefaults_LowNodeLoadNodePools).
    abnormal = _int(body, "consecutiveAbnormalities", where, 0, 0) or defaults.consecutive_abnormalities
    normal = _int(body, "consecutiveNormalities", where, 0, 0) or defaults.consecutive_normalities
    return AnomalyCondition(timeout, abnormal, normal)


def _selector(obj: Any, where: str) -> LabelSelector | None:
    return None if obj is None else LabelSelector.from_json(obj, where)


def _validate_pool(pool: NodePool, where: str) -> None:
    """``ValidateLowLoadUtilizationArgs`` for one pool."""
    for name, low in pool.low_thresholds.items():
        high = pool.high_thresholds.get(name)
        if high is not None and low > high:
            raise ConfigError(f"{where}.lowThresholds.{name}: low percentage {low:g} must be less than or equal "
                              f"to highThresholds ({high:g})")
    for name, prod_high in pool.prod_high_thresholds.items():
        high = pool.high_thresholds.get(name)
        if high is not None and prod_high > high:
            raise ConfigError(f"{where}.prodHighThresholds.{name}: {prod_high:g} must be less than or equal to "
                              f"highThresholds ({high:g})")
    for name, prod_low in pool.prod_low_thresholds.items():
        prod_limit = pool.prod_high_thresholds.get(name)
        if prod_limit is not None and prod_low > prod_limit:
            raise ConfigError(f"{where}.prodLowThresholds.{name}: {prod_low:g} must be less than or equal to "
                              f"prodHighThresholds ({prod_limit:g})")


def parse_args(obj: Any, where: str = "LowNodeLoadArgs") -> LowNodeLoadArgs:
    """Decodes, defaults and validates ``LowNodeLoadArgs``; ConfigError naming the field path."""
    body = gojson.mapping(obj, where, ConfigError)
    expiration = _int(body, "nodeMetricExpirationSeconds", where, DEFAULT_NODE_METRIC_EXPIRATION_SECONDS, 1)
    cache_raw = member(body, "detectorCacheTimeout")
    cache_timeout = (DEFAULT_DETECTOR_CACHE_TIMEOUT_SECONDS if cache_raw in (None, "")
                     else duration_value(cache_raw, f"{where}.detectorCacheTimeout"))
    namespaces_raw = member(body, "evictableNamespaces")
    namespaces = (Namespaces.from_json(namespaces_raw, f"{where}.evictableNamespaces")
                  if namespaces_raw is not None else None)
    selectors = []
    for i, entry in enumerate(gojson.array(member(body, "podSelectors"), f"{where}.podSelectors", ConfigError)):
        entry_map = gojson.mapping(entry, f"{where}.podSelectors[{i}]", ConfigError, optional=False)
        selectors.append(PodSelector(str(member(entry_map, "name") or ""),
                                     _selector(member(entry_map, "selector"), f"{where}.podSelectors[{i}].selector")))

    low = _thresholds(member(body, "lowThresholds"), f"{where}.lowThresholds")
    high = _thresholds(member(body, "highThresholds"), f"{where}.highThresholds")
    prod_low = _thresholds(member(body, "prodLowThresholds"), f"{where}.prodLowThresholds")
    prod_high = _thresholds(member(body, "prodHighThresholds"), f"{where}.prodHighThresholds")
    # Every resource with a threshold weighs 1 unless set; a weight <= 0 is replaced by that default.
    default_weights = {CPU: 1, MEMORY: 1} | dict.fromkeys((*(low or {}), *(high or {})), 1)
    given = _weights(member(body, "resourceWeights"), f"{where}.resourceWeights")
    weights = dict(given or {})
    for name, weight in default_weights.items():
        if weights.get(name, 0) <= 0:
            weights[name] = weight
    anomaly = _anomaly(member(body, "anomalyCondition"), f"{where}.anomalyCondition",
                       AnomalyCondition()) or AnomalyCondition()
    top = NodePool(
        name=DEFAULT_POOL_NAME,
        node_selector=_selector(member(body, "nodeSelector"), f"{where}.nodeSelector"),
        use_deviation_thresholds=_bool(body, "useDeviationThresholds", where, False),
        high_thresholds=high or {}, low_thresholds=low or {},
        prod_high_thresholds=prod_high or {}, prod_low_thresholds=prod_low or {},
        resource_weights=weights, anomaly_condition=anomaly)
    _validate_pool(top, where)
    pools = [top]
    for i, entry in enumerate(gojson.array(member(body, "nodePools"), f"{where}.nodePools", ConfigError)):
        pool_where = f"{where}.nodePools[{i}]"
        pool_obj = gojson.mapping(entry, pool_where, ConfigError, optional=False)

        def inherit(key: str, parent: Mapping[str, float] | None, pw: str = pool_where,
                    po: Mapping[str, Any] = pool_obj) -> Mapping[str, float]:
            own = _thresholds(member(po, key), f"{pw}.{key}")
            return own if own is not None else (parent or {})

        pool_weights = _weights(member(pool_obj, "resourceWeights"), f"{pool_where}.resourceWeights")
        pool = NodePool(
            name=str(member(pool_obj, "name") or ""),
            node_selector=_selector(member(pool_obj, "nodeSelector"), f"{pool_where}.nodeSelector"),
            use_deviation_thresholds=_bool(pool_obj, "useDeviationThresholds", pool_where, False),
            high_thresholds=inherit("highThresholds", high),
            low_thresholds=inherit("lowThresholds", low),
            prod_high_thresholds=inherit("prodHighThresholds", prod_high),
            prod_low_thresholds=inherit("prodLowThresholds", prod_low),
            resource_weights=pool_weights if pool_weights is not None else weights,
            anomaly_condition=_anomaly(member(pool_obj, "anomalyCondition"), f"{pool_where}.anomalyCondition",
                                       anomaly) or anomaly)
        _validate_pool(pool, pool_where)
        pools.append(pool)
    return LowNodeLoadArgs(
        paused=_bool(body, "paused", where, False),
        dry_run=_bool(body, "dryRun", where, False),
        number_of_nodes=_int(body, "numberOfNodes", where, 0, 0),
        node_metric_expiration_seconds=expiration,
        evictable_namespaces=namespaces,
        pod_selectors=tuple(selectors),
        node_fit=_bool(body, "nodeFit", where, True),
        detector_cache_timeout_seconds=cache_timeout,
        node_pools=tuple(pools),
    )
