"""CPU normalization on the wire (upstream ``apis/extension/cpu_normalization.go``), the node's CPU basic info
read from a fake host (upstream ``pkg/koordlet/util/cpuinfo.go``) and the ratio source the hooks read."""

from __future__ import annotations

import logging

import pytest

from koordlet.apis.cpunormalization import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    LABEL_CPU_NORMALIZATION_ENABLED,
    CPUBasicInfo,
    basic_info_of,
    enabled_label,
    format_ratio,
    parse_ratio,
    ratio_differs,
    scale_quota,
)
from koordlet.errors import ParseError
from koordlet.statesinformer.cpubasicinfo import NormalizationRatio, read_cpu_basic_info
from tests.fixtures.fakehost import FakeHost

MODEL = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"


@pytest.mark.parametrize(("annotations", "expected"), [
    (None, None), ({}, None), ({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.20"}, 1.2),
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "3"}, 3.0),
])
def test_parse_ratio(annotations: dict[str, str] | None, expected: float | None) -> None:
    assert parse_ratio(annotations) == expected


@pytest.mark.parametrize("raw", ["", "abc", "0", "-1.5", "nan", "inf", " 1.2"])
def test_parse_ratio_refuses_what_is_not_a_positive_number(raw: str) -> None:
    with pytest.raises(ParseError, match=ANNOTATION_CPU_NORMALIZATION_RATIO):
        parse_ratio({ANNOTATION_CPU_NORMALIZATION_RATIO: raw})


def test_format_and_difference_as_upstream() -> None:
    # strconv.FormatFloat(r, 'f', 2, 64); IsCPUNormalizationRatioDifferent with epsilon 0.01
    assert [format_ratio(r) for r in (1.0, 1.2, 1.29, 3.1415926)] == ["1.00", "1.20", "1.29", "3.14"]
    assert not ratio_differs(1.20, 1.205) and ratio_differs(1.20, 1.22) and ratio_differs(1.22, 1.20)


@pytest.mark.parametrize(("quota", "ratio", "expected"), [
    (200_000, 1.25, 160_000),    # 2 normalized CPUs on a node 1.25x faster: 1.6 CPUs of time
    (100_000, 3.0, 33_334),      # ceil(33333.3)
    (200_000, 1.0, 200_000),     # 1.0: nothing to scale
    (200_000, 0.8, 200_000),     # below 1: upstream does not support it, left alone
    (200_000, None, 200_000),    # no ratio
    (-1, 2.0, -1),               # unlimited stays unlimited
])
def test_scale_quota(quota: int, ratio: float | None, expected: int) -> None:
    assert scale_quota(quota, ratio) == expected


def test_basic_info_json_is_upstreams() -> None:
    info = CPUBasicInfo(cpu_model=MODEL, hyper_thread_enabled=True, turbo_enabled=False, vendor_id="GenuineIntel")
    text = info.to_json_str()
    assert text == f'{{"cpuModel":"{MODEL}","hyperThreadEnabled":true,"vendorID":"GenuineIntel"}}'
    assert basic_info_of({ANNOTATION_CPU_BASIC_INFO: text}) == info
    assert basic_info_of({}) is None
    with pytest.raises(ParseError, match="hyperThreadEnabled"):
        CPUBasicInfo.from_json_str('{"hyperThreadEnabled": "yes"}')
    with pytest.raises(ParseError, match="invalid JSON"):
        basic_info_of({ANNOTATION_CPU_BASIC_INFO: "{"})


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("False", False), ("f", False)])
def test_enabled_label_parses_like_go(value: str, expected: bool) -> None:
    assert enabled_label({LABEL_CPU_NORMALIZATION_ENABLED: value}) is expected


def test_enabled_label_absent_or_bad() -> None:
    assert enabled_label({}) is None
    with pytest.raises(ParseError, match=LABEL_CPU_NORMALIZATION_ENABLED):
        enabled_label({LABEL_CPU_NORMALIZATION_ENABLED: "yes"})


# --- the node's basic info from a fake host ----------------------------------------------------------------


def cpuinfo(model: str | None) -> str:
    model_line = f"model name\t: {model}\n" if model else ""
    return f"processor\t: 0\nvendor_id\t: GenuineIntel\n{model_line}flags\t\t: fpu\n\nprocessor\t: 1\n"


def test_basic_info_from_smt_and_intel_pstate(fake_host: FakeHost) -> None:
    fake_host.write_proc("cpuinfo", cpuinfo(MODEL))
    fake_host.write_sys("devices/system/cpu/smt/active", "1\n")
    fake_host.write_sys("devices/system/cpu/intel_pstate/no_turbo", "0\n")
    assert read_cpu_basic_info(fake_host.paths) == CPUBasicInfo(
        cpu_model=MODEL, hyper_thread_enabled=True, turbo_enabled=True, vendor_id="GenuineIntel")
    fake_host.write_sys("devices/system/cpu/smt/active", "0\n")
    fake_host.write_sys("devices/system/cpu/intel_pstate/no_turbo", "1\n")
    info = read_cpu_basic_info(fake_host.paths)
    assert (info.hyper_thread_enabled, info.turbo_enabled) == (False, False)


def test_basic_info_without_smt_file_uses_thread_siblings(fake_host: FakeHost) -> None:
    fake_host.write_proc("cpuinfo", cpuinfo(MODEL))
    fake_host.write_sys("devices/system/cpu/cpu0/topology/thread_siblings_list", "0,4\n")
    assert read_cpu_basic_info(fake_host.paths).hyper_thread_enabled is True
    fake_host.write_sys("devices/system/cpu/cpu0/topology/thread_siblings_list", "0\n")
    assert read_cpu_basic_info(fake_host.paths).hyper_thread_enabled is False


def test_basic_info_of_a_host_without_the_files(fake_host: FakeHost) -> None:
    fake_host.write_proc("cpuinfo", cpuinfo(None))
    # No model line: "unknown" as upstream; no intel_pstate: turbo off; nothing raises.
    assert read_cpu_basic_info(fake_host.paths) == CPUBasicInfo(cpu_model="unknown", vendor_id="GenuineIntel")


def test_basic_info_of_this_host_reads_without_error() -> None:
    from koordlet.system.hostpaths import HostPaths

    info = read_cpu_basic_info(HostPaths())
    assert info.cpu_model  # the real /proc/cpuinfo of the test host names a model (or "unknown")
    assert CPUBasicInfo.from_json_str(info.to_json_str()) == info


# --- the ratio the hooks read -------------------------------------------------------------------------------


def test_ratio_source_keeps_the_last_good_ratio(caplog: pytest.LogCaptureFixture) -> None:
    annotations: dict[str, str] = {}
    source = NormalizationRatio(lambda: annotations)
    assert source() is None
    annotations[ANNOTATION_CPU_NORMALIZATION_RATIO] = "1.50"
    assert source() == 1.5
    annotations[ANNOTATION_CPU_NORMALIZATION_RATIO] = "garbage"
    with caplog.at_level(logging.WARNING):
        assert source() == 1.5 and source() == 1.5
    refused = [r for r in caplog.records if r.getMessage() == "cpu normalization ratio refused, last good kept"]
    assert len(refused) == 1  # once per bad value, not per call
    annotations.pop(ANNOTATION_CPU_NORMALIZATION_RATIO)
    assert source() == 1.0  # the companion removed it: not normalized any more, kubelet's quotas come back
    assert NormalizationRatio(lambda: None)() is None  # no node from the companion yet
