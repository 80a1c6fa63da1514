"""The one plugin shape shared by collectors, QoS strategies and runtime hooks.

Each plugin module exports ``NAME`` and ``new(deps)``, and publishes them as ``PLUGIN = Plugin(NAME, new)``
(with ``gate=`` when a feature gate decides at start-up whether it exists at all).  A subsystem's registry
is a plain tuple of those ``PLUGIN`` values in run order: no import-time registration, so adding a plugin is
one line in one place, and :func:`table` rejects two plugins with one name before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from koordlet.config import gates as feature_gates
from koordlet.errors import ConfigError

DepsT = TypeVar("DepsT", contravariant=True)
PluginT = TypeVar("PluginT", covariant=True)


@dataclass(frozen=True)
class Plugin(Generic[DepsT, PluginT]):
    """A named factory taking the subsystem's one deps object."""

    name: str
    new: Callable[[DepsT], PluginT]
    gate: str | None = None
    """A feature gate that must be on for the plugin to be built; None: always built (the plugin may still
    check gates that change at run time itself)."""


def table(kind: str, plugins: Iterable[Plugin[DepsT, PluginT]]) -> Mapping[str, Plugin[DepsT, PluginT]]:
    """Name -> plugin in registry order; a repeated name is a start-up error naming ``kind``."""
    result: dict[str, Plugin[DepsT, PluginT]] = {}
    for plugin in plugins:
        if plugin.name in result:
            raise ConfigError(f"duplicate {kind} name {plugin.name!r}")
        if plugin.gate is not None and plugin.gate not in feature_gates.GATES:
            raise ConfigError(f"{kind} {plugin.name!r} names an unknown feature gate {plugin.gate!r}")
        result[plugin.name] = plugin
    return result


def enabled(kind: str, plugins: Iterable[Plugin[DepsT, PluginT]],
            gates: Mapping[str, bool] | None = None) -> list[Plugin[DepsT, PluginT]]:
    """Every plugin whose gate is on (every plugin when ``gates`` is None), in order."""
    return [plugin for plugin in table(kind, plugins).values()
            if plugin.gate is None or gates is None or feature_gates.enabled(gates, plugin.gate)]


def build(kind: str, plugins: Iterable[Plugin[DepsT, PluginT]], deps: DepsT,
          gates: Mapping[str, bool] | None = None) -> list[PluginT]:
    """One instance of every plugin whose gate is on (every plugin when ``gates`` is None), in order."""
    return [plugin.new(deps) for plugin in enabled(kind, plugins, gates)]
