"""slo-controller-config: per-key rendering for a node, per-key fallback, and every documented ConfigMap."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.nodeslo import MEMORY_EVICT_LOWER_GAP_PERCENT, NodeSLOSpec, default_nodeslo_spec
from koordlet.apis.quantity import parse_quantity
from koordlet.apis.sloconfig import (
    ColocationStrategy,
    CPUNormalizationStrategy,
    LabelSelector,
    configmap_data_from_yaml,
    keep_last_good,
    key_errors,
    render_colocation,
    render_cpu_normalization,
    render_nodeslo,
)
from koordlet.errors import ConfigError, ParseError

SAMPLES = "reference/koordinator-samples"
ANOLIS = {"kubernetes.io/kernel": "anolis"}
PLAIN = {"kubernetes.io/hostname": "node-1"}


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


def strategy_json(cluster: dict[str, Any], *nodes: dict[str, Any]) -> str:
    return json.dumps({"clusterStrategy": cluster, "nodeStrategies": list(nodes)})


# ------------------------------------------------------------------------------------------ selectors


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1"}}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
])
def test_label_selector(selector: dict[str, Any], labels: dict[str, str], selected: bool) -> None:
    assert LabelSelector.from_json(selector).matches(labels) is selected


@pytest.mark.parametrize(("selector", "message"), [
    ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "values: must be non-empty for operator In"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     "values: must be empty for operator Exists, got ['x']"),
    ({"matchExpressions": [{"key": "a", "operator": "Near"}]}, "operator: must be one of In, NotIn, Exists"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "key: must be a non-empty label key"),
    ({"matchLabels": {"a": 1}}, "matchLabels: must be an object of strings"),
])
def test_invalid_selectors(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        LabelSelector.from_json(selector, "sel")


# ------------------------------------------------------------------------------------------ rendering


def test_empty_configmap_renders_the_defaults() -> None:
    spec, errors = render_nodeslo({}, PLAIN)
    assert errors == ()
    assert spec == default_nodeslo_spec()


def test_cluster_then_first_matching_node_strategy() -> None:
    data = {"resource-threshold-config": strategy_json(
        {"enable": True, "cpuSuppressThresholdPercent": 60},
        {"name": "no-selector", "cpuSuppressThresholdPercent": 10},  # nil selector: matches nothing
        {"name": "pool", "nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuSuppressThresholdPercent": 50},
        {"name": "everyone", "nodeSelector": {}, "cpuSuppressThresholdPercent": 40,
         "memoryEvictThresholdPercent": 80})}
    threshold = dig(render_nodeslo(data, {"pool": "a"})[0].to_json(), "resourceUsedThresholdWithBE")
    assert (threshold["enable"], threshold["cpuSuppressThresholdPercent"], threshold["memoryEvictThresholdPercent"]) \
        == (True, 50, 70)
    threshold = dig(render_nodeslo(data, {"pool": "b"})[0].to_json(), "resourceUsedThresholdWithBE")
    assert (threshold["cpuSuppressThresholdPercent"], threshold["memoryEvictThresholdPercent"]) == (40, 80)


def test_node_strategy_merges_nested_objects_and_replaces_lists() -> None:
    cluster = {"beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 80},
                           "blkioQOS": {"enable": True, "blocks": [{"name": "/dev/sda", "type": "device"},
                                                                   {"name": "/dev/sdb", "type": "device"}]}}}
    node = {"nodeSelector": {"matchLabels": {"disk": "one"}},
            "beClass": {"memoryQOS": {"wmarkRatio": 90}, "blkioQOS": {"blocks": [{"name": "/dev/vda"}]}}}
    spec, errors = render_nodeslo({"resource-qos-config": strategy_json(cluster, node)}, {"disk": "one"})
    assert errors == ()
    be = dig(spec.to_json(), "resourceQOSStrategy.beClass")
    assert (be["memoryQOS"]["enable"], be["memoryQOS"]["wmarkRatio"], be["memoryQOS"]["wmarkMinAdj"]) == (True, 90, 50)
    assert be["blkioQOS"] == {"enable": True, "blocks": [{"name": "/dev/vda"}]}


def test_bad_key_falls_back_alone_and_names_key_and_field() -> None:
    data = {
        "resource-threshold-config": strategy_json({"enable": True, "cpuSuppressThresholdPercent": 120}),
        "cpu-burst-config": strategy_json({"policy": "auto"}),
        "system-config": "{not json",
        "resource-qos-config": strategy_json({}, {"nodeSelector": {}, "lsClass": {"cpuQOS": {"groupIdentity": 7}}}),
    }
    spec, errors = render_nodeslo(data, PLAIN)
    assert [str(e) for e in errors] == [
        "resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: must be 0..100, got 120",
        "resource-qos-config: nodeStrategies[0].lsClass.cpuQOS.groupIdentity: must be -1..2, got 7",
        "system-config: invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    ]
    defaults = default_nodeslo_spec()
    assert spec.resource_used_threshold_with_be == defaults.resource_used_threshold_with_be
    assert spec.resource_qos_strategy == defaults.resource_qos_strategy
    assert spec.system_strategy == defaults.system_strategy
    assert dig(spec.to_json(), "cpuBurstStrategy.policy") == "auto"


def test_non_matching_node_entries_are_validated_too() -> None:
    data = {"cpu-burst-config": strategy_json(
        {"policy": "auto"}, {"nodeSelector": {"matchLabels": {"x": "y"}}, "policy": "sometimes"})}
    spec, errors = render_nodeslo(data, PLAIN)
    assert [str(e) for e in errors] == [
        "cpu-burst-config: nodeStrategies[0].policy: must be one of none, cpuBurstOnly, cfsQuotaBurstOnly, auto, "
        "got 'sometimes'"]
    assert dig(spec.to_json(), "cpuBurstStrategy.policy") == "none"


def test_cross_field_rule_is_checked_after_the_merge() -> None:
    # Each fragment is valid alone; laid over the BE defaults (end 30) the start is past the end.
    data = {"resource-qos-config": strategy_json({"beClass": {"resctrlQOS": {"catRangeStartPercent": 40}}})}
    _, errors = render_nodeslo(data, PLAIN)
    assert [str(e) for e in errors] == [
        "resource-qos-config: clusterStrategy.beClass.resctrlQOS.catRangeStartPercent: must be less than "
        "catRangeEndPercent (30), got 40"]


@pytest.mark.parametrize(("value", "message"), [
    ("[]", "resource-threshold-config: must be a JSON object, got a list"),
    ('{"clusterStrategy": {"enable": NaN}}', "resource-threshold-config: invalid JSON: NaN is not a JSON value"),
    ('{"nodeStrategies": {}}', "resource-threshold-config: nodeStrategies: must be a list, got an object"),
    ('{"clusterStrategy": 3}', "resource-threshold-config: clusterStrategy: must be an object, got 3"),
])
def test_malformed_documents(value: str, message: str) -> None:
    _, errors = render_nodeslo({"resource-threshold-config": value}, PLAIN)
    assert [str(e) for e in errors] == [message]


def test_host_applications_node_config_replaces_the_list() -> None:
    data = {"host-application-config": json.dumps({
        "applications": [{"name": "nginx", "qos": "LS"}],
        "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "yarn"}},
                         "applications": [{"name": "yarn", "qos": "BE", "priority": "koord-batch"}]}]})}
    assert [a.name for a in render_nodeslo(data, PLAIN)[0].host_applications or ()] == ["nginx"]
    assert [a.name for a in render_nodeslo(data, {"pool": "yarn"})[0].host_applications or ()] == ["yarn"]


def test_configmap_yaml_shapes() -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\ndata:\n  cpu-burst-config: '{}'\n"
    assert configmap_data_from_yaml(manifest) == {"cpu-burst-config": "{}"}
    assert configmap_data_from_yaml("data:\n  system-config: '{}'\n") == {"system-config": "{}"}
    assert configmap_data_from_yaml("system-config: '{}'\n") == {"system-config": "{}"}
    assert configmap_data_from_yaml("kind: ConfigMap\ndata:\n") == {}
    with pytest.raises(ParseError, match=r"^not valid YAML: "):
        configmap_data_from_yaml("a: {{ .Values.x }}\n")
    with pytest.raises(ParseError, match="expected one YAML mapping"):
        configmap_data_from_yaml("- a\n")


# ------------------------------------------------------------------------------------------ documented ConfigMaps


def sample_text(shared_dir: Path, name: str) -> str:
    return (shared_dir / SAMPLES / "slo-configs" / name).read_text()


def block_scalar(text: str, key: str) -> str:
    """The literal block under ``key: |`` in text that is not valid YAML (a Helm template), cut by indentation."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^\s*{re.escape(key)}: \|-?\s*$", line))
    key_indent = len(lines[start]) - len(lines[start].lstrip())
    body: list[str] = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= key_indent:
            break
        body.append(line)
    return "\n".join(body)


