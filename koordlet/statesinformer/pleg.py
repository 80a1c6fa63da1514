"""Pod lifecycle events from the kube QoS cgroup directories (Koordinator's ``pkg/koordlet/pleg``).

kubelet creates a pod's cgroup directory (``pod<uid>`` under cgroupfs, ``kubepods-<qos>-pod<uid>.slice``
under systemd) before the pod's first container starts and removes it after the last one stops.
Watching the QoS directories with inotify therefore tells the pod source that its list is stale long
before the next periodic sync.  Koordinator watches the same directories, under ``cpu/`` on cgroup v1.

Each watched directory is re-armed when it disappears and comes back (kubelet may create
``besteffort`` after the agent starts, or recreate it), and directories missing at start are retried
periodically.  cgroupfs does not tell a watch that its own directory was removed (no IN_DELETE_SELF),
so watched directories are also re-checked by inode every retry interval, and at once when their
parent is watched too.  A lost event (inotify queue overflow) is reported as an event: the caller
resyncs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, Protocol

from koordlet import native
from koordlet.errors import CgroupGone, NativeError, ParseError
from koordlet.system.kubepaths import CgroupDriver, parse_pod_dir_name

log = logging.getLogger(__name__)

DEFAULT_RETRY_INTERVAL_SECONDS: Final = 1.0
"""How often directories that do not exist (yet) are tried again and watched ones are checked."""

_ENTRY_EVENTS: Final = native.IN_CREATE | native.IN_DELETE | native.IN_MOVED_FROM | native.IN_MOVED_TO
WATCH_MASK: Final = _ENTRY_EVENTS | native.IN_DELETE_SELF
"""Entries appearing or leaving, plus the directory's own removal (to re-arm).  IN_IGNORED and
IN_Q_OVERFLOW are always reported by the kernel."""


class InotifyLike(Protocol):
    """The part of :class:`koordlet.native.Inotify` the PLEG uses (a seam for tests)."""

    def fileno(self) -> int: ...

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int: ...

    def remove_watch(self, wd: int) -> None: ...

    def read(self) -> list[native.InotifyEvent]: ...

    def close(self) -> None: ...


def is_pod_dir_name(name: str) -> bool:
    """True for a pod cgroup directory name of either cgroup driver."""
    for driver in CgroupDriver:
        try:
            parse_pod_dir_name(driver, name)
        except ParseError:
            continue
        return True
    return False


class Pleg:
    """Calls ``on_event()`` (from its own thread) when pod directories appear or vanish in ``paths``.

    Several events read together produce one call: the caller resyncs everything anyway.  ``paths``
    are absolute directories such as ``<cgroup_root>/cpu/kubepods/besteffort``.  ``clock`` times the
    retries and checks every ``retry_interval_seconds``; ``inotify_factory`` is a seam for tests.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        on_event: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        retry_interval_seconds: float = DEFAULT_RETRY_INTERVAL_SECONDS,
        inotify_factory: Callable[[], InotifyLike] = native.Inotify,
    ) -> None:
        if retry_interval_seconds <= 0:
            raise ValueError(f"retry_interval_seconds must be > 0, got {retry_interval_seconds}")
        self._paths = tuple(dict.fromkeys(os.path.normpath(os.fspath(p)) for p in paths))
        self._on_event = on_event
        self._clock = clock
        self._retry_interval = retry_interval_seconds
        self._inotify_factory = inotify_factory
        self._inotify: InotifyLike | None = None
        self._wd_paths: dict[int, set[str]] = {}
        self._path_wd: dict[str, int] = {}
        self._problems: dict[str, str] = {}  # path -> last logged reason it could not be watched
        self._path_ino: dict[str, tuple[int, int] | None] = {}  # (st_dev, st_ino) of the watched directory
        self._next_check = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = -1, -1
        self._on_failure: Callable[[BaseException], None] | None = None
        self.events = 0
        """Pod directory events seen (each may be one of a batch reported by one ``on_event`` call)."""
        self.overflows = 0
        """Times the kernel's event queue overflowed (events were lost and a resync was asked for)."""

    # ---------------------------------------------------------------------------------- lifecycle

    @property
    def name(self) -> str:
        return "pleg"

    @property
    def watched(self) -> tuple[str, ...]:
        """The directories watched now (the others are missing and retried)."""
        return tuple(p for p in self._paths if p in self._path_wd)

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """Arms the watches on the directories that exist and starts the thread.

        When this returns, entries created in an existing directory are reported.  ``on_failure`` is
        called if the thread dies of an unexpected error.  Raises if inotify itself is unavailable.
        """
        if self._thread is not None:
            raise RuntimeError("Pleg already started")
        self._on_failure = on_failure
        inotify = self._inotify = self._inotify_factory()
        try:
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._arm_missing(initial=True)
            self._thread = threading.Thread(target=self._run, name="koordlet-pleg", daemon=True)
            self._thread.start()
        except BaseException:
            inotify.close()
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r, self._wake_w = -1, -1
            self._thread = None
            raise

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stops the thread, waiting at most ``timeout_seconds``; the thread releases the inotify fd."""
        self._stopping.set()
        if self._wake_w >= 0:
            with contextlib.suppress(BlockingIOError):  # the pipe is full: a wake-up is already pending
                os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(max(0.0, timeout_seconds))
            if self._thread.is_alive():
                log.warning("pleg thread did not stop in time", extra={"timeout_seconds": timeout_seconds})
                return
        # Closed here, once the thread is gone, and not by the thread: a wake-up written to an fd number
        # the thread had already closed could land in a file someone else opened since.
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r, self._wake_w = -1, -1

    # ---------------------------------------------------------------------------------- thread

    def _run(self) -> None:
        inotify = self._inotify
        assert inotify is not None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(inotify.fileno(), selectors.EVENT_READ, "inotify")
                selector.register(self._wake_r, selectors.EVENT_READ, "wake")
                while not self._stopping.is_set():
                    ready = selector.select(max(0.0, self._next_check - self._clock()))
                    if self._stopping.is_set():
                        break
                    if any(key.data == "inotify" for key, _ in ready):
                        self._handle(inotify.read())
                    if self._clock() >= self._next_check:
                        self._check_watches()
        except Exception as exc:
            log.exception("pleg stopped on an unexpected error")
            if self._on_failure is not None:
                self._on_failure(exc)
        finally:
            inotify.close()

    def _handle(self, events: Iterable[native.InotifyEvent]) -> None:
        changed = False
        for event in events:
            if event.mask & native.IN_Q_OVERFLOW:
                # Events were dropped, possibly an IN_IGNORED among them: re-check every watch now.
                self.overflows += 1
                log.warning("pleg inotify queue overflowed, asking for a resync", extra={"overflows": self.overflows})
                self._check_watches()
                changed = True
                continue
            paths = self._wd_paths.get(event.wd)
            if paths is None:
                continue  # a watch already dropped (its IN_IGNORED after our IN_DELETE_SELF handling)
            if event.mask & (native.IN_DELETE_SELF | native.IN_IGNORED):
                self._forget(event.wd)
                changed |= self._arm(sorted(paths), initial=False)
                continue
            if not event.mask & _ENTRY_EVENTS or not event.mask & native.IN_ISDIR:
                continue
            if is_pod_dir_name(event.name):
                self.events += 1
                changed = True
                continue
            # A watched directory may be this entry (``besteffort`` under ``kubepods``): follow it now
            # rather than at the next check.
            children = [c for c in (os.path.join(p, event.name) for p in paths) if c in self._paths]
            if event.mask & (native.IN_DELETE | native.IN_MOVED_FROM):
                for child in children:
                    self._drop(child)
            changed |= self._arm([c for c in children if c not in self._path_wd], initial=False)
        if changed:
            self._notify()

    def _notify(self) -> None:
        try:
            self._on_event()
        except Exception:
            # The callback belongs to the caller; its bug must not stop pod lifecycle events.
            log.exception("pleg event callback failed")

    # ---------------------------------------------------------------------------------- watches

    def _arm_missing(self, *, initial: bool) -> None:
        missing = [p for p in self._paths if p not in self._path_wd]
        if self._arm(missing, initial=initial):
            self._notify()
        self._next_check = self._clock() + self._retry_interval

    def _check_watches(self) -> None:
        # cgroupfs (kernfs) sends no IN_DELETE_SELF/IN_IGNORED when a watched cgroup is removed: the
        # watch pins the dead inode and stays silent.  So a watched path that is gone or now names
        # another directory is dropped and re-armed here, and missing ones are retried.
        for path in [p for p in self._paths if p in self._path_wd]:
            if self._identity(path) != self._path_ino.get(path):
                self._drop(path)
        self._arm_missing(initial=False)

    def _arm(self, paths: Iterable[str], *, initial: bool) -> bool:
        """Watches ``paths``; True when a directory armed after start already holds pods (created
        while it was not watched), so the caller must resync."""
        assert self._inotify is not None
        found_pods = False
        for path in paths:
            try:
                wd = self._inotify.add_watch(path, WATCH_MASK)
            except CgroupGone:
                self._note_problem(path, "does not exist (yet)", logging.DEBUG)
                continue
            except NativeError as exc:
                # ENOSPC (fs.inotify.max_user_watches), EACCES, ENOTDIR: logged once, retried later.
                self._note_problem(path, str(exc), logging.WARNING)
                continue
            self._path_wd[path] = wd
            self._path_ino[path] = self._identity(path)
            self._wd_paths.setdefault(wd, set()).add(path)
            if self._path_ino[path] is None:  # removed right after the watch was added
                self._drop(path)
                continue
            if path in self._problems:
                del self._problems[path]
                log.info("pleg watching directory", extra={"path": path})
            if not initial and self._has_pod_dirs(path):
                found_pods = True
        return found_pods

    def _drop(self, path: str) -> None:
        """Stops watching ``path`` (gone or replaced) and frees the kernel's watch if no path shares it."""
        assert self._inotify is not None
        wd = self._path_wd.pop(path, None)
        self._path_ino.pop(path, None)
        if wd is None:
            return
        sharing = self._wd_paths.get(wd, set())
        sharing.discard(path)
        if not sharing:
            self._wd_paths.pop(wd, None)
            with contextlib.suppress(NativeError):
                self._inotify.remove_watch(wd)

    def _forget(self, wd: int) -> None:
        """The kernel dropped ``wd`` (IN_IGNORED): forget it without removing it again."""
        for path in self._wd_paths.pop(wd, set()):
            if self._path_wd.get(path) == wd:
                del self._path_wd[path]
                self._path_ino.pop(path, None)

    @staticmethod
    def _identity(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _note_problem(self, path: str, reason: str, level: int) -> None:
        if self._problems.get(path) != reason:
            self._problems[path] = reason
            log.log(level, "pleg cannot watch directory, will retry", extra={"path": path, "reason": reason})

    @staticmethod
    def _has_pod_dirs(path: str) -> bool:
        try:
            with os.scandir(path) as entries:
                return any(e.is_dir(follow_symlinks=False) and is_pod_dir_name(e.name) for e in entries)
        except OSError:
            return False
