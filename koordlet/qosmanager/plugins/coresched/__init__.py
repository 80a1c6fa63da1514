"""Core scheduling: cookies per ``koordinator.sh/core-sched-group-id`` group and ``cpu.idle`` from ``schedIdle``,
with a ``cpu.idle`` fallback for BE where the kernel has no core scheduling (Koordinator
``runtimehooks/hooks/coresched``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.coresched.strategy import NAME, CoreSched

__all__ = ["NAME", "PLUGIN", "CoreSched", "new"]


def new(options: Options) -> Strategy:
    return CoreSched(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
