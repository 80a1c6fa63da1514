"""The reconciler's host-application level (upstream ``RegisterHostAppReconciler``): each NodeSLO host
application's cgroup gets the hooks' host-application parts through the real executor on a fake tree.
The cpuset hook gives an LS application every shared pool (upstream ``getHostAppCpuset``); other classes,
and every class while the pools are unknown, are left alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.daemon.agent import host_app_targets
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.hooks import build_hooks
from koordlet.runtimehooks.reconciler import HostAppTarget, Reconciler
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system.kubepaths import CgroupDriver
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit
from tests.unit.runtimehooks.test_reconciler import FakeInformer

POOLS = json.dumps([{"socket": 0, "node": 0, "cpuset": "0-3"}, {"socket": 1, "node": 1, "cpuset": "8-11"}])
NGINX = HostAppTarget("nginx", QoSClass.LS, "host-latency-sensitive/nginx")
YARN = HostAppTarget("yarn-task", QoSClass.BE, "kubepods/besteffort/hadoop-yarn")
GHOST = HostAppTarget("ghost", QoSClass.LS, "host-latency-sensitive/ghost")


class Pools:
    def __init__(self, raw: str | None) -> None:
        self.raw = raw

    def __call__(self) -> str | None:
        return self.raw


def reconciler(host: FakeHost, pools: Pools, apps: list[HostAppTarget]) -> Reconciler:
    deps = HookDeps(gates={"CPUSetAllocator": True}, shared_pools=pools)
    runner = HookRunner(build_hooks(deps))
    executor = ResourceExecutor(host.layout(), FakeClock(), MemoryAudit())
    return Reconciler(runner, Applier(executor.apply), FakeInformer([]), host_apps=lambda: apps)


def test_ls_host_app_gets_every_shared_pool(fake_host: FakeHost, caplog: pytest.LogCaptureFixture) -> None:
    """nginx (LS) -> "0-3,8-11"; yarn (BE) left alone; ghost (no cgroup yet) neither written nor a failure."""
    for app in (NGINX, YARN):
        fake_host.mkdir_cgroup(app.rel_dir)
        fake_host.write_cgroup(app.rel_dir, "cpuset.cpus", "0-15\n")
    with caplog.at_level(logging.WARNING, logger="koordlet.runtimehooks.reconciler"):
        reconciler(fake_host, Pools(POOLS), [NGINX, YARN, GHOST]).reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-3,8-11"
    assert fake_host.read_cgroup(YARN.rel_dir, "cpuset.cpus").strip() == "0-15"
    assert not caplog.records


def test_unknown_pools_leave_it_and_bad_pools_are_one_logged_failure(fake_host: FakeHost,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    fake_host.mkdir_cgroup(NGINX.rel_dir)
    fake_host.write_cgroup(NGINX.rel_dir, "cpuset.cpus", "0-15\n")
    pools = Pools(None)
    rec = reconciler(fake_host, pools, [NGINX])
    rec.reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-15"
    pools.raw = "not json"
    with caplog.at_level(logging.WARNING, logger="koordlet.runtimehooks.reconciler"):
        rec.reconcile([])
        rec.reconcile([])
    failures = [r for r in caplog.records if r.getMessage() == "runtime hooks reconcile failed"]
    assert len(failures) == 1  # once per failure streak
    assert failures[0].pod == "hostapp:nginx"  # type: ignore[attr-defined]
    assert "host application nginx: node annotation node.koordinator.sh/cpu-shared-pools" in \
        failures[0].error  # type: ignore[attr-defined]
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-15"


def test_daemon_targets_from_the_nodeslo() -> None:
    """The daemon resolves the NodeSLO in force (sample host-application-nginx-ls.yaml and the yarn one)."""
    holder = NodeSLOHolder()
    assert host_app_targets(holder, CgroupDriver.SYSTEMD, "")() == []
    holder.offer(NodeSLOSpec.from_json({"hostApplications": [
        {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}},
        {"name": "yarn-task", "priority": "koord-batch", "qos": "BE",
         "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}},
        {"name": "plain"}]}), "test")
    assert host_app_targets(holder, CgroupDriver.SYSTEMD, "")() == [
        HostAppTarget("nginx", QoSClass.LS, "host-latency-sensitive/nginx"),
        HostAppTarget("yarn-task", QoSClass.BE, "kubepods.slice/kubepods-besteffort.slice/hadoop-yarn"),
        HostAppTarget("plain", QoSClass.NONE, "plain")]


def test_sample_nginx_ls_gets_group_identity_2_and_the_ls_share_pool(fake_host: FakeHost, shared_dir: Path) -> None:
    """host-application-nginx-ls.yaml (INDEX.md): nginx at CgroupRoot/host-latency-sensitive/nginx gets
    ``cpu.bvt_warp_ns`` 2 (the LS groupIdentity) and every shared pool; a BE application gets -1."""
    from koordlet.statesinformer.nodeslo import spec_json_from_text

    sample = shared_dir / "reference/koordinator-samples/slo-configs/host-application-nginx-ls.yaml"
    fake_host.set_mode("v1", features={"anolis"})
    holder = NodeSLOHolder()
    assert holder.offer_spec(spec_json_from_text(sample.read_text(), {}, str(sample)), "sample")
    deps = HookDeps(gates={"CPUSetAllocator": True, "GroupIdentity": True}, probes={"cpu_bvt_warp_ns": True},
                    nodeslo=lambda: holder.current().spec, shared_pools=Pools(POOLS))
    hooks = [h for h in build_hooks(deps) if h.name in ("cpuset", "groupidentity")]
    targets = [*host_app_targets(holder, CgroupDriver.CGROUPFS, "")(), YARN]
    for target in targets:
        fake_host.mkdir_cgroup(target.rel_dir)
    executor = ResourceExecutor(fake_host.layout(), FakeClock(), MemoryAudit())
    Reconciler(HookRunner(hooks), Applier(executor.apply), FakeInformer([]), host_apps=lambda: targets).reconcile([])
    assert targets[0] == NGINX
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpu.bvt_warp_ns").strip() == "2"
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-3,8-11"
    assert fake_host.read_cgroup(YARN.rel_dir, "cpu.bvt_warp_ns").strip() == "-1"
