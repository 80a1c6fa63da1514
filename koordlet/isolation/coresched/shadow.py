"""Shadow mode's views of core scheduling (see :mod:`koordlet.resourceexecutor.shadowviews`): the prctl calls and the
cookie book as the coresched strategy or hook sees them.  In active rounds they are the executor and the book shared
by both; in shadow rounds no call that changes a cookie is made:

* :class:`ShadowCoreSched` answers each call as the kernel would: a task that exited is gone, a kernel without core
  scheduling refuses, and the cookie a task would carry is the one the shadow rounds gave it, or else its real one
  (read with ``PR_SCHED_CORE_GET``, which changes nothing).  Each call that would have changed cookies is audited
  and counted as intended.
* :class:`ShadowCookies` runs the book's bookkeeping on a copy of the shared book taken at the first shadow call,
  so the strategy (or hook) decides as it would have from the cookies in force, and the shared book, which the
  other side may still use in active mode, stays true to the kernel.

A would-be cookie is numbered 1, 2, ... in the order the shadow rounds made them (the kernel's are addresses, so
the two never meet).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from koordlet.isolation.coresched.cookies import ContainerEntry, ContainerKey, CookieBook, CookieCalls, Tally
from koordlet.resourceexecutor.coresched import AUDIT_RESOURCE, DEFAULT_COOKIE, each_task
from koordlet.resourceexecutor.shadowviews import ShadowRound, intend
from koordlet.resourceexecutor.update import Outcome, Result


class ShadowCoreSched:
    """Core-scheduling calls as one strategy or hook sees them: the executor's in active rounds, answered without a
    cookie changing in shadow rounds (module docstring).  Thread-safe."""

    def __init__(self, writers: ShadowRound, executor: CookieCalls) -> None:
        self._writers = writers
        self._executor = executor
        self._lock = threading.Lock()
        self._would: dict[int, int] = {}
        """Task -> the cookie the shadow rounds gave it."""
        self._made = 0

    def reset(self) -> None:
        with self._lock:
            self._would.clear()

    @property
    def unsupported_reason(self) -> str | None:
        return self._executor.unsupported_reason

    def probe(self) -> str | None:
        return self._executor.probe()  # a get on koordlet's own thread: changes nothing

    def get(self, pid: int) -> Result:
        if not self._writers.shadow:
            return self._executor.get(pid)
        return self._get(pid)

    def assign_group(self, leader_pid: int, pids: Iterable[int], owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.assign_group(leader_pid, pids, owner)
        others = [p for p in dict.fromkeys(pids) if p != leader_pid]
        before = self._get(leader_pid)
        if not before.ok:
            return Result(None, before.outcome, error=before.error)
        with self._lock:
            self._made += 1
            cookie = self._made
            self._would[leader_pid] = cookie
        shared = self._share(others, cookie)
        if shared.outcome is not Outcome.DONE:
            return shared
        applied = (leader_pid, *shared.applied)
        self._intend(applied, f"create (a new cookie, {cookie} of this shadow run)", before.cookie, owner)
        return Result(None, Outcome.DONE, error=shared.error, cookie=cookie, applied=applied, gone=shared.gone,
                      failed=shared.failed)

    def assign(self, from_pid: int, pids: Iterable[int], owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.assign(from_pid, pids, owner)
        source = self._get(from_pid)  # the relay's share_from: fails as it would
        if not source.ok:
            return Result(None, source.outcome, error=source.error)
        cookie = source.cookie or DEFAULT_COOKIE
        result = self._share([p for p in dict.fromkeys(pids) if p != from_pid], cookie)
        self._intend(result.applied, f"share the cookie of pid {from_pid}", None, owner)
        return result

    def clear(self, pids: Iterable[int], owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.clear(pids, owner)
        result = self._share(list(dict.fromkeys(pids)), DEFAULT_COOKIE)
        self._intend(result.applied, "clear (the default cookie 0)", None, owner)
        return result

    def _get(self, pid: int) -> Result:
        real = self._executor.get(pid)
        with self._lock:
            if not real.ok:
                self._would.pop(pid, None)
                return real
            cookie = self._would.get(pid)
        if cookie is None:
            return real
        return Result(None, Outcome.DONE, real.path, real.text, cookie=cookie)

    def _share(self, targets: Sequence[int], cookie: int) -> Result:
        """Each target would get ``cookie``; a task's real cookie is read to find it gone, as share_to would."""
        result = each_task(targets, self._executor.get, cookie)
        with self._lock:
            self._would.update(dict.fromkeys(result.applied, cookie))
        return result

    def _intend(self, pids: Sequence[int], what: str, old: int | None, owner: str) -> None:
        if pids:
            intend(self._writers, f"pid:{pids[0]}", AUDIT_RESOURCE, None if old is None else str(old),
                   f"{what} for pids {' '.join(map(str, pids))}", owner)


class ShadowCookies:
    """The cookie book as one strategy or hook sees it: the shared book in active rounds, a copy of it driven
    through ``calls`` in shadow rounds (module docstring).  The copy is dropped by :meth:`reset` (the round turned
    active) and taken again at the next shadow call."""

    def __init__(self, writers: ShadowRound, book: CookieBook, calls: CookieCalls) -> None:
        self._writers = writers
        self._shared = book
        self._calls = calls
        self._lock = threading.Lock()
        self._copy: CookieBook | None = None

    def reset(self) -> None:
        with self._lock:
            self._copy = None

    def _book(self) -> CookieBook:
        if not self._writers.shadow:
            return self._shared
        with self._lock:
            if self._copy is None:
                self._copy = self._shared.copy(self._calls)
            return self._copy

    @property
    def containers(self) -> Mapping[ContainerKey, ContainerEntry]:
        return self._book().containers

    def enable(self, key: ContainerKey, group: str, pids: Sequence[int], owner: str, tally: Tally) -> None:
        self._book().enable(key, group, pids, owner, tally)

    def disable(self, key: ContainerKey, pids: Sequence[int], owner: str, tally: Tally) -> None:
        self._book().disable(key, pids, owner, tally)

    def forget(self, live: Iterable[ContainerKey]) -> list[ContainerKey]:
        return self._book().forget(live)

    def clear_all(self, pids_of: Callable[[ContainerKey], Sequence[int]], owner: str, tally: Tally) -> None:
        self._book().clear_all(pids_of, owner, tally)

    def numbers(self) -> dict[str, dict[str, int]]:
        return self._book().numbers()
