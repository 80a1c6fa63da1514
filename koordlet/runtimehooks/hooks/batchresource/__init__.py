"""``batchresource`` (Koordinator ``runtimehooks/hooks/batchresource``): a BE container's cgroup values
from its batch resources, so a container created before any QoS round already has them.

* ``cpu.shares`` = batch-cpu request (milli) x 1024 / 1000, clamped to [2, 262144] (kubelet's
  MilliCPUToShares);
* ``cpu.cfs_quota_us`` = batch-cpu limit (milli) x 100 at the 100 ms period, at least 1000; -1 without a
  limit;
* ``memory.limit_in_bytes`` = batch-memory limit, when there is one.

The batch resources come from the container spec when the runtime request carries them, else from the
pod annotation ``node.koordinator.sh/extended-resource-spec``
(``{"containers": {"<name>": {"requests": {...}, "limits": {...}}}}``) that Koordinator's webhook writes,
since CRI requests drop extended resources.  A container with no batch resource at all is left alone.
"""

from __future__ import annotations

from koordlet.apis.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, QoSClass
from koordlet.apis.pod import Container, Pod, Resources, resources_from_json
from koordlet.errors import KoordletError, ParseError
from koordlet.runtimehooks.framework import Hook, HookContext, Stage, load_json

NAME = "batchresource"
STAGES = frozenset({Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES})
MIN_SHARES = 2
MAX_SHARES = 262144
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000


def shares(request_milli: int | None) -> int:
    return max(MIN_SHARES, min(MAX_SHARES, (request_milli or 0) * 1024 // 1000))


def quota(limit_milli: int | None) -> int:
    if not limit_milli or limit_milli <= 0:
        return -1
    return max(MIN_QUOTA_US, limit_milli * CFS_PERIOD_US // 1000)


def _has_batch(res: Resources) -> bool:
    return res.batch_cpu_milli is not None or res.batch_memory_bytes is not None


def batch_resources(pod: Pod, container: Container) -> tuple[Resources, Resources] | None:
    """(requests, limits) of ``container``'s batch resources, or None when it has none; raises
    :class:`KoordletError` naming the pod and the annotation when the annotation is garbage."""
    if _has_batch(container.requests) or _has_batch(container.limits):
        return container.requests, container.limits
    raw = pod.annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if not raw:
        return None
    where = f"pod {pod.key}: annotation {ANNOTATION_EXTENDED_RESOURCE_SPEC}"
    spec = load_json(raw, where)
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, dict):
        raise KoordletError(f"{where}: expected {{\"containers\": {{...}}}}")
    entry = containers.get(container.name)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise KoordletError(f"{where}: containers.{container.name}: expected an object")
    try:
        requests = resources_from_json(entry.get("requests"), f"containers.{container.name}.requests")
        limits = resources_from_json(entry.get("limits"), f"containers.{container.name}.limits")
    except ParseError as exc:
        raise KoordletError(f"{where}: {exc}") from None
    return (requests, limits) if _has_batch(requests) or _has_batch(limits) else None


def run(ctx: HookContext) -> None:
    request = ctx.request
    if request.container is None or request.qos is not QoSClass.BE:
        return
    found = batch_resources(request.pod, request.container)
    if found is None:
        return
    requests, limits = found
    ctx.set("cpu_shares", shares(requests.batch_cpu_milli))
    ctx.set("cpu_quota", quota(limits.batch_cpu_milli))
    if limits.batch_memory_bytes:
        ctx.set("memory_limit", limits.batch_memory_bytes)


def new() -> Hook:
    return Hook(NAME, "BE container cpu.shares, cfs quota and memory limit from batch resources", STAGES, run)
