"""Collectors on real cgroups - the v1 hierarchy on the host, the pure v2 one in the guest: busy loops in LS
and BE containers with known quotas, each figure checked against the kernel's own counter of that version
(v1 ``cpuacct.usage`` / v2 ``cpu.stat`` usage_usec, ``memory.stat``, ``cpu.stat`` throttling, PSI)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
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
from koordlet.system.node import read_node_info
from tests.fixtures.fixedpods import Informer
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until

# The interpreter starts before it is attached, so its pages stay charged to the parent memory cgroup (neither
# v1 nor v2 moves charges on migration): 4 MiB written after the attach give each container a memory usage of
# its own.
BALLAST_BYTES = 4 << 20
BUSY = f"ballast = b'x' * {BALLAST_BYTES}\nwhile True: pass"
# Koordinator's memory usage is memory.stat's anon + unevictable (page cache left out); memory_stat() gives the
# v1 hierarchical total_* keys under these v2 names.
MEMORY_USAGE_KEYS = ("inactive_anon", "active_anon", "unevictable")


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
    informer = Informer(tuple(pods), read_node_info(paths, native))
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


def memory_anon(groups: RealCgroups, rel: str) -> int:
    stat = groups.memory_stat(rel)
    return sum(stat[k] for k in MEMORY_USAGE_KEYS)


def proc_stat() -> tuple[float, float]:
    """CPU seconds of the node in /proc/stat's cpu line: busy (user + nice + system + irq + softirq) and
    everything accounted (the first eight fields; guest time is inside user)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / tick, sum(fields[:8]) / tick


def node_memory_used() -> int:
    """MemTotal - MemAvailable of /proc/meminfo, in bytes."""
    info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    return info["MemTotal"] - info["MemAvailable"]


def psi_some_avg10(path: Path) -> float:
    """The ``some avg10`` percentage of a pressure file, as the kernel prints it."""
    some = Path(path).read_text().splitlines()[0].split()
    return float(dict(f.split("=") for f in some[1:])["avg10"])


def rel_of(groups: RealCgroups, cgroup_dir: str) -> str:
    return cgroup_dir.removeprefix(groups.name + "/")


def _nearest_within(collected: float, first: float, second: float) -> float:
    """The kernel's value within the bracket of two reads taken around a collection that is nearest to it."""
    low, high = sorted((first, second))
    return min(max(collected, low), high)


