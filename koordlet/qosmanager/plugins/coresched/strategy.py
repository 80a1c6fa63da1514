"""Core scheduling QoS (Koordinator ``runtimehooks/hooks/coresched``, gate ``CoreSched``, off by default).

Runs when the gate is on and ``resourceQOSStrategy.policies.cpuPolicy`` is ``coreSched``.  Every round:

* each container of a running pod of a class with ``cpuQOS.enable`` gets its group's core-scheduling cookie
  (groups: :mod:`.rules`; cookies: :mod:`.cookies`), tasks that appeared since the last round join it, and
  containers of pods that left the node are forgotten;
* cgroups whose class has ``cpuQOS.schedIdle=1`` get ``cpu.idle=1``: the pod directories (Koordinator
  #2732 moved it there, because kubelet cannot write ``cpu.shares`` of a QoS directory with ``cpu.idle=1``)
  and, as Koordinator's KubeQOS reconciler does, the burstable (LS) and besteffort (BE) QoS directories —
  never the Guaranteed level, which is kubepods itself;
* directories this strategy set to 1 and no longer wants get 0 back.

On a kernel without core scheduling (``prctl`` EINVAL: no CONFIG_SCHED_CORE; ENODEV: no SMT) the strategy
says so once — decision action ``unsupported`` and one log line — and from then on only keeps BE apart with
``cpu.idle=1`` on the besteffort QoS directory and on every BE pod directory (Koordinator #3188), through the
resource executor like every cgroup write.  The executor re-asks the kernel after its retry interval.

Switched off, the strategy puts every task it gave a cookie back to cookie 0 and writes ``cpu.idle=0`` where
it wrote 1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.errors import CgroupGone, KoordletError
from koordlet.isolation.coresched import rules
from koordlet.isolation.coresched.cookies import ContainerKey, CookieBook, Tally
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.resourceexecutor import CgroupUpdate, Outcome, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.streaklog import Streak
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import CGROUP_PROCS, CPU_IDLE

log = logging.getLogger(__name__)

NAME = "coresched"
NO_BACKEND = "no core scheduling backend: the agent started without a CoreSchedExecutor"
_QOS_DIR_FIELD = {KubeQoS.BURSTABLE: (QoSClass.LS, "lsClass"), KubeQoS.BESTEFFORT: (QoSClass.BE, "beClass")}


@dataclass
class _Round:
    now: float
    tally: Tally = field(default_factory=Tally)
    problems: list[str] = field(default_factory=list)
    enabled_containers: int = 0
    disabled_containers: int = 0


class CoreSched:
    """The ``coresched`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._book = options.cookies
        if self._book is None and options.coresched is not None:
            self._book = CookieBook(options.coresched)
        self._errors = Streak(log, options.clock)
        self._decide = Decider(NAME, log, options.clock)
        self._dirs: dict[ContainerKey, str] = {}
        """Container -> its cgroup directory, for the switch-off clear."""
        self._idle: set[str] = set()
        """Directories this strategy wrote ``cpu.idle=1`` to."""
        self._probed = False
        self._reported: str | None = None
        """The unsupported reason already logged (None: none, or core scheduling works)."""

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        return (gates.enabled(self.options.gates, gates.CORE_SCHED)
                and rules.cpu_policy(slo) == rules.CPU_POLICY_CORE_SCHED)

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        now = self.options.clock()
        try:
            decision = self._switch_off(now) if not enabled else self._reconcile(slo, now)
        except (KoordletError, OSError) as exc:
            # Nothing here should raise; if it does, the round is reported, never propagated, and logged
            # once per streak of the same error type (it would recur every round).
            self._errors.fail(type(exc).__name__, "coresched round failed", exc_info=True)
            return self._decide(Action.ERROR, f"coresched round failed: {exc}", {"error": str(exc)}, at=now)
        self._errors.ok("coresched rounds succeed again")
        return decision

    # ------------------------------------------------------------------------------------------ reconcile

    def _reconcile(self, slo: NodeSLOSpec, now: float) -> Decision:
        rule = rules.rule_of(slo)
        rnd = _Round(now)
        pods = [p for p in self.options.informer.pods() if not p.pod.terminated]
        reason = self._support()
        if reason is None and self._book is not None:
            self._cookies(rule, pods, rnd)
            reason = rnd.tally.unsupported
        newly_unsupported = self._note_support(reason)
        wanted = self._idle_wanted(rule, pods, fallback=reason is not None)
        results = self._apply_idle(wanted)
        return self._reconciled(rule, rnd, reason, newly_unsupported, wanted, results)

    def _support(self) -> str | None:
        """Why core scheduling cannot be used now, or None.  The kernel is asked once at start and, while
        it says no, again whenever the executor's retry interval allows (``probe`` is free before that)."""
        executor = self.options.coresched
        if executor is None:
            return NO_BACKEND
        if not self._probed or executor.unsupported_reason is not None:
            self._probed = True
            return executor.probe()
        return None

    def _note_support(self, reason: str | None) -> bool:
        """Logs the first unsupported verdict (and a recovery) once; True on the round it turned unsupported."""
        if reason is None:
            if self._reported is not None:
                log.info("core scheduling works again; cookies resume")
                self._reported = None
            return False
        if self._reported is not None:
            return False
        self._reported = reason
        log.warning("core scheduling unsupported on this node; BE falls back to cpu.idle=1",
                    extra={"reason": reason})
        return True

    def _cookies(self, rule: rules.Rule, pods: Sequence[PodMeta], rnd: _Round) -> None:
        assert self._book is not None
        live: list[ContainerKey] = []
        for pod in pods:
            verdict = rules.pod_group(rule, pod)
            for container in pod.containers:
                if not container.container_id or not container.cgroup_dir:
                    continue
                key = (pod.uid, container.container_id)
                live.append(key)
                tracked = key in self._book.containers
                if not verdict.enabled and not tracked:
                    rnd.disabled_containers += 1
                    continue
                pids = self._pids(container.cgroup_dir, rnd)
                if pids is None:
                    continue
                self._dirs[key] = container.cgroup_dir
                where = f"{pod.pod.key}/{container.name}"
                if verdict.enabled:
                    rnd.enabled_containers += 1
                    self._book.enable(key, verdict.group, pids, f"{NAME}: group {verdict.group!r} for {where}",
                                      rnd.tally)
                else:
                    rnd.disabled_containers += 1
                    self._book.disable(key, pids, f"{NAME}: default cookie for {where} ({verdict.why})", rnd.tally)
                if rnd.tally.unsupported is not None:
                    return
        for key in self._book.forget(live):
            self._dirs.pop(key, None)

    def _pids(self, rel_dir: str, rnd: _Round) -> list[int] | None:
        """The processes of a container cgroup (``cgroup.procs`` of the cpu hierarchy, or of the unified
        one on v2); [] when the cgroup is gone (a restarting container), None when unreadable."""
        try:
            text = str(self.options.reader.read(CGROUP_PROCS, rel_dir))
        except CgroupGone:
            return []
        except (KoordletError, OSError) as exc:
            rnd.problems.append(f"{rel_dir}: cannot read cgroup.procs: {exc}")
            return None
        pids: list[int] = []
        for token in text.split():
            if not token.isdigit() or int(token) <= 0:
                rnd.problems.append(f"{rel_dir}: cgroup.procs holds {token!r}, not a pid")
                return None
            pids.append(int(token))
        return pids

    # ------------------------------------------------------------------------------------------ cpu.idle

    def _idle_wanted(self, rule: rules.Rule, pods: Sequence[PodMeta], *, fallback: bool) -> dict[str, str]:
        """Directory -> why it wants ``cpu.idle=1``."""
        wanted: dict[str, str] = {}
        for kube_qos, (qos, field_name) in _QOS_DIR_FIELD.items():
            if rule.param(qos).idle:
                wanted[helpers.kube_qos_dir(self.options, kube_qos)] = f"{field_name}.cpuQOS.schedIdle=1"
        for pod in pods:
            if pod.cgroup_dir and pod.qos is not QoSClass.SYSTEM and rule.param(pod.qos).idle:
                wanted[pod.cgroup_dir] = f"{pod.qos.value} pod {pod.pod.key} schedIdle=1"
        if fallback:
            why = "core scheduling unsupported, BE falls back to cpu.idle=1 (koordinator#3188)"
            wanted.setdefault(helpers.be_qos_dir(self.options), why)
            for pod in pods:
                if pod.cgroup_dir and helpers.is_be(pod):
                    wanted.setdefault(pod.cgroup_dir, why)
        return wanted

    def _apply_idle(self, wanted: dict[str, str]) -> list[Result]:
        updates = [CgroupUpdate(CPU_IDLE, d, 1, f"{NAME}: {why}") for d, why in sorted(wanted.items())]
        updates += [CgroupUpdate(CPU_IDLE, d, 0, f"{NAME}: {d} no longer wants cpu.idle")
                    for d in sorted(self._idle - set(wanted))]
        results = self.options.executor.apply(updates) if updates else []
        self._note_idle(results)
        return results

    def _note_idle(self, results: Iterable[Result]) -> None:
        for result in results:
            rel_dir = result.update.rel_dir
            if result.update.value == 1:
                if result.ok:
                    self._idle.add(rel_dir)
            elif result.outcome is not Outcome.FAILED:
                # Reset, vanished or refused: nothing left to undo there.
                self._idle.discard(rel_dir)

    # ------------------------------------------------------------------------------------------ switch-off

    def _switch_off(self, now: float) -> Decision:
        tally = Tally()
        containers = 0
        if self._book is not None and self._book.containers:
            containers = len(self._book.containers)
            problems: list[str] = []

            def pids_of(key: ContainerKey) -> list[int]:
                rel_dir = self._dirs.get(key)
                if rel_dir is None:
                    return []
                rnd = _Round(now)
                found = self._pids(rel_dir, rnd)
                problems.extend(rnd.problems)
                return found or []

            self._book.clear_all(pids_of, f"{NAME}: switched off, back to the default cookie", tally)
            tally.failures.extend(problems)
        reset = sorted(self._idle)
        updates = [CgroupUpdate(CPU_IDLE, d, 0, f"{NAME}: switched off") for d in reset]
        results = self.options.executor.apply(updates) if updates else []
        self._idle.clear()
        self._dirs.clear()
        self._probed = False
        self._reported = None
        counts = helpers.write_outcomes(results)
        numbers: dict[str, Any] = {"containers_cleared": containers, "tasks_cleared": tally.cleared,
                                   "tasks_gone": tally.gone, "idle_reset": reset, **counts,
                                   "problems": tally.failures + helpers.write_problems(results),
                                   "unsupported": tally.unsupported}
        if not containers and not reset:
            return self._decide(Action.NONE, "coresched off: no cookie or cpu.idle of ours left", numbers, at=now)
        summary = (f"coresched off: {tally.cleared} tasks of {containers} containers back to cookie 0, "
                   f"cpu.idle=0 on {len(reset)} dirs ({helpers.writes_made(counts)} writes{_tail(counts)})")
        return self._decide(Action.RECOVER, summary, numbers, at=now)

    # ------------------------------------------------------------------------------------------ decisions

    def _reconciled(self, rule: rules.Rule, rnd: _Round, reason: str | None, newly_unsupported: bool,
                    wanted: dict[str, str], results: list[Result]) -> Decision:
        tally = rnd.tally
        counts = helpers.write_outcomes(results)
        problems = rnd.problems + tally.failures + helpers.write_problems(results)
        book = self._book.numbers() if self._book is not None else {}
        numbers: dict[str, Any] = {
            "cpu_policy": rules.CPU_POLICY_CORE_SCHED, "rule": rule.numbers(), "supported": reason is None,
            "unsupported_reason": reason, "groups": book, "new_cookies": list(tally.created),
            "tasks_assigned": tally.assigned, "tasks_cleared": tally.cleared, "tasks_gone": tally.gone,
            "containers_enabled": rnd.enabled_containers, "containers_disabled": rnd.disabled_containers,
            "idle_dirs": sorted(wanted), **counts, "problems": problems,
        }
        idle = f"cpu.idle=1 on {len(wanted)} dirs ({helpers.writes_made(counts)} writes{_tail(counts)})"
        if reason is not None:
            summary = f"core scheduling unsupported ({reason}); {idle}"
            if newly_unsupported:
                return self._decide(Action.UNSUPPORTED, summary, numbers, at=rnd.now)
        else:
            summary = (f"coresched: {len(book)} groups ({len(tally.created)} new cookies), {tally.assigned} tasks "
                       f"assigned, {tally.cleared} cleared; {idle}")
        if problems:
            summary += f"; {len(problems)} problems: {problems[0]}"
        acted = tally.assigned or tally.cleared or helpers.writes_made(counts) or tally.created
        return self._decide(Action.RECONCILE if acted else Action.NONE, summary, numbers, at=rnd.now)


def _tail(counts: dict[str, int]) -> str:
    bad = counts["refused"] + counts["invalid"] + counts["failed"]
    return f", {bad} refused or failed" if bad else ""
