"""Fuzzing of the NodeSLO and ``slo-controller-config`` decoders.

- the NodeSLO spec a koordlet receives from the companion (``WatchNodeSLO``'s ``spec_json`` and
  ``collect_policy_json``, through ``CompanionNodeSLOSource.apply`` into the real ``NodeSLOHolder``; the report
  reply's collect policy through ``CompanionNodeMetricSink.offer_policy``);
- ``NodeSLOSpec.from_json`` (koordlet/apis/nodeslo), ``NodeMetricCollectPolicy.from_spec`` and
  ``NodeMetric.from_json`` (koordlet/apis/nodemetric/);
- the ConfigMap keys the companion renders per node (koordlet/apis/sloconfig.py, the companion's
  ``SLOController``), the resource amplification annotation computed from one, and the ConfigMap YAML of
  ``--config-file``.

Structured input is derived from the dataclasses' own field specs, so every real field is exercised with
plausible, out-of-range and wrongly typed values.  Contracts: decoders raise ``ConfigError`` (``ParseError``
for YAML and NodeMetric objects); the holder, the sources and the renderers never raise at all (a bad value is
rejected and the last good one stays).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis import sloconfig
from koordlet.apis.nodemetric import NodeMetric, NodeMetricCollectPolicy
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.fields import JsonObject
from koordlet.apis.proto.companion.v1 import companion_pb2
from koordlet.companion.amplification import AmplificationRefused, node_annotation
from koordlet.companion.slocontroller import SLOController
from koordlet.errors import ConfigError, ParseError
from koordlet.statesinformer.companion import CompanionNodeMetricSink
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.security.fuzzkit import (
    decode,
    duration_text,
    fuzz_settings,
    json_bytes,
    junk_json,
    raw_bytes,
    scalars,
    shaped,
    strategy_for,
)

nodeslo_spec = strategy_for(NodeSLOSpec)


# ------------------------------------------------------------------------------------ the koordlet side


class _Client:
    target = "companion.test:9317"


@fuzz_settings(200)
@given(spec=st.one_of(nodeslo_spec, nodeslo_spec, junk_json()))
def test_nodeslo_spec_from_json(spec: Any) -> None:
    decode("nodeslo NodeSLOSpec.from_json", lambda: NodeSLOSpec.from_json(spec, "spec").with_defaults(),
           (ConfigError,))


@fuzz_settings(200)
@given(spec_json=st.one_of(json_bytes(nodeslo_spec), raw_bytes), policy_json=st.one_of(
    st.just(b""), json_bytes(junk_json()), raw_bytes))
@example(spec_json=b"[" * 3000, policy_json=b"")
@example(spec_json=b"{}", policy_json=b"[" * 3000)
def test_companion_nodeslo_update(tmp_path: Path, spec_json: bytes, policy_json: bytes) -> None:
    """A ``NodeSLOUpdate`` from the companion through the koordlet's source into the holder: accepted or
    rejected (the last good spec stays), never an exception."""
    holder = NodeSLOHolder()
    policies: list[bytes] = []
    source = CompanionNodeSLOSource(_Client(), holder, tmp_path / "nodeslo.json",  # type: ignore[arg-type]
                                    on_policy=policies.append)
    update = companion_pb2.NodeSLOUpdate(generation=1, spec_json=spec_json, origin="fuzz", instance="i",
                                         collect_policy_json=policy_json)
    decode("koordlet CompanionNodeSLOSource.apply(NodeSLOUpdate)", lambda: source.apply(update), ())
    assert holder.current().spec is not None


collect_policy = shaped({
    "aggregateDurationSeconds": st.one_of(st.integers(-5, 10**6), st.floats()),
    "reportIntervalSeconds": st.one_of(st.integers(-5, 10**6), st.floats()),
    "nodeAggregatePolicy": shaped({"durations": st.lists(duration_text, max_size=4)}),
    "nodeMemoryCollectPolicy": st.sampled_from(["usageWithoutPageCache", "usageWithHotPageCache",
                                                "usageWithPageCache", "x"]),
})


@fuzz_settings(250)
@given(policy=st.one_of(collect_policy, junk_json()))
def test_collect_policy_from_spec(policy: Any) -> None:
    decode("nodemetric NodeMetricCollectPolicy.from_spec",
           lambda: NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": policy}), (ConfigError,))


@fuzz_settings(200)
@given(raw=st.one_of(json_bytes(collect_policy), raw_bytes))
@example(raw=b"[" * 3000)
def test_report_reply_collect_policy(raw: bytes) -> None:
    """The collect policy in a ReportNodeMetric reply, through the koordlet's sink."""
    sink = CompanionNodeMetricSink(SimpleNamespace(target="t"), on_policy=lambda policy: None)  # type: ignore[arg-type]
    decode("koordlet CompanionNodeMetricSink.offer_policy", lambda: sink.offer_policy(raw), ())


node_metric_object = shaped({
    "apiVersion": st.sampled_from(["slo.koordinator.sh/v1alpha1", "v1"]), "kind": st.sampled_from(["NodeMetric", "x"]),
    "metadata": shaped({"name": st.text(max_size=10), "resourceVersion": st.text(max_size=5)}),
    "spec": shaped({"metricCollectPolicy": collect_policy}),
    "status": junk_json(8),
}, junk_rate=6)


@fuzz_settings(200)
@given(obj=st.one_of(node_metric_object, junk_json()))
def test_node_metric_object(obj: Any) -> None:
    """A NodeMetric CR (the companion's extender reads them from the apiserver)."""
    decode("nodemetric NodeMetric.from_json", lambda: NodeMetric.from_json(obj), (ParseError, ConfigError))


