"""Tenants granting themselves privileges through their own pod labels and annotations: each attack is
performed through the daemon's real paths - kubelet JSON -> the real states informer (whose pod list every
strategy reads), the real hook runner with the tenant gate the agent installs, the real hooks, the real
reconciler and oom_score_adj writer on a fake host - and is refused in a tenant namespace, while the same
pod in an allowed namespace (kube-system by default) is still honoured."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_CORE_SCHED_GROUP, LABEL_QOS, QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.pod import pod_from_json
from koordlet.apis.tenantpolicy import SKIP_HOOK_SERVER
from koordlet.cli.koordctl import main as koordctl_main
from koordlet.config.types import Config, HostConfig, TenantConfig
from koordlet.debugapi.server import DebugServer, DebugSources
from koordlet.isolation.coresched.rules import LABEL_CORE_SCHED_POLICY
from koordlet.qosmanager import evictpick
from koordlet.qosmanager.framework import DecisionLog
from koordlet.resourceexecutor import oomscore
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import build_hooks, coresched, cpuset, oomscoreadj, resctrl
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.tenant import TenantGate
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.informer import StatesInformer, kubelet_pod_meta
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.resources import REGISTRY
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakehost import FakeHost
from tests.unit.debugapi.test_server import FakeCgroups
from tests.unit.qosmanager.coresched.fakenative import FIRST_COOKIE, FakeNative
from tests.unit.qosmanager.fakes import FakeClock, MemoryAudit, make_node
from tests.unit.qosmanager.resctrl.fakeresctrl import INTEL, FakeKernel, build_tree, make_executor

TENANT = "tenant-a"
ALLOWED = "kube-system"
GI = 1 << 30
NODE_MEMORY = 16 * GI
OOM = "koordinator.sh/oom-score-adj"
RESCTRL = "node.koordinator.sh/resctrl"
EVICTION_POLICY = "koordinator.sh/eviction-policy"
EVICTION_PRIORITY = "koordinator.sh/eviction-priority"


# --- pods as kubelet lists them, through the real informer --------------------------------------------------


def kubelet_pod(name: str, namespace: str, *, uid: str | None = None, labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None, qos: str = "Burstable",
                memory_request: str | None = None, cid: str | None = None, created: str = "2026-01-01T00:00:00Z"
                ) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if qos == "Guaranteed":
        resources = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    elif qos == "Burstable":
        resources = {"requests": {"cpu": "100m", "memory": memory_request or "0"}}
    uid = uid or f"uid-{namespace}-{name}"
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": annotations or {}, "creationTimestamp": created},
            "spec": {"containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Running", "qosClass": qos,
                       "containerStatuses": [{"name": "main", "containerID": f"containerd://{cid or uid + 'c'}"}]}}


def informer(host: FakeHost, tmp_path: Path, tenant: TenantConfig | None = None) -> StatesInformer:
    config = Config(node_name="n1", host=HostConfig(var_lib_kubelet_root_dir=str(tmp_path / "kubelet")),
                    tenant=tenant or TenantConfig())
    return StatesInformer(config, host.layout(), CgroupDriver.CGROUPFS, make_node(8, memory_bytes=NODE_MEMORY))


def publish(inf: StatesInformer, *objs: dict[str, Any]) -> dict[str, PodMeta]:
    inf.set_kubelet_pods([pod_from_json(o) for o in objs])
    return {m.pod.name: m for m in inf.pods()}


def runner(inf: StatesInformer, hooks: Sequence[Any]) -> HookRunner:
    """The hook runner as the agent builds it: every request reviewed by the informer's tenant policy."""
    return HookRunner(hooks, tenant=TenantGate(inf.tenant, inf.pods, inf.node))


def refused_keys(inf: StatesInformer, meta: PodMeta) -> list[str]:
    return [r.key for r in inf.tenant.refused(meta.uid)]


# --- oom_score_adj -----------------------------------------------------------------------------------------


def container_request(meta: PodMeta, *, from_runtime: bool = True) -> HookRequest:
    """PreCreateContainer as the runtime describes it: no kube QoS, no requests (the cgroup parent says)."""
    pod = meta.pod
    if from_runtime:
        pod = dataclasses.replace(pod, kube_qos=None, containers=())
    spec = meta.pod.containers[0]
    return HookRequest(Stage.PRE_CREATE_CONTAINER, pod, meta.cgroup_dir,
                       dataclasses.replace(spec, requests=type(spec.requests)()), spec.container_id)


