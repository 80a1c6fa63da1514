"""The arithmetic of BE CPU suppression (Koordinator ``cpu_suppress.go``), kept free of I/O so every
number a round acts on can be checked against worked examples.

Koordinator computes in milli-cores with int64 arithmetic and converts float usages with Go's truncating
``int64(x * 1000)``; the same truncation is used here so both agents reach the same CPU count and quota
from the same samples."""

from __future__ import annotations

import math
from dataclasses import dataclass

CFS_PERIOD_US = 100_000
"""Koordinator writes the quota against the kernel's default period (``system.DefaultCPUCFSPeriod``)."""
BE_MIN_QUOTA_US = 2000
"""``beMinQuota``: the least quota BE keeps, so its processes still make progress."""
BE_MAX_INCREASE_PERCENT = 0.1
"""``beMaxIncreaseCPUPercent``: BE grows back slowly (per round, of the node's CPUs)."""
QUOTA_BYPASS_RATIO = 0.01
"""``suppressBypassQuotaDeltaRatio``: quota changes under 1% of the node are not worth a write."""
UNSET_QUOTA = -1


@dataclass(frozen=True)
class Suppress:
    """How many milli-cores BE may use this round and what that was computed from."""

    capacity_cpus: int
    threshold_percent: int
    ls_used: float
    """Cores used by non-BE pods."""
    system_raw: float
    """max(node - all pods, 0)."""
    reserved: float
    """Cores the node keeps back (kubelet / annotation reservation)."""
    milli: int
    """The result, after the floor."""
    floor_milli: int | None = None
    """capacity * cpuSuppressMinPercent, when that is set."""

    @property
    def system_used(self) -> float:
        """What the formula subtracts for the system: max(system usage, reserved)."""
        return max(self.system_raw, self.reserved)

    @property
    def threshold_cores(self) -> float:
        return self.capacity_cpus * self.threshold_percent / 100

    @property
    def cores(self) -> float:
        return self.milli / 1000

    @property
    def floored(self) -> bool:
        return self.floor_milli is not None and self.milli == self.floor_milli


def suppress_milli(capacity_cpus: int, threshold_percent: int, ls_used: float, system_raw: float,
                   reserved: float, min_percent: int | None = None) -> Suppress:
    """suppress(BE) = capacity * threshold% - non-BE used - max(system used, reserved), floored at
    capacity * min% when ``min_percent`` is set (``calculateBESuppressCPU``)."""
    capacity_milli = capacity_cpus * 1000
    system_used = max(system_raw, reserved)
    milli = capacity_milli * threshold_percent // 100 - int(ls_used * 1000) - int(system_used * 1000)
    floor = None
    if min_percent is not None:
        floor = capacity_milli * min_percent // 100
        milli = max(milli, floor)
    return Suppress(capacity_cpus, threshold_percent, ls_used, system_raw, reserved, milli, floor)


def growth_limit(cpu_count: int) -> int:
    """CPUs BE's cpuset may gain in one round: ``ceil(nCPU * 0.1)`` (``beMaxIncreaseCPUPercent``), so even
    a small node grows by one CPU per round."""
    return math.ceil(cpu_count * BE_MAX_INCREASE_PERCENT)


@dataclass(frozen=True)
class CpusetCount:
    """How many CPUs BE gets and which rule decided it."""

    cpus: int
    wanted: int
    """ceil(suppress), before the minimum, the growth limit and the allowed CPUs."""
    limited_by: str
    """``suppress``, ``minimum``, ``growth`` or ``allowed``."""


def cpuset_count(milli: int, min_cpus: int, current_cpus: int, cpu_count: int, allowed_cpus: int) -> CpusetCount:
    """BE's CPU count: ceil(suppress), at least ``min_cpus``, at most ``growth_limit`` more than the
    current cpuset (``adjustByCPUSet``), never more than the CPUs BE may use at all.

    The last cap is ours: Koordinator's picker returns nothing when asked for more CPUs than are
    available, which leaves BE's cpuset as it was instead of giving it every allowed CPU."""
    wanted = -(-milli // 1000)
    cpus, why = wanted, "suppress"
    if cpus < min_cpus:
        cpus, why = min_cpus, "minimum"
    step = growth_limit(cpu_count)
    if cpus - current_cpus > step:
        cpus, why = current_cpus + step, "growth"
    if cpus > allowed_cpus:
        cpus, why = allowed_cpus, "allowed"
    return CpusetCount(cpus, wanted, why)


@dataclass(frozen=True)
class QuotaPlan:
    """The besteffort ``cfs_quota_us`` to write, or why it stays."""

    quota: int
    """What to write (after the minimum and the step limit)."""
    target: int
    """suppress * period, at least :data:`BE_MIN_QUOTA_US`."""
    current: int
    skip: bool
    """The change is under 1% of the node: no write."""
    stepped: bool
    """The increase was cut to 10% of the node."""
    min_delta: float
    max_increase: float


def cfs_quota_plan(milli: int, current: int, capacity_cpus: int, min_quota: int = BE_MIN_QUOTA_US) -> QuotaPlan:
    """``adjustByCfsQuota``: quota = suppress * period (at least ``min_quota``); a change smaller than 1%
    of the node's CPU time is skipped unless the quota drops to the minimum; once a quota is set (not -1)
    it grows by at most 10% of the node per round.

    ``current`` and the result are BE's total: with several BE cgroups (a standalone host's workloads)
    the caller passes the sum of their quotas (-1 when any is unlimited), ``min_quota`` = cgroups x
    :data:`BE_MIN_QUOTA_US`, and splits the result with :func:`split_quota`."""
    target = max(milli * CFS_PERIOD_US // 1000, min_quota)
    # Go evaluates float64(cap) * float64(period) * ratio left to right; so does this.
    min_delta = float(capacity_cpus) * float(CFS_PERIOD_US) * QUOTA_BYPASS_RATIO
    max_increase = float(capacity_cpus) * float(CFS_PERIOD_US) * BE_MAX_INCREASE_PERCENT
    if abs(target - current) < min_delta and target != min_quota:
        return QuotaPlan(current, target, current, True, False, min_delta, max_increase)
    quota, stepped = target, False
    if target - current > max_increase and current != UNSET_QUOTA:
        # A total someone set below the per-cgroup floors still starts from the floors.
        quota, stepped = max(current + int(max_increase), min_quota), True
    return QuotaPlan(quota, target, current, False, stepped, min_delta, max_increase)


def split_quota(total: int, parts: int) -> list[int]:
    """``total`` us of quota shared equally by ``parts`` BE cgroups; the remainder goes 1 us each to the
    first shares, so the shares always add up to ``total``.

    Equal, not by usage or weight: an operator can say in advance what each BE workload may get
    (suppress / n cores), the split does not move with usage that changes every second, and one busy
    workload cannot take the others' share in a single round.  Workloads that should pool their share
    go under one parent cgroup configured as a single workload."""
    if parts <= 0:
        raise ValueError(f"split_quota: parts must be positive, got {parts}")
    share, extra = divmod(total, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]
