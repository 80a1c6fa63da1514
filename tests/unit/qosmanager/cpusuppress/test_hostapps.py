"""Host applications in BE CPU suppression (upstream ``CalculateFilterPodsUsed`` + ``NonBEHostAppFilter``).

Worked example (8 CPUs, threshold 65% -> 5200 milli-cores): LS pod 2.5, BE pod 2.0; host applications
nginx (LS, at the root) 1.0, lone (BE but in ``host-best-effort``, which suppression does not reach) 0.25
and yarn-task (BE under ``KubepodsBesteffort``) 0.5; node 6.75.  LS usage = 2.5 + 1.0 + 0.25 = 3.75;
system = 6.75 - (2.5 + 2.0) - (1.0 + 0.25 + 0.5) = 0.5; suppress = 5200 - 3750 - 500 = 950 milli-cores.
Without the host applications the same samples would give LS 2.5, system 2.25 and 450 milli-cores."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.metriccache import names
from koordlet.qosmanager.plugins.cpusuppress.targets import be_targets
from koordlet.statesinformer import hostapps
from koordlet.statesinformer.standalone import WORKLOAD_SOURCE
from koordlet.system.resources import CPUSET_CPUS
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.cpusuppress.test_strategy import BE_DIR, BE_DIRS, make_world
from tests.unit.qosmanager.fakes import make_pod

YARN_DIRS = (f"{BE_DIR}/hadoop-yarn", f"{BE_DIR}/hadoop-yarn/container_1", f"{BE_DIR}/hadoop-yarn/container_1/task")
"""The BE host application's tree; ``task`` is deeper than a pod's containers and still narrowed."""
APPS = [
    {"name": "nginx", "priority": "koord-prod", "qos": "LS",
     "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive", "relativePath": "nginx/"}},
    {"name": "lone", "qos": "BE"},
    {"name": "yarn-task", "priority": "koord-batch", "qos": "BE",
     "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}},
]


def slo(policy: str = "cpuset", apps: list[dict[str, Any]] | None = None) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": policy},
        "hostApplications": APPS if apps is None else apps}))


def world(host: FakeHost, tmp_path: Path) -> Any:
    w = make_world(host, tmp_path)
    for rel in YARN_DIRS:
        host.mkdir_cgroup(rel)
        host.write_cgroup(rel, CPUSET_CPUS, "0-7\n")
    w.usage(node=6.75, ls=2.5, be=2.0)
    now = w.clock()
    for name, cores in (("nginx", 1.0), ("lone", 0.25), ("yarn-task", 0.5)):
        w.options.cache.append(names.HOST_APP_CPU_USAGE, hostapps.labels(name), now, cores)
    return w


def test_ls_host_apps_count_as_ls_and_all_leave_the_system_share(fake_cgroup_host: FakeHost,
                                                                  tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path)
    decision = w.strategy.run_once(slo())
    assert decision.numbers["ls_used_cores"] == 3.75
    assert decision.numbers["system_used_cores"] == 0.5
    assert decision.numbers["suppress_cores"] == 0.95
    assert decision.numbers["host_app_ls_used_cores"] == 1.25
    assert decision.numbers["host_app_used_cores"] == {"nginx": 1.0, "lone": 0.25, "yarn-task": 0.5}
    # The pods' LS usage alone is what the metric reports, as upstream's RecordBESuppressLSUsedCPU.
    assert w.metrics.ls_used == [2.5]
    without = w.strategy.run_once(slo(apps=[]))
    assert without.numbers["suppress_cores"] == 0.45 and "host_app_used_cores" not in without.numbers


def test_stale_host_app_samples_count_nowhere(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = world(fake_cgroup_host, tmp_path)
    w.clock.advance(10.0)  # host-app samples now older than 3 collect intervals; node and pods fresh again
    w.usage(node=6.75, ls=2.5, be=2.0)
    decision = w.strategy.run_once(slo())
    assert decision.numbers["ls_used_cores"] == 2.5 and decision.numbers["system_used_cores"] == 2.25


def test_be_host_app_tree_gets_the_be_cpuset(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """3.75 LS -> 0.95 cores -> the 2-CPU minimum, an HT pair (0,4), written to the BE pods and to the
    whole tree of the BE host application below besteffort; the LS host application is not touched."""
    w = world(fake_cgroup_host, tmp_path)
    fake_cgroup_host.mkdir_cgroup("host-latency-sensitive/nginx")
    fake_cgroup_host.write_cgroup("host-latency-sensitive/nginx", CPUSET_CPUS, "0-7\n")
    decision = w.strategy.run_once(slo())
    assert decision.action == "suppress", decision.summary
    assert {w.cpuset(d) for d in (*BE_DIRS, *YARN_DIRS)} == {"0,4"}
    assert w.cpuset("host-latency-sensitive/nginx") == "0-7"
    # Disabled: the host application's tree is recovered with the pods'.
    w.strategy.run_once(slo(), enabled=False)
    assert {w.cpuset(d) for d in (*BE_DIRS, *YARN_DIRS)} == {"0-7"}


def test_cfs_quota_on_besteffort_caps_the_be_host_app(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """The quota goes to the besteffort directory, the BE host application's parent: 950 milli-cores."""
    w = world(fake_cgroup_host, tmp_path)
    decision = w.strategy.run_once(slo("cfsQuota"))
    assert decision.numbers["quota_us"] == 95000
    w.kernel_normalise()
    assert w.quota() == 95000


def test_standalone_targets_besteffort_for_a_be_host_app() -> None:
    """On a standalone host the besteffort directory is a target only for pods found below it; a BE
    host application configured there makes it one too.  Directories outside it are ignored."""
    workload = dataclasses.replace(make_pod("w", "BE"), cgroup_dir="system.slice/w.service", source=WORKLOAD_SOURCE)
    assert be_targets(BE_DIR, [workload]).besteffort is False
    targets = be_targets(BE_DIR, [workload], [f"{BE_DIR}/hadoop-yarn", "elsewhere/x"])
    assert targets.besteffort is True and targets.roots == (BE_DIR, "system.slice/w.service")
    assert targets.host_app_dirs == (f"{BE_DIR}/hadoop-yarn",)
    assert be_targets(BE_DIR, [make_pod("p", "BE")], [f"{BE_DIR}/y"]).roots == (BE_DIR,)
