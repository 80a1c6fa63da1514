"""Pods with a network bandwidth of their own (annotation ``koordinator.sh/networkQOS``, see
:mod:`koordlet.isolation.netqos.podlimit`) -> the plan's :class:`PodBandwidth` entries.

A malformed annotation, or a limit above the node's bandwidth, is that pod's problem only: the pod is
shaped with its class (or at the node's bandwidth) and a note names the pod, the annotation and what was
wrong, so one pod cannot stop the node's network QoS.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordlet.apis.pod import Pod
from koordlet.errors import ConfigError
from koordlet.isolation.netqos.podlimit import ANNOTATION_NETWORK_QOS, PodNetLimit, free_minor, pod_net_limit
from koordlet.resourceexecutor.netqos import PodBandwidth


@dataclass(frozen=True)
class OwnBandwidth:
    pod: Pod
    net_class: str
    limit: PodNetLimit


def own_limit(pod: Pod, notes: list[str]) -> PodNetLimit | None:
    """The pod's limits when it has any, else None (a bad annotation: None and a note)."""
    try:
        limit = pod_net_limit(pod.key, pod.annotations)
    except ConfigError as exc:
        notes.append(f"{exc}; the pod is shaped with its class")
        return None
    return limit if limit is not None and limit.limited else None


def pod_bandwidths(own: list[OwnBandwidth], total: int, notes: list[str]) -> tuple[PodBandwidth, ...]:
    """One entry per pod, minors from the pod UIDs (first come by UID keeps its own on a collision)."""
    taken: set[int] = set()
    result = []
    for entry in sorted(own, key=lambda e: e.pod.uid):
        pod = entry.pod
        values = {}
        for name in ("egress_bps", "ingress_bps"):
            value = getattr(entry.limit, name)
            if value > total:
                notes.append(f"pod {pod.key}: {ANNOTATION_NETWORK_QOS} {name.split('_')[0]} limit {value} bps is "
                             f"above the node's {total} bps; capped")
                value = total
            values[name] = value
        minor = free_minor(pod.uid, taken)
        taken.add(minor)
        result.append(PodBandwidth(pod.key, minor, entry.net_class, values["egress_bps"], values["ingress_bps"],
                                   tuple(sorted(pod.ips))))
    return tuple(result)
