"""Runtime hooks in shadow mode: a hook's host-application (and node-level) values are said to the audit log as
intended and written nowhere, and the hooks with writers of their own (resctrl groups, core-scheduling cookies)
write nothing through them, record what they would have done, and start from the kernel's state once active."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import PLUGINS, build_hooks
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.coresched.fakenative import FakeNative
from tests.unit.qosmanager.fakes import make_pod
from tests.unit.qosmanager.resctrl.fakeresctrl import INTEL, FakeKernel, build_tree, make_executor
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit
from tests.unit.runtimehooks.test_hostapps import NGINX, POOLS, Pools
from tests.unit.runtimehooks.test_reconciler import FakeInformer


def test_a_host_application_hook_in_shadow_mode_is_audited_and_not_written(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(NGINX.rel_dir)
    fake_host.write_cgroup(NGINX.rel_dir, "cpuset.cpus", "0-15\n")
    modes = ShadowModes(default=True, kind="hook")
    runner = HookRunner(build_hooks(HookDeps(gates={"CPUSetAllocator": True}, shared_pools=Pools(POOLS))),
                        shadow=modes)
    audit = MemoryAudit()
    executor = ResourceExecutor(fake_host.layout(), FakeClock(), audit)
    reconciler = Reconciler(runner, Applier(executor.apply, intend=executor.intend), FakeInformer([]),
                            host_apps=lambda: [NGINX])
    reconciler.reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-15"
    (entry,) = audit.entries
    assert (entry.old, entry.new, entry.owner, entry.outcome) == ("0-15", "0-3,8-11", "runtimehooks/cpuset",
                                                                  "intended")
    modes.set("cpuset", False)  # active from the next round on
    reconciler.reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-3,8-11"


class Intents:
    """An IntentRecorder keeping what it is told."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        self.recorded.append((path, kind, new, strategy))


WRITERS = (ResctrlExecutor, CoreSchedExecutor, CookieBook, ResourceExecutor, SysctlExecutor)


def test_every_hook_gets_views_of_the_writers_it_holds(fake_host: FakeHost, tmp_path: Path) -> None:
    """No hook holds a writer that shadow mode does not wrap: what it writes besides its answer (and the cgroup
    executor, which the runner and reconciler drive) goes through views that follow its mode."""
    coresched = CoreSchedExecutor(FakeNative(), MemoryAudit(), FakeClock())
    deps = HookDeps(layout=fake_host.layout(), coresched=coresched, cookies=CookieBook(coresched),
                    resctrl=make_executor(tmp_path / "resctrl", FakeKernel(str(tmp_path)), FakeClock()),
                    intents=Intents())
    for plugin in PLUGINS:
        own = deps.for_hook(plugin.name)
        held = {f.name: getattr(own, f.name) for f in dataclasses.fields(own)}
        assert [name for name, value in held.items() if isinstance(value, WRITERS)] == [], plugin.name
        assert own.for_hook(plugin.name).resctrl is own.resctrl  # a view is not wrapped again


def _resctrl_rig(host: FakeHost) -> tuple[FakeKernel, HookRunner, ShadowModes, Intents]:
    root = Path(host.paths.resctrl_root)
    build_tree(root, cbm_mask="7ff", domains=(0, 1), vendor=INTEL)
    host.write_proc("cpuinfo", f"processor\t: 0\nvendor_id\t: {INTEL}\n")
    kernel = FakeKernel(str(root))
    modes, intents = ShadowModes(default=True, kind="hook"), Intents()
    deps = HookDeps(layout=host.layout(), gates={"Resctrl": True, "RdtResctrl": True},
                    resctrl=make_executor(root, kernel, FakeClock()), shadow=modes, intents=intents)
    return kernel, HookRunner(build_hooks(deps), shadow=modes), modes, intents


