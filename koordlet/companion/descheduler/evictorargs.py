"""Arguments of the evict/filter plugins: Koordinator's ``MigrationControllerArgs``
(``pkg/descheduler/apis/config/v1alpha2/types_pluginargs.go``) and the Kubernetes descheduler's
``DefaultEvictorArgs`` (``sigs.k8s.io/descheduler`` ``plugins/defaultevictor/types.go``, including its
``podProtections``), and the per-round eviction limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.duration import duration_value
from koordlet.apis.gojson import member
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.framework import Namespaces
from koordlet.errors import ConfigError

DEFAULT_MAX_MIGRATING_PER_NODE: Final = 2
"""``SetDefaults_MigrationControllerArgs``."""
# podProtections names mapped to the field each one turns off (defaultDisabled) or on (extraEnabled).
_DEFAULT_PROTECTIONS: Final = {"PodsWithLocalStorage": "evict_local_storage_pods",
                               "SystemCriticalPods": "evict_system_critical_pods",
                               "FailedBarePods": "evict_failed_bare_pods",
                               "DaemonSetPods": "evict_daemonset_pods"}
_EXTRA_PROTECTIONS: Final = {"PodsWithPVC": "ignore_pvc_pods"}
# Upstream options this implementation does not have: refusing them beats ignoring a safety setting.
_UNSUPPORTED: Final = ("ignorePodsWithoutPDB", "noEvictionPolicy", "skipEvictionGates", "maxMigratingPerWorkload",
                       "maxUnavailablePerWorkload")


def _bool(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    return gojson.boolean(obj, key, where, default, ConfigError)


def optional_count(obj: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int | None:
    """A non-negative integer field (``*uint`` / ``*int32`` upstream); ``default`` when absent."""
    value = member(obj, key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True)
class EvictorArgs:
    """What the evict/filter plugin refuses and how many evictions it allows; defaults as upstream (nothing
    optional is evictable)."""

    evict_local_storage_pods: bool = False
    """``evictLocalStoragePods``: pods with emptyDir or hostPath volumes may be evicted."""
    evict_system_critical_pods: bool = False
    """``evictSystemCriticalPods``: also pods at system-critical priority (and the priority threshold is off)."""
    evict_daemonset_pods: bool = False
    """``evictDaemonSetPods`` (DefaultEvictor): DaemonSet pods may be evicted."""
    ignore_pvc_pods: bool = False
    """``ignorePvcPods``: pods with a PersistentVolumeClaim are never evicted."""
    evict_failed_bare_pods: bool = False
    """``evictFailedBarePods``: a pod without owners may be evicted once it has failed."""
    evict_all_bare_pods: bool = False
    """``evictAllBarePods`` (MigrationController): pods without owners may be evicted."""
    priority_threshold: int | None = None
    """``priorityThreshold.value``: only pods below it (or without a priority) may be evicted."""
    priority_threshold_name: str = ""
    """``priorityThreshold.name``: a PriorityClass whose value is the threshold (read each round)."""
    label_selector: LabelSelector | None = None
    """``labelSelector``: only matching pods may be evicted."""
    namespaces: Namespaces = field(default_factory=Namespaces)
    """``namespaces`` (MigrationController): include/exclude lists."""
    node_fit: bool = False
    """``nodeFit``: only pods that would fit some other node may be evicted."""
    min_pod_age_seconds: float | None = None
    """``minPodAge`` (DefaultEvictor): pods started less long ago (or not started) stay."""
    min_replicas: int = 0
    """``minReplicas`` (DefaultEvictor): a pod whose owner has fewer pods than this stays (0, 1: no check)."""
    max_per_node: int | None = None
    """``maxMigratingPerNode`` (MigrationController default 2); counted per round here (see :class:`Limits`)."""
    max_per_namespace: int | None = None
    """``maxMigratingPerNamespace``."""
    max_total: int | None = None
    """``maxMigratingGlobally``."""
    dry_run: bool = False
    """``dryRun`` of the plugin's args."""

    @classmethod
    def from_json(cls, obj: Any, where: str, *, migration_controller: bool) -> EvictorArgs:
        """MigrationControllerArgs (``migration_controller``) or DefaultEvictorArgs; ConfigError naming the
        field."""
        body = gojson.mapping(obj, where, ConfigError)
        for key in _UNSUPPORTED:
            if member(body, key) not in (None, False, "", []):
                raise ConfigError(f"{where}.{key}: not supported by koord-companion's descheduler")
        threshold = gojson.mapping(member(body, "priorityThreshold"), f"{where}.priorityThreshold", ConfigError)
        value = member(threshold, "value")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{where}.priorityThreshold.value: expected an integer, got {value!r}")
        name = member(threshold, "name") or ""
        if not isinstance(name, str):
            raise ConfigError(f"{where}.priorityThreshold.name: expected a string, got {name!r}")
        if value is not None and name:
            raise ConfigError(f"{where}.priorityThreshold: only one of value and name may be set")
        selector_obj = member(body, "labelSelector")
        age_raw = member(body, "minPodAge")
        flags = {
            "evict_local_storage_pods": _bool(body, "evictLocalStoragePods", where, False),
            "evict_system_critical_pods": _bool(body, "evictSystemCriticalPods", where, False),
            "evict_daemonset_pods": _bool(body, "evictDaemonSetPods", where, False),
            "ignore_pvc_pods": _bool(body, "ignorePvcPods", where, False),
            "evict_failed_bare_pods": _bool(body, "evictFailedBarePods", where, False),
        }
        flags.update(_protections(member(body, "podProtections"), f"{where}.podProtections"))
        return cls(
            **flags,
            evict_all_bare_pods=_bool(body, "evictAllBarePods", where, False),
            priority_threshold=value,
            priority_threshold_name=name,
            label_selector=LabelSelector.from_json(selector_obj, f"{where}.labelSelector") if selector_obj else None,
            namespaces=Namespaces.from_json(member(body, "namespaces"), f"{where}.namespaces"),
            node_fit=_bool(body, "nodeFit", where, False),
            min_pod_age_seconds=None if age_raw in (None, "") else duration_value(age_raw, f"{where}.minPodAge"),
            min_replicas=optional_count(body, "minReplicas", where, 0) or 0,
            max_per_node=optional_count(body, "maxMigratingPerNode", where,
                                        DEFAULT_MAX_MIGRATING_PER_NODE if migration_controller else None),
            max_per_namespace=optional_count(body, "maxMigratingPerNamespace", where),
            max_total=optional_count(body, "maxMigratingGlobally", where),
            dry_run=_bool(body, "dryRun", where, False),
        )


