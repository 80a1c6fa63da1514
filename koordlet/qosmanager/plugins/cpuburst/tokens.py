"""The per-container token bucket that bounds how long a quota stays scaled up (Koordinator
``burstLimiter``): ``cfsQuotaBurstPeriodSeconds`` of running at ``cfsQuotaBurstPercent`` of the limit.

A token is one percent-point of the limit over one second.  A container at or above 100% of its limit
spends (usage% - 100) per second; below 60% it saves (100 - usage%) per second; in between the bucket
stands still.  The count stays within [-capacity, capacity], so a container that overran for long has
to idle for a while before it may burst again.  Scaling up is allowed while the count is positive."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SPEND_FROM_PERCENT = 100
SAVE_BELOW_PERCENT = 60


def capacity(period_seconds: int, cfs_quota_burst_percent: int) -> int:
    return period_seconds * (cfs_quota_burst_percent - 100)


@dataclass
class TokenBucket:
    """One container's bucket; ``last_update`` is on the strategy's clock (seconds)."""

    capacity: int
    tokens: int
    last_update: float
    expire_seconds: float
    """Unused for this long (2 x the period), the bucket is dropped (Koordinator ``Recycle``)."""

    @classmethod
    def new(cls, period_seconds: int, cfs_quota_burst_percent: int, now: float, rng: Callable[[], float]
            ) -> TokenBucket:
        """A bucket that starts between empty and half full at random (Koordinator's ``randomInitRatio``
        in [0, 0.5)), so containers started together do not all run out in the same second."""
        size = capacity(period_seconds, cfs_quota_burst_percent)
        return cls(size, int(size * (rng() / 2)), now, 2.0 * period_seconds)

    def allow(self, now: float, usage_percent: int) -> bool:
        """Spends or saves for the whole seconds since the last update, then says whether the
        container may scale up.  Koordinator truncates the elapsed time to whole seconds and drops the
        fraction; here the fraction carries over to the next call (``last_update`` advances by whole
        seconds only), so a runner ticking at 0.999 s does not freeze the bucket."""
        if now < self.last_update:  # the wall clock went back: restart the count from now
            self.last_update = now
        seconds = int(now - self.last_update)
        if usage_percent >= SPEND_FROM_PERCENT:
            self.tokens -= (usage_percent - 100) * seconds
        elif usage_percent < SAVE_BELOW_PERCENT:
            self.tokens += (100 - usage_percent) * seconds
        self.tokens = max(min(self.tokens, self.capacity), -self.capacity)
        self.last_update += seconds
        return self.tokens > 0

    def expired(self, now: float) -> bool:
        return now - self.last_update > self.expire_seconds
