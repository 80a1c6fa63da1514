"""BE CPU suppression by cpuset or CFS quota (Koordinator ``qosmanager/plugins/cpusuppress``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.cpusuppress.strategy import NAME, CPUSuppress

__all__ = ["NAME", "PLUGIN", "CPUSuppress", "new"]


def new(options: Options) -> Strategy:
    return CPUSuppress(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
