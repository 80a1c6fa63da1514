"""System usage = node usage - the pods' latest fresh usage, never below 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.config.types import CollectorConfig
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.sysresource import SysResourceCollector
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, samples

GIB = float(1 << 30)


def start(host: FakeHost, tmp_path: Path, config: CollectorConfig | None = None) -> Single:
    run = Single.start(SysResourceCollector(), make_options(host, tmp_path, config=config))
    pending = make_pod("pending")
    run.pods(make_pod("a"), make_pod("b"), PodMeta(pod=pending.pod, cgroup_dir="", containers=()))
    return run


def test_node_minus_pods(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """CPU: node 3.0 - (1.0 + 0.5) = 1.5 cores; memory: 10 GiB - (4 + 2) GiB = 4 GiB.  A pod without a
    cgroup (pending) has no usage to subtract even if a sample exists under its UID."""
    run = start(fake_cgroup_host, tmp_path)
    cache = run.cache
    cache.append(names.NODE_CPU_USAGE, (), T0, 3.0)
    cache.append(names.NODE_MEMORY_USAGE, (), T0, 10 * GIB)
    for uid, cpu, memory in (("uid-a", 1.0, 4 * GIB), ("uid-b", 0.5, 2 * GIB), ("uid-pending", 9.0, 9 * GIB)):
        cache.append(names.POD_CPU_USAGE, labels_of(pod=uid), T0, cpu)
        cache.append(names.POD_MEMORY_USAGE, labels_of(pod=uid), T0, memory)
    run.tick()
    assert samples(cache, names.SYSTEM_CPU_USAGE) == [(T0, pytest.approx(1.5))]
    assert samples(cache, names.SYSTEM_MEMORY_USAGE) == [(T0, 4 * GIB)]


def test_never_below_zero_and_stale_inputs_ignored(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Outdated after 10 s; memory samples come every 30 s here, so they stay fresh for 60 s.
    At T0+20: node CPU 2.0 (fresh), pod a CPU 1.5 at T0+5 (15 s old: ignored), pod b CPU 2.5 (fresh) ->
    2.0 - 2.5 < 0 -> 0.  Node memory 8 GiB at T0+20, pod a memory 3 GiB at T0 (20 s old, fresh for memory) ->
    5 GiB."""
    config = CollectorConfig(sys_metric_outdated_seconds=10.0, memory_interval_seconds=30.0)
    run = start(fake_cgroup_host, tmp_path, config)
    cache = run.cache
    cache.append(names.POD_MEMORY_USAGE, labels_of(pod="uid-a"), T0, 3 * GIB)
    cache.append(names.POD_CPU_USAGE, labels_of(pod="uid-a"), T0 + 5, 1.5)
    run.clock.advance(20.0)
    cache.append(names.NODE_CPU_USAGE, (), T0 + 20, 2.0)
    cache.append(names.NODE_MEMORY_USAGE, (), T0 + 20, 8 * GIB)
    cache.append(names.POD_CPU_USAGE, labels_of(pod="uid-b"), T0 + 20, 2.5)
    run.tick()
    assert samples(cache, names.SYSTEM_CPU_USAGE) == [(T0 + 20, 0.0)]
    assert samples(cache, names.SYSTEM_MEMORY_USAGE) == [(T0 + 20, 5 * GIB)]


def test_a_stale_node_sample_makes_no_system_sample(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    run = start(fake_cgroup_host, tmp_path, CollectorConfig(sys_metric_outdated_seconds=10.0))
    run.cache.append(names.NODE_CPU_USAGE, (), T0, 2.0)
    run.tick(10.5)
    assert samples(run.cache, names.SYSTEM_CPU_USAGE) == []
    assert samples(run.cache, names.SYSTEM_MEMORY_USAGE) == []  # no node memory at all
