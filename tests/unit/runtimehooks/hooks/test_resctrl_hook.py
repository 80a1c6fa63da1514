"""resctrl hook: the pod group koordlet-<uid> from node.koordinator.sh/resctrl at PreRunPodSandbox, the
container's rdt_class (pod group, else an enabled class's group), the group's removal at
PreRemovePodSandbox; nothing without resctrl; bad annotations rejected with pod and annotation named."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.nodeslo import NodeSLOSpec, default_nodeslo_spec
from koordlet.apis.pod import Pod
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage, StageResult
from koordlet.runtimehooks.hooks import resctrl
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, make_pod
from tests.unit.qosmanager.resctrl.fakeresctrl import INTEL, FakeKernel, build_tree, make_executor
from tests.unit.qosmanager.test_isolation_samples import holder_spec, sample

ANNOTATION = "node.koordinator.sh/resctrl"
BOTH_GATES = {"Resctrl": True, "RdtResctrl": True}


@dataclasses.dataclass
class Rig:
    kernel: FakeKernel
    executor: ResctrlExecutor
    deps: HookDeps

    def run(self, stage: Stage, meta: PodMeta, *, deps: HookDeps | None = None) -> StageResult:
        pod = dataclasses.replace(meta.pod, kube_qos=None)  # as the runtime describes it
        container = pod.containers[0] if stage not in (Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_REMOVE_POD_SANDBOX) \
            else None
        request = HookRequest(stage, pod, meta.cgroup_dir, container, meta.containers[0].container_id
                              if container else "")
        return HookRunner([resctrl.new(deps or self.deps)]).run(request)


def rig(host: FakeHost, spec: NodeSLOSpec | None = None, gates: dict[str, bool] | None = None) -> Rig:
    root = Path(host.paths.resctrl_root)
    build_tree(root, cbm_mask="7ff", domains=(0, 1), vendor=INTEL)  # an 11-way L3 on two caches
    host.write_proc("cpuinfo", f"processor\t: 0\nvendor_id\t: {INTEL}\n")
    kernel = FakeKernel(str(root))
    executor = make_executor(root, kernel, FakeClock())
    slo = spec if spec is not None else default_nodeslo_spec()
    deps = HookDeps(layout=host.layout(), gates=BOTH_GATES if gates is None else gates, nodeslo=lambda: slo,
                    resctrl=executor)
    return Rig(kernel, executor, deps)


def annotated(name: str = "p", qos: str = "LS", text: str | None = None) -> PodMeta:
    value = text if text is not None else ('{"llc": {"schemata": {"range": [0, 30]}}, '
                                           '"mb": {"schemata": {"percent": 20}}}')
    return make_pod(name, qos, annotations={ANNOTATION: value})


def class_slo(**classes: Any) -> NodeSLOSpec:
    return NodeSLOSpec.from_json({"resourceQOSStrategy": {
        k: {"resctrlQOS": v} for k, v in classes.items()}}).with_defaults()


def test_stages_and_gates() -> None:
    assert (resctrl.GATE, resctrl.POD_GATE) == ("RdtResctrl", "Resctrl")
    assert resctrl.new(HookDeps()).stages == frozenset(
        {Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_REMOVE_POD_SANDBOX})


def test_pod_group_lifecycle_with_the_blog_sample(fake_host: FakeHost, shared_dir: Path) -> None:
    # W blog release-v1.6.0: LLC range [0, 30], MB 20 %.
    doc = yaml.safe_load(sample(shared_dir, "pods/resctrl-pod-annotation.yaml"))
    meta = make_pod("p", "LS", annotations=doc["metadata"]["annotations"])
    r = rig(fake_host)
    result = r.run(Stage.PRE_RUN_POD_SANDBOX, meta)
    assert result.errors == [] and result.adjustment.empty()
    group = "koordlet-uid-p"
    assert r.kernel.groups() == [group]
    # 11 ways: [ceil(11*0%), ceil(11*30%)) = ways 0..3 -> f; Intel MB 20 %.
    lines = [line.strip() for line in r.kernel.schemata(group).splitlines() if line.strip()]
    assert lines == ["L3:0=f;1=f", "MB:0=20;1=20"]

    created = r.run(Stage.PRE_CREATE_CONTAINER, meta)
    assert created.errors == [] and created.adjustment.values == {"rdt_class": group}
    assert len(r.kernel.schemata_writes) == 1  # unchanged schemata is not rewritten

    removed = r.run(Stage.PRE_REMOVE_POD_SANDBOX, meta)
    assert removed.errors == [] and r.kernel.groups() == []
    assert ("rmdir", group) in r.kernel.dirs
    # Removing again (or a pod that never had a group) is fine.
    assert r.run(Stage.PRE_REMOVE_POD_SANDBOX, meta).errors == []


def test_create_container_makes_a_missing_pod_group(fake_host: FakeHost) -> None:
    r = rig(fake_host)
    meta = annotated()
    result = r.run(Stage.PRE_CREATE_CONTAINER, meta)
    assert result.errors == [] and result.adjustment.values == {"rdt_class": "koordlet-uid-p"}
    assert r.kernel.groups() == ["koordlet-uid-p"]


def test_class_group_when_enabled_and_made(fake_host: FakeHost) -> None:
    spec = class_slo(beClass={"enable": True}, lsClass={"enable": False})
    r = rig(fake_host, spec)
    be, ls, lsr = make_pod("be", "BE"), make_pod("ls", "LS"), make_pod("lsr", "LSR")
    # The strategy has not made the BE group yet: no class (runc would refuse an unknown one).
    assert r.run(Stage.PRE_CREATE_CONTAINER, be).adjustment.empty()
    Path(r.executor.root, "BE").mkdir()
    assert r.run(Stage.PRE_CREATE_CONTAINER, be).adjustment.values == {"rdt_class": "BE"}
    Path(r.executor.root, "LS").mkdir()
    assert r.run(Stage.PRE_CREATE_CONTAINER, ls).adjustment.empty()  # LS not enabled
    assert r.run(Stage.PRE_CREATE_CONTAINER, lsr).adjustment.empty()  # LSR neither
    # Class gate off: nothing.
    no_gate = dataclasses.replace(r.deps, gates={"Resctrl": True, "RdtResctrl": False})
    assert r.run(Stage.PRE_CREATE_CONTAINER, be, deps=no_gate).adjustment.empty()


def test_lse_uses_the_lsr_group(fake_host: FakeHost) -> None:
    r = rig(fake_host, class_slo(lsrClass={"enable": True}))
    Path(r.executor.root, "LSR").mkdir()
    assert r.run(Stage.PRE_CREATE_CONTAINER, make_pod("lse", "LSE")).adjustment.values == {"rdt_class": "LSR"}


def test_sample_config_puts_be_in_its_group(fake_host: FakeHost, shared_dir: Path) -> None:
    spec = holder_spec(sample(shared_dir, "slo-configs/resctrl-llc-mba.yaml"), "resctrl-llc-mba.yaml")
    r = rig(fake_host, spec)
    for group in ("LS", "BE"):
        Path(r.executor.root, group).mkdir()
    assert r.run(Stage.PRE_CREATE_CONTAINER, make_pod("be", "BE")).adjustment.values == {"rdt_class": "BE"}
    assert r.run(Stage.PRE_CREATE_CONTAINER, make_pod("ls", "LS")).adjustment.values == {"rdt_class": "LS"}


def test_pod_gate_off_ignores_the_annotation(fake_host: FakeHost) -> None:
    r = rig(fake_host, gates={"RdtResctrl": True})
    meta = annotated()
    assert r.run(Stage.PRE_RUN_POD_SANDBOX, meta).adjustment.empty()
    assert r.run(Stage.PRE_CREATE_CONTAINER, meta).adjustment.empty()
    assert r.kernel.groups() == []


def test_no_resctrl_does_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    meta = annotated()
    for deps in (HookDeps(gates=BOTH_GATES),
                 HookDeps(gates=BOTH_GATES, resctrl=make_executor(tmp_path / "absent", FakeKernel(str(tmp_path)),
                                                                  FakeClock()))):
        for stage in (Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_REMOVE_POD_SANDBOX):
            pod: Pod = meta.pod
            container = pod.containers[0] if stage is Stage.PRE_CREATE_CONTAINER else None
            result = HookRunner([resctrl.new(deps)]).run(HookRequest(stage, pod, meta.cgroup_dir, container, "c"))
            assert result.errors == [] and result.adjustment.empty()


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not JSON"),
    ('{"llc": {"schemata": {"range": [30, 10]}}}', "llc.schemata.range"),
    ('{"llc": {"schemata": {"range": [0, 130]}}}', "llc.schemata.range"),
    ('{"mb": {"schemata": {"percent": 101}}}', "mb.schemata.percent"),
    ('{"llc": {"schemataPerCache": [{"cacheID": 7, "range": [0, 50]}]}}', "cacheID 7 unknown"),
])
@pytest.mark.parametrize("stage", [Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER])
def test_bad_annotation_is_an_error_naming_pod_and_annotation(fake_host: FakeHost, text: str, message: str,
                                                              stage: Stage) -> None:
    r = rig(fake_host)
    result = r.run(stage, annotated(text=text))
    assert result.adjustment.empty()
    assert len(result.errors) == 1
    assert result.errors[0].startswith(f"resctrl: pod default/p: annotation {ANNOTATION}:"), result.errors[0]
    assert message in result.errors[0]
    assert r.kernel.groups() == [] and r.kernel.schemata_writes == []
