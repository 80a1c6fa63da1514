"""A stage's adjustment as cgroup updates for the resource executor.

The transports hand most values to the runtime (NRI ``ContainerAdjustment``, the RuntimeHookService
response), which writes them when it creates the cgroup.  Three cases write through the executor instead:

* the ``writes`` of an adjustment (``cpu_idle``, ``cpu_bvt_warp_ns``, ``net_cls_classid``): neither protocol
  carries them;
* everything at ``PreRunPodSandbox``, the pod cgroup (kubelet made it first) being the target: NRI's pod
  events are notifications with no answer to carry values, and no runtime applies the resources of a
  RuntimeHookService sandbox answer to the pod cgroup (upstream ``PodContext.ProxyDone`` writes them too);
* everything under the reconciler, which re-applies hooks to cgroups that already exist.

An empty ``cpuset_cpus`` means "inherit the parent's" (the cpuset hook's answer for BE): the runtime
leaves the file alone then, and so does this module.  ``oom_score_adj``, ``rdt_class`` and
``blockio_class`` are not cgroup files and are left to the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from koordlet.apis.extension import QoSClass
from koordlet.resourceexecutor.update import CgroupUpdate, Result
from koordlet.runtimehooks.framework import WRITE_PREFIX, Adjustment, HookRequest, Stage
from koordlet.system import resources
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.kubepaths import CgroupDriver, cgroup_parent_dir, container_dir_name

FIELD_RESOURCES: Mapping[str, CgroupFile] = {
    "cpu_shares": resources.CPU_SHARES,
    "cpu_quota": resources.CPU_CFS_QUOTA,
    "cpu_period": resources.CPU_CFS_PERIOD,
    "cpuset_cpus": resources.CPUSET_CPUS,
    "cpuset_mems": resources.CPUSET_MEMS,
    "memory_limit": resources.MEMORY_LIMIT,
}
"""Adjustment field -> the cgroup resource it is written to."""

OWNER = "runtimehooks"


def _owner(adjustment: Adjustment, key: str) -> str:
    return f"{OWNER}/{adjustment.owners.get(key, '?')}"


def cgroup_updates(adjustment: Adjustment, rel_dir: str, *, with_fields: bool) -> list[CgroupUpdate]:
    """The updates for the cgroup ``rel_dir``: the adjustment's ``writes`` always, its resource fields
    when ``with_fields`` (nobody else will write them)."""
    updates: list[CgroupUpdate] = []
    if with_fields:
        for name, resource in FIELD_RESOURCES.items():
            value = adjustment.values.get(name)
            if value is None or (name.startswith("cpuset_") and value == ""):
                continue
            updates.append(CgroupUpdate(resource, rel_dir, value, _owner(adjustment, name)))
    for key, value in adjustment.writes.items():
        updates.append(CgroupUpdate(resources.REGISTRY[key], rel_dir, value, _owner(adjustment, WRITE_PREFIX + key)))
    return updates


def pod_rel_dir(request: HookRequest) -> str:
    """The pod cgroup the runtime was told about, relative to the hierarchy roots."""
    return cgroup_parent_dir(request.pod_cgroup_parent)


def container_rel_dir(request: HookRequest) -> str:
    """The container's cgroup below the pod's: named by the bare id under cgroupfs, as a ``.scope`` under
    systemd (a pod parent that is a slice)."""
    pod_dir = pod_rel_dir(request)
    container_id = request.container_id if "://" in request.container_id else f"containerd://{request.container_id}"
    driver = CgroupDriver.SYSTEMD if pod_dir.endswith(".slice") else CgroupDriver.CGROUPFS
    return f"{pod_dir}/{container_dir_name(driver, container_id)}"


class QuotaBound(Protocol):
    """Whether the kernel may refuse a quota in the pod's subtree (the executor's ``quota_limited_above``:
    cgroup v1 with a limited QoS group above the pod, or one cpusuppress may limit, ``suppressible``)."""

    def __call__(self, rel_dir: str, *, suppressible: bool = False) -> bool: ...


class Applier:
    """Writes what a transport's answer cannot carry (see the module doc) through the executor, and keeps
    a container's CFS quota out of the runtime's hands where writing it could fail (:meth:`defer_quota`)."""

    def __init__(self, apply: Callable[[list[CgroupUpdate]], list[Result]],
                 quota_bound: QuotaBound | None = None, *, defer_be_quota: bool = False,
                 intend: Callable[[list[CgroupUpdate], str], list[Result]] | None = None) -> None:
        """``defer_be_quota``: a BE container's quota may be left to the reconciler even while the BE group is
        unlimited (see :meth:`defer_quota`); only where the reconciler knows every pod's spec (pods from
        kubelet), since a quota left out is otherwise never written.  ``intend(updates, who)``: shadow mode's
        executor call (what it would write, written nowhere); None: a hook in shadow mode writes nothing and
        records nothing at the node level."""
        self._apply = apply
        self._intend = intend
        self._quota_bound = quota_bound
        self._defer_be_quota = defer_be_quota

    def defer_quota(self, request: HookRequest, adjustment: Adjustment) -> None:
        """Leaves a container's CFS quota to the reconciler where the runtime's write could fail.

        On cgroup v1 a quota above an ancestor's is refused with EINVAL, and the runtime's refusal fails
        the whole container.  A BE container's batch-cpu quota sits below its pod's, which fits it, and the
        BE QoS group's, which cpusuppress (cfsQuota policy) lowers every round: a value that fits when the
        hook answers may not fit when runc writes it a moment later.  So while a group above the pod holds a
        quota, the answer leaves the quota out (the container starts bounded by its pod's limit) and the
        reconciler writes it through the executor, which fits it to the ancestors under the same lock as
        cpusuppress's writes; otherwise the runtime sets it at creation, as upstream does.  A BE pod's counts as
        held even while the BE group is unlimited: cpusuppress may limit it between this answer and runc's
        write (the first BE pod on a busy node is exactly when it starts to)."""
        quota = adjustment.values.get("cpu_quota")
        if (self._quota_bound is None or request.container is None or not isinstance(quota, int)
                or isinstance(quota, bool) or quota <= 0 or not request.pod_cgroup_parent):
            return
        suppressible = self._defer_be_quota and request.pod.qos is QoSClass.BE
        if self._quota_bound(pod_rel_dir(request), suppressible=suppressible):
            del adjustment.values["cpu_quota"]
            adjustment.owners.pop("cpu_quota", None)

    def apply(self, updates: list[CgroupUpdate]) -> list[Result]:
        """Writes ``updates`` as they are (node-level values of the reconciler: kube-QoS directories)."""
        return self._apply(updates) if updates else []

    def intend(self, updates: list[CgroupUpdate], hook: str) -> list[Result]:
        """What writing ``updates`` for ``hook`` (in shadow mode) would change, written nowhere."""
        if not updates or self._intend is None:
            return []
        return self._intend(updates, f"runtimehooks/{hook}")

    def write(self, request: HookRequest, adjustment: Adjustment, *, with_fields: bool,
              rel_dir: str | None = None) -> list[Result]:
        if not adjustment.writes and not with_fields:
            return []
        if rel_dir is None:
            if request.container is not None and (not request.container_id
                                                  or request.stage is Stage.PRE_CREATE_CONTAINER):
                return []  # no cgroup yet: the reconciler writes it once the container runs
            rel_dir = container_rel_dir(request) if request.container is not None else pod_rel_dir(request)
        updates = cgroup_updates(adjustment, rel_dir, with_fields=with_fields)
        return self._apply(updates) if updates else []
