"""The suppress arithmetic with worked numbers (Koordinator ``calculateBESuppressCPU``, ``adjustByCPUSet``,
``adjustByCfsQuota``)."""

from __future__ import annotations

import pytest

from koordlet.qosmanager.plugins.cpusuppress import calc


@pytest.mark.parametrize(
    ("capacity", "threshold", "ls", "system", "reserved", "min_percent", "milli", "floored"),
    [
        # 8 * 1000 * 65 // 100 = 5200; 5200 - 2500 - 500 = 2200
        (8, 65, 2.5, 0.5, 0.0, None, 2200, False),
        # reserved 1.0 > system 0.5 counts instead: 5200 - 2500 - 1000 = 1700
        (8, 65, 2.5, 0.5, 1.0, None, 1700, False),
        # Go's int64(x * 1000) truncates: 3.1009 -> 3100, 0.4009 -> 400; 5200 - 3100 - 400 = 1700
        (8, 65, 3.1009, 0.4009, 0.0, None, 1700, False),
        # LS above the threshold goes negative without a floor: 5200 - 6000 - 500 = -1300
        (8, 65, 6.0, 0.5, 0.0, None, -1300, False),
        # ... and stops at 8000 * 40 // 100 = 3200 with cpuSuppressMinPercent 40
        (8, 65, 6.0, 0.5, 0.0, 40, 3200, True),
        # a floor below the result changes nothing
        (8, 65, 2.5, 0.5, 0.0, 10, 2200, False),
        # 16 CPUs at 50%: 8000 - 3250 - 250 = 4500
        (16, 50, 3.25, 0.25, 0.0, None, 4500, False),
        # 2 CPUs at 75%: 1500 - 1000 - 125 = 375
        (2, 75, 1.0, 0.125, 0.0, None, 375, False),
    ],
)
def test_suppress_formula(capacity: int, threshold: int, ls: float, system: float, reserved: float,
                          min_percent: int | None, milli: int, floored: bool) -> None:
    result = calc.suppress_milli(capacity, threshold, ls, system, reserved, min_percent)
    assert result.milli == milli
    assert result.floored is floored
    assert result.system_used == max(system, reserved)
    assert result.threshold_cores == capacity * threshold / 100


@pytest.mark.parametrize(("cpus", "step"), [(2, 1), (8, 1), (10, 1), (11, 2), (16, 2), (20, 2), (30, 3), (64, 7)])
def test_growth_limit(cpus: int, step: int) -> None:
    assert calc.growth_limit(cpus) == step


@pytest.mark.parametrize(
    ("milli", "min_cpus", "current", "node_cpus", "allowed", "cpus", "wanted", "why"),
    [
        (2200, 2, 8, 8, 8, 3, 3, "suppress"),      # ceil(2.2) = 3, shrinking is never limited
        (2000, 2, 8, 8, 8, 2, 2, "suppress"),      # exactly 2.0 stays 2
        (1, 2, 8, 8, 8, 2, 1, "minimum"),          # ceil(0.001) = 1 < 2
        (-1300, 2, 8, 8, 8, 2, -1, "minimum"),     # ceil(-1.3) = -1
        (-1300, 1, 8, 8, 8, 1, -1, "minimum"),     # the 2-CPU-host setting
        (4700, 2, 2, 8, 8, 3, 5, "growth"),        # 2 + ceil(0.8) = 3
        (4700, 2, 3, 8, 8, 4, 5, "growth"),
        (4700, 2, 4, 8, 8, 5, 5, "suppress"),      # 5 - 4 = 1 is within the step
        (9000, 2, 4, 16, 16, 6, 9, "growth"),      # 16 CPUs grow by 2
        (8000, 2, 8, 8, 6, 6, 8, "allowed"),       # 2 CPUs are LSE / reserved
        (1000, 2, 1, 8, 8, 2, 1, "minimum"),       # minimum 2 from 1 is within the step of 1
    ],
)
def test_cpuset_count(milli: int, min_cpus: int, current: int, node_cpus: int, allowed: int, cpus: int,
                      wanted: int, why: str) -> None:
    count = calc.cpuset_count(milli, min_cpus, current, node_cpus, allowed)
    assert (count.cpus, count.wanted, count.limited_by) == (cpus, wanted, why)


