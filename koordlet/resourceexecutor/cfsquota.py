"""CFS quota in the cgroup v1 hierarchy: a child's quota may not exceed its parent's.

cgroup v1 checks every write of ``cpu.cfs_quota_us`` against the whole subtree (``tg_cfs_schedulable_down``
in kernel/sched/core.c): a group whose quota/period exceeds its parent's is refused with EINVAL, both when
the child is written and when the parent is lowered below a child.  cgroup v2 takes the minimum instead.
So on v1 the BE QoS group could not be suppressed below one BE pod's own batch-cpu limit (1 core), and a
BE container could not be given its limit while suppression held its parent lower.

Capping changes nothing a process can use (the parent's quota binds the whole subtree anyway), so the
executor fits v1 quota writes into the hierarchy: a value above the parent's is capped to it, and before
a group is lowered its descendants above the new value are capped first, deepest first.  Their owners
(the runtime hooks' reconciler, cpuburst) write their own values again on their next round, which the
parent then lets through once it has grown back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from koordlet.resourceexecutor.update import CgroupUpdate
from koordlet.system.resources import CPU_CFS_QUOTA

QUOTA_FILE = "cpu.cfs_quota_us"
PERIOD_FILE = "cpu.cfs_period_us"
MIN_QUOTA_US = 1000
"""The kernel's smallest quota (1 ms)."""
DEFAULT_PERIOD_US = 100_000
MAX_DEPTH = 3
"""QoS group -> pod -> container (-> a container's own children): deeper trees are not walked."""

Read = Callable[[str], "str | None"]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def limit_of(directory: str, read: Read) -> tuple[int, int] | None:
    """(quota, period) of a cgroup directory, None when unlimited or unreadable."""
    quota = _int(read(os.path.join(directory, QUOTA_FILE)))
    if quota is None or quota < 0:
        return None
    return quota, _int(read(os.path.join(directory, PERIOD_FILE))) or DEFAULT_PERIOD_US


def binding_limit(directory: str, root: str, read: Read) -> tuple[int, int] | None:
    """(quota, period) of the nearest limited cgroup at or above ``directory`` (an unlimited group
    inherits its parent's limit in the kernel's check), None when nothing up to ``root`` is limited."""
    root = root.rstrip("/")
    current = directory.rstrip("/")
    while current.startswith(root + "/"):
        limit = limit_of(current, read)
        if limit is not None:
            return limit
        current = os.path.dirname(current)
    return None


def capped(quota: int, period: int, limit: tuple[int, int] | None) -> int:
    """``quota`` per ``period`` capped to the rate of ``limit`` (at least the kernel's 1 ms)."""
    if limit is None or quota < 0:
        return quota
    return min(quota, max(MIN_QUOTA_US, limit[0] * period // limit[1]))


def fit_to_parent(update: CgroupUpdate, directory: str, root: str, read: Read) -> CgroupUpdate:
    """``update`` (a quota for ``directory``) capped to the rate its ancestors allow."""
    if not isinstance(update.value, int) or isinstance(update.value, bool) or update.value < 0:
        return update
    limit = binding_limit(os.path.dirname(directory.rstrip("/")), root, read)
    period = _int(read(os.path.join(directory, PERIOD_FILE))) or DEFAULT_PERIOD_US
    value = capped(update.value, period, limit)
    if value == update.value or limit is None:
        return update
    return replace(update, value=value,
                   owner=f"{update.owner} (capped at an ancestor's {limit[0]}/{limit[1]} us: cgroup v1)")


def descendants_above(update: CgroupUpdate, directory: str, read: Read) -> list[CgroupUpdate]:
    """Quota updates capping the descendants of ``directory`` whose rate would exceed ``update``'s new
    quota, deepest first (the order the kernel accepts them in)."""
    if not isinstance(update.value, int) or isinstance(update.value, bool) or update.value < 0:
        return []
    period = _int(read(os.path.join(directory, PERIOD_FILE))) or DEFAULT_PERIOD_US
    owner = f"resourceexecutor: cap below {update.rel_dir} ({update.value}/{period} us), cgroup v1 hierarchy"
    caps: list[CgroupUpdate] = []
    _walk(directory, update.rel_dir.rstrip("/"), update.value, period, read, owner, caps, 1)
    return caps


def _walk(directory: str, rel_dir: str, quota: int, period: int, read: Read, owner: str,
          caps: list[CgroupUpdate], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    try:
        with os.scandir(directory) as entries:
            children = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:  # vanished: nothing below it to fit
        return
    for name in children:
        child_dir, child_rel = os.path.join(directory, name), f"{rel_dir}/{name}"
        own_quota = _int(read(os.path.join(child_dir, QUOTA_FILE)))
        if own_quota is None:
            continue
        child_period = _int(read(os.path.join(child_dir, PERIOD_FILE))) or DEFAULT_PERIOD_US
        allowed = max(MIN_QUOTA_US, quota * child_period // period)
        if own_quota < 0:
            # Unlimited: it inherits the parent's limit, which its own children must fit under.
            _walk(child_dir, child_rel, quota, period, read, owner, caps, depth + 1)
        elif own_quota > allowed:
            _walk(child_dir, child_rel, allowed, child_period, read, owner, caps, depth + 1)
            caps.append(CgroupUpdate(CPU_CFS_QUOTA, child_rel, allowed, owner))
