"""CPU eviction (Koordinator ``qosmanager/plugins/cpuevict``).  Triggers, run in Koordinator's order and
sharing one release account per measure:

* ``BECPUEvict`` (policy ``evictByRealLimit``): BE's real CPU limit over its batch-cpu request, averaged
  over ``cpuEvictTimeWindowSeconds``, is at most ``cpuEvictBESatisfactionLowerPercent`` while BE uses at
  least ``cpuEvictBEUsageThresholdPercent`` (90) of that limit, on average and now: release
  request x (upper% - satisfaction) of batch-cpu request, the smaller of the window's and the current
  figure.  Victims: BE pods, lowest spec.priority first, then the highest usage / request.  An evicted pod
  releases its batch-cpu request.
* ``CPUEvict``: the node's CPU usage averaged over the window is at least ``cpuEvictThresholdPercent``:
  release capacity x (usage% - lower%) (lower defaults to threshold - 2) of usage from pods labelled
  ``koordinator.sh/eviction-enabled=true`` with priority at most ``evictEnabledPriorityThreshold``,
  ordered by eviction-priority annotation, priority, ``koordinator.sh/priority`` label, then usage.

Not implemented: the ``evictByAllocatable`` policy and ``CPUAllocatableEvict``, which need the node's
batch-cpu allocatable from the Kubernetes Node (this koordlet has no Node object); both are skipped with
that reason.  The cooldown (``cpu_evict_cool_time_seconds``, 20 s) also runs from start-up, as
Koordinator's does (its lastEvictTime starts at New()): the averaging window fills before a first
eviction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.types import ResourceThresholdStrategy
from koordlet.metriccache import names
from koordlet.qosmanager import evictpick, helpers
from koordlet.qosmanager.evictpick import REQUEST, USED, Candidate, Task
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins.cpuevict import calc
from koordlet.statesinformer.framework import PodMeta

log = logging.getLogger(__name__)

NAME = "cpuevict"
BE_GATE = "BECPUEvict"
USAGE_GATE = "CPUEvict"
BE_REASON = "EvictPodByBECPUSatisfaction"
"""Koordinator's reason constant (``helpers.EvictPodByBECPUSatisfaction``)."""
USAGE_REASON = "EvictPodByNodeCPUUsage"
"""Named after Koordinator's memory counterpart; Koordinator itself reports ``evicted`` for CPUEvict."""
BY_ALLOCATABLE = "evictByAllocatable"
MakeCandidate = Callable[[PodMeta, int], Candidate]


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


