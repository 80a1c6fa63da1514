"""The slice of a Kubernetes Pod koordlet uses, parsed from kubelet's ``/pods`` (a v1 PodList)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ParseError
from koordlet.system.kubepaths import KubeQoS


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in milli-cores and memory in bytes; None where the spec sets nothing."""

    cpu_milli: int | None = None
    memory_bytes: int | None = None
    batch_cpu_milli: int | None = None
    batch_memory_bytes: int | None = None
    mid_cpu_milli: int | None = None
    """``kubernetes.io/mid-cpu`` (already milli-cores, like batch-cpu)."""
    mid_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    container_id: str
    """The runtime id with its scheme ("containerd://abc"), empty before the container starts."""
    requests: Resources = Resources()
    limits: Resources = Resources()


@dataclass(frozen=True, slots=True)
class Volume:
    """One ``spec.volumes`` entry, as far as block IO QoS needs it (``podvolume`` blocks)."""

    name: str
    claim_name: str = ""
    """``persistentVolumeClaim.claimName``; empty for other kinds."""
    csi: bool = False
    """A CSI ephemeral (inline) volume: kubelet mounts it under its own name."""


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    kube_qos: KubeQoS | None
    phase: str
    priority: int | None
    containers: tuple[Container, ...] = field(default=())
    node_name: str = ""
    creation_timestamp: str = ""
    priority_class_name: str = ""
    ips: tuple[str, ...] = ()
    """The pod's own addresses (``status.podIPs``, else ``status.podIP``), canonical text; empty for a
    host-network pod, whose "pod IP" is the node's and would put all host traffic in the pod's class."""
    deletion_timestamp: str = ""
    """Set once the pod is being deleted (an eviction granted, a delete): kubelet is stopping it."""
    volumes: tuple[Volume, ...] = ()
    """``spec.volumes`` (PVC and CSI ones by kind, for blkio ``podvolume``)."""

    @property
    def qos(self) -> QoSClass:
        return pod_qos(self.labels, self.kube_qos)

    @property
    def priority_class(self) -> PriorityClass:
        band = priority_class(self.priority, self.labels)
        if band is PriorityClass.NONE and self.priority is None and self.priority_class_name:
            # Not yet admitted: spec.priority is unset, but the class name says which band it will get.
            try:
                return PriorityClass(self.priority_class_name)
            except ValueError:
                pass
        return band

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def deleting(self) -> bool:
        return bool(self.deletion_timestamp)


def resources_from_json(spec: Any, where: str) -> Resources:
    """A Kubernetes resource list (``{"cpu": "500m", "kubernetes.io/batch-cpu": "1k"}``); ``where`` names it
    in errors."""
    if spec is None:
        return Resources()
    spec = gojson.mapping(spec, where)
    try:
        return Resources(
            cpu_milli=milli_value(spec["cpu"]) if "cpu" in spec else None,
            memory_bytes=int_value(spec["memory"]) if "memory" in spec else None,
            batch_cpu_milli=int_value(spec[RESOURCE_BATCH_CPU]) if RESOURCE_BATCH_CPU in spec else None,
            batch_memory_bytes=int_value(spec[RESOURCE_BATCH_MEMORY]) if RESOURCE_BATCH_MEMORY in spec else None,
            mid_cpu_milli=int_value(spec[RESOURCE_MID_CPU]) if RESOURCE_MID_CPU in spec else None,
            mid_memory_bytes=int_value(spec[RESOURCE_MID_MEMORY]) if RESOURCE_MID_MEMORY in spec else None,
        )
    except ParseError as exc:
        raise ParseError(f"{where}: {exc}") from None


def _pod_ips(spec: Mapping[str, Any], status: Mapping[str, Any], where: str) -> tuple[str, ...]:
    if spec.get("hostNetwork") is True:
        return ()
    entries = gojson.array(status.get("podIPs"), f"{where}: status.podIPs")
    raw: list[tuple[str, Any]] = [(f"status.podIPs[{i}].ip", e.get("ip") if isinstance(e, Mapping) else e)
                                  for i, e in enumerate(entries)]
    if not raw and status.get("podIP"):
        # Kubelets before dual-stack (v1.16) fill podIP only.
        raw = [("status.podIP", status.get("podIP"))]
    ips: list[str] = []
    for field_name, value in raw:
        try:
            ip = str(ipaddress.ip_address(value)) if isinstance(value, str) else None
        except ValueError:
            ip = None
        if ip is None:
            raise ParseError(f"{where}: {field_name} {value!r} is not an IP address")
        if ip not in ips:
            ips.append(ip)
    return tuple(ips)


