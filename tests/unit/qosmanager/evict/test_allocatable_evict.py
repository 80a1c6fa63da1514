"""Allocatable-based eviction: cpuevict's ``evictByAllocatable`` policy and ``CPUAllocatableEvict``,
memoryevict's ``MemoryAllocatableEvict`` (Koordinator ``calculate{Milli,}ReleaseByAllocatableThresholdPercent``),
with the Node's allocatable as the companion delivers it (``StatesInformer.kube_node()``).

CPUAllocatableEvict worked example: batch pods b-big (priority 5000, 5000m batch-cpu), b-mid (5000, 4000m),
b-small (5500, 3000m) request 12000m; the Node's batch-cpu allocatable is 10000 -> 120% > threshold 110%:
release 12000 - 90% x 10000 = 3000m.  Order: priority 5000 first, largest request first: b-big (5000m)
covers it alone.  Mid pod m-1 (7000, 2000m mid-cpu) against mid-cpu allocatable 4000: 50%, nothing.

MemoryAllocatableEvict worked example: batch-memory requested 6 + 4 + 2 = 12 GiB (the same pods) against
10 GiB allocatable -> 120% > 110%: release (1.2 - 0.9) x 10 GiB = 3 GiB; b-big (6 GiB) covers it.

evictByAllocatable worked example (BECPUEvict, lower 30%, upper 50%): BE requests 8 cores, its real limit
is 8 cores too (satisfied by evictByRealLimit), but the Node offers batch only 2000m: satisfaction
2000 / 8000 = 25% <= 30%, BE uses 1.9 cores = 95% of 2000m: release 8000 x (0.50 - 0.25) = 2000m."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources, pod_from_json
from koordlet.apis.sloconfig import configmap_data_from_yaml, render_nodeslo
from koordlet.qosmanager import allocevict
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.evict import test_cpuevict as cpu_t
from tests.unit.qosmanager.evict import test_memoryevict as mem_t
from tests.unit.qosmanager.fakes import make_pod

GIB = 1 << 30
ENABLED = {"koordinator.sh/eviction-enabled": "true"}
CPU_SLO = {"cpuAllocatableEvictThresholdPercent": 110, "cpuAllocatableEvictLowerPercent": 90,
           "allocatableEvictPriorityThreshold": 7999}
MEM_SLO = {"memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 90,
           "allocatableEvictPriorityThreshold": 7999}


def kube(**allocatable: str) -> KubeNodeInfo:
    return KubeNodeInfo(name="node-a", capacity={"cpu": "8", "memory": "16Gi"},
                        allocatable={"cpu": "8", "memory": "16Gi", **allocatable})


def batch(name: str, priority: int, cpu_milli: int, memory: int, *, enabled: bool = True) -> PodMeta:
    return make_pod(name, "BE", priority=priority, labels=ENABLED if enabled else None,
                    requests=Resources(batch_cpu_milli=cpu_milli, batch_memory_bytes=memory))


def pods() -> list[PodMeta]:
    return [batch("b-small", 5500, 3000, 2 * GIB), batch("b-mid", 5000, 4000, 4 * GIB),
            batch("b-big", 5000, 5000, 6 * GIB),
            make_pod("m-1", "LS", priority=7000, labels=ENABLED,
                     requests=Resources(mid_cpu_milli=2000, mid_memory_bytes=1 * GIB)),
            make_pod("prod", "LS", priority=9000, labels=ENABLED, requests=Resources(cpu_milli=4000))]


SAMPLES = {"uid-b-small": 0.5, "uid-b-mid": 0.5, "uid-b-big": 0.5, "uid-m-1": 0.5, "uid-prod": 1.0}
NODE = {"kubernetes.io/batch-cpu": "10000", "kubernetes.io/batch-memory": "10Gi",
        "kubernetes.io/mid-cpu": "4000", "kubernetes.io/mid-memory": "8Gi"}


# ------------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(("threshold", "lower", "priority", "error"), [
    (110, 90, 7999, None),
    (None, 90, 7999, "cpuAllocatableEvictThresholdPercent is not set"),
    (-1, 90, 7999, "cpuAllocatableEvictThresholdPercent -1 must be at least 0"),
    (110, None, 7999, "cpuAllocatableEvictLowerPercent is not set"),
    (110, 110, 7999, "cpuAllocatableEvictLowerPercent 110 must be below cpuAllocatableEvictThresholdPercent 110"),
    (110, 90, None, "allocatableEvictPriorityThreshold is not set"),
    (110, 90, 8000, "allocatableEvictPriorityThreshold 8000 must be at most 7999"),
])
def test_config_is_checked_as_upstream(threshold: int | None, lower: int | None, priority: int | None,
                                       error: str | None) -> None:
    found = allocevict.config_error(allocevict.CPU, threshold, lower, priority)
    assert found == error if error is None else found is not None and found.startswith(error)


def test_requests_by_class_and_the_release_per_resource() -> None:
    plan = allocevict.release(allocevict.CPU, pods(), kube(**NODE), 110, 90, 7999)
    # The prod pod is above the priority threshold (and asks for plain cpu, which is not computed).
    assert plan.requested == {"kubernetes.io/batch-cpu": 12000, "kubernetes.io/mid-cpu": 2000}
    assert plan.release == {"kubernetes.io/batch-cpu": 3000}
    memory = allocevict.release(allocevict.MEMORY, pods(), kube(**NODE), 110, 90, 7999)
    assert memory.release == {"kubernetes.io/batch-memory": int((12 * GIB / (10 * GIB) - 0.9) * (10 * GIB))}
    # A resource the Node has no allocatable of releases everything asked for (upstream: !ok || IsZero).
    bare = allocevict.release(allocevict.CPU, pods(), kube(), 110, 90, 7999)
    assert bare.release == {"kubernetes.io/batch-cpu": 12000, "kubernetes.io/mid-cpu": 2000}
    # The priority threshold excludes b-small (5500) when set to 5000.
    assert allocevict.release(allocevict.CPU, pods(), kube(**NODE), 110, 90, 5000).requested == {
        "kubernetes.io/batch-cpu": 9000}


# ------------------------------------------------------------------------------------------ CPUAllocatableEvict


def cpu_world(host: FakeHost, tmp_path: Path, gates: dict[str, bool], node: KubeNodeInfo | None,
              listed: list[PodMeta] | None = None, samples: dict[str, float] | None = None) -> cpu_t.World:
    world = cpu_t.make_world(host, tmp_path, pods() if listed is None else listed, gates=gates)
    world.informer.kube = node
    world.pod_cpu(SAMPLES if samples is None else samples)
    return world


def test_cpu_allocatable_evicts_the_largest_request_first(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = cpu_world(fake_cgroup_host, tmp_path, {"CPUAllocatableEvict": True}, kube(**NODE))
    decision = world.run(**CPU_SLO)
    assert world.evicted() == ["default/b-big"], decision.summary
    assert decision.action == "evict"
    assert decision.numbers["allocatable_release"] == {"kubernetes.io/batch-cpu": 3000}
    assert world.metrics.evictions == [("EvictPodByCPUAllocatable", "default", "b-big")]
    assert "batch-cpu requested 12000 is 120% of its allocatable 10000" in decision.summary


def test_cpu_allocatable_order_eviction_enabled_and_samples(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    listed = pods()
    listed[2] = batch("b-big", 5000, 5000, 6 * GIB, enabled=False)  # not eviction-enabled: never a victim
    world = cpu_world(fake_cgroup_host, tmp_path, {"CPUAllocatableEvict": True}, kube(**NODE), listed,
                      {k: v for k, v in SAMPLES.items() if k != "uid-b-mid"})  # b-mid: no CPU sample
    world.run(**CPU_SLO)
    assert world.evicted() == ["default/b-small"], "b-big is not enabled, b-mid has no sample: b-small's 3000m"


@pytest.mark.parametrize(("node", "action", "words"), [
    (None, "skip", "CPUAllocatableEvict: the companion has not sent the Node's allocatable"),
    (kube(**{**NODE, "kubernetes.io/batch-cpu": "12000"}), "none", "not above 110%"),
])
def test_cpu_allocatable_does_nothing_without_node_or_below_threshold(
        fake_cgroup_host: FakeHost, tmp_path: Path, node: KubeNodeInfo | None, action: str, words: str) -> None:
    world = cpu_world(fake_cgroup_host, tmp_path, {"CPUAllocatableEvict": True}, node)
    decision = world.run(**CPU_SLO)
    assert (decision.action, world.evicted()) == (action, [])
    assert words in decision.summary


def test_cpu_allocatable_needs_its_gate(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = cpu_world(fake_cgroup_host, tmp_path, {"CPUEvict": True}, kube(**NODE))
    decision = world.run(**CPU_SLO, cpuEvictThresholdPercent=99, evictEnabledPriorityThreshold=6000)
    assert world.evicted() == [] and "CPUAllocatableEvict" not in decision.summary
    assert world.strategy.enabled(cpu_t.slo()) is True
    alone = cpu_world(fake_cgroup_host, tmp_path / "alone", {"CPUAllocatableEvict": True}, kube(**NODE))
    assert alone.strategy.enabled(cpu_t.slo()) is True
    assert alone.strategy.enabled(cpu_t.slo(enable=False)) is False


def test_be_cpu_evict_release_counts_for_the_allocatable_trigger(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # BECPUEvict needs 2000m of batch-cpu request; CPUAllocatableEvict 3000m of the same account (upstream:
    # one released list per target and resource).  BE victims by priority then usage/request: b-mid
    # (0.5/4000) and b-big (0.5/5000) at 5000 -> b-mid first (higher ratio): 4000m >= both.
    world = cpu_world(fake_cgroup_host, tmp_path, {"BECPUEvict": True, "CPUAllocatableEvict": True}, kube(**NODE))
    world.be_series([1.9], [8.0], [2.0])
    decision = world.run(**cpu_t.BE_SLO, **CPU_SLO)
    assert world.evicted() == ["default/b-mid"], decision.summary
    assert decision.numbers["triggers"] == ["BECPUEvict", "CPUAllocatableEvict"]


# ------------------------------------------------------------------------------------------ evictByAllocatable


def be_world(host: FakeHost, tmp_path: Path, batch_cpu: str | None) -> cpu_t.World:
    world = cpu_t.make_world(host, tmp_path)
    world.informer.kube = None if batch_cpu is None else kube(**{"kubernetes.io/batch-cpu": batch_cpu})
    world.be_series([1.9], [8.0], [8.0])  # the real limit satisfies BE: only the allocatable starves it
    world.pod_cpu()
    return world


@pytest.mark.parametrize(("batch_cpu", "evicted", "release"), [
    ("2000", ["default/be-b", "default/be-a"], 2000),
    ("8000", [], None),
    ("0", ["default/be-b", "default/be-a"], 3999),  # zero counts as 1m: 8000 x (0.5 - 1/8000)
])
def test_evict_by_allocatable_uses_the_nodes_batch_cpu(fake_cgroup_host: FakeHost, tmp_path: Path, batch_cpu: str,
                                                        evicted: list[str], release: int | None) -> None:
    world = be_world(fake_cgroup_host, tmp_path, batch_cpu)
    decision = world.run(**cpu_t.BE_SLO, cpuEvictPolicy="evictByAllocatable")
    assert world.evicted() == evicted, decision.summary
    assert decision.numbers.get("be_need_release_milli") == release
    by_limit = be_world(fake_cgroup_host, tmp_path / "limit", batch_cpu)
    by_limit.run(**cpu_t.BE_SLO)
    assert by_limit.evicted() == [], "evictByRealLimit: an 8-core limit for 8 cores requested is satisfied"


def test_evict_by_allocatable_without_the_node_skips(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = be_world(fake_cgroup_host, tmp_path, None)
    decision = world.run(**cpu_t.BE_SLO, cpuEvictPolicy="evictByAllocatable")
    assert (decision.action, world.evicted()) == ("skip", [])
    assert "batch-cpu allocatable, which the companion has not sent" in decision.summary


# ------------------------------------------------------------------------------------------ MemoryAllocatableEvict


def mem_world(host: FakeHost, tmp_path: Path, gates: dict[str, bool], node: KubeNodeInfo | None,
              node_memory: float | None = 4.0 * GIB) -> mem_t.World:
    world = mem_t.make_world(host, tmp_path, pods(), gates=gates)
    world.informer.kube = node
    world.usage(node_memory, dict.fromkeys(SAMPLES, GIB))
    return world


def test_memory_allocatable_evicts_below_the_usage_threshold(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = mem_world(fake_cgroup_host, tmp_path, {"MemoryAllocatableEvict": True}, kube(**NODE))
    decision = world.run(**MEM_SLO)
    assert world.evicted() == ["default/b-big"], decision.summary
    # Upstream's float64 expression, rounded down: (12 GiB / 10 GiB - 0.9) x 10 GiB = 3 GiB - 1 byte.
    release = int((12 * GIB / (10 * GIB) - 90 / 100) * (10 * GIB))
    assert decision.numbers["allocatable_release"] == {"kubernetes.io/batch-memory": release}
    assert world.metrics.evictions == [("EvictPodByMemoryAllocatable", "default", "b-big")]


@pytest.mark.parametrize("gates", [{"MemoryAllocatableEvict": True, "BEMemoryEvict": True},
                                   {"MemoryAllocatableEvict": True, "MemoryEvict": True}])
def test_memory_allocatable_runs_while_the_usage_triggers_have_nothing(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                                      gates: dict[str, bool]) -> None:
    world = mem_world(fake_cgroup_host, tmp_path, gates, kube(**NODE), node_memory=None)  # no node sample
    decision = world.run(**MEM_SLO, evictEnabledPriorityThreshold=6000)
    assert world.evicted() == ["default/b-big"], decision.summary
    assert "no fresh node memory sample" in decision.numbers["ignored"][-1]


def test_memory_allocatable_with_the_usage_triggers_in_upstream_order(fake_cgroup_host: FakeHost,
                                                                      tmp_path: Path) -> None:
    # Node at 78% of 16 GiB: BEMemoryEvict needs 1.6 GiB of usage; every pod uses 1 GiB, so by priority then
    # key: b-big, b-mid (priority 5000).  They also release 6 + 4 GiB of batch-memory request, which covers
    # the allocatable trigger's 3 GiB: it evicts nobody more.
    world = mem_world(fake_cgroup_host, tmp_path, {"BEMemoryEvict": True, "MemoryAllocatableEvict": True},
                      kube(**NODE), node_memory=12.5 * GIB)
    decision = world.run(**MEM_SLO)
    assert decision.numbers["triggers"] == ["BEMemoryEvict", "MemoryAllocatableEvict"], decision.summary
    assert world.evicted() == ["default/b-big", "default/b-mid"]
    assert "batch-memory requested" in decision.summary


@pytest.mark.parametrize(("threshold", "words"), [
    ({}, "MemoryAllocatableEvict: invalid config: memoryAllocatableEvictThresholdPercent is not set"),
    (MEM_SLO, "MemoryAllocatableEvict: the companion has not sent the Node's allocatable"),
])
def test_memory_allocatable_skips_without_config_or_node(fake_cgroup_host: FakeHost, tmp_path: Path,
                                                         threshold: dict[str, Any], words: str) -> None:
    world = mem_world(fake_cgroup_host, tmp_path, {"MemoryAllocatableEvict": True}, None)
    decision = world.run(**threshold)
    assert (decision.action, world.evicted(), decision.summary) == ("skip", [], words)


def test_memory_allocatable_needs_its_gate(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    world = mem_world(fake_cgroup_host, tmp_path, {"BEMemoryEvict": True}, kube(**NODE))
    decision = world.run(**MEM_SLO)
    assert world.evicted() == [] and "MemoryAllocatableEvict" not in decision.summary
    alone = mem_world(fake_cgroup_host, tmp_path / "alone", {"MemoryAllocatableEvict": True}, kube(**NODE))
    assert alone.strategy.enabled(mem_t.slo()) is True


# ------------------------------------------------------------------------------------------ the documented samples

SAMPLE_DIR = "reference/koordinator-samples"


def sample_pod(shared_dir: Path) -> PodMeta:
    """The cpu-evict / memory-evict manuals' BE pod (batch-cpu 4k, batch-memory 4Gi, koord-batch).  The
    manuals do not label it, but upstream's allocatable victims must carry koordinator.sh/eviction-enabled."""
    document = yaml.safe_load((shared_dir / SAMPLE_DIR / "pods/be-pod-demo-batch-resources-4k.yaml").read_text())
    document["metadata"].update(uid="uid-be-pod-demo", namespace="default", labels={
        **document["metadata"]["labels"], **ENABLED})
    pod = pod_from_json(document)
    shaped = make_pod("be-pod-demo", "BE", uid=pod.uid, requests=pod.containers[0].requests, labels=pod.labels)
    return dataclasses.replace(shaped, pod=dataclasses.replace(shaped.pod, priority_class_name="koord-batch"))


