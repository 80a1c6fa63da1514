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


def build_strategies(options: Options, strategies: Iterable[StrategyPlugin] = PLUGINS) -> list[Strategy]:
    """One instance of every strategy, in run order (each checks its feature gates itself every round:
    one switched off must still get its last round to undo what it did)."""
    return plugins.build(KIND, strategies, options)
