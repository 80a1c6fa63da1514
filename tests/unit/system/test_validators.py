"""Write validators and the v1 <-> v2 conversions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koordlet.system.validators import (
    CostQos,
    CpuList,
    DeviceValue,
    IntRange,
    as_int,
    format_cpu_max,
    format_cpulist,
    from_v2_max,
    parse_cpulist,
    shares_to_weight,
    to_v2_max,
    weight_to_shares,
)


@pytest.mark.parametrize(("value", "expected"), [(5, 5), ("5", 5), (" -3\n", -3), ("0", 0)])
def test_as_int_accepts_ints_and_decimal_text(value: object, expected: int) -> None:
    assert as_int(value) == expected


@pytest.mark.parametrize("value", [True, 1.5, "1.5", "0x10", "", "max", None, "1 2"])
def test_as_int_rejects_everything_else(value: object) -> None:
    with pytest.raises(ValueError):
        as_int(value)


def test_int_range_bounds_and_unlimited() -> None:
    shares = IntRange(2, 262144)
    assert shares.check(2) == 2 and shares.check("262144") == 262144
    for bad in (1, 262145, -1):
        with pytest.raises(ValueError, match=r"out of range: expected an integer in 2\.\.262144$"):
            shares.check(bad)
    quota = IntRange(1000, 10**9, unlimited=True)
    assert quota.check(-1) == -1 and quota.check("max") == -1 and quota.check(" max\n") == -1
    with pytest.raises(ValueError, match=r"1000\.\.1000000000 or -1 \(unlimited\)"):
        quota.check(999)
    with pytest.raises(ValueError, match="expected an integer"):
        quota.check("lots")
    assert quota.render(-1) == "-1"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8", [0, 1, 2, 3, 8]), ("5", [5]), (" 1,0 \n", [0, 1]), ("0-1,1-2", [0, 1, 2]), ("", [])],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3-1", "descending range '3-1'"),
        ("a", "bad list element 'a'"),
        ("1,,2", "bad list element ''"),
        ("-1", "bad list element '-1'"),
        ("0-70000", "id 70000 above 65535"),
    ],
)
def test_parse_cpulist_names_the_bad_part(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_cpulist(text)


@given(st.sets(st.integers(min_value=0, max_value=300), max_size=60))
def test_cpulist_format_parse_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)


def test_cpulist_validator_normalises_and_refuses_empty() -> None:
    v = CpuList()
    assert v.check("3,0-2,8") == "0-3,8"
    assert v.check([4, 2, 3]) == "2-4"
    with pytest.raises(ValueError, match=r"empty list .*ENOSPC"):
        v.check("")
    with pytest.raises(ValueError, match="empty list"):
        v.check([])
    with pytest.raises(ValueError, match=r"id -1 outside 0\.\.65535"):
        v.check([-1])
    with pytest.raises(ValueError, match="expected a non-empty CPU list"):
        v.check(3)


def test_device_value() -> None:
    v = DeviceValue(0)
    assert v.check("8:0 1048576") == (8, 0, 1048576)
    assert v.check((253, 1, "10")) == (253, 1, 10)
    assert v.render((8, 16, 5)) == "8:16 5"
    for bad in ("8:0", "sda 10", "8:0 -1", "8:0 1 2", 10):
        with pytest.raises(ValueError):
            v.check(bad)
    with pytest.raises(ValueError, match=r"value 101 out of range 1\.\.100"):
        DeviceValue(1, 100).check("8:0 101")


def test_cost_qos() -> None:
    v = CostQos()
    assert v.check("8:0  enable=1 ctrl=user rpct=95.00 rlat=5000") == "8:0 enable=1 ctrl=user rpct=95.00 rlat=5000"
    with pytest.raises(ValueError, match="no key=value settings"):
        v.check("8:0")
    with pytest.raises(ValueError, match="unknown setting 'speed=3'"):
        v.check("8:0 speed=3")
    with pytest.raises(ValueError, match="ctrl must be auto or user"):
        v.check("8:0 ctrl=manual")
    with pytest.raises(ValueError, match="rlat needs a non-negative number"):
        v.check("8:0 rlat=-5")


@pytest.mark.parametrize(("shares", "weight"), [(2, 1), (1024, 39), (262144, 10000), (512, 20), (102, 4)])
def test_shares_to_weight_matches_kubelet(shares: int, weight: int) -> None:
    assert shares_to_weight(shares) == weight


@given(st.integers(min_value=1, max_value=10000))
def test_weight_survives_a_round_trip_through_shares(weight: int) -> None:
    assert shares_to_weight(weight_to_shares(weight)) in (weight, weight - 1)
    assert 2 <= weight_to_shares(weight) <= 262144


@given(st.integers(min_value=2, max_value=262143))
def test_shares_to_weight_is_monotonic(shares: int) -> None:
    assert shares_to_weight(shares) <= shares_to_weight(shares + 1)


def test_max_conversions() -> None:
    assert to_v2_max(-1) == "max" and to_v2_max(50000) == "50000"
    assert from_v2_max("max\n") == -1 and from_v2_max("100") == 100
    with pytest.raises(ValueError):
        from_v2_max("unlimited")
    assert format_cpu_max(-1, 100000) == "max 100000"
    assert format_cpu_max(20000, 100000) == "20000 100000"
