"""Network bandwidth QoS by class over tc or the Terway QoS agent (Koordinator runtimehooks ``tc`` and
``terwayqos``, gates ``TCNetworkQoS`` and ``TerwayQoS``)."""

from __future__ import annotations

from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.netqos.strategy import GATES, NAME, NetQoSStrategy

__all__ = ["GATES", "NAME", "NetQoSStrategy", "new"]


def new(options: Options) -> Strategy:
    return NetQoSStrategy(options)
