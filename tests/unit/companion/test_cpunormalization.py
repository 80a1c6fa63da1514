"""The companion's CPU normalization ratio (upstream ``slo-controller/noderesource/plugins/cpunormalization``,
``Calculate``/``NeedSyncMeta``) and batch-cpu amplification (``plugins/util``, ``PrepareNodeForResource``), from
the shipped ``cpu-normalization-config`` sample."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from koordlet.apis.cpunormalization import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    LABEL_CPU_NORMALIZATION_ENABLED,
    CPUBasicInfo,
)
from koordlet.apis.sloconfig import CPUNormalizationStrategy, configmap_data_from_yaml, render_cpu_normalization
from koordlet.companion.cpunormalization import (
    CPUNormalizer,
    RatioRefused,
    amplify_batch_cpu,
    basic_info_from_topology,
    current_ratio,
    needs_write,
    node_ratio,
)
from koordlet.companion.slocontroller import SLOController
from koordlet.errors import ParseError

SAMPLE = "reference/koordinator-samples/slo-configs/cpu-normalization.yaml"
M8269 = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"
M8369 = "Intel Xeon Platinum 8369B CPU @ 2.90GHz"


@pytest.fixture
def sample(shared_dir: Path) -> CPUNormalizationStrategy:
    data = configmap_data_from_yaml((shared_dir / SAMPLE).read_text(encoding="utf-8"))
    strategy, errors = render_cpu_normalization(data, {})
    assert errors == ()
    return strategy


def info(model: str, ht: bool, turbo: bool) -> CPUBasicInfo:
    return CPUBasicInfo(cpu_model=model, hyper_thread_enabled=ht, turbo_enabled=turbo)


@pytest.mark.parametrize(("model", "ht", "turbo", "expected"), [
    (M8269, True, True, "1.00"),    # hyperThreadTurboEnabledRatio
    (M8269, False, True, "1.52"),   # turboEnabledRatio
    (M8269, False, False, "1.29"),  # baseRatio
    (M8369, True, True, "1.20"),
    (M8369, True, False, "1.06"),   # hyperThreadEnabledRatio
    (M8369, False, True, "1.91"),
    (M8369, False, False, "1.69"),
])
def test_the_sample_ratio_by_model_ht_and_turbo(sample: CPUNormalizationStrategy, model: str, ht: bool, turbo: bool,
                                                expected: str) -> None:
    assert node_ratio(sample, {}, info(model, ht, turbo)) == expected


def test_a_ratio_below_one_is_refused(sample: CPUNormalizationStrategy) -> None:
    # The sample's 8269CY hyperThreadEnabledRatio is 0.82: upstream refuses ratios below 1.0 (no shrinking).
    with pytest.raises(RatioRefused, match=r"below the minimum 1\.0"):
        node_ratio(sample, {}, info(M8269, True, False))


def test_refusals_and_defaults() -> None:
    strategy = CPUNormalizationStrategy.from_json({"enable": True, "ratioModel": {"m": {"baseRatio": 6.0}}})
    with pytest.raises(RatioRefused, match=r"above the maximum 5\.0"):
        node_ratio(strategy, {}, info("m", False, False))
    with pytest.raises(RatioRefused, match="missing turboEnabledRatio for CPU 'm'"):
        node_ratio(strategy, {}, info("m", False, True))
    with pytest.raises(RatioRefused, match="no ratio for CPU 'other'"):
        node_ratio(strategy, {}, info("other", False, False))
    with pytest.raises(RatioRefused, match="has not reported"):
        node_ratio(strategy, {}, None)
    with_default = CPUNormalizationStrategy.from_json({"enable": True, "defaultRatio": 1.3, "ratioModel": {}})
    assert node_ratio(with_default, {}, info("other", True, True)) == "1.30"


def test_the_node_label_wins_over_the_strategy(sample: CPUNormalizationStrategy) -> None:
    disabled = CPUNormalizationStrategy.from_json({"enable": False, "ratioModel": {M8369: {"baseRatio": 2.0}}})
    on = {LABEL_CPU_NORMALIZATION_ENABLED: "true"}
    assert node_ratio(disabled, {}, info(M8369, False, False)) == "1.00"  # disabled: reset, info not needed
    assert node_ratio(disabled, {}, None) == "1.00"
    assert node_ratio(disabled, on, info(M8369, False, False)) == "2.00"
    assert node_ratio(sample, {LABEL_CPU_NORMALIZATION_ENABLED: "false"}, info(M8369, True, True)) == "1.00"
    with pytest.raises(RatioRefused, match=LABEL_CPU_NORMALIZATION_ENABLED):
        node_ratio(sample, {LABEL_CPU_NORMALIZATION_ENABLED: "maybe"}, info(M8369, True, True))


def test_node_configs_override_the_cluster_strategy() -> None:
    data = {"cpu-normalization-config": json.dumps({
        "enable": True, "ratioModel": {"m": {"baseRatio": 1.5}},
        "nodeConfigs": [{"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}},
                         "ratioModel": {"m": {"baseRatio": 2.5}}}]})}
    controller = SLOController()
    assert controller.set_configmap(data, "test") == {}
    controller.set_node("n-a", {"pool": "a"})
    controller.set_node("n-b", {"pool": "b"})
    assert node_ratio(controller.cpu_normalization_for("n-a"), {}, info("m", False, False)) == "2.50"
    assert node_ratio(controller.cpu_normalization_for("n-b"), {}, info("m", False, False)) == "1.50"
    bad = {"cpu-normalization-config": json.dumps({"enable": True, "defaultRatio": "x"})}
    assert "cpu-normalization-config" in controller.set_configmap(bad, "test2")
    assert node_ratio(controller.cpu_normalization_for("n-b"), {}, info("m", False, False)) == "1.50"  # last good


@pytest.mark.parametrize(("current", "wanted", "write"), [
    ({}, "1.20", True),
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.20"}, "1.20", False),
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.2"}, "1.20", False),
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.205"}, "1.20", False),  # within 0.01
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.25"}, "1.20", True),
    ({ANNOTATION_CPU_NORMALIZATION_RATIO: "garbage"}, "1.20", True),
])
def test_needs_write(current: dict[str, str], wanted: str, write: bool) -> None:
    assert needs_write(current, wanted) is write


@pytest.mark.parametrize(("batch", "ratio", "expected"), [
    (47000, "1.20", 56400),
    (47000, "1.69", 79430),
    (33333, "1.29", 43000),   # int64(33333000 x 1.29) = 42999570 milli, rounded up to 43000
    (47000, "1.00", 47000),
    (47000, None, 47000),
    (None, "1.20", None),     # no batch-cpu: nothing to amplify
    (0, "2.00", 0),
])
def test_amplify_batch_cpu(batch: int | None, ratio: str | None, expected: int | None) -> None:
    assert amplify_batch_cpu(batch, ratio) == expected


def test_basic_info_from_a_topology_report() -> None:
    obj = {"cpuModel": M8369, "hyperThreadEnabled": True}
    assert basic_info_from_topology({"cpuBasicInfo": obj}) == info(M8369, True, False)
    as_annotation = {"annotations": {ANNOTATION_CPU_BASIC_INFO: json.dumps(obj)}}
    assert basic_info_from_topology(as_annotation) == info(M8369, True, False)
    assert basic_info_from_topology({"cpuTopology": {}}) is None
    with pytest.raises(ParseError, match="cpuBasicInfo: turboEnabled"):
        basic_info_from_topology({"cpuBasicInfo": {"turboEnabled": 1}})
    with pytest.raises(ParseError, match="cpuBasicInfo: expected an object"):
        basic_info_from_topology({"cpuBasicInfo": 7})


def test_normalizer_keeps_the_last_ratio_when_an_input_goes_bad(caplog: pytest.LogCaptureFixture) -> None:
    normalizer = CPUNormalizer()
    strategy = CPUNormalizationStrategy.from_json({"enable": True, "ratioModel": {"m": {"baseRatio": 1.5}}})
    assert normalizer.decide("n", strategy, {}).ratio is None  # no basic info yet
    assert normalizer.on_topology("n", {"cpuBasicInfo": {"cpuModel": "m"}}) is True
    assert normalizer.on_topology("n", {"cpuBasicInfo": {"cpuModel": "m"}}) is False  # unchanged
    assert normalizer.decide("n", strategy, {}).ratio == "1.50"
    with pytest.raises(ParseError):
        normalizer.on_topology("n", {"cpuBasicInfo": "{"})
    assert normalizer.basic_info("n") == info("m", False, False)  # last good info stays
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            decision = normalizer.decide("n", strategy, {LABEL_CPU_NORMALIZATION_ENABLED: "bogus"})
    assert decision.ratio == "1.50" and LABEL_CPU_NORMALIZATION_ENABLED in decision.reason
    warnings = [r for r in caplog.records if r.getMessage().startswith("cpu normalization ratio not computed")]
    assert len(warnings) == 1  # once per reason, not per round
    assert normalizer.ratio("n") == "1.50"
    normalizer.forget("n")
    assert normalizer.ratio("n") is None and normalizer.basic_info("n") is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_leader_without_a_report_reads_the_node_resource_topology() -> None:
    calls: list[str] = []
    objects: dict[str, dict[str, str] | None] = {"n": None}

    def fetch(node: str) -> dict[str, str] | None:
        calls.append(node)
        return objects[node]

    clock = Clock()
    normalizer = CPUNormalizer(fetch, clock)
    strategy = CPUNormalizationStrategy.from_json({"enable": True, "ratioModel": {"m": {"baseRatio": 1.5}}})
    assert normalizer.decide("n", strategy, {}).ratio is None  # a follower does not read
    assert calls == []
    assert normalizer.decide("n", strategy, {}, may_fetch=True).ratio is None  # no NRT yet
    objects["n"] = {ANNOTATION_CPU_BASIC_INFO: json.dumps({"cpuModel": "m"})}
    assert normalizer.decide("n", strategy, {}, may_fetch=True).ratio is None  # within the interval: not re-read
    assert calls == ["n"]
    clock.now = 61.0
    assert normalizer.decide("n", strategy, {}, may_fetch=True).ratio == "1.50"
    assert calls == ["n", "n"]
    normalizer.decide("n", strategy, {}, may_fetch=True)
    assert calls == ["n", "n"]  # known now: never read again
    disabled = CPUNormalizationStrategy.from_json({"enable": False})
    assert normalizer.decide("other", disabled, {}, may_fetch=True).ratio == "1.00"
    assert calls == ["n", "n"]  # normalization off: the info is not needed


def test_current_ratio_is_what_the_node_carries() -> None:
    assert current_ratio({ANNOTATION_CPU_NORMALIZATION_RATIO: "1.2"}) == "1.20"
    assert current_ratio({ANNOTATION_CPU_NORMALIZATION_RATIO: "x"}) is None
    assert current_ratio({}) is None
