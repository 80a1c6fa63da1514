"""Host applications (NodeSLO ``hostApplications``) collected like pods: CPU from the usage counter's
change, memory with and without page cache, the sums the system usage excludes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import HostApplicationSpec, NodeSLOSpec
from koordlet.metriccache import names
from koordlet.metricsadvisor.collectors.hostapp import HostAppCollector
from koordlet.metricsadvisor.collectors.sysresource import SysResourceCollector
from koordlet.metricsadvisor.framework import FileGroup
from koordlet.statesinformer import hostapps
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, samples

MIB = 1 << 20
SEC_NS = 1_000_000_000


def apps_of(raw: list[dict[str, object]]) -> tuple[HostApplicationSpec, ...]:
    return NodeSLOSpec.from_json({"hostApplications": raw}).host_applications or ()


NGINX = {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive", "relativePath": "nginx/"}}
YARN = {"name": "yarn-task", "priority": "koord-batch", "qos": "BE",
        "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}}


def set_usage(host: FakeHost, rel: str, cpu_seconds: float, anon: int, page_cache: int) -> None:
    if host.mode == "v1":
        host.write_cgroup(rel, "cpuacct.usage", f"{int(cpu_seconds * SEC_NS)}\n")
        host.write_memory_stat(rel, total_inactive_anon=anon // 2, total_active_anon=anon - anon // 2,
                               total_unevictable=0, total_cache=page_cache, inactive_anon=1, active_anon=2)
        host.write_cgroup(rel, "memory.usage_in_bytes", f"{anon + page_cache}\n")
    else:
        host.write_cpu_stat(rel, usage_usec=int(cpu_seconds * 1_000_000))
        host.write_memory_stat(rel, inactive_anon=anon // 2, active_anon=anon - anon // 2, unevictable=0,
                               file=page_cache)
        host.write_cgroup(rel, "memory.current", f"{anon + page_cache}\n")


class Apps:
    def __init__(self, raw: list[dict[str, object]]) -> None:
        self.apps = apps_of(raw)

    def __call__(self) -> tuple[HostApplicationSpec, ...]:
        return self.apps


def start(host: FakeHost, tmp_path: Path, apps: Apps, with_cache: bool = False) -> Single:
    options = make_options(host, tmp_path)
    options = dataclasses.replace(options, host_apps=apps, memory_with_page_cache=lambda: with_cache)
    return Single.start(HostAppCollector(), options)


def test_cpu_and_memory_per_application(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """nginx (CgroupRoot/host-latency-sensitive/nginx): 1.0 s -> 3.0 s of CPU over 2 s = 1.0 core; yarn
    (kubepods/besteffort/hadoop-yarn): 0.5 s -> 1.5 s over 2 s = 0.5 core.  Memory without page cache is
    anon (100 / 40 MiB), with it anon + cache (300 / 50 MiB).  The first tick is only the baseline."""
    host = fake_cgroup_host
    for rel in ("host-latency-sensitive/nginx", "kubepods/besteffort/hadoop-yarn"):
        host.mkdir_cgroup(rel)
    set_usage(host, "host-latency-sensitive/nginx", 1.0, 100 * MIB, 200 * MIB)
    set_usage(host, "kubepods/besteffort/hadoop-yarn", 0.5, 40 * MIB, 10 * MIB)
    run = start(host, tmp_path, Apps([NGINX, YARN]))
    run.tick()
    assert samples(run.cache, names.HOST_APP_CPU_USAGE, hostapps.labels("nginx")) == []
    assert samples(run.cache, names.HOST_APPS_CPU_USAGE) == [(T0, 0.0)]
    set_usage(host, "host-latency-sensitive/nginx", 3.0, 100 * MIB, 200 * MIB)
    set_usage(host, "kubepods/besteffort/hadoop-yarn", 1.5, 40 * MIB, 10 * MIB)
    run.tick(2.0)
    t = T0 + 2
    assert samples(run.cache, names.HOST_APP_CPU_USAGE, hostapps.labels("nginx")) == [(t, pytest.approx(1.0))]
    assert samples(run.cache, names.HOST_APP_CPU_USAGE, hostapps.labels("yarn-task")) == [(t, pytest.approx(0.5))]
    assert samples(run.cache, names.HOST_APP_MEMORY_USAGE, hostapps.labels("nginx")) == [(t, 100 * MIB)]
    assert samples(run.cache, names.HOST_APP_MEMORY_WITH_PAGE_CACHE, hostapps.labels("nginx")) == [(t, 300 * MIB)]
    assert samples(run.cache, names.HOST_APPS_CPU_USAGE)[-1] == (t, pytest.approx(1.5))
    assert samples(run.cache, names.HOST_APPS_MEMORY_USAGE)[-1] == (t, 140 * MIB)


def test_memory_sum_follows_the_page_cache_policy(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    host = fake_cgroup_host
    host.mkdir_cgroup("host-latency-sensitive/nginx")
    set_usage(host, "host-latency-sensitive/nginx", 1.0, 100 * MIB, 200 * MIB)
    run = start(host, tmp_path, Apps([NGINX]), with_cache=True)
    run.tick()
    run.tick(1.0)
    assert samples(run.cache, names.HOST_APPS_MEMORY_USAGE)[-1] == (T0 + 1, 300 * MIB)


def test_missing_cgroup_counts_nowhere_and_a_list_change_retracks(fake_cgroup_host: FakeHost,
                                                                   tmp_path: Path) -> None:
    """An application whose cgroup does not exist makes no sample and adds 0 to the sums.  Removing an
    application from the NodeSLO drops its series; adding one starts its baseline on the next tick."""
    host = fake_cgroup_host
    host.mkdir_cgroup("host-latency-sensitive/nginx")
    set_usage(host, "host-latency-sensitive/nginx", 1.0, 100 * MIB, 0)
    apps = Apps([NGINX, {"name": "ghost", "qos": "LS"}])
    run = start(host, tmp_path, apps)
    run.tick()
    set_usage(host, "host-latency-sensitive/nginx", 2.0, 100 * MIB, 0)
    run.tick(1.0)
    assert samples(run.cache, names.HOST_APPS_CPU_USAGE)[-1] == (T0 + 1, pytest.approx(1.0))
    assert samples(run.cache, names.HOST_APP_CPU_USAGE, hostapps.labels("ghost")) == []
    apps.apps = apps_of([YARN])
    host.mkdir_cgroup("kubepods/besteffort/hadoop-yarn")
    set_usage(host, "kubepods/besteffort/hadoop-yarn", 1.0, MIB, 0)
    run.tick(1.0)  # notices the change after sampling the old list
    assert run.cache.series(names.HOST_APP_CPU_USAGE) == []
    run.tick(1.0)  # yarn's baseline
    set_usage(host, "kubepods/besteffort/hadoop-yarn", 1.25, MIB, 0)
    run.tick(1.0)
    assert samples(run.cache, names.HOST_APP_CPU_USAGE, hostapps.labels("yarn-task")) == [
        (T0 + 4, pytest.approx(0.25))]


def test_system_usage_excludes_host_applications(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Upstream: system = node - pods - host apps.  Node 4 cores, no pods, host apps 1.5 -> 2.5 cores;
    memory 10 GiB - 1 GiB = 9 GiB."""
    run = Single.start(SysResourceCollector(), make_options(fake_cgroup_host, tmp_path))
    run.pods()
    cache = run.cache
    cache.append(names.NODE_CPU_USAGE, (), T0, 4.0)
    cache.append(names.NODE_MEMORY_USAGE, (), T0, 10.0 * 1024 * MIB)
    cache.append(names.HOST_APPS_CPU_USAGE, (), T0, 1.5)
    cache.append(names.HOST_APPS_MEMORY_USAGE, (), T0, 1024.0 * MIB)
    run.tick()
    assert samples(cache, names.SYSTEM_CPU_USAGE) == [(T0, pytest.approx(2.5))]
    assert samples(cache, names.SYSTEM_MEMORY_USAGE) == [(T0, 9.0 * 1024 * MIB)]


def test_shares_the_advisor_file_group(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Setup tracks three files per application in the shared group (one batch read per tick)."""
    fake_cgroup_host.mkdir_cgroup("host-latency-sensitive/nginx")
    options = make_options(fake_cgroup_host, tmp_path)
    options = dataclasses.replace(options, host_apps=Apps([NGINX]))
    files = FileGroup(1.0)
    HostAppCollector().setup(options, files)
    assert len(files.keys()) == 3