def kube_qos_of(containers: list[Container]) -> KubeQoS | None:
    """Kubernetes' QoS rule, for pods whose status has no qosClass yet (pkg/apis/core/v1/helper/qos)."""
    if not containers:
        return None
    # Only cpu and memory count: a BE pod asking for kubernetes.io/batch-* is still BestEffort.
    if all(r.cpu_milli is None and r.memory_bytes is None for c in containers for r in (c.requests, c.limits)):
        return KubeQoS.BESTEFFORT
    for c in containers:
        limits = c.limits
        if limits.cpu_milli is None or limits.memory_bytes is None:
            return KubeQoS.BURSTABLE
        if c.requests.cpu_milli not in (None, limits.cpu_milli):
            return KubeQoS.BURSTABLE
        if c.requests.memory_bytes not in (None, limits.memory_bytes):
            return KubeQoS.BURSTABLE
    return KubeQoS.GUARANTEED


def pod_from_json(obj: Any) -> Pod:
    """One v1.Pod object; raises ParseError naming the pod and field that was wrong."""
    if not isinstance(obj, Mapping):
        raise ParseError(f"pod: expected an object, got {type(obj).__name__}")
    meta, spec, status = (gojson.mapping(obj.get(k), f"pod: {k}") for k in ("metadata", "spec", "status"))
    uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace", "default")
    if not isinstance(uid, str) or not uid or not isinstance(name, str) or not name:
        raise ParseError("pod: metadata.uid and metadata.name are required")
    where = f"pod {namespace}/{name}"
    ids = {}
    for cs in gojson.array(status.get("containerStatuses"), f"{where}: status.containerStatuses"):
        if isinstance(cs, Mapping) and isinstance(cs.get("name"), str):
            ids[cs["name"]] = cs.get("containerID") or ""
    containers = []
    for i, c in enumerate(gojson.array(spec.get("containers"), f"{where}: spec.containers")):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise ParseError(f"{where}: spec.containers[{i}] has no name")
        res = gojson.mapping(c.get("resources"), f"{where}: spec.containers[{i}].resources")
        containers.append(Container(
            name=c["name"],
            container_id=str(ids.get(c["name"], "")),
            requests=resources_from_json(res.get("requests"), f"{where}: spec.containers[{i}].resources.requests"),
            limits=resources_from_json(res.get("limits"), f"{where}: spec.containers[{i}].resources.limits"),
        ))
    kube_qos_text = status.get("qosClass")
    try:
        kube_qos = KubeQoS(kube_qos_text) if kube_qos_text else kube_qos_of(containers)
    except ValueError:
        raise ParseError(f"{where}: status.qosClass {kube_qos_text!r} is not a Kubernetes QoS class") from None
    priority = spec.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise ParseError(f"{where}: spec.priority must be an integer, got {priority!r}")
    return Pod(
        uid=uid,
        name=name,
        namespace=str(namespace),
        labels=gojson.str_map(meta.get("labels"), f"{where}: metadata.labels"),
        annotations=gojson.str_map(meta.get("annotations"), f"{where}: metadata.annotations"),
        kube_qos=kube_qos,
        phase=str(status.get("phase") or ""),
        priority=priority,
        containers=tuple(containers),
        node_name=str(spec.get("nodeName") or ""),
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
        deletion_timestamp=str(meta.get("deletionTimestamp") or ""),
        priority_class_name=str(spec.get("priorityClassName") or ""),
        ips=_pod_ips(spec, status, where),
        volumes=_volumes(spec),
    )


def _volumes(spec: Mapping[str, Any]) -> tuple[Volume, ...]:
    # Lenient: a volume this koordlet cannot read is left out rather than failing the whole pod list.
    result = []
    for v in spec.get("volumes") or ():
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str):
            continue
        pvc = v.get("persistentVolumeClaim")
        claim = pvc.get("claimName") if isinstance(pvc, Mapping) else None
        result.append(Volume(v["name"], claim if isinstance(claim, str) else "", isinstance(v.get("csi"), Mapping)))
    return tuple(result)


def pods_from_podlist(obj: Any) -> list[Pod]:
    """A v1.PodList; a malformed list is an error as a whole (the caller keeps its last good list)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("items", []), list):
        raise ParseError("kubelet /pods: expected a PodList object with an items array")
    return [pod_from_json(item) for item in obj.get("items") or []]
