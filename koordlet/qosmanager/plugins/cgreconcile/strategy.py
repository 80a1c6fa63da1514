"""Memory QoS reconcile (Koordinator ``qosmanager/plugins/cgreconcile``, gate ``CgroupReconcile``).

For every running pod whose memory QoS is on (its class's ``memoryQOS.enable``, or its
``koordinator.sh/memoryQOS`` annotation, see :mod:`.podconfig`), each container gets

* ``memory.min`` = request x minLimitPercent / 100 and ``memory.low`` = request x lowLimitPercent / 100
  (low raised to min when lower);
* ``memory.high`` = request + (limit - request) x throttlingPercent / 100, rounded down to a page, the
  node's allocatable memory standing in for a missing limit; throttling 0 = no throttling (max);
  raised to min when lower;
* the static knobs ``memory.wmark_ratio``, ``memory.wmark_scale_factor`` (wmarkScalePermill),
  ``memory.wmark_min_adj``, ``memory.priority``, ``memory.use_priority_oom``, ``memory.oom.group``.

The pod cgroup gets min/low from the sum of its containers' requests and the static knobs; each kube
QoS directory gets the summed min/low of the pods below it (Guaranteed's ``kubepods`` is the parent of
the other two, so it sums every pod) and its class's OOM knobs.  BE pods count their batch memory.

Only files this kernel has are written: cgroup v1 has them on Alibaba Cloud Linux / Anolis only, and the
wmark and priority files are Anolis-only on v2 too.  Support is probed once per resource per round in the
kubepods directory and each unsupported file is named once in the decision.  ``memory.min`` is a leveled
resource: the whole round goes to the executor as one batch, which orders it.

Pods whose memory QoS goes off (policy none, their class disabled) and, when the strategy is switched
off, every pod and QoS directory it wrote get the kernel's defaults back.  Koordinator instead writes its
"none" values to every pod of a disabled class every round; resetting only what this strategy touched
leaves cgroups it never managed alone."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label
from koordlet.apis.nodeslo import MemoryQOSCfg, NodeSLOSpec, ResourceQOSStrategy
from koordlet.apis.pod import Container
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.isolation.slo import qos_strategy
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.qosmanager.plugins.cgreconcile import calc
from koordlet.qosmanager.plugins.cgreconcile.calc import PAGE_SIZE, MemoryValues
from koordlet.qosmanager.plugins.cgreconcile.podconfig import PodConfigs, class_config
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import MEMORY_MIN

log = logging.getLogger(__name__)

NAME = "cgreconcile"
_QOS_ORDER = (KubeQoS.GUARANTEED, KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT)
_QOS_CLASS = {KubeQoS.GUARANTEED: QoSClass.LSR, KubeQoS.BURSTABLE: QoSClass.LS, KubeQoS.BESTEFFORT: QoSClass.BE}
"""Koordinator ``GetKubeQoSResourceQoSByQoSClass``: whose OOM knobs a kube QoS directory gets."""
_RESET_ITEMS = tuple(calc.RESET.items())
_POD_RESET_ITEMS = tuple(dataclasses.replace(calc.RESET, memory_high=None).items())
"""The pod level never gets memory.high (see :func:`calc.pod_values`), so it gets none back either."""


def class_enabled(strategy: ResourceQOSStrategy) -> bool:
    """Some class has ``memoryQOS.enable`` true."""
    classes = (strategy.lsr_class, strategy.ls_class, strategy.be_class, strategy.system_class)
    return any(c is not None and c.memory_qos is not None and c.memory_qos.enable is True for c in classes)


def requested(container: Container, batch: bool) -> tuple[int, int | None]:
    """(request, limit) in bytes: batch memory for BE pods (Koordinator reads the raw label: the
    webhook moved their requests to ``kubernetes.io/batch-memory``), memory otherwise.  An unset request
    counts as 0, an unset limit as None."""
    req, lim = container.requests, container.limits
    request = req.batch_memory_bytes if batch else req.memory_bytes
    limit = lim.batch_memory_bytes if batch else lim.memory_bytes
    return max(request or 0, 0), limit if limit is not None and limit > 0 else None


Items = tuple[tuple[str, int], ...]
"""(registry key, value) pairs of one cgroup, in :data:`calc.RESOURCES` order."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A pod's values, worked out once per PodMeta object (the informer hands out the same object until
    the pod changes), configuration and allocatable memory: rounds run every second."""

    meta: PodMeta
    cfg: MemoryQOSCfg
    allocatable: int
    pod: MemoryValues
    pod_items: Items
    containers: tuple[tuple[str, str, Items], ...]
    """(name, cgroup dir, items) of every started container."""
    dirs: tuple[str, ...]
    numbers: Mapping[str, Any]


@dataclass
class _Round:
    now: float
    supported: frozenset[str]
    updates: list[CgroupUpdate] = field(default_factory=list)
    classes: Counter[str] = field(default_factory=Counter)
    pods: dict[str, Any] = field(default_factory=dict)
    bad_annotations: list[str] = field(default_factory=list)
    reset_pods: list[str] = field(default_factory=list)
    qos: dict[str, Any] = field(default_factory=dict)
    touched: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


class CgroupReconcile:
    """The ``cgreconcile`` strategy; ``page_size`` aligns memory.high (the host's by default)."""

    name = NAME

    def __init__(self, options: Options, page_size: int = PAGE_SIZE) -> None:
        self.options = options
        self.page_size = page_size
        self._configs = PodConfigs()
        self._decide = Decider(NAME, log, options.clock)
        self._touched_pods: dict[str, tuple[str, tuple[str, ...]]] = {}
        """Pod UID -> (pod key, (pod dir, container dirs...)) given memory QoS values."""
        self._touched_qos: set[str] = set()
        self._plans: dict[str, _Plan] = {}
        self._built: dict[str, tuple[_Plan, frozenset[str], tuple[CgroupUpdate, ...]]] = {}
        """Pod UID -> (the plan, the supported files, its updates) of :meth:`_plan_pod`."""
        self._logged_unsupported: frozenset[str] = frozenset()

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """The gate (off by default) and some class with memory QoS on."""
        return gates.enabled(self.options.gates, gates.CGROUP_RECONCILE) and class_enabled(qos_strategy(slo))

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        now = self.options.clock()
        kubepods = helpers.kube_qos_dir(self.options, KubeQoS.GUARANTEED)
        missing = self._kubepods_missing(kubepods)
        if missing is not None:
            if not enabled:  # nothing left to reset: the pods' cgroups went with kubepods
                self._forget_all()
            return self._decide(Action.SKIP, f"memory QoS not applied: {missing}", {"kubepods": kubepods},
                                reason="kubepods_missing", at=now)
        supported, unsupported = self._probe(kubepods)
        if not enabled:
            return self._recover(now, supported, unsupported)
        if not supported:
            return self._decide(Action.SKIP, "memory QoS not applied: no memory QoS file on this kernel ("
                                + "; ".join(unsupported.values()) + ")", {"unsupported": unsupported},
                                reason="no_memory_qos_file", at=now)
        rnd = _Round(now, supported)
        strategy = qos_strategy(slo)
        node = self.options.informer.node()
        allocatable = max(node.memory_total_bytes - self.options.informer.reservation().memory_bytes, 0)
        sums: dict[KubeQoS, list[int | None]] = {q: [None, None] for q in _QOS_ORDER}
        live: set[str] = set()
        classes = {qos: class_config(strategy, qos) for qos in QoSClass}
        for meta in self.options.informer.pods():
            live.add(meta.uid)
            self._plan_pod(meta, classes, allocatable, sums, rnd)
        self._plan_qos(strategy, sums, rnd)
        # Pods that went: their cgroups went with them.
        for uid in [u for u in self._touched_pods if u not in live]:
            del self._touched_pods[uid]
        for uid in [u for u in self._plans if u not in live]:
            del self._plans[uid]
        for uid in [u for u in self._built if u not in live]:
            del self._built[uid]
        results = self.options.executor.apply(rnd.updates) if rnd.updates else []
        self._touched_pods.update(rnd.touched)
        return self._reconciled(rnd, results, unsupported, allocatable)

    # ------------------------------------------------------------------------------------------ probing

    def _kubepods_missing(self, kubepods: str) -> str | None:
        try:
            directory = MEMORY_MIN.directory(self.options.layout, kubepods)
        except KoordletError as exc:
            return str(exc)
        return None if os.path.isdir(directory) else f"kubepods memory cgroup {directory} does not exist"

    def _probe(self, kubepods: str) -> tuple[frozenset[str], dict[str, str]]:
        """Supported resource keys and, for the others, why (once per resource per round)."""
        layout = self.options.layout
        supported: set[str] = set()
        unsupported: dict[str, str] = {}
        for key in calc.RESOURCES:
            descriptor = calc.FILES[key]
            support = descriptor.supported(layout, kubepods)
            if support:
                supported.add(key)
                continue
            try:
                version = descriptor.version(layout)
                spec = descriptor.spec(version)
            except KoordletError:
                unsupported[key] = f"{key} unsupported on this kernel ({support.reason})"
                continue
            why = f"cgroup v{version} without Anolis" if spec.anolis_only else support.reason
            unsupported[key] = f"{spec.name} unsupported on this kernel ({why})"
        named = frozenset(unsupported)
        if named != self._logged_unsupported:
            self._logged_unsupported = named
            if unsupported:
                log.info("memory QoS files missing on this kernel are not written",
                         extra={"unsupported": sorted(unsupported.values())})
        return frozenset(supported), unsupported

    # ------------------------------------------------------------------------------------------ planning

    def _plan_pod(self, meta: PodMeta, classes: Mapping[QoSClass, MemoryQOSCfg | None], allocatable: int,
                  sums: dict[KubeQoS, list[int | None]], rnd: _Round) -> None:
        pod = meta.pod
        qos = pod.qos
        if pod.terminated or qos is QoSClass.NONE:
            return
        pod_key = pod.key
        config = self._configs.get(pod_key, pod.annotations, qos, classes[qos])
        if config.error is not None:
            rnd.bad_annotations.append(config.error)
            if meta.uid in self._touched_pods:  # left as it is, still ours to reset later
                rnd.touched[meta.uid] = self._touched_pods[meta.uid]
            return
        if not config.enabled:
            touched = self._touched_pods.pop(meta.uid, None)
            if touched is not None:
                rnd.reset_pods.append(pod_key)
                owner = f"{NAME}: {pod_key} memory QoS off ({config.policy}), reset"
                for i, rel_dir in enumerate(touched[1]):
                    self._queue(rnd, rel_dir, _POD_RESET_ITEMS if i == 0 else _RESET_ITEMS, owner)
            return
        if not meta.cgroup_dir:
            return
        plan = self._plans.get(meta.uid)
        if plan is None or plan.meta is not meta or plan.allocatable != allocatable or plan.cfg != config.cfg:
            plan = self._plans[meta.uid] = self._plan(meta, config.cfg, config.policy, allocatable)
        built = self._built.get(meta.uid)
        if built is None or built[0] is not plan or built[1] != rnd.supported:
            # The same update objects every round while the plan and the kernel's files stay: the
            # executor skips them as unchanged, and building ~9 per container every second would be most
            # of a steady round.
            owner = f"{NAME}: {pod_key}"
            updates = _updates(meta.cgroup_dir, plan.pod_items, owner, rnd.supported)
            for name, rel_dir, items in plan.containers:
                updates += _updates(rel_dir, items, f"{owner}/{name}", rnd.supported)
            built = self._built[meta.uid] = (plan, rnd.supported, tuple(updates))
        rnd.updates += built[2]
        rnd.touched[meta.uid] = (pod_key, plan.dirs)
        rnd.classes[qos.value] += 1
        rnd.pods[pod_key] = plan.numbers
        if pod.kube_qos is not None:
            self._add(sums[pod.kube_qos], plan.pod)
            if pod.kube_qos is not KubeQoS.GUARANTEED:
                self._add(sums[KubeQoS.GUARANTEED], plan.pod)

    def _plan(self, meta: PodMeta, cfg: MemoryQOSCfg, policy: str, allocatable: int) -> _Plan:
        pod = meta.pod
        batch = qos_from_label(pod.labels.get(LABEL_QOS)) is QoSClass.BE
        pod_request = sum(requested(c, batch)[0] for c in pod.containers)
        values = calc.pod_values(cfg, pod_request)
        specs = {c.name: c for c in pod.containers}
        planned: list[tuple[str, str, Items]] = []
        numbers: dict[str, Any] = {}
        for cmeta in meta.containers:
            spec = specs.get(cmeta.name)
            if spec is None or not cmeta.cgroup_dir:
                continue
            request, limit = requested(spec, batch)
            items = tuple(calc.container_values(cfg, request, limit, allocatable, self.page_size).items())
            planned.append((cmeta.name, cmeta.cgroup_dir, items))
            numbers[cmeta.name] = {"request_bytes": request, "limit_bytes": limit, **dict(items)}
        pod_items = tuple(values.items())
        return _Plan(meta, cfg, allocatable, values, pod_items, tuple(planned),
                     (meta.cgroup_dir, *(rel_dir for _, rel_dir, _ in planned)),
                     {"class": meta.qos.value, "policy": policy, "request_bytes": pod_request, **dict(pod_items),
                      "containers": numbers})

    @staticmethod
    def _add(total: list[int | None], values: MemoryValues) -> None:
        for i, value in enumerate((values.memory_min, values.memory_low)):
            if value is not None:
                total[i] = (total[i] or 0) + value

    def _plan_qos(self, strategy: ResourceQOSStrategy, sums: dict[KubeQoS, list[int | None]],
                  rnd: _Round) -> None:
        """Koordinator ``completeCgroupSummaryForQoS`` + ``calculateQoSResources``: written once a pod
        below the directory or its class has memory QoS on, and kept up (possibly at 0) afterwards."""
        for kube_qos in _QOS_ORDER:
            rel_dir = helpers.kube_qos_dir(self.options, kube_qos)
            cfg: MemoryQOSCfg | None = class_config(strategy, _QOS_CLASS[kube_qos])
            class_on = cfg is not None and cfg.enable is True
            low_min, low = sums[kube_qos]
            if low_min is None and low is None and not class_on and rel_dir not in self._touched_qos:
                continue
            values = calc.qos_values(low_min or 0, low or 0, cfg if class_on else None)
            if not class_on:
                values = dataclasses.replace(values, memory_priority=0, memory_use_priority_oom=0,
                                             memory_oom_group=0)
            self._touched_qos.add(rel_dir)
            items = tuple(values.items())
            self._queue(rnd, rel_dir, items, f"{NAME}: {kube_qos.value} QoS level")
            rnd.qos[rel_dir] = dict(items)

    @staticmethod
    def _queue(rnd: _Round, rel_dir: str, items: Iterable[tuple[str, int]], owner: str) -> None:
        rnd.updates += _updates(rel_dir, items, owner, rnd.supported)

    # ------------------------------------------------------------------------------------------ writing

    def _forget_all(self) -> None:
        self._touched_pods.clear()
        self._touched_qos.clear()
        self._plans.clear()
        self._built.clear()

    def _recover(self, now: float, supported: frozenset[str], unsupported: dict[str, str]) -> Decision:
        """Switched off: the kernel's defaults back in every pod and QoS directory this strategy wrote."""
        rnd = _Round(now, supported)
        for key, dirs in self._touched_pods.values():
            rnd.reset_pods.append(key)
            owner = f"{NAME}: memory QoS switched off, reset {key}"
            for i, rel_dir in enumerate(dirs):
                self._queue(rnd, rel_dir, _POD_RESET_ITEMS if i == 0 else _RESET_ITEMS, owner)
        qos_dirs = sorted(self._touched_qos)
        for rel_dir in qos_dirs:
            self._queue(rnd, rel_dir, tuple(calc.QOS_RESET.items()),
                        f"{NAME}: memory QoS switched off, reset QoS level")
        results = self.options.executor.apply(rnd.updates) if rnd.updates else []
        self._forget_all()
        counts = helpers.write_outcomes(results)
        numbers = {"reset_pods": rnd.reset_pods, "reset_qos_dirs": qos_dirs, "updates": len(rnd.updates),
                   **counts, "unsupported": unsupported, "problems": helpers.write_problems(results)}
        if not rnd.updates:
            return self._decide(Action.NONE, "memory QoS off: nothing of ours to reset", numbers, at=now)
        summary = (f"memory QoS off: reset {len(rnd.reset_pods)} pods and {len(qos_dirs)} QoS dirs to the kernel "
                   f"defaults: {helpers.writes_made(counts)} writes, {counts['unchanged']} values already in place"
                   f"{helpers.write_tail(counts)}")
        return self._decide(Action.RECOVER, summary, numbers, at=now)

    # ------------------------------------------------------------------------------------------ decision

    def _reconciled(self, rnd: _Round, results: list[Result], unsupported: dict[str, str], allocatable: int
                    ) -> Decision:
        counts = helpers.write_outcomes(results)
        by_class = ", ".join(f"{c} {n}" for c, n in sorted(rnd.classes.items()))
        pods = sum(rnd.classes.values())
        summary = (f"memory QoS on {pods} pods{f' ({by_class})' if by_class else ''}: "
                   f"{helpers.writes_made(counts)} writes, {len(unsupported)} resources unsupported")
        if rnd.bad_annotations:
            summary += f"; {len(rnd.bad_annotations)} pods skipped (bad memoryQOS annotation)"
        if rnd.reset_pods:
            summary += f"; {len(rnd.reset_pods)} pods reset"
        summary += helpers.write_tail(counts)
        numbers = {
            "pods": pods, "by_class": dict(rnd.classes), "updates": len(rnd.updates), **counts,
            "unsupported": unsupported, "skipped_pods": rnd.bad_annotations, "reset_pods": rnd.reset_pods,
            "node_allocatable_bytes": allocatable, "page_size": self.page_size, "qos": rnd.qos,
            "pod_values": rnd.pods, "problems": helpers.write_problems(results),
        }
        acted = helpers.writes_made(counts)
        return self._decide(Action.RECONCILE if acted else Action.NONE, summary, numbers, at=rnd.now)


def _updates(rel_dir: str, items: Iterable[tuple[str, int]], owner: str, supported: frozenset[str]
             ) -> list[CgroupUpdate]:
    """Every value this kernel has a file for, every round: the executor skips what it wrote less than its
    force-update interval ago and rewrites the rest, which repairs a value changed behind our back."""
    return [CgroupUpdate(calc.FILES[key], rel_dir, value, owner) for key, value in items if key in supported]
