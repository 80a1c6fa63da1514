"""Node-wide kernel knobs from NodeSLO ``systemStrategy`` (Koordinator ``qosmanager/plugins/sysreconcile``,
gate ``SystemConfig``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.sysreconcile.strategy import NAME, SystemConfig

__all__ = ["NAME", "PLUGIN", "SystemConfig", "new"]


def new(options: Options) -> Strategy:
    return SystemConfig(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
