"""CPU eviction (Koordinator ``qosmanager/plugins/cpuevict``).  Triggers, run in Koordinator's order and
sharing one release account per measure:

* ``BECPUEvict`` (policy ``evictByRealLimit``): BE's real CPU limit over its batch-cpu request, averaged
  over ``cpuEvictTimeWindowSeconds``, is at most ``cpuEvictBESatisfactionLowerPercent`` while BE uses at
  least ``cpuEvictBEUsageThresholdPercent`` (90) of that limit, on average and now: release
  request x (upper% - satisfaction) of batch-cpu request, the smaller of the window's and the current
  figure.  Victims: BE pods, lowest spec.priority first, then the highest usage / request.  An evicted pod
  releases its batch-cpu request.
  With ``cpuEvictPolicy: evictByAllocatable`` the BE limit in both figures is the Node's
  ``kubernetes.io/batch-cpu`` allocatable instead (zero counts as 1m, as upstream; unknown: no eviction).
* ``CPUAllocatableEvict``: the batch-cpu / mid-cpu requested by pods under ``allocatableEvictPriorityThreshold``
  exceeds ``cpuAllocatableEvictThresholdPercent`` of the Node's allocatable: release down to
  ``cpuAllocatableEvictLowerPercent`` (:mod:`koordlet.qosmanager.allocevict`).
* ``CPUEvict``: the node's CPU usage averaged over the window is at least ``cpuEvictThresholdPercent``:
  release capacity x (usage% - lower%) (lower defaults to threshold - 2) of usage from pods labelled
  ``koordinator.sh/eviction-enabled=true`` with priority at most ``evictEnabledPriorityThreshold``,
  ordered by eviction-priority annotation, priority, ``koordinator.sh/priority`` label, then usage.

The Node's allocatable comes from the companion alongside NodeSLO (``StatesInformer.kube_node()``); until it
has sent one, both allocatable uses skip with that reason.  The cooldown (``cpu_evict_cool_time_seconds``,
20 s) also runs from start-up, as Koordinator's does (its lastEvictTime starts at New()): the averaging window
fills before a first eviction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.extension import RESOURCE_BATCH_CPU
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.types import ResourceThresholdStrategy
from koordlet.config import gates
from koordlet.metriccache import names
from koordlet.qosmanager import allocevict, evictpick, helpers
from koordlet.qosmanager.evictpick import REQUEST, USED, Candidate, EvictionStrategy, MakeCandidate, Task
from koordlet.qosmanager.framework import Action, Decision, Options
from koordlet.qosmanager.plugins.cpuevict import calc
from koordlet.statesinformer.framework import PodMeta

log = logging.getLogger(__name__)

NAME = "cpuevict"
BE_REASON = "EvictPodByBECPUSatisfaction"
"""Koordinator's reason constant (``helpers.EvictPodByBECPUSatisfaction``)."""
USAGE_REASON = "EvictPodByNodeCPUUsage"
"""Named after Koordinator's memory counterpart; Koordinator itself reports ``evicted`` for CPUEvict."""
BY_ALLOCATABLE = "evictByAllocatable"
MIN_BATCH_ALLOCATABLE_MILLI = 1
"""``defaultMinAllocatableBatchMilliCPU``: a zero batch-cpu allocatable counts as this."""


