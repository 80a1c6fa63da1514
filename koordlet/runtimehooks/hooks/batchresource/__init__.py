"""``batchresource`` (Koordinator ``runtimehooks/hooks/batchresource``): a BE pod's and its containers'
cgroup values from their batch resources, so a pod or container created before any QoS round already has
them.

Per container (``PreCreateContainer``, ``PreUpdateContainerResources``):

* ``cpu.shares`` = batch-cpu request (milli) x 1024 / 1000, clamped to [2, 262144] (kubelet's
  MilliCPUToShares);
* ``cpu.cfs_quota_us`` = batch-cpu limit (milli) x 100 at the 100 ms period, at least 1000; -1 without a
  limit;
* ``memory.limit_in_bytes`` = batch-memory limit, when there is one.

Per pod (``PreRunPodSandbox``, upstream ``SetPodResources``), over the containers that have batch
resources:

* ``cpu.shares`` from the sum of their batch-cpu requests (same conversion);
* ``cpu.cfs_quota_us`` from the sum of their batch-cpu limits; -1 (unlimited) as soon as one of them has
  no batch-cpu limit, since that container alone may use any CPU;
* ``memory.limit_in_bytes`` = the sum of their batch-memory limits; -1 (unlimited) as soon as one has none.

CPU normalization (upstream ``GetCFSQuotaScaleRatio``): on a node whose annotation
``node.koordinator.sh/cpu-normalization-ratio`` is above 1, a limited quota (pod or container) is divided by the
ratio, rounded up: the batch-cpu the scheduler handed out is in normalized CPUs (the companion amplified the
node's batch allocatable by the same ratio), the quota must be in this node's CPU time.  The reconciler runs
this hook on running pods every round, so a ratio change reaches them without a restart.

The batch resources come from the pod's container specs when they carry them (the reconciler's pods:
kubelet's full spec), else from the pod annotation ``node.koordinator.sh/extended-resource-spec``
(``{"containers": {"<name>": {"requests": {...}, "limits": {...}}}}``) that Koordinator's webhook writes,
since CRI requests drop extended resources.  A container with no batch resource at all is left alone and
not counted in its pod's sums (upstream ``GetPodExtendedResources`` leaves it out of the spec); a pod
none of whose containers has one is left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from koordlet.apis.cpunormalization import scale_quota
from koordlet.apis.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, QoSClass
from koordlet.apis.pod import Container, Pod, Resources, resources_from_json
from koordlet.config import gates
from koordlet.errors import KoordletError, ParseError
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, Stage, load_json

NAME = "batchresource"
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES})
MIN_SHARES = 2
MAX_SHARES = 262144
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000
UNLIMITED = -1

Batch = tuple[Resources, Resources]
T = TypeVar("T")
"""(requests, limits) of one container."""


def shares(request_milli: int | None) -> int:
    return max(MIN_SHARES, min(MAX_SHARES, (request_milli or 0) * 1024 // 1000))


def quota(limit_milli: int | None) -> int:
    if not limit_milli or limit_milli <= 0:
        return UNLIMITED
    return max(MIN_QUOTA_US, limit_milli * CFS_PERIOD_US // 1000)


def _has_batch(res: Resources) -> bool:
    return res.batch_cpu_milli is not None or res.batch_memory_bytes is not None


def _annotation_containers(raw: str, where: str) -> Mapping[str, Any]:
    """The annotation's ``containers`` object; raises :class:`KoordletError` starting with ``where`` when the
    annotation is garbage."""
    spec = load_json(raw, where)
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, dict):
        raise KoordletError(f"{where}: expected {{\"containers\": {{...}}}}")
    return containers


def _entry_batch(where: str, name: str, entry: Any) -> Batch | None:
    if not isinstance(entry, dict):
        raise KoordletError(f"{where}: containers.{name}: expected an object")
    try:
        requests = resources_from_json(entry.get("requests"), f"containers.{name}.requests")
        limits = resources_from_json(entry.get("limits"), f"containers.{name}.limits")
    except ParseError as exc:
        raise KoordletError(f"{where}: {exc}") from None
    return (requests, limits) if _has_batch(requests) or _has_batch(limits) else None


# The annotation's parse is kept by its text (successes only: a bad text fails again each time, naming the
# pod): replicas of a workload carry the same text, and the reconciler asks for every pod and container every
# round.  The results are immutable.
_MEMO_SIZE = 4096
_WHERE = f"annotation {ANNOTATION_EXTENDED_RESOURCE_SPEC}"


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _container_batch(raw: str, name: str) -> Batch | None:
    entry = _annotation_containers(raw, _WHERE).get(name)
    return None if entry is None else _entry_batch(_WHERE, name, entry)


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _pod_batches(raw: str) -> tuple[tuple[str, Batch], ...]:
    containers = _annotation_containers(raw, _WHERE)
    batches = [(str(name), _entry_batch(_WHERE, str(name), entry)) for name, entry in containers.items()]
    return tuple((name, batch) for name, batch in batches if batch is not None)


def _of_pod(pod: Pod, parse: Callable[[], T]) -> T:
    """``parse()``, its error naming the pod first."""
    try:
        return parse()
    except KoordletError as exc:
        raise KoordletError(f"pod {pod.key}: {exc}") from None


def batch_resources(pod: Pod, container: Container) -> Batch | None:
    """(requests, limits) of ``container``'s batch resources, or None when it has none; raises
    :class:`KoordletError` naming the pod and the annotation when the annotation is garbage."""
    if _has_batch(container.requests) or _has_batch(container.limits):
        return container.requests, container.limits
    raw = pod.annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if not raw:
        return None
    return _of_pod(pod, lambda: _container_batch(raw, container.name))


def pod_batch_resources(pod: Pod) -> dict[str, Batch]:
    """Container name -> (requests, limits) for every container of ``pod`` with batch resources: from the
    container specs when any carries them (upstream prefers the pod spec), else from the annotation (every
    entry checked); empty when there are none."""
    from_spec = {c.name: (c.requests, c.limits) for c in pod.containers
                 if _has_batch(c.requests) or _has_batch(c.limits)}
    if from_spec:
        return from_spec
    raw = pod.annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if not raw:
        return {}
    return dict(_of_pod(pod, lambda: _pod_batches(raw)))


def _sum_or_unlimited(values: Iterable[int | None]) -> int:
    """The sum of positive values; -1 once one is missing or not positive (that container is unlimited,
    so is the pod: upstream ``SetPodCFSQuota``/``SetPodMemoryLimit``)."""
    total = 0
    for value in values:
        if value is None or value <= 0:
            return UNLIMITED
        total += value
    return total if total > 0 else UNLIMITED


def pod_values(batches: Mapping[str, Batch]) -> dict[str, int]:
    """The pod cgroup's ``cpu_shares``, ``cpu_quota`` and ``memory_limit`` (-1 = unlimited) for the
    containers' batch resources."""
    requests = sum(r.batch_cpu_milli for r, _ in batches.values() if r.batch_cpu_milli and r.batch_cpu_milli > 0)
    cpu_limit = _sum_or_unlimited(limits.batch_cpu_milli for _, limits in batches.values())
    return {
        "cpu_shares": shares(requests),
        "cpu_quota": quota(cpu_limit),
        "memory_limit": _sum_or_unlimited(limits.batch_memory_bytes for _, limits in batches.values()),
    }


