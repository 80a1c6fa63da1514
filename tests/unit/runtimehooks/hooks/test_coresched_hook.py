"""coresched hook: a started container's tasks get their group's core-sched cookie (the groups of the
qosmanager coresched rules), pod cpu.idle from schedIdle or the unsupported-kernel fallback; nothing with
the gate off, another policy, or a kernel without core scheduling."""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.resourceexecutor.coresched import CoreSchedExecutor, CoreSchedScope
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage, StageResult
from koordlet.runtimehooks.hooks import coresched
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.resources import REGISTRY
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FIRST_COOKIE, FakeNative
from tests.unit.qosmanager.fakes import FakeClock, MemoryAudit, make_pod
from tests.unit.qosmanager.test_isolation_samples import holder_spec, sample

GROUP = "koordinator.sh/core-sched-group-id"
POLICY = "koordinator.sh/core-sched-policy"


def core_sched_slo(*, be_idle: int = 1, ls_expeller: bool = False, policy: str = "coreSched") -> NodeSLOSpec:
    classes: dict[str, Any] = {
        "policies": {"cpuPolicy": policy},
        "lsrClass": {"cpuQOS": {"enable": True}},
        "lsClass": {"cpuQOS": {"enable": True, "coreExpeller": ls_expeller}},
        "beClass": {"cpuQOS": {"enable": True, "schedIdle": be_idle}},
    }
    return NodeSLOSpec.from_json({"resourceQOSStrategy": classes}).with_defaults()


@dataclasses.dataclass
class Rig:
    host: FakeHost
    native: FakeNative
    executor: CoreSchedExecutor
    deps: HookDeps

    def runner(self, book: CookieBook | None = None) -> HookRunner:
        return HookRunner([coresched.new(dataclasses.replace(self.deps, cookies=book))])

    def started(self, meta: PodMeta, pids: tuple[int, ...], index: int = 0, *, runner: HookRunner | None = None,
                strip_kube_qos: bool = True) -> StageResult:
        """Makes the container's cgroup with ``pids`` and runs PostStartContainer for it."""
        cmeta = meta.containers[index]
        self.host.mkdir_cgroup(cmeta.cgroup_dir)
        self.host.write_cgroup(cmeta.cgroup_dir, REGISTRY["cgroup_procs"], "".join(f"{p}\n" for p in pids))
        # The runtime's requests carry no kube QoS: the hook reads it from the cgroup parent.
        pod = dataclasses.replace(meta.pod, kube_qos=None) if strip_kube_qos else meta.pod
        request = HookRequest(Stage.POST_START_CONTAINER, pod, meta.cgroup_dir, pod.containers[index],
                              cmeta.container_id)
        return (runner or self.runner()).run(request)


def rig(host: FakeHost, spec: NodeSLOSpec | None, *, gates: dict[str, bool] | None = None,
        native: FakeNative | None = None, probes: dict[str, bool] | None = None) -> Rig:
    native = native or FakeNative()
    executor = CoreSchedExecutor(native, MemoryAudit(), FakeClock())
    deps = HookDeps(layout=host.layout(), gates={"CoreSched": True} if gates is None else gates,
                    probes={"cpu_idle": True} if probes is None else probes, nodeslo=lambda: spec,
                    coresched=executor)
    return Rig(host, native, executor, deps)


def test_stages_and_gate() -> None:
    assert coresched.GATE == "CoreSched"
    assert coresched.new(HookDeps()).stages == frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.POST_START_CONTAINER})


@pytest.mark.parametrize("driver", [CgroupDriver.CGROUPFS, CgroupDriver.SYSTEMD])
def test_same_group_shares_one_cookie_across_pods(fake_cgroup_host: FakeHost, driver: CgroupDriver) -> None:
    r = rig(fake_cgroup_host, core_sched_slo())
    runner = r.runner()
    a = make_pod("a", "LS", labels={GROUP: "g1"}, containers=("main", "side"), driver=driver)
    b = make_pod("b", "LS", labels={GROUP: "g1"}, driver=driver)
    other = make_pod("c", "LS", labels={GROUP: "g2"}, driver=driver)
    for meta, pids, index in ((a, (100, 101), 0), (a, (110,), 1), (b, (200,), 0), (other, (300,), 0)):
        result = r.started(meta, pids, index, runner=runner)
        assert result.errors == [] and result.adjustment.empty()
    cookies = r.native.cookies
    assert cookies[100] == cookies[101] == cookies[110] == cookies[200] == FIRST_COOKIE
    assert cookies[300] == FIRST_COOKIE + 1
    # The first tasks got a new cookie (create on the leader, share_to the rest) with thread-group scope.
    assert ("create", 100, CoreSchedScope.THREAD_GROUP) in r.native.calls


