"""The collectors koordlet knows, in the order they run within a shared tick."""

from __future__ import annotations

from koordlet import plugins
from koordlet.errors import ConfigError
from koordlet.metricsadvisor.collectors import (
    beresource,
    cpi,
    hostapp,
    noderesource,
    podmemory,
    podresource,
    psi,
    sysresource,
    throttled,
)
from koordlet.metricsadvisor.framework import Collector, CollectorDeps

KIND = "collector"

# sysresource derives from noderesource, podresource and hostapp samples of the same tick: it comes after them.
PLUGINS: tuple[plugins.Plugin[CollectorDeps, Collector], ...] = (
    noderesource.PLUGIN, podresource.PLUGIN, podmemory.PLUGIN, throttled.PLUGIN, beresource.PLUGIN,
    hostapp.PLUGIN, sysresource.PLUGIN, psi.PLUGIN, cpi.PLUGIN)


def build_collectors(deps: CollectorDeps | None = None) -> list[Collector]:
    """One instance of every collector (gated ones decide in ``enabled`` whether they run, so the advisor
    can log them as disabled); a duplicate or misnamed plugin is a programming error caught at start-up."""
    collectors = plugins.build(KIND, PLUGINS, deps if deps is not None else CollectorDeps())
    for plugin, collector in zip(PLUGINS, collectors, strict=True):
        if collector.name != plugin.name:
            raise ConfigError(f"{KIND} registered as {plugin.name!r} calls itself {collector.name!r}")
    return collectors
