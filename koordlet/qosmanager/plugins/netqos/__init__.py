"""Network bandwidth QoS by class over tc or the Terway QoS agent (Koordinator runtimehooks ``tc`` and
``terwayqos``, gates ``TCNetworkQoS`` and ``TerwayQoS``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.netqos.strategy import NAME, NetQoSStrategy

__all__ = ["NAME", "PLUGIN", "NetQoSStrategy", "new"]


def new(options: Options) -> Strategy:
    return NetQoSStrategy(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
