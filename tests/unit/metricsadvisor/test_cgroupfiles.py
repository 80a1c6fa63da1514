"""Which file and which keys hold each number, per cgroup version, read back from kernel-shaped trees."""

from __future__ import annotations

import os

import pytest

from koordlet import native
from koordlet.errors import Unsupported
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.cgroupfiles import Rate
from tests.fixtures.fakehost import FakeHost

POD = "kubepods/burstable/podp1"


def test_cpu_usage_is_cpuacct_usage_in_ns_on_v1_and_usage_usec_on_v2(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    layout = host.layout()
    spec = cgroupfiles.cpu_usage(layout, POD)
    if host.mode == "v1":
        assert spec == cgroupfiles.FileSpec(str(host.cgroup_root / "cpuacct" / POD / "cpuacct.usage"),
                                            native.Kind.INT)
        assert cgroupfiles.cpu_usage_ns(layout) == 1
    else:
        assert spec == cgroupfiles.FileSpec(str(host.cgroup_root / POD / "cpu.stat"), native.Kind.KV,
                                            ("usage_usec",))
        assert cgroupfiles.cpu_usage_ns(layout) == 1000


def test_cpu_usage_reads_usage_usec_not_its_neighbours(fake_cgroup_host: FakeHost) -> None:
    """v2 cpu.stat: usage_usec 1500000, user_usec 1000000, system_usec 500000 -> 1.5 s = 1.5e9 ns; the
    user/system split must not leak in.  v1: cpuacct.usage holds the ns itself."""
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    if host.mode == "v1":
        host.write_cgroup(POD, "cpuacct.usage", "1500000000\n")
    else:
        host.write_cpu_stat(POD, usage_usec=1_500_000, user_usec=1_000_000, system_usec=500_000, nr_periods=7,
                            throttled_usec=9_999)
    layout = host.layout()
    spec = cgroupfiles.cpu_usage(layout, POD)
    value = native.read_file(spec.path, spec.kind, spec.keys)
    raw = value if spec.kind is native.Kind.INT else value["usage_usec"]
    assert raw * cgroupfiles.cpu_usage_ns(layout) == 1_500_000_000


def test_memory_stat_selects_hierarchical_keys_on_v1_and_plain_keys_on_v2(fake_cgroup_host: FakeHost) -> None:
    """Usage without page cache = inactive_anon + active_anon + unevictable.  v1's local keys cover the
    cgroup's own pages only, its total_* keys the whole subtree (a pod's containers): 100+200+300 local,
    1000+2000+3000 total -> 6000.  v2 is hierarchical and has no total_*: 1000+2000+3000 -> 6000, while
    anon (4096), file and the *_file keys stay out."""
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    if host.mode == "v1":
        host.write_memory_stat(POD, inactive_anon=100, active_anon=200, unevictable=300, cache=50_000,
                               total_inactive_anon=1000, total_active_anon=2000, total_unevictable=3000,
                               total_inactive_file=70_000, total_cache=70_000, total_rss=3000)
        expected_keys = ("total_inactive_anon", "total_active_anon", "total_unevictable")
    else:
        host.write_memory_stat(POD, anon=4096, file=70_000, inactive_anon=1000, active_anon=2000, unevictable=3000,
                               inactive_file=50_000, active_file=20_000, kernel_stack=16384)
        expected_keys = ("inactive_anon", "active_anon", "unevictable")
    spec = cgroupfiles.memory_stat(host.layout(), POD)
    assert spec.path == str(host.cgroup_path(POD, "memory.stat"))
    assert spec.keys == expected_keys
    assert sum(native.read_file(spec.path, spec.kind, spec.keys).values()) == 6000


def test_throttle_keys_are_periods_and_throttled_counts_in_both_versions(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    host.mkdir_cgroup(POD)
    if host.mode == "v1":
        host.write_cpu_stat(POD, nr_periods=40, nr_throttled=10, throttled_time=5_000_000_000)
    else:
        host.write_cpu_stat(POD, usage_usec=99, nr_periods=40, nr_throttled=10, throttled_usec=5_000_000)
    spec = cgroupfiles.cpu_stat_throttle(host.layout(), POD)
    assert spec.path == str(host.cgroup_path(POD, "cpu.stat"))
    assert native.read_file(spec.path, spec.kind, spec.keys) == {"nr_periods": 40, "nr_throttled": 10}


@pytest.mark.parametrize("mode", ["hybrid", "v2"])
def test_pressure_lives_in_the_unified_hierarchy(fake_host: FakeHost, mode: str) -> None:
    host = fake_host
    host.set_mode(mode)
    host.mkdir_cgroup(POD)
    unified = host.cgroup_root / "unified" if mode == "hybrid" else host.cgroup_root
    spec = cgroupfiles.pressure(host.layout(), POD, "memory")
    assert spec == cgroupfiles.FileSpec(str(unified / POD / "memory.pressure"), native.Kind.PSI)
    assert os.path.isfile(spec.path)


def test_pressure_on_a_v1_only_host_is_unsupported(fake_host: FakeHost) -> None:
    with pytest.raises(Unsupported, match="no cgroup v2 hierarchy"):
        cgroupfiles.pressure(fake_host.layout(), POD, "cpu")


def test_rate_first_sample_is_a_baseline_then_change_over_time() -> None:
    """10 s of CPU at t=100, 13 s at t=102 -> 3 s / 2 s = 1.5."""
    rate = Rate()
    assert rate.update("c", 100.0, 10.0) is None
    assert rate.update("c", 102.0, 13.0) == pytest.approx(1.5)
    assert rate.update("other", 102.0, 1.0) is None  # keys are independent


def test_rate_restarts_when_the_counter_goes_back_or_time_stands_still() -> None:
    rate = Rate()
    rate.update("c", 100.0, 50.0)
    assert rate.update("c", 101.0, 5.0) is None  # a cgroup recreated under the same name
    assert rate.update("c", 103.0, 9.0) == pytest.approx(2.0)  # measured from the new baseline 5.0
    assert rate.update("c", 103.0, 20.0) is None  # no time elapsed: no division by zero
    rate.forget("c")
    assert rate.update("c", 110.0, 30.0) is None  # forgotten: a fresh baseline
    rate.forget("never-seen")
