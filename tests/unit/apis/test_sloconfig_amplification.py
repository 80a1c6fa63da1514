"""``resource-amplification-config``: cluster values at the top level, ``nodeConfigs`` overlaid on them (cases of
upstream ``resourceamplification/configmap_event_handler_test.go`` Test_configHandler_syncCacheIfCfgChanged),
and bad input refused by key and field while the other keys apply."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordlet.apis.sloconfig import (
    RESOURCE_AMPLIFICATION_CONFIG_KEY,
    ResourceAmplificationStrategy,
    key_errors,
    render_colocation,
    render_resource_amplification,
)

KEY = RESOURCE_AMPLIFICATION_CONFIG_KEY
SELECTED = {"node.koordinator.sh/cpunormalization": "true"}


def render(cfg: Any, labels: dict[str, str] | None = None) -> ResourceAmplificationStrategy:
    strategy, errors = render_resource_amplification({KEY: json.dumps(cfg)}, labels or {})
    assert errors == ()
    return strategy


def test_defaults() -> None:
    # "failed to get amplification key" and TestDefaultResourceAmplificationCfg: enable false, no ratios.
    strategy, errors = render_resource_amplification({}, {})
    assert strategy == ResourceAmplificationStrategy(enable=False) and errors == ()
    # "sync cache unchanged": an explicit enable false is the default.
    assert render({"enable": False}) == ResourceAmplificationStrategy(enable=False)


def test_cluster_values() -> None:
    # "sync cache changed"
    strategy = render({"enable": True, "resourceAmplificationRatio": {"cpu": 1.1, "memory": 1.2}})
    assert strategy.enable is True and strategy.resource_amplification_ratio == {"cpu": 1.1, "memory": 1.2}


NODE_CONFIGS = {
    "enable": True, "resourceAmplificationRatio": {"cpu": 2.5, "memory": 3.5},
    "nodeConfigs": [{"name": "selector-test", "nodeSelector": {"matchLabels": SELECTED},
                     "resourceAmplificationRatio": {"cpu": 1.5, "memory": 1.6}, "enable": True}],
}


def test_node_configs() -> None:
    # "sync cache changed with node configs": a selected node gets its entry, the others the cluster values.
    assert render(NODE_CONFIGS, SELECTED).resource_amplification_ratio == {"cpu": 1.5, "memory": 1.6}
    assert render(NODE_CONFIGS, {"other": "x"}).resource_amplification_ratio == {"cpu": 2.5, "memory": 3.5}


def test_node_entry_merges_over_the_cluster_values_like_merge_cfg() -> None:
    # MergeCfg unmarshals the entry into a copy of the cluster strategy: the ratio maps merge key by key and an
    # unset enable is inherited.
    cfg = {"enable": True, "resourceAmplificationRatio": {"cpu": 2.5, "memory": 3.5},
           "nodeConfigs": [{"nodeSelector": {"matchLabels": SELECTED}, "resourceAmplificationRatio": {"memory": 1.6}},
                           {"nodeSelector": {}, "enable": False}]}
    selected = render(cfg, SELECTED)
    assert selected.enable is True and selected.resource_amplification_ratio == {"cpu": 2.5, "memory": 1.6}
    assert render(cfg, {}).enable is False  # the empty selector matches every node: the first match wins


def test_go_decoding_details() -> None:
    # Field names fold case; a null ratio is Go's zero value (the key stays, refused later by the calculation).
    strategy = render({"Enable": True, "ResourceAmplificationRatio": {"cpu": None, "memory": 2}})
    assert strategy.enable is True and strategy.resource_amplification_ratio == {"cpu": 0.0, "memory": 2.0}


@pytest.mark.parametrize(("cfg", "message"), [
    ({"enable": "yes"}, f"{KEY}.enable: must be true or false, got 'yes'"),
    ({"resourceAmplificationRatio": [1.5]}, f"{KEY}.resourceAmplificationRatio: must be an object, got a list"),
    ({"resourceAmplificationRatio": {"cpu": "1.5"}},
     f"{KEY}.resourceAmplificationRatio['cpu']: must be a finite number, got '1.5'"),
    ({"resourceAmplificationRatio": {"cpu": True}},
     f"{KEY}.resourceAmplificationRatio['cpu']: must be a finite number, got true"),
    ({"nodeConfigs": {"enable": True}}, f"{KEY}: nodeConfigs: must be a list, got an object"),
    ({"nodeConfigs": [{"nodeSelector": {"matchLabels": SELECTED}, "resourceAmplificationRatio": {"memory": "x"}}]},
     f"{KEY}: nodeConfigs[0].resourceAmplificationRatio['memory']: must be a finite number, got 'x'"),
    ({"nodeConfigs": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
     "must be non-empty for operator In"),
])
def test_bad_input_falls_back_to_the_defaults_naming_key_and_field(cfg: Any, message: str) -> None:
    colocation = json.dumps({"enable": True})
    data = {KEY: json.dumps(cfg), "colocation-config": colocation}
    strategy, errors = render_resource_amplification(data, SELECTED)
    assert strategy == ResourceAmplificationStrategy(enable=False)
    assert len(errors) == 1 and str(errors[0]).startswith(KEY) and message in str(errors[0])
    assert render_colocation(data, {})[0].enable is True  # the other keys still apply
    assert set(key_errors(data)) == {KEY}


@pytest.mark.parametrize("text", ['{"resourceAmplificationRatio": {"cpu": 1e999}}',
                                  '{"resourceAmplificationRatio": {"cpu": 1' + "0" * 400 + '}}',
                                  '{"resourceAmplificationRatio": {"cpu": NaN}}', "{not json", "[1]"])
def test_numbers_and_documents_go_refuses(text: str) -> None:
    # Go: a number past float64's range does not unmarshal; NaN is not JSON.
    strategy, errors = render_resource_amplification({KEY: text}, {})
    assert strategy.enable is False and len(errors) == 1 and str(errors[0]).startswith(KEY)
