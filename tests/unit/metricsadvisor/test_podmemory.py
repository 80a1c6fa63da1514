"""Pod and container memory: anon + unevictable from memory.stat (v1 total_* keys, v2 plain keys), never
memory.usage_in_bytes / memory.current, which count page cache too."""

from __future__ import annotations

from pathlib import Path

from koordlet.config.types import CollectorConfig
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.podmemory import PodMemoryCollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, mkdirs, samples

MIB = 1 << 20


def set_memory(host: FakeHost, rel: str, inactive_anon: int, active_anon: int, unevictable: int,
               page_cache: int) -> None:
    """memory.stat as each version prints it, plus the usage file, which includes page cache.  v1's local
    (non-total_) keys hold a decoy: only the hierarchical ones count a pod's containers."""
    anon = inactive_anon + active_anon
    usage = anon + unevictable + page_cache
    if host.mode == "v1":
        host.write_memory_stat(rel, inactive_anon=1, active_anon=2, unevictable=3, cache=page_cache,
                               total_inactive_anon=inactive_anon, total_active_anon=active_anon,
                               total_unevictable=unevictable, total_inactive_file=page_cache // 2,
                               total_active_file=page_cache - page_cache // 2, total_cache=page_cache,
                               total_rss=anon)
        host.write_cgroup(rel, "memory.usage_in_bytes", f"{usage}\n")
    else:
        host.write_memory_stat(rel, anon=anon, file=page_cache, kernel_stack=MIB // 4, inactive_anon=inactive_anon,
                               active_anon=active_anon, unevictable=unevictable, inactive_file=page_cache // 2,
                               active_file=page_cache - page_cache // 2, slab=MIB)
        host.write_cgroup(rel, "memory.current", f"{usage}\n")


def test_usage_without_page_cache(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Container: 30 + 70 + 4 MiB = 104 MiB (its 500 MiB of page cache excluded).  Pod: 40 + 80 + 4 MiB
    = 124 MiB."""
    host = fake_cgroup_host
    pod = make_pod("a")
    mkdirs(host, [pod])
    config = CollectorConfig(memory_interval_seconds=7.0)
    collector = PodMemoryCollector()
    run = Single.start(collector, make_options(host, tmp_path, config=config))
    assert collector.interval(run.options) == 7.0
    run.pods(pod)
    set_memory(host, pod.cgroup_dir, 40 * MIB, 80 * MIB, 4 * MIB, 600 * MIB)
    set_memory(host, pod.containers[0].cgroup_dir, 30 * MIB, 70 * MIB, 4 * MIB, 500 * MIB)
    run.tick()
    assert samples(run.cache, names.POD_MEMORY_USAGE, labels_of(pod="uid-a")) == [(T0, 124 * MIB)]
    assert samples(run.cache, names.CONTAINER_MEMORY_USAGE, labels_of(pod="uid-a", container="a-main")) == [
        (T0, 104 * MIB)]


def test_usage_with_page_cache(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """usageWithPageCache (Koordinator MemoryStatRaw.UsageWithPageCache): anon + unevictable + active_file +
    inactive_file from the same read.  Container: 104 + 500 MiB; pod: 124 + 600 MiB."""
    host = fake_cgroup_host
    pod = make_pod("a")
    mkdirs(host, [pod])
    run = Single.start(PodMemoryCollector(), make_options(host, tmp_path))
    run.pods(pod)
    set_memory(host, pod.cgroup_dir, 40 * MIB, 80 * MIB, 4 * MIB, 600 * MIB)
    set_memory(host, pod.containers[0].cgroup_dir, 30 * MIB, 70 * MIB, 4 * MIB, 500 * MIB)
    run.tick()
    assert samples(run.cache, names.POD_MEMORY_WITH_PAGE_CACHE, labels_of(pod="uid-a")) == [(T0, 724 * MIB)]
    assert samples(run.cache, names.CONTAINER_MEMORY_WITH_PAGE_CACHE,
                   labels_of(pod="uid-a", container="a-main")) == [(T0, 604 * MIB)]
    assert samples(run.cache, names.POD_MEMORY_USAGE, labels_of(pod="uid-a")) == [(T0, 124 * MIB)]


def test_only_pods_in_the_list_are_reported(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    host = fake_cgroup_host
    a, b = make_pod("a", containers=()), make_pod("b", containers=())
    mkdirs(host, [a, b])
    for pod in (a, b):
        host.mkdir_cgroup(pod.cgroup_dir)
        set_memory(host, pod.cgroup_dir, MIB, MIB, 0, 0)
    run = Single.start(PodMemoryCollector(), make_options(host, tmp_path))
    run.pods(a, b)
    run.tick()
    run.pods(b)
    run.tick(5.0)
    assert run.cache.series(names.POD_MEMORY_USAGE) == [labels_of(pod="uid-b")]
    assert run.cache.series(names.POD_MEMORY_WITH_PAGE_CACHE) == [labels_of(pod="uid-b")]
    assert samples(run.cache, names.POD_MEMORY_USAGE, labels_of(pod="uid-b")) == [(T0, 2 * MIB), (T0 + 5, 2 * MIB)]
