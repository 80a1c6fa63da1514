"""CPU burst for LS pods (Koordinator ``qosmanager/plugins/cpuburst``).

Two mechanisms, chosen per pod by ``cpuBurstStrategy.policy`` (or the pod's ``koordinator.sh/cpuBurst``):

* ``cpuBurstOnly`` / ``auto``: ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) = limit x ``cpuBurstPercent``%
  x 100 ms, capped at the quota (the kernel refuses more, Koordinator #2778); the pod cgroup gets the sum.
* ``cfsQuotaBurstOnly`` / ``auto``: a throttled container's ``cfs_quota_us`` steps up x1.2 while the share
  pool is idle, and steps down x0.8 while it is overloaded or the container's token bucket is empty,
  always within [limit x 100 ms, that x ``cfsQuotaBurstPercent``%].  The pod cgroup follows, so the
  kernel never sees a child above its parent (cgroup v1 refuses that with EINVAL).

Pods labelled LSE, LSR or BE are never touched (Koordinator ``IsPodCPUBurstable`` reads the raw label, so
an unlabelled Guaranteed pod is burstable).  Pods whose policy is ``none`` get their scaled quota and
their burst undone; so does every pod when the strategy is switched off."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label
from koordlet.apis.nodeslo import CPUBurstStrategy, NodeSLOSpec, default_cpu_burst_strategy
from koordlet.config import gates
from koordlet.errors import CgroupGone, KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.cache import pod_labels
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.qosmanager.plugins.cpuburst import calc
from koordlet.qosmanager.plugins.cpuburst.calc import NodeState, Operation
from koordlet.qosmanager.plugins.cpuburst.known import Known
from koordlet.qosmanager.plugins.cpuburst.plan import (
    ContainerPlan,
    PodPlan,
    Prepared,
    Round,
    Slot,
    change_numbers,
    count,
    prepare,
    undo,
)
from koordlet.qosmanager.plugins.cpuburst.podconfig import (
    ANNOTATION_CPU_BURST,
    NONE,
    PodConfigs,
    burst_enabled,
    quota_burst_enabled,
)
from koordlet.qosmanager.plugins.cpuburst.tokens import TokenBucket, capacity
from koordlet.resourceexecutor import CgroupUpdate, Outcome, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.streaklog import Streak
from koordlet.system.resources import CPU_CFS_BURST as BURST
from koordlet.system.resources import CPU_CFS_QUOTA as QUOTA

log = logging.getLogger(__name__)

NAME = "cpuburst"
MAX_SHARE_POOL_WINDOW_SECONDS = 10.0
"""Koordinator averages the share pool over min(5 x interval, 10 s)."""
DEFAULT_CPU_BURST_PERCENT = 1000
_READ_ERRORS = (KoordletError, OSError)
_NOT_BURSTABLE = (QoSClass.LSE, QoSClass.LSR, QoSClass.BE)
_UNREAD: Any = object()


def burstable(meta: PodMeta) -> bool:
    """Not labelled LSE/LSR/BE, and not finished."""
    return qos_from_label(meta.pod.labels.get(LABEL_QOS)) not in _NOT_BURSTABLE and not meta.pod.terminated


_Facts = tuple[CPUBurstStrategy, Slot, int, bool, int, bool]


def _facts(slot: Slot, cfg: CPUBurstStrategy) -> _Facts:
    """(cfg, slot, the quota's ceiling, whether the quota is scaled, the burst wanted, whether a token bucket
    limits it) of a container under ``cfg``: what its round needs of its limit and the strategy, the same
    round after round."""
    percent = cfg.cpu_burst_percent if cfg.cpu_burst_percent is not None else DEFAULT_CPU_BURST_PERCENT
    desired = calc.burst_us(slot.limit_milli, percent) if burst_enabled(cfg.policy) else 0
    period = cfg.cfs_quota_burst_period_seconds
    return (cfg, slot, calc.ceil_quota(slot.base, cfg.cfs_quota_burst_percent), quota_burst_enabled(cfg.policy),
            desired, period is not None and period >= 0)


def _owner(meta: PodMeta) -> str:
    """Who the audit log says wants a pod's writes; built only for a write that is not last round's."""
    return f"{NAME}: {meta.pod.key}"


def node_strategy(slo: NodeSLOSpec) -> CPUBurstStrategy:
    return slo.cpu_burst_strategy or default_cpu_burst_strategy()


class _PodsView:
    """What a round needs from the informer's pod list that changes only with the list (the informer hands
    out the same tuple until a pod changes): the burstable pods, the slots whose throttling the round reads,
    the pods outside the share pool and the cgroups kept track of.  Rounds run every second over every
    container, so this is worked out once per list."""

    __slots__ = ("burstable", "cids", "dirs", "every", "live", "outside_labels", "outside_requests", "slot_labels",
                 "source", "uids")

    def __init__(self, source: Sequence[PodMeta], burstable: list[PodMeta], prepared: Sequence[Prepared],
                 statics: Sequence[tuple[PodMeta, bool, bool, float]]) -> None:
        self.source = source
        self.burstable = burstable
        slots = [slot for p in prepared for slot in p.slots]
        self.cids = [slot.cid for slot in slots]
        # Tuples: the metric cache keeps its lookup of a tuple asked again (MetricCache._rings_of).
        self.slot_labels = tuple(slot.labels for slot in slots)
        outside = [s for s in statics if s[1]]
        self.outside_labels = tuple(pod_labels(s[0].uid) for s in outside)
        self.outside_requests = [s[3] for s in outside if s[2]]
        self.every = frozenset(m.uid for m in source)
        self.uids = frozenset(m.uid for m in burstable)
        self.live = frozenset(c.container_id for m in burstable for c in m.containers)
        self.dirs = frozenset({m.cgroup_dir for m in burstable} | {c.cgroup_dir for m in burstable
                                                                   for c in m.containers})


class CPUBurst:
    """The ``cpuburst`` strategy.  ``rng`` seeds new token buckets (tests pass a constant)."""

    name = NAME

    def __init__(self, options: Options, rng: Callable[[], float] | None = None) -> None:
        self.options = options
        self._rng = rng or random.random
        self._configs = PodConfigs()
        self._write_failures = Streak(log, options.clock)
        self._decide = Decider(NAME, log, options.clock)
        self._known = Known(options.config.resource_force_update_seconds)
        self._prepared: dict[str, Prepared] = {}
        self._share_static: dict[str, tuple[PodMeta, bool, bool, float]] = {}
        """uid -> (the pod object, outside the share pool (LSE, LSR, BE), LSE/LSR, CPU request in cores)."""
        self._buckets: dict[str, TokenBucket] = {}
        self._reported: dict[str, tuple[str, str, int]] = {}
        """Container id -> (namespace, pod, quota) reported as scaled to the metrics sink."""
        self._burst_updates: dict[str, CgroupUpdate] = {}
        """Cgroup dir -> its last burst update (see :meth:`_burst_update`)."""
        self._pod_slack: dict[str, int] = {}
        """Pod UID -> pod quota beyond its containers' (pod overhead, init containers), seen at first sight."""
        self._burst_unsupported: str | None = None
        self._burst_unsupported_told = False
        self._view: _PodsView | None = None
        self._forgotten: _PodsView | None = None
        """The view :meth:`_forget_gone` last pruned the tables to: nothing else is kept of other pods."""
        self._facts: dict[str, _Facts] = {}
        """Container id -> what :func:`_facts` worked out for it under the strategy in force."""
        self._scaling: tuple[NodeState, float, float] = (NodeState.UNKNOWN, 0.0, 0.0)
        """(share pool state, now, max sample age) of the round being planned."""
        self._throttled: dict[str, float | None] | None = None
        """Container id -> its fresh throttled ratio this round, read for every container at first need."""
        if options.probes.get(BURST.key) is False:
            self._burst_unsupported = "the cpu_cfs_burst probe found no cpu.cfs_burst_us / cpu.max.burst"

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """The gate, and a policy other than ``none`` on the node or, as in Koordinator, on any pod's
        annotation (the documented way to opt single pods in while the node says ``none``)."""
        if not gates.enabled(self.options.gates, gates.CPU_BURST):
            return False
        node = node_strategy(slo)
        if node.policy not in (None, NONE):
            return True
        return any(self._configs.get(m.pod.key, m.pod.annotations, node).config.policy not in (None, NONE)
                   for m in self.options.informer.pods() if burstable(m))

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        rnd = Round(self.options.clock())
        self._known.refresh_seconds = self.options.config.resource_force_update_seconds
        view = self._pods_view()
        pods = view.burstable
        if not enabled:
            return self._restore(pods, rnd)
        node = node_strategy(slo)
        pool = self._share_pool(node, view)
        self._scaling = (pool.state, rnd.now, helpers.max_age(self.options))
        self._throttled = None
        configs = self._configs
        for meta in pods:
            annotations = meta.pod.annotations
            pod_config = (configs.get(meta.pod.key, annotations, node) if ANNOTATION_CPU_BURST in annotations
                          else configs.plain(node))
            if pod_config.error is not None:
                rnd.bad_annotations.append(pod_config.error)
            self._plan_pod(meta, rnd, self._scale, pod_config.config)
        self._throttled = None
        self._apply(rnd)
        self._forget_gone(view, rnd.now)
        return self._scaled(rnd, pool, node)

    def _pods_view(self) -> _PodsView:
        source = self.options.informer.pods()
        view = self._view
        if view is not None and view.source is source:
            return view
        burst = [m for m in source if burstable(m)]
        view = self._view = _PodsView(source, burst, [self._prepared_of(m) for m in burst],
                                      [self._static_of(m) for m in source])
        return view

    def _prepared_of(self, meta: PodMeta) -> Prepared:
        prepared = self._prepared.get(meta.uid)
        if prepared is None or prepared.meta is not meta:
            prepared = self._prepared[meta.uid] = prepare(meta)
        return prepared

    def _static_of(self, meta: PodMeta) -> tuple[PodMeta, bool, bool, float]:
        static = self._share_static.get(meta.uid)
        if static is None or static[0] is not meta:
            # Class and request change only with the pod object: worked out once per object.
            qos = qos_from_label(meta.pod.labels.get(LABEL_QOS))
            request = sum(c.requests.cpu_milli or 0 for c in meta.pod.containers) / 1000
            static = self._share_static[meta.uid] = (meta, qos in _NOT_BURSTABLE,
                                                     qos in (QoSClass.LSE, QoSClass.LSR), request)
        return static

    # ------------------------------------------------------------------------------------------ planning

    def _share_pool(self, node: CPUBurstStrategy, view: _PodsView) -> calc.SharePool:
        cache = self.options.cache
        window = min(5 * self.interval(), MAX_SHARE_POOL_WINDOW_SECONDS)
        node_used = cache.aggregate(names.NODE_CPU_USAGE, (), window)
        used = cache.means(names.POD_CPU_USAGE, view.outside_labels, window)
        threshold = node.share_pool_threshold_percent
        total = calc.pool_total(self.options.informer.node().cpu_count, view.outside_requests)
        return calc.pool_state(total, node_used.avg if node_used else None, used,
                               threshold if threshold is not None else calc.DEFAULT_SHARE_POOL_THRESHOLD_PERCENT)

    def _plan_pod(self, meta: PodMeta, rnd: Round, plan: Callable[[ContainerPlan, CPUBurstStrategy | None], None],
                  cfg: CPUBurstStrategy | None = None) -> None:
        """Finds the quotas of the pod's containers that have a CPU limit, lets ``plan`` set each one's
        target and burst (under ``cfg``), then fits the pod cgroup around them and queues the writes in a
        safe order."""
        prepared = self._prepared_of(meta)
        if not prepared.slots:
            return
        containers: list[ContainerPlan] = []
        unread = False
        fresh, now = self._known.fresh, rnd.now
        for slot in prepared.slots:
            current = fresh(QUOTA, slot.cgroup_dir, now)
            if current is None:
                problems = len(rnd.problems)
                current = self._current(slot.cgroup_dir, rnd, meta, slot.name)
                if current is None:
                    unread = unread or len(rnd.problems) > problems
                    continue
            c = ContainerPlan(meta, slot, current, current)
            plan(c, cfg)
            containers.append(c)
        if not containers:
            return
        rnd.containers += containers
        pod_current = fresh(QUOTA, meta.cgroup_dir, now)
        if pod_current is None:
            pod_current = self._current(meta.cgroup_dir, rnd, meta)
        if pod_current is None:
            # Without the pod's quota a larger child could be refused (v1) or silently capped (v2):
            # keep every quota as it is this round, bursts capped at the current quotas.
            for c in containers:
                c.target = c.current
                if c.burst is not None:
                    c.burst = calc.safe_burst_us(c.burst, c.current)
            self._queue(PodPlan(meta, containers, -1, -1), rnd)
            return
        pod = PodPlan(meta, containers, pod_current, pod_current)
        if pod_current > 0 and prepared.whole:
            pod.target = self._pod_quota(prepared, containers, pod_current)
            if unread:
                # A container whose quota could not be read may be scaled up: never shrink below it.
                pod.target = max(pod.target, pod_current)
        bursts = [c.burst for c in containers if c.burst is not None]
        if bursts:
            pod.burst = calc.safe_burst_us(sum(bursts), pod.target)
        self._queue(pod, rnd)

    def _pod_quota(self, prepared: Prepared, containers: Sequence[ContainerPlan], pod_current: int) -> int:
        """The pod's quota: its slack (what kubelet gave it beyond its containers: pod overhead, a larger
        init container), learned the first time the pod is seen, plus its containers' quotas.  Koordinator
        adds each container's delta to the pod's current quota instead; a sum does not drift when one of
        the writes fails or the pod's quota is rewritten behind our back."""
        planned = {c.slot.name: c for c in containers}
        current_sum = target_sum = 0
        for name, base in prepared.bases:
            c = planned.get(name)
            current_sum += max(c.current, 0) if c is not None else base
            target_sum += c.target if c is not None else base
        slack = self._pod_slack.setdefault(prepared.meta.uid, max(0, pod_current - current_sum))
        return slack + target_sum

    def _scale(self, c: ContainerPlan, cfg: CPUBurstStrategy | None) -> None:
        """Koordinator ``genOperationByContainer`` + ``changeOperationByNode`` + the burst of the target,
        under the pod's ``cfg`` and the round's :attr:`_scaling`."""
        assert cfg is not None
        state, now, max_age = self._scaling
        slot = c.slot
        facts = self._facts.get(slot.cid)
        if facts is None or facts[0] is not cfg or facts[1] is not slot:
            facts = self._facts[slot.cid] = _facts(slot, cfg)
        c.ceil = ceil = facts[2]
        # Without a period the limiter always allows (and keeps no bucket).
        allowed = self._limiter(c, cfg, now, max_age) if facts[5] else True
        if not facts[3]:
            wanted = Operation.RESET
        elif not allowed:
            wanted = Operation.DOWN
        else:
            throttled = self._throttled
            if throttled is None:
                # Every container's at once, under one lock, the first time a round needs one.
                view = self._view
                assert view is not None
                throttled = self._throttled = dict(zip(view.cids, self.options.cache.latest_values(
                    names.CONTAINER_CPU_THROTTLED, view.slot_labels, max_age), strict=True))
            value = throttled.get(slot.cid, _UNREAD)
            if value is _UNREAD:
                sample = self.options.cache.latest(names.CONTAINER_CPU_THROTTLED, slot.labels, max_age)
                value = None if sample is None else sample[1]
            c.throttled = value
            wanted = Operation.UP if c.throttled is not None and c.throttled > 0 else Operation.REMAIN
        c.wanted = wanted
        if wanted is Operation.RESET:
            c.operation = wanted
            c.target = undo(c.current, slot.base)
        else:
            c.operation = calc.adjust_for_node(state, wanted)
            c.target = calc.target_quota(c.operation, c.current, slot.base, ceil)
        if self._burst_unsupported is None:
            c.burst = calc.safe_burst_us(facts[4], c.target)

    def _limiter(self, c: ContainerPlan, cfg: CPUBurstStrategy, now: float, max_age: float) -> bool:
        """Koordinator ``cfsBurstAllowedByLimiter``: always allowed without a period; refused with a
        ceiling below 100%; else the container's token bucket decides."""
        period = cfg.cfs_quota_burst_period_seconds
        if period is None or period < 0:
            return True
        percent = cfg.cfs_quota_burst_percent
        if percent is None or percent < 100:
            return False
        bucket = self._buckets.get(c.slot.cid)
        if bucket is None or bucket.capacity != capacity(period, percent):
            bucket = self._buckets[c.slot.cid] = TokenBucket.new(period, percent, now, self._rng)
        usage = self.options.cache.latest(names.CONTAINER_CPU_USAGE, c.slot.labels, max_age)
        c.usage_percent = calc.usage_percent(None if usage is None else usage[1], c.slot.limit_milli)
        allowed = bucket.allow(now, c.usage_percent)
        c.tokens, c.token_capacity = bucket.tokens, bucket.capacity
        return allowed

    def _current(self, rel_dir: str, rnd: Round, meta: PodMeta, container: str = "") -> int | None:
        """The quota of ``rel_dir``: as known when recent, else read (see :mod:`.known`)."""
        known = self._known.fresh(QUOTA, rel_dir, rnd.now)
        if known is not None:
            return known
        try:
            value = int(self.options.reader.read(QUOTA, rel_dir))
        except CgroupGone:
            rnd.gone += 1
            self._known.drop(QUOTA, rel_dir)
            return None
        except _READ_ERRORS as exc:
            what = f"{meta.pod.key}/{container}" if container else meta.pod.key
            rnd.problems.append(f"{what}: cannot read {QUOTA.key}: {exc}")
            self._known.drop(QUOTA, rel_dir)
            return None
        last = self._known.get(QUOTA, rel_dir)
        if last is not None and last != value:
            self._changed_behind_our_back(rel_dir)
        self._known.remember(QUOTA, rel_dir, value, rnd.now)
        return value

    def _changed_behind_our_back(self, rel_dir: str) -> None:
        """kubelet (a pod update) or an operator rewrote a quota we set.  The executor would skip writing
        our value again within its force-update window (it remembers having written it), so tell it to
        forget that file, as its ``forget`` is meant for."""
        self.options.executor.forget(self.options.reader.path(QUOTA, rel_dir))

    def _queue(self, pod: PodPlan, rnd: Round) -> None:
        """Queues the pod's writes in an order the kernel accepts at every step (the executor writes a
        batch in order): a growing pod quota before its containers', a shrinking one after; a burst
        after its quota grows and before it shrinks (burst <= quota, #2778).  Bursts are queued every
        round: the executor skips the ones it wrote less than its force-update interval ago."""
        meta = pod.meta
        if pod.target > pod.current > 0:
            rnd.add("pod_quota", pod, CgroupUpdate(QUOTA, meta.cgroup_dir, pod.target, _owner(meta) + " quota up"))
        add_update, add_subject = rnd.updates.append, rnd.subjects.append  # Round.add, without a call per write
        for c in pod.containers:
            burst = None
            if c.burst is not None:
                burst = self._burst_update(c.slot.cgroup_dir, c.burst, meta, c.slot.name)
            if c.target != c.current:
                if burst is not None and c.target < c.current:
                    add_update(burst)
                    add_subject(("burst", c))
                    burst = None
                add_update(CgroupUpdate(QUOTA, c.slot.cgroup_dir, c.target,
                                        f"{_owner(meta)}/{c.slot.name} quota {c.operation.value}"))
                add_subject(("quota", c))
            if burst is not None:
                add_update(burst)
                add_subject(("burst", c))
        if pod.burst is not None:
            rnd.add("pod_burst", pod, self._burst_update(meta.cgroup_dir, pod.burst, meta))
        if 0 < pod.target < pod.current:
            rnd.add("pod_quota", pod, CgroupUpdate(QUOTA, meta.cgroup_dir, pod.target, _owner(meta) + " quota down"))

    def _burst_update(self, rel_dir: str, value: int, meta: PodMeta, container: str = "") -> CgroupUpdate:
        """The burst update of ``rel_dir``: last round's object while the value stays (almost every
        round), so a steady round builds none of the ~1,500 it hands the executor."""
        update = self._burst_updates.get(rel_dir)
        if update is None or update.value != value:
            owner = _owner(meta)
            what = f"{owner}/{container} burst" if container else f"{owner} burst"
            update = self._burst_updates[rel_dir] = CgroupUpdate(BURST, rel_dir, value, what)
        return update

    # ------------------------------------------------------------------------------------------ results

    def _apply(self, rnd: Round) -> None:
        results = self.options.executor.apply(rnd.updates) if rnd.updates else []
        known, now = self._known, rnd.now
        for (kind, subject), result in zip(rnd.subjects, results, strict=True):
            update = result.update
            resource, rel_dir, value = update.resource, update.rel_dir, update.value
            ok = result.ok
            # ``previous``: what was known before; a burst counts as set only when it differs.
            if ok and isinstance(value, int):
                previous = known.remember(resource, rel_dir, value, now)
            else:
                previous = known.get(resource, rel_dir)
                known.drop(resource, rel_dir)  # what the file holds now is anyone's guess
                if result.outcome is Outcome.GONE:
                    rnd.gone += 1
                elif not (kind in ("burst", "pod_burst") and self._burst_missing(result)):
                    rnd.failures.append(f"{result.path or rel_dir}: {result.outcome.value}"
                                        f"{f' ({result.error})' if result.error else ''}")
                    rnd.failed_files.add(f"{result.path or rel_dir}: {result.outcome.value}")
            if not isinstance(subject, ContainerPlan):
                continue
            if kind == "quota":
                subject.quota_ok = ok
                if result.outcome is Outcome.WRITTEN:
                    if subject.operation is Operation.RESET:
                        rnd.reset += 1
                    elif subject.target > subject.current:
                        rnd.scaled_up += 1
                    else:
                        rnd.scaled_down += 1
            elif kind == "burst" and ok and (previous or 0) != value:
                # An unknown burst counts as 0: what a fresh cgroup holds.
                rnd.bursts_set += 1
        reported = self._reported
        for c in rnd.containers:
            # Only a quota above the base, or one reported before, has anything to report.
            if (c.target if c.quota_ok else c.current) > c.slot.base or c.slot.cid in reported:
                self._report(c)

    def _burst_missing(self, result: Result) -> bool:
        """True when a refused burst write means the kernel has no burst file (< 5.14, or a v2 kernel
        without ``cpu.max.burst``): burst is then dropped for good, reported once.  EINVAL on a file
        that exists is a refused value and stays an ordinary failure."""
        if result.outcome is not Outcome.UNSUPPORTED:
            return False
        path = result.path
        if path is not None and (os.path.exists(path) or not os.path.isdir(os.path.dirname(path))):
            return False
        if self._burst_unsupported is None:
            self._burst_unsupported = result.error or f"no {BURST.key} file on this host"
            log.warning("cfs burst unsupported: only the cfs quota is scaled",
                        extra={"reason": self._burst_unsupported})
        return True

    def _report(self, c: ContainerPlan) -> None:
        quota = c.target if c.quota_ok else c.current
        namespace, pod = c.pod.pod.namespace, c.pod.pod.name
        if quota > c.slot.base:
            if self._reported.get(c.slot.cid) != (namespace, pod, quota):
                self.options.metrics.scaled_cfs_quota(namespace, pod, c.slot.cid, float(quota))
                self._reported[c.slot.cid] = (namespace, pod, quota)
        elif self._reported.pop(c.slot.cid, None) is not None:
            self.options.metrics.forget_container(namespace, pod, c.slot.cid)

    def _forget_gone(self, view: _PodsView, now: float) -> None:
        """Drops what is kept about containers and pods no longer among the burstable pods, and token
        buckets unused for two periods (Koordinator ``Recycle``).  Every table is keyed on the pods of the
        view of its round: under the view pruned to last round, only the buckets can have aged."""
        live = view.live
        for cid in [k for k, b in self._buckets.items() if k not in live or b.expired(now)]:
            del self._buckets[cid]
        if view is self._forgotten:
            return
        for cid in [k for k in self._reported if k not in live]:
            namespace, pod, _ = self._reported.pop(cid)
            self.options.metrics.forget_container(namespace, pod, cid)
        for cid in [k for k in self._facts if k not in live]:
            del self._facts[cid]
        uids = view.uids
        for uid in [k for k in self._pod_slack if k not in uids]:
            del self._pod_slack[uid]
        for uid in [k for k in self._prepared if k not in uids]:
            del self._prepared[uid]
        every = view.every
        for uid in [k for k in self._share_static if k not in every]:
            del self._share_static[uid]
        dirs = view.dirs
        self._known.keep_only(dirs)
        for rel_dir in [d for d in self._burst_updates if d not in dirs]:
            del self._burst_updates[rel_dir]
        self._forgotten = view

    # ------------------------------------------------------------------------------------------ restore

    def _restore(self, pods: Sequence[PodMeta], rnd: Round) -> Decision:
        """Switched off: every burstable container's quota above its base goes back to the base and
        every non-zero burst to 0, as the files show (read afresh), so what an earlier run left before a
        restart is undone too."""
        self._known.clear()
        for meta in pods:
            self._plan_pod(meta, rnd, self.undo)
            if self._burst_unsupported is None and any(c.pod is meta for c in rnd.containers):
                self._undo_pod_burst(meta, rnd)
        self._apply(rnd)
        for cid, (namespace, pod, _) in self._reported.items():
            self.options.metrics.forget_container(namespace, pod, cid)
        self._reported.clear()
        self._buckets.clear()
        self._pod_slack.clear()
        self._prepared.clear()
        self._facts.clear()
        self._burst_updates.clear()
        self._known.clear()
        summary = (f"cpu burst off: {count(rnd.reset, 'container')} back to the base quota, "
                   f"{count(rnd.bursts_set, 'burst')} cleared")
        numbers: dict[str, Any] = {"reset": rnd.reset, "bursts_cleared": rnd.bursts_set}
        return self._decide(Action.RECOVER, summary + self._trailer(rnd, numbers), numbers)

    def undo(self, c: ContainerPlan, cfg: CPUBurstStrategy | None = None) -> None:
        c.operation = Operation.RESET
        c.target = undo(c.current, c.slot.base)
        if self._burst_unsupported is None:
            burst = self._read_burst(c.slot.cgroup_dir)
            if burst:
                c.burst = 0
                # Known as non-zero, so the 0 counts as a change.
                self._known.remember(BURST, c.slot.cgroup_dir, burst, float("-inf"))

    def _undo_pod_burst(self, meta: PodMeta, rnd: Round) -> None:
        # _plan_pod queued the pod's burst as the sum of its containers' (0) when any had one; a pod
        # whose containers had none may still hold a burst of its own.
        if any(kind == "pod_burst" and isinstance(s, PodPlan) and s.meta is meta for kind, s in rnd.subjects):
            return
        if self._read_burst(meta.cgroup_dir):
            rnd.add("pod_burst", PodPlan(meta, [], -1, -1, 0),
                    CgroupUpdate(BURST, meta.cgroup_dir, 0, f"{NAME}: {meta.pod.key} burst cleared"))

    def _read_burst(self, rel_dir: str) -> int | None:
        try:
            return int(self.options.reader.read(BURST, rel_dir))
        except _READ_ERRORS:
            return None

    # ------------------------------------------------------------------------------------------ decision

    def _scaled(self, rnd: Round, pool: calc.SharePool, node: CPUBurstStrategy) -> Decision:
        numbers: dict[str, Any] = {
            "policy": node.policy,
            "node_state": pool.state.value,
            "share_pool_total_cores": pool.total_cores,
            "share_pool_used_cores": pool.used_cores,
            "share_pool_usage_percent": None if pool.state is NodeState.UNKNOWN else round(
                pool.usage_ratio * 100, 2),
            "share_pool_threshold_percent": pool.threshold_percent,
            "containers": len(rnd.containers),
            "scaled_up": rnd.scaled_up,
            "scaled_down": rnd.scaled_down,
            "reset": rnd.reset,
            "bursts_set": rnd.bursts_set,
            "changes": [change_numbers(c) for c in rnd.containers if c.target != c.current],
        }
        if rnd.bad_annotations:
            numbers["bad_annotations"] = list(rnd.bad_annotations)
        said = [f"{count(n, 'container')} {text}" for n, text in (
            (rnd.scaled_up, "scaled up"), (rnd.scaled_down, "scaled down"), (rnd.reset, "reset to the base quota"))
            if n]
        if rnd.bursts_set:
            said.append(f"{count(rnd.bursts_set, 'burst')} set")
        if pool.state is NodeState.UNKNOWN:
            head = "share pool unknown (no fresh node CPU usage)"
        else:
            head = f"share pool {pool.usage_ratio * 100:.0f}% ({pool.state.value})"
        summary = f"{head}: {', '.join(said) if said else 'no change'}"
        if rnd.bad_annotations:
            summary += f"; bad annotation ignored ({rnd.bad_annotations[0]})"
        action = (Action.SCALE if rnd.scaled_up + rnd.scaled_down + rnd.reset
                  else Action.BURST if rnd.bursts_set else Action.NONE)
        return self._decide(action, summary + self._trailer(rnd, numbers), numbers)

    def _trailer(self, rnd: Round, numbers: dict[str, Any]) -> str:
        text = ""
        numbers["gone"] = rnd.gone
        if rnd.problems:
            numbers["read_problems"] = list(rnd.problems)
            text += f"; {len(rnd.problems)} skipped (first: {rnd.problems[0]})"
        if rnd.failures:
            numbers["failed_writes"] = list(rnd.failures)
            # Once per streak of the same files failing the same way (a value refused round after round is
            # refused with a new value each time), and once when every write lands again.
            self._write_failures.fail(", ".join(sorted(rnd.failed_files)), "cpuburst writes failed",
                                      extra={"failed": rnd.failures})
            text += f"; {len(rnd.failures)} of {len(rnd.updates)} writes failed (first: {rnd.failures[0]})"
        else:
            self._write_failures.ok("cpuburst writes succeed again")
        if self._burst_unsupported is not None:
            numbers["cfs_burst_unsupported"] = self._burst_unsupported
            if not self._burst_unsupported_told:
                self._burst_unsupported_told = True
                text += f"; cfs burst unsupported, not set any more ({self._burst_unsupported})"
        return text
