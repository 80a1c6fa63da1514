"""Resource amplification ratios: the calculation (upstream ``resourceamplification/plugin_test.go``
TestPluginCalculate, one row per case) and how NodeResources writes the annotation."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO
from koordlet.apis.sloconfig import ResourceAmplificationStrategy
from koordlet.companion.amplification import (
    ANNOTATION_RESOURCE_AMPLIFICATION_RATIO,
    AmplificationRefused,
    annotation_value,
    cpu_ratio,
    node_annotation,
)
from koordlet.companion.batchresource import CPUMemory, NodeInput
from koordlet.companion.noderesources import NodeInputs, NodeResources
from koordlet.companion.slocontroller import SLOController

OFF = ResourceAmplificationStrategy()
"""Upstream's ``&configuration.ResourceAmplificationCfg{}``: enable unset, no ratios."""


def on(**ratios: float) -> ResourceAmplificationStrategy:
    return ResourceAmplificationStrategy(enable=True, resource_amplification_ratio=ratios)


REFUSED = AmplificationRefused

# (upstream case or why, strategy, node's cpu normalization ratio, annotation or REFUSED)
CASES: list[tuple[str, ResourceAmplificationStrategy, str | None, Any]] = [
    ("get cpu normalization ratio failed", OFF, "invalid", REFUSED),
    ("calculate ratio correctly with cpu normalization", OFF, "1.22", '{"cpu":1.22}'),
    ("calculate ratio correctly without cpu normalization", OFF, None, None),
    ("calculate ratio with amplification ratio", on(cpu=1.1, memory=2.1), None, '{"cpu":1.10,"memory":2.10}'),
    # 1.5 x 1.20 is 1.7999999999999998 in float64; Ratio.MarshalJSON prints two decimals.
    ("calculate ratio with both cpu normalization ratio and amplification ratio", on(cpu=1.5, memory=2.5), "1.20",
     '{"cpu":1.80,"memory":2.50}'),
    ("calculate ratio with cpu normalization ratio and amplification memory ratio", on(memory=3.5), "1.50",
     '{"cpu":1.50,"memory":3.50}'),
    ("calculate ratio with cpu normalization ratio and other resource type ratio", on(memory=3.5, storage=1.8),
     "1.50", '{"cpu":1.50,"memory":3.50,"storage":1.80}'),
    # 0.8 x 1.5 = 1.2000000000000002 > 1 replaces the configured 0.8.
    ("calculate ratio with final cpu normalization ratio > 1 correctly", on(cpu=0.8, memory=3.5, storage=1.8),
     "1.50", '{"cpu":1.20,"memory":3.50,"storage":1.80}'),
    ("calculate ratio with final cpu normalization ratio < 1 invalid", on(cpu=0.5, memory=3.5, storage=1.8),
     "1.50", REFUSED),
    ("calculate ratio with one resource amplification ratio invalid", on(memory=3.5, storage=0.5), "1.50", REFUSED),
    # Not upstream cases: consequences of the same rules.
    ("the companion test's node: 1.5 x 1.2 = 1.7999999999999998", on(cpu=1.2, memory=1.1), "1.50",
     '{"cpu":1.80,"memory":1.10}'),
    ("disabled: the configured ratios do not count, the normalization does", ResourceAmplificationStrategy(
        enable=False, resource_amplification_ratio={"cpu": 2.0, "memory": 2.0}), "1.50", '{"cpu":1.50}'),
    ("normalization 1.00 (off) and nothing configured: no annotation", OFF, "1.00", None),
    ("a configured cpu ratio of exactly 1 stays (valid, not replaced)", on(cpu=1.0), None, '{"cpu":1.00}'),
    ("a configured cpu ratio of 0 with no normalization is refused", on(cpu=0.0), None, REFUSED),
    ("a negative cpu ratio counts as 1 before the normalization", on(cpu=-2.0), "1.50", '{"cpu":1.50}'),
    ("an enabled strategy without ratios", on(), None, None),
    ("two decimals, rounded half to even on an exact tie like Go", on(a=1.125, b=1.375, c=1.005), None,
     '{"a":1.12,"b":1.38,"c":1.00}'),
    ("keys sorted bytewise and escaped as Go does", on(**{"b/x": 1.5, "a<b": 2.0, "B": 3.0}), None,
     '{"B":3.00,"a\\u003cb":2.00,"b/x":1.50}'),
    ("a product past float64's range (Go would write an empty annotation)", on(cpu=1e308), "5.00", REFUSED),
]


@pytest.mark.parametrize(("strategy", "normalization", "expected"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_node_annotation(strategy: ResourceAmplificationStrategy, normalization: str | None, expected: Any) -> None:
    if expected is REFUSED:
        with pytest.raises(AmplificationRefused):
            node_annotation(strategy, normalization)
    else:
        assert node_annotation(strategy, normalization) == expected


def test_refusals_name_the_resource_and_value() -> None:
    with pytest.raises(AmplificationRefused, match=r"ratio of storage is 0\.5, below 1"):
        node_annotation(on(memory=3.5, storage=0.5), "1.50")
    with pytest.raises(AmplificationRefused, match="cpu normalization ratio"):
        node_annotation(OFF, "0")


def test_cpu_ratio_is_float64_arithmetic() -> None:
    assert cpu_ratio(1.2, 1.5) == 1.7999999999999998
    assert cpu_ratio(None, None) == 1.0
    assert annotation_value({}) is None


# --- NodeResources -------------------------------------------------------------------------------------


class FakeBackoff:
    def forget(self, node: str) -> None:
        pass


class FakeAnnotationWriter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str | None]]] = []
        self.backoff = FakeBackoff()

    def apply(self, node: str, annotations: Mapping[str, str | None]) -> Any:
        from koordlet.companion.kube import ApplyResult

        self.calls.append((node, dict(annotations)))
        return ApplyResult.UPDATED


