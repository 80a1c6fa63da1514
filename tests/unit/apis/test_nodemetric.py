"""NodeMetric types against Koordinator's JSON: quantities, Go durations, the status shape, the collect
policy, and the published samples (../shared/reference/koordinator-samples/crs/nodemetric-*.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    AggregatedUsage,
    AggregationType,
    HostApplicationMetricInfo,
    MemoryCollectPolicy,
    NodeMetric,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
    format_time,
    parse_time,
)
from koordlet.apis.quantity import format_cpu_milli, format_memory_bytes, int_value, milli_value
from koordlet.companion import metricdecode
from koordlet.companion.metricdecode import decode_status, fast_status
from koordlet.errors import ConfigError, ParseError

# ------------------------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("milli", "text"),
    [(138, "138m"), (2000, "2"), (1500, "1500m"), (1100, "1100m"), (12000, "12"), (120000, "120"),
     (1_000_000, "1k"), (0, "0"), (1, "1m"), (300, "300m")],
)
def test_cpu_is_canonical_decimal_si(milli: int, text: str) -> None:
    # Kubernetes writes NewMilliQuantity(m, DecimalSI) this way; "1k" for 1000 cores is its quirk, kept.
    assert format_cpu_milli(milli) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(1815637738, "1815637738"), (17828 * 1024, "17828Ki"), (5712464 * 1024, "5712464Ki"), (1536, "1536"),
     (2**20, "1Mi"), (2**30, "1Gi"), (1000, "1k"), (512, "512"), (0, "0")],
)
def test_memory_is_canonical_binary_si(count: int, text: str) -> None:
    # The first three appear in real NodeMetric output (release-v0.1 blog, a 2025 kubectl dump).
    assert format_memory_bytes(count) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_memory_text_parses_back(count: int) -> None:
    assert int_value(format_memory_bytes(count)) == count


@given(st.integers(min_value=0, max_value=2**50))
def test_cpu_text_parses_back(milli: int) -> None:
    assert milli_value(format_cpu_milli(milli)) == milli


def test_usage_truncates_like_go_int64() -> None:
    assert ResourceMap.from_usage(6.3125, 52953088.9) == ResourceMap(cpu_milli=6312, memory_bytes=52953088)


def test_times_are_rfc3339_utc_seconds() -> None:
    assert format_time(0) == "1970-01-01T00:00:00Z"
    assert format_time(1748144198.9) == "2025-05-25T03:36:38Z"
    assert parse_time("2025-05-25T03:36:38Z") == 1748144198.0
    assert parse_time("2025-05-25T11:36:38+08:00") == 1748144198.0
    with pytest.raises(ValueError, match="no time zone"):
        parse_time("2025-05-25T03:36:38")
    with pytest.raises(ValueError, match="invalid RFC 3339"):
        parse_time("yesterday")


# ------------------------------------------------------------------------------------------- status shape


def _usage(cpu: int, memory: int) -> ResourceMap:
    return ResourceMap(cpu_milli=cpu, memory_bytes=memory)


def test_status_json_uses_koordinator_names() -> None:
    window = AggregatedUsage(duration_seconds=300, usage={
        AggregationType.AVG: _usage(500, 2**30),
        AggregationType.P50: _usage(429, 5712464 * 1024),
        AggregationType.P90: _usage(886, 5750116 * 1024),
        AggregationType.P95: _usage(1097, 5833412 * 1024),
        AggregationType.P99: _usage(1366, 5938812 * 1024),
    })
    cold = AggregatedUsage(duration_seconds=1800, usage={kind: ResourceMap() for kind in AggregationType})
    status = NodeMetricStatus(
        update_time=1748144198.0,
        node_metric=NodeMetricInfo(node_usage=_usage(515, 5862330450), aggregated_node_usages=(window, cold),
                                   system_usage=_usage(196, 3150994008), aggregated_system_usages=(window,)),
        pods_metric=(
            PodMetricInfo("mysql-7474b86d4f-52p5n", "mysql", _usage(21, 393941019), PriorityClass.PROD, QoSClass.LSR),
            PodMetricInfo("plain", "default", _usage(1, 1)),
        ),
        prod_reclaimable_metric=ReclaimableMetric(_usage(2380, 0)),
    )
    window_json = {
        "usage": {
            "avg": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "p50": {"resources": {"cpu": "429m", "memory": "5712464Ki"}},
            "p90": {"resources": {"cpu": "886m", "memory": "5750116Ki"}},
            "p95": {"resources": {"cpu": "1097m", "memory": "5833412Ki"}},
            "p99": {"resources": {"cpu": "1366m", "memory": "5938812Ki"}},
        },
        "duration": "5m0s",
    }
    assert status.to_json() == {
        "updateTime": "2025-05-25T03:36:38Z",
        "nodeMetric": {
            "nodeUsage": {"resources": {"cpu": "515m", "memory": "5862330450"}},
            "aggregatedNodeUsages": [
                window_json,
                {"usage": {"avg": {}, "p50": {}, "p90": {}, "p95": {}, "p99": {}}, "duration": "30m0s"},
            ],
            "systemUsage": {"resources": {"cpu": "196m", "memory": "3150994008"}},
            "aggregatedSystemUsages": [window_json],
        },
        "podsMetric": [
            {"name": "mysql-7474b86d4f-52p5n", "namespace": "mysql",
             "podUsage": {"resources": {"cpu": "21m", "memory": "393941019"}}, "priority": "koord-prod", "qos": "LSR"},
            # Go's omitempty drops an empty priority/qos.
            {"name": "plain", "namespace": "default", "podUsage": {"resources": {"cpu": "1m", "memory": "1"}}},
        ],
        "prodReclaimableMetric": {"resource": {"resources": {"cpu": "2380m", "memory": "0"}}},
    }
    assert NodeMetricStatus.from_json(status.to_json()) == status


def test_empty_status_keeps_go_struct_fields() -> None:
    # nodeUsage/systemUsage are structs: Go writes them even empty; empty lists and nil pointers are dropped.
    assert NodeMetricStatus(node_metric=NodeMetricInfo()).to_json() == {
        "nodeMetric": {"nodeUsage": {}, "systemUsage": {}}}
    assert NodeMetricStatus().to_json() == {}


# A 2025 `kubectl get nodemetrics -o yaml` from a Koordinator cluster (blog post in the koordinator corpus;
# trimmed to one window and two pods).  Its memory percentiles are multiples of 1024, hence the Ki.
KUBECTL_STATUS: dict[str, Any] = {
    "nodeMetric": {
        "aggregatedNodeUsages": [{
            "duration": "5m0s",
            "usage": {
                "p50": {"resources": {"cpu": "429m", "memory": "5712464Ki"}},
                "p90": {"resources": {"cpu": "886m", "memory": "5750116Ki"}},
                "p95": {"resources": {"cpu": "1097m", "memory": "5833412Ki"}},
                "p99": {"resources": {"cpu": "1366m", "memory": "5938812Ki"}},
            },
        }],
        "nodeUsage": {"resources": {"cpu": "515m", "memory": "5862330450"}},
        "systemUsage": {"resources": {"cpu": "196m", "memory": "3150994008"}},
    },
    "podsMetric": [
        {"name": "prometheus-prometheus-node-exporter-wgsq8", "namespace": "monitor",
         "podUsage": {"resources": {"cpu": "2m", "memory": "15283891"}}, "priority": "koord-batch", "qos": "BE"},
        {"name": "mysql-7474b86d4f-52p5n", "namespace": "mysql",
         "podUsage": {"resources": {"cpu": "21m", "memory": "393941019"}}, "priority": "koord-prod", "qos": "LSR"},
    ],
    "prodReclaimableMetric": {"resource": {"resources": {"cpu": "2380m", "memory": "0"}}},
    "updateTime": "2025-05-25T03:36:38Z",
}


def test_real_koordinator_status_round_trips() -> None:
    status = NodeMetricStatus.from_json(KUBECTL_STATUS)
    assert status.pods_metric[0].priority is PriorityClass.BATCH and status.pods_metric[0].qos is QoSClass.BE
    assert status.node_metric is not None
    assert status.node_metric.aggregated_node_usages[0].usage[AggregationType.P99] == _usage(1366, 5938812 * 1024)
    assert status.to_json() == KUBECTL_STATUS


@pytest.mark.parametrize(
    ("status", "path"),
    [
        ({"nodeMetric": {"nodeUsage": {"resources": {"cpu": "lots"}}}}, "status.nodeMetric.nodeUsage.resources"),
        ({"podsMetric": [{"name": "a"}, {"name": "b", "qos": "GOLD"}]}, "status.podsMetric[1].qos"),
        ({"podsMetric": [{"priority": "koord-vip"}]}, "status.podsMetric[0].priority"),
        ({"podsMetric": {"name": "a"}}, "status.podsMetric"),
        ({"nodeMetric": {"aggregatedNodeUsages": [{"duration": "5 minutes"}]}},
         "status.nodeMetric.aggregatedNodeUsages[0].duration"),
        ({"nodeMetric": {"aggregatedNodeUsages": [{"usage": {"max": {}}}]}},
         "status.nodeMetric.aggregatedNodeUsages[0].usage"),
        ({"nodeMetric": {"aggregatedNodeUsages": [{"duration": 300}]}},
         "status.nodeMetric.aggregatedNodeUsages[0].duration"),
        ({"updateTime": "noon"}, "status.updateTime"),
        ({"updateTime": 1748144198}, "status.updateTime"),
    ],
)
def test_bad_status_names_the_field(status: dict[str, Any], path: str) -> None:
    with pytest.raises(ParseError) as excinfo:
        NodeMetricStatus.from_json(status)
    message = str(excinfo.value)
    assert message.startswith(path + ":") and message.count(path) == 1, message


# ------------------------------------------------------------------------------------------- collect policy


def test_policy_defaults_are_koordinators() -> None:
    policy = NodeMetricCollectPolicy.from_spec(None)
    assert policy == NodeMetricCollectPolicy()
    assert (policy.aggregate_duration_seconds, policy.report_interval_seconds) == (300, 60)
    assert list(policy.node_aggregate_durations) == [300, 600, 1800]
    assert policy.node_memory_collect_policy is MemoryCollectPolicy.WITHOUT_PAGE_CACHE
    assert policy.to_json() == {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }
    assert NodeMetricCollectPolicy.from_spec({}) == policy
    assert NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": None}) == policy


def test_spec_fields_override_defaults_one_by_one() -> None:
    # Koordinator decodes the spec over its default spec: unset fields keep their defaults.
    policy = NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["1h"]}}})
    assert policy == NodeMetricCollectPolicy(node_aggregate_durations=(3600,))
    policy = NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": {"nodeAggregatePolicy": {}}})
    assert list(policy.node_aggregate_durations) == [300, 600, 1800]
    policy = NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": []}}})
    assert list(policy.node_aggregate_durations) == []


def test_spec_keys_match_case_insensitively() -> None:
    # encoding/json matches object keys to struct fields case-insensitively (samples INDEX, point a).
    policy = NodeMetricCollectPolicy.from_spec(
        {"MetricCollectPolicy": {"AggregateDurationSeconds": 120, "NODEMEMORYCOLLECTPOLICY": "usageWithPageCache"}})
    assert policy.aggregate_duration_seconds == 120
    assert policy.node_memory_collect_policy is MemoryCollectPolicy.WITH_PAGE_CACHE


def test_values_below_the_floors_are_raised() -> None:
    policy = NodeMetricCollectPolicy.from_spec(
        {"metricCollectPolicy": {"aggregateDurationSeconds": 10, "reportIntervalSeconds": 1}})
    assert (policy.aggregate_duration_seconds, policy.report_interval_seconds) == (60, 30)


def test_policy_json_round_trips() -> None:
    policy = NodeMetricCollectPolicy(aggregate_duration_seconds=120, report_interval_seconds=45,
                                     node_aggregate_durations=(90, 3600),
                                     node_memory_collect_policy=MemoryCollectPolicy.WITH_HOT_PAGE_CACHE)
    assert NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": policy.to_json()}) == policy


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"aggregateDurationSeconds": "5m"}, "spec.metricCollectPolicy.aggregateDurationSeconds: expected an integer"),
        ({"reportIntervalSeconds": 60.5}, "spec.metricCollectPolicy.reportIntervalSeconds: expected an integer"),
        ({"reportIntervalSeconds": True}, "spec.metricCollectPolicy.reportIntervalSeconds: expected an integer"),
        ({"nodeAggregatePolicy": {"durations": ["5m", "ten minutes"]}},
         "spec.metricCollectPolicy.nodeAggregatePolicy.durations[1]: invalid duration"),
        ({"nodeAggregatePolicy": {"durations": ["5m", 600]}},
         "spec.metricCollectPolicy.nodeAggregatePolicy.durations[1]: expected a duration string"),
        ({"nodeAggregatePolicy": {"durations": ["0s"]}},
         "spec.metricCollectPolicy.nodeAggregatePolicy.durations[0]: must be positive"),
        ({"nodeAggregatePolicy": {"durations": "5m"}},
         "spec.metricCollectPolicy.nodeAggregatePolicy.durations: expected a list"),
        ({"nodeAggregatePolicy": ["5m"]}, "spec.metricCollectPolicy.nodeAggregatePolicy: expected an object"),
        ({"nodeMemoryCollectPolicy": "usageWithColdPageCache"},
         "spec.metricCollectPolicy.nodeMemoryCollectPolicy: expected one of usageWithoutPageCache"),
    ],
)
def test_bad_spec_names_the_field(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": policy})
    assert str(excinfo.value).startswith(message)


def test_bad_spec_envelope_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^spec.metricCollectPolicy: expected an object"):
        NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": 60})
    with pytest.raises(ConfigError, match=r"^spec: expected an object"):
        NodeMetricCollectPolicy.from_spec(["metricCollectPolicy"])


@pytest.mark.parametrize(
    "kwargs",
    [{"report_interval_seconds": 0}, {"aggregate_duration_seconds": -1}, {"report_interval_seconds": float("nan")},
     {"node_aggregate_durations": (300, 0)}],
)
def test_direct_policy_must_be_positive(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="must be"):
        NodeMetricCollectPolicy(**kwargs)


def test_direct_policy_may_go_below_the_spec_floors() -> None:
    # Tests and koordlet's own config may report faster than a NodeMetric spec could ask.
    assert NodeMetricCollectPolicy(report_interval_seconds=0.05).report_interval_seconds == 0.05


# ------------------------------------------------------------------------------------------- samples


def _sample(shared_dir: Path, name: str) -> Any:
    return yaml.safe_load((shared_dir / "reference" / "koordinator-samples" / "crs" / name).read_text())


def test_sample_v01_status_loads_and_writes_back(shared_dir: Path) -> None:
    document = _sample(shared_dir, "nodemetric-v0.1-status-sample.yaml")
    metric = NodeMetric.from_json(document)
    assert metric.name == "node-1"
    assert metric.collect_policy is None and metric.effective_policy == NodeMetricCollectPolicy()
    assert metric.status.node_metric is not None
    assert metric.status.node_metric.node_usage == _usage(138, 1815637738)
    (pod,) = metric.status.pods_metric
    assert (pod.name, pod.namespace, pod.pod_usage) == ("storage-service-6c7c59f868-k72r5", "default",
                                                      _usage(300, 17828 * 1024))
    assert (pod.priority, pod.qos) == (PriorityClass.NONE, QoSClass.NONE)
    # Written back as today's Go structs write it: the same values, plus the always-present systemUsage.
    expected = document["status"]
    expected["nodeMetric"]["systemUsage"] = {}
    assert metric.status.to_json() == expected


def test_sample_crd_reference_spec(shared_dir: Path) -> None:
    metric = NodeMetric.from_json(_sample(shared_dir, "nodemetric-crd-reference-sample.yaml"))
    assert metric.name == "node-sample"
    assert metric.collect_policy == NodeMetricCollectPolicy(
        aggregate_duration_seconds=60,
        report_interval_seconds=30,  # the sample asks for 15; Koordinator's floor is 30
        node_memory_collect_policy=MemoryCollectPolicy.WITHOUT_PAGE_CACHE,
    )
    assert metric.status == NodeMetricStatus()


def test_sample_kubebuilder_null_spec(shared_dir: Path) -> None:
    document = _sample(shared_dir, "nodemetric-kubebuilder-sample.yaml")
    assert document["spec"] is None
    metric = NodeMetric.from_json(document)
    assert (metric.name, metric.collect_policy) == ("nodemetric-sample", None)
    assert metric.effective_policy == NodeMetricCollectPolicy()


def test_object_round_trip_and_envelope_check() -> None:
    metric = NodeMetric(name="n1", collect_policy=NodeMetricCollectPolicy(aggregate_duration_seconds=120),
                        status=NodeMetricStatus.from_json(KUBECTL_STATUS))
    document = metric.to_json()
    assert (document["apiVersion"], document["kind"], document["metadata"]) == (
        "slo.koordinator.sh/v1alpha1", "NodeMetric", {"name": "n1"})
    assert NodeMetric.from_json(document) == metric
    assert NodeMetric(name="n1").to_json()["spec"] == {}
    with pytest.raises(ParseError, match=r"expected slo\.koordinator\.sh/v1alpha1 NodeMetric"):
        NodeMetric.from_json({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO"})


# ------------------------------------------------------------------------------------------- the fast decoder

_QUANTITIES = st.one_of(
    st.integers(0, 10**19).map(str), st.integers(0, 10**18).map(lambda n: f"{n}m"),
    st.sampled_from(["", "m", "0", "007", "1k", "1.5", "-1", "1Ki", "12Mi", "\u0661", " 1", "1_0", "+1", "1mm",
                     "m1", "9" * 18, "9" * 19, "9" * 17 + "m", "1e3", "lots"]),
    st.sampled_from([None, 5, 1.5, True, [], {}]),
)


def _resource_map_json() -> st.SearchStrategy[Any]:
    resources = st.fixed_dictionaries({}, optional={"cpu": _QUANTITIES, "memory": _QUANTITIES, "gpu": _QUANTITIES})
    return st.one_of(st.fixed_dictionaries({"resources": resources}), st.fixed_dictionaries({}),
                     st.sampled_from([None, {"resources": None}, {"Resources": {"cpu": "1"}}, "1", []]))


_CLASS_VALUES = st.sampled_from(["", "koord-prod", "koord-batch", "LS", "BE", "LSR", "koord-vip", None, 0, []])
_POD = st.fixed_dictionaries(
    {"podUsage": _resource_map_json()},
    optional={"name": st.sampled_from(["a", "", None, 5]), "namespace": st.sampled_from(["ns", "", None]),
              "priority": _CLASS_VALUES, "qos": _CLASS_VALUES, "Name": st.just("b"), "other": st.just(1)})
_WINDOW = st.fixed_dictionaries(
    {"duration": st.sampled_from(["5m0s", "10m0s", "", None, "5 minutes", 300, "1h"])},
    optional={"usage": st.one_of(st.dictionaries(st.sampled_from(["avg", "p50", "p99", "max"]), _resource_map_json(),
                                                 max_size=3), st.none())})
_STATUS = st.fixed_dictionaries(
    {},
    optional={
        "updateTime": st.sampled_from(["2022-03-30T11:50:17Z", "", None, "noon", 5, "0001-01-01T00:00:00+01:00"]),
        "nodeMetric": st.one_of(st.none(), st.fixed_dictionaries(
            {}, optional={"nodeUsage": _resource_map_json(), "systemUsage": _resource_map_json(),
                          "aggregatedNodeUsages": st.lists(_WINDOW, max_size=3),
                          "aggregatedSystemUsages": st.one_of(st.lists(_WINDOW, max_size=2), st.just({}))})),
        "podsMetric": st.one_of(st.lists(_POD, max_size=6), st.none(), st.just({"name": "a"})),
        "prodReclaimableMetric": st.one_of(st.fixed_dictionaries({"resource": _resource_map_json()}), st.none()),
        "prodPeakMetric": st.fixed_dictionaries({"resource": _resource_map_json()}),
        "hostApplicationMetric": st.lists(st.fixed_dictionaries(
            {"name": st.sampled_from(["nginx", None]), "usage": _resource_map_json()},
            optional={"priority": _CLASS_VALUES, "qos": _CLASS_VALUES}), max_size=2),
        "PodsMetric": st.just([]),
    })


_GOOD_POD = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b-1"]), "namespace": st.just("ns"),
     "podUsage": st.one_of(st.fixed_dictionaries({"resources": st.fixed_dictionaries(
         {"cpu": st.sampled_from(["138m", "2", "0", "1k", "1500m", "99999999999999999m"]),
          "memory": st.sampled_from(["1815637738", "17828Ki", "3Mi", "0", "1k", "999999999999999999"])})}),
         st.just({}))},
    optional={"priority": st.sampled_from(["koord-prod", "koord-batch"]), "qos": st.sampled_from(["LS", "BE"])})
_MOSTLY_GOOD_STATUS = st.fixed_dictionaries({"podsMetric": st.lists(st.one_of(_GOOD_POD, _GOOD_POD, _GOOD_POD, _POD),
                                                                      max_size=8)})


@given(st.one_of(_STATUS, _MOSTLY_GOOD_STATUS), st.booleans())
def test_the_fast_decoder_agrees_with_the_checked_one(document: dict[str, Any], as_bytes: bool) -> None:
    """Whatever the fast decoder takes (the report's bytes, or a NodeMetric's parsed status), it decodes exactly as
    the checked decoder; what it declines, the checked decoder decodes or names (decode_status is the two)."""
    raw: bytes | dict[str, Any] = json.dumps(document).encode() if as_bytes else document
    fast = fast_status(raw)
    try:
        checked = NodeMetricStatus.from_json(document)
    except ParseError as exc:
        assert fast is None
        with pytest.raises(ParseError) as info:
            decode_status(raw)
        assert str(info.value) == str(exc)
        return
    if fast is not None:
        assert fast == checked
    assert decode_status(raw) == checked


def test_the_fast_decoder_takes_what_koordlets_send() -> None:
    window = AggregatedUsage(300.0, {kind: _usage(1500 + i, 2**30 + i) for i, kind in enumerate(AggregationType)})
    status = NodeMetricStatus(
        update_time=1648641017.0,
        node_metric=NodeMetricInfo(_usage(26908, 113829184807), (window, window), _usage(2000, 17828 * 1024),
                                   (window,)),
        pods_metric=(PodMetricInfo("a", "ns", _usage(138, 1815637738), PriorityClass.PROD, QoSClass.LS),
                     PodMetricInfo("b", "ns", _usage(0, 0)), PodMetricInfo("c", "ns", ResourceMap())),
        prod_reclaimable_metric=ReclaimableMetric(_usage(1000, 2048)),
        host_application_metric=(HostApplicationMetricInfo("nginx", _usage(5, 6), PriorityClass.PROD, QoSClass.LS),))
    document = status.to_json()
    assert fast_status(json.dumps(document).encode()) == fast_status(document) == status
    assert NodeMetricStatus.from_json(document) == status


_COLUMN_TEXTS = st.one_of(
    st.integers(0, 10**19).map(str), st.integers(0, 10**18).map(lambda n: f"{n}m"),
    st.tuples(st.integers(0, 10**17), st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]))
    .map(lambda p: f"{p[0]}{p[1]}"),
    st.sampled_from(["", "m", "0", "0m", "00", "007", "1k", "1M", "1.5", "-1", "\u0661", " 1", "1e3", "m1", "1m2",
                     "1mm", "Ki", "1Ki5", "K1Ki", "1KiKi", "1iKi", "i1", "1K", "9" * 16 + "Ki", "9" * 17 + "m",
                     "1,2", ",", "1 ", "\t1", "-0", "-1Ki", "1.0", "1E3"]))


@given(st.lists(_COLUMN_TEXTS, min_size=1, max_size=12), st.booleans())
def test_a_column_of_quantities_reads_as_each_text_does(texts: list[str], milli: bool) -> None:
    """The fast path reads a report's CPU or memory texts as one column; every text reads as the checked reader
    reads it alone, and a column with one it refuses is refused (the checked decoder then names it)."""
    try:
        expected: list[int] | None = [milli_value(text) if milli else int_value(text) for text in texts]
    except ParseError:
        expected = None
    assert metricdecode._amounts(list(texts), milli) == expected


@pytest.mark.parametrize(("texts", "milli", "values"), [
    (["138m", "1500m"], True, [138, 1500]),
    (["2", "0"], True, [2000, 0]),
    (["138m", "2", "0", "0m"], True, [138, 2000, 0, 0]),
    (["1815637738", "0"], False, [1815637738, 0]),
    (["17828Ki", "3Mi", "1815637738", "1Gi"], False, [17828 << 10, 3 << 20, 1815637738, 1 << 30]),
])
def test_the_columns_koordlets_send_are_read_whole(texts: list[str], milli: bool, values: list[int]) -> None:
    """Not a text at a time: what every report holds takes the one-string path."""
    assert metricdecode._whole_column(texts, milli) == values


@pytest.mark.parametrize(("texts", "milli"), [
    (["m1", "2m"], True), (["1m2", "3m"], True), (["1m2", "3"], True), (["007m"], True), (["1k"], True),
    (["1Ki5", "1Ki"], False), (["K1Ki"], False), (["1KiKi"], False), (["1iKi"], False), (["1M"], False),
    (["12", ""], False), (["9" * 17 + "Ki"], False), (["1,2", "3"], False), (["1,2m", "3m"], True), ([" 1"], False),
    (["-1"], False), (["1.0"], True),
])
def test_columns_out_of_the_usual_are_left_to_each_text(texts: list[str], milli: bool) -> None:
    assert metricdecode._whole_column(texts, milli) is None


@pytest.mark.parametrize(("raw", "pods"), [
    (b'{"podsMetric": [{"name": "a"}], "podsMetric": [{"name": "b"}]}', ["b"]),  # the last of a repeated key
    (b'{"PodsMetric": [{"name": "a"}]}', ["a"]),  # Go's case-insensitive keys: the checked decoder's
    (b'\xef\xbb\xbf{"podsMetric": [{"name": "a"}]}', ["a"]),  # a UTF-8 BOM, as json.loads takes it
])
def test_report_bytes_decode_as_json_loads_reads_them(raw: bytes, pods: list[str]) -> None:
    assert [p.name for p in decode_status(raw).pods_metric] == pods


@pytest.mark.parametrize(("raw", "message"), [
    (b"", "^status_json: not valid JSON"),
    (b'{"podsMetric": [', "^status_json: not valid JSON"),
    (b"[" * 100_000, "^status_json: nested too deeply"),
    (b'{"podsMetric": [{"podUsage": {"resources": {"cpu": "lots"}}}]}', r"^status\.podsMetric\[0\]\.podUsage"),
])
def test_bad_report_bytes_are_named(raw: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        decode_status(raw)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_out_of_range_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_time(text)
