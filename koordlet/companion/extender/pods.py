"""What the plugin reads of a ``v1.Pod`` (requests, limits, priority class, assignment time) and upstream's
``DefaultEstimator``: the usage a pod is expected to add to a node."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import (
    RESOURCE_BATCH_CPU,
    RESOURCE_BATCH_MEMORY,
    RESOURCE_MID_CPU,
    RESOURCE_MID_MEMORY,
    PriorityClass,
    QoSClass,
    pod_qos,
    priority_class,
)
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric import parse_time
from koordlet.apis.quantity import int_value, milli_value
from koordlet.companion.extender.args import CPU, MEMORY
from koordlet.errors import ParseError
from koordlet.system.kubepaths import KubeQoS

DEFAULT_MILLI_CPU_REQUEST: Final = 250
"""Estimate of a pod that sets neither a CPU request nor a limit (upstream ``DefaultMilliCPURequest``)."""
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
"""Estimate of a pod that sets neither a memory request nor a limit (``DefaultMemoryRequest``, 200 MiB)."""


def _round_half_away(value: float) -> int:
    """Go's ``math.Round`` for a non-negative float (Python's ``round`` rounds half to even)."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the plugin needs of a ``v1.Pod``, parsed once."""

    uid: str
    namespace: str
    name: str
    priority: PriorityClass
    """``GetPodPriorityClassWithDefault``: label, else priority band, else PROD (BATCH for BE pods)."""
    daemonset: bool
    requests: Mapping[str, int]
    """Pod requests (containers, init containers, overhead) in milli-cores for CPU, units otherwise."""
    limits: Mapping[str, int]
    node_name: str = ""
    scheduled_time: float | None = None
    """``lastTransitionTime`` of a true ``PodScheduled`` condition."""
    terminated: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def quantity_value(resource: str, text: Any, where: str) -> int:
    """A quantity in the plugin's unit for ``resource``: milli-cores for CPU, plain units otherwise."""
    if not isinstance(text, str | int | float) or isinstance(text, bool):
        raise ParseError(f"{where}: expected a quantity, got {text!r}")
    return milli_value(text) if resource == CPU else int_value(text)


def _resource_list(obj: Any, where: str) -> dict[str, int]:
    return {str(name): quantity_value(str(name), quantity, f"{where}.{name}")
            for name, quantity in gojson.mapping(obj, where).items()}


def _add(into: dict[str, int], values: Mapping[str, int]) -> None:
    for name, value in values.items():
        into[name] = into.get(name, 0) + value


def _max_into(into: dict[str, int], values: Mapping[str, int]) -> None:
    for name, value in values.items():
        if value > into.get(name, 0):
            into[name] = value


def _pod_resources(spec: Mapping[str, Any], key: str, where: str) -> dict[str, int]:
    """``resourcehelper.PodRequests`` / ``PodLimits`` (without pod-level resources): the sum over
    containers, raised to the largest init container (restartable sidecars run alongside everything
    started after them), plus the pod overhead."""
    total: dict[str, int] = {}
    for i, container in enumerate(gojson.array(member(spec, "containers"), f"{where}.containers")):
        resources = gojson.mapping(member(gojson.mapping(container, f"{where}.containers[{i}]"), "resources"),
                                   f"{where}.containers[{i}].resources")
        _add(total, _resource_list(member(resources, key), f"{where}.containers[{i}].resources.{key}"))
    init_max: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for i, container in enumerate(gojson.array(member(spec, "initContainers"), f"{where}.initContainers")):
        container = gojson.mapping(container, f"{where}.initContainers[{i}]")
        resources = gojson.mapping(member(container, "resources"), f"{where}.initContainers[{i}].resources")
        values = _resource_list(member(resources, key), f"{where}.initContainers[{i}].resources.{key}")
        if member(container, "restartPolicy") == "Always":
            _add(total, values)
            _add(sidecars, values)
            _max_into(init_max, sidecars)
        else:
            running = dict(values)
            _add(running, sidecars)
            _max_into(init_max, running)
    _max_into(total, init_max)
    overhead = _resource_list(member(spec, "overhead"), f"{where}.overhead")
    if key == "requests":
        _add(total, overhead)
    else:
        # PodLimits adds the overhead only to resources that have a limit.
        _add(total, {name: value for name, value in overhead.items() if total.get(name)})
    return total


