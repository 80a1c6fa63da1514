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

import re
from typing import Any

from koordlet.apis.pod import Container, Pod, Resources
from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.errors import KoordletError
from koordlet.runtimehooks.framework import Adjustment, HookRequest, Stage
from koordlet.runtimehooks.hookserver.convert import kube_qos

# The ranges koord-runtime-proxy checks a hook server's resources against (runtimeproxy/intercept.py
# ``check_resources``), the values runc and the kernel accept: CFS period 1 ms..1 s
# (kernel/sched/core.c max_cfs_quota_period), quota -1 or >= 1 ms, shares 2..262144 (MIN/MAX_SHARES),
# oom_score_adj -1000..1000 (OOM_SCORE_ADJ_MIN/MAX).  The proxy may import only protocol stubs, so the
# ranges are repeated here; tests/unit/runtimehooks/nri/test_convert.py checks both agree.
CPU_PERIOD_RANGE = (1000, 1_000_000)
CPU_QUOTA_MIN = 1000
CPU_SHARES_RANGE = (2, 262144)
OOM_SCORE_ADJ_RANGE = (-1000, 1000)
UNLIMITED = -1
_CPULIST_MAX_CHARS = 64 * 1024
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", re.ASCII)


class InvalidAdjustment(KoordletError, ValueError):
    """The hooks' answer holds a value the runtime must not get (names every field that is wrong)."""

RUNTIME_SCHEMES = {"containerd": "containerd", "cri-o": "cri-o", "crio": "cri-o"}
"""Configure's ``runtime_name`` -> the container id scheme koordlet's paths expect."""


def container_id_scheme(runtime_name: str) -> str:
    return RUNTIME_SCHEMES.get(runtime_name.lower(), "containerd")


def pod(sandbox: Any, containers: tuple[Container, ...] = ()) -> Pod:
    return Pod(uid=sandbox.uid, name=sandbox.name, namespace=sandbox.namespace, labels=dict(sandbox.labels),
               annotations=dict(sandbox.annotations), kube_qos=kube_qos(sandbox.linux.cgroup_parent),
               phase="Pending", priority=None, containers=containers, ips=tuple(sandbox.ips))


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
    return HookRequest(stage, pod(sandbox, (spec,)), sandbox.linux.cgroup_parent, spec, container_id)


_OPTIONAL_INTS = {
    "cpu_shares": ("cpu", "shares"),
    "cpu_quota": ("cpu", "quota"),
    "cpu_period": ("cpu", "period"),
    "memory_limit": ("memory", "limit"),
}
"""Adjustment field -> (``LinuxResources`` member, its optional integer) it goes to."""


def linux_resources(adjustment: Adjustment) -> Any | None:
    """The adjusted resources as ``LinuxResources``, None when no resource was adjusted."""
    values = adjustment.values
    out = api_pb2.LinuxResources()
    touched = False
    for name, (group, attr) in _OPTIONAL_INTS.items():
        if (number := values.get(name)) is not None:
            getattr(getattr(out, group), attr).value = int(number)  # type: ignore[call-overload]
            touched = True
    for name, attr in (("cpuset_cpus", "cpus"), ("cpuset_mems", "mems")):
        text = values.get(name)
        if isinstance(text, str) and text:
            setattr(out.cpu, attr, text)
            touched = True
    for name in ("rdt_class", "blockio_class"):
        text = values.get(name)
        if isinstance(text, str) and text:
            getattr(out, name).value = text
            touched = True
    unified = adjustment.maps.get("unified") or {}
    if unified:
        out.unified.update(unified)
        touched = True
    return out if touched else None


def _valid_cpulist(text: str) -> bool:
    if len(text) > _CPULIST_MAX_CHARS or not _CPULIST.fullmatch(text):
        return False
    for part in text.split(","):
        low, _, high = part.partition("-")
        if len(low) > 9 or len(high) > 9:  # no CPU id has ten digits
            return False
        if high and int(high) < int(low):
            return False
    return True


def resource_problems(resources: Any, oom_score_adj: int | None = None) -> list[str]:
    """Why ``LinuxResources`` (and an ``oom_score_adj``) cannot go to the runtime; empty when they can.  As in
    the proxy, 0 means "not set" for CPU numbers; a memory limit is -1 (unlimited) or >= 0."""
    problems = []
    cpu, memory = resources.cpu, resources.memory
    period = cpu.period.value if cpu.HasField("period") else 0
    quota = cpu.quota.value if cpu.HasField("quota") else 0
    shares = cpu.shares.value if cpu.HasField("shares") else 0
    low, high = CPU_PERIOD_RANGE
    if period and not low <= period <= high:
        problems.append(f"cpu.period {period} outside {low}..{high}")
    if quota and quota != UNLIMITED and quota < CPU_QUOTA_MIN:
        problems.append(f"cpu.quota {quota}: must be -1 or >= {CPU_QUOTA_MIN}")
    low, high = CPU_SHARES_RANGE
    if shares and not low <= shares <= high:
        problems.append(f"cpu.shares {shares} outside {low}..{high}")
    if memory.HasField("limit") and memory.limit.value < UNLIMITED:
        problems.append(f"memory.limit {memory.limit.value}: must be -1 (unlimited) or >= 0")
    for name in ("cpus", "mems"):
        text = getattr(cpu, name)
        if text and not _valid_cpulist(text):
            problems.append(f"cpu.{name} {text[:64]!r} is not a CPU list")
    low, high = OOM_SCORE_ADJ_RANGE
    if oom_score_adj is not None and not low <= oom_score_adj <= high:
        problems.append(f"oom_score_adj {oom_score_adj} outside {low}..{high}")
    return problems


def _checked(resources: Any, oom_score_adj: int | None = None) -> None:
    problems = resource_problems(resources, oom_score_adj)
    if problems:
        raise InvalidAdjustment("invalid adjustment: " + "; ".join(problems))


def container_adjustment(adjustment: Adjustment) -> Any:
    """The ``ContainerAdjustment`` answering CreateContainer (empty when nothing was adjusted); raises
    :class:`InvalidAdjustment` for a value out of range (see :func:`resource_problems`)."""
    adjust = api_pb2.ContainerAdjustment()
    resources = linux_resources(adjustment)
    if resources is not None:
        adjust.linux.resources.CopyFrom(resources)
    if (oom := adjustment.values.get("oom_score_adj")) is not None:
        adjust.linux.oom_score_adj.value = int(oom)  # type: ignore[call-overload]
    adjust.annotations.update(adjustment.maps.get("annotations") or {})
    for key, value in sorted((adjustment.maps.get("env") or {}).items()):
        adjust.env.add(key=key, value=value)
    _checked(adjust.linux.resources,
             adjust.linux.oom_score_adj.value if adjust.linux.HasField("oom_score_adj") else None)
    return adjust


def container_updates(container_id: str, adjustment: Adjustment) -> list[Any]:
    """The ``ContainerUpdate`` list answering UpdateContainer: one entry, or none when nothing changed; raises
    :class:`InvalidAdjustment` for a value out of range."""
    resources = linux_resources(adjustment)
    if resources is None:
        return []
    _checked(resources)
    update = api_pb2.ContainerUpdate(container_id=container_id)
    update.linux.resources.CopyFrom(resources)
    return [update]
