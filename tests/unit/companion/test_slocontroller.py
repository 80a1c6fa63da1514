"""The SLO controller: NodeSLO per node from slo-controller-config, last good per key, generations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.sloconfig import configmap_data_from_yaml
from koordlet.companion.slocontroller import SLOController

THRESHOLD = "resource-threshold-config"


def sample(shared_dir: Path, rel: str) -> str:
    return (shared_dir / "reference" / "koordinator-samples" / rel).read_text(encoding="utf-8")


def threshold(enable: bool, percent: int) -> str:
    return json.dumps({"clusterStrategy": {"enable": enable, "cpuSuppressThresholdPercent": percent}})


def test_quickstart_edit_renders_the_documented_nodeslo(shared_dir: Path) -> None:
    controller = SLOController()
    controller.set_node("test-node", {})
    errors = controller.set_configmap(
        configmap_data_from_yaml(sample(shared_dir, "slo-configs/quickstart-edit-suppress-cpuset-60.yaml")), "cm")
    assert errors == {}
    expected: Any = yaml.safe_load(sample(shared_dir, "crs/nodeslo-after-quickstart-edit.yaml"))["spec"]
    rendered = controller.spec_for("test-node")
    assert rendered is not None
    for key, value in expected["resourceUsedThresholdWithBE"].items():
        assert rendered.spec["resourceUsedThresholdWithBE"][key] == value


def test_a_bad_key_keeps_its_last_good_text_and_the_others_apply(shared_dir: Path) -> None:
    controller = SLOController()
    controller.set_node("n1", {})
    controller.set_configmap({THRESHOLD: threshold(True, 60)}, "cm@1")
    first = controller.spec_for("n1")
    assert first is not None and first.spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 60
    burst = json.dumps({"clusterStrategy": {"policy": "auto"}})
    errors = controller.set_configmap({THRESHOLD: threshold(True, 160), "cpu-burst-config": burst}, "cm@2")
    assert list(errors) == [THRESHOLD]
    assert "cpuSuppressThresholdPercent" in errors[THRESHOLD] and errors[THRESHOLD].startswith(THRESHOLD)
    second = controller.spec_for("n1")
    assert second is not None and second.generation == first.generation + 1
    assert second.spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 60, "last good kept"
    assert second.spec["cpuBurstStrategy"]["policy"] == "auto", "the good key of the same edit applies"
    assert controller.errors == errors
    controller.set_configmap({THRESHOLD: threshold(True, 70), "cpu-burst-config": burst}, "cm@3")
    assert controller.errors == {}


def test_the_full_template_applies_all_keys_but_system_config(shared_dir: Path) -> None:
    data = configmap_data_from_yaml(sample(shared_dir, "slo-configs/full-template-all-keys.yaml"))
    controller = SLOController()
    controller.set_node("anolis", {"kubernetes.io/kernel": "anolis"})
    controller.set_node("plain", {})
    errors = controller.set_configmap(data, "cm")
    assert list(errors) == ["system-config"]
    anolis, plain = controller.spec_for("anolis"), controller.spec_for("plain")
    assert anolis is not None and plain is not None
    assert anolis.spec["cpuBurstStrategy"]["policy"] == "cfsQuotaBurstOnly"
    assert plain.spec["cpuBurstStrategy"]["policy"] != "cfsQuotaBurstOnly"
    assert controller.colocation_for("anolis").update_time_threshold_seconds == 360
    assert controller.colocation_for("plain").update_time_threshold_seconds != 360


def test_listeners_hear_only_about_nodes_whose_spec_changed() -> None:
    controller = SLOController()
    heard: list[list[str]] = []
    controller.subscribe(heard.append)
    controller.set_node("a", {"pool": "x"})
    controller.set_node("b", {})
    data = {THRESHOLD: json.dumps({"clusterStrategy": {"enable": False},
                                   "nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "x"}},
                                                       "enable": True}]})}
    controller.set_configmap(data, "cm")
    assert heard[-1] == ["a"]
    generation = controller.spec_for("a")
    controller.set_configmap(data, "cm-again")
    assert controller.spec_for("a") == generation, "same content: no new generation"
    controller.set_node("a", {"pool": "x"})
    assert len(heard) == 3


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", json.dumps({"clusterStrategy": {"enable": "yes"}})])
def test_garbage_never_replaces_a_good_key(bad: str) -> None:
    controller = SLOController()
    controller.set_node("n", {})
    controller.set_configmap({THRESHOLD: threshold(True, 55)}, "good")
    errors = controller.set_configmap({THRESHOLD: bad}, "bad")
    assert THRESHOLD in errors
    rendered = controller.spec_for("n")
    assert rendered is not None and rendered.spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 55


AMPLIFICATION = "resource-amplification-config"


def test_resource_amplification_config_applies_per_node_and_a_bad_edit_keeps_the_last_good(
        caplog: pytest.LogCaptureFixture) -> None:
    controller = SLOController()
    controller.set_node("plain", {})
    controller.set_node("big", {"pool": "big"})
    assert controller.amplification_for("plain").enable is False  # no ConfigMap: the default
    good = json.dumps({"enable": True, "resourceAmplificationRatio": {"cpu": 1.5},
                       "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "big"}},
                                        "resourceAmplificationRatio": {"memory": 1.2}}]})
    with caplog.at_level("WARNING", logger="koordlet.companion.slocontroller"):
        assert controller.set_configmap({AMPLIFICATION: good, THRESHOLD: threshold(True, 60)}, "configmap@1") == {}
    assert caplog.records == []  # implemented: no "not applied" warning any more
    assert controller.amplification_for("plain").resource_amplification_ratio == {"cpu": 1.5}
    big = controller.amplification_for("big")
    assert big.enable is True and big.resource_amplification_ratio == {"cpu": 1.5, "memory": 1.2}  # maps merge

    errors = controller.set_configmap({AMPLIFICATION: json.dumps({"enable": "yes"}), THRESHOLD: threshold(True, 55)},
                                      "configmap@2")
    assert errors == {AMPLIFICATION: f"{AMPLIFICATION}.enable: must be true or false, got 'yes'"}
    assert controller.amplification_for("plain").resource_amplification_ratio == {"cpu": 1.5}  # last good kept
    rendered = controller.spec_for("plain")
    assert rendered is not None and rendered.spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 55
