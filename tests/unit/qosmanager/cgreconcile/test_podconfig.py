"""The pod's ``koordinator.sh/memoryQOS`` annotation over its class's memoryQOS."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import MemoryQOSCfg, ResourceQOS, default_resource_qos_strategy
from koordlet.qosmanager.plugins.cgreconcile.podconfig import ANNOTATION_MEMORY_QOS, PodConfigs, class_config, parse

LS_ON = MemoryQOSCfg(enable=True, min_limit_percent=20, low_limit_percent=40, throttling_percent=80,
                     wmark_ratio=95, wmark_scale_permill=20, wmark_min_adj=-25, priority_enable=0, priority=0,
                     oom_kill_group=0)
LS_OFF = dataclasses.replace(LS_ON, enable=False)


@pytest.mark.parametrize(("text", "qos", "node", "enabled", "policy", "expect"), [
    # auto: the recommended values of the class, on even when the class is off.
    ('{"policy": "auto"}', QoSClass.LS, LS_OFF, True, "auto",
     {"min_limit_percent": 0, "low_limit_percent": 0, "throttling_percent": 0, "wmark_ratio": 95,
      "wmark_scale_permill": 20, "wmark_min_adj": -25}),
    ('{"policy": "auto"}', QoSClass.BE, None, True, "auto", {"wmark_min_adj": 50}),
    ('{"policy": "auto"}', QoSClass.LSE, None, True, "auto", {"wmark_min_adj": -25}),
    # auto plus fields: the fields win.
    ('{"policy": "auto", "minLimitPercent": 100, "throttlingPercent": 70}', QoSClass.LS, LS_OFF, True, "auto",
     {"min_limit_percent": 100, "throttling_percent": 70, "low_limit_percent": 0}),
    # none: off whatever the class says.
    ('{"policy": "none"}', QoSClass.LS, LS_ON, False, "none", {}),
    # default / no policy: the class, with the fields over it; on when the class is.
    ('{"policy": "default", "lowLimitPercent": 60}', QoSClass.LS, LS_ON, True, "default",
     {"min_limit_percent": 20, "low_limit_percent": 60, "throttling_percent": 80}),
    ('{"minLimitPercent": 10}', QoSClass.LS, LS_ON, True, "default", {"min_limit_percent": 10}),
    ('{"minLimitPercent": 10}', QoSClass.LS, LS_OFF, False, "default", {"min_limit_percent": 10}),
    # The annotation has no "enable": the policy decides.
    ('{"enable": true}', QoSClass.LS, LS_OFF, False, "default", {}),
    ('{}', QoSClass.LS, LS_ON, True, "default", {"min_limit_percent": 20}),
])
def test_policies(text: str, qos: QoSClass, node: MemoryQOSCfg | None, enabled: bool, policy: str,
                  expect: dict[str, int]) -> None:
    config = parse("default/p", text, qos, node)
    assert config.error is None
    assert (config.enabled, config.policy) == (enabled, policy)
    for name, value in expect.items():
        assert getattr(config.cfg, name) == value, name


@pytest.mark.parametrize(("text", "qos", "fragment"), [
    ("{policy: auto}", QoSClass.LS, "is not JSON"),
    ('["auto"]', QoSClass.LS, "must be a JSON object"),
    ('"auto"', QoSClass.LS, "must be a JSON object"),
    ('{"policy": "sometimes"}', QoSClass.LS, "unknown policy 'sometimes'"),
    ('{"policy": 1}', QoSClass.LS, "unknown policy 1"),
    ('{"minLimitPercent": 150}', QoSClass.LS, "minLimitPercent: must be 0..100, got 150"),
    ('{"minLimitPercent": "50"}', QoSClass.LS, "minLimitPercent: must be an integer"),
    ('{"wmarkScalePermill": 0}', QoSClass.LS, "wmarkScalePermill: must be 1..1000, got 0"),
    ('{"policy": "auto"}', QoSClass.NONE, "needs a QoS class"),
])
def test_garbage_is_refused_naming_the_pod(text: str, qos: QoSClass, fragment: str) -> None:
    config = parse("default/web", text, qos, LS_ON)
    assert config.enabled is False
    assert config.error is not None
    assert "default/web" in config.error
    assert fragment in config.error


def test_class_config_by_class() -> None:
    s = default_resource_qos_strategy()
    lsr = MemoryQOSCfg(enable=True, min_limit_percent=1)
    s = dataclasses.replace(s, lsr_class=ResourceQOS(memory_qos=lsr))
    assert class_config(s, QoSClass.LSE) is lsr
    assert class_config(s, QoSClass.LSR) is lsr
    assert s.be_class is not None and class_config(s, QoSClass.BE) is s.be_class.memory_qos
    assert s.system_class is not None and class_config(s, QoSClass.SYSTEM) is s.system_class.memory_qos
    assert class_config(s, QoSClass.NONE) is None


def test_pod_configs_without_annotation_follow_the_class_and_log_garbage_once(
        caplog: pytest.LogCaptureFixture) -> None:
    configs = PodConfigs()
    on = configs.get("default/a", {}, QoSClass.LS, LS_ON)
    assert on.enabled and on.cfg == LS_ON
    assert configs.get("default/b", {}, QoSClass.LS, LS_ON) is on
    assert not configs.get("default/a", {}, QoSClass.LS, LS_OFF).enabled
    assert not configs.get("default/a", {}, QoSClass.NONE, None).enabled
    bad = {ANNOTATION_MEMORY_QOS: "garbage"}
    with caplog.at_level(logging.WARNING):
        first = configs.get("default/a", bad, QoSClass.LS, LS_ON)
        second = configs.get("default/a", bad, QoSClass.LS, LS_ON)
    assert first is second and first.error is not None
    assert len([r for r in caplog.records if "memoryQOS annotation refused" in r.getMessage()]) == 1
