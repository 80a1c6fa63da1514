"""DeschedulerConfiguration and LowNodeLoadArgs loading: upstream defaults, plugin-set merging, node-pool
inheritance, and a ConfigError naming the field for each kind of bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.companion.descheduler.config import load_config, load_config_file, merge_plugin_set
from koordlet.companion.descheduler.lownodeload_args import DEFAULT_POOL_NAME, AnomalyCondition, parse_args
from koordlet.errors import ConfigError

SEED = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: 60s
profiles:
- name: koord-descheduler
  plugins:
    balance:
      enabled:
      - name: LowNodeLoad
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds:
        cpu: 20
        memory: 30
      highThresholds:
        cpu: 50
        memory: 60
      evictableNamespaces:
        exclude:
        - "kube-system"
        - "koordinator-system"
"""


def with_changes(**changes: Any) -> str:
    doc = yaml.safe_load(SEED)
    doc.update(changes)
    return yaml.safe_dump(doc)


def test_seed_configuration_with_upstream_defaults() -> None:
    config = load_config(SEED)
    assert config.interval_seconds == 60.0
    assert config.dry_run is False
    assert config.limits.per_node is None and config.limits.total is None
    (profile,) = config.profiles
    assert profile.name == "koord-descheduler"
    # getDefaultPlugins: MigrationController evicts and filters unless replaced.
    assert profile.plugins == {"deschedule": (), "balance": ("LowNodeLoad",), "evict": ("MigrationController",),
                               "filter": ("MigrationController",)}
    # SetDefaults_MigrationControllerArgs: at most two migrations per node.
    assert profile.evictor_args.max_per_node == 2
    assert profile.evictor_args.evict_local_storage_pods is False

    args = parse_args(profile.plugin_args["LowNodeLoad"])
    assert args.node_fit is True
    assert args.node_metric_expiration_seconds == 180
    assert args.detector_cache_timeout_seconds == 300.0
    assert args.evictable_namespaces is not None and args.evictable_namespaces.exclude == (
        "kube-system", "koordinator-system")
    (pool,) = args.node_pools
    assert pool.name == DEFAULT_POOL_NAME
    assert pool.low_thresholds == {"cpu": 20.0, "memory": 30.0}
    assert pool.high_thresholds == {"cpu": 50.0, "memory": 60.0}
    assert pool.resource_weights == {"cpu": 1, "memory": 1}
    assert pool.anomaly_condition == AnomalyCondition(60.0, 5, 3)


def test_configmap_form_and_file(tmp_path: Path) -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "koord-descheduler-config"},
                 "data": {"koord-descheduler-config": SEED}}
    assert load_config(yaml.safe_dump(configmap)).profiles[0].balance == ("LowNodeLoad",)
    path = tmp_path / "config.yaml"
    path.write_text(SEED)
    assert load_config_file(path).interval_seconds == 60.0
    with pytest.raises(ConfigError, match=r"config\.yaml"):
        load_config_file(tmp_path / "missing" / "config.yaml")


def test_no_profiles_gets_the_default_profile_and_zero_interval() -> None:
    config = load_config("apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n")
    assert config.interval_seconds == 0.0
    assert [p.name for p in config.profiles] == ["koord-descheduler"]
    assert config.profiles[0].balance == ()


def test_limits_node_selector_and_dry_run() -> None:
    config = load_config(with_changes(dryRun=True, maxNoOfPodsToEvictPerNode=3, maxNoOfPodsToEvictPerNamespace=4,
                                      maxNoOfPodsToEvictTotal=5, nodeSelector={"matchLabels": {"pool": "a"}}))
    assert config.dry_run is True
    assert (config.limits.per_node, config.limits.per_namespace, config.limits.total) == (3, 4, 5)
    assert config.node_selector is not None and config.node_selector.matches({"pool": "a"})
    assert not config.node_selector.matches({"pool": "b"})


def test_replacing_the_evictor_with_default_evictor() -> None:
    doc = yaml.safe_load(SEED)
    plugins = doc["profiles"][0]["plugins"]
    plugins["evict"] = {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]}
    plugins["filter"] = {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]}
    doc["profiles"][0]["pluginConfig"].append({"name": "DefaultEvictor", "args": {
        "apiVersion": "descheduler/v1alpha2", "kind": "DefaultEvictorArgs", "evictLocalStoragePods": True,
        "ignorePvcPods": True, "priorityThreshold": {"value": 10000}, "labelSelector": {"matchLabels": {"a": "b"}},
    }})
    profile = load_config(yaml.safe_dump(doc)).profiles[0]
    assert profile.plugins["evict"] == ("DefaultEvictor",) and profile.plugins["filter"] == ("DefaultEvictor",)
    args = profile.evictor_args
    assert args.evict_local_storage_pods and args.ignore_pvc_pods and args.priority_threshold == 10000
    assert args.max_per_node is None  # DefaultEvictor has no migration limits
    assert args.label_selector is not None and args.label_selector.matches({"a": "b"})


@pytest.mark.parametrize(("defaults", "enabled", "disabled", "merged"), [
    (("A",), (), (), ("A",)),
    (("A",), ("B",), (), ("A", "B")),
    (("A",), ("B",), ("A",), ("B",)),
    (("A", "C"), ("C", "B"), (), ("A", "C", "B")),
    (("A",), ("B",), ("*",), ("B",)),
])
def test_merge_plugin_set(defaults: tuple[str, ...], enabled: tuple[str, ...], disabled: tuple[str, ...],
                          merged: tuple[str, ...]) -> None:
    assert merge_plugin_set(defaults, enabled, disabled) == merged


