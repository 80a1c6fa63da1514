"""The per-container token bucket (Koordinator ``burstLimiter``) with worked numbers: period 10 s at
300% gives capacity 10 x (300 - 100) = 2000 percent-seconds."""

from __future__ import annotations

import pytest

from koordlet.qosmanager.plugins.cpuburst.tokens import TokenBucket, capacity

T0 = 1_700_000_000.0


def bucket(start_ratio: float = 0.4) -> TokenBucket:
    # rng 0.4 -> init ratio 0.2 -> int(2000 x 0.2) = 400 tokens
    return TokenBucket.new(10, 300, T0, lambda: start_ratio)


def test_new_bucket() -> None:
    b = bucket()
    assert (b.capacity, b.tokens, b.last_update, b.expire_seconds) == (2000, 400, T0, 20.0)
    assert capacity(60, 150) == 3000
    # the random start is below half the capacity
    assert TokenBucket.new(10, 300, T0, lambda: 0.999999).tokens == 999


@pytest.mark.parametrize(
    ("usage_percent", "seconds", "tokens", "allowed"),
    [
        (150, 3, 400 - 50 * 3, True),  # spending 50 per second at 150%
        (150, 8, 0, False),  # 400 - 400 = 0: not positive, no more scaling up
        (150, 20, -600, False),  # overran: the count goes negative
        (300, 30, -2000, False),  # ... down to -capacity at most
        (100, 5, 400, True),  # exactly the limit spends 0
        (80, 5, 400, True),  # 60..99%: the bucket stands still
        (60, 5, 400, True),  # 60% is not below 60%
        (59, 5, 400 + 41 * 5, True),  # saving 41 per second
        (0, 100, 2000, True),  # saving stops at the capacity
    ],
)
def test_spend_and_save(usage_percent: int, seconds: int, tokens: int, allowed: bool) -> None:
    b = bucket()
    assert b.allow(T0 + seconds, usage_percent) is allowed
    assert b.tokens == tokens
    assert b.last_update == T0 + seconds


def test_exhaustion_then_refill() -> None:
    b = bucket()
    assert b.allow(T0 + 8, 150) is False  # 400 - 8 x 50 = 0
    assert b.allow(T0 + 9, 150) is False  # -50
    assert b.allow(T0 + 10, 50) is False  # -50 + 50 = 0
    assert b.allow(T0 + 11, 50) is True  # 50
    assert b.tokens == 50


def test_fractions_of_a_second_carry_over() -> None:
    b = bucket()
    assert b.allow(T0 + 0.6, 150) is True
    assert (b.tokens, b.last_update) == (400, T0)  # no whole second yet: nothing spent, nothing lost
    b.allow(T0 + 1.2, 150)
    assert (b.tokens, b.last_update) == (350, T0 + 1)
    b.allow(T0 + 2.1, 150)  # 1.1 s since T0 + 1: one more second
    assert (b.tokens, b.last_update) == (300, T0 + 2)


def test_clock_going_back_restarts_the_count() -> None:
    b = bucket()
    b.allow(T0 - 100, 150)
    assert (b.tokens, b.last_update) == (400, T0 - 100)
    b.allow(T0 - 98, 150)
    assert b.tokens == 300


def test_expiry_after_two_periods_unused() -> None:
    b = bucket()
    assert not b.expired(T0 + 20)
    assert b.expired(T0 + 20.5)
