"""``cpunormalization`` (Koordinator ``runtimehooks/hooks/cpunormalization``): on a node whose CPUs are
normalized (Node annotation ``node.koordinator.sh/cpu-normalization-ratio`` above 1, computed by the companion
from ``cpu-normalization-config`` and sent down with the node), an LS pod's CFS quota is divided by the ratio,
rounded up, so that a CPU limit in normalized CPUs becomes the right share of this node's faster CPUs.

Which pods (upstream ``isPodCPUShare``): those labelled LS and those with no Koordinator QoS label, except a
pod bound to CPUs by the ``scheduling.koordinator.sh/resource-status`` annotation (the cpuset hook unsets its
quota).  BE pods are scaled by the batchresource hook from their batch-cpu instead.

Values: per container (``PreCreateContainer``, ``PreUpdateContainerResources``) the quota kubelet derives from
the container's CPU limit (limit milli-cores x 100 at the 100 ms period, at least 1000); per pod
(``PreRunPodSandbox``; in practice the reconciler, whose pods carry their containers) the sum over its
containers when every one has a limit.  A container or pod without a limit keeps its unlimited quota.  With a
ratio of 1 or less (upstream supports no ratio below 1) the quota is kubelet's own, which undoes an earlier
scaling; without any ratio the hook sets nothing.  The
quota is always derived from the spec, never from the cgroup, so re-running the hook (the reconciler does
every round, and again when the ratio changes) never compounds the scaling.

Gate: ``CPUNormalization`` (alpha, off by default, as upstream).
"""

from __future__ import annotations

from koordlet.apis.cpunormalization import scale_quota
from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label, resource_status_cpus
from koordlet.apis.pod import Pod
from koordlet.config import gates
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, Stage

NAME = "cpunormalization"
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES})
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000


def is_cpu_share(pod: Pod) -> bool:
    """LS or unlabelled, and not bound to CPUs (upstream ``isPodCPUShare``).  A resource-status annotation that
    cannot be read counts as a binding: the cpuset hook reports it, and no quota is guessed for such a pod."""
    if qos_from_label(pod.labels.get(LABEL_QOS)) not in (QoSClass.LS, QoSClass.NONE):
        return False
    try:
        return not resource_status_cpus(pod.annotations)
    except ValueError:
        return False


def limit_quota(limit_milli: int | None) -> int | None:
    """kubelet's ``MilliCPUToQuota`` for a limit; None without one."""
    if not limit_milli or limit_milli <= 0:
        return None
    return max(MIN_QUOTA_US, limit_milli * CFS_PERIOD_US // 1000)


def pod_quota(pod: Pod) -> int | None:
    """The pod cgroup's quota kubelet sets: the containers' limits summed, None once one has no limit."""
    if not pod.containers:
        return None
    total = 0
    for container in pod.containers:
        limit = container.limits.cpu_milli
        if not limit or limit <= 0:
            return None
        total += limit
    return limit_quota(total)


def run(ctx: HookContext, ratio: float | None) -> None:
    # A ratio at or below 1 still sets kubelet's quota (upstream's rule is enabled by any ratio): that is how
    # quotas scaled under an earlier ratio come back when the companion resets the node to "1.00".
    if ratio is None:
        return
    request = ctx.request
    if not is_cpu_share(request.pod):
        return
    if request.stage is Stage.PRE_RUN_POD_SANDBOX:
        original = pod_quota(request.pod)
    elif request.container is not None:
        original = limit_quota(request.container.limits.cpu_milli)
    else:
        return
    if original is not None:
        ctx.set("cpu_quota", scale_quota(original, ratio))


def new(deps: HookDeps) -> Hook:
    source = deps.cpu_normalization_ratio
    return Hook(NAME, "LS pod and container cfs quota divided by the node's cpu normalization ratio", STAGES,
                lambda ctx: run(ctx, source()))


PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new, gate=gates.CPU_NORMALIZATION)
