"""Which pods may bypass the hook servers (the skip label and the namespaces allowed to use it).

Apart from :mod:`runtimeproxy.intercept`, which applies them, so that the command line can name the defaults
without importing ``grpc`` (:mod:`runtimeproxy.corepolling` must configure gRPC core before that import).
"""

from __future__ import annotations

DEFAULT_SKIP = ("runtimeproxy.koordinator.sh/skip-hookserver", "true")
"""The (key, value) of the pod label or annotation that skips the hook servers."""
ANY_NAMESPACE = "*"
DEFAULT_SKIP_NAMESPACES = frozenset({"kube-system", "koordinator-system"})
"""Namespaces whose pods may skip the hook servers: the cluster's own, and koordlet's (manifests/)."""
