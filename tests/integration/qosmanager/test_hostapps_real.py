"""Host applications on the real cgroup hierarchy (v1 on the host, pure v2 in the guest), all under the
test's own prefix: an LS application at ``<prefix>/host-latency-sensitive/nginx`` (base ``CgroupRoot``)
and a BE one at ``<prefix>/kubepods/besteffort/hadoop-yarn`` (base ``KubepodsBesteffort``, kubelet's cgroup
root being the prefix), each running a busy loop that also holds 64 MiB of written memory.

What is checked against the kernel's own counters, on a shared host that may be busy:

* the collector's CPU usage of each application lies between the least and most its cgroup's counter can
  have advanced over the collection interval (readings taken just before and after the collectors ran),
  and its memory is the kernel's anon + unevictable of the cgroup, which holds the 64 MiB;
* NodeMetric's ``hostApplicationMetric`` is the average of those samples, with the entries' priority and QoS;
* cpusuppress counts the LS application as LS usage (the decision's numbers) and narrows the BE
  application's whole tree, down to the cgroup its process runs in (deeper than a pod's containers), to the
  BE cpuset: the kernel holds it and the process's allowed CPUs are exactly those;
* under the cfsQuota policy the besteffort cgroup, the BE application's parent, holds BE's quota, and the
  BE application used no more than it allows.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from koordlet import native
from koordlet.apis.nodemetric import NodeMetricCollectPolicy
from koordlet.apis.nodeslo import HostApplicationSpec, NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Container, Pod
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache, names
from koordlet.metricsadvisor import framework as advisor_framework
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.cpusuppress import CPUSuppress
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.statesinformer import hostapps
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.nodemetric import build_node_metric
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import read_node_info
from koordlet.system.validators import parse_cpulist
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until
from tests.unit.qosmanager.fakes import FakeInformer

INTERVAL = 1.0
MIB = 1 << 20
HOLD = 64 * MIB
BUSY_HOLDING = f"data = b'x' * {HOLD}\nwhile True: pass"
"""A busy loop holding 64 MiB it wrote (so the pages are charged as anon memory)."""
LS_DIR = "host-latency-sensitive/nginx"
BE_DIR = "kubepods/besteffort"
YARN_DIR = f"{BE_DIR}/hadoop-yarn"
YARN_TASK = f"{YARN_DIR}/container_1/task"
THRESHOLD_PERCENT = 50
"""Half the host's CPUs: with the LS application's loop running, BE's allowance is at most what one CPU
minus LS leaves, at most one CPU, so the cpuset policy always narrows BE to its minimum of one CPU and the
quota policy to a small fraction of one."""
MEASURE_TOLERANCE_CORES = 0.01
TOLERANCE_CORES = 0.05
GUEST_TOLERANCE_RATIO = 0.1
"""As in the cpusuppress real test: the v2 guest's CPU-time counters and clock drift apart by several %."""


def pod_meta(prefix: str, qos: KubeQoS, uid: str) -> PodMeta:
    pod_dir = f"{prefix}/{'kubepods/burstable' if qos is KubeQoS.BURSTABLE else BE_DIR}/pod{uid}"
    pod = Pod(uid=uid, name=uid, namespace="default", labels={}, annotations={}, kube_qos=qos, phase="Running",
              priority=None, containers=(Container("c", "c"),))
    return PodMeta(pod=pod, cgroup_dir=pod_dir, containers=(ContainerMeta("c", "c", f"{pod_dir}/c"),))


