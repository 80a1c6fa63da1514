"""What one cpuburst round works on: the containers of a pod as its spec describes them (prepared once
per pod object), the plan for each container and pod, and the round's tally."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from koordlet.metriccache.cache import labels_of
from koordlet.qosmanager.plugins.cpuburst import calc
from koordlet.qosmanager.plugins.cpuburst.calc import Operation
from koordlet.resourceexecutor import CgroupUpdate
from koordlet.statesinformer.framework import PodMeta


@dataclass(frozen=True, slots=True)
class Slot:
    """A container with a CPU limit, an id and a cgroup, as far as the pod spec goes."""

    name: str
    cid: str
    cgroup_dir: str
    limit_milli: int
    base: int
    labels: tuple[tuple[str, str], ...]
    """Its metric-cache labels."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a pod's round needs from its spec, worked out once per PodMeta object (the informer hands
    out the same object until the pod changes): rounds run every second over every container."""

    meta: PodMeta
    slots: tuple[Slot, ...]
    bases: tuple[tuple[str, int], ...]
    """(name, base quota) of every spec container with a CPU limit, started or not."""
    whole: bool
    """Every container has a CPU limit, so kubelet gave the pod cgroup a quota too."""


def prepare(meta: PodMeta) -> Prepared:
    specs = {c.name: c for c in meta.pod.containers}
    slots = []
    for cmeta in meta.containers:
        spec = specs.get(cmeta.name)
        limit = (spec.limits.cpu_milli or 0) if spec is not None else 0
        if limit > 0 and cmeta.container_id and cmeta.cgroup_dir:
            slots.append(Slot(cmeta.name, cmeta.container_id, cmeta.cgroup_dir, limit, calc.base_quota(limit),
                               labels_of(container=cmeta.container_id)))
    bases = tuple((c.name, calc.base_quota(c.limits.cpu_milli or 0)) for c in meta.pod.containers
                  if (c.limits.cpu_milli or 0) > 0)
    return Prepared(meta, tuple(slots), bases, len(bases) == len(meta.pod.containers))


@dataclass(slots=True)
class ContainerPlan:
    """One container's plan for this round."""

    pod: PodMeta
    slot: Slot
    current: int
    target: int
    operation: Operation = Operation.REMAIN
    """After the node's adjustment."""
    wanted: Operation = Operation.REMAIN
    """Before it."""
    burst: int | None = None
    """The burst to write; None: leave the file alone."""
    ceil: int = 0
    throttled: float | None = None
    usage_percent: int | None = None
    tokens: int | None = None
    token_capacity: int | None = None
    quota_ok: bool = True


@dataclass
class PodPlan:
    meta: PodMeta
    containers: list[ContainerPlan]
    current: int
    target: int
    burst: int | None = None


@dataclass
class Round:
    """What one round plans and what came of it."""

    now: float
    updates: list[CgroupUpdate] = field(default_factory=list)
    subjects: list[tuple[str, ContainerPlan | PodPlan]] = field(default_factory=list)
    containers: list[ContainerPlan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    bad_annotations: list[str] = field(default_factory=list)
    gone: int = 0
    scaled_up: int = 0
    scaled_down: int = 0
    reset: int = 0
    bursts_set: int = 0
    failures: list[str] = field(default_factory=list)
    failed_files: set[str] = field(default_factory=set)
    """``path: outcome`` of each failed write, without the value: the streak its log line is keyed on."""

    def add(self, kind: str, subject: ContainerPlan | PodPlan, update: CgroupUpdate) -> None:
        self.updates.append(update)
        self.subjects.append((kind, subject))


def undo(current: int, base: int) -> int:
    """Back to the base only from above: a quota below it (another owner's, or unlimited) is not ours."""
    return base if current > base else current


def change_numbers(c: ContainerPlan) -> dict[str, Any]:
    slot = c.slot
    change: dict[str, Any] = {
        "pod": c.pod.pod.key, "container": slot.name, "container_id": slot.cid, "base_us": slot.base, "ceil_us": c.ceil,
        "current_us": c.current, "target_us": c.target, "burst_us": c.burst, "operation": c.wanted.value,
        "final_operation": c.operation.value, "throttled_ratio": c.throttled}
    if c.tokens is not None:
        change.update(usage_percent=c.usage_percent, tokens=c.tokens, token_capacity=c.token_capacity)
    return change


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
