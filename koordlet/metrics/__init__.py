"""Prometheus metrics of the koordlet, one module per feature, all behind a per-daemon registry.

``registry.KoordletMetrics`` builds a daemon's registries and facades; ``server.serve`` exposes them on
``:9316``.  Names and labels follow Koordinator's ``pkg/koordlet/metrics`` (see each module).
"""

from koordlet.metrics.kubelet import KubeletFailure
from koordlet.metrics.registry import KoordletMetrics, MaxAges
from koordlet.metrics.server import MetricsServer, serve

__all__ = ["KoordletMetrics", "KubeletFailure", "MaxAges", "MetricsServer", "serve"]
