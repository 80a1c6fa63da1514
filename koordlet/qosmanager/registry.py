"""The one registry of QoS strategies: ``NAME`` -> factory, in the order they run each round.
No import-time registration: adding a strategy means adding a line here (CONVENTIONS #2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from koordlet.errors import ConfigError
from koordlet.qosmanager.framework import Options, Strategy, StrategyFactory


def _factories() -> list[tuple[str, StrategyFactory]]:
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
    )

    return [
        (cpusuppress.NAME, cpusuppress.new),
        (cpuburst.NAME, cpuburst.new),
        (cpuevict.NAME, cpuevict.new),
        (memoryevict.NAME, memoryevict.new),
        (cgreconcile.NAME, cgreconcile.new),
        (blkio.NAME, blkio.new),
        (coresched.NAME, coresched.new),
        (netqos.NAME, netqos.new),
        (resctrl.NAME, resctrl.new),
    ]


def registry(factories: Sequence[tuple[str, StrategyFactory]] | None = None) -> Mapping[str, StrategyFactory]:
    """Name -> factory; a duplicate name is a start-up error."""
    table: dict[str, StrategyFactory] = {}
    for name, factory in factories if factories is not None else _factories():
        if name in table:
            raise ConfigError(f"duplicate QoS strategy name {name!r}")
        table[name] = factory
    return table


def build_strategies(options: Options, factories: Sequence[tuple[str, StrategyFactory]] | None = None
                     ) -> list[Strategy]:
    return [factory(options) for factory in registry(factories).values()]
