"""CPU burst for LS pods: ``cfs_burst_us`` and cfs quota scaling (Koordinator ``qosmanager/plugins/cpuburst``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.cpuburst.strategy import NAME, CPUBurst

__all__ = ["NAME", "PLUGIN", "CPUBurst", "new"]


def new(options: Options) -> Strategy:
    return CPUBurst(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
