"""Which group holds which cookie and which tasks carry it (Koordinator's ``cookieCache`` and ``groupCache``
in ``runtimehooks/hooks/coresched``), driving :class:`~koordlet.resourceexecutor.coresched.CoreSchedExecutor`.

* The first tasks of a group get a new cookie: ``assign_group`` (get, create, get, then share_from the
  leader and share_to the others in a relay thread) — Koordinator ``addCookie``.
* Later tasks of the group get the cookie of a sibling that still holds it: ``get(sibling)`` must answer the
  group's cookie (a sibling that exited, or a recycled PID, answers something else and is dropped), then
  ``assign(sibling, new)`` — Koordinator ``assignCookie``.  With no valid sibling left the group starts over
  with a new cookie, as Koordinator falls back to Add.
* Tasks of a container that turned off (policy ``none``, class disabled) or the whole book on switch-off go
  back to cookie 0: ``clear`` — Koordinator ``clearCookie``.  Processes forked inside a container inherit its
  cookie, so a clear covers every task now in the container, not only the ones this book assigned.

A group whose tasks are all gone is dropped, so its next task gets a fresh cookie.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from koordlet.resourceexecutor.update import Outcome, Result

_F = TypeVar("_F", bound=Callable[..., Any])

ContainerKey = tuple[str, str]
"""(pod UID, container id)."""


class CookieCalls(Protocol):
    """The core-scheduling calls koordlet makes (:class:`~koordlet.resourceexecutor.coresched.CoreSchedExecutor`,
    or a shadow-mode view of it, :class:`~koordlet.isolation.coresched.shadow.ShadowCoreSched`)."""

    @property
    def unsupported_reason(self) -> str | None: ...
    def probe(self) -> str | None: ...
    def get(self, pid: int) -> Result: ...
    def assign_group(self, leader_pid: int, pids: Iterable[int], owner: str) -> Result: ...
    def assign(self, from_pid: int, pids: Iterable[int], owner: str) -> Result: ...
    def clear(self, pids: Iterable[int], owner: str) -> Result: ...


@dataclass
class GroupEntry:
    cookie: int
    pids: set[int] = field(default_factory=set)


@dataclass
class ContainerEntry:
    group: str
    pids: set[int] = field(default_factory=set)


@dataclass
class Tally:
    """What one round did to cookies."""

    created: list[str] = field(default_factory=list)
    """Groups that got a new cookie."""
    assigned: int = 0
    """Tasks given a group's cookie (new-cookie leaders included)."""
    cleared: int = 0
    gone: int = 0
    failures: list[str] = field(default_factory=list)
    unsupported: str | None = None


def _locked(method: _F) -> _F:
    @functools.wraps(method)
    def wrapper(self: CookieBook, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)
    return cast(_F, wrapper)