def test_node_pools_inherit_top_level_defaults() -> None:
    args = parse_args({
        "lowThresholds": {"cpu": 20, "memory": 30}, "highThresholds": {"cpu": 50, "memory": 60},
        "resourceWeights": {"cpu": 2},
        "anomalyCondition": {"consecutiveAbnormalities": 2, "timeout": "2m"},
        "nodePools": [
            {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "highThresholds": {"cpu": 70}},
            {"name": "batch", "lowThresholds": {"cpu": 10}, "resourceWeights": {"memory": 3},
             "anomalyCondition": {"consecutiveNormalities": 7}},
        ],
    })
    default, gpu, batch = args.node_pools
    assert default.name == DEFAULT_POOL_NAME
    assert default.resource_weights == {"cpu": 2, "memory": 1}
    assert default.anomaly_condition == AnomalyCondition(120.0, 2, 3)
    assert gpu.high_thresholds == {"cpu": 70.0}
    assert gpu.low_thresholds == {"cpu": 20.0, "memory": 30.0}
    assert gpu.resource_weights == {"cpu": 2, "memory": 1}
    assert gpu.anomaly_condition == default.anomaly_condition
    assert gpu.node_selector is not None and gpu.node_selector.matches({"pool": "gpu"})
    assert batch.high_thresholds == {"cpu": 50.0, "memory": 60.0}
    assert batch.low_thresholds == {"cpu": 10.0}
    # A pool's own weights are taken as they are (SetDefaults_LowNodeLoadNodePools does not default them).
    assert batch.resource_weights == {"memory": 3}
    assert batch.anomaly_condition == AnomalyCondition(120.0, 2, 7)


@pytest.mark.parametrize(("text", "message"), [
    ("kind: DeschedulerConfiguration\n", "expected apiVersion descheduler/v1alpha2"),
    ("apiVersion: descheduler/v1alpha1\nkind: DeschedulerConfiguration\n", "got 'descheduler/v1alpha1'"),
    ("{", "not YAML or JSON"),
    (with_changes(deschedulingInterval="soon"), "deschedulingInterval"),
    (with_changes(deschedulingInterval="-1m"), "deschedulingInterval: must not be negative"),
    (with_changes(dryRun="yes"), "dryRun: expected true or false"),
    (with_changes(maxNoOfPodsToEvictPerNode=-1), "maxNoOfPodsToEvictPerNode: expected a non-negative integer"),
    (with_changes(profiles=[{"plugins": {"balance": {"enabled": [{"name": "RemoveDuplicates"}]}}}]),
     r"profiles\[0\].plugins.balance.enabled\[0\].name: unknown balance plugin 'RemoveDuplicates'"),
    (with_changes(profiles=[{"plugins": {"evict": {"enabled": [{"name": "Nope"}]}}}]),
     "unknown evict plugin 'Nope'"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "Mystery", "args": {}}]}]),
     r"pluginConfig\[0\].name: unknown plugin 'Mystery'"),
    (with_changes(profiles=[{"name": "a"}, {"name": "a"}]), "duplicate profile name 'a'"),
    (with_changes(profiles=[{}, {}]), "every profile needs a name"),
    (with_changes(profiles=[{"plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]},
                                         "evict": {"disabled": [{"name": "*"}]}}}]),
     "balance plugins are enabled but no evict plugin is"),
    (with_changes(profiles=[{"plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                             "pluginConfig": [{"name": "LowNodeLoad", "args": {
                                 "lowThresholds": {"cpu": 60}, "highThresholds": {"cpu": 50}}}]}]),
     r"pluginConfig\[0\].args.lowThresholds.cpu: low percentage 60 must be less than or equal"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "LowNodeLoad", "args": {
        "evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}}]}]),
     "evictableNamespaces: only one of include and exclude"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "LowNodeLoad", "args": {
        "highThresholds": {"cpu": -1}}}]}]), "highThresholds.cpu: percentage must be greater than or equal to 0"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "LowNodeLoad", "args": {
        "nodePools": [{"name": "p", "prodLowThresholds": {"cpu": 40}, "prodHighThresholds": {"cpu": 30}}]}}]}]),
     r"nodePools\[0\].prodLowThresholds.cpu"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "LowNodeLoad", "args": {
        "podSelectors": [{"name": "x", "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]}}]}]),
     r"podSelectors\[0\].selector.matchExpressions\[0\].values"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "LowNodeLoad", "args": {
        "nodeMetricExpirationSeconds": 0}}]}]), "nodeMetricExpirationSeconds: expected an integer >= 1"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "MigrationController", "args": {
        "maxMigratingPerNode": "two"}}]}]), "maxMigratingPerNode: expected a non-negative integer"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "MigrationController", "args": {
        "priorityThreshold": {"value": 1, "name": "x"}}}]}]), "priorityThreshold: only one of value and name"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "MigrationController", "args": {
        "ignorePodsWithoutPDB": True}}]}]), "ignorePodsWithoutPDB: not supported"),
    (with_changes(profiles=[{"pluginConfig": [{"name": "MigrationController", "args": {
        "podProtections": {"extraEnabled": ["PodsWithResourceClaims"]}}}]}]),
     r"podProtections.extraEnabled\[0\]: unsupported protection 'PodsWithResourceClaims'"),
])
def test_bad_configuration_names_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(text)