@pytest.mark.parametrize("namespace, honoured", [(TENANT, False), (ALLOWED, True)])
def test_oom_score_adj_below_kubelets_through_the_hook(fake_host: FakeHost, tmp_path: Path, namespace: str,
                                                        honoured: bool) -> None:
    inf = informer(fake_host, tmp_path)
    # Not yet in the informer's list (a new pod): the runtime's request alone decides.
    meta = kubelet_pod_meta(pod_from_json(kubelet_pod("immortal", namespace, annotations={OOM: "-1000"})),
                            CgroupDriver.CGROUPFS)
    result = runner(inf, [oomscoreadj.new(HookDeps())]).run(container_request(meta))
    assert result.errors == []
    assert result.adjustment.values.get("oom_score_adj") == (-1000 if honoured else None)
    assert ("oomScoreAdj" in refused_keys(inf, meta)) is not honoured


def test_oom_score_adj_at_or_above_kubelets_is_honoured_for_tenants(fake_host: FakeHost, tmp_path: Path) -> None:
    inf = informer(fake_host, tmp_path)
    # Burstable requesting 4Gi of 16Gi: kubelet gives 1000 - 1000*4/16 = 750.
    metas = publish(inf, kubelet_pod("at", TENANT, annotations={OOM: "750"}, memory_request="4Gi"),
                    kubelet_pod("below", TENANT, annotations={OOM: "749"}, memory_request="4Gi"))
    hook = runner(inf, [oomscoreadj.new(HookDeps())])
    assert hook.run(container_request(metas["at"])).adjustment.values == {"oom_score_adj": 750}
    assert hook.run(container_request(metas["below"])).adjustment.values == {}
    assert refused_keys(inf, metas["below"]) == ["oomScoreAdj"] and refused_keys(inf, metas["at"]) == []


@pytest.mark.parametrize("namespace, expected", [(TENANT, "0"), (ALLOWED, "-1000")])
def test_oom_score_adj_of_running_processes_through_the_reconciler(fake_host: FakeHost, tmp_path: Path,
                                                                   namespace: str, expected: str) -> None:
    inf = informer(fake_host, tmp_path)
    metas = publish(inf, kubelet_pod("immortal", namespace, annotations={OOM: "-1000"}, qos="BestEffort"))
    meta = metas["immortal"]
    container_dir = meta.containers[0].cgroup_dir
    fake_host.mkdir_cgroup(meta.cgroup_dir)
    fake_host.mkdir_cgroup(container_dir)
    fake_host.write_cgroup(container_dir, "cgroup.procs", "4242\n", subsystem="cpu")
    proc = fake_host.write_proc("4242/oom_score_adj", "0\n")
    layout = fake_host.layout()

    def read_procs(rel_dir: str) -> str:
        return Path(layout.controller_dir("cpu", rel_dir), "cgroup.procs").read_text()

    writer = oomscore.OomScoreWriter(str(proc.parent.parent), MemoryAudit())
    deps = HookDeps(gates={"OOMScoreAdj": True})
    reconciler = Reconciler(runner(inf, build_hooks(deps)), Applier(lambda updates: []), inf,
                            oom_score=oomscore.for_cgroups(read_procs, writer))
    reconciler.reconcile(inf.pods())
    assert proc.read_text().strip() == expected


# --- resource-status cpuset --------------------------------------------------------------------------------


