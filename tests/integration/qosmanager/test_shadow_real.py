"""Shadow mode on the real hierarchy (v1 on the host, pure v2 in the guest), with cpusuppress through an LS load
step (the rig of :mod:`test_cpusuppress_real`: one LS and two BE busy loops, the real collectors, the real
executor).

* Side by side: in every round a shadow-mode cpusuppress and an active one decide on the same collection; the
  shadow one decides first, and writes nothing in its round (every file koordlet could write in the pods'
  cgroups is read back after it), and both decide the same (action, BE's CPUs, the LS and system usage they
  subtracted).  The shadow one goes on from what it would have written, never from the file the active one set.
* Shadow mode alone: the same scenario leaves every such file and every process as it was, while its decisions
  say it would have suppressed BE while LS was busy."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager.evictor import Evictions
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.plugins.cpusuppress import CPUSuppress
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.system.resources import REGISTRY
from tests.fixtures.realcgroup import RealCgroups
from tests.integration.qosmanager.test_cpusuppress_real import BE_DIR, BUSY, INTERVAL, Rig, make_rig, slo

COMPARED = ("policy", "be_cpus", "be_cpuset", "previous_cpuset", "ls_used_cores", "system_used_cores")
"""What a cpuset round decides from: BE's cpuset before (read back; in shadow mode the one it would have set) and
after, and the usage it subtracted."""


MAX_BUSY_ROUNDS = 8
"""Rounds of LS load at most, waiting for cpusuppress to limit BE (on the host it does in the second)."""


def _acted(decision: Decision) -> bool:
    """BE limited to fewer CPUs than the node's."""
    return bool(decision.numbers["be_cpus"] < decision.numbers["capacity_cpus"])


def _writable_files(rig: Rig) -> dict[str, Any]:
    """Every file koordlet could write in the pods' cgroups (each writable registry resource this host has in
    each pod, container and QoS directory), as the reader reads it."""
    reader = rig.strategy.options.reader
    prefix = rig.groups.name
    dirs = [f"{prefix}/{d}" for d in (BE_DIR, "kubepods/burstable", rig.ls_pod_rel, rig.ls_rel,
                                      f"{BE_DIR}/podbe", f"{BE_DIR}/podbe/be1", f"{BE_DIR}/podbe/be2")]
    values: dict[str, Any] = {}
    for rel in dirs:
        for resource in REGISTRY.values():
            if resource.validator is None:
                continue
            try:
                values[reader.path(resource, rel)] = reader.read(resource, rel)
            except Exception:  # a file this host or directory does not have
                continue
    assert len(values) > 10, values
    return values


def _shadowed(rig: Rig) -> tuple[CPUSuppress, Any]:
    options = rig.strategy.options
    shadow = Shadow(ShadowModes(default=True), cast(ResourceExecutor, options.executor),
                    cast(Evictions, options.evictor))
    strategy = CPUSuppress(shadow.options_for("cpusuppress", options))
    return strategy, shadow.writers["cpusuppress"]


def _same(shadowed: Decision, active: Decision) -> None:
    assert shadowed.action == active.action, (shadowed.summary, active.summary)
    assert {k: shadowed.numbers.get(k) for k in COMPARED} == {k: active.numbers.get(k) for k in COMPARED}, (
        shadowed.summary, active.summary)


def test_shadow_cpusuppress_decides_as_active_on_the_same_rounds(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    rig = make_rig(real_cgroups, tmp_path, QoSManagerConfig(be_min_cpuset_cpus=1))
    shadowed, writers = _shadowed(rig)
    spec = slo("cpuset")
    phases: list[tuple[str, Decision, Decision]] = []

    def round_(phase: str) -> None:
        rig.collect()
        before = _writable_files(rig)
        writers.begin_round(True)
        decision = shadowed.run_once(spec)
        assert _writable_files(rig) == before, phase
        phases.append((phase, decision, rig.strategy.run_once(spec)))
        time.sleep(INTERVAL)

    round_("idle")
    ls_pid = rig.groups.spawn(rig.ls_rel, BUSY)
    time.sleep(INTERVAL)
    # Until active mode acts on the load step (a loaded TCG guest counts LS's usage up over a few rounds).
    for _ in range(MAX_BUSY_ROUNDS):
        round_("ls-busy")
        if _acted(phases[-1][2]):
            break
    rig.groups.kill(ls_pid)
    time.sleep(INTERVAL)
    for _ in range(3):
        round_("ls-idle")
    for phase, decision, active in phases:
        print(f"{phase:>8}: shadow {decision.summary} | active {active.summary}")
        _same(decision, active)
    # The scenario made cpusuppress act: BE held fewer CPUs than the node while LS was busy.
    assert any(_acted(active) for phase, _, active in phases if phase == "ls-busy"), [
        active.summary for _, _, active in phases]


def test_shadow_cpusuppress_alone_touches_nothing(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    rig = make_rig(real_cgroups, tmp_path, QoSManagerConfig(be_min_cpuset_cpus=1))
    shadowed, writers = _shadowed(rig)
    spec = slo("cpuset")
    before = _writable_files(rig)
    be_procs = {rel: (rig.groups.path("cpu", rel) / "cgroup.procs").read_text().split()
                for rel in (f"{BE_DIR}/podbe/be1", f"{BE_DIR}/podbe/be2")}
    decisions: list[Decision] = []
    intended: list[str] = []
    ls_pid = rig.groups.spawn(rig.ls_rel, BUSY)
    time.sleep(INTERVAL)
    for _ in range(MAX_BUSY_ROUNDS):
        rig.collect()
        writers.begin_round(True)
        decisions.append(shadowed.run_once(spec))
        intended += writers.intended
        if _acted(decisions[-1]):
            break
        time.sleep(INTERVAL)
    rig.groups.kill(ls_pid)
    after = _writable_files(rig)
    assert after == before
    for rel, pids in be_procs.items():
        assert pids and all(Path(f"/proc/{pid}").exists() for pid in pids), rel
    # It would have acted: BE limited to fewer CPUs than the node's, and the decisions say which cpuset.
    assert _acted(decisions[-1]), [d.summary for d in decisions]
    assert any(sentence.startswith("would set ") and "cpuset" in sentence for sentence in intended), intended
