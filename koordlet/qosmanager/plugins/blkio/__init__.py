"""Block IO QoS reconcile: blk-throttle limits and iocost weights of the besteffort QoS cgroup, iocost QoS
of the root cgroup (Koordinator ``qosmanager/plugins/blkio``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.blkio.strategy import NAME, BlkIOReconcile

__all__ = ["NAME", "PLUGIN", "BlkIOReconcile", "new"]


def new(options: Options) -> Strategy:
    return BlkIOReconcile(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
