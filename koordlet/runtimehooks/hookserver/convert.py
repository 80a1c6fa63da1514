"""RuntimeHookService messages <-> the hook framework.

Request -> :class:`~koordlet.runtimehooks.framework.HookRequest`:

* the pod: ``uid``/``name``/``namespace`` from ``pod_meta``; labels (``labels`` of a sandbox request,
  ``pod_labels`` of a container request); annotations (``annotations``, resp. ``pod_annotations``);
  ``kube_qos`` read off the cgroup parent's QoS directory (kubelet puts BestEffort pods under
  ``besteffort``), phase ``Pending``, priority None (CRI carries neither);
* the pod cgroup parent: ``cgroup_parent``, resp. ``pod_cgroup_parent``;
* at container stages the container: name and id from ``container_mata`` (so spelled by upstream's proto,
  field 2), limits from ``container_resources``: ``cpu_milli`` = quota x 1000 / period when both are
  positive, ``memory_bytes`` = ``memory_limit_in_bytes`` when positive.  Requests stay unset (CRI has
  only shares, which do not say a request exactly); extended resources are not in CRI at all, which is
  why batchresource reads the ``node.koordinator.sh/extended-resource-spec`` annotation.

Adjustment -> response: the request's resources with the adjusted fields overwritten (``cpu_shares``,
``cpu_quota``, ``cpu_period``, ``cpuset_cpus``, ``cpuset_mems``, ``memory_limit`` ->
``memory_limit_in_bytes`` with -1 (unlimited) as CRI's 0, ``oom_score_adj``; the ``unified`` map merged),
the request's annotations (container annotations at container stages) merged with the ``annotations`` map,
the container envs merged with the ``env`` map, and the cgroup parent (adjusted or the request's).
``rdt_class`` and ``blockio_class`` have no field in the protocol and are dropped here (the reconciler
applies them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordlet.apis.pod import Container, Pod, Resources
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2
from koordlet.runtimehooks.framework import Adjustment, HookRequest, Stage
from koordlet.system.kubepaths import KubeQoS, cgroup_parent_dir, kube_qos_of_parent

POD_SANDBOX_RPCS: Mapping[str, Stage] = {
    "PreRunPodSandboxHook": Stage.PRE_RUN_POD_SANDBOX,
    "PostStopPodSandboxHook": Stage.POST_STOP_POD_SANDBOX,
}
CONTAINER_RPCS: Mapping[str, Stage] = {
    "PreCreateContainerHook": Stage.PRE_CREATE_CONTAINER,
    "PreStartContainerHook": Stage.PRE_START_CONTAINER,
    "PostStartContainerHook": Stage.POST_START_CONTAINER,
    "PostStopContainerHook": Stage.POST_STOP_CONTAINER,
    "PreUpdateContainerResourcesHook": Stage.PRE_UPDATE_CONTAINER_RESOURCES,
}
RPC_STAGES: Mapping[str, Stage] = {**POD_SANDBOX_RPCS, **CONTAINER_RPCS}
"""RuntimeHookService method -> the stage it runs."""

RESOURCE_FIELDS: Mapping[str, str] = {
    "cpu_shares": "cpu_shares",
    "cpu_quota": "cpu_quota",
    "cpu_period": "cpu_period",
    "cpuset_cpus": "cpuset_cpus",
    "cpuset_mems": "cpuset_mems",
    "memory_limit": "memory_limit_in_bytes",
    "oom_score_adj": "oom_score_adj",
}
"""Adjustment field -> LinuxContainerResources field."""


def _limits(resources: Any) -> Resources:
    quota, period, memory = resources.cpu_quota, resources.cpu_period, resources.memory_limit_in_bytes
    return Resources(cpu_milli=quota * 1000 // period if quota > 0 and period > 0 else None,
                     memory_bytes=memory if memory > 0 else None)


def kube_qos(cgroup_parent: str) -> KubeQoS | None:
    """The kubelet QoS level of a pod cgroup parent; None when it does not say (or is garbage)."""
    try:
        return kube_qos_of_parent(cgroup_parent_dir(cgroup_parent)) if cgroup_parent else None
    except ValueError:
        return None


def pod_sandbox_request(stage: Stage, request: Any) -> HookRequest:
    """A ``PodSandboxHookRequest`` as the hooks see it."""
    meta = request.pod_meta
    pod = Pod(uid=meta.uid, name=meta.name, namespace=meta.namespace, labels=dict(request.labels),
              annotations=dict(request.annotations), kube_qos=kube_qos(request.cgroup_parent), phase="Pending",
              priority=None)
    return HookRequest(stage, pod, request.cgroup_parent)


def container_request(stage: Stage, request: Any) -> HookRequest:
    """A ``ContainerResourceHookRequest`` as the hooks see it."""
    meta, cmeta = request.pod_meta, request.container_mata
    container = Container(name=cmeta.name, container_id=cmeta.id, limits=_limits(request.container_resources))
    pod = Pod(uid=meta.uid, name=meta.name, namespace=meta.namespace, labels=dict(request.pod_labels),
              annotations=dict(request.pod_annotations), kube_qos=kube_qos(request.pod_cgroup_parent),
              phase="Pending", priority=None, containers=(container,))
    return HookRequest(stage, pod, request.pod_cgroup_parent, container, cmeta.id)


def adjusted_resources(original: Any, adjustment: Adjustment) -> Any:
    """A copy of ``original`` (LinuxContainerResources) with the adjusted fields overwritten."""
    resources = api_pb2.LinuxContainerResources()
    resources.CopyFrom(original)
    for name, proto_field in RESOURCE_FIELDS.items():
        if name in adjustment.values:
            value = adjustment.values[name]
            if name == "memory_limit" and isinstance(value, int) and value < 0:
                value = 0  # CRI spells "no memory limit" 0 ("not specified"); a negative one is refused
            setattr(resources, proto_field, value)
    resources.unified.update(adjustment.maps.get("unified", {}))
    return resources


def _cgroup_parent(adjustment: Adjustment, original: str) -> str:
    value = adjustment.values.get("cgroup_parent")
    return value if isinstance(value, str) and value else original


def pod_sandbox_response(request: Any, adjustment: Adjustment) -> Any:
    """The ``PodSandboxHookResponse`` for ``request``: its values with the adjustment applied."""
    annotations = dict(request.annotations)
    annotations.update(adjustment.maps.get("annotations", {}))
    return api_pb2.PodSandboxHookResponse(
        labels=dict(request.labels), annotations=annotations,
        cgroup_parent=_cgroup_parent(adjustment, request.cgroup_parent),
        resources=adjusted_resources(request.resources, adjustment))


def container_response(request: Any, adjustment: Adjustment) -> Any:
    """The ``ContainerResourceHookResponse`` for ``request``: its values with the adjustment applied."""
    annotations = dict(request.container_annotations)
    annotations.update(adjustment.maps.get("annotations", {}))
    envs = dict(request.container_envs)
    envs.update(adjustment.maps.get("env", {}))
    return api_pb2.ContainerResourceHookResponse(
        container_annotations=annotations, container_envs=envs,
        container_resources=adjusted_resources(request.container_resources, adjustment),
        pod_cgroup_parent=_cgroup_parent(adjustment, request.pod_cgroup_parent))
