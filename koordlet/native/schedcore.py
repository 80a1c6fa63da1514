"""Core scheduling cookies (prctl PR_SCHED_CORE)."""

from __future__ import annotations

import enum
import errno

from koordlet.errors import Unsupported, from_errno
from koordlet.native.core import ffi, lib


class SchedCoreScope(enum.IntEnum):
    """Which tasks a PR_SCHED_CORE call covers (PIDTYPE_PID/TGID/PGID)."""

    THREAD = lib.KC_SCHED_CORE_SCOPE_THREAD
    THREAD_GROUP = lib.KC_SCHED_CORE_SCOPE_THREAD_GROUP
    PROCESS_GROUP = lib.KC_SCHED_CORE_SCOPE_PROCESS_GROUP


def check_rc(rc: int, what: str) -> None:
    """Raises the error of a failed PR_SCHED_CORE call (rc is 0 or -errno)."""
    if rc >= 0:
        return
    # With valid arguments the kernel answers EINVAL when built without CONFIG_SCHED_CORE, and ENODEV
    # when the CPU has no SMT (kernel/sched/core_sched.c).
    if -rc == errno.EINVAL:
        raise Unsupported(errno.EINVAL, f"{what}: kernel has no core scheduling (PR_SCHED_CORE: EINVAL)")
    if -rc == errno.ENODEV:
        raise Unsupported(errno.ENODEV, f"{what}: no SMT siblings, core scheduling is off (ENODEV)")
    raise from_errno(rc, what)


def _check_pid(pid: int) -> None:
    if pid < 0:
        raise ValueError(f"invalid pid {pid}")


def sched_core_get(pid: int = 0) -> int:
    """The core-scheduling cookie of a task (0 = none; pid 0 = the caller)."""
    _check_pid(pid)
    cookie = ffi.new("uint64_t *")
    check_rc(lib.kc_sched_core_get(pid, cookie), f"PR_SCHED_CORE_GET pid {pid}")
    return int(cookie[0])


def sched_core_create(pid: int, scope: SchedCoreScope) -> None:
    """Gives the tasks a new unique cookie."""
    _check_pid(pid)
    check_rc(lib.kc_sched_core_create(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_CREATE pid {pid}")


def sched_core_share_to(pid: int, scope: SchedCoreScope) -> None:
    """Pushes the caller's cookie to the tasks."""
    _check_pid(pid)
    check_rc(lib.kc_sched_core_share_to(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_SHARE_TO pid {pid}")


def sched_core_share_from(pid: int, scope: SchedCoreScope = SchedCoreScope.THREAD) -> None:
    """Pulls the task's cookie onto the caller (the kernel accepts only a thread here)."""
    _check_pid(pid)
    check_rc(
        lib.kc_sched_core_share_from(pid, SchedCoreScope(scope)), f"PR_SCHED_CORE_SHARE_FROM pid {pid}"
    )
