"""Resctrl QoS: L3 cache ways and memory bandwidth per class (LSR, LS, BE) and per annotated pod
(Koordinator ``qosmanager/plugins/resctrl`` and ``runtimehooks/hooks/resctrl``)."""

from __future__ import annotations

from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.resctrl.strategy import GATE, NAME, POD_GATE, ResctrlQoS

__all__ = ["GATE", "NAME", "POD_GATE", "ResctrlQoS", "new"]


def new(options: Options) -> Strategy:
    return ResctrlQoS(options)
