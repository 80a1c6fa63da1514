"""Eviction rate limits of the companion: one token bucket for the whole cluster and one per node.

A NodeSLO that is wrong for every node (thresholds at 0) would otherwise have every koordlet evict its pods in
the same minute; one compromised node would otherwise evict its pods as fast as the API allows.  A refused
eviction is retried by the koordlet on a later round, so the limits slow evictions down without losing them.

Only evictions that happened cost a token: one the Eviction API refused (a PodDisruptionBudget), one of a pod
already gone, and one that failed are refunded (:meth:`EvictionLimiter.refund`).  The limits are per companion
replica: every replica serves koordlets.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from koordlet.errors import ConfigError, KoordletError

DEFAULT_RATE: Final = 5.0
"""Evictions per second across the cluster (per companion replica)."""
DEFAULT_BURST: Final = 50
DEFAULT_NODE_RATE: Final = 0.2
"""Evictions per second of one node: one every 5 s sustained ..."""
DEFAULT_NODE_BURST: Final = 10
"""... after a burst of 10 (a node under memory pressure evicts several BE pods in one round)."""
MAX_NODE_BUCKETS: Final = 20_000
"""Per-node buckets kept; a full bucket is dropped first (it equals a fresh one, so nothing is lost)."""


class EvictionRateLimited(KoordletError, RuntimeError):
    """An eviction refused by a rate limit; the koordlet retries it later.  The message names which limit."""


@dataclass(frozen=True)
class RateLimit:
    """``rate`` tokens per second up to ``burst``; rate 0 turns the limit off."""

    rate: float
    burst: int

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ConfigError(f"eviction rate: must be >= 0 (0: no limit), got {self.rate}")
        if self.rate > 0 and self.burst < 1:
            raise ConfigError(f"eviction burst: must be >= 1, got {self.burst}")

    @property
    def enabled(self) -> bool:
        return self.rate > 0


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at

    def refill(self, limit: RateLimit, now: float) -> None:
        self.tokens = min(float(limit.burst), self.tokens + max(0.0, now - self.at) * limit.rate)
        self.at = now


class EvictionLimiter:
    """Thread-safe; :meth:`acquire` before an eviction, :meth:`refund` when it did not evict."""

    def __init__(self, cluster: RateLimit = RateLimit(DEFAULT_RATE, DEFAULT_BURST),
                 node: RateLimit = RateLimit(DEFAULT_NODE_RATE, DEFAULT_NODE_BURST), *,
                 clock: Callable[[], float] = time.monotonic, max_nodes: int = MAX_NODE_BUCKETS) -> None:
        self.cluster = cluster
        self.node = node
        self._clock = clock
        self._max_nodes = max_nodes
        self._lock = threading.Lock()
        self._global = _Bucket(float(cluster.burst), clock())
        self._nodes: OrderedDict[str, _Bucket] = OrderedDict()
        self.refused = 0
        """Evictions refused so far (for logs and tests)."""

    def acquire(self, node: str) -> None:
        """Takes one token from the cluster's bucket and ``node``'s; raises EvictionRateLimited (taking
        nothing) when either is empty."""
        with self._lock:
            now = self._clock()
            bucket = self._node_bucket(node, now) if self.node.enabled else None
            if bucket is not None and bucket.tokens < 1.0:
                self.refused += 1
                raise EvictionRateLimited(
                    f"eviction rate limit of node {node} reached ({self.node.rate:g}/s, burst {self.node.burst}); "
                    f"retry in {(1.0 - bucket.tokens) / self.node.rate:.1f}s")
            if self.cluster.enabled:
                self._global.refill(self.cluster, now)
                if self._global.tokens < 1.0:
                    self.refused += 1
                    raise EvictionRateLimited(
                        f"cluster-wide eviction rate limit reached ({self.cluster.rate:g}/s, burst "
                        f"{self.cluster.burst}); retry in {(1.0 - self._global.tokens) / self.cluster.rate:.1f}s")
                self._global.tokens -= 1.0
            if bucket is not None:
                bucket.tokens -= 1.0

    def refund(self, node: str) -> None:
        """Gives back the tokens of an eviction that did not evict (refused, gone, failed)."""
        with self._lock:
            now = self._clock()
            if self.cluster.enabled:
                self._global.refill(self.cluster, now)
                self._global.tokens = min(float(self.cluster.burst), self._global.tokens + 1.0)
            if self.node.enabled:
                bucket = self._node_bucket(node, now)
                bucket.tokens = min(float(self.node.burst), bucket.tokens + 1.0)

    def _node_bucket(self, node: str, now: float) -> _Bucket:
        bucket = self._nodes.get(node)
        if bucket is None:
            if len(self._nodes) >= self._max_nodes:
                self._prune(now)
            bucket = self._nodes[node] = _Bucket(float(self.node.burst), now)
        else:
            bucket.refill(self.node, now)
            self._nodes.move_to_end(node)
        return bucket

    def _prune(self, now: float) -> None:
        for name in list(self._nodes):
            bucket = self._nodes[name]
            bucket.refill(self.node, now)
            if bucket.tokens >= self.node.burst:
                del self._nodes[name]
        # All in use: the least recently used go, a tenth at once so the next insertions do not scan again.
        while len(self._nodes) >= self._max_nodes * 9 // 10:
            self._nodes.popitem(last=False)
