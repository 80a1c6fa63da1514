"""kubelet API calls (Koordinator ``pkg/koordlet/metrics/kubelet.go``).

``koordlet_kubelet_request_duration_seconds{verb, path, code}`` is Koordinator's histogram, observed for
every answer the kubelet gives (any status code).  Calls that get no usable answer - a timeout, a refused
connection, an error status, a body that does not decode - also count in
``koordlet_kubelet_request_failures_total{path, reason}``, this project's counter: Koordinator only logs
them, and the last good pod list staying in force is exactly when an operator needs to see it.
"""

from __future__ import annotations

import enum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from koordlet.metrics import labels
from koordlet.metrics.buckets import exponential_buckets

REQUEST_DURATION: Final = labels.PREFIX + "kubelet_request_duration_seconds"
REQUEST_FAILURES: Final = labels.PREFIX + "kubelet_request_failures"
"""Exposed as ``koordlet_kubelet_request_failures_total`` (a counter's sample name)."""
VERB_GET: Final = "get"
# Koordinator: 1 ms .. 4 s by x4; /configz answers within 4 ms, /pods within 16 ms.
DURATION_BUCKETS: Final = exponential_buckets(0.001, 4, 7)


class KubeletFailure(enum.Enum):
    """Why a kubelet call gave no usable answer (the ``reason`` label)."""

    TRANSPORT = "transport"
    """No response: timeout, refused connection, TLS failure."""
    STATUS = "status"
    """A response with a status other than 200."""
    DECODE = "decode"
    """A 200 whose body is not what the API promises."""


class KubeletMetrics:
    """Facade the kubelet client reports through."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(REQUEST_DURATION, "kubelet http request duration in seconds",
                                   ["verb", "path", "code"], registry=registry, buckets=DURATION_BUCKETS)
        self._failures = Counter(REQUEST_FAILURES, "kubelet requests that gave no usable answer",
                                 ["path", "reason"], registry=registry)

    def observe(self, path: str, code: int, seconds: float, verb: str = VERB_GET) -> None:
        """The kubelet answered ``path`` (as requested, e.g. ``/pods/``) with ``code`` after ``seconds``."""
        self._duration.labels(verb, path, str(code)).observe(seconds)

    def count_failure(self, path: str, reason: KubeletFailure) -> None:
        """A call to ``path`` gave no usable answer."""
        self._failures.labels(path, reason.value).inc()
