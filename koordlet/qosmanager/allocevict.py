"""Allocatable-based eviction, shared by cpuevict (``CPUAllocatableEvict``) and memoryevict
(``MemoryAllocatableEvict``): Koordinator ``calculate{Milli,}ReleaseByAllocatableThresholdPercent``,
``isAllocatableThresholdConfigValid`` and ``getPodEvictInfoAndSortByAllocatable``.

The pods whose priority (with the class default) is at most ``allocatableEvictPriorityThreshold`` have their
requests summed per extended resource: a koord-batch pod asks for ``kubernetes.io/batch-cpu``/``batch-memory``,
a koord-mid pod for ``mid-cpu``/``mid-memory`` (``GetRequestTypeAndValueFromPod``).  Against the Node's
allocatable of that resource (the companion delivers the Node, :meth:`StatesInformer.kube_node`): when
requested / allocatable exceeds ``<cpu|memory>AllocatableEvictThresholdPercent``, release
requested - lower% x allocatable of that request; a resource the Node has no (or zero) allocatable of releases
everything requested.  The victims are the pods labelled ``koordinator.sh/eviction-enabled=true`` under the
priority threshold with a usage sample, ordered by eviction-priority annotation, priority, the
``koordinator.sh/priority`` label, then the largest request.

Two deliberate differences from upstream, both about pods that cannot help:

* Only the batch and mid resources are computed.  Upstream also sums plain ``cpu``/``memory`` requests of
  other classes under the threshold, but its own release function gives such pods nothing, so that shortage
  can never be covered and its walk would evict every candidate.
* Each resource is one task whose candidates ask for that resource, so a mid pod is not evicted to cover a
  batch shortage (upstream walks one list of all candidates until every resource is covered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from koordlet.apis.extension import (
    RESOURCE_BATCH_CPU,
    RESOURCE_BATCH_MEMORY,
    RESOURCE_MID_CPU,
    RESOURCE_MID_MEMORY,
    PriorityClass,
    QoSClass,
)
from koordlet.apis.pod import Pod
from koordlet.qosmanager import evictpick
from koordlet.qosmanager.evictpick import REQUEST, MakeCandidate, Task
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeinfo import KubeNodeInfo

CPU: Final = "cpu"
MEMORY: Final = "memory"
PRIORITY_MID_VALUE_MAX: Final = 7999
"""``PriorityMidValueMax``: the priority threshold may not reach koord-prod."""
REASON: Final = {CPU: "EvictPodByCPUAllocatable", MEMORY: "EvictPodByMemoryAllocatable"}
"""Koordinator names the eviction after the feature (``EvictReasonPrefix + feature``); named like the others."""

_RESOURCE: Final = {(PriorityClass.BATCH, CPU): RESOURCE_BATCH_CPU,
                    (PriorityClass.BATCH, MEMORY): RESOURCE_BATCH_MEMORY,
                    (PriorityClass.MID, CPU): RESOURCE_MID_CPU,
                    (PriorityClass.MID, MEMORY): RESOURCE_MID_MEMORY}
_QOS_CLASS: Final = {QoSClass.BE: PriorityClass.BATCH, QoSClass.NONE: PriorityClass.NONE}


def measure(resource: str) -> str:
    """The release account of ``resource``'s request.  batch-cpu shares BECPUEvict's (:data:`REQUEST`): upstream
    keeps one account per target and resource, so what BECPUEvict released counts for CPUAllocatableEvict."""
    return REQUEST if resource == RESOURCE_BATCH_CPU else f"request:{resource}"


def class_with_default(pod: Pod) -> PriorityClass:
    """``GetPodPriorityClassWithDefault``: the pod's priority class, else the one its QoS class implies."""
    band = pod.priority_class
    if band is PriorityClass.NONE:
        band = _QOS_CLASS.get(pod.qos, PriorityClass.PROD)
    return band


