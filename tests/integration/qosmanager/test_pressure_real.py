"""Event-driven pressure on the real kernel (issue 23): PSI triggers registered through the C core fire when a BE
pod allocating quickly under a memory-limited kubepods makes the kernel reclaim, and the woken memoryevict
round evicts it.  memoryevict's interval is an hour here, so only a woken round can have done it.  The scenario
and the rig are :mod:`tests.fixtures.memorypressure`; ``tests/bench/bench_pressure.py`` times the same scenario
against polling."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.failures import ComponentFailures
from tests.fixtures.memorypressure import PressureRig
from tests.fixtures.realcgroup import RealCgroups


def test_a_pressure_trigger_wakes_memoryevict_and_the_be_pod_is_evicted(
        real_cgroups: RealCgroups, tmp_path: Path, failures: ComponentFailures) -> None:
    rig = PressureRig(real_cgroups, tmp_path, failures.callback("pressure rig"), memory_evict_interval=3600)
    rig.hold_ls()
    rig.start()
    try:
        episode = rig.episode(event_driven=True, steady_seconds=3.0, timeout=120.0)
    finally:
        rig.stop()
    status = {s["name"]: s for s in rig.watcher.status()}
    print(f"\npressure: onset -> kill {episode.latency:.3f} s, evicting round woken by {episode.woken_by!r}; "
          f"triggers {rig.triggers} (CAP_SYS_RESOURCE: {rig.privileged}); fired "
          f"{ {name: s['fired'] for name, s in status.items()} }; steady phase {rig.steady}")
    assert episode.woken_by.startswith("psi "), episode
    fired = episode.woken_by.removeprefix("psi ").split(",")
    assert all(status[name]["fired"] >= 1 and status[name]["last_fired"] for name in fired), status
    assert {name.split("-")[1] for name in fired} == {"memory"}  # a memory trigger woke memoryevict
    assert "evicted default/be1" in episode.summary, episode.summary
    assert rig.ls_alive()
    if not rig.privileged:
        assert all("widened" in s["note"] for s in status.values()), status
