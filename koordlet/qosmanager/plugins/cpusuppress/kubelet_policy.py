"""BE's cpuset under kubelet's CPU manager (Koordinator ``cpu_suppress.go`` ``applyBESuppressCPUSet``,
koordinator#546).

kubelet's ``none`` policy never touches cpusets: the suppressed cpuset goes to the besteffort directory,
its pods and their containers (``applyCPUSetWithNonePolicy``).

Under ``static`` kubelet's reconcile loop writes every non-exclusive container's cpuset back to its shared
pool (``defaultCpuSet``) through the runtime whenever that pool changes.  On cgroup v1 that write fails if
the pod's cgroup is narrower, so upstream first writes the besteffort directory and the pod directories
with every CPU BE may use (``recoverCPUSetIfNeed(PodCgroupPathRelativeDepth)``), then the suppressed
cpuset to each container directory only (``applyCPUSetWithStaticPolicy``, the directories exactly at
container depth below besteffort, sandboxes included).  The executor orders the writes by level, parents
widened first, so the kernel never sees a child wider than its parent.

Whatever the policy, a container kubelet pinned (``cpu_manager_state``) is never written, nor any
directory above or below one: its CPUs are not BE's, and shrinking a parent under it would either fail
(v1, EBUSY) or take CPUs from a Guaranteed container.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from koordlet.resourceexecutor import CgroupUpdate
from koordlet.system.resources import CPUSET_CPUS

CONTAINER_DEPTH = 2
"""Directories below besteffort: ``<pod>/<container>`` (upstream ``ContainerCgroupPathRelativeDepth``)."""


def _depth_below(rel_dir: str, parent: str) -> int | None:
    if rel_dir == parent:
        return 0
    if not rel_dir.startswith(parent + "/"):
        return None
    return rel_dir[len(parent) + 1:].count("/") + 1


def static_updates(dirs: Sequence[str], be_dir: str, cpus: str, wide: str, owner: str) -> list[CgroupUpdate]:
    """``wide`` for besteffort and its pod directories, ``cpus`` for its container directories and for
    every directory outside besteffort (a standalone BE workload's tree: kubelet does not manage it)."""
    updates = []
    for rel_dir in dirs:
        depth = _depth_below(rel_dir, be_dir)
        value = wide if depth is not None and depth < CONTAINER_DEPTH else cpus
        updates.append(CgroupUpdate(CPUSET_CPUS, rel_dir, value, owner))
    return updates


def touches(rel_dir: str, pinned_dirs: Iterable[str]) -> bool:
    """``rel_dir`` is a pinned container's directory, above one or below one."""
    return any(rel_dir == p or p.startswith(rel_dir + "/") or rel_dir.startswith(p + "/") for p in pinned_dirs)


def without_pinned(updates: Iterable[CgroupUpdate], pinned_dirs: Sequence[str]
                   ) -> tuple[list[CgroupUpdate], list[str]]:
    """(the updates that touch no pinned container, the directories left alone for one)."""
    if not pinned_dirs:
        return list(updates), []
    kept: list[CgroupUpdate] = []
    left: list[str] = []
    for update in updates:
        if touches(update.rel_dir, pinned_dirs):
            left.append(update.rel_dir)
        else:
            kept.append(update)
    return kept, left