def parse_pod(obj: Any, where: str = "Pod") -> PodInfo:
    """Parses a ``v1.Pod`` object; raises ParseError naming the field path."""
    pod = gojson.mapping(obj, where)
    if not pod:
        raise ParseError(f"{where}: missing")
    metadata = gojson.mapping(member(pod, "metadata"), f"{where}.metadata")
    spec = gojson.mapping(member(pod, "spec"), f"{where}.spec")
    status = gojson.mapping(member(pod, "status"), f"{where}.status")
    labels = gojson.mapping(member(metadata, "labels"), f"{where}.metadata.labels")
    requests = _pod_resources(spec, "requests", f"{where}.spec")
    limits = _pod_resources(spec, "limits", f"{where}.spec")

    raw_priority = member(spec, "priority")
    priority = priority_class(raw_priority if isinstance(raw_priority, int) else None,
                              {str(k): str(v) for k, v in labels.items()})
    if priority is PriorityClass.NONE:
        # GetPodQoSClassWithDefault, then prod for everything but BE.
        kube_qos_text = member(status, "qosClass")
        try:
            kube_qos = KubeQoS(kube_qos_text) if kube_qos_text else None
        except ValueError:
            kube_qos = None
        if kube_qos is None:
            besteffort = not any(requests.get(r) or limits.get(r) for r in (CPU, MEMORY))
            kube_qos = KubeQoS.BESTEFFORT if besteffort else KubeQoS.BURSTABLE
        qos = pod_qos({str(k): str(v) for k, v in labels.items()}, kube_qos)
        priority = PriorityClass.BATCH if qos is QoSClass.BE else PriorityClass.PROD

    owners = gojson.array(member(metadata, "ownerReferences"), f"{where}.metadata.ownerReferences")
    daemonset = any(isinstance(o, Mapping) and member(o, "kind") == "DaemonSet" for o in owners)
    scheduled: float | None = None
    for condition in gojson.array(member(status, "conditions"), f"{where}.status.conditions"):
        if (isinstance(condition, Mapping) and member(condition, "type") == "PodScheduled"
                and member(condition, "status") == "True"):
            text = member(condition, "lastTransitionTime")
            if isinstance(text, str) and text:
                try:
                    scheduled = parse_time(text)
                except ValueError as exc:
                    raise ParseError(f"{where}.status.conditions: {exc}") from None
    namespace = str(member(metadata, "namespace") or "")
    name = str(member(metadata, "name") or "")
    return PodInfo(
        uid=str(member(metadata, "uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        priority=priority,
        daemonset=daemonset,
        requests=requests,
        limits=limits,
        node_name=str(member(spec, "nodeName") or ""),
        scheduled_time=scheduled,
        terminated=member(status, "phase") in ("Succeeded", "Failed"),
    )


_TRANSLATED: Final = {
    PriorityClass.BATCH: {CPU: RESOURCE_BATCH_CPU, MEMORY: RESOURCE_BATCH_MEMORY},
    PriorityClass.MID: {CPU: RESOURCE_MID_CPU, MEMORY: RESOURCE_MID_MEMORY},
}
_CPU_LIKE: Final = frozenset({CPU, RESOURCE_BATCH_CPU})
_MEMORY_LIKE: Final = frozenset({MEMORY, RESOURCE_BATCH_MEMORY})


def estimate_pod(pod: PodInfo, factors: Mapping[str, int]) -> tuple[int, int]:
    """Upstream ``DefaultEstimator.EstimatePod`` for CPU (milli-cores) and memory (bytes).

    A batch or mid pod is estimated on its extended resources (``kubernetes.io/batch-cpu``...), as
    ``TranslateResourceNameByPriorityClass`` does; a free pod has no such resource and estimates 0."""
    out = [0, 0]
    for i, resource in enumerate((CPU, MEMORY)):
        if pod.priority in (PriorityClass.PROD, PriorityClass.NONE):
            real = resource
        else:
            real = _TRANSLATED.get(pod.priority, {}).get(resource, "")
        limit = pod.limits.get(real, 0)
        quantity = max(limit, pod.requests.get(real, 0))
        if quantity == 0:
            out[i] = (DEFAULT_MILLI_CPU_REQUEST if real in _CPU_LIKE
                      else DEFAULT_MEMORY_REQUEST if real in _MEMORY_LIKE else 0)
            continue
        estimated = _round_half_away(float(quantity) * float(factors.get(resource, 0)) / 100)
        out[i] = limit if 0 < limit < estimated else estimated
    return out[0], out[1]
