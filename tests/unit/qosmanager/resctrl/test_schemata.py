"""The arithmetic and the annotation parser, table-driven, with values worked from Koordinator's formulas:
mask = ways [ceil(w*s/100), ceil(w*e/100)); Intel MB = percent rounded up to 10; AMD MB = 2048 at 100 %,
else 160*p/100 truncated."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.isolation.resctrl import annotation
from koordlet.isolation.resctrl.annotation import PodResctrl
from koordlet.isolation.resctrl.host import AMD_VENDOR_ID, INTEL_VENDOR_ID, CatInfo, HostInfo
from koordlet.isolation.resctrl.schemata import PlanError, cat_mask, full, mb_value, uniform

W11 = CatInfo("L3", 0x7FF, 1, (0, 1))
W20 = CatInfo("L3", 0xFFFFF, 1, (0, 1))
W10 = CatInfo("L3", 0x3FF, 1, (0,))
INTEL = HostInfo(INTEL_VENDOR_ID, (W11,), (0, 1), mb_min=10, mb_granularity=10)
AMD = HostInfo(AMD_VENDOR_ID, (W20,), (0, 1), mb_min=0, mb_granularity=1)


@pytest.mark.parametrize(("cat", "start", "end", "mask"), [
    (W11, 0, 100, 0x7FF),   # [0, 11)
    (W11, 0, 30, 0xF),      # ceil(3.3) = 4 -> [0, 4)   (Koordinator's example)
    (W11, 10, 50, 0x3C),    # [ceil(1.1), ceil(5.5)) = [2, 6)   (Koordinator's example)
    (W11, 20, 80, 0x1F8),   # [3, 9)
    (W11, 30, 100, 0x7F0),  # [4, 11)
    (W10, 10, 80, 0xFE),    # [1, 8)   (Koordinator's example)
    (W20, 0, 30, 0x3F),     # [0, 6)
    (W20, 25, 50, 0x3E0),   # [5, 10)
    (W20, 30, 100, 0xFFFC0),  # [6, 20)
])
def test_cat_mask(cat: CatInfo, start: int, end: int, mask: int) -> None:
    assert cat_mask("f", cat, start, end) == mask


@pytest.mark.parametrize(("cat", "start", "end", "fragment"), [
    (W11, 10, 15, "10..15 % of 11 cache ways (info/L3/cbm_mask 7ff) is ways [2, 2), 0 ways"),
    (CatInfo("L3", 0x7FF, 2, (0,)), 0, 5, "is ways [0, 1), 1 ways; info/L3/min_cbm_bits needs 2"),
])
def test_cat_mask_narrower_than_the_cache_allows(cat: CatInfo, start: int, end: int, fragment: str) -> None:
    with pytest.raises(PlanError, match=r"^beClass: ") as err:
        cat_mask("beClass", cat, start, end)
    assert fragment in str(err.value)


@pytest.mark.parametrize(("host", "percent", "value"), [
    (INTEL, 100, 100), (INTEL, 35, 40), (INTEL, 30, 30), (INTEL, 1, 10), (INTEL, 91, 100),
    (AMD, 100, 2048), (AMD, 50, 80), (AMD, 35, 56), (AMD, 99, 158), (AMD, 1, 1),
])
def test_mb_value(host: HostInfo, percent: int, value: int) -> None:
    assert mb_value("mbaPercent", host, percent) == value


@pytest.mark.parametrize("percent", [0, 101, -5, True, "50"])
def test_mb_value_outside_1_to_100(percent: Any) -> None:
    with pytest.raises(PlanError, match=r"^x.mbaPercent: must be"):
        mb_value("x.mbaPercent", INTEL, percent)


def test_mb_below_min_bandwidth() -> None:
    host = HostInfo(INTEL_VENDOR_ID, (W11,), (0,), mb_min=20, mb_granularity=10)
    with pytest.raises(PlanError, match="10 % gives MB value 10, below info/MB/min_bandwidth 20"):
        mb_value("m", host, 10)


def test_lines_one_entry_per_cache_id() -> None:
    assert uniform(INTEL, {"L3": 0xF}, 40).lines() == ["L3:0=f;1=f", "MB:0=40;1=40"]
    assert full(INTEL).lines() == ["L3:0=7ff;1=7ff", "MB:0=100;1=100"]
    assert full(AMD).lines() == ["L3:0=fffff;1=fffff", "MB:0=2048;1=2048"]
    cdp = HostInfo(INTEL_VENDOR_ID, (CatInfo("L3CODE", 0x7FF, 1, (0,)), CatInfo("L3DATA", 0x7FF, 1, (0,))), ())
    assert uniform(cdp, {"L3CODE": 0xF, "L3DATA": 0x3C}, None).lines() == ["L3CODE:0=f", "L3DATA:0=3c"]


# ------------------------------------------------------------------------------------------ annotation


@pytest.mark.parametrize(("text", "spec"), [
    ('{"llc":{"schemata":{"range":[20,80]}},"mb":{"schemata":{"percent":35}}}', PodResctrl((20, 80), {}, 35, {})),
    ('{}', PodResctrl()),
    ('{"mb":{"schemata":{"percent":0}}}', PodResctrl()),  # Go's zero value: unset
    # Koordinator's own test spellings: "LLC", "cacheid"; Go matches keys case-insensitively.
    ('{"LLC":{"schemataPerCache":[{"cacheid":1,"range":[0,50]}]},"MB":{"schemataPerCache":[{"cacheID":0,"percent":80}]}}',
     PodResctrl(None, {1: (0, 50)}, None, {0: 80})),
    ('{"llc":{"schemata":{"range":[0,100]}},"other":1}', PodResctrl((0, 100), {}, None, {})),
])
def test_parse(text: str, spec: PodResctrl) -> None:
    assert annotation.parse(text) == spec


@pytest.mark.parametrize(("text", "fragment"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "(top level): must be an object"),
    ('{"llc": 5}', "llc: must be an object, got 5"),
    ('{"llc":{"schemata":{"range":[80,20]}}}', "llc.schemata.range: start 80 must be below end 20"),
    ('{"llc":{"schemata":{"range":[0,120]}}}', "llc.schemata.range end: must be 0..100, got 120"),
    ('{"llc":{"schemata":{"range":[-1,20]}}}', "llc.schemata.range start: must be 0..100, got -1"),
    ('{"llc":{"schemata":{"range":[10]}}}', "llc.schemata.range: must be [start, end] percentages, got [10]"),
    ('{"llc":{"schemata":{"range":[10.5,20]}}}', "llc.schemata.range start: must be an integer percentage"),
    ('{"mb":{"schemata":{"percent":150}}}', "mb.schemata.percent: must be 0..100, got 150"),
    ('{"mb":{"schemata":{"percent":"50"}}}', "mb.schemata.percent: must be an integer percentage, got '50'"),
    ('{"mb":{"schemataPerCache":[{"percent":50}]}}', "mb.schemataPerCache[0].cacheID: must be a cache id >= 0"),
    ('{"mb":{"schemataPerCache":[{"cacheID":0,"percent":0}]}}', "mb.schemataPerCache[0].percent: must be 1..100"),
    ('{"llc":{"schemataPerCache":[{"cacheID":0,"range":[0,50]},{"cacheID":0,"range":[0,60]}]}}',
     "llc.schemataPerCache[1].cacheID: cache 0 given twice"),
    ('{"llc":{"schemataPerCache":{"cacheID":0}}}', "llc.schemataPerCache: must be a list"),
])
def test_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(PlanError) as err:
        annotation.parse(text)
    assert fragment in str(err.value)


@pytest.mark.parametrize(("spec", "host", "lines"), [
    (PodResctrl(), INTEL, ["L3:0=7ff;1=7ff", "MB:0=100;1=100"]),
    (PodResctrl((20, 80), {}, 35, {}), INTEL, ["L3:0=1f8;1=1f8", "MB:0=40;1=40"]),
    (PodResctrl((0, 50), {1: (50, 100)}, 20, {0: 45}), INTEL, ["L3:0=3f;1=7c0", "MB:0=50;1=20"]),
    (PodResctrl((0, 50), {}, 50, {1: 100}), AMD, ["L3:0=3ff;1=3ff", "MB:0=80;1=2048"]),
])
def test_pod_schemata(spec: PodResctrl, host: HostInfo, lines: list[str]) -> None:
    assert annotation.pod_schemata(spec, host).lines() == lines


@pytest.mark.parametrize(("spec", "fragment"), [
    (PodResctrl(None, {5: (0, 50)}), "llc.schemataPerCache: cacheID 5 unknown (this host's L3 cache ids: 0, 1)"),
    (PodResctrl(None, {}, None, {2: 50}), "mb.schemataPerCache: cacheID 2 unknown (this host's MB domains: 0, 1)"),
    (PodResctrl((10, 15)), "llc.schemata.range: 10..15 % of 11 cache ways"),
])
def test_pod_schemata_rejects(spec: PodResctrl, fragment: str) -> None:
    with pytest.raises(PlanError) as err:
        annotation.pod_schemata(spec, INTEL)
    assert fragment in str(err.value)