def _run_pod(ctx: HookContext, ratio: float | None) -> None:
    batches = pod_batch_resources(ctx.request.pod)
    if not batches:
        return
    for name, value in pod_values(batches).items():
        ctx.set(name, scale_quota(value, ratio) if name == "cpu_quota" else value)


def run(ctx: HookContext, ratio: float | None = None) -> None:
    """``ratio``: the node's CPU normalization ratio (None: not normalized)."""
    request = ctx.request
    if request.qos is not QoSClass.BE:
        return
    if request.stage is Stage.PRE_RUN_POD_SANDBOX:
        _run_pod(ctx, ratio)
        return
    if request.container is None:
        return
    found = batch_resources(request.pod, request.container)
    if found is None:
        return
    requests, limits = found
    ctx.set("cpu_shares", shares(requests.batch_cpu_milli))
    ctx.set("cpu_quota", scale_quota(quota(limits.batch_cpu_milli), ratio))
    if limits.batch_memory_bytes:
        ctx.set("memory_limit", limits.batch_memory_bytes)


def new(deps: HookDeps) -> Hook:
    normalization = deps.cpu_normalization_ratio
    return Hook(NAME, "BE pod and container cpu.shares, cfs quota and memory limit from batch resources", STAGES,
                lambda ctx: run(ctx, normalization()))


PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new, gate=gates.BATCH_RESOURCE)
