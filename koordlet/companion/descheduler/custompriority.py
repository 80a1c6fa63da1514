"""CustomPriority: move pods from expensive nodes to cheaper ones, tier by tier.

Upstream: ``pkg/descheduler/framework/plugins/custompriority/custom_priority.go`` (plugin),
``pkg/descheduler/apis/config/v1alpha2/types_custom_priority.go`` + ``defaults.go`` (arguments) and
``pkg/descheduler/apis/config/validation/validation_custom_priority.go`` (what the arguments must satisfy).

``evictionOrder`` lists node tiers from the most expensive to the cheapest; a node belongs to the first tier
whose ``nodeSelector`` matches it.  Pods on a tier's nodes are evicted when they fit on a node of a later tier,
so the scheduler can put them there.

Where this differs from upstream, on purpose:

- the room a pod needs on a target (requests against allocatable minus the requests of the pods bound there,
  and the pod count) is checked in both modes whatever ``nodeFit`` says, and what a round moves onto a node is
  charged to it for the rest of the round; upstream's BestEffort checks fit only with ``nodeFit`` and never
  charges earlier moves, so it can evict more pods than the cheaper tiers can hold, which only stops them;
- DrainNode checks the evictor's per-node, per-namespace and per-round limits before it starts on a node, so a
  limit never leaves a node half drained; a node is uncordoned after a failed drain only when this plugin
  cordoned it, and the plugin's own ``dryRun`` cordons nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.nodeslo.fields import FieldSpec, JsonObject, bool_field, list_field, nested, show, str_field
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.cluster import CPU, MEMORY, PODS, NodeInfo, PodInfo, Snapshot
from koordlet.companion.descheduler.evictor import Evictor
from koordlet.companion.descheduler.framework import Handle, Namespaces
from koordlet.companion.descheduler.nodefit import insufficient_resources, node_fit_reasons, requested_on
from koordlet.companion.kube.client import KubeApiError
from koordlet.errors import ConfigError

NAME: Final = "CustomPriority"
ARGS_KIND: Final = "CustomPriorityArgs"

BEST_EFFORT: Final = "BestEffort"
"""Evict every candidate pod that fits somewhere in a cheaper tier (the default mode)."""
DRAIN_NODE: Final = "DrainNode"
"""Evict a source node's candidates only when all of them fit in cheaper tiers."""
MODES: Final = (BEST_EFFORT, DRAIN_NODE)

# Kubernetes' IsDNS1123Subdomain, which upstream validation applies to tier and pod-selector names.
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1123_SUBDOMAIN_MAX = 253


def _check_name(name: str | None, where: str) -> None:
    if not name:
        raise ConfigError(f"{where}: must not be empty")
    if len(name) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise ConfigError(f"{where}: must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
                          f"at most {_DNS1123_SUBDOMAIN_MAX} characters), got {show(name)}")


def _percent_map_field(json_name: str) -> Any:
    """A ``ResourceThresholds`` (resource name -> percentage 0..100)."""

    def parse(value: Any, path: str) -> Mapping[str, float]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: must be an object of resource name to percentage, got {show(value)}")
        out: dict[str, float] = {}
        for key, number in value.items():
            if isinstance(number, bool) or not isinstance(number, int | float) or not 0 <= number <= 100:
                raise ConfigError(f"{path}.{key}: must be a percentage between 0 and 100, got {show(number)}")
            out[str(key)] = float(number)
        return out

    return field(default=None, metadata={"spec": FieldSpec(json_name, parse, dict)})


def _namespaces_spec(json_name: str) -> Mapping[str, FieldSpec]:
    """Metadata of an ``evictableNamespaces`` (the descheduler's shared :class:`Namespaces`: include or
    exclude), for ``field(default=None, metadata=...)``."""

    def dump(value: Namespaces) -> dict[str, list[str]]:
        return {key: list(names) for key, names in (("include", value.include), ("exclude", value.exclude))
                if names}

    return {"spec": FieldSpec(json_name, Namespaces.from_json, dump)}


