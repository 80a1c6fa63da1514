"""A stand-in for the ``sched_core_*`` functions of ``koordlet.native`` over an in-memory kernel: one cookie
per task, one per calling thread (share_to pushes the caller's cookie, share_from pulls onto the caller), and
a log of every call as (op, pid, scope).  ``fail`` maps (op, pid) or op to the errno raised the way
koordlet.native raises it; ``exited`` tasks answer ESRCH to everything."""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass, field

from koordlet.errors import from_errno
from koordlet.resourceexecutor.coresched import CoreSchedScope

T, TG = CoreSchedScope.THREAD, CoreSchedScope.THREAD_GROUP
FIRST_COOKIE = 0x1000


@dataclass
class FakeNative:
    cookies: dict[int, int] = field(default_factory=dict)
    thread: threading.local = field(default_factory=threading.local)
    """The calling thread's cookie (``thread.cookie``): thread-local, so a new relay thread starts at 0 even
    when the OS hands it a recycled thread id."""
    calls: list[tuple[str, int, CoreSchedScope]] = field(default_factory=list)
    fail: dict[object, int] = field(default_factory=dict)
    exited: set[int] = field(default_factory=set)
    next_cookie: int = FIRST_COOKIE

    def take_calls(self) -> list[tuple[str, int, CoreSchedScope]]:
        calls, self.calls = self.calls, []
        return calls

    def _enter(self, op: str, pid: int, scope: int) -> None:
        self.calls.append((op, pid, CoreSchedScope(scope)))
        code = self.fail.get((op, pid), self.fail.get(op))
        if code is None and pid in self.exited:
            code = errno.ESRCH
        if code is not None:
            raise from_errno(code, f"PR_SCHED_CORE {op} pid {pid}")

    def sched_core_get(self, pid: int = 0) -> int:
        self._enter("get", pid, T)
        if pid == 0:
            return getattr(self.thread, "cookie", 0)
        return self.cookies.get(pid, 0)

    def sched_core_create(self, pid: int, scope: int) -> None:
        self._enter("create", pid, scope)
        self.cookies[pid] = self.next_cookie
        self.next_cookie += 1

    def sched_core_share_to(self, pid: int, scope: int) -> None:
        self._enter("share_to", pid, scope)
        self.cookies[pid] = getattr(self.thread, "cookie", 0)

    def sched_core_share_from(self, pid: int, scope: int = 0) -> None:
        self._enter("share_from", pid, scope)
        self.thread.cookie = self.cookies.get(pid, 0)
