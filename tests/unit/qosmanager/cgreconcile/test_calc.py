"""The per-cgroup memory QoS math, with worked numbers and Koordinator's documented examples
(../shared/reference/koordinator-samples/qos-formula-examples.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import MemoryQOSCfg, default_resource_qos
from koordlet.qosmanager.plugins.cgreconcile import calc
from koordlet.qosmanager.plugins.cgreconcile.calc import MEMORY_HIGH_MAX, MemoryValues
from koordlet.qosmanager.plugins.cgreconcile.podconfig import recommended

MI = 1 << 20
GI = 1 << 30
PAGE = 4096
NODE = 16 * GI


@pytest.mark.parametrize(("request_bytes", "percent", "expected"), [
    (100 * MI, 100, 100 * MI),
    (GI, 50, GI // 2),
    (3, 33, 0),  # 99 / 100 truncates, as Go's int64 division does
    (1_000_001, 30, 300_000),  # 30000030 / 100
    (0, 100, 0),
    (-1, 100, 0),  # a negative request (unset in Go's int64) protects nothing
    (GI, None, None),  # an unset percent writes nothing
])
def test_percent_of(request_bytes: int, percent: int | None, expected: int | None) -> None:
    assert calc.percent_of(request_bytes, percent) == expected


@pytest.mark.parametrize(("request_bytes", "limit", "percent", "page", "expected"), [
    # Koordinator docs: limit 100Mi, request 0, 80% -> 80Mi.
    (0, 100 * MI, 80, PAGE, 83_886_080),
    # 2Gi + 4Gi * 80 / 100 = 5583457484, rounded down to a page.
    (2 * GI, 6 * GI, 80, PAGE, 5_583_454_208),
    # No limit: the node's allocatable stands in: 100Mi + (16Gi - 100Mi) / 2.
    (100 * MI, None, 50, PAGE, 8_642_363_392),
    # Not page aligned: 1000000 + 2000000 / 2 = 2000000 -> 488 pages.
    (1_000_000, 3_000_000, 50, PAGE, 1_998_848),
    (1_000_000, 3_000_000, 50, 65536, 1_966_080),
    (GI, GI, 100, PAGE, GI),
    # Throttling 0 disables memory.high (max); unset leaves it alone.
    (GI, 2 * GI, 0, PAGE, MEMORY_HIGH_MAX),
    (GI, 2 * GI, None, PAGE, None),
    # A limit below the request (refused by the API server) never throttles below the request.
    (2 * GI, GI, 50, PAGE, 2 * GI),
])
def test_memory_high(request_bytes: int, limit: int | None, percent: int | None, page: int,
                     expected: int | None) -> None:
    high = calc.memory_high(request_bytes, limit, percent, NODE, page)
    assert high == expected
    if high is not None and high != MEMORY_HIGH_MAX:
        assert high % page == 0


def _cfg(**kw: Any) -> MemoryQOSCfg:
    base: dict[str, Any] = {
        "enable": True, "min_limit_percent": 0, "low_limit_percent": 0, "throttling_percent": 0, "wmark_ratio": 95,
        "wmark_scale_permill": 20, "wmark_min_adj": -25, "priority_enable": 0, "priority": 0, "oom_kill_group": 0}
    return MemoryQOSCfg(**{**base, **kw})


@pytest.mark.parametrize(("cfg", "request_bytes", "limit", "expected"), [
    # min 100% of 1Gi, low 50% raised to min, high = 1Gi + 1Gi * 80%.
    (_cfg(min_limit_percent=100, low_limit_percent=50, throttling_percent=80), GI, 2 * GI,
     {"memory_min": GI, "memory_low": GI, "memory_high": 1_932_734_464}),
    # low above min is kept.
    (_cfg(min_limit_percent=20, low_limit_percent=40, throttling_percent=80), GI, 2 * GI,
     {"memory_min": 214_748_364, "memory_low": 429_496_729, "memory_high": 1_932_734_464}),
    # low 0 is "off": it stays 0 below a positive min (Koordinator).
    (_cfg(min_limit_percent=50, low_limit_percent=0), GI, 2 * GI,
     {"memory_min": GI // 2, "memory_low": 0, "memory_high": MEMORY_HIGH_MAX}),
    # An unaligned request: high (rounded down) would fall below min, so it is raised to min.
    (_cfg(min_limit_percent=100, throttling_percent=100), 100 * MI + 1, 100 * MI + 1,
     {"memory_min": 100 * MI + 1, "memory_low": 0, "memory_high": 100 * MI + 1}),
    # A request below a page: high rounds to 0, never written as such.
    (_cfg(min_limit_percent=100, throttling_percent=50), 1000, 2000,
     {"memory_min": 1000, "memory_low": 0, "memory_high": 1000}),
    # No request: nothing protected, high from 0 towards the limit.
    (_cfg(min_limit_percent=100, low_limit_percent=100, throttling_percent=50), 0, GI,
     {"memory_min": 0, "memory_low": 0, "memory_high": GI // 2}),
])
def test_container_values_guarantees(cfg: MemoryQOSCfg, request_bytes: int, limit: int | None,
                                     expected: dict[str, int]) -> None:
    values = calc.container_values(cfg, request_bytes, limit, NODE, PAGE)
    for key, value in expected.items():
        assert getattr(values, key) == value, key
    assert values.memory_low in (0, None) or values.memory_low >= (values.memory_min or 0)
    assert values.memory_high is None or values.memory_high >= (values.memory_min or 0)
    # The static knobs come from the config as they are.
    assert (values.memory_wmark_ratio, values.memory_wmark_scale_factor, values.memory_wmark_min_adj) == (95, 20, -25)
    assert (values.memory_priority, values.memory_use_priority_oom, values.memory_oom_group) == (0, 0, 0)


def test_pod_values_from_summed_request_without_high() -> None:
    cfg = _cfg(min_limit_percent=30, low_limit_percent=10, throttling_percent=80, priority=5, priority_enable=1,
               oom_kill_group=1)
    values = calc.pod_values(cfg, 3 * GI)
    assert values == MemoryValues(memory_min=966_367_641, memory_low=966_367_641, memory_high=None,
                                  memory_wmark_ratio=95, memory_wmark_scale_factor=20, memory_wmark_min_adj=-25,
                                  memory_priority=5, memory_use_priority_oom=1, memory_oom_group=1)


def test_qos_values_take_only_the_oom_knobs_of_the_class() -> None:
    cfg = _cfg(priority=7, priority_enable=1, oom_kill_group=1)
    assert calc.qos_values(GI, 2 * GI, cfg) == MemoryValues(memory_min=GI, memory_low=2 * GI, memory_priority=7,
                                                           memory_use_priority_oom=1, memory_oom_group=1)
    assert calc.qos_values(GI, 0, None) == MemoryValues(memory_min=GI, memory_low=0)


def test_items_in_registry_order_and_reset_values() -> None:
    assert calc.RESOURCES == ("memory_min", "memory_low", "memory_high", "memory_wmark_ratio",
                              "memory_wmark_scale_factor", "memory_wmark_min_adj", "memory_priority",
                              "memory_use_priority_oom", "memory_oom_group")
    assert dict(calc.RESET.items()) == {
        "memory_min": 0, "memory_low": 0, "memory_high": (1 << 63) - 1, "memory_wmark_ratio": 0,
        "memory_wmark_scale_factor": 50, "memory_wmark_min_adj": 0, "memory_priority": 0,
        "memory_use_priority_oom": 0, "memory_oom_group": 0}
    assert list(MemoryValues(memory_low=1, memory_min=2).items()) == [("memory_min", 2), ("memory_low", 1)]


# ------------------------------------------------------------------------------------------ documented examples

_EXAMPLES = "reference/koordinator-samples/qos-formula-examples.json"


def _memory_examples(shared_dir: Path) -> list[dict[str, Any]]:
    data = json.loads((shared_dir / _EXAMPLES).read_text())
    return [e for e in data["examples"] if e["feature"].startswith("memoryQOS.")]


def _check_min(example: dict[str, Any]) -> None:
    inputs = example["inputs"]
    cfg = _cfg(min_limit_percent=inputs["minLimitPercent"])
    values = calc.container_values(cfg, inputs["memory_request_bytes"], None, NODE, PAGE)
    assert values.memory_min == example["expected"]["memory.min"]
    assert calc.pod_values(cfg, inputs["memory_request_bytes"]).memory_min == example["expected"]["memory.min"]


def _check_low(example: dict[str, Any]) -> None:
    inputs = example["inputs"]
    cfg = _cfg(low_limit_percent=inputs["lowLimitPercent"])
    values = calc.container_values(cfg, inputs["memory_request_bytes"], None, NODE, PAGE)
    assert values.memory_low == example["expected"]["memory.low"]


def _check_throttling(example: dict[str, Any]) -> None:
    inputs = example["inputs"]
    cfg = _cfg(throttling_percent=inputs["throttlingPercent"])
    values = calc.container_values(cfg, inputs["memory_request_bytes"], inputs["memory_limit_bytes"], NODE, PAGE)
    assert values.memory_high == example["expected"]["memory.high"]


def _check_wmark_ratio(example: dict[str, Any]) -> None:
    # The kernel derives wmark_high from memory.high and the ratio; we write the ratio and the high it uses.
    inputs, expected = example["inputs"], example["expected"]
    cfg = _cfg(throttling_percent=80, wmark_ratio=inputs["wmarkRatio"])
    values = calc.container_values(cfg, 0, inputs["memory_limit_bytes"], NODE, PAGE)
    assert values.memory_wmark_ratio == expected["memory.wmark_ratio"]
    assert values.memory_high == inputs["memory.high"]
    assert values.memory_high is not None and values.memory_wmark_ratio is not None
    assert values.memory_high * values.memory_wmark_ratio // 100 == expected["memory.wmark_high"]


def _check_min_adj_defaults(example: dict[str, Any]) -> None:
    for name, adj in example["expected"].items():
        qos = QoSClass(name)
        assert recommended(qos).wmark_min_adj == adj
        class_default = default_resource_qos(qos).memory_qos
        assert class_default is not None
        assert (class_default.wmark_min_adj, class_default.wmark_ratio, class_default.wmark_scale_permill) == (
            adj, 95, 20)


_CHECKS = {
    "memoryQOS.minLimitPercent": _check_min,
    "memoryQOS.lowLimitPercent": _check_low,
    "memoryQOS.throttlingPercent (>= v1.3.0)": _check_throttling,
    "memoryQOS.wmarkRatio": _check_wmark_ratio,
    "memoryQOS.wmarkMinAdj defaults": _check_min_adj_defaults,
}


def test_documented_examples(shared_dir: Path) -> None:
    examples = _memory_examples(shared_dir)
    assert {e["feature"] for e in examples} == set(_CHECKS), "a memoryQOS example without a check"
    for example in examples:
        _CHECKS[example["feature"]](example)
