"""PodColumns: the tracked set follows the pod list, series of gone pods are dropped, state columns carry
over by key."""

from __future__ import annotations

import math
from pathlib import Path

from koordlet import native
from koordlet.metriccache import labels_of
from koordlet.metricsadvisor import cgroupfiles
from koordlet.metricsadvisor.framework import FileGroup
from koordlet.metricsadvisor.podcolumns import PodColumns, owners, spec_or_none
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import make_options, make_pod, mkdirs, samples


def test_owners_are_pods_with_a_cgroup_and_their_started_containers() -> None:
    a = make_pod("a", containers=("c1", "c2"))
    not_started = ContainerMeta(name="c3", container_id="", cgroup_dir="")
    no_dir = ContainerMeta(name="c4", container_id="a-c4", cgroup_dir="")
    a = PodMeta(pod=a.pod, cgroup_dir=a.cgroup_dir, containers=(*a.containers, not_started, no_dir))
    pending = make_pod("b")
    pending = PodMeta(pod=pending.pod, cgroup_dir="", containers=pending.containers)
    found = owners([a, pending])
    assert [(o.key, o.rel_dir, o.is_pod) for o in found] == [
        (("uid-a", ""), "kubepods/burstable/poduid-a", True),
        (("uid-a", "a-c1"), "kubepods/burstable/poduid-a/a-c1", False),
        (("uid-a", "a-c2"), "kubepods/burstable/poduid-a/a-c2", False),
    ]
    assert found[0].labels == labels_of(pod="uid-a")
    assert found[1].labels == labels_of(pod="uid-a", container="a-c1")


def test_a_pod_that_leaves_loses_its_files_and_series(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    host = fake_cgroup_host
    a, b = make_pod("a"), make_pod("b")
    mkdirs(host, [a, b])
    options = make_options(host, tmp_path)
    files = FileGroup(1.0)
    columns = PodColumns("t", files, options.cache, 1)
    columns.track_owners([a, b], options.layout, cgroupfiles.memory_stat, "pod_m", "container_m")
    assert columns.keys == [("uid-a", ""), ("uid-a", "a-main"), ("uid-b", ""), ("uid-b", "b-main")]
    assert len(files.files) == 4
    columns.append(0, 10.0, [1.0, 2.0, math.nan, 4.0])  # NaN: a failed read makes no sample
    assert samples(options.cache, "pod_m", labels_of(pod="uid-a")) == [(10.0, 1.0)]
    assert samples(options.cache, "pod_m", labels_of(pod="uid-b")) == []
    assert samples(options.cache, "container_m", labels_of(pod="uid-b", container="b-main")) == [(10.0, 4.0)]

    columns.track_owners([b], options.layout, cgroupfiles.memory_stat, "pod_m", "container_m")
    assert columns.keys == [("uid-b", ""), ("uid-b", "b-main")]
    assert len(files.files) == 2
    assert options.cache.series("pod_m") == [labels_of(pod="uid-b")]
    assert options.cache.series("container_m") == [labels_of(pod="uid-b", container="b-main")]
    # Slots follow the new key order: the first slot is b's pod memory.stat.
    batch = files.read()
    assert files.files.path(columns.slots.array[0]) == str(host.cgroup_path(b.cgroup_dir, "memory.stat"))
    assert batch.error(columns.slots.array[0]) == 0


def test_remap_carries_state_by_key_and_new_keys_start_unknown(fake_host: FakeHost, tmp_path: Path) -> None:
    a, b = make_pod("a", containers=()), make_pod("b", containers=())
    options = make_options(fake_host, tmp_path)
    columns = PodColumns("t", FileGroup(1.0), options.cache, 1)
    columns.track_owners([a, b], options.layout, cgroupfiles.cpu_usage, "p", "c")
    old = list(columns.keys)
    columns.track_owners([b, make_pod("c", containers=())], options.layout, cgroupfiles.cpu_usage, "p", "c")
    carried = columns.remap([1.0, 2.0], old)
    assert carried[0] == 2.0 and math.isnan(carried[1])


def test_a_hierarchy_the_host_lacks_tracks_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    """v1-only host: no unified hierarchy, so no pressure file; that is a probe's business, not an error."""
    layout = fake_host.layout()
    assert spec_or_none(cgroupfiles.pressure, layout, "kubepods", "cpu") is None
    spec = spec_or_none(cgroupfiles.cpu_usage, layout, "kubepods")
    assert spec is not None and spec.kind is native.Kind.INT
