"""NodeSLO in force: shapes of the local file, last-good semantics, errors naming the field path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from koordlet.errors import ConfigError, ParseError
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder, spec_json_from_text


def _threshold(holder: NodeSLOHolder) -> tuple[bool | None, int | None, str | None]:
    t = holder.current().spec.resource_used_threshold_with_be
    assert t is not None
    return t.enable, t.cpu_suppress_threshold_percent, t.cpu_suppress_policy


def test_defaults_until_offered() -> None:
    holder = NodeSLOHolder()
    assert _threshold(holder) == (False, 65, "cpuset")
    assert holder.current().origin == "defaults"
    assert holder.current().generation == 0


@pytest.mark.parametrize("bad, path", [
    ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 160}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent"),
    ({"resourceUsedThresholdWithBE": {"memoryEvictThresholdPercent": -1}},
     "spec.resourceUsedThresholdWithBE.memoryEvictThresholdPercent"),
    ({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": "sometimes"}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressPolicy"),
    ({"cpuBurstStrategy": {"sharePoolThresholdPercent": 101}}, "spec.cpuBurstStrategy.sharePoolThresholdPercent"),
    ({"resourceQOSStrategy": {"beClass": {"memoryQOS": {"throttlingPercent": 200}}}},
     "spec.resourceQOSStrategy.beClass.memoryQOS.throttlingPercent"),
])
def test_invalid_spec_rejected_with_field_path_last_good_stays(bad: dict[str, object], path: str) -> None:
    holder = NodeSLOHolder()
    good = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 60}}
    assert holder.offer_spec(good, "file:a")
    before = holder.current()
    assert not holder.offer_spec(bad, "file:a")
    after = holder.current()
    assert after.spec == before.spec and after.generation == before.generation
    assert after.rejected is not None and path in after.rejected
    assert _threshold(holder) == (True, 60, "cpuset")
    # The next good offer clears the rejection.
    assert holder.offer_spec(good, "file:a")
    assert holder.current().rejected is None


def test_listeners_hear_only_changes() -> None:
    holder = NodeSLOHolder()
    seen: list[int] = []
    holder.subscribe(lambda state: seen.append(state.generation))
    spec = {"resourceUsedThresholdWithBE": {"enable": True}}
    holder.offer_spec(spec, "x")
    holder.offer_spec(spec, "x")
    holder.offer_spec({"resourceUsedThresholdWithBE": {"enable": False}}, "x")
    assert seen == [1, 2]


def test_shapes_nodeslo_object_bare_spec_and_configmap() -> None:
    obj = "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata: {name: n}\nspec:\n" \
          "  resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 55}\n"
    assert spec_json_from_text(obj, {}, "f")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 55
    bare = json.dumps({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 80}})
    assert spec_json_from_text(bare, {}, "f")["resourceUsedThresholdWithBE"]["memoryEvictThresholdPercent"] == 80
    configmap = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slo-controller-config}\ndata:\n"
                 "  resource-threshold-config: |\n"
                 "    {\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 50},\n"
                 "     \"nodeStrategies\": [{\"nodeSelector\": {\"matchLabels\": {\"pool\": \"batch\"}},\n"
                 "                          \"cpuSuppressThresholdPercent\": 40}]}\n")
    assert spec_json_from_text(configmap, {}, "f")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 50
    assert spec_json_from_text(configmap, {"pool": "batch"}, "f")[
        "resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 40


@pytest.mark.parametrize("text, error, fragment", [
    ("a: [", ParseError, "not valid YAML"),
    ("kind: Deployment\nspec: {}\n", ConfigError, "neither NodeSLO nor ConfigMap"),
    ("- 1\n- 2\n", ParseError, "expected one mapping"),
    ("kind: NodeSLO\nspec: 3\n", ConfigError, "spec must be an object"),
    ("data:\n  resource-threshold-config: '{\"clusterStrategy\": {\"cpuSuppressThresholdPercent\": 300}}'\n",
     ConfigError, "resource-threshold-config"),
])
def test_bad_files_name_what_was_wrong(text: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        spec_json_from_text(text, {}, "nodeslo.yaml")


def test_file_source_reloads_on_change_and_keeps_last_good(tmp_path: Path) -> None:
    path = tmp_path / "nodeslo.yaml"
    holder = NodeSLOHolder()
    source = FileNodeSLOSource(str(path), holder)
    assert source.poll()  # missing: defaults, said once
    assert not source.poll()
    path.write_text("resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 60}\n")
    assert source.poll()
    assert _threshold(holder) == (True, 60, "cpuset")
    assert not source.poll()  # unchanged: not re-read
    path.write_text("resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 600}\n")
    os.utime(path, (1, 1))
    assert not source.poll()
    state = holder.current()
    assert _threshold(holder) == (True, 60, "cpuset")
    assert state.rejected is not None
    assert "cpuSuppressThresholdPercent" in state.rejected and str(path) in state.rejected
    path.write_text("resourceUsedThresholdWithBE: {enable: true, cpuSuppressPolicy: cfsQuota}\n")
    assert source.poll()
    assert _threshold(holder) == (True, 65, "cfsQuota")


def test_file_source_garbage_bytes(tmp_path: Path) -> None:
    path = tmp_path / "nodeslo.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    holder = NodeSLOHolder()
    assert not FileNodeSLOSource(str(path), holder).poll()
    assert holder.current().rejected is not None and "cannot read" in holder.current().rejected


def _samples(shared_dir: Path, sub: str) -> list[Path]:
    paths = sorted((shared_dir / "reference" / "koordinator-samples" / sub).glob("*.yaml"))
    assert paths, f"no samples under {sub}"
    return paths


def test_shared_nodeslo_crs_load(shared_dir: Path) -> None:
    for path in _samples(shared_dir, "crs"):
        if "nodeslo" not in path.name:
            continue
        holder = NodeSLOHolder()
        source = FileNodeSLOSource(str(path), holder)
        assert source.poll(), (path, holder.current().rejected)


def test_shared_configmaps_load_and_name_the_bad_key(shared_dir: Path) -> None:
    """Every slo-controller-config sample is accepted.  The three samples below carry one key Koordinator's own
    controller would refuse too; that key is refused by name (keeping its last good text) while the other
    keys of the sample apply.  The Helm templates are not YAML until rendered, so they are refused whole."""
    bad_keys = {"full-template-all-keys.yaml": "system-config",
                "network-qos-tc-proposal.yaml": "resource-qos-config",
                "api-doc-example-blkio-hostapp-cpunormalization.yaml": "config"}
    template = {"cpu-suppress-threshold-65-helm-template.yaml", "helm-chart-default-v1.8.0.yaml"}
    for path in _samples(shared_dir, "slo-configs"):
        holder = NodeSLOHolder()
        accepted = FileNodeSLOSource(str(path), holder).poll()
        if path.name in bad_keys:
            assert accepted and bad_keys[path.name] in (holder.current().rejected or ""), path.name
        elif path.name in template:
            assert not accepted and "not valid YAML" in (holder.current().rejected or ""), path.name
        else:
            assert accepted, (path.name, holder.current().rejected)


def test_file_source_configmap_keeps_the_last_good_text_of_a_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "slo-controller-config.yaml"
    holder = NodeSLOHolder()
    source = FileNodeSLOSource(str(path), holder)
    good = '{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 60}}'
    path.write_text(f"data:\n  resource-threshold-config: '{good}'\n")
    assert source.poll()
    assert _threshold(holder) == (True, 60, "cpuset")
    bad = '{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 160}}'
    burst = '{"clusterStrategy": {"policy": "auto"}}'
    path.write_text(f"data:\n  resource-threshold-config: '{bad}'\n  cpu-burst-config: '{burst}'\n")
    os.utime(path, (2, 2))
    assert source.poll()
    state = holder.current()
    assert _threshold(holder) == (True, 60, "cpuset"), "the bad key keeps its last good text"
    assert state.spec.cpu_burst_strategy is not None and state.spec.cpu_burst_strategy.policy == "auto"
    assert state.rejected is not None and "resource-threshold-config" in state.rejected
    assert "cpuSuppressThresholdPercent" in state.rejected
