"""BE CPU suppression (Koordinator ``qosmanager/plugins/cpusuppress``): each round, BE may use what the
node's threshold leaves after the non-BE pods and the system, enforced on the besteffort QoS cgroup
either by shrinking its cpuset (policy ``cpuset``, the default) or by its CFS quota (``cfsQuota``).

The policy not in use is recovered (BE's cpuset back to every CPU it may use, or its quota back to -1),
so switching policies through the NodeSLO never leaves both limits in force."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.types import ResourceThresholdStrategy
from koordlet.errors import KoordletError
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins.cpusuppress import calc
from koordlet.qosmanager.plugins.cpusuppress.cpuset_policy import Pools, choose, processors, split_pools
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.validators import format_cpulist

log = logging.getLogger(__name__)

NAME = "cpusuppress"
GATE = "BECPUSuppress"
CPUSET = "cpuset"
CFS_QUOTA = "cfsQuota"
DEFAULT_THRESHOLD_PERCENT = 65
_READ_ERRORS = (KoordletError, OSError)


def non_be(pod: PodMeta) -> bool:
    """Koordinator's ``NonBEPodFilter``: neither labelled BE nor in kubelet's BestEffort class."""
    return pod.qos is not QoSClass.BE and pod.pod.kube_qos is not KubeQoS.BESTEFFORT


class CPUSuppress:
    """The ``cpusuppress`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._quota_recovered = False
        """Koordinator's ``suppressPolicyStatuses[cfsQuota] == recovered``: -1 is written once, not every
        round, so kubelet or an operator may set the besteffort quota while the cpuset policy runs."""
        self._be_tree: tuple[object, float, tuple[str, ...]] | None = None
        """(what the walk depended on, when, the directories) of the last walk of the besteffort tree."""
        self._last_batch: tuple[tuple[str, ...], tuple[str, str], tuple[CgroupUpdate, ...]] | None = None

    def enabled(self, slo: NodeSLOSpec) -> bool:
        threshold = slo.resource_used_threshold_with_be
        return bool(self.options.gates.get(GATE, True)) and threshold is not None and threshold.enable is True

    def interval(self) -> float:
        return self.options.config.cpu_suppress_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        informer = self.options.informer
        node = informer.node()
        pods = list(informer.pods())
        pools = split_pools(node, pods, reserved_cpus(self.options))
        if not enabled:
            return self._recover(pools)
        threshold = slo.resource_used_threshold_with_be or ResourceThresholdStrategy()
        if not pods:
            return self._decide("skip", "no pods known yet", {})
        split = helpers.split_usage(helpers.cpu_usage(self.options, pods), pods, non_be)
        if split is None:
            return self._decide("skip", "no fresh node CPU sample (is the NodeResource collector running?)", {})
        suppress = calc.suppress_milli(
            node.cpu_count,
            threshold.cpu_suppress_threshold_percent if threshold.cpu_suppress_threshold_percent is not None
            else DEFAULT_THRESHOLD_PERCENT,
            split.matched, split.system, informer.reservation().cpu_milli / 1000,
            threshold.cpu_suppress_min_percent)
        self.options.metrics.be_suppress_ls_used_cores(split.matched)
        numbers = _suppress_numbers(suppress, split.node, pools)
        if not pools.allowed:
            return self._decide("skip", "no CPU left for BE: every CPU is an LSE pod's or reserved", numbers)
        if threshold.cpu_suppress_policy == CFS_QUOTA:
            return self._by_quota(suppress, pools, numbers)
        return self._by_cpuset(suppress, pools, numbers)

    # ------------------------------------------------------------------------------------------ policies

    def _by_cpuset(self, suppress: calc.Suppress, pools: Pools, numbers: dict[str, Any]) -> Decision:
        be_dir = helpers.be_qos_dir(self.options)
        try:
            current: list[int] = self.options.reader.read("cpuset_cpus", be_dir)
        except _READ_ERRORS as exc:
            return self._decide("skip", f"cannot read BE's cpuset in {be_dir}: {exc}", numbers)
        allowed = pools.allowed
        # An empty cpuset.cpus (a fresh v2 cgroup) means "all of the parent's": count it as every CPU BE
        # may use, so the growth limit does not start BE from zero.
        current_size = len(current) or len(allowed)
        node_cpus = len(processors(self.options.informer.node()))
        count = calc.cpuset_count(suppress.milli, self.options.config.be_min_cpuset_cpus, current_size, node_cpus,
                                  len(allowed))
        cpus = choose(count.cpus, pools)
        text = format_cpulist(cpus)
        numbers.update(policy=CPUSET, be_cpus=len(cpus), be_cpuset=text, wanted_cpus=count.wanted,
                       limited_by=count.limited_by, previous_cpuset=format_cpulist(current),
                       min_cpus=self.options.config.be_min_cpuset_cpus, growth_limit=calc.growth_limit(node_cpus))
        if not cpus:
            return self._decide("skip", f"no CPUs could be chosen for BE ({count.cpus} wanted)", numbers)
        updates = self._cpuset_batch(be_dir, text, f"{NAME}: BE limited to {_cpus(len(cpus))}")
        quota_index = len(updates) if not self._quota_recovered else -1
        if not self._quota_recovered:
            updates.append(CgroupUpdate("cpu_cfs_quota", be_dir, calc.UNSET_QUOTA,
                                        f"{NAME}: recover BE quota (cpuset policy in use)"))
        results = self.options.executor.apply(updates)
        if quota_index >= 0 and results[quota_index].ok:
            self._quota_recovered = True
        self.options.metrics.be_suppress_cores(CPUSET, float(len(cpus)))
        summary = (f"BE limited to {_cpus(len(cpus))} (cpuset {text}): {_usage_text(suppress)}"
                   f"{_limit_text(count, numbers)}")
        return self._decide("suppress", summary + _failures(results, numbers), numbers)

    def _by_quota(self, suppress: calc.Suppress, pools: Pools, numbers: dict[str, Any]) -> Decision:
        be_dir = helpers.be_qos_dir(self.options)
        try:
            current = int(self.options.reader.read("cpu_cfs_quota", be_dir))
        except _READ_ERRORS as exc:
            return self._decide("skip", f"cannot read BE's cfs quota in {be_dir}: {exc}", numbers)
        node_cpus = self.options.informer.node().cpu_count
        plan = calc.cfs_quota_plan(suppress.milli, current, node_cpus)
        numbers.update(policy=CFS_QUOTA, previous_quota_us=current, target_quota_us=plan.target,
                       quota_us=plan.quota, period_us=calc.CFS_PERIOD_US, min_delta_us=plan.min_delta,
                       max_increase_us=plan.max_increase, stepped=plan.stepped, skipped=plan.skip,
                       recovered_cpuset=format_cpulist(pools.allowed))
        updates: list[CgroupUpdate] = []
        if not plan.skip:
            updates.append(CgroupUpdate("cpu_cfs_quota", be_dir, plan.quota,
                                        f"{NAME}: BE quota {plan.quota / calc.CFS_PERIOD_US:.2f} cores"))
        # Koordinator recovers the cpuset every round of the quota policy (recoverCPUSetIfNeed); the
        # executor skips unchanged values, and BE pods created since the last round get widened too.
        allowed = format_cpulist(pools.allowed)
        updates += self._cpuset_batch(be_dir, allowed, f"{NAME}: recover BE cpuset (cfsQuota policy in use)")
        results = self.options.executor.apply(updates)
        self._quota_recovered = False
        if plan.skip:
            summary = (f"BE quota kept at {current} us: target {plan.target} us differs by less than 1% of the "
                       f"node ({plan.min_delta:.0f} us); {_usage_text(suppress)}")
            return self._decide("none", summary + _failures(results, numbers), numbers)
        self.options.metrics.be_suppress_cores(CFS_QUOTA, plan.quota / calc.CFS_PERIOD_US)
        step = f"; growth limited to +{plan.max_increase:.0f} us per round" if plan.stepped else ""
        summary = (f"BE quota {plan.quota} us per {calc.CFS_PERIOD_US} us ({plan.quota / calc.CFS_PERIOD_US:.2f} "
                   f"cores): {_usage_text(suppress)}{step}")
        return self._decide("suppress", summary + _failures(results, numbers), numbers)

    def _recover(self, pools: Pools) -> Decision:
        """Undo both policies: BE's cpuset back to every allowed CPU, its quota back to -1."""
        be_dir = helpers.be_qos_dir(self.options)
        allowed = format_cpulist(pools.allowed)
        numbers: dict[str, Any] = {"recovered_cpuset": allowed, "excluded_cpus": format_cpulist(pools.excluded)}
        # With every CPU exclusive there is nothing to give back (and an empty cpuset is refused).
        owner = f"{NAME}: recover BE cpuset (suppress disabled)"
        updates = self._cpuset_batch(be_dir, allowed, owner) if allowed else []
        if not self._quota_recovered:
            updates.append(CgroupUpdate("cpu_cfs_quota", be_dir, calc.UNSET_QUOTA,
                                        f"{NAME}: recover BE quota (suppress disabled)"))
        results = self.options.executor.apply(updates)
        if any(r.ok and r.update.resource == "cpu_cfs_quota" for r in results):
            self._quota_recovered = True
        summary = f"BE recovered: cpuset {allowed or '(no cgroups)'}, cfs quota unlimited"
        return self._decide("recover", summary + _failures(results, numbers), numbers)

    # ------------------------------------------------------------------------------------------ helpers

    def be_dirs(self, be_dir: str, cpus: str) -> tuple[str, ...]:
        """The besteffort directory, its pod directories and their container directories as found in the
        cpuset hierarchy (Koordinator ``GetBECPUSetPathsByMaxDepth``): the tree, not the pod list, so
        sandbox containers and pods the informer has not seen yet are narrowed too, without which the
        kernel refuses to shrink their parents (EBUSY).  Empty when the besteffort cgroup is gone.

        The walk costs a directory listing per BE pod, most of a round over 1,000 containers, so the
        last one is reused while the cpuset to write, the BE pods and containers the informer knows
        and the besteffort directory stay the same, for at most the executor's forced-rewrite period."""
        key = (be_dir, cpus, frozenset(
            d for pod in self.options.informer.pods() if pod.cgroup_dir.startswith(be_dir + "/")
            for d in (pod.cgroup_dir, *(c.cgroup_dir for c in pod.containers))))
        now = self.options.clock()
        last = self._be_tree
        if last is not None and last[0] == key and now - last[1] < self.options.config.resource_force_update_seconds:
            return last[2]
        dirs = self._walk_be_tree(be_dir)
        self._be_tree = (key, now, dirs) if dirs else None
        return dirs

    def _cpuset_batch(self, be_dir: str, cpus: str, owner: str) -> list[CgroupUpdate]:
        """``cpus`` for every BE directory; the same update objects as last round while nothing changed
        (the executor skips them as unchanged anyway, building them again is most of a steady round)."""
        dirs = self.be_dirs(be_dir, cpus)
        last = self._last_batch
        if last is None or last[0] is not dirs or last[1] != (cpus, owner):
            last = self._last_batch = (dirs, (cpus, owner), tuple(cpuset_updates(dirs, cpus, owner)))
        return list(last[2])

    def _walk_be_tree(self, be_dir: str) -> tuple[str, ...]:
        try:
            root = os.path.dirname(self.options.reader.path("cpuset_cpus", be_dir))
        except _READ_ERRORS:
            return ()
        if not os.path.isdir(root):
            return ()
        dirs = [be_dir]
        for pod in _subdirs(root):
            dirs.append(f"{be_dir}/{pod}")
            dirs += [f"{be_dir}/{pod}/{c}" for c in _subdirs(os.path.join(root, pod))]
        return tuple(dirs)

    def _decide(self, action: str, summary: str, numbers: dict[str, Any]) -> Decision:
        if action == "skip":
            log.info("cpusuppress skipped", extra={"reason": summary})
        return Decision(NAME, self.options.clock(), action, summary, numbers)


def reserved_cpus(options: Options) -> frozenset[int]:
    """CPUs the node reserves by id (kubelet ``reservedSystemCPUs``); a reservation by quantity only
    names none, and then only LSE CPUs are excluded."""
    return frozenset(options.informer.reservation().cpus)


def cpuset_updates(dirs: Sequence[str], cpus: str, owner: str) -> list[CgroupUpdate]:
    """One ``cpuset.cpus`` update per directory; the executor orders them (merged top-down, then final
    bottom-up) so the kernel never sees a child wider than its parent."""
    return [CgroupUpdate("cpuset_cpus", d, cpus, owner) for d in dirs]


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:  # vanished between listing and reading: the next round sees the new tree
        return []


def _suppress_numbers(suppress: calc.Suppress, node_used: float, pools: Pools) -> dict[str, Any]:
    numbers: dict[str, Any] = {
        "capacity_cpus": suppress.capacity_cpus,
        "threshold_percent": suppress.threshold_percent,
        "threshold_cores": suppress.threshold_cores,
        "node_used_cores": node_used,
        "ls_used_cores": suppress.ls_used,
        "system_used_cores": suppress.system_raw,
        "reserved_cores": suppress.reserved,
        "suppress_cores": suppress.cores,
        "floor_cores": None if suppress.floor_milli is None else suppress.floor_milli / 1000,
        "allowed_cpus": format_cpulist(pools.allowed),
        "excluded_cpus": format_cpulist(pools.excluded),
    }
    if pools.bad_annotations:
        numbers["bad_annotations"] = list(pools.bad_annotations)
    return numbers


def _cpus(n: int) -> str:
    return f"{n} CPU" if n == 1 else f"{n} CPUs"


def _usage_text(s: calc.Suppress) -> str:
    system = f"system {s.system_raw:.2f}"
    if s.reserved > s.system_raw:
        system += f" (reserved {s.reserved:.2f} counts)"
    floor = " (floor)" if s.floored else ""
    return (f"LS usage {s.ls_used:.2f} of {s.threshold_percent}% x {s.capacity_cpus} = {s.threshold_cores:.2f} "
            f"cores, {system} -> suppress {s.cores:.2f} cores{floor}")


def _limit_text(count: calc.CpusetCount, numbers: dict[str, Any]) -> str:
    if count.limited_by == "minimum":
        return f"; raised to the minimum of {_cpus(numbers['min_cpus'])}"
    if count.limited_by == "growth":
        return f"; growth limited to +{_cpus(numbers['growth_limit'])} per round (wants {count.wanted})"
    if count.limited_by == "allowed":
        return f"; capped at the {_cpus(count.cpus)} BE may use"
    return ""


def _failures(results: Sequence[Result], numbers: dict[str, Any]) -> str:
    failed = [f"{r.path or r.update.rel_dir}: {r.outcome.value}{f' ({r.error})' if r.error else ''}"
              for r in results if not r.ok]
    if not failed:
        return ""
    numbers["failed_writes"] = failed
    log.warning("cpusuppress writes failed", extra={"failed": failed})
    return f"; {len(failed)} of {len(results)} writes failed (first: {failed[0]})"