@dataclass(frozen=True)
class ResourcePriority(JsonObject):
    """One ``evictionOrder`` tier."""

    name: str | None = str_field("name")
    """The tier's name (a DNS-1123 subdomain, unique within ``evictionOrder``)."""
    node_selector: LabelSelector | None = field(default=None, metadata=nested("nodeSelector", LabelSelector))
    """The nodes of this tier (required)."""
    keep_threshold: Mapping[str, float] | None = _percent_map_field("keepThreshold")
    """Accepted and validated as upstream does; upstream's plugin does not use it yet, nor does this one."""
    reject_threshold: Mapping[str, float] | None = _percent_map_field("rejectThreshold")
    """Accepted and validated as upstream does; upstream's plugin does not use it yet, nor does this one."""

    def check(self, where: str) -> None:
        _check_name(self.name, f"{where}.name")
        if self.node_selector is None:
            raise ConfigError(f"{where}.nodeSelector: is required (tier {self.name!r} would select no node)")


@dataclass(frozen=True)
class PodSelector(JsonObject):
    """One ``podSelectors`` entry; a pod is a candidate when any entry's selector matches its labels."""

    name: str | None = str_field("name")
    """The entry's name (a DNS-1123 subdomain), for logs."""
    selector: LabelSelector | None = field(default=None, metadata=nested("selector", LabelSelector))
    """Pods to consider; an entry without a selector is ignored."""

    def check(self, where: str) -> None:
        _check_name(self.name, f"{where}.name")


@dataclass(frozen=True)
class CustomPriorityArgs(JsonObject):
    """``CustomPriorityArgs`` (descheduler/v1alpha2); defaults as upstream's ``SetDefaults_CustomPriorityArgs``
    are applied by :func:`parse_args`."""

    paused: bool | None = bool_field("paused")
    """Do nothing (default false)."""
    dry_run: bool | None = bool_field("dryRun")
    """Log the pods that would be evicted and the nodes that would be cordoned, change nothing (default false)."""
    evictable_namespaces: Namespaces | None = field(
        default=None, metadata=_namespaces_spec("evictableNamespaces"))
    """Namespaces whose pods may (include) or may not (exclude) be evicted."""
    node_selector: LabelSelector | None = field(default=None, metadata=nested("nodeSelector", LabelSelector))
    """Only these nodes take part, as sources or targets (absent: every node)."""
    pod_selectors: tuple[PodSelector, ...] | None = list_field("podSelectors", PodSelector)
    """Only pods matching one of these are candidates (absent: every pod)."""
    node_fit: bool | None = bool_field("nodeFit")
    """Also require a target to pass the pod's node selector/affinity, taints and cordon (default true)."""
    eviction_order: tuple[ResourcePriority, ...] | None = list_field("evictionOrder", ResourcePriority)
    """Tiers from the most expensive to the cheapest; at least two."""
    mode: str | None = str_field("mode")
    """``BestEffort`` (default) or ``DrainNode``."""
    auto_cordon: bool | None = bool_field("autoCordon")
    """In DrainNode mode, mark a source node unschedulable before draining it (default false)."""

    def check(self, where: str) -> None:
        tiers = self.eviction_order or ()
        if len(tiers) < 2:
            raise ConfigError(f"{where}.evictionOrder: needs at least 2 tiers, got {len(tiers)}")
        seen: set[str] = set()
        for index, tier in enumerate(tiers):
            if tier.name in seen:
                raise ConfigError(f"{where}.evictionOrder[{index}].name: duplicate tier name {tier.name!r}")
            seen.add(tier.name or "")
        if self.mode not in (None, "", *MODES):
            raise ConfigError(f"{where}.mode: must be one of {', '.join(MODES)}, got {show(self.mode)}")

    @property
    def tiers(self) -> tuple[ResourcePriority, ...]:
        return self.eviction_order or ()


