"""Collectors on the real cgroup v1 hierarchy: busy loops in LS and BE containers with known quotas."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from koordlet import native
from koordlet.apis.pod import Container, Pod
from koordlet.config import gates
from koordlet.config.types import CollectorConfig
from koordlet.metriccache import CacheSettings, MetricCache, labels_of, names
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.framework import Options
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, KubeQoS
from koordlet.system.layout import detect_layout
from koordlet.system.node import NodeInfo, read_node_info
from tests.fixtures.realcgroup import RealCgroups

# The interpreter starts before it is attached, so its pages stay charged to the parent memory cgroup (v1 does
# not move charges): 4 MiB written after the attach give each container a memory usage of its own.
BUSY = "ballast = b'x' * (4 << 20)\nwhile True: pass"


@dataclass
class Informer:
    pod_list: tuple[PodMeta, ...]
    node_info: NodeInfo

    def pods(self) -> Sequence[PodMeta]:
        return self.pod_list

    def node(self) -> NodeInfo:
        return self.node_info

    def subscribe(self, callback: object) -> None:
        return None


def pod_meta(prefix: str, qos: KubeQoS, uid: str, container_ids: Sequence[str]) -> PodMeta:
    qdir = {KubeQoS.BURSTABLE: "kubepods/burstable", KubeQoS.BESTEFFORT: "kubepods/besteffort",
            KubeQoS.GUARANTEED: "kubepods"}[qos]
    pod_dir = f"{prefix}/{qdir}/pod{uid}"
    containers = tuple(ContainerMeta(name=c, container_id=c, cgroup_dir=f"{pod_dir}/{c}") for c in container_ids)
    pod = Pod(uid=uid, name=uid, namespace="default", labels={}, annotations={}, kube_qos=qos, phase="Running",
              priority=None, containers=tuple(Container(c, c) for c in container_ids))
    return PodMeta(pod=pod, cgroup_dir=pod_dir, containers=containers)


def make_advisor(tmp_path: Path, pods: Sequence[PodMeta], psi: bool = False) -> tuple[MetricsAdvisor, MetricCache,
                                                                                      Informer]:
    native.configure_fd_budget()
    paths = HostPaths()
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    informer = Informer(tuple(pods), read_node_info(paths))
    options = Options(paths=paths, layout=detect_layout(paths), driver=CgroupDriver.CGROUPFS, cache=cache,
                      informer=informer, config=CollectorConfig(psi_interval_seconds=1.0),
                      gates=gates.resolve({"PSICollector": psi}), clock=time.time)
    return MetricsAdvisor(options, build_collectors()), cache, informer


def run_for(advisor: MetricsAdvisor, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(advisor.run_once(), max(0.0, deadline - time.monotonic())))
    advisor.run_once(force=True)


def time_weighted(times: Sequence[float], rates: Sequence[float]) -> float:
    """Mean of rates over [times[0], times[-1]]: each rate covers the interval since the previous sample."""
    total = sum(r * (t - prev) for prev, t, r in zip(times, times[1:], rates[1:], strict=False))
    return total / (times[-1] - times[0])


def cpuacct(groups: RealCgroups, rel: str) -> int:
    return int((groups.path("cpuacct", rel) / "cpuacct.usage").read_text())


def cpu_stat(groups: RealCgroups, rel: str) -> tuple[int, int]:
    stat = dict(line.split() for line in (groups.path("cpu", rel) / "cpu.stat").read_text().splitlines())
    return int(stat["nr_periods"]), int(stat["nr_throttled"])


def proc_stat_busy() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / 100.0


def test_container_and_node_usage_match_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    prefix = real_cgroups.name
    ls = pod_meta(prefix, KubeQoS.BURSTABLE, "ls-pod", ["ls1"])
    be = pod_meta(prefix, KubeQoS.BESTEFFORT, "be-pod", ["be1", "be2"])
    quotas = {ls.containers[0]: 80_000, be.containers[0]: 50_000, be.containers[1]: 30_000}
    for container, quota in quotas.items():
        rel = container.cgroup_dir.removeprefix(prefix + "/")
        real_cgroups.mkdir(rel)
        real_cgroups.write("cpu", rel, "cpu.cfs_quota_us", str(quota))
        real_cgroups.spawn(rel, BUSY)
    advisor, cache, _ = make_advisor(tmp_path, [ls, be])
    run_for(advisor, 1.0)  # warm up: the first sample of each counter only sets a baseline

    ls_rel = ls.containers[0].cgroup_dir.removeprefix(prefix + "/")
    stat_before = cpu_stat(real_cgroups, ls_rel)
    before = {c: cpuacct(real_cgroups, c.cgroup_dir.removeprefix(prefix + "/")) for c in quotas}
    busy_before = proc_stat_busy()
    start = time.time()
    advisor.run_once(force=True)
    run_for(advisor, 4.0)
    end = time.time()
    busy_after = proc_stat_busy()
    after = {c: cpuacct(real_cgroups, c.cgroup_dir.removeprefix(prefix + "/")) for c in quotas}

    kernel_total = 0.0
    for container, quota in quotas.items():
        labels = labels_of(pod=ls.uid if container in ls.containers else be.uid, container=container.container_id)
        times, values = cache.window(names.CONTAINER_CPU_USAGE, labels, start, end)
        assert len(values) >= 4, container
        collected = time_weighted(times, values)
        kernel = (after[container] - before[container]) / 1e9 / (end - start)
        assert collected == pytest.approx(kernel, rel=0.05), (container.container_id, collected, kernel)
        assert collected <= quota / 100_000 * 1.1  # the quota held (less when the host is busy)
        kernel_total += kernel
        _, memory = cache.window(names.CONTAINER_MEMORY_USAGE, labels, start, end)
        assert memory and all(m > 0 for m in memory)

    node_times, node = cache.window(names.NODE_CPU_USAGE, (), start, end)
    collected_node = time_weighted(node_times, node)
    kernel_node = (busy_after - busy_before) / (end - start)
    assert collected_node == pytest.approx(kernel_node, rel=0.05, abs=0.05)
    assert collected_node >= kernel_total * 0.95  # the node ran at least the three containers' work
    pod_times, pod_usage = cache.window(names.POD_CPU_USAGE, labels_of(pod=be.uid), start, end)
    be_kernel = sum((after[c] - before[c]) / 1e9 / (end - start) for c in be.containers)
    assert time_weighted(pod_times, pod_usage) == pytest.approx(be_kernel, rel=0.05)  # both BE containers
    be_usage = cache.latest(names.BE_CPU_REQUEST, ())
    assert be_usage is not None
    assert cache.latest(names.SYSTEM_CPU_USAGE, ()) is not None
    _, throttled = cache.window(names.CONTAINER_CPU_THROTTLED, labels_of(pod=ls.uid, container="ls1"), start, end)
    stat_after = cpu_stat(real_cgroups, ls_rel)
    kernel_ratio = (stat_after[1] - stat_before[1]) / max(1, stat_after[0] - stat_before[0])
    # The whole window's ratio lies within what the ticks saw (all near 1 on an idle host: a busy loop
    # under a quota is throttled in most periods; lower when other load keeps it below its quota).
    assert min(throttled) - 0.05 <= kernel_ratio <= max(throttled) + 0.05, (kernel_ratio, throttled)
    assert advisor.errors == {}


def test_pressure_rises_under_cpu_contention(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    prefix = real_cgroups.name
    hog = pod_meta(prefix, KubeQoS.BESTEFFORT, "hog-pod", ["hog"])
    rel = hog.containers[0].cgroup_dir.removeprefix(prefix + "/")
    real_cgroups.mkdir(rel)
    advisor, cache, _ = make_advisor(tmp_path, [hog], psi=True)
    advisor.run_once(force=True)
    labels = labels_of(pod=hog.uid, container="hog", resource="cpu", kind="some")
    # An empty cgroup's PSI starts at zero; three unthrottled loops on this 2-CPU host must wait for CPU.
    for _ in range(3):
        real_cgroups.spawn(rel, BUSY)
    deadline = time.monotonic() + 15
    rising = None
    while time.monotonic() < deadline:
        run_for(advisor, 1.0)
        rising = cache.latest(names.CONTAINER_PSI, labels)
        if rising is not None and rising[1] > 1.0:
            break
    assert rising is not None and rising[1] > 1.0, rising
    node_psi = cache.latest(names.NODE_PSI, labels_of(resource="cpu", kind="some"))
    assert node_psi is not None and node_psi[1] > 0


def test_vanishing_cgroup_gives_no_exception_and_no_stale_series(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    prefix = real_cgroups.name
    pod = pod_meta(prefix, KubeQoS.BESTEFFORT, "gone-pod", ["c1"])
    rel = pod.containers[0].cgroup_dir.removeprefix(prefix + "/")
    real_cgroups.mkdir(rel)
    advisor, cache, informer = make_advisor(tmp_path, [pod])
    advisor.run_once(force=True)
    advisor.run_once(force=True)
    labels = labels_of(pod=pod.uid, container="c1")
    last = cache.latest(names.CONTAINER_MEMORY_USAGE, labels)
    assert last is not None
    real_cgroups.remove(rel)
    real_cgroups.remove(rel.rsplit("/", 1)[0])
    advisor.run_once(force=True)  # the informer still lists the pod: its entries fail alone
    assert cache.latest(names.CONTAINER_MEMORY_USAGE, labels) == last
    assert advisor.errors == {}
    informer.pod_list = ()
    advisor.run_once(force=True)
    assert cache.series(names.CONTAINER_MEMORY_USAGE) == []
    assert cache.series(names.POD_CPU_USAGE) == []
