"""systemStrategy -> kernel knob values (Koordinator ``sysreconcile/system_config.go`` calculateMemoryConfig)."""

from __future__ import annotations

import pytest

from koordlet.apis.nodeslo import SystemStrategy
from koordlet.qosmanager.plugins.sysreconcile import calc
from koordlet.system.sysfiles import (
    MEMCG_REAP_BACKGROUND,
    MIN_FREE_KBYTES,
    PAGE_CACHE_LIMIT_ENABLED,
    SCHED_GROUP_IDENTITY_ENABLED,
    SCHED_IDLE_SAVER_WMARK,
    WATERMARK_SCALE_FACTOR,
)

GIB = 1 << 30


@pytest.mark.parametrize(("factor", "memory", "expected"), [
    # 16 GiB = 16777216 KiB; x100 / 10000 = 167772.16 -> 167772 (Go int64 division truncates).
    (100, 16 * GIB, 167772),
    # MemTotal is rarely a whole number of KiB-aligned GiB: 3999997952 B = 3906248 KiB; x150/10000 = 58593.72.
    (150, 3_999_997_952, 58593),
    # Bytes below a KiB are dropped before the product, as Koordinator's `nodeMemory / 1024` does.
    (100, 16 * GIB + 1023, 167772),
])
def test_min_free_kbytes_is_the_factor_of_memory_in_kib(factor: int, memory: int, expected: int) -> None:
    assert calc.min_free_kbytes(factor, memory) == expected
    plan = calc.plan(SystemStrategy(min_free_kbytes_factor=factor), memory)
    assert plan.wanted[MIN_FREE_KBYTES].value == expected
    assert plan.wanted[MIN_FREE_KBYTES].why.startswith(f"systemStrategy.minFreeKbytesFactor={factor} x ")


def test_every_knob_set_is_wanted_and_the_rest_unset() -> None:
    plan = calc.plan(SystemStrategy(watermark_scale_factor=150, memcg_reap_background=1,
                                    sched_idle_saver_wmark_ns=5000), 16 * GIB)
    assert {k: w.value for k, w in plan.wanted.items()} == {
        WATERMARK_SCALE_FACTOR: 150, MEMCG_REAP_BACKGROUND: 1, SCHED_IDLE_SAVER_WMARK: 5000}
    assert plan.wanted[WATERMARK_SCALE_FACTOR].why == "systemStrategy.watermarkScaleFactor=150"
    assert plan.unset == (MIN_FREE_KBYTES, SCHED_GROUP_IDENTITY_ENABLED, PAGE_CACHE_LIMIT_ENABLED)
    assert not plan.rejected


def test_no_system_strategy_leaves_every_knob_unset() -> None:
    plan = calc.plan(None, 16 * GIB)
    assert not plan.wanted and not plan.rejected
    assert len(plan.unset) == len(calc.KNOBS)


@pytest.mark.parametrize(("strategy", "memory", "knob", "message"), [
    # 16 GiB x 1/10000 = 1677 KiB, below Koordinator's 10 MiB floor.
    (SystemStrategy(min_free_kbytes_factor=1), 16 * GIB, MIN_FREE_KBYTES,
     "systemStrategy.minFreeKbytesFactor=1 x 16777216 KiB / 10000: min_free_kbytes: 1677 is outside "
     "[10240, 10485760]; the value in force stays"),
    # 256 GiB x 5000/10000 = 128 GiB, above the 10 GiB ceiling.
    (SystemStrategy(min_free_kbytes_factor=5000), 256 * GIB, MIN_FREE_KBYTES,
     "systemStrategy.minFreeKbytesFactor=5000 x 268435456 KiB / 10000: min_free_kbytes: 134217728 is outside "
     "[10240, 10485760]; the value in force stays"),
    (SystemStrategy(min_free_kbytes_factor=100), 0, MIN_FREE_KBYTES,
     "systemStrategy.minFreeKbytesFactor=100: node memory unknown (0 bytes); the value in force stays"),
    # The NodeSLO accepts 1..400; the knob's validator (Koordinator's WatermarkScaleFactorValidator) 10..400.
    (SystemStrategy(watermark_scale_factor=5), 16 * GIB, WATERMARK_SCALE_FACTOR,
     "systemStrategy.watermarkScaleFactor=5: watermark_scale_factor: 5 is outside [10, 400]; "
     "the value in force stays"),
])
def test_a_value_out_of_the_knobs_bounds_is_rejected_with_its_reason(
        strategy: SystemStrategy, memory: int, knob: object, message: str) -> None:
    plan = calc.plan(strategy, memory)
    assert plan.rejected == {knob: message}
    assert knob not in plan.wanted and knob not in plan.unset


def test_sched_feature_names_are_checked() -> None:
    plan = calc.plan(SystemStrategy(sched_features={"HRTICK": True, "NO_HRTICK": False}), 16 * GIB)
    assert plan.features == {"HRTICK": True}
    assert plan.rejected_features == {"NO_HRTICK": (
        "systemStrategy.schedFeatures: 'NO_HRTICK' is not a scheduler feature name (upper case, digits and _, "
        "no NO_ prefix); the value in force stays")}
