"""Memory eviction of BE (and eviction-enabled low-priority) pods (Koordinator ``qosmanager/plugins/memoryevict``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.memoryevict.strategy import NAME, MemoryEvict

__all__ = ["NAME", "PLUGIN", "MemoryEvict", "new"]


def new(options: Options) -> Strategy:
    return MemoryEvict(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