def status(cpuset: str) -> dict[str, str]:
    return {ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": cpuset})}


def test_cpuset_onto_another_pods_exclusive_cpus_is_refused(fake_host: FakeHost, tmp_path: Path) -> None:
    inf = informer(fake_host, tmp_path)
    victim = kubelet_pod("db", "team-b", labels={LABEL_QOS: "LSR"}, annotations=status("2-3"), qos="Guaranteed",
                         created="2026-01-01T00:00:00Z")
    thief = kubelet_pod("thief", TENANT, labels={LABEL_QOS: "LS"}, annotations=status("2-3"),
                        created="2025-12-31T00:00:00Z")  # older: age wins no CPUs from an exclusive claim
    outside = kubelet_pod("wide", TENANT, labels={LABEL_QOS: "LS"}, annotations=status("0-63"))
    fine = kubelet_pod("fine", TENANT, labels={LABEL_QOS: "LS"}, annotations=status("5"))
    metas = publish(inf, victim, thief, outside, fine)
    assert ANNOTATION_RESOURCE_STATUS in metas["db"].pod.annotations
    assert ANNOTATION_RESOURCE_STATUS not in metas["thief"].pod.annotations
    assert ANNOTATION_RESOURCE_STATUS not in metas["wide"].pod.annotations
    assert refused_keys(inf, metas["thief"]) == ["resourceStatus"]
    assert "held exclusively by pod team-b/db" in inf.tenant.refused(metas["thief"].uid)[0].reason
    assert "not online" in inf.tenant.refused(metas["wide"].uid)[0].reason

    hook = runner(inf, [cpuset.new(HookDeps())])
    # The runtime's request still carries the annotation: the gate refuses it there too.
    for name, obj in (("thief", thief), ("wide", outside)):
        meta = kubelet_pod_meta(pod_from_json(obj), CgroupDriver.CGROUPFS)
        values = hook.run(container_request(meta)).adjustment.values
        assert values.get("cpuset_cpus") is None and values.get("cpu_quota") is None, name
    assert hook.run(container_request(metas["db"])).adjustment.values["cpuset_cpus"] == "2-3"
    assert hook.run(container_request(metas["fine"])).adjustment.values["cpuset_cpus"] == "5"


def test_cpuset_wider_than_the_cpu_limit_cannot_lift_the_quota(fake_host: FakeHost, tmp_path: Path) -> None:
    # A bound pod's CFS quota is lifted: a 1-CPU pod binding itself to 6 CPUs would run on all 6.
    inf = informer(fake_host, tmp_path)
    obj = kubelet_pod("escape", TENANT, labels={LABEL_QOS: "LS"}, annotations=status("2-7"))
    obj["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    metas = publish(inf, obj)
    hook = runner(inf, [cpuset.new(HookDeps())])
    values = hook.run(container_request(metas["escape"])).adjustment.values
    assert "cpu_quota" not in values and "cpuset_cpus" not in values
    assert refused_keys(inf, metas["escape"]) == ["resourceStatus"]


# --- qosClass SYSTEM / LSE, eviction opt-out, proxy skip ----------------------------------------------------


@pytest.mark.parametrize("namespace, honoured", [(TENANT, False), (ALLOWED, True)])
def test_self_granted_labels_and_annotations(fake_host: FakeHost, tmp_path: Path, namespace: str,
                                             honoured: bool) -> None:
    inf = informer(fake_host, tmp_path)
    metas = publish(
        inf,
        kubelet_pod("sys", namespace, labels={LABEL_QOS: "SYSTEM"}),
        kubelet_pod("lse", namespace, labels={LABEL_QOS: "LSE"}, qos="Guaranteed"),
        kubelet_pod("stay", namespace, labels={LABEL_QOS: "BE"}, annotations={EVICTION_POLICY: "[]"},
                    qos="BestEffort"),
        kubelet_pod("last", namespace, labels={LABEL_QOS: "BE"}, annotations={EVICTION_PRIORITY: "2147483647"},
                    qos="BestEffort"),
        kubelet_pod("first", namespace, labels={LABEL_QOS: "BE"}, annotations={EVICTION_PRIORITY: "-5"},
                    qos="BestEffort"),
        kubelet_pod("skip", namespace, labels={SKIP_HOOK_SERVER: "true"}))
    assert metas["sys"].qos is (QoSClass.SYSTEM if honoured else QoSClass.LS)
    assert metas["lse"].qos is (QoSClass.LSE if honoured else QoSClass.LSR)
    # The evictors ask evictpick whether the pod's eviction policy keeps them off it.
    assert (evictpick.policy_refusal(metas["stay"].pod, "BEMemoryEvict") is not None) is honoured
    # Victims are taken in eviction-priority order: a tenant may volunteer, not queue-jump.
    assert evictpick.eviction_priority(metas["last"].pod) == (2147483647 if honoured else 0)
    assert evictpick.eviction_priority(metas["first"].pod) == -5
    assert (SKIP_HOOK_SERVER in metas["skip"].pod.labels) is honoured
    expected = {"sys": ["qosClassSystem"], "lse": ["qosClassLSE"], "stay": ["evictionOptOut"],
                "last": ["evictionOptOut"], "first": [], "skip": ["skipHookServer"]}
    for name, keys in expected.items():
        assert refused_keys(inf, metas[name]) == ([] if honoured else keys), name


def test_a_refusal_is_logged_once_per_pod(fake_host: FakeHost, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    inf = informer(fake_host, tmp_path)
    obj = kubelet_pod("sys", TENANT, labels={LABEL_QOS: "SYSTEM"})
    hook = runner(inf, [oomscoreadj.new(HookDeps())])
    with caplog.at_level(logging.WARNING, logger="koordlet.apis.tenantpolicy"):
        for _ in range(3):
            metas = publish(inf, obj)
            hook.run(container_request(metas["sys"]))
            hook.run(container_request(kubelet_pod_meta(pod_from_json(obj), CgroupDriver.CGROUPFS)))
    assert [r.getMessage() for r in caplog.records] == ["pod key refused by the tenant policy"]


def test_operator_may_widen_a_key(fake_host: FakeHost, tmp_path: Path) -> None:
    inf = informer(fake_host, tmp_path, TenantConfig(qos_lse_namespaces=f"{ALLOWED},{TENANT}",
                                                     qos_system_namespaces="-"))
    metas = publish(inf, kubelet_pod("lse", TENANT, labels={LABEL_QOS: "LSE"}, qos="Guaranteed"),
                    kubelet_pod("sys", ALLOWED, labels={LABEL_QOS: "SYSTEM"}))
    assert metas["lse"].qos is QoSClass.LSE
    assert metas["sys"].qos is QoSClass.LS  # '-': not even kube-system


# --- per-pod resctrl groups ---------------------------------------------------------------------------------


def resctrl_rig(host: FakeHost, inf: StatesInformer, num_closids: int) -> tuple[HookRunner, Path]:
    root = Path(host.paths.resctrl_root)
    build_tree(root, cbm_mask="7ff", domains=(0,), vendor=INTEL)
    for resource in ("L3", "MB"):
        (root / "info" / resource).mkdir(parents=True, exist_ok=True)
        (root / "info" / resource / "num_closids").write_text(f"{num_closids}\n")
    host.write_proc("cpuinfo", f"processor\t: 0\nvendor_id\t: {INTEL}\n")
    executor = make_executor(root, FakeKernel(str(root)), FakeClock())
    deps = HookDeps(layout=host.layout(), gates={"Resctrl": True, "RdtResctrl": True}, resctrl=executor,
                    nodeslo=lambda: NodeSLOSpec.from_json({}).with_defaults(), tenant=inf.tenant)
    return runner(inf, [resctrl.new(deps)]), root


SCHEMATA = '{"llc": {"schemata": {"range": [0, 30]}}, "mb": {"schemata": {"percent": 20}}}'


def sandbox(meta: PodMeta) -> HookRequest:
    return HookRequest(Stage.PRE_RUN_POD_SANDBOX, meta.pod, meta.cgroup_dir)


def test_per_pod_resctrl_group_only_for_lsr_and_lse(fake_host: FakeHost, tmp_path: Path) -> None:
    inf = informer(fake_host, tmp_path)
    hook, root = resctrl_rig(fake_host, inf, num_closids=16)
    metas = publish(inf, kubelet_pod("be", TENANT, labels={LABEL_QOS: "BE"}, annotations={RESCTRL: SCHEMATA},
                                     qos="BestEffort"),
                    kubelet_pod("lsr", TENANT, labels={LABEL_QOS: "LSR"}, annotations={RESCTRL: SCHEMATA},
                                qos="Guaranteed"))
    for meta in metas.values():
        assert hook.run(sandbox(meta)).errors == []
    assert not (root / f"koordlet-{metas['be'].uid}").exists()
    assert (root / f"koordlet-{metas['lsr'].uid}").is_dir()
    assert refused_keys(inf, metas["be"]) == ["podResctrl"]


def test_per_pod_resctrl_groups_keep_closids_for_the_class_groups(fake_host: FakeHost, tmp_path: Path) -> None:
    # 8 CLOSIDs: the root, 3 class groups (LSR, LS, BE) not made yet, 1 in reserve -> 3 pod groups at most.
    inf = informer(fake_host, tmp_path)
    hook, root = resctrl_rig(fake_host, inf, num_closids=8)
    objs = [kubelet_pod(f"p{i}", TENANT, labels={LABEL_QOS: "LSR"}, annotations={RESCTRL: SCHEMATA},
                        qos="Guaranteed") for i in range(10)]
    metas = publish(inf, *objs)
    for meta in metas.values():
        assert hook.run(sandbox(meta)).errors == []
    made = sorted(p.name for p in root.iterdir() if p.name.startswith("koordlet-"))
    assert len(made) == 3
    free = 8 - 1 - len(made)
    assert free >= 3 + 1  # the class groups and the reserve still fit
    assert sum("podResctrl" in refused_keys(inf, m) for m in metas.values()) == 7


# --- core scheduling groups ---------------------------------------------------------------------------------


def test_core_sched_group_ids_are_scoped_by_namespace(fake_host: FakeHost, tmp_path: Path) -> None:
    # Pod UIDs are on :9316; an "exclusive" pod's group id is its UID.  A tenant labels itself with another
    # namespace's group id and with an exclusive pod's UID to share a core with them.
    inf = informer(fake_host, tmp_path)
    metas = publish(
        inf,
        kubelet_pod("db", "team-b", labels={LABEL_CORE_SCHED_GROUP: "secure"}),
        kubelet_pod("db2", "team-b", labels={LABEL_CORE_SCHED_GROUP: "secure"}),
        kubelet_pod("vault", "team-b", labels={LABEL_CORE_SCHED_POLICY: "exclusive"}, uid="vault-uid"),
        kubelet_pod("spy", TENANT, labels={LABEL_CORE_SCHED_GROUP: "secure"}),
        kubelet_pod("spy2", TENANT, labels={LABEL_CORE_SCHED_GROUP: "vault-uid"}),
        kubelet_pod("spy3", TENANT, labels={LABEL_CORE_SCHED_GROUP: "team-b/secure"}))
    slo = NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched"}, "lsClass": {"cpuQOS": {"enable": True}}}}).with_defaults()
    native = FakeNative()
    deps = HookDeps(layout=fake_host.layout(), gates={"CoreSched": True}, nodeslo=lambda: slo,
                    coresched=CoreSchedExecutor(native, MemoryAudit(), FakeClock()))
    hook = runner(inf, [coresched.new(deps)])
    pids = {"db": 100, "db2": 101, "vault": 200, "spy": 300, "spy2": 301, "spy3": 302}
    for name, pid in pids.items():
        meta = metas[name]
        cdir = meta.containers[0].cgroup_dir
        fake_host.mkdir_cgroup(cdir)
        fake_host.write_cgroup(cdir, REGISTRY["cgroup_procs"], f"{pid}\n")
        request = HookRequest(Stage.POST_START_CONTAINER, meta.pod, meta.cgroup_dir, meta.pod.containers[0],
                              meta.containers[0].container_id)
        assert hook.run(request).errors == []
    cookie = native.cookies
    assert cookie[100] == cookie[101] == FIRST_COOKIE  # one namespace, one group: still shared
    assert cookie[300] not in (cookie[100], cookie[200])
    assert cookie[301] not in (cookie[100], cookie[200])
    assert cookie[302] not in (cookie[100], cookie[200])


# --- visible in koordctl pods -------------------------------------------------------------------------------


def test_refused_keys_reach_koordctl_pods(fake_host: FakeHost, tmp_path: Path, failures: ComponentFailures) -> None:
    """Through the real debug server on a unix socket and the real koordctl, wired as the agent wires them."""
    inf = informer(fake_host, tmp_path)
    publish(inf, kubelet_pod("sys", TENANT, labels={LABEL_QOS: "SYSTEM"}),
            kubelet_pod("ok", ALLOWED, labels={LABEL_QOS: "SYSTEM"}))
    sources = DebugSources(
        version="t", node="n1", mode="kubernetes", started_at=0.0, components=list, feature_gates={},
        probes=list, companion=lambda: None, pods=inf.pods, cgroups=FakeCgroups(),
        mean=lambda *_: None, slo=NodeSLOHolder().current, strategies=list, decisions=DecisionLog(),
        hook_names=[], hook_calls=lambda _n: [], evictions=lambda _n: [],
        refused=lambda uid: [r.text() for r in inf.tenant.refused(uid)])
    directory = Path(tempfile.mkdtemp(prefix="ktp-", dir="/tmp"))  # a unix socket path holds 107 bytes
    server = DebugServer(str(directory / "debug.sock"), sources)
    server.start(failures.callback("debugapi"))
    try:
        out = io.StringIO()
        assert koordctl_main(["pods", "--socket", server.socket_path, "-o", "json"], out=out, environ={}) == 0
        by_name = {p["name"]: p for p in json.loads(out.getvalue())["pods"]}
        assert by_name["ok"]["refused_keys"] == [] and by_name["ok"]["qos"] == "SYSTEM"
        assert by_name["sys"]["qos"] == "LS"
        assert by_name["sys"]["refused_keys"] == [
            f"qosClassSystem: label koordinator.sh/qosClass=SYSTEM: namespace {TENANT} may not use it"]
        out = io.StringIO()
        assert koordctl_main(["pods", "--socket", server.socket_path], out=out, environ={}) == 0
        table = out.getvalue()
        assert "Refused by the tenant policy" in table
        assert f"{TENANT}/sys  qosClassSystem: label koordinator.sh/qosClass=SYSTEM" in table
        assert f"{ALLOWED}/ok" not in table.split("Refused by the tenant policy")[1]
    finally:
        server.stop(5)
        shutil.rmtree(directory, ignore_errors=True)
