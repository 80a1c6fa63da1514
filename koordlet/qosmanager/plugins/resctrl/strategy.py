"""Resctrl QoS: L3 cache ways (CAT) and memory bandwidth (MBA) per class and per pod (Koordinator
``qosmanager/plugins/resctrl`` for the classes, gate ``RdtResctrl``, on by default; ``runtimehooks/hooks/resctrl``
for the pods, gate ``Resctrl``, off by default).

Every round:

* each class with ``resctrlQOS.enable`` gets its control group — ``LSR`` (LSE pods too), ``LS``, ``BE`` — with
  one ``L3:<id>=<mask>`` entry per cache id of the root schemata (:mod:`.schemata` has the arithmetic) and
  ``MB:<id>=<value>`` from ``mbaPercent`` (Intel percent rounded up to the MBA step, AMD absolute units; the
  vendor comes from ``/proc/cpuinfo``);
* with the ``Resctrl`` gate on, each running pod with the annotation ``node.koordinator.sh/resctrl`` gets the
  group ``koordlet-<uid>`` (:mod:`.annotation`), and such pods leave their class group;
* the threads of every container (``tasks``; ``cgroup.threads`` on v2 — resctrl moves one thread per
  write, so ``cgroup.procs`` would leave every thread but the leader behind) join their pod's or class's group;
* ``koordlet-*`` groups of pods that are gone (or no longer annotated) are removed: the kernel hands their
  tasks back to the root group.

Everything is computed and checked before the first write: a bad class setting (a CAT range outside
0..100, start >= end, a range narrower than ``min_cbm_bits`` ways) rejects the round with the field named; a
bad annotation skips only that pod, naming it, and its group keeps its last good schemata.

Switched off (or a class switched off), groups this strategy created are removed, class groups it found
already there are reset to every way and unlimited bandwidth, and every ``koordlet-*`` group goes.  A host
without resctrl (no mount, as on the test host) gets the decision ``unsupported`` with the reason, logged
once; nothing raises."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import (
    NodeSLOSpec,
    ResourceQOSStrategy,
    default_resource_qos_strategy,
)
from koordlet.apis.tenantpolicy import pod_group_room
from koordlet.config import gates
from koordlet.errors import CgroupGone, KoordletError
from koordlet.isolation.resctrl import annotation
from koordlet.isolation.resctrl.host import HostError, HostInfo, read_host, read_num_closids
from koordlet.isolation.resctrl.policy import CLASS_GROUPS, POD_GROUP_PREFIX, class_cfg, class_field, pod_group
from koordlet.isolation.resctrl.schemata import (
    PlanError,
    Schemata,
    cat_mask,
    check_range,
    full,
    mb_value,
    uniform,
)
from koordlet.isolation.slo import qos_strategy
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.resourceexecutor import Outcome, Result
from koordlet.resourceexecutor.resctrl import ResctrlGroups
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.resources import TASKS

log = logging.getLogger(__name__)

NAME = "resctrl"
NO_BACKEND = "no resctrl executor: the agent started without one"
_GROUP_OF = {QoSClass.LSE: "LSR", QoSClass.LSR: "LSR", QoSClass.LS: "LS", QoSClass.BE: "BE"}


@dataclass(frozen=True)
class ClassPlan:
    group: str
    start: int
    end: int
    mba_percent: int
    schemata: Schemata

    def numbers(self) -> dict[str, Any]:
        return {"catRangeStartPercent": self.start, "catRangeEndPercent": self.end, "mbaPercent": self.mba_percent,
                **self.schemata.numbers(), "lines": self.schemata.lines()}


@dataclass
class _Round:
    now: float
    results: list[Result] = field(default_factory=list)
    tasks: dict[str, Result] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    reset: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Rejected input: a bad annotation."""
    problems: list[str] = field(default_factory=list)
    """Writes or reads that failed."""


