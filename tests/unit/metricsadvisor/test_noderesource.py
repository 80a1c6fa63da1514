"""Node CPU from /proc/stat busy time and node memory from MemTotal - MemAvailable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from koordlet.metriccache import names
from koordlet.metricsadvisor.collectors import noderesource
from koordlet.metricsadvisor.framework import CollectorDeps
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, samples

HZ = os.sysconf("SC_CLK_TCK")  # USER_HZ: the unit of /proc/stat (proc(5))


def proc_stat(user: int, nice: int, system: int, idle: int, iowait: int, irq: int, softirq: int, steal: int) -> str:
    line = f"{user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0"
    return f"cpu  {line}\ncpu0 {line}\n"


def test_cpu_is_busy_ticks_over_elapsed_time_without_idle_iowait_or_steal(fake_cgroup_host: FakeHost,
                                                                          tmp_path: Path) -> None:
    """Between the two reads user +1.00 s, nice +0.20, system +0.50, irq +0.05, softirq +0.25 (in USER_HZ
    ticks), while idle, iowait and steal also grow: busy = 2.0 s over 2 s elapsed = 1.0 core."""
    host = fake_cgroup_host
    run = Single.start(noderesource.new(CollectorDeps()), make_options(host, tmp_path))
    host.write_proc("stat", proc_stat(1000, 10, 500, 9000, 40, 5, 5, 100))
    run.tick()
    assert samples(run.cache, names.NODE_CPU_USAGE) == []  # the first read is a baseline
    host.write_proc("stat", proc_stat(1000 + HZ, 10 + HZ // 5, 500 + HZ // 2, 9000 + 7 * HZ, 40 + 3 * HZ,
                                      5 + HZ // 20, 5 + HZ // 4, 100 + 9 * HZ))
    run.tick(2.0)
    assert samples(run.cache, names.NODE_CPU_USAGE) == [(T0 + 2.0, pytest.approx(1.0))]


def test_memory_is_total_minus_available_in_bytes(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """MemTotal 16 GiB, MemAvailable 6 GiB (printed in kB) -> 10 GiB = 10737418240 bytes."""
    host = fake_cgroup_host
    host.set_meminfo(total_kb=16 << 20, available_kb=6 << 20)
    run = Single.start(noderesource.new(CollectorDeps()), make_options(host, tmp_path))
    run.tick()
    assert samples(run.cache, names.NODE_MEMORY_USAGE) == [(T0, 10 * 2**30)]


def test_memory_with_page_cache_is_total_minus_free(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """usageWithPageCache (Koordinator MemInfo.MemUsageWithPageCache): MemTotal 16 GiB - MemFree 3 GiB (the
    fixture writes MemFree = MemAvailable / 2) = 13 GiB; page cache counts, unlike MemTotal - MemAvailable."""
    host = fake_cgroup_host
    host.set_meminfo(total_kb=16 << 20, available_kb=6 << 20)
    run = Single.start(noderesource.new(CollectorDeps()), make_options(host, tmp_path))
    run.tick()
    assert samples(run.cache, names.NODE_MEMORY_WITH_PAGE_CACHE) == [(T0, 13 * 2**30)]


def test_missing_or_garbled_proc_files_make_no_sample(fake_host: FakeHost, tmp_path: Path) -> None:
    host = fake_host
    run = Single.start(noderesource.new(CollectorDeps()), make_options(host, tmp_path))
    host.write_proc("meminfo", "MemTotal: lots\n")
    Path(host.paths.proc("stat")).unlink()
    run.tick()
    run.tick(1.0)
    assert samples(run.cache, names.NODE_MEMORY_USAGE) == []
    assert samples(run.cache, names.NODE_CPU_USAGE) == []
    host.set_meminfo(total_kb=1000, available_kb=400)
    run.tick(1.0)
    assert samples(run.cache, names.NODE_MEMORY_USAGE) == [(T0 + 2.0, 600 * 1024)]