@pytest.mark.parametrize(
    ("milli", "current", "capacity", "quota", "target", "skip", "stepped"),
    [
        (2200, -1, 8, 220_000, 220_000, False, False),    # unset quota: no step limit
        (2200, 100_000, 8, 180_000, 220_000, False, True),  # +120000 > 8*100000*0.1 = 80000
        (2200, 140_000, 8, 220_000, 220_000, False, False),  # +80000 is not more than the step
        (2200, 300_000, 8, 220_000, 220_000, False, False),  # decreases are never limited
        (2200, 215_000, 8, 215_000, 220_000, True, False),  # |5000| < 8*100000*0.01 = 8000
        (2200, 212_000, 8, 220_000, 220_000, False, False),  # |8000| is not < 8000
        (-1300, 3000, 8, 2000, 2000, False, False),       # minimum, written although |1000| < 8000
        (10, -1, 8, 2000, 2000, False, False),            # 10 milli = 1000 us < 2000
        (375, 150_000, 2, 37_500, 37_500, False, False),  # the 2-CPU integration numbers
        (1375, 37_500, 2, 57_500, 137_500, False, True),  # 2 CPUs step by 20000
        (1375, 136_000, 2, 136_000, 137_500, True, False),  # |1500| < 2000
    ],
)
def test_cfs_quota_plan(milli: int, current: int, capacity: int, quota: int, target: int, skip: bool,
                        stepped: bool) -> None:
    plan = calc.cfs_quota_plan(milli, current, capacity)
    assert (plan.quota, plan.target, plan.skip, plan.stepped) == (quota, target, skip, stepped)
    assert plan.min_delta == capacity * 1000.0 and plan.max_increase == capacity * 10_000.0


@pytest.mark.parametrize(
    ("milli", "current", "parts", "quota", "target", "skip", "stepped"),
    [
        # Several BE cgroups: the plan works on their total, with a floor of 2000 us each.
        (2200, 100_000, 2, 180_000, 220_000, False, True),  # stepped as for one cgroup
        (-1300, 3000, 2, 4000, 4000, False, False),         # the floor is 2 x 2000: written, not skipped
        (30, 5000, 3, 6000, 6000, False, False),            # 30 milli = 3000 us < 3 x 2000
        (2200, 1000, 12, 81_000, 220_000, False, True),     # a total below the floors steps to at least them
        (2200, 1000, 50, 100_000, 220_000, False, True),    # ... 50 x 2000 = 100000 > 1000 + 80000
    ],
)
def test_cfs_quota_plan_over_several_cgroups(milli: int, current: int, parts: int, quota: int, target: int,
                                             skip: bool, stepped: bool) -> None:
    plan = calc.cfs_quota_plan(milli, current, 8, parts * calc.BE_MIN_QUOTA_US)
    assert (plan.quota, plan.target, plan.skip, plan.stepped) == (quota, target, skip, stepped)


@pytest.mark.parametrize(
    ("total", "parts", "shares"),
    [
        (220_000, 1, [220_000]),
        (220_000, 2, [110_000, 110_000]),
        (220_000, 3, [73_334, 73_333, 73_333]),  # the remainder, 1 us each, to the first shares
        (4000, 2, [2000, 2000]),
        (7, 4, [2, 2, 2, 1]),
    ],
)
def test_split_quota_adds_up_to_the_total(total: int, parts: int, shares: list[int]) -> None:
    assert calc.split_quota(total, parts) == shares
    assert sum(shares) == total and max(shares) - min(shares) <= 1


def test_split_quota_needs_a_part() -> None:
    with pytest.raises(ValueError, match="parts must be positive, got 0"):
        calc.split_quota(1000, 0)