def parse_args(obj: Mapping[str, Any] | None, where: str = ARGS_KIND) -> CustomPriorityArgs:
    """Decode, validate and default the plugin's ``args``; a :class:`ConfigError` names the bad field."""
    if obj is None:
        # Upstream's validation refuses arguments without tiers; absent args are the same mistake.
        raise ConfigError(f"{where}: the {NAME} plugin needs args with an evictionOrder of at least 2 tiers")
    args = CustomPriorityArgs.from_json(obj, where)
    return CustomPriorityArgs(
        paused=bool(args.paused),
        dry_run=bool(args.dry_run),
        evictable_namespaces=args.evictable_namespaces,
        node_selector=args.node_selector,
        pod_selectors=args.pod_selectors,
        node_fit=True if args.node_fit is None else args.node_fit,
        eviction_order=args.eviction_order,
        mode=args.mode or BEST_EFFORT,
        auto_cordon=bool(args.auto_cordon),
    )


def new_plugin(args: Mapping[str, Any] | None, handle: Handle) -> CustomPriority:
    """The registry's factory: parse ``args`` (ConfigError naming the field) and build the plugin."""
    return CustomPriority(parse_args(args), handle)


MAX_CONSECUTIVE_MISSES: Final = 5
"""BestEffort gives up on a source node after this many candidates in a row found no target: they are sorted
smallest first, so bigger ones will not fit either (upstream ``findEvictablePods``)."""


def _size_order(pod: PodInfo) -> tuple[int, int, str, str]:
    # Smallest requests first, so as many pods as possible fit (upstream sortPodsByRequestsAscending).
    return pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0), pod.namespace, pod.name