def pod_request(pod: Pod, kind: str) -> tuple[str, int] | None:
    """``GetRequestTypeAndValueFromPod`` for batch and mid pods: the extended resource and the summed container
    requests (milli-cores for CPU, bytes for memory; negatives count 0); None for the other classes."""
    resource = _RESOURCE.get((class_with_default(pod), kind))
    if resource is None:
        return None
    total = 0
    for container in pod.containers:
        r = container.requests
        value = {RESOURCE_BATCH_CPU: r.batch_cpu_milli, RESOURCE_BATCH_MEMORY: r.batch_memory_bytes,
                 RESOURCE_MID_CPU: r.mid_cpu_milli, RESOURCE_MID_MEMORY: r.mid_memory_bytes}[resource]
        total += max(value or 0, 0)
    return resource, total


def config_error(kind: str, threshold: int | None, lower: int | None, priority: int | None) -> str | None:
    """``isAllocatableThresholdConfigValid``: why the config cannot be used (None when it can)."""
    prefix = "cpuAllocatableEvict" if kind == CPU else "memoryAllocatableEvict"
    if threshold is None:
        return f"{prefix}ThresholdPercent is not set"
    if threshold < 0:
        return f"{prefix}ThresholdPercent {threshold} must be at least 0"
    if lower is None:
        return f"{prefix}LowerPercent is not set"
    if lower >= threshold:
        return f"{prefix}LowerPercent {lower} must be below {prefix}ThresholdPercent {threshold}"
    if priority is None:
        return "allocatableEvictPriorityThreshold is not set"
    if priority > PRIORITY_MID_VALUE_MAX:
        return (f"allocatableEvictPriorityThreshold {priority} must be at most {PRIORITY_MID_VALUE_MAX}: "
                "koord-prod pods are never evicted for allocatable")
    return None


@dataclass
class Release:
    """Per extended resource: requested by the pods under the priority threshold, the Node's allocatable
    (None: the Node has none), and what must be released."""

    requested: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int | None] = field(default_factory=dict)
    release: dict[str, int] = field(default_factory=dict)


def release(kind: str, pods: Sequence[PodMeta], node: KubeNodeInfo, threshold: int, lower: int,
            priority_threshold: int) -> Release:
    """What each extended resource must release (upstream counts every listed pod's request, as here)."""
    out = Release()
    for meta in pods:
        if evictpick.priority_with_default(meta.pod) > priority_threshold:
            continue
        request = pod_request(meta.pod, kind)
        if request is not None:
            out.requested[request[0]] = out.requested.get(request[0], 0) + request[1]
    for resource, requested in sorted(out.requested.items()):
        allocatable = node.allocatable_value(resource)
        out.allocatable[resource] = allocatable
        if not allocatable:
            out.release[resource] = requested
        elif requested / allocatable > threshold / 100:
            # Upstream's two spellings of one formula: CPU rq - lower% x alloc, memory (rq/alloc - lower%) x alloc.
            amount = (requested - lower / 100 * allocatable if kind == CPU
                      else (requested / allocatable - lower / 100) * allocatable)
            out.release[resource] = int(amount)
    return out


def amounts(pod: Pod, kind: str) -> dict[str, float]:
    """A candidate's release amounts for the allocatable accounts (its own resource only)."""
    request = pod_request(pod, kind)
    return {measure(request[0]): float(request[1])} if request is not None else {}


def tasks(kind: str, feature: str, plan: Release, pods: Sequence[PodMeta], sampled: Mapping[str, float],
          priority_threshold: int, candidate: MakeCandidate, ignored: list[str]) -> list[Task]:
    """One task per resource to release; candidates are the eviction-enabled pods under the priority threshold
    with a usage sample (``sampled``: by UID) that ask for that resource, largest request first within equal
    priorities."""
    out: list[Task] = []
    for resource, amount in sorted(plan.release.items()):
        if amount <= 0:
            continue
        key = measure(resource)
        asking = [m for m in pods if (pod_request(m.pod, kind) or ("", 0))[0] == resource]
        victims = evictpick.usage_victims(asking, sampled, priority_threshold, feature, candidate, ignored, by=key)
        allocatable = plan.allocatable.get(resource)
        requested = plan.requested[resource]
        share = (f"{requested / allocatable:.0%} of its allocatable {allocatable}" if allocatable
                 else "with no allocatable on the Node")
        message = f"{resource} requested {requested} is {share}: releasing {amount} of request"
        out.append(Task(feature, REASON[kind], key, float(amount), victims, message))
    return out

