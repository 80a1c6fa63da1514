"""Resctrl QoS: L3 cache ways and memory bandwidth per class (LSR, LS, BE) and per annotated pod
(Koordinator ``qosmanager/plugins/resctrl`` and ``runtimehooks/hooks/resctrl``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.resctrl.strategy import NAME, ResctrlQoS

__all__ = ["NAME", "PLUGIN", "ResctrlQoS", "new"]


def new(options: Options) -> Strategy:
    return ResctrlQoS(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