# ------------------------------------------------------------------------------------ the ConfigMap side

_KEYS: dict[str, type[JsonObject]] = {
    sloconfig.RESOURCE_THRESHOLD_CONFIG_KEY: sloconfig.ResourceThresholdStrategy,
    sloconfig.RESOURCE_QOS_CONFIG_KEY: sloconfig.ResourceQOSStrategy,
    sloconfig.CPU_BURST_CONFIG_KEY: sloconfig.CPUBurstStrategy,
    sloconfig.SYSTEM_CONFIG_KEY: sloconfig.SystemStrategy,
    sloconfig.HOST_APPLICATION_CONFIG_KEY: sloconfig.HostApplicationCfg,
    sloconfig.COLOCATION_CONFIG_KEY: sloconfig.ColocationStrategy,
    sloconfig.CPU_NORMALIZATION_CONFIG_KEY: sloconfig.CPUNormalizationStrategy,
    sloconfig.RESOURCE_AMPLIFICATION_CONFIG_KEY: sloconfig.ResourceAmplificationStrategy,
}
_CLUSTER_KEYED = {sloconfig.RESOURCE_THRESHOLD_CONFIG_KEY, sloconfig.RESOURCE_QOS_CONFIG_KEY,
                  sloconfig.CPU_BURST_CONFIG_KEY, sloconfig.SYSTEM_CONFIG_KEY}

selector = shaped({
    "matchLabels": st.dictionaries(st.sampled_from(["pool", "zone", ""]), st.sampled_from(["a", "b", ""]), max_size=2),
    "matchExpressions": st.lists(shaped({"key": st.sampled_from(["pool", "", "zone"]),
                                         "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "x"]),
                                         "values": st.lists(st.sampled_from(["a", "b", ""]), max_size=2)}),
                                 max_size=2),
})


def _key_text(key: str) -> st.SearchStrategy[Any]:
    body = strategy_for(_KEYS[key])
    node_entry = st.builds(lambda strategy, sel, name: {**strategy, "nodeSelector": sel, "name": name},
                           body, selector, st.text(max_size=5))
    if key in _CLUSTER_KEYED:
        document = shaped({"clusterStrategy": body, "nodeStrategies": st.lists(node_entry, max_size=3)})
    elif key == sloconfig.HOST_APPLICATION_CONFIG_KEY:
        document = st.builds(lambda b, nodes: {**b, "nodeConfigs": nodes}, body, st.lists(node_entry, max_size=2))
    else:
        document = st.builds(lambda b, nodes: {**b, "nodeConfigs": nodes}, body, st.lists(node_entry, max_size=2))
    return st.one_of(st.builds(json.dumps, document), st.builds(json.dumps, junk_json(6)),
                     st.sampled_from(["", "{", "NaN", "[" * 3000, "{\"clusterStrategy\": " + "[" * 3000]),
                     st.text(max_size=20), scalars)


configmap_data = st.fixed_dictionaries({}, optional={key: _key_text(key) for key in _KEYS})
node_labels = st.dictionaries(st.sampled_from(["pool", "zone"]), st.sampled_from(["a", "b"]), max_size=2)


@fuzz_settings(200)
@given(data=configmap_data, labels=node_labels)
@example(data={sloconfig.RESOURCE_QOS_CONFIG_KEY: "[" * 3000}, labels={})
def test_render_configmap(data: dict[str, Any], labels: dict[str, str]) -> None:
    """Each key renders or falls back to its defaults with an error; the renderers never raise."""
    def render() -> None:
        sloconfig.render_nodeslo(data, labels)
        sloconfig.render_colocation(data, labels)
        sloconfig.render_cpu_normalization(data, labels)
        strategy, _ = sloconfig.render_resource_amplification(data, labels)
        for normalization in (None, "1.50", "5.00", "junk", "0"):
            with contextlib.suppress(AmplificationRefused):  # a refusal is the calculation's answer, not a crash
                node_annotation(strategy, normalization)

    decode("sloconfig render_nodeslo/colocation/cpu-normalization/amplification", render, ())


@fuzz_settings(150)
@given(data=st.one_of(configmap_data, st.dictionaries(st.text(max_size=10), scalars, max_size=3)), labels=node_labels)
def test_slo_controller_configmap(data: dict[str, Any], labels: dict[str, str]) -> None:
    """The companion's controller: a ConfigMap change renders every node; errors are reported, not raised."""
    def apply() -> None:
        controller = SLOController()
        controller.set_node("node-a", labels)
        controller.set_configmap(data, "configmap@1")
        controller.spec_for("node-a")
        controller.colocation_for("node-a")
        controller.cluster_colocation_enabled()
        controller.amplification_for("node-a")

    decode("companion SLOController.set_configmap", apply, ())


yaml_text = st.one_of(
    st.text(max_size=200),
    st.builds(lambda data: "data:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in data.items()),
              st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3)),
    st.sampled_from([
        "a: &a [1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
        "data: !!python/object/apply:os.system ['true']\n", "--- a\n--- b\n", "data: [1, 2]\n", "[" * 3000,
        "data:\n  k: !!binary aGVsbG8=\n", "? [a, b]\n: c\n", "data: {? [a]: x}\n",
    ]),
)


@fuzz_settings(200)
@given(text=yaml_text)
def test_configmap_yaml(text: str) -> None:
    decode("sloconfig configmap_data_from_yaml", lambda: sloconfig.configmap_data_from_yaml(text), (ParseError,))
