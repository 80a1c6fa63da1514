"""Cgroups that vanish or go bad between ticks, through the whole advisor (every collector but CPI):
no exception, only the broken entry fails, a pod that leaves leaves no series behind, and the failed
entry's error says what happened to which file."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.config.types import CollectorConfig
from koordlet.errors import CgroupGone, ParseError
from koordlet.metriccache import Labels, MetricCache, labels_of, names
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.framework import FileGroup
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, FakeClock, FakeInformer, make_options, make_pod, mkdirs

CONFIG = CollectorConfig(res_used_interval_seconds=1.0, memory_interval_seconds=1.0, psi_interval_seconds=1.0)
MIB = 1 << 20
POD_SERIES = (names.POD_CPU_USAGE, names.POD_MEMORY_USAGE, names.POD_CPU_THROTTLED)
CONTAINER_SERIES = (names.CONTAINER_CPU_USAGE, names.CONTAINER_MEMORY_USAGE, names.CONTAINER_CPU_THROTTLED)


def feed(host: FakeHost, rel: str, tick: int) -> None:
    """Every tick a cgroup uses 0.5 s of CPU, 10 more periods of which 2 throttled, and holds 8 MiB anon."""
    usage_usec, periods, throttled = 500_000 * tick, 10 * tick, 2 * tick
    if host.mode == "v1":
        host.write_cgroup(rel, "cpuacct.usage", f"{usage_usec * 1000}\n")
        host.write_cpu_stat(rel, nr_periods=periods, nr_throttled=throttled, throttled_time=throttled * 10**7)
        host.write_memory_stat(rel, total_inactive_anon=3 * MIB, total_active_anon=5 * MIB)
    else:
        host.write_cpu_stat(rel, usage_usec=usage_usec, user_usec=usage_usec, nr_periods=periods,
                            nr_throttled=throttled, throttled_usec=throttled * 10**4)
        host.write_memory_stat(rel, anon=8 * MIB, inactive_anon=3 * MIB, active_anon=5 * MIB)


def newest(cache: MetricCache, name: str, labels: Labels) -> float | None:
    last = cache.latest(name, labels)
    return None if last is None else last[0]


def owners(pod: PodMeta) -> list[tuple[tuple[str, ...], Labels, str]]:
    c = pod.containers[0]
    return [(POD_SERIES, labels_of(pod=pod.uid), pod.cgroup_dir),
            (CONTAINER_SERIES, labels_of(pod=pod.uid, container=c.container_id), c.cgroup_dir)]


def failed_entries(group: FileGroup) -> dict[str, Exception]:
    """The error of every tracked file that fails in one read of ``group``, by path."""
    batch = group.read()
    found: dict[str, Exception] = {}
    for key in group.keys():  # noqa: SIM118 - a FileGroup is not a mapping
        slot = group.slot(key)
        try:
            batch.value(slot)
        except Exception as exc:  # the classification is what the test checks
            found[group.files.path(slot)] = exc
    return found


def test_vanishing_and_garbled_cgroups_fail_alone(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    host = fake_cgroup_host
    a, b = make_pod("a", "BE"), make_pod("b", "LS")
    mkdirs(host, [a, b])
    clock = FakeClock(T0)
    informer = FakeInformer([a, b])
    options = make_options(host, tmp_path, informer, clock=clock, config=CONFIG, gates={"PSICollector": True})
    advisor = MetricsAdvisor(options, [c for c in build_collectors() if c.name != "cpi"], monotonic=clock)
    cache = options.cache
    cgroups = [rel for pod in (a, b) for _, _, rel in owners(pod)]
    per_cgroup_psi = host.mode != "v1"

    def run(tick: int, fed: list[str]) -> None:
        for rel in fed:
            feed(host, rel, tick)
        clock.now = T0 + tick
        advisor.run_once(force=True)

    run(0, cgroups)
    run(1, cgroups)
    for pod in (a, b):
        for series, labels, _ in owners(pod):
            for name in series:
                assert newest(cache, name, labels) == T0 + 1, (name, labels)
    assert cache.latest(names.CONTAINER_CPU_USAGE, owners(a)[1][1]) == (T0 + 1, pytest.approx(0.5))
    assert cache.latest(names.CONTAINER_CPU_THROTTLED, owners(a)[1][1]) == (T0 + 1, pytest.approx(0.2))
    assert cache.latest(names.CONTAINER_MEMORY_USAGE, owners(a)[1][1]) == (T0 + 1, 8 * MIB)

    # Tick 2: b's container cgroup was removed (the container exited) while b is still listed.
    b_container = b.containers[0].cgroup_dir
    host.rmdir_cgroup(b_container)
    alive = [rel for rel in cgroups if rel != b_container]
    run(2, alive)
    gone_labels = owners(b)[1][1]
    for name in CONTAINER_SERIES:
        assert newest(cache, name, gone_labels) == T0 + 1, name
    for rel_series in (owners(a)[0], owners(a)[1], owners(b)[0]):
        for name in rel_series[0]:
            assert newest(cache, name, rel_series[1]) == T0 + 2, (name, rel_series[1])
    if per_cgroup_psi:
        assert newest(cache, names.CONTAINER_PSI, labels_of(dict(gone_labels), resource="cpu", kind="some")) == T0 + 1
        assert newest(cache, names.POD_PSI, labels_of(pod="uid-b", resource="cpu", kind="some")) == T0 + 2
    # Every interval is 1 s: the advisor holds one file group.
    group = next(iter(advisor._groups.values())).files
    errors = failed_entries(group)
    assert errors and all(f"/{b_container}/" in path for path in errors)  # nothing else fails
    assert all(isinstance(e, CgroupGone) for e in errors.values())
    assert all(path in str(e) and "No such file or directory" in str(e) for path, e in errors.items())

    # Tick 3: a's container lost its memory.stat, a's pod CPU counter holds garbage.
    a_pod, a_container = a.cgroup_dir, a.containers[0].cgroup_dir
    run(3, alive)
    host.remove_cgroup_file(a_container, "memory.stat")
    usage_file = "cpuacct.usage" if host.mode == "v1" else "cpu.stat"
    garbled = host.write_cgroup(a_pod, usage_file, "usage lots\n" if host.mode == "v2" else "lots\n")
    clock.now = T0 + 4
    advisor.run_once(force=True)
    assert newest(cache, names.CONTAINER_MEMORY_USAGE, owners(a)[1][1]) == T0 + 3
    assert newest(cache, names.CONTAINER_CPU_USAGE, owners(a)[1][1]) == T0 + 4
    assert newest(cache, names.POD_CPU_USAGE, owners(a)[0][1]) == T0 + 3
    assert newest(cache, names.POD_MEMORY_USAGE, owners(a)[0][1]) == T0 + 4
    errors = failed_entries(group)
    missing = str(host.cgroup_path(a_container, "memory.stat"))
    assert set(errors) - {missing, str(garbled)} == {p for p in errors if f"/{b_container}/" in p}
    assert isinstance(errors[str(garbled)], ParseError)
    assert f"{garbled}: malformed content" in str(errors[str(garbled)])
    assert isinstance(errors[missing], CgroupGone) and missing in str(errors[missing])

    # Tick 5: b left the pod list: none of its series remain, in any collector.
    informer.pod_list[:] = [a]
    feed(host, a_pod, 5)
    clock.now = T0 + 5
    advisor.run_once(force=True)
    for name in (*POD_SERIES, *CONTAINER_SERIES, names.POD_PSI, names.CONTAINER_PSI):
        assert all(dict(labels).get("pod") != "uid-b" for labels in cache.series(name)), name
    assert advisor.errors == {}
    # The repaired counter is a fresh baseline after the garbage: no sample now, 0.5 cores a tick later.
    assert newest(cache, names.POD_CPU_USAGE, owners(a)[0][1]) == T0 + 3
    feed(host, a_pod, 6)
    clock.now = T0 + 6
    advisor.run_once(force=True)
    assert cache.latest(names.POD_CPU_USAGE, owners(a)[0][1]) == (T0 + 6, pytest.approx(0.5))
