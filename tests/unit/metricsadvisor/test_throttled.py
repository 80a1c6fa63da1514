"""Throttled ratio = d nr_throttled / d nr_periods, from cpu.stat in both versions; the throttled time
(v1 throttled_time in ns, v2 throttled_usec in us) is not part of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.throttled import ThrottledCollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, mkdirs, samples


def set_throttling(host: FakeHost, rel: str, periods: int, throttled: int) -> None:
    """cpu.stat with the counters; the throttled time (100 ms per throttled period) and bursts are there
    as the kernel prints them, in each version's unit."""
    if host.mode == "v1":
        host.write_cpu_stat(rel, nr_periods=periods, nr_throttled=throttled, throttled_time=throttled * 100_000_000,
                            nr_bursts=1, burst_time=5_000_000)
    else:
        host.write_cpu_stat(rel, usage_usec=periods * 50_000, user_usec=periods * 40_000,
                            system_usec=periods * 10_000, nr_periods=periods, nr_throttled=throttled,
                            throttled_usec=throttled * 100_000, nr_bursts=1, burst_usec=5_000)


def test_ratio_of_throttled_periods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Container: periods 100 -> 140, throttled 10 -> 20: 10/40 = 0.25.  Pod: 200 -> 300, 15 -> 20:
    5/100 = 0.05.  Then no period passes (an idle cgroup): ratio 0, not a division by zero."""
    host = fake_cgroup_host
    pod = make_pod("a")
    mkdirs(host, [pod])
    run = Single.start(ThrottledCollector(), make_options(host, tmp_path))
    run.pods(pod)
    container = pod.containers[0].cgroup_dir
    set_throttling(host, pod.cgroup_dir, 200, 15)
    set_throttling(host, container, 100, 10)
    run.tick()
    set_throttling(host, pod.cgroup_dir, 300, 20)
    set_throttling(host, container, 140, 20)
    run.tick(1.0)
    run.tick(1.0)
    assert samples(run.cache, names.POD_CPU_THROTTLED, labels_of(pod="uid-a")) == [
        (T0 + 1, pytest.approx(0.05)), (T0 + 2, 0.0)]
    assert samples(run.cache, names.CONTAINER_CPU_THROTTLED, labels_of(pod="uid-a", container="a-main")) == [
        (T0 + 1, pytest.approx(0.25)), (T0 + 2, 0.0)]


def test_counters_going_back_make_no_sample(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """100/10 -> 5/1 (recreated): nothing; 5/1 -> 25/6: 5/20 = 0.25."""
    host = fake_cgroup_host
    pod = make_pod("a", containers=())
    host.mkdir_cgroup(pod.cgroup_dir)
    run = Single.start(ThrottledCollector(), make_options(host, tmp_path))
    run.pods(pod)
    for periods, throttled in ((100, 10), (5, 1), (25, 6)):
        set_throttling(host, pod.cgroup_dir, periods, throttled)
        run.tick(1.0)
    assert samples(run.cache, names.POD_CPU_THROTTLED, labels_of(pod="uid-a")) == [(T0 + 3, pytest.approx(0.25))]