def test_expeller_class_and_exclusive_policy_get_their_own_cookies(fake_cgroup_host: FakeHost,
                                                                   shared_dir: Path) -> None:
    # W cpu-qos.md: LS and BE pods with the same group id get different cookies (LS coreExpeller=true).
    spec = holder_spec(sample(shared_dir, "slo-configs/cpu-qos-core-sched.yaml"), "cpu-qos-core-sched.yaml")
    r = rig(fake_cgroup_host, spec)
    runner = r.runner()
    ls = make_pod("ls", "LS", labels={GROUP: "xxx-yyy-zzz"})
    be = make_pod("be", "BE", labels={GROUP: "xxx-yyy-zzz"})
    be2 = make_pod("be2", "BE", labels={GROUP: "xxx-yyy-zzz"})
    solo = make_pod("solo", "BE", labels={GROUP: "xxx-yyy-zzz", POLICY: "exclusive"})
    for meta, pid in ((ls, 10), (be, 20), (be2, 30), (solo, 40)):
        assert r.started(meta, (pid,), runner=runner).errors == []
    cookies = r.native.cookies
    assert cookies[20] == cookies[30]
    assert len({cookies[10], cookies[20], cookies[40]}) == 3


@pytest.mark.parametrize(("meta", "spec"), [
    (make_pod("sys", "SYSTEM"), core_sched_slo()),
    (make_pod("none", "LS", labels={POLICY: "none"}), core_sched_slo()),
    (make_pod("ls", "LS"), NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched"}, "lsClass": {"cpuQOS": {"enable": False}}}}).with_defaults()),
])
def test_disabled_pods_keep_the_default_cookie(fake_cgroup_host: FakeHost, meta: PodMeta, spec: NodeSLOSpec) -> None:
    r = rig(fake_cgroup_host, spec)
    assert r.started(meta, (100,)).errors == []
    assert r.native.calls == [] and r.native.cookies == {}


@pytest.mark.parametrize(("gates", "spec"), [
    ({}, core_sched_slo()),
    ({"CoreSched": False}, core_sched_slo()),
    ({"CoreSched": True}, core_sched_slo(policy="groupIdentity")),
    ({"CoreSched": True}, None),
])
def test_gate_off_or_other_policy_does_nothing(fake_cgroup_host: FakeHost, gates: dict[str, bool],
                                               spec: NodeSLOSpec | None) -> None:
    r = rig(fake_cgroup_host, spec, gates=gates)
    assert r.started(make_pod("be", "BE"), (100,)).errors == []
    assert r.native.calls == []
    sandbox = HookRequest(Stage.PRE_RUN_POD_SANDBOX, make_pod("be", "BE").pod, "kubepods/besteffort/poduid-be")
    assert r.runner().run(sandbox).adjustment.empty()


def test_unsupported_kernel_is_no_error_and_is_remembered(fake_cgroup_host: FakeHost) -> None:
    native = FakeNative(fail=dict.fromkeys(("get", "create", "share_to", "share_from"), errno.EINVAL))
    r = rig(fake_cgroup_host, core_sched_slo(), native=native)
    runner = r.runner()
    assert r.started(make_pod("a", "LS"), (100,), runner=runner).errors == []
    assert r.executor.unsupported_reason is not None
    calls = len(native.calls)
    assert r.started(make_pod("b", "LS"), (200,), runner=runner).errors == []
    assert len(native.calls) == calls  # no second syscall: the executor remembered
    # ...and the pod stage falls back to cpu.idle=1 for BE, as the strategy does (koordinator#3188).
    spec_no_idle = core_sched_slo(be_idle=0)
    r2 = dataclasses.replace(r, deps=dataclasses.replace(r.deps, nodeslo=lambda: spec_no_idle))
    be = make_pod("be", "BE")
    sandbox = HookRequest(Stage.PRE_RUN_POD_SANDBOX, dataclasses.replace(be.pod, kube_qos=None), be.cgroup_dir)
    assert r2.runner().run(sandbox).adjustment.writes == {"cpu_idle": 1}
    ls = make_pod("ls", "LS")
    assert r2.runner().run(HookRequest(Stage.PRE_RUN_POD_SANDBOX, ls.pod, ls.cgroup_dir)).adjustment.empty()


def test_pod_cpu_idle_from_sched_idle(fake_cgroup_host: FakeHost) -> None:
    r = rig(fake_cgroup_host, core_sched_slo(be_idle=1))
    be, ls, sys_pod = make_pod("be", "BE"), make_pod("ls", "LS"), make_pod("s", "SYSTEM")

    def writes(meta: PodMeta, deps: HookDeps = r.deps) -> dict[str, object]:
        request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, meta.pod, meta.cgroup_dir)
        return HookRunner([coresched.new(deps)]).run(request).adjustment.writes

    assert writes(be) == {"cpu_idle": 1}
    assert writes(ls) == {} and writes(sys_pod) == {}
    # A kernel without cpu.idle: nothing.
    assert writes(be, dataclasses.replace(r.deps, probes={"cpu_idle": False})) == {}


