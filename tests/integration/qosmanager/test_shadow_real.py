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

import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager.evictor import Evictions
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.plugins.cpusuppress import CPUSuppress
from koordlet.qosmanager.registry import build_strategies, registry
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.resourceexecutor.tc import TcNetQoS
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system.hostpaths import HostPaths
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


# Every strategy the NodeSLO can turn on, on: the cpuset suppress and both evictions (memory at 1% of the node:
# it would evict), core scheduling (unsupported on the host: its cpu.idle fallback), memory QoS, LLC and
# bandwidth classes, network QoS over tc, CPU burst, the kernel knobs.
EVERY_STRATEGY: dict[str, Any] = {
    "resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cpuset", "cpuSuppressThresholdPercent": 65,
        "cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 80,
        "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 2, "memoryEvictThresholdPercent": 1},
    "resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched", "netQOSPolicy": "tc"},
        "lsClass": {"cpuQOS": {"enable": True}, "memoryQOS": {"enable": True}, "resctrlQOS": {"enable": True},
                    "networkQOS": {"enable": True, "ingressRequest": 40, "ingressLimit": 100,
                                   "egressRequest": 40, "egressLimit": 100}},
        "beClass": {"cpuQOS": {"enable": True, "schedIdle": 1}, "memoryQOS": {"enable": True},
                    "resctrlQOS": {"enable": True, "catRangeEndPercent": 30},
                    "networkQOS": {"enable": True, "ingressRequest": 30, "ingressLimit": 100,
                                   "egressRequest": 30, "egressLimit": 100}}},
    "cpuBurstStrategy": {"policy": "auto"},
    "systemStrategy": {"minFreeKbytesFactor": 150, "watermarkScaleFactor": 200, "totalNetworkBandwidth": "1G"},
}
KNOBS = ("/proc/sys/vm/min_free_kbytes", "/proc/sys/vm/watermark_scale_factor")


def _every_strategy_in_shadow(rig: Rig) -> tuple[QoSManager, NodeSLOHolder]:
    paths = HostPaths()
    sysctl, resctrl = SysctlExecutor(paths), ResctrlExecutor(paths.resctrl_root, time.monotonic, None)
    options = replace(rig.strategy.options, gates=gates.resolve({gates.ALL_ALPHA: True, gates.ALL_BETA: True}),
                      config=QoSManagerConfig(be_min_cpuset_cpus=1, net_interface="lo"), sysctl=sysctl,
                      resctrl=resctrl, coresched=CoreSchedExecutor(native, None, time.monotonic),
                      netqos=lambda policy: TcNetQoS("lo", prefix=f"{rig.groups.name[:8]}_"))
    executor, evictor = cast(ResourceExecutor, options.executor), cast(Evictions, options.evictor)
    shadow = Shadow(ShadowModes(default=True), executor, evictor, sysctl=sysctl, resctrl=resctrl)
    holder = NodeSLOHolder()
    assert holder.offer(merge_over_defaults(NodeSLOSpec.from_json(EVERY_STRATEGY)), "test")
    return QoSManager(options, build_strategies(options, shadow=shadow), holder, shadow=shadow), holder


def _untouchable(rig: Rig) -> dict[str, Any]:
    """What no strategy may change in shadow mode: every file koordlet could write in the pods' cgroups, the
    kernel knobs, lo's qdiscs and the processes in the BE containers."""
    state: dict[str, Any] = dict(_writable_files(rig))
    state.update({knob: Path(knob).read_text() for knob in KNOBS})
    state["tc qdisc lo"] = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True,
                                          check=True).stdout
    for rel in (f"{BE_DIR}/podbe/be1", f"{BE_DIR}/podbe/be2"):
        pids = (rig.groups.path("cpu", rel) / "cgroup.procs").read_text().split()
        assert pids and all(Path(f"/proc/{pid}").exists() for pid in pids), rel
        state[f"procs {rel}"] = pids
    return state


def test_every_strategy_in_shadow_mode_touches_nothing_through_a_load_step(real_cgroups: RealCgroups,
                                                                           tmp_path: Path) -> None:
    """The whole registry in shadow mode through the manager, as ``koordlet run`` with ``qos.shadow: true`` runs
    it: an LS load step with every strategy on leaves every cgroup file, knob, qdisc and process as it was, each
    strategy decides every round without an error, and the decisions say what would have been done."""
    rig = make_rig(real_cgroups, tmp_path, QoSManagerConfig(be_min_cpuset_cpus=1))
    manager, _ = _every_strategy_in_shadow(rig)
    ls_pid = rig.groups.spawn(rig.ls_rel, BUSY)
    before = _untouchable(rig)
    decisions: dict[str, list[Decision]] = {}
    try:
        for _ in range(4):
            time.sleep(INTERVAL)
            rig.collect()
            manager.run_once(force=True)
            for name in registry():
                decision = manager.options.decisions.last(name)
                if decision is not None:  # a strategy the NodeSLO leaves off does not run
                    decisions.setdefault(name, []).append(decision)
            assert _untouchable(rig) == before
    finally:
        rig.groups.kill(ls_pid)
    for name, made in decisions.items():
        print(f"{name}: " + " | ".join(f"{d.action} {d.summary}" for d in made))
        assert all(d.shadow for d in made), name
        assert [d.summary for d in made if d.action in ("error", "invalid", "failed")] == [], name
    assert set(registry()) - set(decisions) <= {"blkio"}, sorted(decisions)  # blkio: no blkioQOS here
    intended = {name: [s for d in made for s in d.intended] for name, made in decisions.items()}
    # It would have acted: BE's cpuset, the pods' memory QoS (v2: v1 has its files on Anolis only), the kernel
    # knobs, tc on lo, and the BE pod's eviction (memory above 1% of the node).
    assert any("cpuset" in s for s in intended["cpusuppress"]), intended["cpusuppress"]
    if rig.groups.version == 2:
        assert any(" because cgreconcile: " in s for s in intended["cgreconcile"]), decisions["cgreconcile"][0].summary
    assert any("min_free_kbytes" in s for s in intended["sysreconcile"]), intended["sysreconcile"]
    assert any(s.startswith("would set netqos:tc:lo") for s in intended["netqos"]), intended["netqos"]
    assert any(s.startswith("would evict default/be ") for s in intended["memoryevict"]), intended["memoryevict"]
