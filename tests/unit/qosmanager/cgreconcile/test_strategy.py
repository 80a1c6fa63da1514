"""The cgreconcile strategy over fake v1 (Anolis) and v2 trees: what lands in the container, pod and kube
QoS cgroups, what is left alone, what is reset, and the decision's numbers.

Worked example used throughout (the NodeSLO of Koordinator's CRD reference sample, memoryQOS 20/40/80, on
the LS and BE classes; a 16 GiB node with 1 GiB reserved, so 15 GiB allocatable):

* LS pod ``ls``, container ``main`` requesting 1 GiB, limited to 2 GiB:
  min = 1073741824 x 20 / 100 = 214748364, low = x 40 / 100 = 429496729,
  high = 1 GiB + 1 GiB x 80 / 100 = 1932735283 -> 1932734464 (page aligned).
* BE pod ``be``, container ``main`` with a batch memory request of 512 MiB and a limit of 1 GiB:
  min = 536870912 x 20 / 100 = 107374182, low = 214748364,
  high = 512 MiB + 512 MiB x 80 / 100 = 966367641 -> 966365184.
* kubepods/burstable: min 214748364, low 429496729; kubepods/besteffort: min 107374182, low 214748364;
  kubepods (the parent of both): min 322122546, low 644245093.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources
from koordlet.apis.sloconfig import configmap_data_from_yaml, render_nodeslo
from koordlet.config.gates import CGROUP_RECONCILE as GATE
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins import cgreconcile
from koordlet.qosmanager.plugins.cgreconcile.podconfig import ANNOTATION_MEMORY_QOS
from koordlet.qosmanager.plugins.cgreconcile.strategy import CgroupReconcile
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import DEFAULT_FEATURES, FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_options, make_pod

MI = 1 << 20
GI = 1 << 30
MAX = (1 << 63) - 1
T0 = 1_700_000_000.0
PAGE = 4096

LS_POD = "kubepods/burstable/poduid-ls"
LS_MAIN = f"{LS_POD}/ls-main"
BE_POD = "kubepods/besteffort/poduid-be"
BE_MAIN = f"{BE_POD}/be-main"
KUBEPODS, BURSTABLE, BESTEFFORT = "kubepods", "kubepods/burstable", "kubepods/besteffort"

ALL = ("memory_min", "memory_low", "memory_high", "memory_wmark_ratio", "memory_wmark_scale_factor",
       "memory_wmark_min_adj", "memory_priority", "memory_use_priority_oom", "memory_oom_group")
ANOLIS_ONLY_ON_V2 = ("memory_wmark_ratio", "memory_wmark_scale_factor", "memory_wmark_min_adj", "memory_priority",
                     "memory_use_priority_oom")

LS_CONTAINER = {"memory_min": 214_748_364, "memory_low": 429_496_729, "memory_high": 1_932_734_464,
                "memory_wmark_ratio": 95, "memory_wmark_scale_factor": 20, "memory_wmark_min_adj": -25,
                "memory_priority": 0, "memory_use_priority_oom": 0, "memory_oom_group": 0}
BE_CONTAINER = {**LS_CONTAINER, "memory_min": 107_374_182, "memory_low": 214_748_364, "memory_high": 966_365_184,
                "memory_wmark_min_adj": 50}
KERNEL_DEFAULTS = {"memory_min": 0, "memory_low": 0, "memory_high": MAX, "memory_wmark_ratio": 0,
                   "memory_wmark_scale_factor": 50, "memory_wmark_min_adj": 0, "memory_priority": 0,
                   "memory_use_priority_oom": 0, "memory_oom_group": 0}


def _without_high(values: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in values.items() if k != "memory_high"}


def _qos(low_min: int, low: int) -> dict[str, int]:
    return {"memory_min": low_min, "memory_low": low, "memory_priority": 0, "memory_use_priority_oom": 0,
            "memory_oom_group": 0}


# ------------------------------------------------------------------------------------------ fixtures


@dataclass
class RecordingExecutor:
    """Passes batches to the real executor and keeps each batch."""

    inner: Any
    batches: list[list[CgroupUpdate]] = field(default_factory=list)

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        batch = list(updates)
        self.batches.append(batch)
        results: list[Result] = self.inner.apply(batch)
        return results

    def forget(self, path: str | None = None) -> None:
        self.inner.forget(path)


def memory_qos(min_pct: int = 20, low_pct: int = 40, throttle: int = 80, enable: bool = True) -> dict[str, Any]:
    return {"enable": enable, "minLimitPercent": min_pct, "lowLimitPercent": low_pct, "throttlingPercent": throttle}


def slo(ls: Mapping[str, Any] | None = None, be: Mapping[str, Any] | None = None,
        lsr: Mapping[str, Any] | None = None) -> NodeSLOSpec:
    classes: dict[str, Any] = {}
    for name, cfg in (("lsClass", ls), ("beClass", be), ("lsrClass", lsr)):
        if cfg is not None:
            classes[name] = {"memoryQOS": dict(cfg)}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": classes}))


ON = slo(ls=memory_qos(), be=memory_qos())


def pod(name: str, qos: str, containers: Mapping[str, tuple[int | None, int | None]], *,
        annotations: Mapping[str, str] | None = None, batch: bool = False, phase: str = "Running") -> PodMeta:
    """A pod whose containers request and limit (request, limit) bytes (batch memory for ``batch``)."""
    meta = make_pod(name, qos, containers=tuple(containers), annotations=annotations, phase=phase)
    specs = []
    for spec in meta.pod.containers:
        request, limit = containers[spec.name]
        if batch:
            specs.append(dataclasses.replace(spec, requests=Resources(batch_memory_bytes=request),
                                             limits=Resources(batch_memory_bytes=limit)))
        else:
            specs.append(dataclasses.replace(spec, requests=Resources(memory_bytes=request),
                                             limits=Resources(memory_bytes=limit)))
    return dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, containers=tuple(specs)))


def ls_pod(annotations: Mapping[str, str] | None = None) -> PodMeta:
    return pod("ls", "LS", {"main": (GI, 2 * GI)}, annotations=annotations)


def be_pod(annotations: Mapping[str, str] | None = None) -> PodMeta:
    return pod("be", "BE", {"main": (512 * MI, GI)}, annotations=annotations, batch=True)


@pytest.fixture
def host(fake_cgroup_host: FakeHost) -> FakeHost:
    """v1 and v2, both with the Anolis files (the v1 memory QoS files exist only there)."""
    fake_cgroup_host.set_mode(fake_cgroup_host.mode, features=DEFAULT_FEATURES | {"anolis"})
    return fake_cgroup_host


@dataclass
class Env:
    host: FakeHost
    informer: FakeInformer
    options: Options
    clock: FakeClock
    executor: RecordingExecutor
    strategy: CgroupReconcile

    def run(self, spec: NodeSLOSpec = ON, enabled: bool = True) -> Decision:
        return self.strategy.run_once(spec, enabled)

    def read(self, rel_dir: str, key: str) -> int:
        text = self.host.read_cgroup(rel_dir, REGISTRY[key]).strip()
        value = MAX if text == "max" else int(text)
        # v1 shows "unlimited" as LONG_MAX rounded down to a page.
        return MAX if value >= MAX - 65535 else value

    def values(self, rel_dir: str, keys: Iterable[str] = ALL) -> dict[str, int]:
        return {k: self.read(rel_dir, k) for k in keys}

    def has(self, rel_dir: str, key: str) -> bool:
        return self.host.cgroup_path(rel_dir, REGISTRY[key]).exists()


def make_env(host: FakeHost, tmp_path: Path, pods: Iterable[PodMeta], *, gates: Mapping[str, bool] | None = None,
             page_size: int = PAGE) -> Env:
    pods = list(pods)
    for d in (BURSTABLE, BESTEFFORT):
        host.mkdir_cgroup(d)
    for meta in pods:
        host.mkdir_cgroup(meta.cgroup_dir)
        for c in meta.containers:
            host.mkdir_cgroup(c.cgroup_dir)
    informer = FakeInformer(pods, make_node(memory_bytes=16 * GI), Reservation(memory_bytes=GI))
    clock = FakeClock(T0)
    options = make_options(host, tmp_path, informer, clock=clock, gates=gates if gates is not None else {GATE: True})
    executor = RecordingExecutor(options.executor)
    options = dataclasses.replace(options, executor=executor)
    return Env(host, informer, options, clock, executor, CgroupReconcile(options, page_size=page_size))


# ------------------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize(("gate", "spec", "expected"), [
    (True, ON, True),
    (True, slo(be=memory_qos()), True),
    (True, slo(lsr=memory_qos()), True),
    (True, slo(ls=memory_qos(enable=False), be=memory_qos(enable=False)), False),
    (True, slo(), False),  # Koordinator's defaults: every class off
    (False, ON, False),
    (None, ON, False),  # the gate is off by default
])
def test_enabled_needs_gate_and_a_class(host: FakeHost, tmp_path: Path, gate: bool | None, spec: NodeSLOSpec,
                                        expected: bool) -> None:
    env = make_env(host, tmp_path, [], gates={} if gate is None else {GATE: gate})
    assert env.strategy.enabled(spec) is expected


def test_registry_factory(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [])
    strategy = cgreconcile.new(env.options)
    assert cgreconcile.NAME == "cgreconcile" == strategy.name
    assert strategy.interval() == env.options.config.reconcile_interval_seconds


# ------------------------------------------------------------------------------------------ the worked example


def test_worked_example_lands_in_every_level(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    decision = env.run()
    assert env.values(LS_MAIN) == LS_CONTAINER
    assert env.values(BE_MAIN) == BE_CONTAINER
    pod_keys = [k for k in ALL if k != "memory_high"]
    assert env.values(LS_POD, pod_keys) == _without_high(LS_CONTAINER)
    assert env.values(BE_POD, pod_keys) == _without_high(BE_CONTAINER)
    qos_keys = list(_qos(0, 0))
    assert env.values(BURSTABLE, qos_keys) == _qos(214_748_364, 429_496_729)
    assert env.values(BESTEFFORT, qos_keys) == _qos(107_374_182, 214_748_364)
    assert env.values(KUBEPODS, qos_keys) == _qos(322_122_546, 644_245_093)
    # 2 containers x 9 + 2 pods x 8 + 3 QoS dirs x 5, in one batch.
    assert len(env.executor.batches) == 1 and len(env.executor.batches[0]) == 49
    assert decision.action == "reconcile"
    assert decision.summary == "memory QoS on 2 pods (BE 1, LS 1): 49 writes, 0 resources unsupported"
    numbers = decision.numbers
    assert (numbers["pods"], numbers["by_class"], numbers["writes"], numbers["unsupported"]) == (
        2, {"LS": 1, "BE": 1}, 49, {})
    assert numbers["node_allocatable_bytes"] == 15 * GI
    ls = numbers["pod_values"]["default/ls"]
    assert (ls["request_bytes"], ls["memory_min"], ls["memory_low"]) == (GI, 214_748_364, 429_496_729)
    assert ls["containers"]["main"]["memory_high"] == 1_932_734_464
    assert numbers["qos"][KUBEPODS]["memory_min"] == 322_122_546


def test_unchanged_values_are_not_rewritten_until_the_forced_rewrite(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    env.run()
    env.clock.advance(1)
    second = env.run()
    # Every value goes to the executor every round; it skips what it wrote moments ago.
    assert (second.action, second.numbers["writes"], second.numbers["unchanged"]) == ("none", 0, 49)
    assert len(env.executor.batches) == 2 and len(env.executor.batches[-1]) == 49
    env.clock.advance(env.options.config.resource_force_update_seconds)
    third = env.run()
    # Past the window every value is read back: all still hold, so none is written again (a drifted one is:
    # the next test).
    assert (third.numbers["writes"], third.numbers["unchanged"]) == (0, 49)


def test_values_behind_our_back_are_repaired_by_the_forced_rewrite(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod()])
    env.run()
    env.host.write_cgroup(LS_MAIN, REGISTRY["memory_min"], "0\n")
    env.clock.advance(env.options.config.resource_force_update_seconds)
    env.run()
    assert env.read(LS_MAIN, "memory_min") == 214_748_364


def test_changes_to_the_slo_or_the_pod_are_followed(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod()])
    env.run()
    env.clock.advance(1)
    # minLimitPercent 20 -> 50: 1 GiB x 50 / 100.
    env.run(slo(ls=memory_qos(min_pct=50), be=memory_qos()))
    assert env.read(LS_MAIN, "memory_min") == GI // 2
    # The pod now requests 2 GiB (a new PodMeta from the informer), limit 2 GiB: high = request.
    env.informer.pod_list[0] = pod("ls", "LS", {"main": (2 * GI, 2 * GI)})
    env.clock.advance(1)
    decision = env.run(slo(ls=memory_qos(min_pct=50), be=memory_qos()))
    # low = 2 GiB x 40 / 100 = 858993459 is below min and raised to it.
    assert env.values(LS_MAIN, ("memory_min", "memory_low", "memory_high")) == {
        "memory_min": GI, "memory_low": GI, "memory_high": 2 * GI}
    assert env.values(BURSTABLE, ("memory_min", "memory_low")) == {"memory_min": GI, "memory_low": GI}
    # Only what changed was written: min, low, high of the container and min, low of the pod, burstable
    # and kubepods; the other values of the container (9), pod (8), kubepods, burstable and besteffort
    # (5 each: BE is on although it has no pod) were already in place: 32 - 9 = 23.
    assert len(env.executor.batches[-1]) == 32
    assert (decision.numbers["writes"], decision.numbers["unchanged"]) == (9, 23)


def test_restarted_container_gets_values_in_its_new_cgroup(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod()])
    env.run()
    first = env.informer.pod_list[0]
    restarted = dataclasses.replace(first, containers=(dataclasses.replace(first.containers[0],
                                                                           cgroup_dir=f"{LS_POD}/ls-main2"),))
    host.mkdir_cgroup(f"{LS_POD}/ls-main2")
    env.informer.pod_list[0] = restarted
    env.clock.advance(1)
    decision = env.run()
    assert env.values(f"{LS_POD}/ls-main2") == LS_CONTAINER
    assert decision.numbers["writes"] == 9  # the new container only; the rest is in place


@pytest.mark.parametrize(("page_size", "high"), [(4096, 1_932_734_464), (65536, 1_932_722_176)])
def test_memory_high_page_aligned(host: FakeHost, tmp_path: Path, page_size: int, high: int) -> None:
    env = make_env(host, tmp_path, [ls_pod()], page_size=page_size)
    env.run()
    assert env.read(LS_MAIN, "memory_high") == high
    assert high % page_size == 0


def test_container_without_limit_throttles_against_node_allocatable(host: FakeHost, tmp_path: Path) -> None:
    # 1 GiB + (15 GiB - 1 GiB) x 80 / 100 = 13099650252 -> 13099646976.
    env = make_env(host, tmp_path, [pod("ls", "LS", {"main": (GI, None)})])
    env.run()
    assert env.read(LS_MAIN, "memory_high") == 13_099_646_976


def test_pod_sums_containers_and_guarantees_hold(host: FakeHost, tmp_path: Path) -> None:
    # min 100% > low 50%: low is raised to min; a container without request is protected by nothing.
    spec = slo(ls=memory_qos(min_pct=100, low_pct=50, throttle=0))
    meta = pod("ls", "LS", {"main": (GI, 2 * GI), "side": (None, GI)})
    env = make_env(host, tmp_path, [meta])
    env.run(spec)
    assert env.values(LS_MAIN, ("memory_min", "memory_low", "memory_high")) == {
        "memory_min": GI, "memory_low": GI, "memory_high": MAX}
    assert env.values(f"{LS_POD}/ls-side", ("memory_min", "memory_low")) == {"memory_min": 0, "memory_low": 0}
    assert env.values(LS_POD, ("memory_min", "memory_low")) == {"memory_min": GI, "memory_low": GI}
    assert env.values(BURSTABLE, ("memory_min", "memory_low")) == {"memory_min": GI, "memory_low": GI}


def test_class_oom_knobs_reach_the_qos_level(host: FakeHost, tmp_path: Path) -> None:
    spec = slo(ls={**memory_qos(), "priorityEnable": 1, "priority": 9, "oomKillGroup": 1})
    env = make_env(host, tmp_path, [ls_pod()])
    env.run(spec)
    knobs = ("memory_priority", "memory_use_priority_oom", "memory_oom_group")
    assert env.values(BURSTABLE, knobs) == {"memory_priority": 9, "memory_use_priority_oom": 1,
                                            "memory_oom_group": 1}
    assert env.values(LS_MAIN, knobs) == env.values(LS_POD, knobs) == env.values(BURSTABLE, knobs)
    # kubepods follows LSR's (off) knobs.
    assert env.values(KUBEPODS, knobs) == {"memory_priority": 0, "memory_use_priority_oom": 0, "memory_oom_group": 0}


def test_shared_sample_configmap_and_auto_pod(host: FakeHost, tmp_path: Path, shared_dir: Path) -> None:
    """Koordinator's memory-qos docs: LS and BE enabled with the recommended values, the redis demo pod
    (2Gi request, 6Gi limit) with policy auto: no protection or throttling by default, async reclaim on."""
    samples = shared_dir / "reference" / "koordinator-samples"
    data = configmap_data_from_yaml((samples / "slo-configs" / "memory-qos-enable-ls-be.yaml").read_text())
    spec, errors = render_nodeslo(data, {})
    assert errors == ()
    docs = [d for d in yaml.safe_load_all((samples / "pods" / "redis-demo-memory-qos-auto.yaml").read_text())
            if d and d.get("kind") == "Pod"]
    redis = docs[0]
    annotation = redis["metadata"]["annotations"][ANNOTATION_MEMORY_QOS]
    resources = redis["spec"]["containers"][0]["resources"]
    assert (resources["requests"]["memory"], resources["limits"]["memory"]) == ("2Gi", "6Gi")
    meta = pod("ls", "LS", {"main": (2 * GI, 6 * GI)}, annotations={ANNOTATION_MEMORY_QOS: annotation})
    env = make_env(host, tmp_path, [meta])
    assert env.strategy.enabled(spec.with_defaults())
    decision = env.run(spec.with_defaults())
    assert env.values(LS_MAIN) == {**KERNEL_DEFAULTS, "memory_wmark_ratio": 95, "memory_wmark_scale_factor": 20,
                                   "memory_wmark_min_adj": -25}
    assert decision.numbers["pod_values"]["default/ls"]["policy"] == "auto"


def test_shared_crd_sample_be_values(host: FakeHost, tmp_path: Path, shared_dir: Path) -> None:
    """The CRD reference NodeSLO: BE memoryQOS 20/40/80 gives the worked BE numbers."""
    doc = yaml.safe_load((shared_dir / "reference/koordinator-samples/crs/nodeslo-crd-reference-sample.yaml")
                         .read_text())
    spec = merge_over_defaults(NodeSLOSpec.from_json(doc["spec"]))
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    env.run(spec)
    assert env.values(BE_MAIN) == BE_CONTAINER
    assert env.values(LS_MAIN) == KERNEL_DEFAULTS  # LS is off in that sample: untouched


# ------------------------------------------------------------------------------------------ per-pod choices


def _untouched(env: Env, *dirs: str) -> None:
    for d in dirs:
        assert env.values(d) == KERNEL_DEFAULTS, d


@pytest.mark.parametrize(("annotation", "spec", "expected"), [
    # auto on a disabled class: the recommended LS values (no protection), async reclaim on.
    ('{"policy": "auto"}', slo(be=memory_qos()),
     {**KERNEL_DEFAULTS, "memory_wmark_ratio": 95, "memory_wmark_scale_factor": 20, "memory_wmark_min_adj": -25}),
    # auto with fields: min 100% of 1 GiB.
    ('{"policy": "auto", "minLimitPercent": 100}', slo(be=memory_qos()),
     {**KERNEL_DEFAULTS, "memory_min": GI, "memory_wmark_ratio": 95, "memory_wmark_scale_factor": 20,
      "memory_wmark_min_adj": -25}),
    # default with a field over the enabled class.
    ('{"lowLimitPercent": 50}', ON, {**LS_CONTAINER, "memory_low": GI // 2}),
    # none: left alone although the class is on.
    ('{"policy": "none"}', ON, KERNEL_DEFAULTS),
])
def test_annotation_overrides(host: FakeHost, tmp_path: Path, annotation: str, spec: NodeSLOSpec,
                              expected: dict[str, int]) -> None:
    env = make_env(host, tmp_path, [ls_pod({ANNOTATION_MEMORY_QOS: annotation})])
    env.run(spec)
    assert env.values(LS_MAIN) == expected


def test_garbage_annotation_skips_the_pod_and_says_why(host: FakeHost, tmp_path: Path) -> None:
    bad = ls_pod({ANNOTATION_MEMORY_QOS: '{"policy": "auto", "minLimitPercent": 101}'})
    env = make_env(host, tmp_path, [bad, be_pod()])
    decision = env.run()
    _untouched(env, LS_MAIN)
    assert env.values(LS_POD, ("memory_min", "memory_low")) == {"memory_min": 0, "memory_low": 0}
    assert env.values(BE_MAIN) == BE_CONTAINER
    # The skipped pod adds nothing to the sums.
    assert env.values(KUBEPODS, ("memory_min",)) == {"memory_min": 107_374_182}
    assert "1 pods skipped (bad memoryQOS annotation)" in decision.summary
    (skipped,) = decision.numbers["skipped_pods"]
    assert "default/ls" in skipped and "minLimitPercent: must be 0..100, got 101" in skipped


def test_pods_of_a_disabled_class_or_finished_are_left_alone(host: FakeHost, tmp_path: Path) -> None:
    lsr = pod("lsr", "LSR", {"main": (GI, GI)})
    done = pod("done", "LS", {"main": (GI, 2 * GI)}, phase="Succeeded")
    env = make_env(host, tmp_path, [lsr, done, be_pod()])
    decision = env.run()
    _untouched(env, lsr.containers[0].cgroup_dir, done.containers[0].cgroup_dir)
    assert decision.numbers["by_class"] == {"BE": 1}
    assert decision.summary.startswith("memory QoS on 1 pods (BE 1): ")


def test_pod_switched_to_none_is_reset(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    env.run()
    assert env.values(LS_MAIN) == LS_CONTAINER
    env.informer.pod_list[0] = ls_pod({ANNOTATION_MEMORY_QOS: '{"policy": "none"}'})
    env.clock.advance(1)
    decision = env.run()
    _untouched(env, LS_MAIN)
    assert env.values(LS_POD, [k for k in ALL if k != "memory_high"]) == _without_high(KERNEL_DEFAULTS)
    assert env.values(BURSTABLE, ("memory_min", "memory_low")) == {"memory_min": 0, "memory_low": 0}
    assert env.values(KUBEPODS, ("memory_min", "memory_low")) == {"memory_min": 107_374_182,
                                                                   "memory_low": 214_748_364}
    assert decision.numbers["reset_pods"] == ["default/ls"]
    assert "1 pods reset" in decision.summary
    # Reset once, not every round, and the reset pod's cgroups are left alone from then on.
    env.clock.advance(1)
    assert env.run().numbers["reset_pods"] == []
    assert not {LS_POD, LS_MAIN} & {u.rel_dir for u in env.executor.batches[-1]}


def test_disable_resets_everything_it_set(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    env.run()
    env.clock.advance(1)
    decision = env.run(enabled=False)
    for d in (LS_MAIN, BE_MAIN):
        assert env.values(d) == KERNEL_DEFAULTS, d
    for d in (LS_POD, BE_POD):
        assert env.values(d, [k for k in ALL if k != "memory_high"]) == _without_high(KERNEL_DEFAULTS), d
    for d in (KUBEPODS, BURSTABLE, BESTEFFORT):
        assert env.values(d, _qos(0, 0)) == _qos(0, 0), d
    assert decision.action == "recover"
    # 2 containers x 9 + 2 pods x 8 + 3 QoS dirs x 5 = 49 updates; the OOM knobs were 0 already
    # (2 x 3 + 2 x 3 + 3 x 3 = 21, written less than the force-update interval ago), the rest is written.
    assert decision.summary == ("memory QoS off: reset 2 pods and 3 QoS dirs to the kernel defaults: 28 writes, "
                                "21 values already in place")
    assert (decision.numbers["updates"], decision.numbers["writes"], decision.numbers["unchanged"]) == (49, 28, 21)
    assert sorted(decision.numbers["reset_pods"]) == ["default/be", "default/ls"]
    again = env.run(enabled=False)
    assert (again.action, again.summary) == ("none", "memory QoS off: nothing of ours to reset")


def test_disable_leaves_untouched_pods_alone(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod({ANNOTATION_MEMORY_QOS: '{"policy": "none"}'})])
    env.host.write_cgroup(LS_MAIN, REGISTRY["memory_low"], "12345\n")  # someone else's value
    env.run()
    env.run(enabled=False)
    assert env.read(LS_MAIN, "memory_low") == 12345


# ------------------------------------------------------------------------------------------ kernel support


def test_v1_without_anolis_writes_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    env = make_env(fake_host, tmp_path, [ls_pod(), be_pod()])
    decision = env.run()
    assert decision.action == "skip"
    assert "memory.min unsupported on this kernel (cgroup v1 without Anolis)" in decision.summary
    assert set(decision.numbers["unsupported"]) == set(ALL)
    assert env.executor.batches == []
    for d in (LS_MAIN, LS_POD, KUBEPODS):
        assert not any(env.has(d, k) for k in ALL)


def test_v2_without_anolis_reports_each_missing_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = FakeHost(tmp_path / "host", mode="v2")
    probes: list[str] = []
    original = CgroupFile.supported

    def counting(self: CgroupFile, layout: Any, rel_dir: str = "") -> Any:
        probes.append(self.key)
        return original(self, layout, rel_dir)

    monkeypatch.setattr(CgroupFile, "supported", counting)
    many = [ls_pod(), be_pod(), pod("ls2", "LS", {"a": (GI, GI), "b": (GI, GI)})]
    env = make_env(host, tmp_path, many)
    decision = env.run()
    assert sorted(probes) == sorted(ALL)  # once per resource per round, whatever the number of pods
    assert set(decision.numbers["unsupported"]) == set(ANOLIS_ONLY_ON_V2)
    assert decision.numbers["unsupported"]["memory_wmark_ratio"] == (
        "memory.wmark_ratio unsupported on this kernel (cgroup v2 without Anolis)")
    assert "5 resources unsupported" in decision.summary
    assert decision.numbers["problems"] == []
    assert {u.key for u in env.executor.batches[0]} == {"memory_min", "memory_low", "memory_high",
                                                             "memory_oom_group"}
    assert env.values(LS_MAIN, ("memory_min", "memory_low", "memory_high", "memory_oom_group")) == {
        k: LS_CONTAINER[k] for k in ("memory_min", "memory_low", "memory_high", "memory_oom_group")}
    assert not any(env.has(LS_MAIN, k) for k in ANOLIS_ONLY_ON_V2)
    env.clock.advance(1)
    probes.clear()
    env.run()
    assert sorted(probes) == sorted(ALL)


def test_missing_kubepods_skips_the_round(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    informer = FakeInformer([ls_pod()])
    options = make_options(fake_cgroup_host, tmp_path, informer, gates={GATE: True})
    decision = CgroupReconcile(options).run_once(ON)
    assert decision.action == "skip"
    assert "kubepods memory cgroup" in decision.summary and "does not exist" in decision.summary


# ------------------------------------------------------------------------------------------ races


def test_vanished_pod_dirs_are_no_error(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod(), be_pod()])
    for d in (LS_POD,):
        for path in host.cgroup_root.rglob(d.rsplit("/", 1)[-1]):
            shutil.rmtree(path)
    decision = env.run()
    assert env.values(BE_MAIN) == BE_CONTAINER
    assert decision.numbers["gone"] == 17  # the LS container's 9 files and its pod's 8
    assert "17 writes to vanished cgroups" in decision.summary
    assert decision.numbers["problems"] == []
    # Disabling after the pod went does not raise either.
    env.informer.pod_list.pop(0)
    env.clock.advance(1)
    env.run()
    assert env.run(enabled=False).action == "recover"


def test_decision_is_json_ready(host: FakeHost, tmp_path: Path) -> None:
    env = make_env(host, tmp_path, [ls_pod({ANNOTATION_MEMORY_QOS: "garbage"}), be_pod()])
    json.dumps(env.run().to_json())
    json.dumps(env.run(enabled=False).to_json())


def test_memory_qos_cfg_stays_frozen_input(host: FakeHost, tmp_path: Path) -> None:
    """Rounds never modify the NodeSLO they are given."""
    spec = ON
    before = spec.to_json()
    env = make_env(host, tmp_path, [ls_pod({ANNOTATION_MEMORY_QOS: '{"policy": "auto"}'})])
    env.run(spec)
    assert spec.to_json() == before
