"""groupidentity's node level (upstream SetKubeQOSBvtValue, ruleUpdateCb): the reconciler writes
cpu.bvt_warp_ns of kubepods (0), burstable (LS) and besteffort (BE) each round through the real executor on
a fake tree, and sets kernel.sched_group_identity_enabled to 1 through the sysctl executor where the (fake)
kernel has it.  The host's real sysctls are never touched: every path is under the fake host's root."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRunner, NodeContext
from koordlet.runtimehooks.hooks import groupidentity
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.shadowmodes import ShadowModes
from koordlet.system.kubepaths import KubeQoS
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit
from tests.unit.runtimehooks.hooks.test_groupidentity import BVT_ONLY, IDLE_ONLY, enabled, slo
from tests.unit.runtimehooks.test_reconciler import FakeInformer

DIRS = {KubeQoS.GUARANTEED: "kubepods", KubeQoS.BURSTABLE: "kubepods/burstable",
        KubeQoS.BESTEFFORT: "kubepods/besteffort"}
SYSCTL = "sys/kernel/sched_group_identity_enabled"


def node_writes(spec: NodeSLOSpec | None, probes: dict[str, bool] = BVT_ONLY,
                gates: dict[str, bool] | None = None) -> dict[KubeQoS, dict[str, object]]:
    deps = HookDeps(gates={"GroupIdentity": True} if gates is None else gates, probes=probes, nodeslo=lambda: spec)
    hook = groupidentity.new(deps)
    assert hook.node_fn is not None
    ctx = NodeContext(hook.name)
    hook.node_fn(ctx)
    return ctx.writes


def test_kube_qos_values_follow_upstream_kube_qos_dir_params() -> None:
    # guaranteed root dir 0 "until kernel supported"; burstable = LS; besteffort = BE.
    assert node_writes(enabled({"lsClass": 1, "beClass": -1})) == {
        KubeQoS.GUARANTEED: {"cpu_bvt_warp_ns": 0}, KubeQoS.BURSTABLE: {"cpu_bvt_warp_ns": 1},
        KubeQoS.BESTEFFORT: {"cpu_bvt_warp_ns": -1}}
    # Switched off (or another CPU policy): the 0s, so the directories go back to no identity.
    off = {KubeQoS.GUARANTEED: {"cpu_bvt_warp_ns": 0}, KubeQoS.BURSTABLE: {"cpu_bvt_warp_ns": 0},
           KubeQoS.BESTEFFORT: {"cpu_bvt_warp_ns": 0}}
    assert node_writes(slo()) == off
    assert node_writes(enabled(policy="coreSched")) == off


@pytest.mark.parametrize(("spec", "probes", "gates"), [
    (None, BVT_ONLY, None),  # no NodeSLO yet
    ("on", IDLE_ONLY, None),  # no bvt: the cpu.idle fallback is per BE pod only
    ("on", BVT_ONLY, {"GroupIdentity": False}),
])
def test_nothing_without_slo_bvt_or_gate(spec: str | None, probes: dict[str, bool],
                                         gates: dict[str, bool] | None) -> None:
    assert node_writes(enabled() if spec else None, probes, gates) == {}


def reconciler(host: FakeHost, tmp_path: Path, spec: NodeSLOSpec, *, sysctl: bool, shadow: bool = False,
               audit: MemoryAudit | None = None) -> Reconciler:
    executor = ResourceExecutor(host.layout(), FakeClock(), audit or MemoryAudit(), force_update_seconds=60.0)
    sysctl_executor = SysctlExecutor(host.paths, FakeClock(), audit or MemoryAudit(),
                                     originals_path=str(tmp_path / "sysctl-originals.json")) if sysctl else None
    deps = HookDeps(gates={"GroupIdentity": True}, probes=BVT_ONLY, nodeslo=lambda: spec)
    runner = HookRunner([groupidentity.new(deps)], shadow=ShadowModes(default=shadow, kind="hook"))
    return Reconciler(runner, Applier(executor.apply, intend=executor.intend), FakeInformer([]), qos_dirs=DIRS,
                      sysctl=sysctl_executor)


def make_bvt_tree(host: FakeHost) -> None:
    for rel in DIRS.values():
        host.mkdir_cgroup(rel)
        host.write_cgroup(rel, "cpu.bvt_warp_ns", "0\n", subsystem="cpu")


def test_reconciler_writes_the_kube_qos_dirs_and_enables_the_sysctl(fake_host: FakeHost, tmp_path: Path) -> None:
    make_bvt_tree(fake_host)
    sysctl = fake_host.write_proc(SYSCTL, "0\n")
    rec = reconciler(fake_host, tmp_path, enabled({"lsClass": 2, "beClass": -1}), sysctl=True)
    rec.reconcile([])
    assert {rel: fake_host.read_cgroup(rel, "cpu.bvt_warp_ns", subsystem="cpu").strip()
            for rel in DIRS.values()} == {"kubepods": "0", "kubepods/burstable": "2", "kubepods/besteffort": "-1"}
    assert sysctl.read_text().strip() == "1"


def test_disabling_writes_zeros_and_leaves_the_sysctl_on(fake_host: FakeHost, tmp_path: Path) -> None:
    make_bvt_tree(fake_host)
    fake_host.write_cgroup("kubepods/besteffort", "cpu.bvt_warp_ns", "-1\n", subsystem="cpu")
    sysctl = fake_host.write_proc(SYSCTL, "1\n")
    reconciler(fake_host, tmp_path, slo(), sysctl=True).reconcile([])
    assert fake_host.read_cgroup("kubepods/besteffort", "cpu.bvt_warp_ns", subsystem="cpu").strip() == "0"
    assert sysctl.read_text().strip() == "1"  # upstream never turns it off


def test_a_kernel_without_the_sysctl_is_left_alone(fake_host: FakeHost, tmp_path: Path) -> None:
    make_bvt_tree(fake_host)
    reconciler(fake_host, tmp_path, enabled(), sysctl=True).reconcile([])
    assert not Path(fake_host.paths.proc(SYSCTL)).exists()
    assert fake_host.read_cgroup("kubepods/burstable", "cpu.bvt_warp_ns", subsystem="cpu").strip() == "2"


def test_a_failing_sysctl_write_is_logged_once_and_the_round_goes_on(
        fake_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make_bvt_tree(fake_host)
    sysctl = fake_host.write_proc(SYSCTL, "0\n")
    sysctl.unlink()
    sysctl.mkdir()  # writing a directory fails: EISDIR
    rec = reconciler(fake_host, tmp_path, enabled(), sysctl=True)
    rec.reconcile([])
    rec.reconcile([])
    failed = [r for r in caplog.records if r.getMessage() == "runtime hooks reconcile failed"]
    assert len(failed) == 1 and "sched_group_identity_enabled" in str(failed[0].__dict__["error"])


def test_sample_cpu_qos_group_identity_sets_the_kube_qos_dirs(shared_dir: Path) -> None:
    # INDEX: LS groupIdentity 2, BE -1 -> burstable 2 and besteffort -1 as well (upstream kubeQOSDirParams).
    from tests.unit.qosmanager.test_isolation_samples import holder_spec, sample

    spec = holder_spec(sample(shared_dir, "slo-configs/cpu-qos-group-identity.yaml"), "cpu-qos-group-identity.yaml")
    assert node_writes(spec) == {KubeQoS.GUARANTEED: {"cpu_bvt_warp_ns": 0}, KubeQoS.BURSTABLE: {"cpu_bvt_warp_ns": 2},
                                 KubeQoS.BESTEFFORT: {"cpu_bvt_warp_ns": -1}}


def test_in_shadow_mode_the_sysctl_and_the_dirs_are_only_said(fake_host: FakeHost, tmp_path: Path) -> None:
    make_bvt_tree(fake_host)
    sysctl = fake_host.write_proc(SYSCTL, "0\n")
    audit = MemoryAudit()
    rec = reconciler(fake_host, tmp_path, enabled({"lsClass": 2, "beClass": -1}), sysctl=True, shadow=True,
                     audit=audit)
    rec.reconcile([])
    rec.reconcile([])  # stated again every round, audited once
    assert sysctl.read_text().strip() == "0"
    assert {fake_host.read_cgroup(rel, "cpu.bvt_warp_ns", subsystem="cpu").strip() for rel in DIRS.values()} == {"0"}
    said = sorted((e.resource, e.new, e.outcome) for e in audit.entries)
    assert said == [("cpu_bvt_warp_ns", "-1", "intended"), ("cpu_bvt_warp_ns", "2", "intended"),
                    ("sched_group_identity_enabled", "1", "intended")]