class CookieBook:
    """The cookies koordlet made; all prctl calls go through ``executor``.  One book is shared by the
    strategy (QoS manager thread) and the runtime hook (hook threads), so one group gets one cookie:
    its public methods hold :attr:`lock`."""

    def __init__(self, executor: CookieCalls) -> None:
        self.executor = executor
        self.lock = threading.RLock()
        self.groups: dict[str, GroupEntry] = {}
        self.containers: dict[ContainerKey, ContainerEntry] = {}

    # ------------------------------------------------------------------------------------------ enable

    @_locked
    def enable(self, key: ContainerKey, group: str, pids: Sequence[int], owner: str, tally: Tally) -> None:
        """Puts every task of the container into ``group``'s cookie."""
        current = set(pids)
        previous = self.containers.get(key)
        if previous is not None and previous.group != group:
            # Moved to another group (label or coreExpeller changed): the new cookie replaces the old one.
            self._drop_pids(previous.group, previous.pids)
            previous = None
        container = previous or ContainerEntry(group)
        self.containers[key] = container
        left = container.pids - current
        if left:
            container.pids -= left
            self._drop_pids(group, left)
        entry = self.groups.get(group)
        todo = [p for p in pids if entry is None or p not in entry.pids]
        if not todo:
            return
        if entry is not None:
            sibling = self._valid_sibling(group, entry)
            if sibling is not None:
                result = self.executor.assign(sibling, todo, owner)
                if result.outcome is Outcome.DONE:
                    self._record(result, group, entry, container, tally)
                    return
                if result.outcome is Outcome.UNSUPPORTED:
                    tally.unsupported = result.error
                    return
                if result.outcome is not Outcome.GONE:
                    tally.failures.append(f"group {group!r}: {result.error or result.outcome.value}")
                    return
                entry.pids.discard(sibling)
            # No task holds the group's cookie any more (Koordinator: fall back to Add).
            self._drop_group(group)
            todo = list(dict.fromkeys(pids))
        self._add(group, todo, owner, container, tally)

    def _add(self, group: str, todo: list[int], owner: str, container: ContainerEntry, tally: Tally) -> None:
        candidates = list(todo)
        while candidates:
            leader = candidates[0]
            result = self.executor.assign_group(leader, candidates, owner)
            if result.outcome is Outcome.GONE:
                tally.gone += 1
                candidates = candidates[1:]
                continue
            if result.outcome is Outcome.UNSUPPORTED:
                tally.unsupported = result.error
                return
            if result.outcome is not Outcome.DONE or result.cookie is None:
                tally.failures.append(f"group {group!r}: {result.error or result.outcome.value}")
                return
            entry = GroupEntry(result.cookie)
            self.groups[group] = entry
            tally.created.append(group)
            self._record(result, group, entry, container, tally)
            return

    def _valid_sibling(self, group: str, entry: GroupEntry) -> int | None:
        """The first cached task that still holds the group's cookie; invalid ones leave the cache."""
        for pid in sorted(entry.pids):
            got = self.executor.get(pid)
            if got.ok and got.cookie == entry.cookie:
                return pid
            entry.pids.discard(pid)
            for container in self.containers.values():
                if container.group == group:
                    container.pids.discard(pid)
        return None

    def _record(self, result: Result, group: str, entry: GroupEntry, container: ContainerEntry,
                tally: Tally) -> None:
        applied = set(result.applied)
        entry.pids |= applied
        container.pids |= applied
        tally.assigned += len(applied)
        tally.gone += len(result.gone)
        tally.failures.extend(f"group {group!r}: pid {pid}: {message}" for pid, message in result.failed)

    # ------------------------------------------------------------------------------------------ disable

    @_locked
    def disable(self, key: ContainerKey, pids: Sequence[int], owner: str, tally: Tally) -> None:
        """Back to cookie 0 for a container this book gave a cookie; others are left alone."""
        container = self.containers.get(key)
        if container is None:
            return
        targets = sorted(set(pids) | container.pids)
        if targets and not self._clear(targets, owner, tally):
            return
        self._drop_pids(container.group, container.pids)
        del self.containers[key]

    @_locked
    def forget(self, live: Iterable[ContainerKey]) -> list[ContainerKey]:
        """Drops containers (and their tasks) no longer on the node: their tasks are gone, no call needed."""
        alive = set(live)
        gone = [key for key in self.containers if key not in alive]
        for key in gone:
            container = self.containers.pop(key)
            self._drop_pids(container.group, container.pids)
        return gone

    @_locked
    def clear_all(self, pids_of: Callable[[ContainerKey], Sequence[int]], owner: str, tally: Tally) -> None:
        """Switch-off: every container this book touched goes back to cookie 0; the book empties."""
        for key in sorted(self.containers):
            container = self.containers[key]
            targets = sorted(set(pids_of(key)) | container.pids)
            if targets and not self._clear(targets, owner, tally):
                break
        self.containers.clear()
        self.groups.clear()

    def _clear(self, targets: list[int], owner: str, tally: Tally) -> bool:
        result = self.executor.clear(targets, owner)
        if result.outcome is Outcome.UNSUPPORTED:
            tally.unsupported = result.error
            return False
        tally.cleared += len(result.applied)
        tally.gone += len(result.gone)
        tally.failures.extend(f"clear pid {pid}: {message}" for pid, message in result.failed)
        return True

    # ------------------------------------------------------------------------------------------ cache

    def _drop_pids(self, group: str, pids: Iterable[int]) -> None:
        entry = self.groups.get(group)
        if entry is None:
            return
        entry.pids -= set(pids)
        if not entry.pids:
            self._drop_group(group)

    def _drop_group(self, group: str) -> None:
        self.groups.pop(group, None)

    @_locked
    def numbers(self) -> dict[str, dict[str, int]]:
        return {group: {"cookie": e.cookie, "tasks": len(e.pids)} for group, e in sorted(self.groups.items())}

    @_locked
    def copy(self, executor: CookieCalls) -> CookieBook:
        """A book holding what this one holds now, making its calls through ``executor`` (shadow mode's)."""
        twin = CookieBook(executor)
        twin.groups = {group: GroupEntry(e.cookie, set(e.pids)) for group, e in self.groups.items()}
        twin.containers = {key: ContainerEntry(c.group, set(c.pids)) for key, c in self.containers.items()}
        return twin


class Cookies(Protocol):
    """The cookie book as the coresched strategy and hook see it (:class:`CookieBook`, or a shadow-mode view of it,
    :class:`~koordlet.isolation.coresched.shadow.ShadowCookies`)."""

    @property
    def containers(self) -> Mapping[ContainerKey, ContainerEntry]: ...
    def enable(self, key: ContainerKey, group: str, pids: Sequence[int], owner: str, tally: Tally) -> None: ...
    def disable(self, key: ContainerKey, pids: Sequence[int], owner: str, tally: Tally) -> None: ...
    def forget(self, live: Iterable[ContainerKey]) -> list[ContainerKey]: ...
    def clear_all(self, pids_of: Callable[[ContainerKey], Sequence[int]], owner: str, tally: Tally) -> None: ...
    def numbers(self) -> dict[str, dict[str, int]]: ...
