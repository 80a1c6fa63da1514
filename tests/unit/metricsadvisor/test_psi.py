"""PSI avg10 (percent) of the node and, where a unified hierarchy exists, of each pod and container."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.config.types import CollectorConfig
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.collectors.psi import PSICollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import T0, Single, make_options, make_pod, mkdirs, samples


def psi(some: str, full: str | None) -> str:
    text = f"some avg10={some} avg60=1.00 avg300=2.00 total=123456\n"
    return text + (f"full avg10={full} avg60=3.00 avg300=4.00 total=6543\n" if full is not None else "")


def value(run: Single, name: str, kind: str, resource: str, **labels: str) -> list[tuple[float, float]]:
    return samples(run.cache, name, labels_of(labels, resource=resource, kind=kind))


def test_gate_and_interval(fake_host: FakeHost, tmp_path: Path) -> None:
    collector = PSICollector()
    assert not collector.enabled(make_options(fake_host, tmp_path / "a"))
    options = make_options(fake_host, tmp_path / "b", gates={"PSICollector": True},
                           config=CollectorConfig(psi_interval_seconds=4.0))
    assert collector.enabled(options) and collector.interval(options) == 4.0


def test_node_pressure_some_and_full(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """/proc/pressure/cpu before 5.13 has no full line: some only.  memory some 12.34 %, full 5.67 %."""
    host = fake_cgroup_host
    host.set_pressure("cpu", psi("1.50", None))
    host.set_pressure("memory", psi("12.34", "5.67"))
    host.set_pressure("io", psi("0.00", "0.00"))
    run = Single.start(PSICollector(), make_options(host, tmp_path))
    run.tick()
    assert value(run, names.NODE_PSI, "some", "cpu") == [(T0, 1.5)]
    assert value(run, names.NODE_PSI, "full", "cpu") == []
    assert value(run, names.NODE_PSI, "some", "memory") == [(T0, pytest.approx(12.34))]
    assert value(run, names.NODE_PSI, "full", "memory") == [(T0, pytest.approx(5.67))]
    assert value(run, names.NODE_PSI, "full", "io") == [(T0, 0.0)]


@pytest.mark.parametrize("mode", ["v1", "hybrid", "v2"])
def test_pod_and_container_pressure_where_a_unified_hierarchy_exists(fake_host: FakeHost, tmp_path: Path,
                                                                     mode: str) -> None:
    """Pod io some 42.00 %, container memory full 7.25 %.  A v1-only host has no per-cgroup PSI: no pod
    series at all, the node's still."""
    host = fake_host
    host.set_mode(mode)
    pod = make_pod("a")
    mkdirs(host, [pod])
    run = Single.start(PSICollector(), make_options(host, tmp_path))
    run.pods(pod)
    cid = pod.containers[0].container_id
    if mode != "v1":
        host.write_cgroup(pod.cgroup_dir, "io.pressure", psi("42.00", "40.00"), subsystem="unified")
        host.write_cgroup(pod.containers[0].cgroup_dir, "memory.pressure", psi("9.00", "7.25"), subsystem="unified")
    run.tick()
    assert value(run, names.NODE_PSI, "some", "cpu") == [(T0, 0.0)]
    if mode == "v1":
        assert run.cache.series(names.POD_PSI) == [] and run.cache.series(names.CONTAINER_PSI) == []
        return
    assert value(run, names.POD_PSI, "some", "io", pod="uid-a") == [(T0, 42.0)]
    assert value(run, names.CONTAINER_PSI, "full", "memory", pod="uid-a", container=cid) == [
        (T0, pytest.approx(7.25))]
    assert len(run.cache.series(names.POD_PSI)) == 6  # 3 resources x some/full
    run.pods()
    assert run.cache.series(names.POD_PSI) == [] and run.cache.series(names.CONTAINER_PSI) == []
    assert len(run.cache.series(names.NODE_PSI)) == 6