def strip_trailing_commas(text: str) -> str:
    return re.sub(r",(\s*[\]}])", r"\1", text)


def render(data: dict[str, str], labels: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    spec, errors = render_nodeslo(data, labels)
    return spec.to_json(), [str(e).split(":")[0] for e in errors]


def colocation(data: dict[str, str], labels: dict[str, str]) -> ColocationStrategy:
    strategy, errors = render_colocation(data, labels)
    assert errors == ()
    return strategy


def check_full_template(shared_dir: Path, data: dict[str, str]) -> None:
    plain, errors = render(data, PLAIN)
    assert errors == ["system-config"]
    assert plain["systemStrategy"] == default_nodeslo_spec().to_json()["systemStrategy"]
    assert dig(plain, "resourceUsedThresholdWithBE.enable") is False
    assert dig(plain, "resourceUsedThresholdWithBE.cpuEvictBEUsageThresholdPercent") == 90
    assert dig(plain, "resourceUsedThresholdWithBE.memoryEvictLowerPercent") == 65
    assert dig(plain, "resourceQOSStrategy.beClass.memoryQOS.wmarkRatio") == 95
    assert dig(plain, "cpuBurstStrategy.policy") == "none"
    assert plain["hostApplications"] == [{"name": "nginx", "qos": "LS", "cgroupPath": {
        "base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}]
    anolis, errors = render(data, ANOLIS)
    assert errors == ["system-config"]
    assert dig(anolis, "resourceUsedThresholdWithBE.cpuEvictBEUsageThresholdPercent") == 80
    assert dig(anolis, "resourceQOSStrategy.beClass.memoryQOS.wmarkRatio") == 90
    assert dig(anolis, "resourceQOSStrategy.lsClass.memoryQOS.wmarkRatio") == 95
    assert (dig(anolis, "cpuBurstStrategy.policy"), dig(anolis, "cpuBurstStrategy.cfsQuotaBurstPercent")) == (
        "cfsQuotaBurstOnly", 400)
    assert colocation(data, PLAIN).enable is False
    assert colocation(data, PLAIN).update_time_threshold_seconds == 300
    node = colocation(data, ANOLIS)
    assert (node.update_time_threshold_seconds, node.resource_diff_threshold, node.enable) == (360, 0.2, False)
    # With the missing comma restored, the system key applies as written.
    fixed = dict(data, **{"system-config": data["system-config"].replace("}\n  \"nodeStrategies\"",
                                                                         "},\n  \"nodeStrategies\"")})
    repaired, errors = render(fixed, ANOLIS)
    assert errors == []
    assert repaired["systemStrategy"] == {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                                          "memcgReapBackGround": 0, "totalNetworkBandwidth": "0"}


def check_helm_installed_default(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    assert spec["resourceUsedThresholdWithBE"] == {"enable": False, "cpuSuppressThresholdPercent": 65,
                                                   "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70,
                                                   "cpuEvictPolicy": "evictByRealLimit"}
    strategy = colocation(data, PLAIN)
    assert (strategy.enable, strategy.metric_aggregate_duration_seconds, strategy.metric_report_interval_seconds,
            strategy.cpu_reclaim_threshold_percent, strategy.memory_reclaim_threshold_percent,
            strategy.memory_calculate_policy, strategy.degrade_time_minutes, strategy.update_time_threshold_seconds,
            strategy.resource_diff_threshold) == (False, 300, 60, 60, 65, "usage", 15, 300, 0.1)


def check_quickstart(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    expected = yaml.safe_load((shared_dir / SAMPLES / "crs/nodeslo-after-quickstart-edit.yaml").read_text())["spec"]
    # The CR omits defaulted fields ("# ..."): every field it shows must match the rendered spec.
    for section, values in expected.items():
        assert {k: spec[section][k] for k in values} == values, section
    assert dig(spec, "resourceUsedThresholdWithBE.cpuSuppressPolicy") == "cpuset"
    assert dig(spec, "resourceUsedThresholdWithBE.cpuSuppressThresholdPercent") == 60
    assert dig(spec, "resourceUsedThresholdWithBE.memoryEvictThresholdPercent") == 60


def check_burst_auto(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    assert spec["cpuBurstStrategy"] == {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                                        "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50}
    text = sample_text(shared_dir, "cpu-burst-policy-auto.yaml")
    for commented in ("cpuBurstOnly", "none"):
        line = next(row for row in text.splitlines() if f'"{commented}"' in row).strip().lstrip("#")
        alternative = configmap_data_from_yaml(line)
        assert dig(render(alternative, PLAIN)[0], "cpuBurstStrategy.policy") == commented


def check_burst_advanced(shared_dir: Path, data: dict[str, str]) -> None:
    assert "koordinator.sh/cpuBurst" in data  # the doc quirk: a pod annotation under data, not a config key
    spec, errors = render(data, PLAIN)
    assert errors == []
    assert spec["cpuBurstStrategy"] == {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                                        "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50}


def check_group_identity(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    assert (qos["lsClass"]["cpuQOS"]["enable"], qos["lsClass"]["cpuQOS"]["groupIdentity"]) == (True, 2)
    assert (qos["beClass"]["cpuQOS"]["enable"], qos["beClass"]["cpuQOS"]["groupIdentity"]) == (True, -1)
    assert qos["lsrClass"]["cpuQOS"]["enable"] is False
    assert qos["policies"]["cpuPolicy"] == "groupIdentity"


def check_core_sched(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    assert qos["policies"]["cpuPolicy"] == "coreSched"
    assert qos["lsClass"]["cpuQOS"] == {"enable": True, "groupIdentity": 2, "schedIdle": 0, "coreExpeller": True}
    assert qos["beClass"]["cpuQOS"] == {"enable": True, "groupIdentity": -1, "schedIdle": 1, "coreExpeller": False}


def check_group_identity_all_classes(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    assert [(qos[c]["cpuQOS"]["enable"], qos[c]["cpuQOS"]["groupIdentity"])
            for c in ("lsrClass", "lsClass", "beClass", "systemClass")] == [(True, 2), (True, 2), (True, -1), (True, 2)]
    assert colocation(data, PLAIN).enable is True


def check_memory_qos(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    for cls, min_adj in (("lsClass", -25), ("beClass", 50)):
        memory = qos[cls]["memoryQOS"]
        assert (memory["enable"], memory["wmarkRatio"], memory["wmarkScalePermill"], memory["wmarkMinAdj"]) == (
            True, 95, 20, min_adj)
    assert qos["lsrClass"]["memoryQOS"]["enable"] is False


def check_resctrl(shared_dir: Path, data: dict[str, str]) -> None:
    assert '"MBAPercent"' in data["resource-qos-config"]
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    assert qos["lsClass"]["resctrlQOS"] == {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 100,
                                            "mbaPercent": 100}
    assert qos["beClass"]["resctrlQOS"] == {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 30,
                                            "mbaPercent": 100}
    # The capitalised key really lands on mbaPercent: change only its value and the result follows.
    changed = {"resource-qos-config": data["resource-qos-config"].replace('"MBAPercent": 100', '"MBAPercent": 40')}
    assert dig(render(changed, PLAIN)[0], "resourceQOSStrategy.beClass.resctrlQOS.mbaPercent") == 40


def threshold_of(data: dict[str, str]) -> dict[str, Any]:
    spec, errors = render(data, PLAIN)
    assert errors == []
    result: dict[str, Any] = spec["resourceUsedThresholdWithBE"]
    return result


def check_memory_evict_usage(shared_dir: Path, data: dict[str, str]) -> None:
    threshold = threshold_of(data)
    assert (threshold["enable"], threshold["memoryEvictThresholdPercent"]) == (True, 70)
    assert "memoryEvictLowerPercent" not in threshold  # left to the strategy: threshold - 2
    assert threshold["memoryEvictThresholdPercent"] - MEMORY_EVICT_LOWER_GAP_PERCENT == 68


def check_memory_evict_allocatable(shared_dir: Path, data: dict[str, str]) -> None:
    threshold = threshold_of(data)
    assert (threshold["memoryAllocatableEvictThresholdPercent"], threshold["memoryAllocatableEvictLowerPercent"],
            threshold["allocatableEvictPriorityThreshold"]) == (110, 100, 5999)
    strategy = colocation(data, PLAIN)
    assert (strategy.batch_cpu_threshold_percent, strategy.batch_memory_threshold_percent) == (100, 100)


def check_memory_batch_zero(shared_dir: Path, data: dict[str, str]) -> None:
    assert "resource-threshold-config" not in data  # the patch leaves it as it was
    strategy = colocation(data, PLAIN)
    assert (strategy.enable, strategy.batch_cpu_threshold_percent, strategy.batch_memory_threshold_percent) == (
        True, 100, 0)


def check_cpu_batch_zero(shared_dir: Path, data: dict[str, str]) -> None:
    assert "resource-threshold-config" not in data
    strategy = colocation(data, PLAIN)
    assert (strategy.enable, strategy.batch_cpu_threshold_percent, strategy.batch_memory_threshold_percent) == (
        True, 0, 100)


def check_cpu_evict_satisfaction(shared_dir: Path, data: dict[str, str]) -> None:
    assert '"CPUEvictTimeWindowSeconds"' in data["resource-threshold-config"]
    threshold = threshold_of(data)
    assert (threshold["cpuEvictBESatisfactionLowerPercent"], threshold["cpuEvictBESatisfactionUpperPercent"],
            threshold["cpuEvictBEUsageThresholdPercent"], threshold["cpuEvictTimeWindowSeconds"]) == (60, 80, 90, 60)
    assert threshold["cpuEvictPolicy"] == "evictByRealLimit"


def check_cpu_evict_usage(shared_dir: Path, data: dict[str, str]) -> None:
    threshold = threshold_of(data)
    assert (threshold["enable"], threshold["cpuEvictThresholdPercent"], threshold["cpuEvictLowerPercent"],
            threshold["evictEnabledPriorityThreshold"]) == (True, 60, 40, 5999)


def check_cpu_evict_allocatable(shared_dir: Path, data: dict[str, str]) -> None:
    threshold = threshold_of(data)
    assert (threshold["cpuAllocatableEvictThresholdPercent"], threshold["cpuAllocatableEvictLowerPercent"],
            threshold["allocatableEvictPriorityThreshold"]) == (110, 100, 5999)


def check_terway(shared_dir: Path, data: dict[str, str]) -> None:
    text = sample_text(shared_dir, "network-qos-terway-qos.yaml")
    assert "data:" not in text and set(data) == {"resource-qos-config", "system-config"}  # no envelope
    spec, errors = render(data, PLAIN)
    assert errors == []
    qos = spec["resourceQOSStrategy"]
    assert qos["policies"]["netQOSPolicy"] == "terway-qos"
    assert qos["lsClass"]["networkQOS"] == {"enable": True, "ingressRequest": "50M", "ingressLimit": "100M",
                                            "egressRequest": "50M", "egressLimit": "100M"}
    assert qos["beClass"]["networkQOS"] == {"enable": True, "ingressRequest": "10M", "ingressLimit": "200M",
                                            "egressRequest": "10M", "egressLimit": "200M"}
    assert spec["systemStrategy"]["totalNetworkBandwidth"] == "600M"
    assert parse_quantity(spec["systemStrategy"]["totalNetworkBandwidth"]) == 600 * 10**6


def check_tc_proposal(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == ["resource-qos-config"]
    assert spec["resourceQOSStrategy"] == default_nodeslo_spec().to_json()["resourceQOSStrategy"]
    assert dig(spec, "resourceUsedThresholdWithBE.enable") is True
    assert colocation(data, PLAIN).enable is True
    # Not a trailing-comma slip only: without the commas the nested `system-config:` block is still not JSON.
    _, errors = render({"resource-qos-config": strip_trailing_commas(data["resource-qos-config"])}, PLAIN)
    assert errors == ["resource-qos-config"]


def check_host_nginx(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    assert spec["hostApplications"] == [{"name": "nginx", "qos": "LS", "cgroupPath": {
        "base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}]
    assert dig(spec, "resourceQOSStrategy.lsClass.cpuQOS.groupIdentity") == 2
    assert dig(spec, "resourceQOSStrategy.lsClass.cpuQOS.enable") is True


def check_host_yarn(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    assert spec["hostApplications"] == [{"name": "yarn-task", "priority": "koord-batch", "qos": "BE", "cgroupPath": {
        "base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}}]
    qos = spec["resourceQOSStrategy"]
    assert [(qos[c]["cpuQOS"]["enable"], qos[c]["cpuQOS"]["groupIdentity"]) for c in ("lsrClass", "lsClass", "beClass")
            ] == [(True, 2), (True, 2), (True, -1)]
    assert dig(spec, "resourceUsedThresholdWithBE.enable") is True


def check_enable_only(shared_dir: Path, data: dict[str, str]) -> None:
    spec, errors = render(data, PLAIN)
    assert errors == []
    expected = default_nodeslo_spec().to_json()
    expected["resourceUsedThresholdWithBE"]["enable"] = True
    assert spec == expected
    strategy = colocation(data, PLAIN)
    assert strategy.enable is True
    assert strategy.cpu_reclaim_threshold_percent == 60 and strategy.update_time_threshold_seconds == 300


def check_helm_chart_default(shared_dir: Path, data: dict[str, str]) -> None:
    check_enable_only(shared_dir, data)


def check_suppress_65(shared_dir: Path, data: dict[str, str]) -> None:
    threshold = threshold_of(data)
    assert (threshold["enable"], threshold["cpuSuppressThresholdPercent"], threshold["cpuSuppressPolicy"]) == (
        True, 65, "cpuset")


def check_e2e(shared_dir: Path, data: dict[str, str]) -> None:
    assert threshold_of(data)["enable"] is False
    strategy = colocation(data, PLAIN)
    assert (strategy.enable, strategy.cpu_reclaim_threshold_percent, strategy.memory_reclaim_threshold_percent,
            strategy.memory_calculate_policy) == (True, 60, 65, "usage")


def check_mid_tier(shared_dir: Path, data: dict[str, str]) -> None:
    strategy = colocation(data, PLAIN)
    assert (strategy.enable, strategy.mid_cpu_threshold_percent, strategy.mid_memory_threshold_percent) == (
        True, 60, 70)
    assert strategy.metric_report_interval_seconds == 60
    assert render(data, PLAIN)[1] == []  # `predictPolicy` is not a ColocationStrategy field: ignored like Go does


def check_cpu_normalization(shared_dir: Path, data: dict[str, str]) -> None:
    strategy, errors = render_cpu_normalization(data, PLAIN)
    assert errors == ()
    assert strategy.enable is True and strategy.ratio_model is not None
    model = strategy.ratio_model["Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"]
    assert (model.base_ratio, model.hyper_thread_enabled_ratio, model.turbo_enabled_ratio,
            model.hyper_thread_turbo_enabled_ratio) == (1.29, 0.82, 1.52, 1.0)
    assert set(strategy.ratio_model) == {"Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz",
                                         "Intel Xeon Platinum 8369B CPU @ 2.90GHz"}
    assert render(data, PLAIN)[1] == []


def check_api_doc_example(shared_dir: Path, data: dict[str, str]) -> None:
    alios = {"kubernetes.io/kernel": "alios"}
    spec, errors = render(data, alios)
    assert errors == ["resource-qos-config", "system-config", "host-application-config"]
    assert dig(spec, "resourceUsedThresholdWithBE.cpuEvictBEUsageThresholdPercent") == 80
    assert (dig(spec, "cpuBurstStrategy.policy"), dig(spec, "cpuBurstStrategy.cfsQuotaBurstPercent")) == (
        "cfsQuotaBurstOnly", 400)
    assert "hostApplications" not in spec
    node = colocation(data, alios)
    assert (node.update_time_threshold_seconds, node.resource_diff_threshold) == (360, 0.2)
    assert node.metric_memory_collect_policy == "usageWithoutPageCache"
    assert node.metric_aggregate_policy is not None and node.metric_aggregate_policy.durations == ("5m", "10m", "15m")
    normalization, norm_errors = render_cpu_normalization(data, {"AAA": "BBB"})
    assert norm_errors == () and normalization.enable is True
    assert render_cpu_normalization(data, PLAIN)[0].enable is False
    assert isinstance(normalization, CPUNormalizationStrategy)
    # The blkio and host-application content, once the trailing commas are removed.
    repaired = {key: strip_trailing_commas(data[key]) for key in ("resource-qos-config", "host-application-config")}
    fixed, errors = render(repaired, {"node-pool": "colocation"})
    assert errors == []
    blocks = dig(fixed, "resourceQOSStrategy.beClass.blkioQOS")
    assert blocks == {"enable": True, "blocks": [
        {"name": "ackdistro-pool", "type": "volumegroup", "ioCfg": {"ioWeightPercent": 60}},
        {"name": "/dev/sdb", "type": "device",
         "ioCfg": {"readIOPS": 20480, "writeIOPS": 10240, "readBPS": 102400000, "writeBPS": 204800004}}]}
    assert dig(fixed, "resourceQOSStrategy.cgroupRoot.blkioQOS.blocks")[0]["ioCfg"] == {
        "readLatency": 3000, "writeLatency": 3000, "readLatencyPercent": 95, "writeLatencyPercent": 95}
    assert [(a["name"], a["priority"], a["qos"]) for a in fixed["hostApplications"]] == [("nginx", "koord-prod", "LS")]


VALID_SAMPLES: dict[str, Callable[[Path, dict[str, str]], None]] = {
    "full-template-all-keys.yaml": check_full_template,
    "helm-installed-default-kubectl-get.yaml": check_helm_installed_default,
    "quickstart-edit-suppress-cpuset-60.yaml": check_quickstart,
    "cpu-burst-policy-auto.yaml": check_burst_auto,
    "cpu-burst-advanced-fragment.yaml": check_burst_advanced,
    "cpu-qos-group-identity.yaml": check_group_identity,
    "cpu-qos-core-sched.yaml": check_core_sched,
    "cpu-qos-group-identity-lsr-ls-be-system.yaml": check_group_identity_all_classes,
    "memory-qos-enable-ls-be.yaml": check_memory_qos,
    "resctrl-llc-mba.yaml": check_resctrl,
    "memory-evict-usage-70.yaml": check_memory_evict_usage,
    "memory-evict-allocatable.yaml": check_memory_evict_allocatable,
    "memory-evict-allocatable-batch-memory-zero.yaml": check_memory_batch_zero,
    "cpu-evict-be-satisfaction.yaml": check_cpu_evict_satisfaction,
    "cpu-evict-usage.yaml": check_cpu_evict_usage,
    "cpu-evict-allocatable.yaml": check_cpu_evict_allocatable,
    "cpu-evict-allocatable-batch-cpu-zero.yaml": check_cpu_batch_zero,
    "network-qos-terway-qos.yaml": check_terway,
    "network-qos-tc-proposal.yaml": check_tc_proposal,
    "host-application-nginx-ls.yaml": check_host_nginx,
    "host-application-yarn-be.yaml": check_host_yarn,
    "cpu-normalization.yaml": check_cpu_normalization,
    "colocation-mid-tier-node-prediction.yaml": check_mid_tier,
    "api-doc-example-blkio-hostapp-cpunormalization.yaml": check_api_doc_example,
    "e2e-colocation-usage-policy.yaml": check_e2e,
    "kustomize-default.yaml": check_enable_only,
}
# Helm templates: not YAML; the JSON of these keys is cut out by indentation, as the INDEX describes.
TEMPLATE_SAMPLES: dict[str, tuple[tuple[str, ...], Callable[[Path, dict[str, str]], None]]] = {
    "cpu-suppress-threshold-65-helm-template.yaml": (("resource-threshold-config",), check_suppress_65),
    "helm-chart-default-v1.8.0.yaml": (("colocation-config", "resource-threshold-config"), check_helm_chart_default),
}


def test_every_sample_is_covered(shared_dir: Path) -> None:
    names = {p.name for p in (shared_dir / SAMPLES / "slo-configs").glob("*.yaml")}
    assert names == set(VALID_SAMPLES) | set(TEMPLATE_SAMPLES)


@pytest.mark.parametrize("name", sorted(VALID_SAMPLES))
def test_documented_configmap(shared_dir: Path, name: str) -> None:
    data = configmap_data_from_yaml(sample_text(shared_dir, name))
    VALID_SAMPLES[name](shared_dir, data)


@pytest.mark.parametrize("name", sorted(TEMPLATE_SAMPLES))
def test_documented_helm_template(shared_dir: Path, name: str) -> None:
    text = sample_text(shared_dir, name)
    with pytest.raises(ParseError, match=r"^not valid YAML: "):
        configmap_data_from_yaml(text)
    keys, check = TEMPLATE_SAMPLES[name]
    data = {key: block_scalar(text, key) for key in keys}
    check(shared_dir, data)


def test_rendered_spec_is_a_valid_nodeslo(shared_dir: Path) -> None:
    data = configmap_data_from_yaml(sample_text(shared_dir, "full-template-all-keys.yaml"))
    spec, _ = render_nodeslo(data, ANOLIS)
    assert NodeSLOSpec.from_json(spec.to_json()) == spec
    assert spec.with_defaults() == spec


# ------------------------------------------------------------------------------------------ last good per key


def test_keep_last_good_keeps_a_refused_keys_good_text_and_applies_the_others() -> None:
    good_threshold = '{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 60}}'
    bad_threshold = '{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 160}}'
    burst = '{"clusterStrategy": {"policy": "auto"}}'
    good, errors = keep_last_good({}, {"resource-threshold-config": good_threshold})
    assert (good, errors) == ({"resource-threshold-config": good_threshold}, {})
    good, errors = keep_last_good(good, {"resource-threshold-config": bad_threshold, "cpu-burst-config": burst,
                                         "system-config": "{not json"})
    # The refused key keeps its last good text; one never good (system-config) is left to its defaults.
    assert good == {"resource-threshold-config": good_threshold, "cpu-burst-config": burst}
    assert set(errors) == {"resource-threshold-config", "system-config"}
    assert "cpuSuppressThresholdPercent" in errors["resource-threshold-config"]
    assert key_errors({"cpu-burst-config": burst, "colocation-config": 7}) == {
        "colocation-config": "colocation-config: must be a string, got int"}
