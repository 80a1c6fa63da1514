"""Leveled cpuset.cpus / memory.min writes: merged values top-down, final values bottom-up, so that no
intermediate state has a child wider than its parent."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from koordlet.resourceexecutor import CgroupUpdate, Outcome, ResourceExecutor
from koordlet.resourceexecutor.leveled import MERGE, bottom_up, depth, top_down_parents
from koordlet.system import resources as r
from koordlet.system.validators import parse_cpulist
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit, RecordingWriter

QOS = "kubepods/besteffort"
POD = QOS + "/pod1"
CTR = POD + "/ctr1"


def make(host: FakeHost, watch: list[str]) -> tuple[ResourceExecutor, RecordingWriter]:
    writer = RecordingWriter(watch=watch)
    return ResourceExecutor(host.layout(), FakeClock(), MemoryAudit(), writer=writer), writer


def cpus(text: str) -> set[int]:
    return set(parse_cpulist(text))


def setup_cpusets(host: FakeHost, values: dict[str, str]) -> dict[str, str]:
    """Creates the cgroups with the given cpuset.cpus; returns rel_dir -> path."""
    paths = {}
    for rel, value in values.items():
        host.mkdir_cgroup(rel)
        paths[rel] = str(host.write_cgroup(rel, r.CPUSET_CPUS, value))
    return paths


def assert_nested(snapshots: list[dict[str, str]], paths: dict[str, str], key: str = "cpus") -> None:
    """In every state the kernel saw, each child is within its parent."""
    rels = sorted(paths, key=depth)
    for state in snapshots:
        for parent in rels:
            for child in rels:
                if child.startswith(parent + "/"):
                    if key == "cpus":
                        assert cpus(state[paths[child]]) <= cpus(state[paths[parent]]), state
                    else:
                        assert int(state[paths[child]]) <= int(state[paths[parent]]), state


def test_grow_writes_parents_first(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0", POD: "0", CTR: "0"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    # Batch order deliberately children first.
    batch = [CgroupUpdate(r.CPUSET_CPUS, rel, "0-3", "cpusuppress") for rel in (CTR, POD, QOS)]
    results = executor.apply(batch)
    assert [res.outcome for res in results] == [Outcome.WRITTEN] * 3
    assert writer.writes == [(paths[QOS], "0-3"), (paths[POD], "0-3"), (paths[CTR], "0-3")]
    assert_nested(writer.snapshots, paths)


def test_shrink_writes_children_first(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0-3", POD: "0-3", CTR: "0-3"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    batch = [CgroupUpdate(r.CPUSET_CPUS, rel, "2-3", "cpusuppress") for rel in (QOS, POD, CTR)]
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.WRITTEN] * 3
    assert writer.writes == [(paths[CTR], "2-3"), (paths[POD], "2-3"), (paths[QOS], "2-3")]
    assert_nested(writer.snapshots, paths)


def test_move_widens_parent_to_the_union_then_narrows(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0-1", POD: "0-1"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    batch = [CgroupUpdate(r.CPUSET_CPUS, QOS, "2-3", "t"), CgroupUpdate(r.CPUSET_CPUS, POD, "2-3", "t")]
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.WRITTEN] * 2
    assert writer.writes == [(paths[QOS], "0-3"), (paths[POD], "2-3"), (paths[QOS], "2-3")]
    assert_nested(writer.snapshots, paths)
    assert fake_cgroup_host.read_cgroup(QOS, r.CPUSET_CPUS) == "2-3"


def test_parent_grows_while_child_shrinks(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0-1", POD: "0-1"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    batch = [CgroupUpdate(r.CPUSET_CPUS, POD, "1", "t"), CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t")]
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.WRITTEN] * 2
    assert writer.writes == [(paths[QOS], "0-3"), (paths[POD], "1")]
    assert_nested(writer.snapshots, paths)


def test_empty_v1_child_is_filled_after_its_parent(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(POD)  # v1 leaves a new child's cpuset.cpus empty
    paths = {QOS: str(fake_host.cgroup_path(QOS, r.CPUSET_CPUS)), POD: str(fake_host.cgroup_path(POD, r.CPUSET_CPUS))}
    executor, writer = make(fake_host, [])
    batch = [CgroupUpdate(r.CPUSET_CPUS, POD, "0-1", "t"), CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t")]
    executor.apply(batch)
    assert writer.writes == [(paths[QOS], "0-3"), (paths[POD], "0-1")]


def test_unchanged_leveled_batch_is_skipped(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0-1", POD: "0-1"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    batch = [CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t"), CgroupUpdate(r.CPUSET_CPUS, POD, "1-2", "t")]
    executor.apply(batch)
    count = len(writer.writes)
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.SKIPPED_UNCHANGED] * 2
    assert len(writer.writes) == count


def test_unchanged_batch_reads_nothing_until_the_forced_rewrite(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0", POD: "0"})
    clock = FakeClock()
    writer = RecordingWriter(watch=[])
    executor = ResourceExecutor(fake_cgroup_host.layout(), clock, MemoryAudit(), writer=writer)
    batch = [CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t"), CgroupUpdate(r.CPUSET_CPUS, POD, "1", "t")]
    executor.apply(batch)
    # Someone narrows the parent behind the executor's back.  Within the force-update window the
    # batch is unchanged: no merge read, no write (the per-round cost of 1,000 cpusets stays flat).
    fake_cgroup_host.write_cgroup(QOS, r.CPUSET_CPUS, "1")
    writes = len(writer.writes)
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.SKIPPED_UNCHANGED] * 2
    assert len(writer.writes) == writes
    # Past the window the parent is repaired (the merge reads the file, not the cache); the child still holds
    # its value, read back, and is not written again.
    clock.advance(61)
    results = executor.apply(batch)
    assert [res.outcome for res in results] == [Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED]
    assert len(writer.writes) == writes + 1
    assert writer.writes[writes] == (paths[QOS], "0-3")
    assert fake_cgroup_host.read_cgroup(QOS, r.CPUSET_CPUS) == "0-3"


def test_siblings_and_other_resources_are_not_merged(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS + "/a": "0", QOS + "/b": "0"})
    executor, writer = make(fake_cgroup_host, [])
    batch = [
        CgroupUpdate(r.CPUSET_CPUS, QOS + "/a", "1", "t"),
        CgroupUpdate(r.CPU_CFS_QUOTA, QOS, 10_000, "t"),
        CgroupUpdate(r.CPUSET_CPUS, QOS + "/b", "2", "t"),
    ]
    executor.apply(batch)
    quota = str(fake_cgroup_host.cgroup_path(QOS, r.CPU_CFS_QUOTA))
    # No merged writes; plain updates first, then leveled ones (equal depth keeps batch order).
    assert writer.writes == [(quota, "10000"), (paths[QOS + "/a"], "1"), (paths[QOS + "/b"], "2")]


def test_gone_parent_stops_its_merged_write(fake_cgroup_host: FakeHost) -> None:
    executor, writer = make(fake_cgroup_host, [])
    batch = [CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t"), CgroupUpdate(r.CPUSET_CPUS, POD, "0-3", "t")]
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.GONE, Outcome.GONE]
    assert writer.writes == []


@pytest.mark.parametrize("mode", ["v1-anolis", "v2"])
def test_memory_min_levels(fake_host: FakeHost, mode: str) -> None:
    if mode == "v2":
        fake_host.set_mode("v2")
    else:
        fake_host.set_mode("v1", features={"anolis"})
    paths = {}
    for rel in (QOS, POD):
        fake_host.mkdir_cgroup(rel)
        paths[rel] = str(fake_host.write_cgroup(rel, r.MEMORY_MIN, str(1 << 20)))
    executor, writer = make(fake_host, list(paths.values()))
    grow = [CgroupUpdate(r.MEMORY_MIN, rel, 8 << 20, "cgreconcile") for rel in (POD, QOS)]
    assert [res.outcome for res in executor.apply(grow)] == [Outcome.WRITTEN] * 2
    assert writer.writes == [(paths[QOS], str(8 << 20)), (paths[POD], str(8 << 20))]
    shrink = [CgroupUpdate(r.MEMORY_MIN, rel, 2 << 20, "cgreconcile") for rel in (QOS, POD)]
    executor.apply(shrink)
    assert writer.writes[2:] == [(paths[POD], str(2 << 20)), (paths[QOS], str(2 << 20))]
    assert_nested(writer.snapshots, paths, key="bytes")


# ---------------------------------------------------------------------------------- the pure parts


@dataclass(frozen=True)
class Item:
    key: str
    rel_dir: str


def test_order_helpers() -> None:
    items = [Item("cpuset_cpus", "a/b/c"), Item("cpuset_cpus", "a"), Item("memory_min", "a/b"),
             Item("cpuset_cpus", "a/b"), Item("cpuset_cpus", "x")]  # fmt: skip
    assert [i.rel_dir for i in top_down_parents(items)] == ["a", "a/b"]
    assert [i.rel_dir for i in bottom_up(items)] == ["a/b/c", "a/b", "a/b", "a", "x"]
    assert top_down_parents([Item("cpuset_cpus", ""), Item("cpuset_cpus", "kubepods")]) == [Item("cpuset_cpus", "")]
    # "ab" is not below "a".
    assert top_down_parents([Item("cpuset_cpus", "a"), Item("cpuset_cpus", "ab")]) == []
    assert [depth(d) for d in ("", "a", "a/b")] == [0, 1, 2]


@pytest.mark.parametrize(
    ("key", "current", "desired", "merged"),
    [
        ("cpuset_cpus", "0-1\n", "2-3", "0-3"),
        ("cpuset_cpus", "0-3\n", "1", None),
        ("cpuset_cpus", "\n", "1", "1"),
        ("cpuset_cpus", "garbage", "1", None),
        ("memory_min", "100\n", 200, 200),
        ("memory_min", "300\n", 200, None),
        ("memory_min", "max\n", 200, None),
    ],
)
def test_merge(key: str, current: str, desired: object, merged: object) -> None:
    assert MERGE[key](current, desired) == merged


def test_a_parent_skipped_unchanged_is_still_widened_for_a_changed_child(fake_cgroup_host: FakeHost) -> None:
    paths = setup_cpusets(fake_cgroup_host, {QOS: "0-1", POD: "0-1"})
    executor, writer = make(fake_cgroup_host, list(paths.values()))
    executor.apply([CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t"), CgroupUpdate(r.CPUSET_CPUS, POD, "0-1", "t")])
    # The parent drifts behind the executor's back; its own update is unchanged (answered from the memo),
    # but the child's new CPUs need the parent widened first.
    fake_cgroup_host.write_cgroup(QOS, r.CPUSET_CPUS, "0-1")
    writes = len(writer.writes)
    results = executor.apply([CgroupUpdate(r.CPUSET_CPUS, QOS, "0-3", "t"),
                              CgroupUpdate(r.CPUSET_CPUS, POD, "2-3", "t")])
    assert [res.outcome for res in results] == [Outcome.WRITTEN, Outcome.WRITTEN], [res.error for res in results]
    assert writer.writes[writes] == (paths[QOS], "0-3")
    assert fake_cgroup_host.read_cgroup(QOS, r.CPUSET_CPUS) == "0-3"
    assert_nested(writer.snapshots, paths)