def _protections(obj: Any, where: str) -> dict[str, bool]:
    """``podProtections``: ``defaultDisabled`` turns a default protection off, ``extraEnabled`` an extra one on
    (what the deprecated booleans did)."""
    body = gojson.mapping(obj, where, ConfigError)
    out: dict[str, bool] = {}
    for key, table, value in (("defaultDisabled", _DEFAULT_PROTECTIONS, True),
                              ("extraEnabled", _EXTRA_PROTECTIONS, True)):
        for i, name in enumerate(gojson.array(member(body, key), f"{where}.{key}", ConfigError)):
            if name not in table:
                raise ConfigError(f"{where}.{key}[{i}]: unsupported protection {name!r} "
                                  f"(supported: {', '.join(table)})")
            out[table[name]] = value
    return out


@dataclass(frozen=True)
class Limits:
    """Evictions allowed per round (``maxNoOfPodsToEvictPerNode`` / ``PerNamespace`` / ``Total``); None: no
    limit.  Upstream's MigrationController counts in-flight migrations; evicting directly, a migration ends
    with its eviction, so the same numbers bound one round here."""

    per_node: int | None = None
    per_namespace: int | None = None
    total: int | None = None

    def tighter(self, other: Limits) -> Limits:
        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)
        return Limits(low(self.per_node, other.per_node), low(self.per_namespace, other.per_namespace),
                      low(self.total, other.total))