@dataclass
class Plan:
    """What the triggers found: tasks to run, and why the others did nothing."""

    tasks: list[Task] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Why a trigger did not act: below its threshold, or (``missing``) invalid config or missing inputs."""
    missing: list[str] = field(default_factory=list)
    """Stable names of the reasons a trigger lacked its config or inputs (the round's skip reason)."""
    ignored: list[str] = field(default_factory=list)
    """Pods an eviction-policy annotation keeps out, and why."""
    numbers: dict[str, Any] = field(default_factory=dict)

    def skip(self, reason: str, note: str) -> None:
        self.notes.append(note)
        self.missing.append(reason)


class CPUEvict(EvictionStrategy):
    """The ``cpuevict`` strategy."""

    name = NAME
    be_gate = gates.BE_CPU_EVICT
    usage_gate = gates.CPU_EVICT
    allocatable_gate = gates.CPU_ALLOCATABLE_EVICT
    off_summary = "CPU eviction disabled (evicted pods are not brought back)"

    def __init__(self, options: Options) -> None:
        # Koordinator's lastEvictTime starts at New(): the averaging window fills before a first eviction.
        super().__init__(options, log, interval_seconds=options.config.cpu_evict_interval_seconds,
                         cool_seconds=options.config.cpu_evict_cool_time_seconds, cool_from_start=True)

    def _round(self, slo: NodeSLOSpec, now: float) -> Decision:
        capacity_milli = self.options.informer.node().cpu_count * 1000
        if capacity_milli <= 0:
            return self._decide(Action.SKIP, f"node CPU capacity {capacity_milli}m is not positive",
                                reason="no_cpu_capacity")
        threshold = slo.resource_used_threshold_with_be or ResourceThresholdStrategy()
        pods = list(self.options.informer.pods())
        measured: list[Mapping[str, float]] = []

        def used() -> Mapping[str, float]:
            """Milli-cores per pod UID, looked up once and only by a trigger that acts."""
            if not measured:
                usage = helpers.cpu_usage(self.options, pods)
                measured.append({uid: cores * 1000 for uid, cores in usage.pods.items()})
            return measured[0]

        window = calc.window_seconds(self.options.collector.res_used_interval_seconds,
                                     threshold.cpu_evict_time_window_seconds)
        plan = Plan(numbers={"window_seconds": window, "capacity_milli": capacity_milli})

        def candidate(meta: PodMeta, priority: int) -> Candidate:
            return Candidate(meta, priority, {REQUEST: float(batch_request_milli(meta)),
                                              USED: used().get(meta.uid, 0.0),
                                              **allocevict.amounts(meta.pod, allocevict.CPU)})

        # Koordinator's order: BECPUEvict, CPUAllocatableEvict, CPUEvict; releases add up across them.
        if self.gate(gates.BE_CPU_EVICT):
            self._plan_be(plan, threshold, window, pods, candidate)
        if self.gate(gates.CPU_ALLOCATABLE_EVICT):
            self._plan_allocatable(plan, threshold, pods, used, candidate)
        if self.gate(gates.CPU_EVICT):
            self._plan_usage(plan, threshold, window, capacity_milli, pods, used, candidate)
        if not plan.tasks:
            summary = "; ".join(plan.notes) or "no CPU eviction trigger enabled"
            return self._decide(Action.SKIP if plan.missing else Action.NONE, summary, plan.numbers,
                                reason="+".join(plan.missing))
        return self._report(plan, self._evict(plan.tasks, pods, candidate, now))

    # ---------------------------------------------------------------------------------------- BECPUEvict

    def _plan_be(self, plan: Plan, threshold: ResourceThresholdStrategy, window: int, pods: Sequence[PodMeta],
                 candidate: MakeCandidate) -> None:
        lower = threshold.cpu_evict_be_satisfaction_lower_percent
        upper = threshold.cpu_evict_be_satisfaction_upper_percent
        error = calc.satisfaction_config_error(lower, upper)
        if error is not None:
            plan.skip("be_invalid_config", f"{gates.BE_CPU_EVICT}: invalid config: {error}")
            return
        assert lower is not None and upper is not None
        allocatable: float | None = None
        if threshold.cpu_evict_policy == BY_ALLOCATABLE:
            allocatable = self._be_allocatable_milli()
            if allocatable is None:
                plan.skip("be_no_batch_allocatable", f"{gates.BE_CPU_EVICT}: policy {BY_ALLOCATABLE} needs the "
                          "Node's kubernetes.io/batch-cpu allocatable, which the companion has not sent")
                return
            plan.numbers["be_batch_allocatable_milli"] = allocatable
        interval = self.options.collector.res_used_interval_seconds
        cache = self.options.cache
        series = (names.BE_CPU_USAGE, names.BE_CPU_REQUEST, names.BE_CPU_LIMIT)
        aggregates = [cache.aggregate(name, (), window) for name in series]
        count = min(a.count if a is not None else 0 for a in aggregates)
        plan.numbers.update(be_samples=count, satisfaction_lower_percent=lower, satisfaction_upper_percent=upper,
                            be_usage_threshold_percent=threshold.cpu_evict_be_usage_threshold_percent
                            or calc.DEFAULT_BE_USAGE_THRESHOLD_PERCENT)
        if not calc.enough_samples(window, interval, count):
            plan.skip("be_not_enough_samples",
                      f"{gates.BE_CPU_EVICT}: not enough BE samples: {count} in the {window} s window")
            return
        usage, request, limit = (a.avg * 1000 if a is not None else 0.0 for a in aggregates)
        if allocatable is not None:  # evictByAllocatable: satisfaction against what the Node offers BE
            limit = allocatable
        rate = calc.satisfaction(request, limit)
        plan.numbers.update(be_usage_avg_milli=usage, be_request_avg_milli=request, be_limit_avg_milli=limit,
                            be_satisfaction_avg=rate)
        refusal = calc.be_usage_refusal(usage, limit, threshold.cpu_evict_be_usage_threshold_percent)
        if refusal is not None:
            plan.notes.append(f"{gates.BE_CPU_EVICT}: {refusal} (window average)")
            return
        release = calc.release_by_satisfaction(request, limit, lower, upper)
        plan.numbers["release_by_avg_milli"] = release
        if release <= 0:
            plan.notes.append(f"{gates.BE_CPU_EVICT}: BE satisfaction {_pct(rate)} above {lower}%" if rate is not None
                              else f"{gates.BE_CPU_EVICT}: BE requests no batch-cpu")
            return
        current = [cache.latest(name, (), 2 * interval) for name in series]
        if any(c is None for c in current):
            plan.skip("be_no_current_sample",
                      f"{gates.BE_CPU_EVICT}: no current BE sample (is the beresource collector running?)")
            return
        now_usage, now_request, now_limit = (c[1] * 1000 if c is not None else 0.0 for c in current)
        if allocatable is not None:
            now_limit = allocatable
        plan.numbers.update(be_usage_milli=now_usage, be_request_milli=now_request, be_limit_milli=now_limit)
        refusal = calc.be_usage_refusal(now_usage, now_limit, threshold.cpu_evict_be_usage_threshold_percent)
        if refusal is not None:
            plan.notes.append(f"{gates.BE_CPU_EVICT}: {refusal} (now)")
            return
        if (now_request, now_limit) != (request, limit):
            by_now = calc.release_by_satisfaction(now_request, now_limit, lower, upper)
            plan.numbers["release_by_current_milli"] = by_now
            if by_now <= 0:
                now_rate = _pct(calc.satisfaction(now_request, now_limit))
                plan.notes.append(f"{gates.BE_CPU_EVICT}: BE satisfaction now {now_rate} above {lower}%")
                return
            release = min(release, by_now)
        plan.numbers["be_need_release_milli"] = release
        victims = evictpick.be_victims(pods, gates.BE_CPU_EVICT, candidate, plan.ignored)
        # Koordinator: lowest priority first, then the highest usage relative to request.
        victims.sort(key=lambda c: (c.priority, -_usage_ratio(c), c.key))
        what = "batch-cpu allocatable" if allocatable is not None else "limit"
        head = (f"BE CPU satisfaction {_pct(rate)} <= {lower}% (BE uses {usage / limit:.0%} of its "
                f"{limit / 1000:.2f}-core {what})")
        plan.heads.append(head)
        plan.tasks.append(Task(gates.BE_CPU_EVICT, BE_REASON, REQUEST, release, victims,
                               f"{head}: releasing {release}m of batch-cpu request to reach {upper}%"))

    def _be_allocatable_milli(self) -> float | None:
        """``getBEMilliAllocatable``: the Node's batch-cpu allocatable in milli-cores, None when unknown; zero
        (high-priority usage took everything) counts as 1m so the satisfaction is still computed."""
        node = self.options.informer.kube_node()
        value = node.allocatable_value(RESOURCE_BATCH_CPU) if node is not None else None
        if value is None or value < 0:
            return None
        return float(value) if value > 0 else float(MIN_BATCH_ALLOCATABLE_MILLI)

    # ---------------------------------------------------------------------------------------- CPUAllocatableEvict

    def _plan_allocatable(self, plan: Plan, threshold: ResourceThresholdStrategy, pods: Sequence[PodMeta],
                          pod_cpu: Callable[[], Mapping[str, float]], candidate: MakeCandidate) -> None:
        gate = gates.CPU_ALLOCATABLE_EVICT
        pct, lower = threshold.cpu_allocatable_evict_threshold_percent, threshold.cpu_allocatable_evict_lower_percent
        limit = threshold.allocatable_evict_priority_threshold
        error = allocevict.config_error(allocevict.CPU, pct, lower, limit)
        if error is not None:
            plan.skip("allocatable_invalid_config", f"{gate}: invalid config: {error}")
            return
        assert pct is not None and lower is not None and limit is not None
        node = self.options.informer.kube_node()
        if node is None:
            plan.skip("allocatable_no_node", f"{gate}: the companion has not sent the Node's allocatable")
            return
        release = allocevict.release(allocevict.CPU, pods, node, pct, lower, limit)
        plan.numbers.update(allocatable_requested=release.requested, allocatable=release.allocatable,
                            allocatable_release=release.release, allocatable_threshold_percent=pct,
                            allocatable_lower_percent=lower, allocatable_evict_priority_threshold=limit)
        if not release.release:
            shares = ", ".join(f"{r} {q / a:.0%}" for r, q in release.requested.items()
                               if (a := release.allocatable.get(r))) or "nothing requested"
            plan.notes.append(f"{gate}: requested of allocatable {shares}, not above {pct}%")
            return
        tasks = allocevict.tasks(allocevict.CPU, gate, release, pods, pod_cpu(), limit, candidate, plan.ignored)
        plan.heads.extend(t.message.split(":")[0] for t in tasks)
        plan.tasks.extend(tasks)

    # ---------------------------------------------------------------------------------------- CPUEvict

    def _plan_usage(self, plan: Plan, threshold: ResourceThresholdStrategy, window: int, capacity_milli: int,
                    pods: Sequence[PodMeta], pod_cpu: Callable[[], Mapping[str, float]],
                    candidate: MakeCandidate) -> None:
        pct = threshold.cpu_evict_threshold_percent
        limit = threshold.evict_enabled_priority_threshold
        error = calc.usage_config_error(pct, threshold.cpu_evict_lower_percent, limit)
        if error is not None:
            plan.skip("usage_invalid_config", f"{gates.CPU_EVICT}: invalid config: {error}")
            return
        assert pct is not None and limit is not None
        lower = calc.lower_percent(pct, threshold.cpu_evict_lower_percent)
        node = self.options.cache.aggregate(names.NODE_CPU_USAGE, (), window)
        if node is None:
            plan.skip("usage_no_node_sample", f"{gates.CPU_EVICT}: no node CPU sample in the {window} s window")
            return
        usage_pct = calc.usage_percent(node.avg, capacity_milli)
        plan.numbers.update(node_cpu_avg_cores=node.avg, node_cpu_usage_percent=usage_pct, cpu_threshold_percent=pct,
                            cpu_lower_percent=lower, evict_enabled_priority_threshold=limit)
        if usage_pct < pct:
            plan.notes.append(f"{gates.CPU_EVICT}: node CPU {usage_pct}% < {pct}%")
            return
        release = calc.release_by_usage(capacity_milli, usage_pct, lower)
        plan.numbers["usage_need_release_milli"] = release
        victims = evictpick.usage_victims(pods, pod_cpu(), limit, gates.CPU_EVICT, candidate, plan.ignored)
        head = f"node CPU {usage_pct}% >= {pct}%"
        plan.heads.append(head)
        plan.tasks.append(Task(gates.CPU_EVICT, USAGE_REASON, USED, release, victims,
                               f"{head}: releasing {release}m of usage to get back to {lower}%"))

    # ---------------------------------------------------------------------------------------- output

    def _report(self, plan: Plan, outcome: evictpick.Outcome) -> Decision:
        numbers = plan.numbers
        numbers.update(
            pending_pods=evictpick.keys(outcome.pending), released_request_milli=outcome.released.get(REQUEST, 0.0),
            released_used_milli=outcome.released.get(USED, 0.0), released=dict(outcome.released),
            triggers=[t.feature for t in plan.tasks],
            evicted=[{"pod": c.key, "request_milli": c.amounts[REQUEST], "used_milli": c.amounts[USED],
                      "priority": c.priority, "trigger": t.feature} for t, c in outcome.evicted],
            failed=[c.key for _, c in outcome.failed], ignored=plan.ignored, notes=plan.notes)
        head = "; ".join(plan.heads)
        needs = ", ".join(f"{t.needed:.0f}m of {_measure_name(t.target)}" for t in plan.tasks)
        pending = f"{len(outcome.pending)} pending"
        failed = outcome.failure_note()
        short = [t for t in plan.tasks if outcome.short(t) > 0]
        if outcome.evicted:
            victims = ", ".join(f"{c.key} (request {c.amounts[REQUEST]:.0f}m, using {c.amounts[USED]:.0f}m, "
                                f"priority {c.priority})" for _, c in outcome.evicted)
            lack = "".join(f"; {t.feature} still {outcome.short(t):.0f}m short" for t in short)
            return self._decide(Action.EVICT, f"{head}: evicted {victims} to release {needs}; {pending}{lack}{failed}",
                                numbers)
        if not short:
            return self._decide(Action.NONE, f"{head}: {needs} to release is covered by {pending} eviction(s) "
                                        f"({', '.join(evictpick.keys(outcome.pending))})", numbers)
        if outcome.failed:
            return self._decide(Action.FAILED, f"{head}: {needs} to release, no eviction launched{failed}; {pending}",
                                numbers)
        return self._decide(Action.NONE, f"{head}: {needs} to release but no pod left to evict; {pending}", numbers)


def batch_request_milli(meta: PodMeta) -> int:
    """The pod's batch-cpu request (Koordinator ``GetContainerBatchMilliCPURequest``, summed)."""
    return sum(max(c.requests.batch_cpu_milli or 0, 0) for c in meta.pod.containers)


def _measure_name(target: str) -> str:
    if target == REQUEST:
        return "batch-cpu request"
    if target == USED:
        return "usage"
    return f"{target.removeprefix('request:').removeprefix('kubernetes.io/')} request"


def _usage_ratio(candidate: Candidate) -> float:
    request = candidate.amounts[REQUEST]
    return candidate.amounts[USED] / request if request > 0 else 0.0


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"
