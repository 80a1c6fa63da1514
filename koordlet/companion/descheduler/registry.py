"""The balance plugins the descheduler knows, by name (upstream ``framework/plugins/registry.go``).  Each plugin
module exports ``NAME``, ``parse_args(obj, where)`` (ConfigError on bad args; used when the configuration is
loaded) and ``new_plugin(args, handle)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from koordlet.companion.descheduler import custompriority, lownodeload
from koordlet.companion.descheduler.framework import ArgsParser, BalancePlugin, Handle, PluginFactory


class PluginModule(Protocol):
    NAME: str

    def parse_args(self, obj: Any, where: str) -> object: ...

    def new_plugin(self, args: Mapping[str, Any] | None, handle: Handle) -> BalancePlugin: ...


def _tables(*modules: PluginModule) -> tuple[dict[str, PluginFactory], dict[str, ArgsParser]]:
    factories: dict[str, PluginFactory] = {}
    parsers: dict[str, ArgsParser] = {}
    for module in modules:
        if module.NAME in factories:
            raise RuntimeError(f"descheduler plugin {module.NAME!r} registered twice")
        factories[module.NAME] = module.new_plugin
        parsers[module.NAME] = module.parse_args
    return factories, parsers


PLUGIN_FACTORIES, ARGS_PARSERS = _tables(lownodeload, custompriority)