def sample_slo(shared_dir: Path, name: str) -> NodeSLOSpec:
    data = configmap_data_from_yaml((shared_dir / SAMPLE_DIR / "slo-configs" / name).read_text())
    spec, errors = render_nodeslo(data, {})
    assert errors == ()
    return merge_over_defaults(spec)


@pytest.mark.parametrize(("sample", "gate", "resource", "world"), [
    ("cpu-evict-allocatable.yaml", "CPUAllocatableEvict", "kubernetes.io/batch-cpu", "cpu"),
    ("memory-evict-allocatable.yaml", "MemoryAllocatableEvict", "kubernetes.io/batch-memory", "memory"),
])
@pytest.mark.parametrize(("allocatable", "evicted"), [
    # batch*ThresholdPercent 100: the Node offers what the pod asks for: 100% is not above 110%.
    ({"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "4Gi"}, []),
    # The manuals' step 4 (batchCPUThresholdPercent / batchMemoryThresholdPercent 0): allocatable 0 -> evicted.
    ({"kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"}, ["default/be-pod-demo"]),
])
def test_the_manuals_allocatable_examples(fake_cgroup_host: FakeHost, tmp_path: Path, shared_dir: Path, sample: str,
                                          gate: str, resource: str, world: str, allocatable: dict[str, str],
                                          evicted: list[str]) -> None:
    spec = sample_slo(shared_dir, sample)
    listed = [sample_pod(shared_dir)]
    if world == "cpu":
        w: Any = cpu_world(fake_cgroup_host, tmp_path, {gate: True}, kube(**allocatable), listed,
                           {"uid-be-pod-demo": 3.5})
    else:
        w = mem_t.make_world(fake_cgroup_host, tmp_path, listed, gates={gate: True})
        w.informer.kube = kube(**allocatable)
        w.usage(2.0 * GIB, {"uid-be-pod-demo": 3.0 * GIB})
    decision = w.strategy.run_once(spec)
    assert w.evicted() == evicted, decision.summary
    if evicted:
        assert decision.numbers["allocatable_release"] == {resource: allocevict.pod_request(
            listed[0].pod, allocevict.CPU if world == "cpu" else allocevict.MEMORY)[1]}  # type: ignore[index]
