"""The ``koordinator.sh/cpuBurst`` pod annotation laid over the node's ``cpuBurstStrategy``."""

from __future__ import annotations

import pytest

from koordlet.apis.nodeslo import CPUBurstStrategy, default_cpu_burst_strategy
from koordlet.qosmanager.plugins.cpuburst.podconfig import (
    ANNOTATION_CPU_BURST,
    PodConfigs,
    burst_enabled,
    quota_burst_enabled,
)

NODE = default_cpu_burst_strategy()  # none / 1000% / 300% / -1 s / 50%


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (None, NODE),
        ('{"policy": "auto"}', CPUBurstStrategy("auto", 1000, 300, -1, 50)),
        ('{"policy": "cpuBurstOnly", "cpuBurstPercent": 200}', CPUBurstStrategy("cpuBurstOnly", 200, 300, -1, 50)),
        # Go's encoding/json matches keys case-insensitively
        ('{"POLICY": "cfsQuotaBurstOnly", "cfsquotaburstpercent": 150, "cfsQuotaBurstPeriodSeconds": 60}',
         CPUBurstStrategy("cfsQuotaBurstOnly", 1000, 150, 60, 50)),
        # the share-pool threshold is node-wide: a pod cannot move it
        ('{"policy": "auto", "sharePoolThresholdPercent": 90}', CPUBurstStrategy("auto", 1000, 300, -1, 50)),
        ("{}", NODE),
    ],
)
def test_annotation_overrides_the_node(annotation: str | None, expected: CPUBurstStrategy) -> None:
    annotations = {} if annotation is None else {ANNOTATION_CPU_BURST: annotation}
    result = PodConfigs().get("default/web", annotations, NODE)
    assert result.error is None
    assert result.config == expected


@pytest.mark.parametrize(
    ("annotation", "error"),
    [
        ("{not json", "pod default/web: koordinator.sh/cpuBurst is not JSON (Expecting property name enclosed "
                      "in double quotes: line 1 column 2 (char 1)): '{not json'"),
        ('["auto"]', "pod default/web: koordinator.sh/cpuBurst: must be an object, got a list"),
        ('{"policy": "always"}', "pod default/web: koordinator.sh/cpuBurst.policy: must be one of none, "
                                 "cpuBurstOnly, cfsQuotaBurstOnly, auto, got 'always'"),
        ('{"policy": "auto", "cfsQuotaBurstPercent": 50}', "pod default/web: koordinator.sh/cpuBurst."
                                                           "cfsQuotaBurstPercent: must be >= 100, got 50"),
    ],
)
def test_garbage_annotation_falls_back_to_the_node(annotation: str, error: str) -> None:
    result = PodConfigs().get("default/web", {ANNOTATION_CPU_BURST: annotation}, NODE)
    assert result.config == NODE
    assert result.error == error


def test_parsed_once_per_annotation_and_node_strategy() -> None:
    configs = PodConfigs()
    annotations = {ANNOTATION_CPU_BURST: '{"policy": "auto"}'}
    first = configs.get("default/web", annotations, NODE)
    assert configs.get("default/web", annotations, NODE) is first
    other_node = CPUBurstStrategy("none", 500, 300, -1, 50)
    assert configs.get("default/web", annotations, other_node).config.cpu_burst_percent == 500


@pytest.mark.parametrize(
    ("policy", "burst", "quota"),
    [("none", False, False), ("cpuBurstOnly", True, False), ("cfsQuotaBurstOnly", False, True),
     ("auto", True, True), (None, False, False)],
)
def test_policies(policy: str | None, burst: bool, quota: bool) -> None:
    assert (burst_enabled(policy), quota_burst_enabled(policy)) == (burst, quota)
