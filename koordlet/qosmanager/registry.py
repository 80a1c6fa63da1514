"""The one registry of QoS strategies, in the order they run each round.  No import-time registration:
adding a strategy means adding its ``PLUGIN`` here, and two strategies with one name fail at start-up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins import (
    blkio,
    cgreconcile,
    coresched,
    cpuburst,
    cpuevict,
    cpusuppress,
    memoryevict,
    netqos,
    resctrl,
    sysreconcile,
)
from koordlet.qosmanager.shadow import Shadow

KIND = "QoS strategy"
StrategyPlugin = plugins.Plugin[Options, Strategy]

PLUGINS: tuple[StrategyPlugin, ...] = (
    cpusuppress.PLUGIN,
    cpuburst.PLUGIN,
    cpuevict.PLUGIN,
    memoryevict.PLUGIN,
    cgreconcile.PLUGIN,
    blkio.PLUGIN,
    coresched.PLUGIN,
    netqos.PLUGIN,
    resctrl.PLUGIN,
    sysreconcile.PLUGIN,
)


def registry(strategies: Iterable[StrategyPlugin] = PLUGINS) -> Mapping[str, StrategyPlugin]:
    """Name -> plugin in run order; a duplicate name is a start-up error."""
    return plugins.table(KIND, strategies)


def build_strategies(options: Options, strategies: Iterable[StrategyPlugin] = PLUGINS,
                     shadow: Shadow | None = None) -> list[Strategy]:
    """One instance of every strategy, in run order (each checks its feature gates itself every round:
    one switched off must still get its last round to undo what it did).  With ``shadow``, each gets an
    executor and evictor of its own, which the manager switches to shadow mode round by round."""
    if shadow is None:
        return plugins.build(KIND, strategies, options)
    return [plugin.new(shadow.options_for(name, options)) for name, plugin in registry(strategies).items()]