class CPUEvict:
    """The ``cpuevict`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._skips = helpers.SkipLog(NAME, log, options.clock)
        self._failed = helpers.FailedEvictionLog(NAME, log, options.clock)
        self.last_eviction: float = options.clock()
        """Start of the cooldown: construction, then every round that launched an eviction."""

    def enabled(self, slo: NodeSLOSpec) -> bool:
        threshold = slo.resource_used_threshold_with_be
        gates = self.options.gates
        return ((bool(gates.get(BE_GATE, False)) or bool(gates.get(USAGE_GATE, False)))
                and threshold is not None and threshold.enable is True)

    def interval(self) -> float:
        return self.options.config.cpu_evict_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        if not enabled:
            return self._decide("none", "CPU eviction disabled (evicted pods are not brought back)", {})
        now = self.options.clock()
        cool = self.options.config.cpu_evict_cool_time_seconds
        if now - self.last_eviction < cool:
            age = now - self.last_eviction
            return self._decide("none", f"cooling down: last eviction (or start) {age:.1f} s ago, cool time "
                                        f"{cool:g} s", {"last_eviction_age_seconds": age, "cool_time_seconds": cool})
        capacity_milli = self.options.informer.node().cpu_count * 1000
        if capacity_milli <= 0:
            return self._decide("skip", f"node CPU capacity {capacity_milli}m is not positive", {},
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
                                              USED: used().get(meta.uid, 0.0)})

        if self.options.gates.get(BE_GATE, False):
            self._plan_be(plan, threshold, window, pods, candidate)
        if self.options.gates.get(USAGE_GATE, False):
            self._plan_usage(plan, threshold, window, capacity_milli, pods, used, candidate)
        if not plan.tasks:
            summary = "; ".join(plan.notes) or "no CPU eviction trigger enabled"
            return self._decide("skip" if plan.missing else "none", summary, plan.numbers,
                                reason="+".join(plan.missing))
        pending = [candidate(m, m.pod.priority or 0) for m in evictpick.pending_pods(self.options, pods)]
        outcome = evictpick.evict(self.options, plan.tasks, pending)
        if outcome.evicted:
            self.last_eviction = now
        return self._report(plan, outcome)

    # ---------------------------------------------------------------------------------------- BECPUEvict

    def _plan_be(self, plan: Plan, threshold: ResourceThresholdStrategy, window: int, pods: Sequence[PodMeta],
                 candidate: MakeCandidate) -> None:
        lower = threshold.cpu_evict_be_satisfaction_lower_percent
        upper = threshold.cpu_evict_be_satisfaction_upper_percent
        error = calc.satisfaction_config_error(lower, upper)
        if error is not None:
            plan.skip("be_invalid_config", f"{BE_GATE}: invalid config: {error}")
            return
        assert lower is not None and upper is not None
        if threshold.cpu_evict_policy == BY_ALLOCATABLE:
            plan.skip("be_policy_unsupported", f"{BE_GATE}: no policy {BY_ALLOCATABLE}: it needs the node's "
                      "batch-cpu allocatable, which this koordlet has no Kubernetes Node to read")
            return
        interval = self.options.collector.res_used_interval_seconds
        cache = self.options.cache
        series = (names.BE_CPU_USAGE, names.BE_CPU_REQUEST, names.BE_CPU_LIMIT)
        aggregates = [cache.aggregate(name, (), window) for name in series]
        count = min(a.count if a is not None else 0 for a in aggregates)
        plan.numbers.update(be_samples=count, satisfaction_lower_percent=lower, satisfaction_upper_percent=upper,
                            be_usage_threshold_percent=threshold.cpu_evict_be_usage_threshold_percent
                            or calc.DEFAULT_BE_USAGE_THRESHOLD_PERCENT)
        if not calc.enough_samples(window, interval, count):
            plan.skip("be_not_enough_samples", f"{BE_GATE}: not enough BE samples: {count} in the {window} s window")
            return
        usage, request, limit = (a.avg * 1000 if a is not None else 0.0 for a in aggregates)
        rate = calc.satisfaction(request, limit)
        plan.numbers.update(be_usage_avg_milli=usage, be_request_avg_milli=request, be_limit_avg_milli=limit,
                            be_satisfaction_avg=rate)
        refusal = calc.be_usage_refusal(usage, limit, threshold.cpu_evict_be_usage_threshold_percent)
        if refusal is not None:
            plan.notes.append(f"{BE_GATE}: {refusal} (window average)")
            return
        release = calc.release_by_satisfaction(request, limit, lower, upper)
        plan.numbers["release_by_avg_milli"] = release
        if release <= 0:
            plan.notes.append(f"{BE_GATE}: BE satisfaction {_pct(rate)} above {lower}%" if rate is not None
                              else f"{BE_GATE}: BE requests no batch-cpu")
            return
        current = [cache.latest(name, (), 2 * interval) for name in series]
        if any(c is None for c in current):
            plan.skip("be_no_current_sample", f"{BE_GATE}: no current BE sample (is the beresource collector running?)")
            return
        now_usage, now_request, now_limit = (c[1] * 1000 if c is not None else 0.0 for c in current)
        plan.numbers.update(be_usage_milli=now_usage, be_request_milli=now_request, be_limit_milli=now_limit)
        refusal = calc.be_usage_refusal(now_usage, now_limit, threshold.cpu_evict_be_usage_threshold_percent)
        if refusal is not None:
            plan.notes.append(f"{BE_GATE}: {refusal} (now)")
            return
        if (now_request, now_limit) != (request, limit):
            by_now = calc.release_by_satisfaction(now_request, now_limit, lower, upper)
            plan.numbers["release_by_current_milli"] = by_now
            if by_now <= 0:
                plan.notes.append(f"{BE_GATE}: BE satisfaction now {_pct(calc.satisfaction(now_request, now_limit))}"
                                  f" above {lower}%")
                return
            release = min(release, by_now)
        plan.numbers["be_need_release_milli"] = release
        victims = [candidate(m, m.pod.priority or 0) for m in pods if helpers.is_be(m) and evictpick.active(m)
                   and not self._refused(plan, m, BE_GATE)]
        # Koordinator: lowest priority first, then the highest usage relative to request.
        victims.sort(key=lambda c: (c.priority, -_usage_ratio(c), c.key))
        head = (f"BE CPU satisfaction {_pct(rate)} <= {lower}% (BE uses {usage / limit:.0%} of its "
                f"{limit / 1000:.2f}-core limit)")
        plan.heads.append(head)
        plan.tasks.append(Task(BE_GATE, BE_REASON, REQUEST, release, victims,
                               f"{head}: releasing {release}m of batch-cpu request to reach {upper}%"))

    # ---------------------------------------------------------------------------------------- CPUEvict

    def _plan_usage(self, plan: Plan, threshold: ResourceThresholdStrategy, window: int, capacity_milli: int,
                    pods: Sequence[PodMeta], pod_cpu: Callable[[], Mapping[str, float]],
                    candidate: MakeCandidate) -> None:
        pct = threshold.cpu_evict_threshold_percent
        limit = threshold.evict_enabled_priority_threshold
        error = calc.usage_config_error(pct, threshold.cpu_evict_lower_percent, limit)
        if error is not None:
            plan.skip("usage_invalid_config", f"{USAGE_GATE}: invalid config: {error}")
            return
        assert pct is not None and limit is not None
        lower = calc.lower_percent(pct, threshold.cpu_evict_lower_percent)
        node = self.options.cache.aggregate(names.NODE_CPU_USAGE, (), window)
        if node is None:
            plan.skip("usage_no_node_sample", f"{USAGE_GATE}: no node CPU sample in the {window} s window")
            return
        usage_pct = calc.usage_percent(node.avg, capacity_milli)
        plan.numbers.update(node_cpu_avg_cores=node.avg, node_cpu_usage_percent=usage_pct, cpu_threshold_percent=pct,
                            cpu_lower_percent=lower, evict_enabled_priority_threshold=limit)
        if usage_pct < pct:
            plan.notes.append(f"{USAGE_GATE}: node CPU {usage_pct}% < {pct}%")
            return
        release = calc.release_by_usage(capacity_milli, usage_pct, lower)
        plan.numbers["usage_need_release_milli"] = release
        used = pod_cpu()
        chosen: list[tuple[tuple[int, int, int, float, str], Candidate]] = []
        for meta in pods:
            pod = meta.pod
            priority = evictpick.priority_with_default(pod)
            if (not evictpick.active(meta) or priority > limit or not evictpick.eviction_enabled(pod)
                    or meta.uid not in used or self._refused(plan, meta, USAGE_GATE)):
                continue
            c = candidate(meta, priority)
            chosen.append(((evictpick.eviction_priority(pod), priority, evictpick.label_priority(pod, priority),
                            -c.amounts[USED], c.key), c))
        chosen.sort(key=lambda item: item[0])
        head = f"node CPU {usage_pct}% >= {pct}%"
        plan.heads.append(head)
        plan.tasks.append(Task(USAGE_GATE, USAGE_REASON, USED, release, [c for _, c in chosen],
                               f"{head}: releasing {release}m of usage to get back to {lower}%"))

    @staticmethod
    def _refused(plan: Plan, meta: PodMeta, feature: str) -> bool:
        refusal = evictpick.policy_refusal(meta.pod, feature)
        if refusal is not None:
            plan.ignored.append(f"{meta.pod.key}: {refusal}")
        return refusal is not None

    # ---------------------------------------------------------------------------------------- output

    def _report(self, plan: Plan, outcome: evictpick.Outcome) -> Decision:
        numbers = plan.numbers
        numbers.update(
            pending_pods=evictpick.keys(outcome.pending), released_request_milli=outcome.released.get(REQUEST, 0.0),
            released_used_milli=outcome.released.get(USED, 0.0), triggers=[t.feature for t in plan.tasks],
            evicted=[{"pod": c.key, "request_milli": c.amounts[REQUEST], "used_milli": c.amounts[USED],
                      "priority": c.priority, "trigger": t.feature} for t, c in outcome.evicted],
            failed=[c.key for _, c in outcome.failed], ignored=plan.ignored, notes=plan.notes)
        head = "; ".join(plan.heads)
        needs = ", ".join(f"{t.needed:.0f}m of {'batch-cpu request' if t.target == REQUEST else 'usage'}"
                          for t in plan.tasks)
        pending = f"{len(outcome.pending)} pending"
        failed = (f"; eviction failed for {', '.join(c.key for _, c in outcome.failed)}" if outcome.failed
                  else "")
        short = [t for t in plan.tasks if outcome.short(t) > 0]
        if outcome.evicted:
            victims = ", ".join(f"{c.key} (request {c.amounts[REQUEST]:.0f}m, using {c.amounts[USED]:.0f}m, "
                                f"priority {c.priority})" for _, c in outcome.evicted)
            lack = "".join(f"; {t.feature} still {outcome.short(t):.0f}m short" for t in short)
            return self._decide("evict", f"{head}: evicted {victims} to release {needs}; {pending}{lack}{failed}",
                                numbers)
        if not short:
            return self._decide("none", f"{head}: {needs} to release is covered by {pending} eviction(s) "
                                        f"({', '.join(evictpick.keys(outcome.pending))})", numbers)
        if outcome.failed:
            return self._decide("failed", f"{head}: {needs} to release, no eviction launched{failed}; {pending}",
                                numbers)
        return self._decide("none", f"{head}: {needs} to release but no pod left to evict; {pending}", numbers)

    def _decide(self, action: str, summary: str, numbers: dict[str, Any], reason: str | None = None) -> Decision:
        if action == "evict":
            log.warning("cpuevict: %s", summary)
        self._failed.note(action, summary)
        self._skips.note(action, summary, reason)
        return Decision(NAME, self.options.clock(), action, summary, numbers)


def batch_request_milli(meta: PodMeta) -> int:
    """The pod's batch-cpu request (Koordinator ``GetContainerBatchMilliCPURequest``, summed)."""
    return sum(max(c.requests.batch_cpu_milli or 0, 0) for c in meta.pod.containers)


def _usage_ratio(candidate: Candidate) -> float:
    request = candidate.amounts[REQUEST]
    return candidate.amounts[USED] / request if request > 0 else 0.0


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"