class ResctrlQoS:
    """The ``resctrl`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._created: set[str] = set()
        """Class groups this strategy made (removed when it stops)."""
        self._configured: set[str] = set()
        """Class groups it wrote schemata to (reset or removed when their class is switched off)."""
        self._reported: str | None = None
        self._last_error: str | None = None
        self._decide = Decider(NAME, log, options.clock)
        self._pod_errors: set[str] = set()
        """Annotation errors already logged (each is logged once while it lasts)."""
        self._closid_refusals: set[str] = set()
        """Per-pod groups refused for want of CLOSIDs, already logged (once while it lasts)."""

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """Gate ``RdtResctrl`` and ``resctrlQOS.enable`` of some class, or gate ``Resctrl`` (pod groups)."""
        return bool(self._classes_on(slo)) or self._pods_on()

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        now = self.options.clock()
        executor = self.options.resctrl
        reason = NO_BACKEND if executor is None else executor.unsupported_reason()
        if executor is None or reason is not None:
            return self._unsupported(now, reason or NO_BACKEND, enabled)
        if self._reported is not None:
            log.info("resctrl usable again", extra={"root": executor.root})
            self._reported = None
        try:
            host = read_host(executor.root, self.options.layout.paths.proc("cpuinfo"))
        except HostError as exc:
            return self._rejected(now, str(exc), {})
        if not enabled:
            return self._switch_off(now, executor, host)
        classes_on = self._classes_on(slo)
        try:
            plans = [self._plan_class(host, qos_strategy(slo), group) for group in classes_on]
        except PlanError as exc:
            return self._rejected(now, str(exc), host.numbers())
        self._last_error = None
        rnd = _Round(now)
        pods = [p for p in self.options.informer.pods() if not p.pod.terminated]
        pod_plans = self._plan_pods(rnd, host, pods) if self._pods_on() else {}
        self._apply(rnd, executor, host, plans, pod_plans, pods)
        return self._reconciled(rnd, host, plans, pod_plans)

    # ------------------------------------------------------------------------------------------ planning

    def _classes_on(self, slo: NodeSLOSpec) -> list[str]:
        if not gates.enabled(self.options.gates, gates.RDT_RESCTRL):
            return []
        strategy = qos_strategy(slo)
        return [g for g in CLASS_GROUPS if (cfg := class_cfg(strategy, g)) is not None and cfg.enable is True]

    def _pods_on(self) -> bool:
        return gates.enabled(self.options.gates, gates.RESCTRL)

    def _plan_class(self, host: HostInfo, strategy: ResourceQOSStrategy, group: str) -> ClassPlan:
        where = class_field(group)
        cfg = class_cfg(strategy, group)
        default = class_cfg(default_resource_qos_strategy(), group)
        assert cfg is not None and default is not None

        def pick(name: str) -> Any:
            value = getattr(cfg, name)
            return getattr(default, name) if value is None else value

        start, end = check_range(f"{where}.catRangeStartPercent..catRangeEndPercent",
                                 pick("cat_range_start_percent"), pick("cat_range_end_percent"))
        mba = pick("mba_percent")
        masks = {c.resource: cat_mask(f"{where}.catRange {start}..{end}", c, start, end) for c in host.cat}
        mb = mb_value(f"{where}.mbaPercent", host, mba) if host.mb_domains else None
        return ClassPlan(group, start, end, mba, uniform(host, masks, mb))

    def _plan_pods(self, rnd: _Round, host: HostInfo, pods: Sequence[PodMeta]) -> dict[str, Schemata | None]:
        """Pod UID -> its group's schemata; None for a pod whose annotation is bad (its group stays)."""
        plans: dict[str, Schemata | None] = {}
        for pod in pods:
            text = pod.pod.annotations.get(annotation.ANNOTATION_RESCTRL)
            if text is None:
                continue
            try:
                plans[pod.uid] = annotation.pod_schemata(annotation.parse(text), host)
            except PlanError as exc:
                plans[pod.uid] = None
                rnd.errors.append(f"pod {pod.pod.key} ({pod.uid}): annotation {annotation.ANNOTATION_RESCTRL}: {exc}")
        for error in rnd.errors:
            if error not in self._pod_errors:
                log.warning("resctrl annotation rejected, the pod's group keeps its schemata", extra={"error": error})
        self._pod_errors = set(rnd.errors)
        return plans

    # ------------------------------------------------------------------------------------------ applying

    def _apply(self, rnd: _Round, executor: ResctrlGroups, host: HostInfo, plans: Sequence[ClassPlan],
               pod_plans: Mapping[str, Schemata | None], pods: Sequence[PodMeta]) -> None:
        existing = self._groups(rnd, executor)
        if existing is None:
            return
        ready: set[str] = set()
        planned = [p.group for p in plans] + [pod_group(uid) for uid, s in pod_plans.items() if s is not None]
        for group in planned:
            if group not in existing:
                # Removed behind our back: the executor would skip the same text as unchanged, and nothing
                # would recreate the group until its cache expired.
                executor.forget(group)
        for plan in plans:
            result = executor.apply_schemata(plan.group, plan.schemata.lines(), f"{NAME}: {class_field(plan.group)}")
            rnd.results.append(result)
            if result.outcome in _DONE and plan.group not in existing:
                self._created.add(plan.group)
            self._configured.add(plan.group)
            if result.ok:
                ready.add(plan.group)
        self._release_classes(rnd, executor, host, {p.group for p in plans})
        by_uid = {p.uid: p for p in pods}
        pod_plans = self._within_closids(rnd, executor, existing | {p.group for p in plans}, pod_plans, by_uid)
        for uid, schemata in pod_plans.items():
            if schemata is None:
                continue
            group = pod_group(uid)
            result = executor.apply_schemata(group, schemata.lines(), f"{NAME}: pod {by_uid[uid].pod.key}")
            rnd.results.append(result)
            if result.ok:
                ready.add(group)
        for group in sorted(g for g in existing if g.startswith(POD_GROUP_PREFIX)):
            if group[len(POD_GROUP_PREFIX):] not in pod_plans:
                self._remove(rnd, executor, group, "its pod is gone or no longer annotated")
        self._assign(rnd, executor, pods, pod_plans, ready)

    def _within_closids(self, rnd: _Round, executor: ResctrlGroups, groups: set[str],
                        pod_plans: Mapping[str, Schemata | None], by_uid: Mapping[str, PodMeta]
                        ) -> dict[str, Schemata | None]:
        """The pod plans whose group exists or still fits: a new per-pod group never takes the CLOSIDs the
        class groups not made yet and the configured reserve need (pod annotations are tenant input; about
        16 annotated pods would otherwise take every CLOSID).  A pod left out stays in its class group."""
        num_closids = read_num_closids(executor.root)
        kept: dict[str, Schemata | None] = {}
        groups = set(groups)
        for uid, schemata in pod_plans.items():
            group = pod_group(uid)
            if schemata is not None and group not in groups and num_closids is not None:
                why = pod_group_room(num_closids, groups, self.options.closid_reserve)
                if why is not None:
                    problem = f"pod {by_uid[uid].pod.key}: no per-pod resctrl group: {why}"
                    rnd.problems.append(problem)
                    if problem not in self._closid_refusals:
                        log.warning("per-pod resctrl group refused", extra={"error": problem})
                    continue
                groups.add(group)
            kept[uid] = schemata
        self._closid_refusals = {p for p in rnd.problems if "no per-pod resctrl group" in p}
        return kept

    def _groups(self, rnd: _Round, executor: ResctrlGroups) -> set[str] | None:
        try:
            return set(executor.groups())
        except (KoordletError, OSError) as exc:
            rnd.problems.append(f"cannot list the resctrl groups: {exc}")
            return None

    def _release_classes(self, rnd: _Round, executor: ResctrlGroups, host: HostInfo, keep: set[str]) -> None:
        """Class groups configured earlier whose class is off now: removed if this strategy made them,
        otherwise given the full cache and bandwidth (another agent, or an earlier koordlet, made them)."""
        for group in sorted(self._configured - keep):
            if group in self._created:
                self._remove(rnd, executor, group, "class switched off")
                self._created.discard(group)
            else:
                result = executor.apply_schemata(group, full(host).lines(), f"{NAME}: {class_field(group)} off")
                rnd.results.append(result)
                if result.outcome is not Outcome.GONE:
                    rnd.reset.append(group)
            self._configured.discard(group)

    def _remove(self, rnd: _Round, executor: ResctrlGroups, group: str, why: str) -> None:
        result = executor.remove_group(group, f"{NAME}: {why}")
        if result.outcome in _DONE:
            rnd.removed.append(group)
        elif result.outcome is not Outcome.GONE:
            rnd.problems.append(f"remove {group}: {result.outcome.value} ({result.error})")

    def _assign(self, rnd: _Round, executor: ResctrlGroups, pods: Sequence[PodMeta],
                pod_plans: Mapping[str, Schemata | None], ready: set[str]) -> None:
        wanted: dict[str, list[int]] = {}
        owners: dict[str, str] = {}
        for pod in pods:
            if pod.uid in pod_plans:
                group, owner = pod_group(pod.uid), f"{NAME}: pod {pod.pod.key}"
            else:
                class_group = _GROUP_OF.get(pod.qos)
                if class_group is None:
                    continue
                group, owner = class_group, f"{NAME}: {class_field(class_group)}"
            # Upstream moves tasks into a group whose schemata write failed; we do not: a fresh group holds the
            # kernel's defaults, not what the NodeSLO asks for.
            if group not in ready:
                continue
            owners[group] = owner
            wanted.setdefault(group, []).extend(self._tids(rnd, pod))
        for group, tids in wanted.items():
            if not tids:
                continue
            result = executor.assign_tasks(group, tids, owners[group])
            rnd.tasks[group] = result
            if not result.ok and result.error:
                rnd.problems.append(f"tasks of {group}: {result.outcome.value} ({result.error})")

    def _tids(self, rnd: _Round, pod: PodMeta) -> list[int]:
        tids: list[int] = []
        for container in pod.containers:
            if not container.cgroup_dir:
                continue
            try:
                text = str(self.options.reader.read(TASKS, container.cgroup_dir))
            except CgroupGone:
                continue  # a restarting container: its new tasks join next round
            except (KoordletError, OSError) as exc:
                rnd.problems.append(f"{container.cgroup_dir}: cannot read the thread list: {exc}")
                continue
            tokens = text.split()
            bad = [t for t in tokens if not t.isdigit() or int(t) <= 0]
            if bad:
                rnd.problems.append(f"{container.cgroup_dir}: thread list holds {bad[0]!r}, not a task id")
                continue
            tids.extend(int(t) for t in tokens)
        return tids

    # ------------------------------------------------------------------------------------------ switch-off

    def _switch_off(self, now: float, executor: ResctrlGroups, host: HostInfo) -> Decision:
        rnd = _Round(now)
        existing = self._groups(rnd, executor) or set()
        self._release_classes(rnd, executor, host, set())
        for group in sorted(g for g in existing if g.startswith(POD_GROUP_PREFIX)):
            self._remove(rnd, executor, group, "switched off")
        self._created.clear()
        numbers = {"host": host.numbers(), "removed": rnd.removed, "reset": rnd.reset, **_counts(rnd),
                   "problems": rnd.problems}
        if not rnd.removed and not rnd.reset and not rnd.problems:
            return self._decide(Action.NONE, "resctrl QoS off: no group of ours left", numbers, at=now)
        summary = (f"resctrl QoS off: removed {_list(rnd.removed)}, reset {_list(rnd.reset)} to the full cache and "
                   f"bandwidth{_tail(rnd)}")
        return self._decide(Action.RECOVER, summary, numbers, at=now)

    # ------------------------------------------------------------------------------------------ decisions

    def _unsupported(self, now: float, reason: str, enabled: bool) -> Decision:
        if reason != self._reported:
            self._reported = reason
            log.warning("resctrl QoS unsupported on this host", extra={"reason": reason})
        if not enabled:
            self._created.clear()
            self._configured.clear()
            return self._decide(Action.NONE, f"resctrl QoS off; nothing to undo: {reason}", {"reason": reason},
                                at=now)
        return self._decide(Action.UNSUPPORTED, f"resctrl QoS not applied: {reason}", {"reason": reason}, at=now)

    def _rejected(self, now: float, error: str, host: Mapping[str, Any]) -> Decision:
        if error != self._last_error:
            self._last_error = error
            log.warning("resctrl QoS configuration rejected, the schemata in force stay", extra={"error": error})
        return self._decide(Action.ERROR, f"resctrl QoS not changed: {error}",
                            {"error": error, "host": dict(host), "in_force": sorted(self._configured)}, at=now)

    def _reconciled(self, rnd: _Round, host: HostInfo, plans: Sequence[ClassPlan],
                    pod_plans: Mapping[str, Schemata | None]) -> Decision:
        counts = _counts(rnd)
        classes = {p.group: p.numbers() for p in plans}
        pods = {pod_group(uid): (s.numbers() | {"lines": s.lines()} if s is not None else None)
                for uid, s in sorted(pod_plans.items())}
        tasks = {g: {"assigned": len(t.applied), "already": len(t.already), "gone": len(t.gone),
                     "failed": len(t.failed)} for g, t in sorted(rnd.tasks.items())}
        numbers = {"host": host.numbers(), "classes": classes, "pods": pods, "tasks": tasks, "removed": rnd.removed,
                   "reset": rnd.reset, **counts, "errors": rnd.errors, "problems": rnd.problems}
        parts = [", ".join(f"{p.group} L3 {p.start}-{p.end}% MB {p.mba_percent}%" for p in plans) or "no class on"]
        if pod_plans:
            parts.append(f"{len(pod_plans)} pod group{'s' if len(pod_plans) != 1 else ''}")
        if rnd.removed:
            parts.append(f"removed {_list(rnd.removed)}")
        if rnd.reset:
            parts.append(f"reset {_list(rnd.reset)}")
        moved = sum(len(t.applied) for t in rnd.tasks.values())
        parts.append(f"{counts['writes']} schemata writes, {moved} tasks moved{_tail(rnd)}")
        parts += rnd.errors
        if rnd.errors:
            action = Action.ERROR
        elif counts["writes"] or moved or rnd.removed or rnd.reset:
            action = Action.RECONCILE
        else:
            action = Action.NONE
        return self._decide(action, "resctrl: " + "; ".join(parts), numbers, at=rnd.now)


_DONE = (Outcome.WRITTEN, Outcome.INTENDED)
"""Outcomes of a write made, or in shadow mode decided and not made: the round decides the same on either."""


def _counts(rnd: _Round) -> dict[str, int]:
    counted = Counter(r.outcome for r in rnd.results)
    return {"writes": counted[Outcome.WRITTEN] + counted[Outcome.INTENDED],
            "unchanged": counted[Outcome.SKIPPED_UNCHANGED],
            "failed_writes": sum(n for o, n in counted.items() if o not in
                                 (*_DONE, Outcome.SKIPPED_UNCHANGED, Outcome.GONE))}


def _list(groups: Iterable[str]) -> str:
    names = list(groups)
    return ", ".join(names) if names else "nothing"


def _tail(rnd: _Round) -> str:
    bad = [f"{r.group or '(root)'}: {r.outcome.value} ({r.error})" for r in rnd.results
           if not r.ok and r.outcome is not Outcome.GONE]
    issues = bad + rnd.problems
    return "; problems: " + "; ".join(issues) if issues else ""
