"""Pod and container CPU usage from cpuacct.usage (v1, ns) or cpu.stat usage_usec (v2, us)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, mkdirs, samples


def set_usage(host: FakeHost, rel: str, usec: int) -> None:
    """The kernel's counter for ``usec`` microseconds of CPU: cpuacct.usage counts ns, v2 cpu.stat's
    usage_usec counts us (next to user/system split and throttling counters that must not be read)."""
    if host.mode == "v1":
        host.write_cgroup(rel, "cpuacct.usage", f"{usec * 1000}\n")
    else:
        host.write_cpu_stat(rel, usage_usec=usec, user_usec=usec // 3, system_usec=usec - usec // 3,
                            nr_periods=usec // 100, nr_throttled=usec // 200, throttled_usec=usec * 7)


def test_rate_in_cores_from_the_version_unit(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Container: 2.000000 s -> 2.750000 s of CPU over 0.5 s = 1.5 cores; pod: 3.0 s -> 3.9 s = 1.8 cores.
    A v2 reader that forgot the usec -> ns factor would report 0.0015 and 0.0018."""
    host = fake_cgroup_host
    pod = make_pod("a")
    mkdirs(host, [pod])
    container = pod.containers[0]
    run = Single.start(PodResourceCollector(), make_options(host, tmp_path))
    run.pods(pod)
    set_usage(host, pod.cgroup_dir, 3_000_000)
    set_usage(host, container.cgroup_dir, 2_000_000)
    run.tick()
    set_usage(host, pod.cgroup_dir, 3_900_000)
    set_usage(host, container.cgroup_dir, 2_750_000)
    run.tick(0.5)
    assert samples(run.cache, names.POD_CPU_USAGE, labels_of(pod="uid-a")) == [(T0 + 0.5, pytest.approx(1.8))]
    assert samples(run.cache, names.CONTAINER_CPU_USAGE, labels_of(pod="uid-a", container="a-main")) == [
        (T0 + 0.5, pytest.approx(1.5))]


def test_first_tick_and_a_counter_going_back_make_no_sample(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """1.0 s -> 0.2 s (the container was recreated under the same name): no sample; 0.2 s -> 0.6 s over
    1 s: 0.4 cores, measured from the new counter."""
    host = fake_cgroup_host
    pod = make_pod("a", containers=())
    mkdirs(host, [pod])
    host.mkdir_cgroup(pod.cgroup_dir)
    run = Single.start(PodResourceCollector(), make_options(host, tmp_path))
    run.pods(pod)
    set_usage(host, pod.cgroup_dir, 1_000_000)
    run.tick()
    set_usage(host, pod.cgroup_dir, 200_000)
    run.tick(1.0)
    set_usage(host, pod.cgroup_dir, 600_000)
    run.tick(1.0)
    assert samples(run.cache, names.POD_CPU_USAGE, labels_of(pod="uid-a")) == [(T0 + 2.0, pytest.approx(0.4))]


def test_a_new_pod_starts_from_a_baseline_while_others_keep_theirs(fake_cgroup_host: FakeHost,
                                                                   tmp_path: Path) -> None:
    """a: 1 s -> 2 s -> 2.5 s over 1 s ticks: 1.0 then 0.5.  b joins at the second tick: its first read
    is its baseline (no sample then), 0.25 cores at the third."""
    host = fake_cgroup_host
    a, b = make_pod("a", containers=()), make_pod("b", containers=())
    for pod in (a, b):
        host.mkdir_cgroup(pod.cgroup_dir)
    run = Single.start(PodResourceCollector(), make_options(host, tmp_path))
    run.pods(a)
    set_usage(host, a.cgroup_dir, 1_000_000)
    run.tick()
    set_usage(host, a.cgroup_dir, 2_000_000)
    set_usage(host, b.cgroup_dir, 5_000_000)
    run.pods(b, a)  # a new order too: a's state must follow its key
    run.tick(1.0)
    set_usage(host, a.cgroup_dir, 2_500_000)
    set_usage(host, b.cgroup_dir, 5_250_000)
    run.tick(1.0)
    assert [v for _, v in samples(run.cache, names.POD_CPU_USAGE, labels_of(pod="uid-a"))] == [
        pytest.approx(1.0), pytest.approx(0.5)]
    assert samples(run.cache, names.POD_CPU_USAGE, labels_of(pod="uid-b")) == [(T0 + 2.0, pytest.approx(0.25))]
    assert not any(math.isnan(v) for _, v in samples(run.cache, names.POD_CPU_USAGE, labels_of(pod="uid-b")))
