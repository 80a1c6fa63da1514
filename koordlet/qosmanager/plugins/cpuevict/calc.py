"""CPU eviction arithmetic (Koordinator ``cpu_evict.go``), in milli-cores as Koordinator computes it.

BE satisfaction = BE real limit / BE request.  With satisfaction <= lower% and BE using >= 90% of its
limit, BE is starved: release request x (upper% - satisfaction) of BE requests, so the BE pods that stay
get at least ``upper``% of what they asked for."""

from __future__ import annotations

SATISFACTION_LOWER_MAX_PERCENT = 60
"""``beCPUSatisfactionLowPercentMax``: lower must be in (0, 60]."""
SATISFACTION_UPPER_MAX_PERCENT = 100
"""``beCPUSatisfactionUpperPercentMax``: upper must be in (0, 100)."""
DEFAULT_BE_USAGE_THRESHOLD_PERCENT = 90
"""``beCPUUsageThresholdPercent``: BE must use this much of its limit before it counts as starved."""
RELEASE_BUFFER_PERCENT = 2
"""``cpuReleaseBufferPercent``: CPUEvict's lower watermark defaults to the threshold minus this."""
ONE_CORE_MILLI = 1000.0


def satisfaction_config_error(lower: int | None, upper: int | None) -> str | None:
    """``isSatisfactionConfigValid``: why the thresholds cannot be used (None when they can)."""
    if lower is None or upper is None:
        return "cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent must both be set"
    if not 0 < lower <= SATISFACTION_LOWER_MAX_PERCENT:
        return f"cpuEvictBESatisfactionLowerPercent {lower} must be in (0, {SATISFACTION_LOWER_MAX_PERCENT}]"
    if not 0 < upper < SATISFACTION_UPPER_MAX_PERCENT:
        return f"cpuEvictBESatisfactionUpperPercent {upper} must be in (0, {SATISFACTION_UPPER_MAX_PERCENT})"
    if upper < lower:
        return f"cpuEvictBESatisfactionUpperPercent {upper} is below cpuEvictBESatisfactionLowerPercent {lower}"
    return None


def usage_config_error(threshold: int | None, lower: int | None, priority_threshold: int | None) -> str | None:
    """``isUsedThresholdConfigValid`` for CPUEvict."""
    if threshold is None:
        return "cpuEvictThresholdPercent is not set"
    effective = lower_percent(threshold, lower)
    if effective >= threshold:
        return f"cpuEvictLowerPercent {effective} must be below cpuEvictThresholdPercent {threshold}"
    if priority_threshold is None:
        return "evictEnabledPriorityThreshold is not set"
    return None


def lower_percent(threshold: int, lower: int | None) -> int:
    return lower if lower is not None else threshold - RELEASE_BUFFER_PERCENT


def window_seconds(collect_interval_seconds: float, configured: int | None) -> int:
    """The averaging window: ``cpuEvictTimeWindowSeconds`` when longer than the collect interval."""
    window = int(collect_interval_seconds)
    return configured if configured is not None and configured > window else max(window, 1)


def enough_samples(window: int, collect_interval_seconds: float, count: int) -> bool:
    """``isAvgQueryResultValid``: the samples must cover a third of the window (and exist at all)."""
    return count > 0 and count * collect_interval_seconds >= window // 3


def be_usage_refusal(usage_milli: float, limit_milli: float, threshold_percent: int | None) -> str | None:
    """``isBECPUUsageHighEnough``: why BE does not count as busy (None when it does).  A limit below one
    core always counts as busy: usage that small is all noise, and such a limit is starvation anyway."""
    if limit_milli <= 0:
        return f"BE real limit {limit_milli:.0f}m is not positive"
    if limit_milli < ONE_CORE_MILLI:
        return None
    threshold = DEFAULT_BE_USAGE_THRESHOLD_PERCENT if threshold_percent is None else threshold_percent
    ratio = usage_milli / limit_milli
    if ratio < threshold / 100:
        return f"BE uses {ratio:.0%} of its limit, below {threshold}%"
    return None


def satisfaction(request_milli: float, limit_milli: float) -> float | None:
    return limit_milli / request_milli if request_milli > 0 else None


def release_by_satisfaction(request_milli: float, limit_milli: float, lower: int, upper: int) -> int:
    """``calculateResourceMilliToReleaseBySatisfaction``: milli-cores of BE request to release (0: none)."""
    rate = satisfaction(request_milli, limit_milli)
    if rate is None or rate > lower / 100:
        return 0
    gap = upper / 100 - rate
    return int(request_milli * gap) if gap > 0 else 0


def usage_percent(used_cores: float, capacity_milli: int) -> int:
    return int(used_cores * 1000) * 100 // capacity_milli


def release_by_usage(capacity_milli: int, usage_pct: int, lower_pct: int) -> int:
    return capacity_milli * (usage_pct - lower_pct) // 100
