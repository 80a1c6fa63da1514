"""Block IO QoS reconcile: blk-throttle limits and iocost weights of the besteffort QoS cgroup, iocost QoS
of the root cgroup (Koordinator ``qosmanager/plugins/blkio``)."""

from __future__ import annotations

from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.blkio.strategy import GATE, NAME, BlkIOReconcile

__all__ = ["GATE", "NAME", "BlkIOReconcile", "new"]


def new(options: Options) -> Strategy:
    return BlkIOReconcile(options)
