"""Memory eviction (Koordinator ``qosmanager/plugins/memoryevict``): when memory usage reaches
``memoryEvictThresholdPercent`` of capacity, evict pods until capacity x (usage% - lower%) is released.

Triggers, run in Koordinator's order and sharing one release account:

* ``BEMemoryEvict``: BE pods, lowest spec.priority first, then the largest memory usage.
* ``MemoryAllocatableEvict`` (between the two, as upstream, and independent of the usage threshold): the
  batch-memory / mid-memory requested by pods under ``allocatableEvictPriorityThreshold`` exceeds
  ``memoryAllocatableEvictThresholdPercent`` of the Node's allocatable (sent by the companion): release request
  down to ``memoryAllocatableEvictLowerPercent`` (:mod:`koordlet.qosmanager.allocevict`).
* ``MemoryEvict``: pods of any class labelled ``koordinator.sh/eviction-enabled=true`` whose priority is
  at most ``evictEnabledPriorityThreshold``, ordered by eviction-priority annotation, priority,
  ``koordinator.sh/priority`` label, then the largest usage.

What capacity and usage mean is ``qos.memoryEvictBase``: ``node`` (MemTotal and the node's usage, as
Koordinator) or ``kubepods`` (the kubepods cgroup's memory limit and the sum of its pods' usage), for a
host whose pods live under a memory-limited parent where node-wide numbers never cross the threshold.

A round a pressure trigger woke (:mod:`koordlet.qosmanager.pressure`) reads usage from the cgroup files at once
instead of the metric cache, whose pod samples may be a memory interval old.

A round with an eviction starts the cooldown (``memory_evict_cool_time_seconds``, 4 s); a round whose
evictions all failed does not, so the next round retries."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.types import ResourceThresholdStrategy
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.qosmanager import allocevict, evictpick, helpers
from koordlet.qosmanager.evictpick import USED, Candidate, EvictionStrategy, MakeCandidate, Task, fmt_bytes
from koordlet.qosmanager.framework import Action, Decision, Options
from koordlet.qosmanager.plugins.memoryevict import calc
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import kubepods_dir, under_parent
from koordlet.system.resources import MEMORY_LIMIT

log = logging.getLogger(__name__)

NAME = "memoryevict"
REASON = "EvictPodByNodeMemoryUsage"
"""Koordinator's reason constant for both triggers (``helpers.EvictPodByNodeMemoryUsage``)."""
NODE_BASE = "node"
KUBEPODS_BASE = "kubepods"


@dataclass
class AllocatablePlan:
    """MemoryAllocatableEvict's part of a round: what to release (None: nothing, ``notes`` say why; ``reason``
    names a missing input or bad config)."""

    release: allocevict.Release | None = None
    priority_threshold: int = 0
    notes: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def tasks(self) -> bool:
        return self.release is not None

    def tasks_for(self, pods: Sequence[PodMeta], used: Mapping[str, float], candidate: MakeCandidate,
                  ignored: list[str]) -> list[Task]:
        if self.release is None:
            return []
        return allocevict.tasks(allocevict.MEMORY, gates.MEMORY_ALLOCATABLE_EVICT, self.release, pods, used,
                                self.priority_threshold, candidate, ignored)


@dataclass(frozen=True)
class Unavailable:
    """Why the base cannot be had this round: ``reason`` a stable name (the skip streak's), ``text`` the
    sentence with this round's details."""

    reason: str
    text: str


@dataclass(frozen=True)
class Base:
    """What the threshold is compared with: ``capacity`` and ``used`` bytes, and where they came from."""

    name: str
    capacity: int
    used: float
    source: str


