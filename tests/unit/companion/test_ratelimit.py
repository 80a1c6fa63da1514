"""The companion's eviction rate limits: token buckets for the cluster and per node, on a fake clock."""

from __future__ import annotations

import pytest

from koordlet.companion.ratelimit import EvictionLimiter, EvictionRateLimited, RateLimit
from koordlet.errors import ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_node_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    limiter = EvictionLimiter(RateLimit(100, 100), RateLimit(0.5, 3), clock=clock)
    for _ in range(3):
        limiter.acquire("node-1")
    with pytest.raises(EvictionRateLimited, match=r"node node-1 .*retry in 2\.0s"):
        limiter.acquire("node-1")
    limiter.acquire("node-2")  # another node has its own bucket
    clock.now += 2.0  # one token at 0.5/s
    limiter.acquire("node-1")
    with pytest.raises(EvictionRateLimited):
        limiter.acquire("node-1")
    assert limiter.refused == 2


def test_the_cluster_bucket_caps_every_node_together_and_a_refusal_takes_nothing() -> None:
    clock = Clock()
    limiter = EvictionLimiter(RateLimit(1, 4), RateLimit(1, 3), clock=clock)
    limiter.acquire("a")
    limiter.acquire("a")
    limiter.acquire("b")
    limiter.acquire("c")
    with pytest.raises(EvictionRateLimited, match="cluster-wide"):
        limiter.acquire("d")
    clock.now += 1.0
    limiter.acquire("d")  # d's own bucket was not charged by the refusal: it is full
    limiter.refund("d")
    limiter.acquire("a")  # the refund went back to the cluster


def test_a_refund_never_exceeds_the_burst() -> None:
    limiter = EvictionLimiter(RateLimit(1, 2), RateLimit(1, 1), clock=Clock())
    for _ in range(5):
        limiter.refund("a")
    limiter.acquire("a")
    with pytest.raises(EvictionRateLimited):
        limiter.acquire("a")


def test_rate_zero_turns_a_limit_off() -> None:
    limiter = EvictionLimiter(RateLimit(0, 0), RateLimit(0, 0), clock=Clock())
    for _ in range(1000):
        limiter.acquire("a")
    with pytest.raises(ConfigError):
        RateLimit(-1, 1)
    with pytest.raises(ConfigError):
        RateLimit(1, 0)


def test_node_buckets_are_bounded_and_full_ones_go_first() -> None:
    clock = Clock()
    limiter = EvictionLimiter(RateLimit(0, 0), RateLimit(0.001, 2), clock=clock, max_nodes=10)
    limiter.acquire("busy")
    limiter.acquire("busy")
    for i in range(50):
        limiter.acquire(f"node-{i}")
        limiter.refund(f"node-{i}")  # full again: nothing lost by forgetting it
    assert len(limiter._nodes) <= 10
    with pytest.raises(EvictionRateLimited):
        limiter.acquire("busy")  # the empty bucket was kept
