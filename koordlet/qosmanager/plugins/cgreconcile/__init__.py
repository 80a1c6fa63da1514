"""Memory QoS reconcile: memory.min/low/high and the Anolis memcg knobs per pod, container and kube QoS
level (Koordinator ``qosmanager/plugins/cgreconcile``)."""

from __future__ import annotations

from koordlet import plugins
from koordlet.qosmanager.framework import Options, Strategy
from koordlet.qosmanager.plugins.cgreconcile.strategy import NAME, CgroupReconcile

__all__ = ["NAME", "PLUGIN", "CgroupReconcile", "new"]


def new(options: Options) -> Strategy:
    return CgroupReconcile(options)


PLUGIN: plugins.Plugin[Options, Strategy] = plugins.Plugin(NAME, new)
