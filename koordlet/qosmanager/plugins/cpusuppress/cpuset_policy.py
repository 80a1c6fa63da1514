"""Which CPUs BE keeps when its cpuset shrinks (Koordinator ``adjustByCPUSet``, ``calcBECPUSet`` and
``calculateBESuppressCPUSetPolicy``).

BE never gets an LSE pod's CPUs (they are exclusive) nor the node's reserved CPUs.  CPUs bound to LSR
pods may be shared with BE, so BE takes from the LSR and the remaining pools in proportion to their
sizes.  Within a pool BE takes whole hyper-thread pairs first, so its work does not sit on the sibling
of an LS thread, and goes round the NUMA node / socket buckets so no one node carries all of BE.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label, resource_status_cpus
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.node import CpuTopology, NodeInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pools:
    """The CPUs BE may use, split the way Koordinator splits them."""

    lsr: tuple[CpuTopology, ...]
    """Bound to LSR pods: BE may share them."""
    others: tuple[CpuTopology, ...]
    """Neither LSE, LSR nor reserved."""
    excluded: frozenset[int]
    """LSE and reserved CPUs: never BE's."""
    bad_annotations: tuple[str, ...] = field(default=())
    """``namespace/name: why`` for pods whose resource-status annotation could not be read."""

    @property
    def allowed(self) -> list[int]:
        return sorted(p.cpu for p in (*self.lsr, *self.others))


def pod_cpuset(pod: PodMeta) -> list[int]:
    """The CPUs ``scheduling.koordinator.sh/resource-status`` binds the pod to (empty without one);
    raises ValueError naming what is wrong with the annotation."""
    return resource_status_cpus(pod.pod.annotations)


def split_pools(node: NodeInfo, pods: Iterable[PodMeta], reserved: Iterable[int]) -> Pools:
    """LSR / other / excluded CPUs from the pods' resource-status cpusets and the reserved CPUs.

    The class is the raw ``koordinator.sh/qosClass`` label, as Koordinator's ``GetPodQoSClassRaw``:
    a Guaranteed pod without the label binds no CPUs of its own through Koordinator."""
    owner: dict[int, QoSClass] = {}
    bad: list[str] = []
    for pod in pods:
        try:
            cpus = pod_cpuset(pod)
        except ValueError as exc:
            bad.append(f"{pod.pod.key}: {exc}")  # logged by the strategy when the list changes, not every round
            continue
        qos = qos_from_label(pod.pod.labels.get(LABEL_QOS))
        for cpu in cpus:
            owner[cpu] = qos
    excluded = set(reserved)
    lsr: list[CpuTopology] = []
    others: list[CpuTopology] = []
    for proc in node.processors():
        if proc.cpu in excluded:
            continue
        pool = owner.get(proc.cpu)
        if pool is QoSClass.LSE:
            excluded.add(proc.cpu)
        elif pool is QoSClass.LSR:
            lsr.append(proc)
        else:
            others.append(proc)
    return Pools(tuple(lsr), tuple(others), frozenset(excluded), tuple(bad))


def choose(count: int, pools: Pools) -> list[int]:
    """``count`` CPUs for BE: from the LSR pool in proportion to its share of the allowed CPUs (rounded
    down), the rest from the other pool; sorted."""
    total = len(pools.lsr) + len(pools.others)
    if count <= 0 or total == 0:
        return []
    from_lsr = count * len(pools.lsr) // total
    chosen = pick(from_lsr, pools.lsr) if from_lsr > 0 else []
    if count - from_lsr > 0:
        chosen += pick(count - from_lsr, pools.others)
    return sorted(chosen)


def pick(count: int, cpus: Sequence[CpuTopology]) -> list[int]:
    """``calculateBESuppressCPUSetPolicy``: ``count`` CPUs of ``cpus``, hyper-thread pairs first,
    going round the (NUMA node, socket) buckets largest first; then single CPUs, continuing the round
    where the pairs stopped.  Empty when ``cpus`` holds fewer than ``count``."""
    if len(cpus) < count:
        # The strategy skips the round and logs that once per streak.
        log.debug("not enough CPUs for BE", extra={"want": count, "have": len(cpus)})
        return []
    by_bucket: dict[tuple[int, int], list[CpuTopology]] = {}
    for proc in cpus:
        by_bucket.setdefault((proc.numa_node, proc.socket_id), []).append(proc)
    buckets = [sorted(b, key=lambda p: (p.core_id, p.cpu)) for b in by_bucket.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].cpu))
    chosen: list[int] = []
    used: set[int] = set()
    need = count
    i = 0
    previous = -1
    # Pairs: one HT pair per bucket per turn; stop when one full turn chose nothing.
    while need > 1:
        if i == 0:
            if previous == need:
                break
            previous = need
        bucket = buckets[i]
        for j in range(len(bucket) - 1):
            if bucket[j].cpu in used:
                continue
            if bucket[j].core_id == bucket[j + 1].core_id:
                pair = (bucket[j].cpu, bucket[j + 1].cpu)
                chosen += pair
                used.update(pair)
                need -= 2
                break
        i = (i + 1) % len(buckets)
    # Singles: one CPU per bucket per turn, starting where the pairs stopped.
    start = i
    previous = -1
    while need > 0:
        if i == start:
            if previous == need:
                break
            previous = need
        for proc in buckets[i]:
            if proc.cpu not in used:
                chosen.append(proc.cpu)
                used.add(proc.cpu)
                need -= 1
                break
        i = (i + 1) % len(buckets)
    return chosen
