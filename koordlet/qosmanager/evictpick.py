"""Choosing and evicting victims, shared by cpuevict and memoryevict (Koordinator
``qosmanager/plugins/util/evict.go``: ``KillAndEvictPods``, ``IsEvictionPolicyAllowed``; and
``apis/extension``: ``GetPodPriorityValueWithDefault``, ``PodEvictEnabled``, ``GetPodEvictionPriority``).

A strategy builds one :class:`Task` per trigger (BEMemoryEvict, MemoryEvict...): how much must be released,
measured by which amount (a pod's usage or its request), and its candidates in eviction order.
:func:`evict` walks the tasks in order and evicts until each task's amount is released.

Pods evicted earlier and still present (pending, :meth:`Evictions.pending`) count as released *before*
the walk starts and are never picked again: the metric samples still show their usage while the runtime
stops them, and without this every round of the cooldown-free interval would pick one more victim for
the same shortage (Koordinator PR #3137, eviction storms).  Koordinator counts a pending pod only when
its walk reaches it in victim order; counting every pending pod first is stricter: a pending pod sorted
after a not-yet-evicted one still stops that one from being evicted for the same shortage."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.extension import LABEL_EVICTION_ENABLED, PriorityClass, QoSClass
from koordlet.apis.gojson import loads
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.pod import Pod
from koordlet.config import gates
from koordlet.qosmanager.evictor import EvictionUnreachable
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.statesinformer.framework import PodMeta

log = logging.getLogger(__name__)

USED = "used"
"""Release measured by what the pod uses (memory bytes, CPU milli-cores): Koordinator ``podUsed``."""
REQUEST = "request"
"""Release measured by the pod's batch request (milli-cores): Koordinator ``podResourceRequest``."""

LABEL_PRIORITY = "koordinator.sh/priority"
"""Sub-priority within a priority class (Koordinator ``LabelPodPriority``)."""
ANNOTATION_EVICTION_POLICY = "koordinator.sh/eviction-policy"
"""JSON list of the eviction features allowed to evict the pod; absent: all (``AnnotationPodEvictPolicy``)."""
ANNOTATION_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"
"""int32, lower evicted first, before spec.priority (``AnnotationPodEvictionPriority``); absent: 0."""

# Koordinator apis/extension priority_utils.go: Priority{Prod,Mid,Batch,Free}ValueDefault.
CLASS_DEFAULT_PRIORITY = {PriorityClass.PROD: 9500, PriorityClass.MID: 7500, PriorityClass.BATCH: 5500,
                          PriorityClass.FREE: 3500}
_QOS_CLASS = {QoSClass.BE: PriorityClass.BATCH, QoSClass.NONE: PriorityClass.NONE}


def priority_with_default(pod: Pod) -> int:
    """``GetPodPriorityValueWithDefault``: a non-zero spec.priority, else the default of the pod's
    priority class (label or band), else of the class its QoS implies (BE: batch, others: prod)."""
    if pod.priority:
        return pod.priority
    band = pod.priority_class
    if band is PriorityClass.NONE:
        band = _QOS_CLASS.get(pod.qos, PriorityClass.PROD)
    return CLASS_DEFAULT_PRIORITY.get(band, 0)


def eviction_enabled(pod: Pod) -> bool:
    """``PodEvictEnabled``: the usage-based evictions take only pods labelled eviction-enabled=true."""
    return pod.labels.get(LABEL_EVICTION_ENABLED) == "true"


def policy_refusal(pod: Pod, feature: str) -> str | None:
    """Why the pod's eviction-policy annotation keeps ``feature`` from evicting it (None: allowed).
    A garbage annotation refuses every feature, as Koordinator's ``IsEvictionPolicyAllowed`` does."""
    raw = pod.annotations.get(ANNOTATION_EVICTION_POLICY)
    if raw is None:
        return None
    try:
        allowed = loads(raw)
    except ValueError:
        allowed = None
    if not isinstance(allowed, list) or not all(isinstance(p, str) for p in allowed):
        return f"annotation {ANNOTATION_EVICTION_POLICY}={raw!r} is not a JSON list of strings"
    if feature not in allowed:
        return f"annotation {ANNOTATION_EVICTION_POLICY} allows only {', '.join(allowed) or 'nothing'}"
    return None


def eviction_priority(pod: Pod) -> int:
    """The eviction-priority annotation; 0 when absent or not an integer (Koordinator logs and uses 0)."""
    raw = pod.annotations.get(ANNOTATION_EVICTION_PRIORITY)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def label_priority(pod: Pod, default: int) -> int:
    raw = pod.labels.get(LABEL_PRIORITY)
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


