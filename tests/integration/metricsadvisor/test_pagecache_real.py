"""usageWithPageCache on the real kernel: a container that wrote a file has page cache charged to it, and the
collectors' two memory figures differ by it.

v1 only: the v2 guest's writable file systems are tmpfs (TMPDIR) and tmpfs-backed overlays, whose pages are
shmem on the anon LRUs, so nothing there can put file pages in a cgroup's page cache on purpose; the v2 key
names (active_file, inactive_file) are covered on the fake v2 tree (tests/unit/metricsadvisor/test_podmemory.py)."""

from __future__ import annotations

from pathlib import Path

from koordlet.metriccache import labels_of, names
from koordlet.system.kubepaths import KubeQoS
from tests.fixtures.realcgroup import ONLY_V1, RealCgroups
from tests.fixtures.waiting import wait_until
from tests.integration.metricsadvisor.test_collectors_real import make_advisor, pod_meta, rel_of

FILE_BYTES = 16 << 20
ANON = ("inactive_anon", "active_anon", "unevictable")
FILE = ("active_file", "inactive_file")


def _sum(groups: RealCgroups, rel: str, keys: tuple[str, ...]) -> int:
    stat = groups.memory_stat(rel)
    return sum(stat[k] for k in keys)


@ONLY_V1
def test_page_cache_is_counted_only_with_page_cache(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    pod = pod_meta(real_cgroups.name, KubeQoS.BURSTABLE, "cache-pod", ["writer"])
    rel = rel_of(real_cgroups, pod.containers[0].cgroup_dir)
    real_cgroups.mkdir(rel)
    # On a disk file system (tmp_path is not tmpfs here, whose pages would be shmem on the anon LRUs): the
    # written pages stay in the page cache, charged to the writer's cgroup, after fsync.
    target = tmp_path / "data.bin"
    real_cgroups.spawn(rel, f"import os, time\nfd = os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY)\n"
                            f"os.write(fd, b'x' * {FILE_BYTES})\nos.fsync(fd)\nos.close(fd)\n"
                            "while True: time.sleep(1)")
    wait_until("the written file charged to the container", timeout=60,
               check=lambda: _sum(real_cgroups, rel, FILE) >= FILE_BYTES)
    advisor, cache, _ = make_advisor(tmp_path, [pod])
    before = (_sum(real_cgroups, rel, ANON), _sum(real_cgroups, rel, ANON + FILE))
    advisor.run_once(force=True)
    after = (_sum(real_cgroups, rel, ANON), _sum(real_cgroups, rel, ANON + FILE))

    labels = labels_of(pod=pod.uid, container="writer")
    without = cache.latest(names.CONTAINER_MEMORY_USAGE, labels)
    with_cache = cache.latest(names.CONTAINER_MEMORY_WITH_PAGE_CACHE, labels)
    pod_with_cache = cache.latest(names.POD_MEMORY_WITH_PAGE_CACHE, labels_of(pod=pod.uid))
    node_with_cache = cache.latest(names.NODE_MEMORY_WITH_PAGE_CACHE, ())
    assert without is not None and with_cache is not None and pod_with_cache is not None
    assert node_with_cache is not None
    # Each figure lies within the kernel's reads just before and after the collection.
    assert min(before[0], after[0]) <= without[1] <= max(before[0], after[0])
    assert min(before[1], after[1]) <= with_cache[1] <= max(before[1], after[1])
    assert with_cache[1] - without[1] >= FILE_BYTES
    assert pod_with_cache[1] >= with_cache[1] - (1 << 20)  # hierarchical: the container's pages are the pod's
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024
               for line in Path("/proc/meminfo").read_text().splitlines()}
    total_minus_available = meminfo["MemTotal"] - meminfo["MemAvailable"]
    # MemTotal - MemFree counts the page cache that MemTotal - MemAvailable leaves out.
    assert node_with_cache[1] > total_minus_available
    assert advisor.errors == {}
