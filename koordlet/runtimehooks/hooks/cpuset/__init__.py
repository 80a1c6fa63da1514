"""``cpuset`` (Koordinator ``runtimehooks/hooks/cpuset``, plugin ``CPUSetAllocator``): a container's
``cpuset.cpus`` from where Koordinator placed its pod, in upstream's order (``cpuset.go``
``SetContainerCPUSet`` then ``rule.go`` ``getContainerCPUSet``):

1. the ``cpuset`` of the pod annotation ``scheduling.koordinator.sh/resource-status`` (the scheduler
   binds LSE/LSR pods this way).  Such a pod also gets ``cpu_quota`` = -1 on its containers and, at
   ``PreRunPodSandbox``, on the pod cgroup: upstream ``UnsetContainerCPUQuota`` and ``UnsetPodCPUQuota``
   unset the CFS quota of every pod whose resource-status cpuset is not empty
   (``util.IsPodCfsQuotaNeedUnset``; koordinator#489, bound pods must not be throttled, and kubelet's
   pod-level quota would throttle them as surely as the container's);
2. the resource-status ``numaNodeResources``: the shared pools of those NUMA nodes, joined with ``,``;
3. a pod labelled ``koordinator.sh/qosClass: LS``: every shared pool, joined with ``,``;
4. a BestEffort pod (kube QoS BestEffort, or labelled BE): ``""``, i.e. the container inherits its
   parent's cpuset, which the BE suppress policy (``qosmanager`` cpusuppress) keeps; upstream writes
   ``""`` rather than skipping so a kubelet static-policy cpuset in the CRI request is cleared;
5. anything else: left alone.

For each NodeSLO host application of class LS the reconciler writes every shared pool, joined with ``,``, to
the application's cgroup (upstream ``SetHostAppCPUSet``).

The shared pools come from the node annotation ``node.koordinator.sh/cpu-shared-pools``
(``[{"socket": 0, "node": 0, "cpuset": "0-7"}, ...]``).  A :class:`HookRequest` carries no node, so the
hook is a :class:`CpusetHook` built with a ``shared_pools`` source: a callable returning that
annotation's raw text, or None while the node topology is not known; then steps 2 and 3 leave the
container alone (upstream: no rule yet).  Steps 1 and 4 do not need the node.

A garbage pod or node annotation raises :class:`KoordletError` naming the pod and the annotation before
anything is set, so nothing is half-applied.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from koordlet.apis import gojson
from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS, QoSClass, qos_from_label
from koordlet.apis.pod import Pod
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, HostAppContext, Stage, load_json
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import CPUSET_CPUS
from koordlet.system.validators import parse_cpulist

NAME = "cpuset"
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES})
ANNOTATION_NODE_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
UNSET_QUOTA = -1

SharedPoolsSource = Callable[[], "str | None"]


@dataclass(frozen=True)
class ResourceStatus:
    """The parts of ``scheduling.koordinator.sh/resource-status`` the hook reads."""

    cpuset: str = ""
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class SharedPool:
    socket: int
    node: int
    cpuset: str


def _cpulist_field(value: object, where: str) -> str:
    """The cpu list string ``value``, checked and stripped (the hook hands the text on, not the ids)."""
    def checked(text: str) -> str:
        parse_cpulist(text)
        return text.strip()

    return gojson.parsed(value, where, checked, KoordletError)


def _int_field(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KoordletError(f"{where}: expected an integer, got {value!r}")
    return value


def resource_status(pod: Pod) -> ResourceStatus:
    """The pod's resource-status annotation (empty without one); raises :class:`KoordletError` naming
    the pod and the annotation when it is garbage.

    Reads more than ``apis.extension.resource_status_cpus`` (which cpusuppress and the pools use): the
    ``numaNodeResources`` too, and errors as :class:`KoordletError` naming the pod."""
    raw = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return ResourceStatus()
    try:
        return _resource_status(raw)
    except KoordletError as exc:
        raise KoordletError(f"pod {pod.key}: {exc}") from None


# Parses kept by the annotation's text (successes only: a bad text fails again each time, naming the pod):
# replicas of a workload carry the same text, the node's shared pools are one text for every pod, and the
# reconciler asks for every pod and container every round.  The results are immutable.
_MEMO_SIZE = 4096


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _resource_status(raw: str) -> ResourceStatus:
    where = f"annotation {ANNOTATION_RESOURCE_STATUS}"
    status = gojson.load_object(raw, where, KoordletError)
    cpuset = status.get("cpuset")
    cpuset = _cpulist_field("" if cpuset is None else cpuset, f"{where}: cpuset")
    numa = gojson.array(status.get("numaNodeResources"), f"{where}: numaNodeResources", KoordletError)
    nodes: list[int] = []
    for i, item in enumerate(numa):
        entry = gojson.mapping(item, f"{where}: numaNodeResources[{i}]", KoordletError, optional=False)
        nodes.append(_int_field(entry.get("node", 0), f"{where}: numaNodeResources[{i}].node"))
    return ResourceStatus(cpuset, tuple(nodes))


def shared_pools(raw: str, pod: Pod) -> list[SharedPool]:
    """The node's ``cpu-shared-pools`` annotation; errors name the pod being handled and the annotation."""
    try:
        return list(_shared_pools(raw))
    except KoordletError as exc:
        raise KoordletError(f"pod {pod.key}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _shared_pools(raw: str) -> tuple[SharedPool, ...]:
    return tuple(parse_shared_pools(raw, f"node annotation {ANNOTATION_NODE_CPU_SHARED_POOLS}"))


def parse_shared_pools(raw: str, where: str) -> list[SharedPool]:
    """The ``cpu-shared-pools`` annotation; errors start with ``where``."""
    value = load_json(raw, where)
    if not isinstance(value, list):
        raise KoordletError(f"{where}: expected a JSON list")
    pools: list[SharedPool] = []
    for i, item in enumerate(value):
        entry = gojson.mapping(item, f"{where}: [{i}]", KoordletError, optional=False)
        pools.append(SharedPool(socket=_int_field(entry.get("socket", 0), f"{where}: [{i}].socket"),
                                node=_int_field(entry.get("node", 0), f"{where}: [{i}].node"),
                                cpuset=_cpulist_field(entry.get("cpuset", ""), f"{where}: [{i}].cpuset")))
    return pools


def _is_besteffort(pod: Pod) -> bool:
    return pod.kube_qos is KubeQoS.BESTEFFORT or qos_from_label(pod.labels.get(LABEL_QOS)) is QoSClass.BE


class CpusetHook:
    """The hook with its shared-pool source (see the module doc)."""

    def __init__(self, shared_pools_source: SharedPoolsSource | None = None) -> None:
        self._source = shared_pools_source

    def _pools(self, pod: Pod) -> list[SharedPool] | None:
        raw = self._source() if self._source is not None else None
        return None if raw is None else shared_pools(raw, pod)

    def cpuset(self, pod: Pod) -> tuple[str | None, bool]:
        """(the container's cpuset or None to leave it, whether the CFS quota is unset)."""
        status = resource_status(pod)
        if status.cpuset:
            return status.cpuset, True
        label = qos_from_label(pod.labels.get(LABEL_QOS))
        if status.numa_nodes or label is QoSClass.LS:
            pools = self._pools(pod)
            if pools is not None:
                if status.numa_nodes:
                    return ",".join(p.cpuset for n in status.numa_nodes for p in pools if p.node == n), False
                return ",".join(p.cpuset for p in pools), False
            if label is QoSClass.LS:
                return None, False
        if _is_besteffort(pod):
            return "", False
        return None, False

    def host_app(self, ctx: HostAppContext) -> None:
        """An LS host application's cgroup gets every shared pool, joined with ``,`` (upstream
        ``getHostAppCpuset``, which supports LS only: other classes are left alone, and so is every class
        while the pools are unknown)."""
        if ctx.qos is not QoSClass.LS:
            return
        raw = self._source() if self._source is not None else None
        if raw is None:
            return
        where = f"host application {ctx.name}: node annotation {ANNOTATION_NODE_CPU_SHARED_POOLS}"
        value = ",".join(p.cpuset for p in parse_shared_pools(raw, where))
        if value:  # upstream sets a host application's cpuset only when it is not empty
            ctx.write(CPUSET_CPUS, value)

    def run(self, ctx: HookContext) -> None:
        if ctx.request.container is None:
            if resource_status(ctx.request.pod).cpuset:
                ctx.set("cpu_quota", UNSET_QUOTA)
            return
        value, unset_quota = self.cpuset(ctx.request.pod)
        if value is None:
            return
        ctx.set("cpuset_cpus", value)
        if unset_quota:
            ctx.set("cpu_quota", UNSET_QUOTA)


def new(deps: HookDeps) -> Hook:
    """The hook reading the node's shared pools from ``deps.shared_pools``."""
    hook = CpusetHook(deps.shared_pools)
    return Hook(NAME, "container cpuset.cpus from the pod's CPU binding, the shared pools, \"\" for BE",
                STAGES, hook.run, host_app_fn=hook.host_app)


PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new, gate=gates.CPU_SET_ALLOCATOR)