@dataclass(frozen=True)
class Candidate:
    """A pod that may be evicted, with what evicting it releases, by measure (:data:`USED`, :data:`REQUEST`)."""

    meta: PodMeta
    priority: int
    amounts: Mapping[str, float]

    @property
    def key(self) -> str:
        return self.meta.pod.key


MakeCandidate = Callable[[PodMeta, int], Candidate]
"""A pod and the priority it is ranked by -> the candidate with this round's amounts."""


@dataclass(frozen=True)
class Task:
    """One trigger's eviction: release ``needed`` measured by ``target`` from ``candidates`` (in order)."""

    feature: str
    reason: str
    """The eviction reason (metric label, audit): ``EvictPodByNodeMemoryUsage``..."""
    target: str
    needed: float
    candidates: Sequence[Candidate]
    message: str


@dataclass
class Outcome:
    released: dict[str, float] = field(default_factory=dict)
    """Per measure: pending pods plus those evicted now."""
    pending: list[Candidate] = field(default_factory=list)
    evicted: list[tuple[Task, Candidate]] = field(default_factory=list)
    failed: list[tuple[Task, Candidate]] = field(default_factory=list)
    unreachable: str = ""
    """Why the walk stopped early: the way to evict was down (the last failed eviction's error)."""

    def failure_note(self) -> str:
        """``; eviction failed for ...`` for a decision's summary ("" when nothing failed)."""
        if not self.failed:
            return ""
        note = f"; eviction failed for {', '.join(c.key for _, c in self.failed)}"
        if self.unreachable:
            return f"{note} (the way to evict is down, no other pod tried: {self.unreachable})"
        return note

    def add(self, candidate: Candidate) -> None:
        for measure, amount in candidate.amounts.items():
            self.released[measure] = self.released.get(measure, 0.0) + amount

    def short(self, task: Task) -> float:
        """What ``task`` still lacks (0 when released enough)."""
        return max(task.needed - self.released.get(task.target, 0.0), 0.0)


def evict(options: Options, tasks: Iterable[Task], pending: Sequence[Candidate]) -> Outcome:
    """Counts ``pending`` as released, then evicts each task's candidates in order until the task's
    amount is released.  A pod is evicted at most once per round; a failed eviction (logged and audited
    by the evictor) releases nothing and the walk goes on to the next candidate, as Koordinator's does,
    unless the way to evict is down (:class:`EvictionUnreachable`): then the walk stops, and the same pods are
    tried in the same order next round, rather than the next one being evicted for the shortage of the first."""
    outcome = Outcome()
    seen: set[str] = set()
    for candidate in pending:
        if candidate.meta.uid not in seen:
            seen.add(candidate.meta.uid)
            outcome.pending.append(candidate)
            outcome.add(candidate)
    for task in tasks:
        for candidate in task.candidates:
            if outcome.short(task) <= 0:
                break
            if candidate.meta.uid in seen:
                continue
            seen.add(candidate.meta.uid)
            pod = candidate.meta.pod
            try:
                launched = options.evictor.evict(candidate.meta, task.reason, f"{task.message}; evicting pod {pod.key}")
            except EvictionUnreachable as exc:
                outcome.failed.append((task, candidate))
                outcome.unreachable = str(exc)
                return outcome
            if launched:
                outcome.evicted.append((task, candidate))
                outcome.add(candidate)
                options.metrics.pod_eviction(task.reason, pod.namespace, pod.name)
            else:
                outcome.failed.append((task, candidate))
    return outcome


def pending_pods(options: Options, pods: Sequence[PodMeta]) -> list[PodMeta]:
    """Pods whose eviction was launched and that are still listed."""
    uids = options.evictor.pending(pods)
    return [meta for meta in pods if meta.uid in uids]


def active(meta: PodMeta) -> bool:
    """Koordinator skips inactive (succeeded or failed) pods: evicting them releases nothing."""
    return not meta.pod.terminated


def keys(candidates: Iterable[Candidate]) -> list[str]:
    return [c.key for c in candidates]


