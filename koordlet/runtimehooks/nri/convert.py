"""NRI messages (``nri.pkg.api.v1alpha1``) <-> the hook framework.

Request side: a ``PodSandbox`` becomes the :class:`~koordlet.apis.pod.Pod` hooks see (labels, annotations,
kube QoS read off the cgroup parent's QoS directory, the pod's IPs); a ``Container`` gives the container's
name, its id with the runtime's scheme (``containerd://<id>``) and its limits (quota/period, memory limit).

Answer side: the adjusted fields as NRI's optional values, which the runtime merges into the container's
OCI spec.  NRI treats an empty ``cpus`` as "not set", so the cpuset hook's "" for BE (inherit the parent's
cpuset) is simply not sent; the reconciler has nothing to undo either.  ``annotations`` and ``env`` entries
are added or replaced, never removed.
"""

from __future__ import annotations

from typing import Any

from koordlet.apis.pod import Container, Pod, Resources
from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.runtimehooks.framework import Adjustment, HookRequest, Stage
from koordlet.runtimehooks.hookserver.convert import kube_qos

RUNTIME_SCHEMES = {"containerd": "containerd", "cri-o": "cri-o", "crio": "cri-o"}
"""Configure's ``runtime_name`` -> the container id scheme koordlet's paths expect."""


def container_id_scheme(runtime_name: str) -> str:
    return RUNTIME_SCHEMES.get(runtime_name.lower(), "containerd")


def pod(sandbox: Any) -> Pod:
    return Pod(uid=sandbox.uid, name=sandbox.name, namespace=sandbox.namespace, labels=dict(sandbox.labels),
               annotations=dict(sandbox.annotations), kube_qos=kube_qos(sandbox.linux.cgroup_parent),
               phase="Pending", priority=None, ips=tuple(sandbox.ips))


def _limits(resources: Any) -> Resources:
    cpu, memory = resources.cpu, resources.memory
    quota = cpu.quota.value if cpu.HasField("quota") else 0
    period = cpu.period.value if cpu.HasField("period") else 0
    limit = memory.limit.value if memory.HasField("limit") else 0
    return Resources(cpu_milli=quota * 1000 // period if quota > 0 and period > 0 else None,
                     memory_bytes=limit if limit > 0 else None)


def pod_request(stage: Stage, sandbox: Any) -> HookRequest:
    return HookRequest(stage, pod(sandbox), sandbox.linux.cgroup_parent)


def container_request(stage: Stage, sandbox: Any, container: Any, scheme: str,
                      resources: Any | None = None) -> HookRequest:
    """``resources`` replaces the container's own (UpdateContainer carries the new ones separately)."""
    container_id = f"{scheme}://{container.id}"
    spec = Container(name=container.name, container_id=container_id,
                     limits=_limits(resources if resources is not None else container.linux.resources))
    base = pod(sandbox)
    pod_ = Pod(uid=base.uid, name=base.name, namespace=base.namespace, labels=base.labels,
               annotations=base.annotations, kube_qos=base.kube_qos, phase=base.phase, priority=None,
               containers=(spec,), ips=base.ips)
    return HookRequest(stage, pod_, sandbox.linux.cgroup_parent, spec, container_id)


def linux_resources(adjustment: Adjustment) -> Any | None:
    """The adjusted resources as ``LinuxResources``, None when no resource was adjusted."""
    values = adjustment.values
    out = api_pb2.LinuxResources()
    touched = False
    if (shares := values.get("cpu_shares")) is not None:
        out.cpu.shares.value = int(shares)  # type: ignore[call-overload]
        touched = True
    if (quota := values.get("cpu_quota")) is not None:
        out.cpu.quota.value = int(quota)  # type: ignore[call-overload]
        touched = True
    if (period := values.get("cpu_period")) is not None:
        out.cpu.period.value = int(period)  # type: ignore[call-overload]
        touched = True
    for name, attr in (("cpuset_cpus", "cpus"), ("cpuset_mems", "mems")):
        text = values.get(name)
        if isinstance(text, str) and text:
            setattr(out.cpu, attr, text)
            touched = True
    if (limit := values.get("memory_limit")) is not None:
        out.memory.limit.value = int(limit)  # type: ignore[call-overload]
        touched = True
    for name, attr in (("rdt_class", "rdt_class"), ("blockio_class", "blockio_class")):
        text = values.get(name)
        if isinstance(text, str) and text:
            getattr(out, attr).value = text
            touched = True
    unified = adjustment.maps.get("unified") or {}
    if unified:
        out.unified.update(unified)
        touched = True
    return out if touched else None


def container_adjustment(adjustment: Adjustment) -> Any:
    """The ``ContainerAdjustment`` answering CreateContainer (empty when nothing was adjusted)."""
    adjust = api_pb2.ContainerAdjustment()
    resources = linux_resources(adjustment)
    if resources is not None:
        adjust.linux.resources.CopyFrom(resources)
    if (oom := adjustment.values.get("oom_score_adj")) is not None:
        adjust.linux.oom_score_adj.value = int(oom)  # type: ignore[call-overload]
    adjust.annotations.update(adjustment.maps.get("annotations") or {})
    for key, value in sorted((adjustment.maps.get("env") or {}).items()):
        adjust.env.add(key=key, value=value)
    return adjust


def container_updates(container_id: str, adjustment: Adjustment) -> list[Any]:
    """The ``ContainerUpdate`` list answering UpdateContainer: one entry, or none when nothing changed."""
    resources = linux_resources(adjustment)
    if resources is None:
        return []
    update = api_pb2.ContainerUpdate(container_id=container_id)
    update.linux.resources.CopyFrom(resources)
    return [update]