def _request(stage: Stage, meta: PodMeta) -> HookRequest:
    pod = dataclasses.replace(meta.pod, kube_qos=None)
    container = pod.containers[0] if stage is Stage.PRE_CREATE_CONTAINER else None
    return HookRequest(stage, pod, meta.cgroup_dir, container, meta.containers[0].container_id if container else "")


def test_the_resctrl_hook_in_shadow_mode_makes_no_group_and_says_which_it_would(fake_host: FakeHost) -> None:
    kernel, runner, modes, intents = _resctrl_rig(fake_host)
    meta = make_pod("p", "LS", annotations={"node.koordinator.sh/resctrl": (
        '{"llc": {"schemata": {"range": [0, 30]}}, "mb": {"schemata": {"percent": 20}}}')})
    group = "koordlet-uid-p"
    sandbox = runner.run(_request(Stage.PRE_RUN_POD_SANDBOX, meta), transport="nri")
    created = runner.run(_request(Stage.PRE_CREATE_CONTAINER, meta), transport="nri")
    assert sandbox.errors == created.errors == []
    assert created.adjustment.empty() and created.intended.values == {"rdt_class": group}
    assert kernel.groups() == [] and kernel.schemata_writes == [] and kernel.dirs == []
    ((path, kind, new, who),) = intents.recorded  # the container stage found the group it would have made
    assert (path.endswith(f"/{group}/schemata"), kind, who) == (True, "resctrl_schemata", "runtimehooks/resctrl")
    assert [line.strip() for line in new.splitlines() if line.strip()] == ["L3:0=f;1=f", "MB:0=20;1=20"]

    # Active from the next call on: the group is made from what the kernel holds, not what shadow mode believed.
    modes.set(None, False)
    again = runner.run(_request(Stage.PRE_CREATE_CONTAINER, meta), transport="nri")
    assert again.adjustment.values == {"rdt_class": group} and kernel.groups() == [group]
    # In shadow mode again, removing the pod's group is said and not done.
    modes.set("resctrl", True)
    assert runner.run(_request(Stage.PRE_REMOVE_POD_SANDBOX, meta), transport="nri").errors == []
    assert kernel.groups() == [group]
    assert intents.recorded[-1][1:3] == ("resctrl_group", "rmdir")


def test_the_coresched_hook_in_shadow_mode_gives_no_cookie(fake_host: FakeHost) -> None:
    native = FakeNative()
    coresched = CoreSchedExecutor(native, MemoryAudit(), FakeClock())
    spec = NodeSLOSpec.from_json({"resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched"}, "lsClass": {"cpuQOS": {"enable": True}}}}).with_defaults()
    modes, intents = ShadowModes(default=True, kind="hook"), Intents()
    deps = HookDeps(layout=fake_host.layout(), gates={"CoreSched": True}, nodeslo=lambda: spec,
                    coresched=coresched, cookies=CookieBook(coresched), shadow=modes, intents=intents)
    runner = HookRunner(build_hooks(deps), shadow=modes)
    meta = make_pod("a", "LS", labels={"koordinator.sh/core-sched-group-id": "g1"})
    fake_host.mkdir_cgroup(meta.containers[0].cgroup_dir)
    fake_host.write_cgroup(meta.containers[0].cgroup_dir, "cgroup.procs", "100\n101\n", subsystem="cpu")
    pod = dataclasses.replace(meta.pod, kube_qos=None)
    request = HookRequest(Stage.POST_START_CONTAINER, pod, meta.cgroup_dir, pod.containers[0],
                          meta.containers[0].container_id)
    assert runner.run(request, transport="nri").errors == []
    assert {op for op, _, _ in native.calls} == {"get"} and native.cookies == {}
    ((path, kind, new, who),) = intents.recorded
    assert (path, kind, who) == ("pid:100", "core_sched", "runtimehooks/coresched") and new.endswith("100 101")

    modes.set("coresched", False)
    assert runner.run(request, transport="nri").errors == []
    assert native.cookies[100] == native.cookies[101] != 0