def fmt_bytes(value: float) -> str:
    """``2.1 GiB``, ``50.0 MiB``: the unit an operator reads memory in."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def usage_victims(pods: Sequence[PodMeta], used: Mapping[str, float], limit: int, feature: str,
                  candidate: MakeCandidate, ignored: list[str], by: str = USED) -> list[Candidate]:
    """The victims of a usage trigger (CPUEvict, MemoryEvict) or an allocatable one: pods labelled
    eviction-enabled, priority at most ``limit``, with a usage sample, in Koordinator's order (eviction-priority
    annotation, priority, ``koordinator.sh/priority`` label, then the largest amount ``by``: usage, or the
    request for the allocatable triggers).  Pods whose eviction-policy annotation refuses ``feature`` go to
    ``ignored`` with why."""
    chosen: list[tuple[tuple[int, int, int, float, str], Candidate]] = []
    for meta in pods:
        pod = meta.pod
        priority = priority_with_default(pod)
        if not active(meta) or priority > limit or not eviction_enabled(pod) or meta.uid not in used:
            continue
        refusal = policy_refusal(pod, feature)
        if refusal is not None:
            ignored.append(f"{pod.key}: {refusal}")
            continue
        c = candidate(meta, priority)
        chosen.append(((eviction_priority(pod), priority, label_priority(pod, priority), -c.amounts.get(by, 0.0),
                        c.key), c))
    chosen.sort(key=lambda item: item[0])
    return [c for _, c in chosen]


def be_victims(pods: Sequence[PodMeta], feature: str, candidate: MakeCandidate, ignored: list[str]
               ) -> list[Candidate]:
    """The active BE pods a BE trigger may evict, unsorted (each trigger ranks them its own way); pods
    whose eviction-policy annotation refuses ``feature`` go to ``ignored`` with why."""
    victims: list[Candidate] = []
    for meta in pods:
        if meta.qos is not QoSClass.BE or not active(meta):
            continue
        refusal = policy_refusal(meta.pod, feature)
        if refusal is not None:
            ignored.append(f"{meta.pod.key}: {refusal}")
            continue
        victims.append(candidate(meta, meta.pod.priority or 0))
    return victims


class EvictionStrategy(abc.ABC):
    """What the eviction strategies share: three triggers behind three feature gates (BE pods, eviction-enabled
    pods of any class by usage, and by the Node's allocatable), the NodeSLO switch, and a cooldown after a round
    that evicted."""

    name: str
    be_gate: str
    usage_gate: str
    allocatable_gate: str
    """CPUAllocatableEvict / MemoryAllocatableEvict: evicts for the Node's batch and mid allocatable."""
    off_summary: str
    """The decision of a round switched off: evicted pods are not brought back, so there is nothing to undo."""

    def __init__(self, options: Options, logger: logging.Logger, *, interval_seconds: float, cool_seconds: float,
                 cool_from_start: bool) -> None:
        self.options = options
        self._decide = Decider(self.name, logger, options.clock)
        self._interval_seconds = interval_seconds
        self._cool_seconds = cool_seconds
        self._cool_from_start = cool_from_start
        self.last_eviction: float | None = options.clock() if cool_from_start else None
        """When the last round that launched an eviction ran (the cooldown counts from it)."""
        self.woken = False
        """True during a round a pressure trigger woke: inputs that can be read now are (memoryevict's usage)."""

    def interval(self) -> float:
        return self._interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        resting = self._resting(enabled)
        return resting if resting is not None else self._round(slo, self.options.clock())

    def run_woken(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        """A round a pressure trigger asked for: :meth:`run_once` with :attr:`woken` set (the cooldown holds)."""
        self.woken = True
        try:
            return self.run_once(slo, enabled)
        finally:
            self.woken = False

    @abc.abstractmethod
    def _round(self, slo: NodeSLOSpec, now: float) -> Decision:
        """A round that may evict: the strategy's own triggers."""

    def enabled(self, slo: NodeSLOSpec) -> bool:
        threshold = slo.resource_used_threshold_with_be
        return ((self.gate(self.be_gate) or self.gate(self.usage_gate) or self.gate(self.allocatable_gate))
                and threshold is not None and threshold.enable is True)

    def gate(self, name: str) -> bool:
        return gates.enabled(self.options.gates, name)

    def _resting(self, enabled: bool) -> Decision | None:
        """The decision of a round that cannot evict whatever the usage (switched off, or cooling down),
        None when the round goes on."""
        if not enabled:
            return self._decide(Action.NONE, self.off_summary)
        cool_seconds = self._cool_seconds
        now = self.options.clock()
        if self.last_eviction is None or now - self.last_eviction >= cool_seconds:
            return None
        age = now - self.last_eviction
        since = "last eviction (or start)" if self._cool_from_start else "last eviction"
        numbers: dict[str, Any] = {"last_eviction_age_seconds": age, "cool_time_seconds": cool_seconds}
        return self._decide(Action.NONE, f"cooling down: {since} {age:.1f} s ago, cool time {cool_seconds:g} s",
                            numbers)

    def _evict(self, tasks: Iterable[Task], pods: Sequence[PodMeta], candidate: MakeCandidate, now: float
               ) -> Outcome:
        """Runs ``tasks`` with the pods still pending from earlier rounds counted first; a round that
        evicted starts the cooldown."""
        pending = [candidate(m, m.pod.priority or 0) for m in pending_pods(self.options, pods)]
        outcome = evict(self.options, tasks, pending)
        if outcome.evicted:
            self.last_eviction = now
        return outcome