def spec(prefix: str, policy: str = "cpuset") -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": policy,
                                        "cpuSuppressThresholdPercent": THRESHOLD_PERCENT},
        "hostApplications": [
            {"name": "nginx", "priority": "koord-prod", "qos": "LS",
             "cgroupPath": {"base": "CgroupRoot", "parentDir": f"{prefix}/host-latency-sensitive",
                            "relativePath": "nginx/"}},
            {"name": "yarn-task", "priority": "koord-batch", "qos": "BE",
             "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}}]}))


@dataclass
class Rig:
    groups: RealCgroups
    advisor: MetricsAdvisor
    cache: MetricCache
    strategy: CPUSuppress
    slo: NodeSLOSpec
    yarn_pid: int
    """The BE application's process (in its deepest cgroup)."""
    readings: list[dict[str, tuple[float, int]]] = dataclasses.field(default_factory=list)

    def _read(self) -> dict[str, tuple[float, int]]:
        return {name: (time.time(), self.groups.cpu_usage_ns(rel)) for name, rel in (("nginx", LS_DIR),
                                                                                      ("yarn-task", YARN_DIR))}

    def collect(self) -> None:
        """One run of the collectors, bracketed by readings of the applications' counters."""
        before = self._read()
        self.advisor.run_once(force=True)
        after = self._read()
        self.readings += [before, after]

    def bounds(self, name: str) -> tuple[float, float]:
        """Least and most cores the collector can have measured for ``name`` over the last interval."""
        prev_before, prev_after, cur_before, cur_after = (r[name] for r in self.readings[-4:])
        low = (cur_before[1] - prev_after[1]) / 1e9 / (cur_after[0] - prev_before[0])
        high = (cur_after[1] - prev_before[1]) / 1e9 / (cur_before[0] - prev_after[0])
        return max(low, 0.0), high


def make_rig(groups: RealCgroups, tmp_path: Path) -> Rig:
    native.configure_fd_budget()
    prefix = groups.name
    pods = (pod_meta(prefix, KubeQoS.BURSTABLE, "ls"), pod_meta(prefix, KubeQoS.BESTEFFORT, "be"))
    for pod in pods:
        groups.mkdir(pod.containers[0].cgroup_dir.removeprefix(prefix + "/"))
    groups.mkdir(LS_DIR)
    groups.mkdir(YARN_TASK)
    groups.spawn(LS_DIR, BUSY_HOLDING)
    yarn_pid = groups.spawn(YARN_TASK, BUSY_HOLDING)
    # The interpreters start slowly in the v2 guest (TCG): measure once both hold their memory.
    for rel in (LS_DIR, YARN_DIR):
        wait_until(f"{rel} holding its {HOLD >> 20} MiB", lambda r=rel: memory_without_cache(groups, r) >= HOLD,
                   timeout=60.0)
    slo = spec(prefix)
    paths = HostPaths()
    layout = detect_layout(paths)
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    informer = FakeInformer(list(pods), read_node_info(paths, native))
    apps: tuple[HostApplicationSpec, ...] = slo.host_applications or ()
    advisor = MetricsAdvisor(
        advisor_framework.Options(paths=paths, layout=layout, driver=CgroupDriver.CGROUPFS, cache=cache,
                                  informer=informer, config=CollectorConfig(), gates=gates.resolve({}),
                                  clock=time.time, kube_parent=prefix, host_apps=lambda: apps),
        build_collectors())
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=informer, cache=cache,
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(be_min_cpuset_cpus=1), collector=CollectorConfig(),
                      gates=gates.resolve({}), clock=time.time, decisions=DecisionLog(), kube_parent=prefix)
    rig = Rig(groups, advisor, cache, CPUSuppress(options), slo, yarn_pid)
    rig.collect()  # the baseline of every counter
    time.sleep(INTERVAL)
    return rig


def memory_without_cache(groups: RealCgroups, rel: str) -> int:
    stat = groups.memory_stat(rel)
    return stat["inactive_anon"] + stat["active_anon"] + stat["unevictable"]


def test_host_apps_collected_reported_and_suppressed(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    groups = real_cgroups
    rig = make_rig(groups, tmp_path)
    apps = rig.slo.host_applications or ()
    assert hostapps.cgroup_dir(apps[1], CgroupDriver.CGROUPFS, groups.name) == f"{groups.name}/{YARN_DIR}"
    rig.collect()
    kernel_memory = {"nginx": memory_without_cache(groups, LS_DIR), "yarn-task": memory_without_cache(groups, YARN_DIR)}
    for name in ("nginx", "yarn-task"):
        labels = hostapps.labels(name)
        low, high = rig.bounds(name)
        cpu = rig.cache.latest(names.HOST_APP_CPU_USAGE, labels)
        assert cpu is not None and low - MEASURE_TOLERANCE_CORES <= cpu[1] <= high + MEASURE_TOLERANCE_CORES, (
            name, low, high, cpu)
        memory = rig.cache.latest(names.HOST_APP_MEMORY_USAGE, labels)
        assert memory is not None and memory[1] >= HOLD, (name, memory)
        # The process is steady: the kernel's figure read just after the collectors is the same (a few
        # pages of interpreter activity aside).
        assert abs(memory[1] - kernel_memory[name]) <= 2 * MIB, (name, memory, kernel_memory[name])
        with_cache = rig.cache.latest(names.HOST_APP_MEMORY_WITH_PAGE_CACHE, labels)
        assert with_cache is not None and with_cache[1] >= memory[1] - 2 * MIB
    total = rig.cache.latest(names.HOST_APPS_CPU_USAGE, ())
    apps_cpu = [rig.cache.latest(names.HOST_APP_CPU_USAGE, hostapps.labels(n)) for n in ("nginx", "yarn-task")]
    assert total is not None and total[1] == sum(s[1] for s in apps_cpu if s is not None)

    # NodeMetric: the average of the samples in the window, with the entries' priority and QoS.
    status = build_node_metric(rig.cache, FakeInformer([], rig.strategy.options.informer.node()),
                               NodeMetricCollectPolicy(aggregate_duration_seconds=60.0), time.time(),
                               host_apps=apps)
    reported = {m.name: m for m in status.host_application_metric}
    assert sorted(reported) == ["nginx", "yarn-task"]
    nginx_cpu = [v for _, v in zip(*rig.cache.window(names.HOST_APP_CPU_USAGE, hostapps.labels("nginx"), 0,
                                                     time.time()), strict=True)]
    assert reported["nginx"].usage.cpu_milli == int(sum(nginx_cpu) / len(nginx_cpu) * 1000)
    assert (reported["nginx"].priority.value, reported["nginx"].qos.value) == ("koord-prod", "LS")
    assert (reported["yarn-task"].priority.value, reported["yarn-task"].qos.value) == ("koord-batch", "BE")
    assert status.to_json()["hostApplicationMetric"][0]["name"] == "nginx"

    # cpusuppress, cpuset policy: nginx is LS usage; yarn's whole tree gets BE's cpuset.
    decision = rig.strategy.run_once(rig.slo)
    assert decision.action == "suppress", decision.summary
    numbers = decision.numbers
    nginx_seen = numbers["host_app_used_cores"]["nginx"]
    assert numbers["host_app_ls_used_cores"] == nginx_seen
    assert numbers["ls_used_cores"] >= nginx_seen  # the idle LS pod adds (about) nothing
    cpus = numbers["be_cpuset"]
    node_cpus = len(rig.strategy.options.informer.node().processors())
    if node_cpus > 1:
        assert len(parse_cpulist(cpus)) < node_cpus, decision.summary  # BE was really narrowed
    for rel in (BE_DIR, YARN_DIR, f"{YARN_DIR}/container_1", YARN_TASK):
        assert parse_cpulist(groups.cpuset_cpus(rel) or cpus) == parse_cpulist(cpus), (rel, decision.summary)
    status_lines = Path(f"/proc/{rig.yarn_pid}/status").read_text().splitlines()
    allowed = next(line.split(":", 1)[1].strip() for line in status_lines if line.startswith("Cpus_allowed_list:"))
    assert parse_cpulist(allowed) == parse_cpulist(cpus), (allowed, decision.summary)

    # cfsQuota policy: the quota sits on besteffort, the BE application's parent, and binds it.
    time.sleep(INTERVAL)
    rig.collect()
    quota_slo = spec(groups.name, "cfsQuota")
    decision = rig.strategy.run_once(quota_slo)
    assert decision.numbers["policy"] == "cfsQuota", decision.summary
    quota, period = groups.cpu_quota(BE_DIR)
    assert quota == decision.numbers["quota_us"], decision.summary
    time.sleep(0.2)  # past the period of the write, whose refilled runtime may run a whole extra quota
    before, start = groups.cpu_usage_ns(YARN_DIR), time.monotonic()
    time.sleep(INTERVAL)
    used = (groups.cpu_usage_ns(YARN_DIR) - before) / 1e9 / (time.monotonic() - start)
    target = quota / period
    allowance = TOLERANCE_CORES + target * 0.1 / INTERVAL + (GUEST_TOLERANCE_RATIO * target if groups.version == 2
                                                              else 0.0)
    assert used <= target + allowance, (used, target, decision.summary)
