"""Best-effort usage, request and real limit: v1 cpuacct.usage / cfs quota and period / cpuset.cpus,
v2 cpu.stat usage_usec / cpu.max / cpuset.cpus.effective."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.apis.pod import Resources
from koordlet.metriccache import names
from koordlet.metricsadvisor.collectors.beresource import BEResourceCollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, samples

BE = "kubepods/besteffort"


def set_be(host: FakeHost, rel: str, *, usage_usec: int, cpus: str, quota: int | None, period: int = 100_000) -> None:
    """The besteffort cgroup as each version shows it (quota None: unlimited, -1 in v1, "max" in v2)."""
    if host.mode == "v1":
        host.write_cgroup(rel, "cpuacct.usage", f"{usage_usec * 1000}\n")
        host.write_cgroup(rel, "cpu.cfs_quota_us", f"{-1 if quota is None else quota}\n")
        host.write_cgroup(rel, "cpu.cfs_period_us", f"{period}\n")
        host.write_cgroup(rel, "cpuset.cpus", f"{cpus}\n")
    else:
        host.write_cpu_stat(rel, usage_usec=usage_usec, user_usec=usage_usec // 2, nr_periods=10, nr_throttled=5,
                            throttled_usec=usage_usec * 3)
        host.write_cgroup(rel, "cpu.max", f"{'max' if quota is None else quota} {period}\n")
        host.write_cgroup(rel, "cpuset.cpus.effective", f"{cpus}\n")


@pytest.mark.parametrize(("quota", "cpus", "limit"), [
    (250_000, "0-3", 2.5),  # quota 2.5 cores under 4 CPUs
    (600_000, "0,2-3", 3.0),  # quota above the cpuset: 3 CPUs
    (None, "1-2", 2.0),  # unlimited quota: the cpuset alone
])
def test_usage_and_limit(fake_cgroup_host: FakeHost, tmp_path: Path, quota: int | None, cpus: str,
                         limit: float) -> None:
    """Usage: 4.0 s -> 5.5 s of CPU over 1 s = 1.5 cores (a v2 reader skipping usec -> ns: 0.0015)."""
    host = fake_cgroup_host
    host.mkdir_cgroup(BE)
    run = Single.start(BEResourceCollector(), make_options(host, tmp_path))
    set_be(host, BE, usage_usec=4_000_000, cpus=cpus, quota=quota)
    run.tick()
    set_be(host, BE, usage_usec=5_500_000, cpus=cpus, quota=quota)
    run.tick(1.0)
    assert samples(run.cache, names.BE_CPU_USAGE) == [(T0 + 1, pytest.approx(1.5))]
    assert samples(run.cache, names.BE_CPU_LIMIT) == [(T0, limit), (T0 + 1, limit)]


def test_request_is_the_batch_cpu_of_be_pods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """BE pod x: 2 containers x 750m, BE pod y: 250m, an LS pod's 1000m batch request is not BE's:
    1500 + 250 = 1750m = 1.75 cores."""
    host = fake_cgroup_host
    host.mkdir_cgroup(BE)
    run = Single.start(BEResourceCollector(), make_options(host, tmp_path))
    run.pods(make_pod("x", "BE", containers=("c1", "c2"), requests=Resources(batch_cpu_milli=750)),
             make_pod("y", "BE", requests=Resources(batch_cpu_milli=250)),
             make_pod("z", "LS", requests=Resources(batch_cpu_milli=1000)),
             make_pod("w", "BE"))
    run.tick()
    assert samples(run.cache, names.BE_CPU_REQUEST) == [(T0, 1.75)]


def test_under_a_kubelet_cgroup_root(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    host = fake_cgroup_host
    rel = f"custom/{BE}"
    host.mkdir_cgroup(rel)
    run = Single.start(BEResourceCollector(), make_options(host, tmp_path, kube_parent="/custom/"))
    set_be(host, rel, usage_usec=0, cpus="0-1", quota=50_000)
    run.tick()
    assert samples(run.cache, names.BE_CPU_LIMIT) == [(T0, 0.5)]


def test_without_a_besteffort_cgroup_only_the_request_is_reported(fake_cgroup_host: FakeHost,
                                                                  tmp_path: Path) -> None:
    run = Single.start(BEResourceCollector(), make_options(fake_cgroup_host, tmp_path))
    run.tick()
    run.tick(1.0)
    assert samples(run.cache, names.BE_CPU_REQUEST) == [(T0, 0.0), (T0 + 1, 0.0)]
    assert samples(run.cache, names.BE_CPU_USAGE) == [] and samples(run.cache, names.BE_CPU_LIMIT) == []


def test_a_host_without_the_hierarchies_measures_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    """A v1 host without cpuacct mounted: no BE cgroup to measure, and no exception at setup."""
    host = fake_host
    for sub in ("cpuacct", "cpu", "cpuset"):
        for path in sorted((host.cgroup_root / sub).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (host.cgroup_root / sub).rmdir()
    run = Single.start(BEResourceCollector(), make_options(host, tmp_path))
    run.tick()
    assert samples(run.cache, names.BE_CPU_REQUEST) == [(T0, 0.0)]
    assert samples(run.cache, names.BE_CPU_LIMIT) == []
