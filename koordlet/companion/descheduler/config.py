"""``DeschedulerConfiguration`` (``descheduler/v1alpha2``, upstream ``pkg/descheduler/apis/config/v1alpha2``):
the interval, dry-run, eviction limits, node selector and the profiles with their plugins and plugin args.

Defaults are upstream's: one profile ``koord-descheduler`` when none is given, MigrationController as the
evict and filter plugin of every profile (``getDefaultPlugins``, merged with ``mergePluginSet``), each enabled
plugin's args defaulted when the profile has no ``pluginConfig`` for it.  Fields that only configure the Go
process (leaderElection, clientConnection, bind addresses) are accepted and ignored: the companion has its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from koordlet.apis import gojson
from koordlet.apis.duration import duration_value
from koordlet.apis.gojson import member
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.evictorargs import EvictorArgs, Limits, optional_count
from koordlet.companion.descheduler.registry import ARGS_PARSERS
from koordlet.errors import ConfigError

API_VERSION: Final = "descheduler/v1alpha2"
KIND: Final = "DeschedulerConfiguration"
DEFAULT_PROFILE_NAME: Final = "koord-descheduler"
MIGRATION_CONTROLLER: Final = "MigrationController"
DEFAULT_EVICTOR: Final = "DefaultEvictor"
EVICTOR_PLUGINS: Final = (MIGRATION_CONTROLLER, DEFAULT_EVICTOR)
"""Evict/filter plugins: both evict through the Eviction API here (upstream's MigrationController creates
PodMigrationJobs and reservations first; the companion has no koord-scheduler to honour them)."""
EXTENSION_POINTS: Final = ("deschedule", "balance", "evict", "filter")
_DEFAULT_ENABLED: Final = {"deschedule": (), "balance": (), "evict": (MIGRATION_CONTROLLER,),
                           "filter": (MIGRATION_CONTROLLER,)}


@dataclass(frozen=True)
class ProfileConfig:
    """One ``profiles[]`` entry after defaulting."""

    name: str
    plugins: Mapping[str, tuple[str, ...]]
    """Enabled plugin names per extension point (deschedule, balance, evict, filter), in order."""
    plugin_args: Mapping[str, Mapping[str, Any] | None]
    """Raw ``pluginConfig[].args`` by plugin name (None: the plugin's defaults); already validated."""
    evictor_args: EvictorArgs
    """Filter arguments of the profile's filter plugin plus the limits of its evict plugin."""
    node_selector: LabelSelector | None = None

    @property
    def balance(self) -> tuple[str, ...]:
        return self.plugins["balance"]


@dataclass(frozen=True)
class DeschedulerConfig:
    """A loaded ``DeschedulerConfiguration``."""

    interval_seconds: float = 0.0
    """``deschedulingInterval``; 0 runs one round and stops (upstream ``wait.NonSlidingUntil`` then cancel)."""
    dry_run: bool = False
    """``dryRun``: evaluate and log, evict nothing."""
    profiles: tuple[ProfileConfig, ...] = ()
    node_selector: LabelSelector | None = None
    """``nodeSelector``: the nodes the descheduler operates over."""
    limits: Limits = field(default_factory=Limits)
    """``maxNoOfPodsToEvictPerNode`` / ``PerNamespace`` / ``Total``, per round."""


def _plugin_names(obj: Any, where: str) -> tuple[str, ...]:
    names: list[str] = []
    for i, entry in enumerate(gojson.array(obj, where, ConfigError)):
        entry_map = gojson.mapping(entry, f"{where}[{i}]", ConfigError, optional=False)
        name = member(entry_map, "name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}[{i}].name: expected a plugin name, got {name!r}")
        names.append(name)
    return tuple(names)


def merge_plugin_set(defaults: tuple[str, ...], enabled: tuple[str, ...], disabled: tuple[str, ...]
                     ) -> tuple[str, ...]:
    """Upstream ``mergePluginSet``: the defaults not disabled (all of them with ``*``) in their order, an enabled
    default replaced in place, then the other enabled plugins in their order."""
    merged: list[str] = []
    replaced: set[str] = set()
    if "*" not in disabled:
        for name in defaults:
            if name in disabled:
                continue
            if name in enabled:
                replaced.add(name)
            merged.append(name)
    merged.extend(name for name in enabled if name not in replaced)
    return tuple(merged)


def _selector(obj: Any, where: str) -> LabelSelector | None:
    if obj is None:
        return None
    return LabelSelector.from_json(obj, where)


def _known(name: str) -> bool:
    return name in ARGS_PARSERS or name in EVICTOR_PLUGINS


def _profile(obj: Any, where: str, default_name: str) -> ProfileConfig:
    body = gojson.mapping(obj, where, ConfigError, optional=False)
    name = member(body, "name") or default_name
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: every profile needs a name when there are several")
    plugins_obj = gojson.mapping(member(body, "plugins"), f"{where}.plugins", ConfigError)
    plugins: dict[str, tuple[str, ...]] = {}
    for point in EXTENSION_POINTS:
        point_where = f"{where}.plugins.{point}"
        point_obj = gojson.mapping(member(plugins_obj, point), point_where, ConfigError)
        enabled = _plugin_names(member(point_obj, "enabled"), f"{point_where}.enabled")
        disabled = _plugin_names(member(point_obj, "disabled"), f"{point_where}.disabled")
        for i, plugin in enumerate(enabled):
            allowed = EVICTOR_PLUGINS if point in ("evict", "filter") else tuple(ARGS_PARSERS)
            if plugin not in allowed:
                raise ConfigError(f"{point_where}.enabled[{i}].name: unknown {point} plugin {plugin!r} "
                                  f"(known: {', '.join(allowed) or 'none'})")
            if plugin in enabled[:i]:
                raise ConfigError(f"{point_where}.enabled[{i}].name: plugin {plugin!r} enabled twice")
        plugins[point] = merge_plugin_set(_DEFAULT_ENABLED[point], enabled, disabled)

    args: dict[str, Mapping[str, Any] | None] = {}
    for i, entry in enumerate(gojson.array(member(body, "pluginConfig"), f"{where}.pluginConfig", ConfigError)):
        entry_where = f"{where}.pluginConfig[{i}]"
        entry_map = gojson.mapping(entry, entry_where, ConfigError, optional=False)
        plugin = member(entry_map, "name")
        if not isinstance(plugin, str) or not _known(plugin):
            raise ConfigError(f"{entry_where}.name: unknown plugin {plugin!r}")
        if plugin in args:
            raise ConfigError(f"{entry_where}.name: a second pluginConfig for {plugin!r}")
        raw = member(entry_map, "args")
        args[plugin] = gojson.mapping(raw, f"{entry_where}.args", ConfigError) if raw is not None else None
        if plugin in ARGS_PARSERS:
            ARGS_PARSERS[plugin](args[plugin], f"{entry_where}.args")
    for plugin in plugins["balance"]:
        if plugin not in args:
            args[plugin] = None
            ARGS_PARSERS[plugin](None, f"{where}.pluginConfig[{plugin}].args")

    if plugins["balance"] and not plugins["evict"]:
        raise ConfigError(f"{where}.plugins.evict: balance plugins are enabled but no evict plugin is")
    evictor_args = _evictor_args(plugins, args, where)
    return ProfileConfig(name=name, plugins=plugins, plugin_args=args, evictor_args=evictor_args,
                         node_selector=_selector(member(body, "nodeSelector"), f"{where}.nodeSelector"))


def _evictor_args(plugins: Mapping[str, tuple[str, ...]], args: Mapping[str, Mapping[str, Any] | None],
                  where: str) -> EvictorArgs:
    """The filter plugin's filters and the evict plugin's limits (a profile enables at most one of each
    that matters: the first)."""
    evict = plugins["evict"][0] if plugins["evict"] else None
    filter_name = plugins["filter"][0] if plugins["filter"] else None
    parsed: dict[str, EvictorArgs] = {}
    for name in {evict, filter_name} - {None}:
        assert name is not None
        parsed[name] = EvictorArgs.from_json(args.get(name), f"{where}.pluginConfig[{name}].args",
                                             migration_controller=name == MIGRATION_CONTROLLER)
    filters = parsed[filter_name] if filter_name is not None else EvictorArgs(evict_all_bare_pods=True,
                                                                               evict_local_storage_pods=True,
                                                                               evict_system_critical_pods=True)
    if evict is None:
        return filters
    limits = parsed[evict]
    return replace(filters, max_per_node=limits.max_per_node, max_per_namespace=limits.max_per_namespace,
                   max_total=limits.max_total, dry_run=limits.dry_run or filters.dry_run)


def parse_config(document: Any, where: str = KIND) -> DeschedulerConfig:
    """A decoded DeschedulerConfiguration object; ConfigError naming the field path on bad input."""
    body = gojson.mapping(document, where, ConfigError, optional=False)
    api_version = member(body, "apiVersion")
    kind = member(body, "kind")
    if api_version != API_VERSION or kind != KIND:
        raise ConfigError(f"{where}: expected apiVersion {API_VERSION} and kind {KIND}, "
                          f"got {api_version!r} and {kind!r}")
    interval_raw = member(body, "deschedulingInterval")
    interval = 0.0 if interval_raw in (None, "") else duration_value(interval_raw, f"{where}.deschedulingInterval")
    if interval < 0:
        raise ConfigError(f"{where}.deschedulingInterval: must not be negative, got {interval_raw!r}")
    dry_run = member(body, "dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise ConfigError(f"{where}.dryRun: expected true or false, got {dry_run!r}")
    profiles_raw = gojson.array(member(body, "profiles"), f"{where}.profiles", ConfigError) or [{}]
    # SetDefaults_DeschedulerConfiguration names a lone unnamed profile; several need names of their own.
    default_name = DEFAULT_PROFILE_NAME if len(profiles_raw) == 1 else ""
    profiles = tuple(_profile(p, f"{where}.profiles[{i}]", default_name) for i, p in enumerate(profiles_raw))
    names = [p.name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"{where}.profiles[{i}].name: duplicate profile name {name!r}")
    limits = Limits(
        per_node=optional_count(body, "maxNoOfPodsToEvictPerNode", where),
        per_namespace=optional_count(body, "maxNoOfPodsToEvictPerNamespace", where),
        total=optional_count(body, "maxNoOfPodsToEvictTotal", where),
    )
    return DeschedulerConfig(interval_seconds=interval, dry_run=bool(dry_run), profiles=profiles,
                             node_selector=_selector(member(body, "nodeSelector"), f"{where}.nodeSelector"),
                             limits=limits)


def _find_document(document: Any, where: str) -> tuple[Any, str]:
    """The DeschedulerConfiguration itself, or the one value of a ConfigMap's ``data`` that holds it."""
    if isinstance(document, Mapping) and member(document, "kind") == "ConfigMap":
        data = gojson.mapping(member(document, "data"), f"{where}.data", ConfigError)
        for key, value in data.items():
            if isinstance(value, str):
                inner = _load_yaml(value, f"{where}.data.{key}")
                if isinstance(inner, Mapping) and member(inner, "kind") == KIND:
                    return inner, f"{where}.data.{key}"
        raise ConfigError(f"{where}.data: no key holds a {KIND}")
    return document, where


def _load_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML or JSON: {exc}") from None


def load_config(text: str, where: str = KIND) -> DeschedulerConfig:
    """The YAML (or JSON) of a DeschedulerConfiguration, or of a ConfigMap holding one; ConfigError on bad
    input, naming the field path."""
    document, where = _find_document(_load_yaml(text, where), where)
    return parse_config(document, where)


def load_config_file(path: str | Path) -> DeschedulerConfig:
    """:func:`load_config` of a file; ConfigError when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"descheduler config {path}: {exc}") from None
    return load_config(text, str(path))
