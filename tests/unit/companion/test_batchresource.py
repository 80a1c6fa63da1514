"""Batch resources of a node: Koordinator's BatchResource formula, degrade, update thresholds and removal.

The worked cases come from ``../shared/reference/koordinator-samples/batch-examples.json`` (numbers transcribed
from Koordinator's ``TestPluginCalculate``); the hand-written tables below show their arithmetic in the ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.extension import ANNOTATION_NODE_RESERVATION, PriorityClass, QoSClass
from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, PodMetricInfo, ResourceMap
from koordlet.apis.pod import pod_from_json
from koordlet.apis.quantity import int_value, milli_value
from koordlet.apis.sloconfig import ColocationStrategy, render_colocation
from koordlet.companion.batchresource import (
    REASON_DEGRADED,
    REASON_DISABLED,
    BatchResult,
    BatchValues,
    CPUMemory,
    HostAppMetric,
    NodeInput,
    PodInput,
    calculate,
    needs_update,
    parse_cpuset,
    parse_node_reservation,
)
from koordlet.errors import ParseError
from tests.conftest import shared_path

NOW = 1_800_000_000.0
G = 10**9


# ---------------------------------------------------------------------------------------------- builders

def strategy(**fields: Any) -> ColocationStrategy:
    """A strategy as the companion renders it from ``colocation-config`` (defaults under the given keys)."""
    rendered, errors = render_colocation({"colocation-config": json.dumps({"enable": True, **fields})}, {})
    assert errors == ()
    return rendered


def node(cpu: int = 100_000, memory: int = 120 * G, *, alloc_cpu: int | None = None, alloc_memory: int | None = None,
         reservation: str | None = None) -> NodeInput:
    annotations = {} if reservation is None else {ANNOTATION_NODE_RESERVATION: reservation}
    return NodeInput(name="test-node1", capacity=CPUMemory(cpu, memory),
                     allocatable=CPUMemory(cpu if alloc_cpu is None else alloc_cpu,
                                           memory if alloc_memory is None else alloc_memory),
                     annotations=annotations)


def pod(name: str, cpu: int, memory: int, *, qos: QoSClass = QoSClass.LS,
        priority: PriorityClass = PriorityClass.NONE, phase: str = "Running") -> PodInput:
    return PodInput(uid=f"uid-{name}", namespace="test", name=name, priority_class=priority, qos=qos, phase=phase,
                    requests=CPUMemory(cpu, memory), limits=CPUMemory(cpu, memory))


def usage(name: str, cpu: int, memory: int, priority: PriorityClass = PriorityClass.NONE) -> PodMetricInfo:
    return PodMetricInfo(name=name, namespace="test", pod_usage=ResourceMap(cpu, memory), priority=priority)


def metric(system_cpu: int, system_memory: int, pods: Sequence[PodMetricInfo] = (),
           update_time: float | None = NOW) -> NodeMetricStatus:
    return NodeMetricStatus(update_time=update_time,
                            node_metric=NodeMetricInfo(system_usage=ResourceMap(system_cpu, system_memory)),
                            pods_metric=tuple(pods))


# ---------------------------------------------------------------------------------------------- upstream cases

def _load_examples() -> dict[str, Any] | None:
    # Read at collection to name the cases; each case reads its file again through ``shared_dir``, which skips
    # (or fails under CI) when ../shared is absent.
    path = shared_path() / "reference" / "koordinator-samples" / "batch-examples.json"
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


_EXAMPLES = _load_examples()
_CASE_NAMES = [c["name"] for c in _EXAMPLES["cases"]] if _EXAMPLES else ["<../shared absent>"]


def _case(shared_dir: Path, name: str) -> Mapping[str, Any]:
    data = json.loads((shared_dir / "reference/koordinator-samples/batch-examples.json").read_text())
    return next(c for c in data["cases"] if c["name"] == name)


def _resources(obj: Mapping[str, str] | None) -> CPUMemory:
    obj = obj or {}
    return CPUMemory(milli_value(obj.get("cpu", "0")), int_value(obj.get("memory", "0")))


def _case_pod(obj: Mapping[str, Any]) -> PodInput:
    containers = [{"name": f"c{i}", "resources": {"requests": c.get("requests"), "limits": c.get("limits")}}
                  for i, c in enumerate(obj.get("containers", []))]
    spec: dict[str, Any] = {"containers": containers, "nodeName": obj["nodeName"]}
    if "priority" in obj:
        spec["priority"] = obj["priority"]
    if "priorityClassName" in obj:
        spec["priorityClassName"] = obj["priorityClassName"]
    return PodInput.from_pod(pod_from_json({
        "metadata": {"uid": f"uid-{obj['name']}", "name": obj["name"], "namespace": obj["namespace"],
                     "labels": obj.get("labels", {}), "annotations": obj.get("annotations", {})},
        "spec": spec,
        "status": {"phase": obj["phase"]},
    }))


def _case_inputs(case: Mapping[str, Any]) -> tuple[NodeInput, list[PodInput], NodeMetricStatus, ColocationStrategy,
                                                    list[HostAppMetric]]:
    inputs = case["inputs"]
    raw_node = inputs["node"]
    node_input = NodeInput(name=raw_node["name"], capacity=_resources(raw_node["capacity"]),
                           allocatable=_resources(raw_node["allocatable"]), labels=raw_node.get("labels", {}),
                           annotations=raw_node.get("annotations", {}))
    raw_metric = inputs["nodeMetricStatus"]
    assert raw_metric["updateTime"] == "now (fresh)"
    system = _resources(raw_metric["systemUsage"])
    pods_metric = [PodMetricInfo(name=m["name"], namespace=m["namespace"],
                                 pod_usage=ResourceMap(*_astuple(_resources(m["podUsage"]))))
                   for m in raw_metric["podsMetric"]]
    status = metric(system.cpu_milli, system.memory_bytes, pods_metric)
    host_apps = [HostAppMetric(a["name"], _resources(a["usage"]), PriorityClass(a["priority"]))
                 for a in raw_metric.get("hostApplicationMetric", [])]
    rendered, errors = render_colocation({"colocation-config": json.dumps(inputs["colocationStrategy"])},
                                         node_input.labels)
    assert errors == ()
    return node_input, [_case_pod(p) for p in inputs["pods"]], status, rendered, host_apps


def _astuple(value: CPUMemory) -> tuple[int, int]:
    return value.cpu_milli, value.memory_bytes


@pytest.mark.parametrize("name", _CASE_NAMES)
def test_upstream_plugin_cases(shared_dir: Path, name: str) -> None:
    case = _case(shared_dir, name)
    node_input, pods, status, colocation, host_apps = _case_inputs(case)
    result = calculate(node_input, pods, status, colocation, NOW, host_apps=host_apps)
    expected = case["expected"]
    assert result.errors == ()
    assert not result.degraded
    assert result.batch_cpu_milli == expected["kubernetes.io/batch-cpu_milli"]
    assert result.batch_memory_bytes == expected["kubernetes.io/batch-memory_bytes"]
    assert result.details["cpu_message"] == expected["message_cpu"]
    assert result.details["memory_message"] == expected["message_memory"]


# ---------------------------------------------------------------------------------------------- policies

# Node 100 cores / 120G (capacity = allocatable); system usage 7 cores / 12G.
# HP pods: podA LS req 20c/20G used 11c/11G; podC (no class, LS) req 20c/40G used 22c/22G.
# podB BE (batch) used 10c/10G and podD Succeeded are ignored.
_PODS = [pod("podA", 20_000, 20 * G), pod("podB", 0, 0, qos=QoSClass.BE),
         pod("podC", 20_000, 40 * G, phase="Pending"), pod("podD", 10_000, 10 * G, qos=QoSClass.BE, phase="Succeeded")]
_METRIC = metric(7_000, 12 * G, [usage("podA", 11_000, 11 * G), usage("podB", 10_000, 10 * G),
                                 usage("podC", 22_000, 22 * G)])


@pytest.mark.parametrize(("fields", "cpu", "memory"), [
    pytest.param({"cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65}, 25_000, 33 * G,
                 id="usage: cpu 100-35-7-(11+22)=25; mem 120-42-12-(11+22)=33"),
    pytest.param({"cpuReclaimThresholdPercent": 60, "memoryReclaimThresholdPercent": 65}, 20_000, 33 * G,
                 id="defaults 60/65: cpu 100-40-7-33=20; mem 120-42-12-33=33"),
    pytest.param({"cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 80,
                  "memoryCalculatePolicy": "request"}, 30_000, 36 * G,
                 id="mem request: cpu 100-30-7-33=30; mem 120-24-reserved 0-(20+40)=36"),
    pytest.param({"cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 80,
                  "cpuCalculatePolicy": "maxUsageRequest", "memoryCalculatePolicy": "maxUsageRequest"},
                 21_000, 24 * G,
                 id="maxUsageRequest: cpu 100-30-7-(max(20,11)+max(20,22))=21; mem 120-24-12-(20+40)=24"),
    pytest.param({"cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65,
                  "cpuCalculatePolicy": "request"}, 25_000, 33 * G,
                 id="cpu request is not a cpu policy upstream: falls back to usage 25"),
    pytest.param({"cpuReclaimThresholdPercent": 10, "memoryReclaimThresholdPercent": 10}, 0, 0,
                 id="never negative: cpu 100-90-7-33<0 -> 0; mem 120-108-12-33<0 -> 0"),
    pytest.param({"cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65,
                  "batchCPUThresholdPercent": 20, "batchMemoryThresholdPercent": 50}, 20_000, 33 * G,
                 id="caps: cpu min(100*20%=20, 25)=20; mem min(120*50%=60, 33)=33"),
    pytest.param({"cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65,
                  "batchCPUThresholdPercent": 0, "batchMemoryThresholdPercent": 0}, 0, 0,
                 id="caps at 0 % zero both (the documented batch*ThresholdPercent:0 patch)"),
    pytest.param({"cpuReclaimThresholdPercent": 33, "memoryReclaimThresholdPercent": 33}, 0, 0,
                 id="truncation: margin int(100000*0.67)=67000 -> 100000-67000-7000-33000=-7000 -> 0"),
])
def test_policies(fields: dict[str, Any], cpu: int, memory: int) -> None:
    result = calculate(node(), _PODS, _METRIC, strategy(**fields), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (cpu, memory)
    assert not result.degraded and not result.remove


def test_cap_is_a_share_of_capacity_not_allocatable() -> None:
    # Capacity 100c, allocatable 90c (kubelet reserves 10c): the cap is 100000*0.3=30000, not 90000*0.3=27000.
    # Uncapped: 100-(-50)-max(7,10)-33 = 107 cores.
    result = calculate(node(alloc_cpu=90_000), _PODS, _METRIC,
                       strategy(cpuReclaimThresholdPercent=150, batchCPUThresholdPercent=30), NOW)
    assert result.batch_cpu_milli == 30_000
    assert result.details["cpu_message"].startswith(
        "batchAllocatable[CPU(Milli-Core)]:30000 = min(nodeCapacity:100000 * thresholdRatio:0.3, ")


def test_batch_cpu_is_integer_milli_and_memory_bytes() -> None:
    # 7 cores capacity at 65 %: margin int(7001*0.35)=2450 -> 7001-2450-0-0 = 4551 milli.
    result = calculate(node(7_001, 10 * G + 1), [], metric(0, 0), strategy(cpuReclaimThresholdPercent=65,
                                                                         memoryReclaimThresholdPercent=65), NOW)
    assert result.batch_cpu_milli == 4_551
    # memory: margin int(10000000001*0.35)=3500000000 -> 6500000001 bytes, exactly.
    assert result.batch_memory_bytes == 6_500_000_001
    assert isinstance(result.batch_cpu_milli, int) and isinstance(result.batch_memory_bytes, int)


# ---------------------------------------------------------------------------------------------- pods

def test_lse_pod_counts_its_cpu_request_and_memory_usage() -> None:
    # LSE req 10c/10G used 5c/5G -> HP used 10c/5G: cpu 100-35-7-10=48, mem 120-42-12-5=61.
    pods = [pod("lse", 10_000, 10 * G, qos=QoSClass.LSE)]
    result = calculate(node(), pods, metric(7_000, 12 * G, [usage("lse", 5_000, 5 * G)]), strategy(
        cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (48_000, 61 * G)
    assert result.details["hp_used"] == CPUMemory(10_000, 5 * G)


def test_pod_without_metric_counts_its_request() -> None:
    # prod pod req 10c/10G, no metric yet: cpu 100-35-7-10=48, mem 120-42-12-10=56.
    result = calculate(node(), [pod("new", 10_000, 10 * G, priority=PriorityClass.PROD)], metric(7_000, 12 * G),
                       strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (48_000, 56 * G)


def test_max_usage_request_leaves_out_pods_without_metric_like_upstream() -> None:
    # Upstream calculateOnNode adds a metric-less HP pod's request to podHPUsed only, not to
    # podHPMaxUsedRequest: cpu 100-35-7-0 = 58 under maxUsageRequest (usage would give 48).
    result = calculate(node(), [pod("new", 10_000, 10 * G, priority=PriorityClass.PROD)], metric(7_000, 12 * G),
                       strategy(cpuReclaimThresholdPercent=65, cpuCalculatePolicy="maxUsageRequest"), NOW)
    assert result.batch_cpu_milli == 58_000


@pytest.mark.parametrize(("metric_priority", "cpu"), [
    pytest.param(PriorityClass.NONE, 15_000, id="unknown priority: 100-35-7-(33+10)=15"),
    pytest.param(PriorityClass.PROD, 15_000, id="prod: 100-35-7-(33+10)=15"),
    pytest.param(PriorityClass.MID, 15_000, id="mid: 100-35-7-(33+10)=15"),
    pytest.param(PriorityClass.BATCH, 25_000, id="batch metric skipped: 100-35-7-33=25"),
    pytest.param(PriorityClass.FREE, 25_000, id="free metric skipped: 100-35-7-33=25"),
])
def test_dangling_metric_pods(metric_priority: PriorityClass, cpu: int) -> None:
    status = metric(7_000, 12 * G, [*_METRIC.pods_metric, usage("gone", 10_000, 10 * G, metric_priority)])
    result = calculate(node(), _PODS, status, strategy(cpuReclaimThresholdPercent=65), NOW)
    assert result.batch_cpu_milli == cpu


def test_metric_of_a_terminated_pod_in_the_list_counts_as_dangling() -> None:
    # Upstream removes a metric from the dangling set only for Running/Pending pods: podD (Succeeded, BE label)
    # reported 10c -> counted as an unknown-priority pod: 100-35-7-(33+10)=15.
    status = metric(7_000, 12 * G, [*_METRIC.pods_metric, usage("podD", 10_000, 10 * G)])
    assert calculate(node(), _PODS, status, strategy(cpuReclaimThresholdPercent=65), NOW).batch_cpu_milli == 15_000


@pytest.mark.parametrize(("qos", "priority", "hp"), [
    (QoSClass.LS, PriorityClass.NONE, True), (QoSClass.LSR, PriorityClass.NONE, True),
    (QoSClass.LSE, PriorityClass.NONE, True), (QoSClass.SYSTEM, PriorityClass.NONE, True),
    (QoSClass.NONE, PriorityClass.NONE, True), (QoSClass.BE, PriorityClass.NONE, False),
    (QoSClass.BE, PriorityClass.MID, True), (QoSClass.LS, PriorityClass.BATCH, False),
    (QoSClass.LS, PriorityClass.FREE, False), (QoSClass.BE, PriorityClass.PROD, True),
])
def test_high_priority_with_qos_default(qos: QoSClass, priority: PriorityClass, hp: bool) -> None:
    assert pod("p", 1, 1, qos=qos, priority=priority).high_priority is hp


@pytest.mark.parametrize(("priority", "cpu"), [
    pytest.param(PriorityClass.PROD, 25_000, id="prod host app: system 4+3=7 -> 100-35-7-33=25"),
    pytest.param(PriorityClass.MID, 25_000, id="mid host app: 4+3=7 -> 25"),
    pytest.param(PriorityClass.BATCH, 28_000, id="batch host app not counted: 100-35-4-33=28"),
    pytest.param(PriorityClass.NONE, 28_000, id="no priority (value 0 <= batch) not counted: 28"),
])
def test_host_applications(priority: PriorityClass, cpu: int) -> None:
    status = metric(4_000, 6 * G, _METRIC.pods_metric)
    result = calculate(node(), _PODS, status, strategy(cpuReclaimThresholdPercent=65), NOW,
                       host_apps=[HostAppMetric("app", CPUMemory(3_000, 6 * G), priority)])
    assert result.batch_cpu_milli == cpu


# ---------------------------------------------------------------------------------------------- reservation

def _sample_reservation(shared_dir: Path, name: str) -> str:
    text = (shared_dir / "reference/koordinator-samples/crs" / name).read_text()
    value: str = yaml.safe_load(text)["metadata"]["annotations"][ANNOTATION_NODE_RESERVATION]
    return value


@pytest.mark.parametrize(("sample", "reserved_cpu", "cpu"), [
    pytest.param("node-reservation-by-quantity.yaml", 5_000, 25_000,
                 id="resources.cpu 5 < system 7: 100-35-max(7,5)-33=25"),
    pytest.param("node-reservation-by-cpuset.yaml", 4_000, 25_000,
                 id="reservedCPUs 0-3 = 4 cores < 7: 25"),
    pytest.param("node-reservation-both-fields.yaml", 4_000, 25_000,
                 id="reservedCPUs 0-3 wins over resources.cpu 2: 4 cores"),
])
def test_documented_reservation_annotations(shared_dir: Path, sample: str, reserved_cpu: int, cpu: int) -> None:
    annotation = _sample_reservation(shared_dir, sample)
    assert parse_node_reservation("fake-node", {ANNOTATION_NODE_RESERVATION: annotation}) == CPUMemory(reserved_cpu, 0)
    result = calculate(node(reservation=annotation), _PODS, _METRIC, strategy(cpuReclaimThresholdPercent=65), NOW)
    assert result.batch_cpu_milli == cpu


@pytest.mark.parametrize(("annotation", "cpu", "memory"), [
    pytest.param('{"resources":{"cpu":"20"}}', 12_000, 33 * G, id="quantity 20c > 7: 100-35-20-33=12"),
    pytest.param('{"reservedCPUs":"0-19"}', 12_000, 33 * G, id="cpuset 0-19 = 20c: 12"),
    pytest.param('{"resources":{"cpu":"30"},"reservedCPUs":"0-9"}', 22_000, 33 * G,
                 id="both: reservedCPUs 10c wins over 30: 100-35-10-33=22"),
    pytest.param('{"resources":{"memory":"20G"}}', 25_000, 25 * G, id="memory 20G > 12G: 120-42-20-33=25"),
    pytest.param('{"Resources":{"cpu":"20"}}', 12_000, 33 * G, id="keys match case-insensitively like Go"),
    pytest.param("{}", 25_000, 33 * G, id="empty object reserves nothing"),
])
def test_reservation_annotation(annotation: str, cpu: int, memory: int) -> None:
    result = calculate(node(reservation=annotation), _PODS, _METRIC,
                       strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (cpu, memory)
    assert result.errors == ()


@pytest.mark.parametrize(("annotation", "fragment"), [
    pytest.param('{"resources":{"cpu":"lots"}}', "resources.cpu", id="garbage quantity"),
    pytest.param('{"resources":{"memory":"20G","cpu":"x"}}', "resources.cpu", id="one bad quantity drops all"),
    pytest.param('{"resources":{"memory":"20G"},"reservedCPUs":"3-1"}', "reservedCPUs", id="reversed cpuset"),
    pytest.param('{"reservedCPUs":"0-a"}', "reservedCPUs", id="garbage cpuset"),
    pytest.param('{"reservedCPUs":4}', "reservedCPUs", id="cpuset not a string"),
    pytest.param("{cpu: 4}", "not valid JSON", id="not JSON"),
    pytest.param('["cpu"]', "expected a JSON object", id="not an object"),
])
def test_bad_reservation_is_reported_and_ignored(annotation: str, fragment: str) -> None:
    # Upstream GetNodeReservationFromAnnotation logs and returns nil: the node is computed without it, so the
    # memory 20G in some of these is not applied either (memory stays 120-42-12-33=33).
    result = calculate(node(reservation=annotation), _PODS, _METRIC,
                       strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (25_000, 33 * G)
    assert len(result.errors) == 1
    message = str(result.errors[0])
    assert "node test-node1" in message and ANNOTATION_NODE_RESERVATION in message and fragment in message
    assert isinstance(result.errors[0], ParseError)


def test_kubelet_reservation_is_capacity_minus_allocatable() -> None:
    # capacity 100c/120G, allocatable 90c/100G -> kubelet 10c/20G beats annotation 2c/5G and system 7c/12G.
    result = calculate(node(alloc_cpu=90_000, alloc_memory=100 * G, reservation='{"resources":{"cpu":"2",'
                                                                                '"memory":"5G"}}'),
                       _PODS, _METRIC, strategy(cpuReclaimThresholdPercent=65, memoryReclaimThresholdPercent=65), NOW)
    assert (result.batch_cpu_milli, result.batch_memory_bytes) == (22_000, 25 * G)


@pytest.mark.parametrize(("text", "count"), [("", 0), ("0", 1), ("0-3", 4), ("0-3,8,10-11", 7), ("1,1,1-2", 2)])
def test_parse_cpuset(text: str, count: int) -> None:
    assert len(parse_cpuset(text)) == count


@pytest.mark.parametrize("text", ["3-1", "a", "1-2-3", " 1", "1,", "-1", "1, 2", "\u0663", "0-70000"])
def test_parse_cpuset_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid cpu list"):
        parse_cpuset(text)


# ---------------------------------------------------------------------------------------------- degrade

@pytest.mark.parametrize(("age", "degraded"), [
    pytest.param(0.0, False, id="fresh"),
    pytest.param(15 * 60.0, False, id="exactly 15 min: not after the deadline"),
    pytest.param(15 * 60.0 + 1, True, id="15 min 1 s: degrade"),
    pytest.param(3600.0, True, id="one hour: degrade"),
])
def test_degrade_after_15_minutes(age: float, degraded: bool) -> None:
    status = metric(7_000, 12 * G, _METRIC.pods_metric, update_time=NOW - age)
    result = calculate(node(), _PODS, status, strategy(cpuReclaimThresholdPercent=65), NOW)
    assert result.degraded is degraded
    if degraded:
        # Koordinator's Reset deletes batch-cpu/batch-memory from the node rather than writing 0.
        assert (result.batch_cpu_milli, result.batch_memory_bytes) == (None, None)
        assert result.remove and result.reason == REASON_DEGRADED
    else:
        assert result.batch_cpu_milli == 25_000


def test_degrade_time_follows_the_strategy() -> None:
    status = metric(7_000, 12 * G, _METRIC.pods_metric, update_time=NOW - 6 * 60)
    assert calculate(node(), _PODS, status, strategy(degradeTimeMinutes=5), NOW).degraded
    assert not calculate(node(), _PODS, status, strategy(degradeTimeMinutes=15), NOW).degraded


@pytest.mark.parametrize("status", [
    pytest.param(None, id="no NodeMetric"),
    pytest.param(NodeMetricStatus(), id="no update time"),
    pytest.param(NodeMetricStatus(update_time=NOW), id="no nodeMetric"),
])
def test_missing_node_metric_degrades(status: NodeMetricStatus | None) -> None:
    result = calculate(node(), _PODS, status, strategy(), NOW)
    assert result.degraded and result.remove and result.reason == REASON_DEGRADED


# ---------------------------------------------------------------------------------------------- disabled

@pytest.mark.parametrize(("rendered", "cluster_enabled"), [
    pytest.param(render_colocation({}, {})[0], True, id="default config: enable=false"),
    pytest.param(render_colocation({"colocation-config": '{"enable": false}'}, {})[0], True, id="enable=false"),
    pytest.param(render_colocation({"colocation-config": '{"enable": false, "nodeConfigs": [{"nodeSelector": '
                                    '{"matchLabels": {"pool": "a"}}, "enable": true}]}'}, {"pool": "a"})[0], False,
                 id="node entry enables but cluster is off"),
])
def test_colocation_disabled_removes_batch_resources(rendered: ColocationStrategy, cluster_enabled: bool) -> None:
    result = calculate(node(), _PODS, _METRIC, rendered, NOW, cluster_enabled=cluster_enabled)
    assert result.remove and not result.degraded
    assert result.reason == REASON_DISABLED
    # A node still carrying batch resources must be written, at once.
    assert needs_update(BatchValues(25_000, 33 * G), result, NOW, NOW, rendered)
    assert not needs_update(BatchValues(None, None), result, NOW, NOW, rendered)


def test_full_template_disables_cluster_and_keeps_node_override(shared_dir: Path) -> None:
    data = yaml.safe_load((shared_dir / "reference/koordinator-samples/slo-configs/full-template-all-keys.yaml")
                          .read_text())["data"]
    rendered, _ = render_colocation(data, {"kubernetes.io/kernel": "anolis"})
    result = calculate(node(), _PODS, _METRIC, rendered, NOW)
    assert result.remove and result.reason == REASON_DISABLED


# ---------------------------------------------------------------------------------------------- updates

@pytest.mark.parametrize(("old", "new", "since", "expected"), [
    pytest.param((10_000, 10 * G), (11_000, 10 * G), 10, False, id="cpu +10% exactly: not above 0.1"),
    pytest.param((10_000, 10 * G), (11_001, 10 * G), 10, True, id="cpu +10.01%"),
    pytest.param((10_000, 10 * G), (9_000, 10 * G), 10, False, id="cpu -10% exactly"),
    pytest.param((10_000, 10 * G), (8_999, 10 * G), 10, True, id="cpu -10.01%"),
    pytest.param((10_000, 10 * G), (10_000, 11 * G + 1), 10, True, id="memory +10%+1B"),
    pytest.param((0, 0), (1, 0), 10, True, id="from zero any change counts"),
    pytest.param((0, 0), (0, 0), 10, False, id="zero to zero"),
    pytest.param((10_000, 10 * G), (10_500, 10 * G), 300, False, id="300 s exactly: not yet"),
    pytest.param((10_000, 10 * G), (10_500, 10 * G), 301, True, id="301 s: refresh"),
    pytest.param((None, None), (10_000, 10 * G), 10, True, id="resource appears"),
    pytest.param((10_000, 10 * G), (None, None), 10, True, id="resource removed (degrade/disable)"),
    pytest.param((None, None), (None, None), 10, False, id="both absent"),
])
def test_needs_update_thresholds(old: tuple[int | None, int | None], new: tuple[int | None, int | None],
                                 since: float, expected: bool) -> None:
    assert needs_update(BatchValues(*old), BatchValues(*new), NOW - since, NOW, strategy()) is expected


def test_needs_update_without_previous_write() -> None:
    assert needs_update(BatchValues(1, 1), BatchValues(1, 1), None, NOW, strategy())


def test_needs_update_follows_node_overrides() -> None:
    # full-template's anolis override: 360 s / 0.2.
    custom = strategy(updateTimeThresholdSeconds=360, resourceDiffThreshold=0.2)
    assert not needs_update(BatchValues(10_000, G), BatchValues(11_900, G), NOW - 359, NOW, custom)
    assert needs_update(BatchValues(10_000, G), BatchValues(12_001, G), NOW - 359, NOW, custom)
    assert needs_update(BatchValues(10_000, G), BatchValues(10_000, G), NOW - 361, NOW, custom)


def test_result_feeds_needs_update() -> None:
    first = calculate(node(), _PODS, _METRIC, strategy(cpuReclaimThresholdPercent=65), NOW)
    assert isinstance(first, BatchResult) and first.values == BatchValues(25_000, 33 * G)
    assert not needs_update(first, first, NOW - 1, NOW, strategy())


def test_pod_input_from_pod() -> None:
    converted = PodInput.from_pod(pod_from_json({
        "metadata": {"uid": "u1", "name": "p", "namespace": "ns", "labels": {"koordinator.sh/qosClass": "LSE"}},
        "spec": {"priority": 9100, "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }))
    assert converted.requests == CPUMemory(2_000, 2**30)
    assert converted.limits == CPUMemory(1_000, 0)
    assert converted.is_lse and converted.priority_class is PriorityClass.PROD and converted.key == "ns/p"