def test_container_gone_or_empty_is_no_error(fake_cgroup_host: FakeHost) -> None:
    r = rig(fake_cgroup_host, core_sched_slo())
    meta = make_pod("a", "LS")
    request = HookRequest(Stage.POST_START_CONTAINER, meta.pod, meta.cgroup_dir, meta.pod.containers[0],
                          meta.containers[0].container_id)
    assert r.runner().run(request).errors == []  # no cgroup at all
    assert r.started(meta, ()).errors == []  # no task yet
    assert r.native.calls == []


def test_garbage_task_list_is_an_error_naming_pod_and_container(fake_cgroup_host: FakeHost) -> None:
    r = rig(fake_cgroup_host, core_sched_slo())
    meta = make_pod("a", "LS")
    cdir = meta.containers[0].cgroup_dir
    fake_cgroup_host.mkdir_cgroup(cdir)
    fake_cgroup_host.write_cgroup(cdir, REGISTRY["cgroup_procs"], "100\nabc\n")
    request = HookRequest(Stage.POST_START_CONTAINER, meta.pod, meta.cgroup_dir, meta.pod.containers[0],
                          meta.containers[0].container_id)
    result = r.runner().run(request)
    assert len(result.errors) == 1
    assert result.errors[0].startswith("coresched: pod default/a container main:") and "'abc'" in result.errors[0]
    assert r.native.calls == []


def test_failed_prctl_is_an_error(fake_cgroup_host: FakeHost) -> None:
    native = FakeNative(fail={("create", 100): errno.EPERM})
    r = rig(fake_cgroup_host, core_sched_slo(), native=native)
    result = r.started(make_pod("a", "LS", labels={GROUP: "g"}), (100,))
    assert len(result.errors) == 1 and "pod default/a container main: core sched group 'default/g'" in result.errors[0]


def test_a_shared_book_agrees_with_the_strategy(fake_cgroup_host: FakeHost) -> None:
    # The strategy and the hook handing out one cookie per group needs one book; a given one is used.
    r = rig(fake_cgroup_host, core_sched_slo())
    book = CookieBook(r.executor)
    r.started(make_pod("a", "LS", labels={GROUP: "g"}), (100,), runner=r.runner(book))
    assert book.numbers() == {"default/g": {"cookie": FIRST_COOKIE, "tasks": 1}}


@pytest.mark.parametrize("policy", ["coreSched", "groupIdentity"])
def test_never_conflicts_with_groupidentity_on_cpu_idle(fake_cgroup_host: FakeHost, policy: str) -> None:
    from koordlet.runtimehooks.hooks import groupidentity

    spec = NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "policies": {"cpuPolicy": policy},
        "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1, "schedIdle": 1}}}}).with_defaults()
    r = rig(fake_cgroup_host, spec)
    deps = dataclasses.replace(r.deps, gates={"CoreSched": True, "GroupIdentity": True})
    runner = HookRunner([coresched.new(deps), groupidentity.new(deps)])
    be = make_pod("be", "BE")
    result = runner.run(HookRequest(Stage.PRE_RUN_POD_SANDBOX, be.pod, be.cgroup_dir))
    assert result.errors == []
    assert result.adjustment.writes == {"cpu_idle": 1}
    assert result.adjustment.owners == {"cgroup.cpu_idle": "coresched" if policy == "coreSched" else "groupidentity"}
