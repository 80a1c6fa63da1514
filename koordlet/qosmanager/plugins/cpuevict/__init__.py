"""CPU eviction of BE pods starved of CPU, and of eviction-enabled pods on a busy node (Koordinator
``qosmanager/plugins/cpuevict``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.cpuevict.strategy import NAME, CPUEvict

__all__ = ["NAME", "PLUGIN", "CPUEvict", "new"]


def new(options: Options) -> Strategy:
    return CPUEvict(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
