"""The cpuburst arithmetic with worked numbers (Koordinator ``calcStaticCPUBurstVal``,
``calcSafeCPUBurstVal``, ``getNodeStateForBurst``, ``changeOperationByNode`` and the x1.2 / x0.8 step)."""

from __future__ import annotations

import pytest

from koordlet.qosmanager.plugins.cpuburst import calc
from koordlet.qosmanager.plugins.cpuburst.calc import NodeState, Operation, PodShare


@pytest.mark.parametrize(
    ("limit_milli", "percent", "burst"),
    [
        (2000, 1000, 2_000_000),  # 2 cores x 1000% x 100000 us
        (2000, 50, 100_000),  # 2 x 0.5 x 100000
        (500, 300, 150_000),  # 0.5 x 3 x 100000
        (1500, 1, 1_500),  # 1.5 x 0.01 x 100000
        (0, 1000, 0),  # no limit: no burst
    ],
)
def test_burst_us(limit_milli: int, percent: int, burst: int) -> None:
    assert calc.burst_us(limit_milli, percent) == burst


@pytest.mark.parametrize(
    ("desired", "quota", "safe"),
    [
        (2_000_000, 200_000, 200_000),  # the kernel refuses burst > quota (#2778)
        (100_000, 200_000, 100_000),
        (2_000_000, -1, 2_000_000),  # unlimited quota: no cap
        (2_000_000, 0, 2_000_000),
    ],
)
def test_safe_burst_is_capped_at_the_quota(desired: int, quota: int, safe: int) -> None:
    assert calc.safe_burst_us(desired, quota) == safe


@pytest.mark.parametrize(
    ("limit_milli", "percent", "base", "ceil"),
    [
        (2000, 300, 200_000, 600_000),
        (1500, 250, 150_000, 375_000),
        (2000, 100, 200_000, 200_000),  # 100%: no room above the base
        (2000, None, 200_000, 200_000),
        (0, 300, -1, -3),  # no limit: -1 (callers skip such containers)
    ],
)
def test_base_and_ceil(limit_milli: int, percent: int | None, base: int, ceil: int) -> None:
    assert calc.base_quota(limit_milli) == base
    assert calc.ceil_quota(base, percent) == ceil


@pytest.mark.parametrize(
    ("ratio", "threshold", "state"),
    [
        (0.50, 50, NodeState.OVERLOAD),  # >= threshold
        (0.80, 50, NodeState.OVERLOAD),
        (0.45, 50, NodeState.COOLING),  # 0.9 x 50% = 45%: cooling starts here
        (0.4999, 50, NodeState.COOLING),
        (0.4499, 50, NodeState.IDLE),
        (0.0, 50, NodeState.IDLE),
        (0.7201, 80, NodeState.COOLING),  # 0.8 x 0.9 = 0.7200000000000001 in float64, as in Go
        (0.7199, 80, NodeState.IDLE),
    ],
)
def test_node_state(ratio: float, threshold: int, state: NodeState) -> None:
    assert calc.node_state(ratio, threshold) is state


def test_share_pool_carves_out_lse_lsr_and_be() -> None:
    # 8 CPUs - LSR request 2 = 6 cores; used 4.0 - LSR 1.0 - BE 0.5 = 2.5 -> 41.7% < 45%: idle
    pods = [PodShare(exclusive=True, outside=True, request_cores=2.0, usage_cores=1.0),
            PodShare(exclusive=False, outside=True, request_cores=0.0, usage_cores=0.5)]
    pool = calc.share_pool(8, 4.0, pods, 50)
    assert (pool.total_cores, pool.used_cores, pool.state) == (6.0, 2.5, NodeState.IDLE)
    assert pool.usage_ratio == pytest.approx(2.5 / 6)
    # the same node with the LSR pod reserving 4 cores: 2.5 / 4 = 62.5% -> overload
    pods[0] = PodShare(exclusive=True, outside=True, request_cores=4.0, usage_cores=1.0)
    assert calc.share_pool(8, 4.0, pods, 50).state is NodeState.OVERLOAD


def test_share_pool_unknown_without_node_usage_and_full_without_capacity() -> None:
    assert calc.share_pool(8, None, [], 50).state is NodeState.UNKNOWN
    # every CPU reserved by LSR pods: Koordinator counts the pool as 100% used
    pool = calc.share_pool(4, 1.0, [PodShare(True, True, 4.0, None)], 50)
    assert (pool.usage_ratio, pool.state) == (1.0, NodeState.OVERLOAD)


@pytest.mark.parametrize(
    ("state", "operation", "final"),
    [
        (NodeState.OVERLOAD, Operation.UP, Operation.DOWN),
        (NodeState.OVERLOAD, Operation.REMAIN, Operation.DOWN),
        (NodeState.OVERLOAD, Operation.RESET, Operation.RESET),
        (NodeState.COOLING, Operation.UP, Operation.REMAIN),
        (NodeState.COOLING, Operation.DOWN, Operation.DOWN),
        (NodeState.COOLING, Operation.REMAIN, Operation.REMAIN),
        (NodeState.UNKNOWN, Operation.UP, Operation.REMAIN),
        (NodeState.IDLE, Operation.UP, Operation.UP),
        (NodeState.IDLE, Operation.DOWN, Operation.DOWN),
        (NodeState.IDLE, Operation.REMAIN, Operation.REMAIN),
    ],
)
def test_adjust_for_node(state: NodeState, operation: Operation, final: Operation) -> None:
    assert calc.adjust_for_node(state, operation) is final


@pytest.mark.parametrize(
    ("operation", "current", "target"),
    [
        (Operation.UP, 200_000, 240_000),  # x1.2
        (Operation.UP, 240_000, 288_000),
        (Operation.UP, 597_196, 600_000),  # 716635 clamped to the ceiling
        (Operation.UP, 600_000, 600_000),
        (Operation.UP, 123_457, 200_000),  # below the base: raised to it
        (Operation.DOWN, 288_000, 230_400),  # x0.8
        (Operation.DOWN, 240_000, 200_000),  # 192000 clamped to the base
        (Operation.DOWN, 700_000, 560_000),
        (Operation.REMAIN, 288_000, 288_000),
        (Operation.REMAIN, 700_000, 600_000),  # above a lowered ceiling: clamped
        (Operation.REMAIN, -1, 200_000),  # unlimited: Koordinator clamps to the base
        (Operation.RESET, 288_000, 200_000),
    ],
)
def test_target_quota(operation: Operation, current: int, target: int) -> None:
    assert calc.target_quota(operation, current, 200_000, 600_000) == target


def test_up_steps_truncate_like_go() -> None:
    # 333333 x 1.2 = 399999.6 -> int64 truncates to 399999
    assert calc.target_quota(Operation.UP, 333_333, 100_000, 1_000_000) == 399_999


@pytest.mark.parametrize(
    ("usage", "limit_milli", "percent"),
    [
        (3.0, 2000, 150),
        (1.999, 2000, 99),  # truncated, not rounded
        (2.0, 2000, 100),
        (0.5, 2000, 25),
        (None, 2000, 100),  # no sample: neither spends nor saves
    ],
)
def test_usage_percent(usage: float | None, limit_milli: int, percent: int) -> None:
    assert calc.usage_percent(usage, limit_milli) == percent