def test_container_and_node_usage_match_the_kernel(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    ls = pod_meta(real_cgroups.name, KubeQoS.BURSTABLE, "ls-pod", ["ls1"])
    be = pod_meta(real_cgroups.name, KubeQoS.BESTEFFORT, "be-pod", ["be1", "be2"])
    # (quota, period) in µs.  ls1's 0.1 core is below what its loop gets even on a busy 2-CPU machine, so the
    # kernel throttles it in most periods.  Periods of 100 ms: an emulated guest enforces a quota only at its
    # coarse timer ticks, and a 1 ms quota in 10 ms periods was overrun by 15% there.
    quotas = {ls.containers[0]: (10_000, 100_000), be.containers[0]: (50_000, 100_000),
              be.containers[1]: (30_000, 100_000)}
    rels = {c: rel_of(real_cgroups, c.cgroup_dir) for c in quotas}
    for rel in rels.values():
        real_cgroups.mkdir(rel)
        real_cgroups.spawn(rel, BUSY)
    # The quotas go on once every loop holds its ballast: under a 0.1-core quota, what is left of the
    # interpreter's start takes tens of seconds in an emulated (TCG) guest.
    wait_until("each container's ballast charged to it", timeout=120, check=lambda: all(
        memory_anon(real_cgroups, rel) >= BALLAST_BYTES for rel in rels.values()))
    for container, (quota, period) in quotas.items():
        real_cgroups.set_cpu_quota(rels[container], quota, period)
    owners = {c: (ls if c in ls.containers else be) for c in quotas}
    advisor, cache, _ = make_advisor(tmp_path, [ls, be])
    run_for(advisor, 1.0)  # warm up: the first sample of each counter only sets a baseline

    ls_rel = rels[ls.containers[0]]
    stat_before = real_cgroups.cpu_throttling(ls_rel)
    before = {c: real_cgroups.cpu_usage_ns(rel) for c, rel in rels.items()}
    busy_before, accounted_before = proc_stat()
    start = time.time()
    advisor.run_once(force=True)
    run_for(advisor, 4.0)
    end = time.time()
    busy_after, accounted_after = proc_stat()
    after = {c: real_cgroups.cpu_usage_ns(rel) for c, rel in rels.items()}
    stat_after = real_cgroups.cpu_throttling(ls_rel)
    # A v2 memory.stat is flushed lazily and pages still move while the test reads (a loop still starting under
    # its quota in an emulated guest beside a CPU hog grew 700 KB): one more collection, after the CPU window
    # closed, bracketed by two kernel reads of each container and pod.
    anon_before = {c: memory_anon(real_cgroups, rel) for c, rel in rels.items()}
    pod_anon_before = {p.uid: memory_anon(real_cgroups, rel_of(real_cgroups, p.cgroup_dir)) for p in (ls, be)}
    advisor.run_once(force=True)
    node_memory_kernel = node_memory_used()
    anon = {c: memory_anon(real_cgroups, rel) for c, rel in rels.items()}
    charged = {c: real_cgroups.memory_usage(rel) for c, rel in rels.items()}
    pod_anon = {p.uid: memory_anon(real_cgroups, rel_of(real_cgroups, p.cgroup_dir)) for p in (ls, be)}
    pod_kernel = {p.uid: sum(after[c] - before[c] for c in p.containers) / 1e9 / (end - start) for p in (ls, be)}

    checks: list[tuple[str, float, float, float]] = []  # what, collected, kernel, relative tolerance
    kernel_total = 0.0
    for container, (quota, period) in quotas.items():
        labels = labels_of(pod=owners[container].uid, container=container.container_id)
        times, values = cache.window(names.CONTAINER_CPU_USAGE, labels, start, end)
        assert len(values) >= 4, container
        kernel = (after[container] - before[container]) / 1e9 / (end - start)
        assert kernel > 0, container.container_id  # the loop ran in its cgroup
        assert time_weighted(times, values) <= quota / period * 1.1  # the quota held (less on a busy machine)
        checks.append((f"cpu {container.container_id}", time_weighted(times, values), kernel, 0.05))
        kernel_total += kernel
        memory = cache.latest(names.CONTAINER_MEMORY_USAGE, labels)
        assert memory is not None
        checks.append((f"memory {container.container_id}", memory[1],
                       _nearest_within(memory[1], anon_before[container], anon[container]), 0.05))
        # The ballast is the container's own, and page cache and kernel memory come on top of anon pages.
        assert BALLAST_BYTES <= memory[1] <= charged[container] * 1.05, (memory, charged[container])
    for pod in (ls, be):
        pod_times, pod_usage = cache.window(names.POD_CPU_USAGE, labels_of(pod=pod.uid), start, end)
        checks.append((f"cpu pod {pod.uid}", time_weighted(pod_times, pod_usage), pod_kernel[pod.uid], 0.05))
        pod_memory = cache.latest(names.POD_MEMORY_USAGE, labels_of(pod=pod.uid))
        assert pod_memory is not None
        assert pod_memory[1] >= len(pod.containers) * BALLAST_BYTES  # hierarchical: its containers' ballasts
        checks.append((f"memory pod {pod.uid}", pod_memory[1],
                       _nearest_within(pod_memory[1], pod_anon_before[pod.uid], pod_anon[pod.uid]), 0.05))
    node_times, node = cache.window(names.NODE_CPU_USAGE, (), start, end)
    collected_node = time_weighted(node_times, node)
    checks.append(("cpu node", collected_node, (busy_after - busy_before) / (end - start), 0.05))
    node_memory = cache.latest(names.NODE_MEMORY_USAGE, ())
    assert node_memory is not None
    checks.append(("memory node", node_memory[1], node_memory_kernel, 0.05))
    # /proc/stat's busy time is sampled by the timer tick while idle time is measured (nohz); an emulated
    # (TCG) guest loses ticks whenever the host runs something else, so its /proc/stat accounts less time
    # than passed, and the busy loops' lost ticks are missing from busy (measured in the guest: 72% of the
    # time accounted, 0.35 cores busy while the cgroups' own clocks counted 0.82).
    coverage = (accounted_after - accounted_before) / ((os.cpu_count() or 1) * (end - start))
    _, throttled = cache.window(names.CONTAINER_CPU_THROTTLED, labels_of(pod=ls.uid, container="ls1"), start, end)
    periods, nr_throttled, throttled_ns = (a - b for a, b in zip(stat_after, stat_before, strict=True))
    kernel_ratio = nr_throttled / max(1, periods)
    print(f"cgroup v{real_cgroups.version}: " + "; ".join(
        f"{what} collected {c:.4g} kernel {k:.4g} ({(c - k) / k * 100 if k else 0:+.2f}%)" for what, c, k, _ in checks))
    print(f"containers {kernel_total:.3f} cores; /proc/stat accounted {coverage:.1%} of the CPUs' time")
    print(f"throttling ls1: {nr_throttled}/{periods} periods throttled ({kernel_ratio:.3f}), "
          f"{throttled_ns / 1e6:.1f} ms throttled in {end - start:.2f} s; collected per tick {throttled}")

    for what, collected, kernel, rel in checks:
        assert collected == pytest.approx(kernel, rel=rel, abs=0.05 if what == "cpu node" else None), what
    # The node ran at least the three containers' work, less what lost ticks hid: time /proc/stat did not
    # account for can only have been busy time (idle time is measured, not sampled), so at most all of it.
    unaccounted_cores = max(0.0, 1.0 - coverage) * (os.cpu_count() or 1)
    assert collected_node >= kernel_total * 0.95 - unaccounted_cores, (collected_node, kernel_total, coverage)
    assert cache.latest(names.BE_CPU_REQUEST, ()) is not None
    assert cache.latest(names.SYSTEM_CPU_USAGE, ()) is not None
    assert nr_throttled > 0 and throttled_ns > 0, (nr_throttled, throttled_ns)  # throttled_time / throttled_usec
    # The whole window's ratio lies within what the ticks saw (near 1 on an idle machine: a busy loop under a
    # quota is throttled in most periods; lower when other load keeps it below its quota).
    assert min(throttled) - 0.05 <= kernel_ratio <= max(throttled) + 0.05, (kernel_ratio, throttled)
    assert max(throttled) > 0
    assert advisor.errors == {}


def test_pressure_matches_the_kernels_avg10(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    hog = pod_meta(real_cgroups.name, KubeQoS.BESTEFFORT, "hog-pod", ["hog"])
    rel = rel_of(real_cgroups, hog.containers[0].cgroup_dir)
    real_cgroups.mkdir(rel)
    advisor, cache, _ = make_advisor(tmp_path, [hog], psi=True)
    advisor.run_once(force=True)
    labels = labels_of(pod=hog.uid, container="hog", resource="cpu", kind="some")
    # An empty cgroup's PSI starts at zero; three unthrottled loops on this 2-CPU host must wait for CPU.
    for _ in range(3):
        real_cgroups.spawn(rel, BUSY)
    kernel_file = real_cgroups.path("unified", rel) / "cpu.pressure"

    def tick_between_kernel_updates() -> tuple[float, float, float] | None:
        # The kernel recomputes avg10 every 2 s: a tick with the same value read before and after it
        # saw that value, so the collected one must equal it.
        node_before, before = psi_some_avg10(Path("/proc/pressure/cpu")), psi_some_avg10(kernel_file)
        advisor.run_once(force=True)
        collected = cache.latest(names.CONTAINER_PSI, labels)
        node_collected = cache.latest(names.NODE_PSI, labels_of(resource="cpu", kind="some"))
        after, node_after = psi_some_avg10(kernel_file), psi_some_avg10(Path("/proc/pressure/cpu"))
        if collected is None or node_collected is None or before != after or node_before != node_after:
            return None
        if before <= 1.0:  # not under pressure yet
            return None
        return collected[1], after, node_collected[1] - node_after

    collected, kernel, node_error = wait_until("cgroup cpu pressure above 1% between two kernel updates",
                                               tick_between_kernel_updates, timeout=60)
    print(f"cgroup v{real_cgroups.version}: container cpu some avg10 collected {collected} kernel {kernel}; "
          f"node collected - kernel {node_error:+.2f}")
    assert collected == pytest.approx(kernel, abs=0.005)
    assert node_error == pytest.approx(0, abs=0.005)
    assert advisor.errors == {}


def test_vanishing_cgroup_gives_no_exception_and_no_stale_series(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    pod = pod_meta(real_cgroups.name, KubeQoS.BESTEFFORT, "gone-pod", ["c1"])
    rel = rel_of(real_cgroups, pod.containers[0].cgroup_dir)
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