def resources(controller: SLOController, annotations: dict[str, str], leader: list[bool]
              ) -> tuple[NodeResources, FakeAnnotationWriter]:
    def inputs(node: str) -> NodeInputs:
        return NodeInputs(NodeInput(node, CPUMemory(8000, 16 << 30), CPUMemory(8000, 16 << 30),
                                    annotations=dict(annotations)), (), None)

    out = NodeResources(controller, inputs, lambda node: None, is_leader=lambda: leader[0], clock=lambda: 0.0)
    writer = FakeAnnotationWriter()
    out._annotation_writer = writer
    return out, writer


def amplification_writes(writer: FakeAnnotationWriter) -> list[str | None]:
    return [a[ANNOTATION_RESOURCE_AMPLIFICATION_RATIO] for _, a in writer.calls
            if ANNOTATION_RESOURCE_AMPLIFICATION_RATIO in a]


def configured(enable: bool, **ratios: float) -> SLOController:
    controller = SLOController()
    controller.set_node("n", {})
    controller.set_configmap({"resource-amplification-config": json.dumps(
        {"enable": enable, "resourceAmplificationRatio": ratios})}, "cm")
    return controller


def test_the_leader_writes_only_what_differs_from_the_node() -> None:
    controller = configured(True, memory=1.1)
    node: dict[str, str] = {}
    leader = [False]
    res, writer = resources(controller, node, leader)
    res._write_amplification("n", res._inputs("n"), "1.50")
    assert writer.calls == []  # a standby computes, never writes
    leader[0] = True
    res._write_amplification("n", res._inputs("n"), "1.50")
    assert amplification_writes(writer) == ['{"cpu":1.50,"memory":1.10}']
    node[ANNOTATION_RESOURCE_AMPLIFICATION_RATIO] = '{"cpu":1.50,"memory":1.10}'
    res, writer = resources(controller, node, leader)
    res._write_amplification("n", res._inputs("n"), "1.50")
    assert writer.calls == []  # NeedSyncMeta: the same text is not rewritten
    res._write_amplification("n", res._inputs("n"), "1.00")  # normalization reset: only memory left
    assert amplification_writes(writer) == ['{"memory":1.10}']


def test_no_ratio_removes_the_annotation_and_a_node_without_one_is_left_alone() -> None:
    controller = configured(False, memory=1.1)
    res, writer = resources(controller, {ANNOTATION_RESOURCE_AMPLIFICATION_RATIO: '{"cpu":1.20}'}, [True])
    res._write_amplification("n", res._inputs("n"), "1.00")
    assert amplification_writes(writer) == [None]
    res, writer = resources(controller, {}, [True])
    res._write_amplification("n", res._inputs("n"), None)
    assert writer.calls == []


def test_nothing_before_the_config_is_known() -> None:
    controller = SLOController()
    controller.set_node("n", {})
    res, writer = resources(controller, {}, [True])
    res._write_amplification("n", res._inputs("n"), "1.50")
    assert writer.calls == []  # upstream: cfgHandler not available


def test_without_a_ratio_this_round_an_unreadable_node_ratio_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    controller = configured(True, memory=1.1)
    res, writer = resources(controller, {ANNOTATION_CPU_NORMALIZATION_RATIO: "fast"}, [True])
    with caplog.at_level(logging.WARNING, logger="koordlet.companion.noderesources"):
        res._write_amplification("n", res._inputs("n"), None)
    assert writer.calls == [] and [r.getMessage() for r in caplog.records] == [
        "resource amplification ratio refused, node left as it is"]


def test_a_refusal_is_logged_once_per_reason_and_the_annotation_left(caplog: pytest.LogCaptureFixture) -> None:
    controller = configured(True, storage=0.5)
    res, writer = resources(controller, {ANNOTATION_RESOURCE_AMPLIFICATION_RATIO: '{"cpu":1.20}'}, [True])
    with caplog.at_level(logging.WARNING, logger="koordlet.companion.noderesources"):
        res._write_amplification("n", res._inputs("n"), "1.50")
        res._write_amplification("n", res._inputs("n"), "1.50")
        assert [r.node for r in caplog.records] == ["n"]  # type: ignore[attr-defined]
        controller.set_configmap({"resource-amplification-config": '{"enable":true,'
                                  '"resourceAmplificationRatio":{"storage":0.7}}'}, "cm2")
        res._write_amplification("n", res._inputs("n"), "1.50")
        assert [r.error for r in caplog.records] == [  # type: ignore[attr-defined]
            "ratio of storage is 0.5, below 1", "ratio of storage is 0.7, below 1"]
    assert writer.calls == []
    res.forget("n")
    assert res._amplification_refused == {}