class MemoryEvict(EvictionStrategy):
    """The ``memoryevict`` strategy."""

    name = NAME
    be_gate = gates.BE_MEMORY_EVICT
    usage_gate = gates.MEMORY_EVICT
    allocatable_gate = gates.MEMORY_ALLOCATABLE_EVICT
    off_summary = "memory eviction disabled (evicted pods are not brought back)"

    def __init__(self, options: Options) -> None:
        super().__init__(options, log, interval_seconds=options.config.memory_evict_interval_seconds,
                         cool_seconds=options.config.memory_evict_cool_time_seconds, cool_from_start=False)
        self._fresh: helpers.FreshMemory | None = None
        """The files a woken round reads (opened at the first one)."""

    def _round(self, slo: NodeSLOSpec, now: float) -> Decision:
        threshold = slo.resource_used_threshold_with_be or ResourceThresholdStrategy()
        if not self.gate(gates.MEMORY_ALLOCATABLE_EVICT):
            return self._usage_round(threshold, now, None)
        pods = list(self.options.informer.pods())
        plan = self._allocatable_plan(threshold, pods)
        if not (self.gate(gates.BE_MEMORY_EVICT) or self.gate(gates.MEMORY_EVICT)):
            return self._allocatable_only(plan, pods, now)
        return self._usage_round(threshold, now, plan)

    def _early(self, plan: AllocatablePlan | None, pods: Sequence[PodMeta], now: float, action: Action, summary: str,
               numbers: dict[str, Any], reason: str = "") -> Decision:
        """The usage triggers cannot act this round (bad config, no sample, below the threshold): the
        allocatable trigger still may, as upstream runs each trigger on its own."""
        if plan is not None and plan.tasks:
            plan.notes.append(summary)
            return self._allocatable_only(plan, pods, now)
        return self._decide(action, summary, numbers, reason=reason)

    def _usage_round(self, threshold: ResourceThresholdStrategy, now: float, plan: AllocatablePlan | None
                     ) -> Decision:
        pods = list(self.options.informer.pods())
        threshold_pct = (threshold.memory_evict_threshold_percent
                         if threshold.memory_evict_threshold_percent is not None
                         else calc.DEFAULT_THRESHOLD_PERCENT)
        lower_pct = calc.lower_percent(threshold_pct, threshold.memory_evict_lower_percent)
        numbers: dict[str, Any] = {"threshold_percent": threshold_pct, "lower_percent": lower_pct}
        if lower_pct >= threshold_pct:
            return self._early(plan, pods, now, Action.SKIP, f"memoryEvictLowerPercent {lower_pct} must be below "
                               f"memoryEvictThresholdPercent {threshold_pct}", numbers, reason="invalid_config")
        kubepods = self.options.config.memory_evict_base == KUBEPODS_BASE
        # Below the threshold (most rounds) the node base needs no per-pod lookup.
        usage = self._usage(pods if kubepods else [])
        base = self._kubepods_base(pods, usage) if kubepods else self._node_base(usage)
        if isinstance(base, Unavailable):
            return self._early(plan, pods, now, Action.SKIP, base.text, numbers, reason=base.reason)
        usage_pct = calc.usage_percent(base.used, base.capacity)
        numbers.update(base=base.name, source=base.source, capacity_bytes=base.capacity, used_bytes=base.used,
                       usage_percent=usage_pct)
        what = f"{base.name} memory {usage_pct}%"
        if usage_pct < threshold_pct:
            return self._early(plan, pods, now, Action.NONE, f"{what} < {threshold_pct}%: nothing to evict", numbers)
        if not kubepods:
            usage = self._usage(pods)
        needed = calc.release_bytes(base.capacity, usage_pct, lower_pct)
        numbers["need_release_bytes"] = needed

        def candidate(meta: PodMeta, priority: int) -> Candidate:
            return Candidate(meta, priority, {USED: usage.pods.get(meta.uid, 0.0),
                                              **allocevict.amounts(meta.pod, allocevict.MEMORY)})

        message = (f"{what} >= threshold {threshold_pct}%: releasing {fmt_bytes(needed)} to get back to "
                   f"{lower_pct}%")
        tasks, notes = self._tasks(threshold, pods, usage.pods, needed, message, candidate, plan)
        outcome = self._evict(tasks, pods, candidate, now)
        return self._report(what, threshold_pct, needed, outcome, tasks, notes, numbers)

    # ---------------------------------------------------------------------------------------- inputs

    def _usage(self, pods: Sequence[PodMeta]) -> helpers.PodUsage:
        """The metric cache's latest samples; in a woken round the files read now (the samples may be a memory
        interval old, and the trigger says usage just changed)."""
        if self.woken:
            if self._fresh is None:
                self._fresh = helpers.FreshMemory(self.options)
            return self._fresh.usage(pods)
        return helpers.memory_usage(self.options, pods)

    def _node_base(self, usage: helpers.PodUsage) -> Base | Unavailable:
        """MemTotal and the node's usage, or why they are unavailable."""
        capacity = self.options.informer.node().memory_total_bytes
        if capacity <= 0:
            return Unavailable("no_memory_capacity", f"node memory capacity {capacity} is not positive")
        if usage.node is None:
            return Unavailable("no_node_sample", "no fresh node memory sample (is the NodeResource collector running?)")
        return Base(NODE_BASE, capacity, usage.node, "MemTotal")

    def _kubepods_base(self, pods: Sequence[PodMeta], usage: helpers.PodUsage) -> Base | Unavailable:
        """The kubepods cgroup's limit and its pods' summed usage, or why they are unavailable."""
        root = under_parent(self.options.kube_parent, kubepods_dir(self.options.driver))
        reader = self.options.reader
        try:
            path = reader.path(MEMORY_LIMIT, root)
            limit = int(reader.read(MEMORY_LIMIT, root))
        except (KoordletError, OSError, ValueError) as exc:
            return Unavailable("kubepods_limit_unreadable", f"cannot read the kubepods memory limit in {root}: {exc}")
        if limit <= 0:
            return Unavailable("kubepods_unlimited", f"kubepods memory limit in {path} is "
                               f"{'unlimited' if limit == -1 else limit}: nothing to compare with (use "
                               "memory_evict_base=node)")
        inside = [m for m in pods if m.cgroup_dir == root or m.cgroup_dir.startswith(root + "/")]
        sampled = [usage.pods[m.uid] for m in inside if m.uid in usage.pods]
        if inside and not sampled:
            return Unavailable("no_pod_sample", f"no fresh memory sample of any of the {len(inside)} pod(s) under "
                                                f"{root}")
        return Base(KUBEPODS_BASE, limit, float(sum(sampled)), path)

    def _tasks(self, threshold: ResourceThresholdStrategy, pods: Sequence[PodMeta], used: Mapping[str, float],
               needed: int, message: str, candidate: MakeCandidate, plan: AllocatablePlan | None = None
               ) -> tuple[list[Task], list[str]]:
        tasks: list[Task] = []
        notes: list[str] = []
        if self.gate(gates.BE_MEMORY_EVICT):
            be = evictpick.be_victims(pods, gates.BE_MEMORY_EVICT, candidate, notes)
            # Koordinator: priority, then usage (pods without a sample last), then name.
            be.sort(key=lambda c: (c.priority, -c.amounts[USED], c.key))
            tasks.append(Task(gates.BE_MEMORY_EVICT, REASON, USED, needed, be, message))
        if plan is not None:
            notes.extend(plan.notes)
            tasks.extend(plan.tasks_for(pods, used, candidate, notes))
        if self.gate(gates.MEMORY_EVICT):
            limit = threshold.evict_enabled_priority_threshold
            if limit is None:
                notes.append(f"{gates.MEMORY_EVICT} skipped: evictEnabledPriorityThreshold is not set")
            else:
                victims = evictpick.usage_victims(pods, used, limit, gates.MEMORY_EVICT, candidate, notes)
                tasks.append(Task(gates.MEMORY_EVICT, REASON, USED, needed, victims, message))
        return tasks, notes

    # ---------------------------------------------------------------------------------------- MemoryAllocatableEvict

    def _allocatable_plan(self, threshold: ResourceThresholdStrategy, pods: Sequence[PodMeta]) -> AllocatablePlan:
        gate = gates.MEMORY_ALLOCATABLE_EVICT
        pct = threshold.memory_allocatable_evict_threshold_percent
        lower = threshold.memory_allocatable_evict_lower_percent
        limit = threshold.allocatable_evict_priority_threshold
        error = allocevict.config_error(allocevict.MEMORY, pct, lower, limit)
        if error is not None:
            return AllocatablePlan(notes=[f"{gate}: invalid config: {error}"], reason="allocatable_invalid_config")
        assert pct is not None and lower is not None and limit is not None
        node = self.options.informer.kube_node()
        if node is None:
            return AllocatablePlan(notes=[f"{gate}: the companion has not sent the Node's allocatable"],
                                   reason="allocatable_no_node")
        release = allocevict.release(allocevict.MEMORY, pods, node, pct, lower, limit)
        numbers = {"allocatable_requested": release.requested, "allocatable": release.allocatable,
                   "allocatable_release": release.release, "allocatable_threshold_percent": pct,
                   "allocatable_lower_percent": lower, "allocatable_evict_priority_threshold": limit}
        if not release.release:
            shares = ", ".join(f"{r} {q / a:.0%}" for r, q in release.requested.items()
                               if (a := release.allocatable.get(r))) or "nothing requested"
            return AllocatablePlan(notes=[f"{gate}: requested of allocatable {shares}, not above {pct}%"],
                                   numbers=numbers)
        return AllocatablePlan(release=release, priority_threshold=limit, numbers=numbers)

    def _allocatable_only(self, plan: AllocatablePlan, pods: Sequence[PodMeta], now: float) -> Decision:
        """A round where only MemoryAllocatableEvict acts (the usage triggers off, or unable to run)."""
        numbers: dict[str, Any] = dict(plan.numbers)
        if plan.release is None:
            summary = "; ".join(plan.notes)
            return self._decide(Action.SKIP if plan.reason else Action.NONE, summary, numbers, reason=plan.reason)
        usage = helpers.memory_usage(self.options, pods)

        def candidate(meta: PodMeta, priority: int) -> Candidate:
            return Candidate(meta, priority, {USED: usage.pods.get(meta.uid, 0.0),
                                              **allocevict.amounts(meta.pod, allocevict.MEMORY)})

        notes: list[str] = list(plan.notes)
        tasks = plan.tasks_for(pods, usage.pods, candidate, notes)
        outcome = self._evict(tasks, pods, candidate, now)
        heads = "; ".join(t.message for t in tasks)
        numbers.update(pending_pods=evictpick.keys(outcome.pending), released=dict(outcome.released),
                       triggers=[t.feature for t in tasks], ignored=notes,
                       evicted=[{"pod": c.key, "request_bytes": c.amounts.get(t.target, 0.0), "priority": c.priority,
                                 "trigger": t.feature} for t, c in outcome.evicted],
                       failed=[c.key for _, c in outcome.failed])
        failed = f"; eviction failed for {', '.join(c.key for _, c in outcome.failed)}" if outcome.failed else ""
        short = [t for t in tasks if outcome.short(t) > 0]
        if outcome.evicted:
            victims = ", ".join(f"{c.key} (request {fmt_bytes(c.amounts.get(t.target, 0.0))}, priority {c.priority})"
                                for t, c in outcome.evicted)
            lack = "".join(f"; {t.target} still {fmt_bytes(outcome.short(t))} short" for t in short)
            return self._decide(Action.EVICT, f"{heads}: evicted {victims}{lack}{failed}", numbers)
        if not short:
            return self._decide(Action.NONE, f"{heads}: covered by {len(outcome.pending)} pending eviction(s)",
                                numbers)
        if outcome.failed:
            return self._decide(Action.FAILED, f"{heads}: no eviction launched{failed}", numbers)
        return self._decide(Action.NONE, f"{heads}: no pod left to evict", numbers)

    # ---------------------------------------------------------------------------------------- output

    def _report(self, what: str, threshold_pct: int, needed: int, outcome: evictpick.Outcome, tasks: list[Task],
                notes: list[str], numbers: dict[str, Any]) -> Decision:
        pending_bytes = sum(c.amounts[USED] for c in outcome.pending)
        released = outcome.released.get(USED, 0.0)
        numbers.update(
            pending_pods=evictpick.keys(outcome.pending), pending_released_bytes=pending_bytes,
            released_bytes=released, candidates=sum(len(t.candidates) for t in tasks),
            triggers=[t.feature for t in tasks],
            evicted=[{"pod": c.key, "usage_bytes": c.amounts[USED], "priority": c.priority, "trigger": t.feature}
                     for t, c in outcome.evicted],
            failed=[c.key for _, c in outcome.failed], ignored=notes)
        head = "; ".join([f"{what} >= {threshold_pct}%", *(t.message for t in tasks if t.target != USED)])
        pending = f"{len(outcome.pending)} pending"
        failed = outcome.failure_note()
        short = max(needed - released, 0.0)
        if outcome.evicted:
            victims = ", ".join(f"{c.key} ({fmt_bytes(c.amounts[USED])}, priority {c.priority})"
                                for _, c in outcome.evicted)
            lack = f"; still {fmt_bytes(short)} short" if short > 0 else ""
            summary = f"{head}: evicted {victims} to release {fmt_bytes(needed)}; {pending}{lack}{failed}"
            return self._decide(Action.EVICT, summary, numbers)
        if short <= 0:
            summary = (f"{head}: the {fmt_bytes(needed)} to release is covered by {pending} eviction(s) "
                       f"({', '.join(evictpick.keys(outcome.pending))}: {fmt_bytes(pending_bytes)})")
            return self._decide(Action.NONE, summary, numbers)
        if outcome.failed:
            return self._decide(Action.FAILED, f"{head}: {fmt_bytes(short)} to release, no eviction launched{failed}; "
                                          f"{pending}", numbers)
        if not tasks:
            return self._decide(Action.SKIP, f"{head}: no trigger can run ({'; '.join(notes)})", numbers,
                                reason="no_trigger")
        return self._decide(Action.NONE, f"{head}: {fmt_bytes(short)} to release but no pod left to evict "
                                    f"({'/'.join(t.feature for t in tasks)}); {pending}", numbers)
