"""BE CPU suppression (Koordinator ``qosmanager/plugins/cpusuppress``): each round, BE may use what the
node's threshold leaves after the non-BE pods and the system, enforced on the BE cgroups (the besteffort
QoS cgroup; on a standalone host each BE workload's own cgroup, see :mod:`.targets`) either by shrinking
their cpuset (policy ``cpuset``, the default) or by CFS quota (``cfsQuota``), BE's quota then being split
equally among the BE cgroups (:func:`.calc.split_quota`) so the shares add up to the suppress target.

In every BE cgroup the policy not in use is recovered (the cpuset back to every CPU BE may use, or the
quota back to -1), so switching policies through the NodeSLO never leaves both limits in force.

Under kubelet's static CPU manager policy the suppressed cpuset goes to BE's containers only, the CPUs
kubelet pinned are never BE's, and a pinned container's cgroup is never written (:mod:`.kubelet_policy`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.nodeslo.types import ResourceThresholdStrategy
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.qosmanager.plugins.cpusuppress import calc
from koordlet.qosmanager.plugins.cpusuppress.cpuset_policy import Pools, choose, split_pools
from koordlet.qosmanager.plugins.cpusuppress.hostapps import be_host_app_dirs, host_app_cpu
from koordlet.qosmanager.plugins.cpusuppress.kubelet_policy import static_updates, without_pinned
from koordlet.qosmanager.plugins.cpusuppress.targets import Targets, be_targets, non_be
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.statesinformer.cpumanager import KubeletCPUManager
from koordlet.statesinformer.framework import PodMeta
from koordlet.streaklog import Streak
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.node import NodeInfo
from koordlet.system.resources import CPU_CFS_QUOTA, CPUSET_CPUS
from koordlet.system.validators import format_cpulist

log = logging.getLogger(__name__)

NAME = "cpusuppress"
CPUSET = "cpuset"
CFS_QUOTA = "cfsQuota"
DEFAULT_THRESHOLD_PERCENT = 65
_READ_ERRORS = (KoordletError, OSError)


__all__ = ["CFS_QUOTA", "CPUSET", "NAME", "CPUSuppress", "non_be"]


class CPUSuppress:
    """The ``cpusuppress`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._decider = Decider(NAME, log, options.clock)
        self._write_failures = Streak(log, options.clock)
        self._quota_recovered: set[str] = set()
        """BE cgroups whose quota is recovered (Koordinator's ``suppressPolicyStatuses[cfsQuota] ==
        recovered``, kept per cgroup): -1 is written once, not every round, so kubelet or an operator may
        set the quota while the cpuset policy runs, and a BE cgroup that appears later is recovered too.
        Not an "already sent" cache: the executor's skip-unchanged would rewrite -1 after its force-update
        interval and undo such a quota, which Koordinator does not."""
        self._be_tree: tuple[object, float, tuple[str, ...]] | None = None
        """(what the walk depended on, when, the directories) of the last walk of the besteffort tree."""
        self._last_batch: tuple[tuple[str, ...], tuple[object, ...], tuple[CgroupUpdate, ...], tuple[str, ...]
                                ] | None = None
        self._kubelet = KubeletCPUManager()
        """kubelet's CPU manager this round (its policy and pinned containers)."""
        self._left_pinned: tuple[str, ...] = ()
        """Directories this round left alone for a container kubelet pinned (in the decision's numbers)."""
        self._static_cpus: list[int] | None = None
        """What the last round gave BE's containers under kubelet's static policy: the growth limit counts
        from it, the besteffort cgroup then holding every CPU BE may use (upstream reads the besteffort
        cgroup, which leaves BE unlimited in growth under that policy)."""
        self._left_alone: tuple[str, ...] = ()
        """The BE workloads left alone last round (logged when that changes, not every round)."""
        self._pools: tuple[NodeInfo, object, frozenset[int], Pools] | None = None
        """(node, pod list, excluded CPUs, the pools split from them) of the last round."""
        self._be_pods: tuple[object, str, frozenset[str]] | None = None
        """(pod list, besteffort dir, the BE pods' and containers' directories) of the last round."""
        self._series = helpers.PodSeries()
        self._bad_annotations: tuple[str, ...] = ()
        """Pods whose bound CPUs could not be read last round (logged when that changes, not every round)."""

    def enabled(self, slo: NodeSLOSpec) -> bool:
        threshold = slo.resource_used_threshold_with_be
        return (gates.enabled(self.options.gates, gates.BE_CPU_SUPPRESS) and threshold is not None
                and threshold.enable is True)

    def interval(self) -> float:
        return self.options.config.cpu_suppress_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        informer = self.options.informer
        node = informer.node()
        listed = informer.pods()
        pods = list(listed)
        kubelet = self._kubelet = informer.cpu_manager()
        self._left_pinned = ()
        # CPUs kubelet pinned to a Guaranteed container are exclusive, as an LSE pod's are.
        pools = self._split_pools(node, listed, pods, reserved_cpus(self.options) | kubelet.pinned_cpus)
        if pools.bad_annotations != self._bad_annotations:
            self._bad_annotations = pools.bad_annotations
            if pools.bad_annotations:
                log.warning("ignoring pods' bound CPUs", extra={"pods": list(pools.bad_annotations)})
        targets = be_targets(helpers.be_qos_dir(self.options), pods,
                             be_host_app_dirs(self.options, slo.host_applications))
        if targets.left_alone != self._left_alone:
            self._left_alone = targets.left_alone
            if targets.left_alone:
                log.warning("BE workloads not suppressed", extra={"left_alone": list(targets.left_alone)})
        if not enabled:
            return self._recover(pools, targets)
        threshold = slo.resource_used_threshold_with_be or ResourceThresholdStrategy()
        if not pods:
            return self._decide(Action.SKIP, "no pods known yet", {}, reason="no_pods")
        split = helpers.split_usage(helpers.cpu_usage(self.options, listed, self._series), listed, non_be,
                                    self._series)
        if split is None:
            return self._decide(Action.SKIP, "no fresh node CPU sample (is the NodeResource collector running?)", {},
                                reason="no_node_sample")
        apps = host_app_cpu(self.options, slo.host_applications)
        suppress = calc.suppress_milli(
            node.cpu_count,
            threshold.cpu_suppress_threshold_percent if threshold.cpu_suppress_threshold_percent is not None
            else DEFAULT_THRESHOLD_PERCENT,
            split.matched + apps.non_be, max(split.system - apps.total, 0.0), informer.reservation().cpu_milli / 1000,
            threshold.cpu_suppress_min_percent)
        self.options.metrics.be_suppress_ls_used_cores(split.matched)
        numbers = _suppress_numbers(suppress, split.node, pools)
        if apps.by_app:
            numbers.update(host_app_ls_used_cores=apps.non_be, host_app_used_cores=dict(apps.by_app))
        if not pools.allowed:
            return self._decide(Action.SKIP, "no CPU left for BE: every CPU is an LSE pod's or reserved", numbers,
                                reason="no_cpu_for_be")
        if targets.left_alone:
            numbers["left_alone"] = list(targets.left_alone)
        if not targets.roots:
            return self._decide(Action.SKIP, "no BE cgroup to suppress: no BE workload is configured and no BE pod was "
                                        f"found under {helpers.be_qos_dir(self.options)}{_left_alone_text(targets)}",
                                numbers, reason="no_be_cgroup")
        if threshold.cpu_suppress_policy == CFS_QUOTA:
            return self._by_quota(suppress, pools, numbers, targets)
        return self._by_cpuset(suppress, pools, numbers, targets)

    def _split_pools(self, node: NodeInfo, listed: object, pods: list[PodMeta], excluded: frozenset[int]) -> Pools:
        """:func:`split_pools`, again only when the node, the informer's pod list (the same object until a pod
        changes) or the excluded CPUs did: it parses every pod's resource-status annotation."""
        last = self._pools
        if last is not None and last[0] is node and last[1] is listed and last[2] == excluded:
            return last[3]
        pools = split_pools(node, pods, excluded)
        self._pools = (node, listed, excluded, pools)
        return pools

    def _be_pod_dirs(self, be_dir: str) -> frozenset[str]:
        """The cgroup directories of the BE pods and containers the informer knows, below ``be_dir``; worked
        out again only when the pod list (the same object until a pod changes) or ``be_dir`` did."""
        listed = self.options.informer.pods()
        last = self._be_pods
        if last is not None and last[0] is listed and last[1] == be_dir:
            return last[2]
        dirs = frozenset(d for pod in listed if pod.cgroup_dir.startswith(be_dir + "/")
                         for d in (pod.cgroup_dir, *(c.cgroup_dir for c in pod.containers)))
        self._be_pods = (listed, be_dir, dirs)
        return dirs

    # ------------------------------------------------------------------------------------------ policies

    def _by_cpuset(self, suppress: calc.Suppress, pools: Pools, numbers: dict[str, Any],
                   targets: Targets) -> Decision:
        currents, unreadable = self._read_roots(CPUSET_CPUS, targets)
        if not currents:
            return self._decide(Action.SKIP, f"cannot read BE's cpuset in {'; '.join(unreadable)}", numbers,
                               reason="be_cpuset_unreadable")
        allowed = pools.allowed
        # An empty cpuset.cpus (a fresh v2 cgroup) means "all of the parent's": count it as every CPU BE
        # may use, so the growth limit does not start BE from zero.  With several BE cgroups BE grows
        # from the narrowest, so a workload that just appeared with every CPU does not widen the others.
        current = min(currents.values(), key=lambda cpus: len(cpus) or len(allowed))
        static = self._kubelet.static and targets.besteffort
        if static and self._static_cpus is not None:
            current = self._static_cpus
        current_size = len(current) or len(allowed)
        node_cpus = len(self.options.informer.node().processors())
        count = calc.cpuset_count(suppress.milli, self.options.config.be_min_cpuset_cpus, current_size, node_cpus,
                                  len(allowed))
        cpus = choose(count.cpus, pools)
        text = format_cpulist(cpus)
        numbers.update(policy=CPUSET, be_cpus=len(cpus), be_cpuset=text, wanted_cpus=count.wanted,
                       limited_by=count.limited_by, previous_cpuset=format_cpulist(current),
                       min_cpus=self.options.config.be_min_cpuset_cpus, growth_limit=calc.growth_limit(node_cpus))
        _note_targets(numbers, targets, currents, unreadable)
        if not cpus:
            return self._decide(Action.SKIP, f"no CPUs could be chosen for BE ({count.cpus} wanted)", numbers,
                               reason="no_cpus_chosen")
        be_dir = helpers.be_qos_dir(self.options)
        wide = format_cpulist(allowed) if static else ""
        self._forget_drifted(CPUSET_CPUS, {root: (format_cpulist(value), wide if static and root == be_dir else text)
                                             for root, value in currents.items()})
        updates = self._cpuset_batch(targets, text, f"{NAME}: BE limited to {_cpus(len(cpus))}", wide)
        # Every BE cgroup with a quota, including one the cpuset cannot reach (on v1 systemd makes no
        # cpuset cgroup for a unit): a quota left from the cfsQuota policy must not stay in force.
        updates += [CgroupUpdate(CPU_CFS_QUOTA, root, calc.UNSET_QUOTA,
                                 f"{NAME}: recover BE quota (cpuset policy in use)")
                    for root in targets.roots if root not in self._quota_recovered and self._has_quota(root)]
        results = self.options.executor.apply(updates)
        self._quota_recovered.update(r.update.rel_dir for r in results if r.update.resource is CPU_CFS_QUOTA and r.ok)
        self._static_cpus = cpus if static else None
        self.options.metrics.be_suppress_cores(CPUSET, float(len(cpus)))
        per_container = ""
        if static:
            numbers["be_parent_cpuset"] = wide
            per_container = f" per container (kubelet static policy; besteffort and pod cgroups keep {wide})"
        summary = (f"BE limited to {_cpus(len(cpus))} (cpuset {text}){per_container}{_where(targets, currents)}: "
                   f"{_usage_text(suppress)}{_limit_text(count, numbers)}")
        summary += _notes(targets, unreadable) + self._failures(results, numbers)
        return self._decide(Action.SUPPRESS, summary, numbers)

    def _by_quota(self, suppress: calc.Suppress, pools: Pools, numbers: dict[str, Any],
                  targets: Targets) -> Decision:
        self._static_cpus = None
        read, unreadable = self._read_roots(CPU_CFS_QUOTA, targets)
        if not read:
            return self._decide(Action.SKIP, f"cannot read BE's cfs quota in {'; '.join(unreadable)}", numbers,
                               reason="be_quota_unreadable")
        currents = {root: int(value) for root, value in read.items()}
        roots = list(currents)
        # BE's quota is the sum of its cgroups'; one unlimited cgroup leaves BE unlimited.
        unlimited = any(value < 0 for value in currents.values())
        current = calc.UNSET_QUOTA if unlimited else sum(currents.values())
        node_cpus = self.options.informer.node().cpu_count
        plan = calc.cfs_quota_plan(suppress.milli, current, node_cpus, len(roots) * calc.BE_MIN_QUOTA_US)
        shares = dict(zip(roots, calc.split_quota(plan.quota, len(roots)), strict=True))
        numbers.update(policy=CFS_QUOTA, previous_quota_us=current, target_quota_us=plan.target,
                       quota_us=plan.quota, period_us=calc.CFS_PERIOD_US, min_delta_us=plan.min_delta,
                       max_increase_us=plan.max_increase, stepped=plan.stepped, skipped=plan.skip,
                       recovered_cpuset=format_cpulist(pools.allowed))
        _note_targets(numbers, targets, currents, unreadable)
        if not targets.only_besteffort:
            numbers["quota_shares_us"] = dict(shares)
        # A skipped change keeps BE's total, but shares someone moved apart are evened out again.
        changing = [root for root in roots
                    if not plan.skip or (not unlimited and currents[root] != shares[root])]
        self._forget_drifted(CPU_CFS_QUOTA, {root: (currents[root], shares[root]) for root in changing})
        updates = [CgroupUpdate(CPU_CFS_QUOTA, root, shares[root],
                                f"{NAME}: BE quota {shares[root] / calc.CFS_PERIOD_US:.2f} cores") for root in changing]
        # Koordinator recovers the cpuset every round of the quota policy (recoverCPUSetIfNeed); the
        # executor skips unchanged values, and BE pods created since the last round get widened too.
        allowed = format_cpulist(pools.allowed)
        updates += self._cpuset_batch(targets, allowed, f"{NAME}: recover BE cpuset (cfsQuota policy in use)")
        results = self.options.executor.apply(updates)
        self._quota_recovered.clear()
        notes = _notes(targets, unreadable)
        if plan.skip:
            evened = f"; shares evened out over {len(roots)} BE cgroups" if changing else ""
            summary = (f"BE quota kept at {current} us: target {plan.target} us differs by less than 1% of the "
                       f"node ({plan.min_delta:.0f} us); {_usage_text(suppress)}{evened}")
            return self._decide(Action.NONE, summary + notes + self._failures(results, numbers), numbers)
        self.options.metrics.be_suppress_cores(CFS_QUOTA, plan.quota / calc.CFS_PERIOD_US)
        step = f"; growth limited to +{plan.max_increase:.0f} us per round" if plan.stepped else ""
        summary = (f"BE quota {plan.quota} us per {calc.CFS_PERIOD_US} us ({plan.quota / calc.CFS_PERIOD_US:.2f} "
                   f"cores){_split_text(targets, shares)}: {_usage_text(suppress)}{step}")
        return self._decide(Action.SUPPRESS, summary + notes + self._failures(results, numbers), numbers)

    def _recover(self, pools: Pools, targets: Targets) -> Decision:
        """Undo both policies in every BE cgroup: the cpuset back to every allowed CPU, the quota to -1."""
        self._static_cpus = None
        allowed = format_cpulist(pools.allowed)
        numbers: dict[str, Any] = {"recovered_cpuset": allowed, "excluded_cpus": format_cpulist(pools.excluded)}
        if not targets.roots:
            return self._decide(Action.NONE, "no BE cgroup to recover", numbers)
        if not targets.only_besteffort:
            numbers["targets"] = list(targets.roots)
        # With every CPU exclusive there is nothing to give back (and an empty cpuset is refused).
        owner = f"{NAME}: recover BE cpuset (suppress disabled)"
        updates = self._cpuset_batch(targets, allowed, owner) if allowed else []
        updates += [CgroupUpdate(CPU_CFS_QUOTA, root, calc.UNSET_QUOTA, f"{NAME}: recover BE quota (suppress "
                                                                        "disabled)")
                    for root in targets.roots if root not in self._quota_recovered]
        results = self.options.executor.apply(updates)
        self._quota_recovered.update(r.update.rel_dir for r in results if r.ok and r.update.resource is CPU_CFS_QUOTA)
        where = "" if targets.only_besteffort else f" in {', '.join(targets.roots)}"
        summary = f"BE recovered{where}: cpuset {allowed or '(no cgroups)'}, cfs quota unlimited"
        return self._decide(Action.RECOVER, summary + self._failures(results, numbers), numbers)

    def _read_roots(self, resource: CgroupFile, targets: Targets) -> tuple[dict[str, Any], list[str]]:
        """``resource`` of each target root that can be read, and ``<root>: why`` for the others (a
        systemd unit that is not running has no cgroup; on v1 systemd never makes a unit's cpuset one)."""
        values: dict[str, Any] = {}
        unreadable: list[str] = []
        for root in targets.roots:
            try:
                values[root] = self.options.reader.read(resource, root)
            except _READ_ERRORS as exc:
                unreadable.append(f"{root}: {exc}")
        return values, unreadable

    def _has_quota(self, root: str) -> bool:
        """The cgroup has a quota file: one that does not (a unit not running) has nothing to recover,
        and writing to it would fail every round."""
        try:
            return os.path.exists(self.options.reader.path(CPU_CFS_QUOTA, root))
        except _READ_ERRORS:
            return False

    def _forget_drifted(self, resource: CgroupFile, values: dict[str, tuple[Any, Any]]) -> None:
        """Makes the executor write a root whose file holds something else than what this round wants
        (root -> (read, wanted)), even if it wrote that value moments ago: a workload's cgroup re-created
        by a restart starts unlimited, and waiting out the executor's rewrite period would leave it so."""
        for root, (read, wanted) in values.items():
            if read != wanted:
                self.options.executor.forget(self.options.reader.path(resource, root))

    # ------------------------------------------------------------------------------------------ helpers

    def be_dirs(self, be_dir: str, cpus: str) -> tuple[str, ...]:
        """The besteffort directory, its pod directories and their container directories as found in the
        cpuset hierarchy (Koordinator ``GetBECPUSetPathsByMaxDepth``): the tree, not the pod list, so
        sandbox containers and pods the informer has not seen yet are narrowed too, without which the
        kernel refuses to shrink their parents (EBUSY).  Empty when the besteffort cgroup is gone.

        The walk costs a directory listing per BE pod, most of a round over 1,000 containers, so the
        last one is reused while the cpuset to write, the BE pods and containers the informer knows
        and the besteffort directory stay the same, for at most the executor's forced-rewrite period."""
        key = (be_dir, cpus, self._be_pod_dirs(be_dir))
        now = self.options.clock()
        last = self._be_tree
        if last is not None and last[0] == key and now - last[1] < self.options.config.resource_force_update_seconds:
            return last[2]
        dirs = self._walk_be_tree(be_dir)
        self._be_tree = (key, now, dirs) if dirs else None
        return dirs

    def _cpuset_batch(self, targets: Targets, cpus: str, owner: str, wide: str = "") -> list[CgroupUpdate]:
        """``cpus`` for every BE directory (with ``wide``, kubelet's static policy: ``wide`` for besteffort
        and its pods, ``cpus`` for the containers, see :mod:`.kubelet_policy`), none for a directory of a
        container kubelet pinned or above or below one; the same update objects as last round while
        nothing changed (the executor skips them as unchanged anyway, building them again is most of a
        steady round)."""
        dirs = self.be_dirs(helpers.be_qos_dir(self.options), cpus) if targets.besteffort else ()
        trees = (*targets.workload_dirs, *(targets.host_app_dirs if targets.besteffort else ()))
        if trees:
            # Workload and host-application trees are small and change under their own control (a service
            # making sub-cgroups): walked every round, never cached.
            seen = set(dirs)
            extra = [d for root in trees for d in self._walk_tree(root) if d not in seen]
            dirs = (*dirs, *dict.fromkeys(extra))
        pinned = self._kubelet.pinned_dirs
        key = (cpus, owner, wide, pinned)
        last = self._last_batch
        if last is None or (last[0] is not dirs and last[0] != dirs) or last[1] != key:
            updates = (static_updates(dirs, helpers.be_qos_dir(self.options), cpus, wide, owner) if wide
                       else cpuset_updates(dirs, cpus, owner))
            kept, left = without_pinned(updates, pinned)
            last = self._last_batch = (dirs, key, tuple(kept), tuple(left))
        self._left_pinned = last[3]
        return list(last[2])

    def _walk_tree(self, root: str) -> list[str]:
        """``root`` and every directory below it in the cpuset hierarchy (empty when it does not exist)."""
        try:
            top = os.path.dirname(self.options.reader.path(CPUSET_CPUS, root))
        except _READ_ERRORS:
            return []
        if not os.path.isdir(top):
            return []
        dirs = [root]
        for directory, subdirs, _files in os.walk(top):
            subdirs.sort()
            below = os.path.relpath(directory, top)
            prefix = root if below == "." else f"{root}/{below}"
            dirs += [f"{prefix}/{d}" for d in subdirs]
        return dirs

    def _walk_be_tree(self, be_dir: str) -> tuple[str, ...]:
        try:
            root = os.path.dirname(self.options.reader.path(CPUSET_CPUS, be_dir))
        except _READ_ERRORS:
            return ()
        if not os.path.isdir(root):
            return ()
        dirs = [be_dir]
        for pod in _subdirs(root):
            dirs.append(f"{be_dir}/{pod}")
            dirs += [f"{be_dir}/{pod}/{c}" for c in _subdirs(os.path.join(root, pod))]
        return tuple(dirs)

    def _failures(self, results: Sequence[Result], numbers: dict[str, Any]) -> str:
        """The summary's tail for writes that did not land (in ``numbers`` too); logged once per streak of
        the same files failing the same way, and once when every write lands again."""
        failed = _failed_writes(results)
        if not failed:
            self._write_failures.ok("cpusuppress writes succeed again")
            return ""
        numbers["failed_writes"] = failed
        # The kind names the files and outcomes, not the values: a quota refused round after round is
        # refused with a new value each time.
        kind = ", ".join(sorted({f"{r.path or r.update.rel_dir}: {r.outcome.value}" for r in results if not r.ok}))
        self._write_failures.fail(kind, "cpusuppress writes failed", extra={"failed": failed})
        return f"; {len(failed)} of {len(results)} writes failed (first: {failed[0]})"

    def _decide(self, action: Action, summary: str, numbers: dict[str, Any], reason: str | None = None) -> Decision:
        """The round's decision with kubelet's CPU manager state, which every outcome depends on."""
        kubelet = self._kubelet
        if kubelet.static or kubelet.pinned or kubelet.error:
            numbers.update(kubelet_cpu_manager_policy=kubelet.policy,
                           kubelet_pinned_cpus=format_cpulist(kubelet.pinned_cpus))
        if kubelet.error:
            numbers["kubelet_state_error"] = kubelet.error
            summary += f"; kubelet's pinned CPUs are the last known: {kubelet.error}"
        if self._left_pinned:
            numbers["left_pinned"] = list(self._left_pinned)
        return self._decider(action, summary, numbers, reason=reason)


def reserved_cpus(options: Options) -> frozenset[int]:
    """CPUs the node reserves by id (kubelet ``reservedSystemCPUs``); a reservation by quantity only
    names none, and then only LSE CPUs are excluded."""
    return frozenset(options.informer.reservation().cpus)


def cpuset_updates(dirs: Sequence[str], cpus: str, owner: str) -> list[CgroupUpdate]:
    """One ``cpuset.cpus`` update per directory; the executor orders them (merged top-down, then final
    bottom-up) so the kernel never sees a child wider than its parent."""
    return [CgroupUpdate(CPUSET_CPUS, d, cpus, owner) for d in dirs]


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:  # vanished between listing and reading: the next round sees the new tree
        return []


def _note_targets(numbers: dict[str, Any], targets: Targets, read: dict[str, Any], unreadable: list[str]) -> None:
    if not targets.only_besteffort:
        numbers["targets"] = list(read)
    if unreadable:
        numbers["unreadable"] = list(unreadable)


def _where(targets: Targets, read: dict[str, Any]) -> str:
    return "" if targets.only_besteffort else f" in {', '.join(read)}"


def _split_text(targets: Targets, shares: dict[str, int]) -> str:
    if targets.only_besteffort:
        return ""
    if len(shares) == 1:
        return f" in {next(iter(shares))}"
    return f" split equally over {len(shares)} BE cgroups ({', '.join(f'{r} {q} us' for r, q in shares.items())})"


def _left_alone_text(targets: Targets) -> str:
    if not targets.left_alone:
        return ""
    return f"; left alone: {'; '.join(targets.left_alone)}"


def _notes(targets: Targets, unreadable: list[str]) -> str:
    """What the summary adds when part of BE could not be limited."""
    text = _left_alone_text(targets)
    if unreadable:
        text += f"; not limited, unreadable: {'; '.join(unreadable)}"
    return text


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


def _failed_writes(results: Sequence[Result]) -> list[str]:
    return [f"{r.path or r.update.rel_dir}: {r.outcome.value}{f' ({r.error})' if r.error else ''}"
            for r in results if not r.ok]