class _Ledger:
    """What each node is asked for this round: the requests of the pods bound to it, plus those of the pods
    this round has evicted to make them land there, so two sources never count on the same free room."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap
        self._requested: dict[str, dict[str, int]] = {}

    def requested(self, node: str) -> dict[str, int]:
        if node not in self._requested:
            self._requested[node] = requested_on(self._snap.pods_by_node.get(node, ()))
        return self._requested[node]

    def move(self, pod: PodInfo, node: str, count: int = 1) -> None:
        """Adds ``pod`` to what ``node`` is asked for (``count`` -1 takes it back)."""
        requested = self.requested(node)
        for name, value in pod.requests.items():
            if name != PODS:
                requested[name] = requested.get(name, 0) + count * value
        requested[PODS] = requested.get(PODS, 0) + count


@dataclass
class _Round:
    """What one balance call did, for its summary line."""

    evicted: dict[str, int] = field(default_factory=dict)
    """Pods evicted (or, in dry-run, that would be) per source tier."""
    drained: list[str] = field(default_factory=list)
    """Nodes whose every candidate was evicted in DrainNode mode."""


class CustomPriority:
    """The balance plugin; one instance serves every round."""

    name = NAME

    def __init__(self, args: CustomPriorityArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.log = handle.log
        self._pod_selectors = tuple(s.selector for s in args.pod_selectors or () if s.selector is not None)

    # ---------------------------------------------------------------------------------------- grouping

    def tiers(self, snap: Snapshot) -> list[tuple[str, list[NodeInfo]]]:
        """The tiers that have nodes, most expensive first, each with its nodes by name.  A node belongs to the
        first tier that selects it; nodes outside ``nodeSelector`` or every tier take no part."""
        members: dict[str, list[NodeInfo]] = {}
        for node in sorted(snap.nodes.values(), key=lambda n: n.name):
            if self.args.node_selector is not None and not self.args.node_selector.matches(node.labels):
                continue
            for tier in self.args.tiers:
                if tier.node_selector is not None and tier.node_selector.matches(node.labels):
                    members.setdefault(tier.name or "", []).append(node)
                    break
        return [(tier.name or "", members[tier.name or ""]) for tier in self.args.tiers if tier.name in members]

    def candidates(self, snap: Snapshot, node: NodeInfo, evictor: Evictor) -> list[PodInfo]:
        """The pods of ``node`` this plugin may move, smallest requests first."""
        out: list[PodInfo] = []
        namespaces = self.args.evictable_namespaces
        for pod in snap.pods_by_node.get(node.name, ()):
            if namespaces is not None and not namespaces.allows(pod.namespace):
                continue
            if self._pod_selectors and not any(s.matches(pod.labels) for s in self._pod_selectors):
                continue
            refusal = evictor.filter(pod)
            if refusal is not None:
                self.log.debug("CustomPriority: pod is not a candidate", extra={"pod": str(pod), "reason": refusal})
                continue
            out.append(pod)
        out.sort(key=_size_order)
        return out

    # ---------------------------------------------------------------------------------------- placement

    def misfit(self, pod: PodInfo, node: NodeInfo, ledger: _Ledger) -> list[str]:
        """Why ``pod`` could not land on ``node`` now (empty: it could).  Room is checked whatever ``nodeFit``
        says, as upstream's DrainNode does: evicting a pod that has nowhere to go only stops it."""
        requested = ledger.requested(node.name)
        reasons = (node_fit_reasons(pod, node, requested) if self.args.node_fit
                   else insufficient_resources(pod, node, requested))
        # Upstream leaves the pod count out (pod requests never name "pods"); the scheduler does not.
        if PODS in node.allocatable and requested.get(PODS, 0) + 1 > node.allocatable[PODS]:
            reasons.append("too many pods")
        return reasons

    def place(self, pod: PodInfo, targets: Sequence[NodeInfo], ledger: _Ledger) -> NodeInfo | None:
        """The first target (cheaper tiers in order, nodes by name) that would take ``pod``."""
        for node in targets:
            reasons = self.misfit(pod, node, ledger)
            if not reasons:
                return node
            self.log.debug("CustomPriority: pod does not fit node",
                           extra={"pod": str(pod), "node": node.name, "reasons": "; ".join(reasons)})
        return None

    # ---------------------------------------------------------------------------------------- the round

    def balance(self, snap: Snapshot, evictor: Evictor) -> None:
        if self.args.paused:
            self.log.info("CustomPriority is paused and will do nothing")
            return
        tiers = self.tiers(snap)
        if len(tiers) < 2:
            self.log.debug("CustomPriority: fewer than two tiers with nodes, nothing can move",
                           extra={"tiers": len(tiers)})
            return
        ledger = _Ledger(snap)
        done = _Round()
        drain = self.args.mode == DRAIN_NODE
        for index, (tier, sources) in enumerate(tiers[:-1]):
            targets = [node for _, nodes in tiers[index + 1:] for node in nodes]
            for source in sources:
                if evictor.total_limit_reached():
                    self.log.info("CustomPriority: the round's eviction limit is reached")
                    self._summary(done, evictor)
                    return
                candidates = self.candidates(snap, source, evictor)
                if not candidates:
                    continue
                if drain:
                    moved = self._drain(tier, source, candidates, targets, ledger, evictor)
                    if moved == len(candidates):
                        done.drained.append(source.name)
                else:
                    moved = self._best_effort(tier, source, candidates, targets, ledger, evictor)
                if moved:
                    done.evicted[tier] = done.evicted.get(tier, 0) + moved
        self._summary(done, evictor)

    def _summary(self, done: _Round, evictor: Evictor) -> None:
        total = sum(done.evicted.values())
        if not total:
            self.log.info("CustomPriority: nothing to move to a cheaper tier")
            return
        # In dry-run, the evictions and drained nodes are what the round would have done.
        self.log.info("CustomPriority: round done", extra={
            "dry_run": self.args.dry_run or evictor.dry_run, "evictions": total,
            "evictions_per_tier": dict(done.evicted), "drained_nodes": list(done.drained)})

    def _evict(self, pod: PodInfo, target: str, tier: str, evictor: Evictor) -> bool:
        reason = f"CustomPriority: moving from tier {tier} to a cheaper tier (room on node {target})"
        if self.args.dry_run:
            # The plugin's own dryRun (upstream): the evictor is not asked, so its limits are not charged.
            self.log.info("CustomPriority dry-run: would evict pod",
                          extra={"pod": str(pod), "node": pod.node, "tier": tier, "target_node": target})
            return True
        return evictor.evict(pod, reason)

    def _best_effort(self, tier: str, source: NodeInfo, candidates: Sequence[PodInfo], targets: Sequence[NodeInfo],
                     ledger: _Ledger, evictor: Evictor) -> int:
        moved = misses = 0
        limits = evictor.limits
        for pod in candidates:
            if evictor.node_limit_reached(source.name) or evictor.total_limit_reached():
                break
            if limits.per_namespace is not None and evictor.namespace_evicted(pod.namespace) >= limits.per_namespace:
                continue
            target = self.place(pod, targets, ledger)
            if target is None:
                misses += 1
                if misses >= MAX_CONSECUTIVE_MISSES:
                    break
                continue
            misses = 0
            ledger.move(pod, target.name)
            if self._evict(pod, target.name, tier, evictor):
                moved += 1
            else:
                ledger.move(pod, target.name, -1)
        return moved

    def _limit_refusal(self, source: NodeInfo, candidates: Sequence[PodInfo], evictor: Evictor) -> str | None:
        """Why the evictor's limits would stop draining ``source`` part way (None: they would not).  Checked
        before anything is evicted, so a limit never leaves a node half drained."""
        limits = evictor.limits
        wanted = len(candidates)
        if limits.per_node is not None and evictor.node_evicted(source.name) + wanted > limits.per_node:
            return f"{wanted} candidates exceed the per-node eviction limit ({limits.per_node})"
        if limits.total is not None and evictor.total_evicted + wanted > limits.total:
            return f"{wanted} candidates exceed what the round's eviction limit ({limits.total}) has left"
        if limits.per_namespace is not None:
            per_namespace: dict[str, int] = {}
            for pod in candidates:
                per_namespace[pod.namespace] = per_namespace.get(pod.namespace, 0) + 1
            for namespace, count in sorted(per_namespace.items()):
                if evictor.namespace_evicted(namespace) + count > limits.per_namespace:
                    return (f"{count} candidates of namespace {namespace} exceed the per-namespace eviction limit "
                            f"({limits.per_namespace})")
        return None

    def _drain(self, tier: str, source: NodeInfo, candidates: Sequence[PodInfo], targets: Sequence[NodeInfo],
               ledger: _Ledger, evictor: Evictor) -> int:
        refusal = self._limit_refusal(source, candidates, evictor)
        if refusal is not None:
            self.log.info("CustomPriority: not draining node", extra={"node": source.name, "reason": refusal})
            return 0
        plan: list[tuple[PodInfo, str]] = []
        for pod in candidates:
            target = self.place(pod, targets, ledger)
            if target is None:
                for planned, planned_node in plan:
                    ledger.move(planned, planned_node, -1)
                self.log.info("CustomPriority: not draining node", extra={
                    "node": source.name, "pod": str(pod), "reason": "pod fits on no node of a cheaper tier"})
                return 0
            ledger.move(pod, target.name)
            plan.append((pod, target.name))
        cordoned = self._cordon(source) if self.args.auto_cordon else False
        for index, (pod, node_name) in enumerate(plan):
            if self._evict(pod, node_name, tier, evictor):
                continue
            # Upstream stops draining the node at the first refusal and lets it take pods again.
            for planned, planned_node in plan[index:]:
                ledger.move(planned, planned_node, -1)
            self.log.warning("CustomPriority: draining node stopped: evicting a pod failed",
                             extra={"node": source.name, "pod": str(pod)})
            if cordoned:
                self._set_unschedulable(source.name, False)
            return index
        return len(plan)

    def _cordon(self, node: NodeInfo) -> bool:
        """Marks ``node`` unschedulable so the scheduler does not put the evicted pods back; True when this
        plugin did it (a node someone else cordoned is left to them)."""
        if node.unschedulable:
            return False
        if self.args.dry_run:
            self.log.info("CustomPriority dry-run: would cordon node", extra={"node": node.name})
            return False
        return self._set_unschedulable(node.name, True)

    def _set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        try:
            self.handle.cordon(node, unschedulable)
        except KubeApiError as exc:
            # Upstream goes on draining when the cordon fails: the pods still fit elsewhere.
            self.log.error("CustomPriority: setting node unschedulable failed",
                           extra={"node": node, "unschedulable": unschedulable, "error": str(exc)})
            return False
        return True
