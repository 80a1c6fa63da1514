"""The hook-server registry: which RuntimeHookService to call for each stage (Koordinator pkg/runtimeproxy/config).

Hook servers register by dropping a JSON file into a directory (``/etc/runtime/hookserver.d``); koordlet
writes ``koordlet.json``::

    {"remote-endpoint": "/var/run/koordlet/koordlet.sock", "failure-policy": "Ignore",
     "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", ...]}

Files are read in name order and, as in Koordinator, only the first file that lists a stage is called for
it. A file that cannot be used is reported by :meth:`Registry.errors` and never removes another file's
server; if a file that was good turns bad, its last good version stays in force until it is fixed or
deleted: a typo in one registration must not take a working hook server off every CRI call.

The watcher polls the directory (file names, inodes, sizes, mtimes) instead of using inotify, so the proxy
needs no extra dependency and a directory that does not exist yet is simply empty until it appears.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = (
    "PreRunPodSandbox",
    "PostStopPodSandbox",
    "PreCreateContainer",
    "PreStartContainer",
    "PostStartContainer",
    "PostStopContainer",
    "PreUpdateContainerResources",
)
"""Stage names a hook server may register for (the RuntimeHookService methods without ``Hook``)."""

FAILURE_POLICY_FAIL = "Fail"
FAILURE_POLICY_IGNORE = "Ignore"
DEFAULT_POLL_INTERVAL_SECONDS = 1.0
REGISTRATION_SUFFIX = ".json"
UNIX_SCHEMES = ("unix://", "unix:")

_HOOK_SUFFIX = "Hook"
_STAGE_SET = frozenset(STAGES)


class RegistrationError(ValueError):
    """A registration file that cannot be used; the message names the file and the bad value."""


def normalize_stage(name: str) -> str | None:
    """The stage called ``name`` (``PreCreateContainer`` or ``PreCreateContainerHook``), None if unknown."""
    stage = name.removesuffix(_HOOK_SUFFIX) if name.endswith(_HOOK_SUFFIX) else name
    return stage if stage in _STAGE_SET else None


@dataclass(frozen=True)
class HookServer:
    """One registered hook server (one registration file)."""

    name: str
    """File name of the registration, e.g. ``koordlet.json``; also its rank (name order)."""
    endpoint: str
    """Absolute path of the server's unix socket (a ``unix://`` prefix in the file is removed)."""
    failure_policy: str
    """``Fail``: the CRI call fails when the hook errs; ``Ignore``: log and forward the original request."""
    hooks: frozenset[str]
    """Stages this server serves (names from :data:`STAGES`)."""

    @property
    def target(self) -> str:
        """The gRPC target of :attr:`endpoint`."""
        return f"unix://{self.endpoint}"


def parse_registration(name: str, body: bytes | str) -> HookServer:
    """The :class:`HookServer` described by file ``name`` holding ``body``; :class:`RegistrationError` if bad."""
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise RegistrationError(f"{name}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise RegistrationError(f"{name}: must hold a JSON object, got {type(data).__name__}")
    return HookServer(
        name=name,
        endpoint=_endpoint(name, data.get("remote-endpoint")),
        failure_policy=_failure_policy(name, data.get("failure-policy")),
        hooks=_hooks(name, data.get("runtime-hooks")),
    )


def _endpoint(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RegistrationError(f"{name}: remote-endpoint: must be a non-empty socket path, got {value!r}")
    path = value.strip()
    for scheme in UNIX_SCHEMES:
        if path.startswith(scheme):
            path = path[len(scheme) :]
            break
    else:
        if "://" in path:
            raise RegistrationError(f"{name}: remote-endpoint: only unix sockets are supported, got {value!r}")
    # A relative path would be resolved against the proxy's working directory, never what was meant.
    if not os.path.isabs(path):
        raise RegistrationError(f"{name}: remote-endpoint: must be an absolute socket path, got {value!r}")
    return os.path.normpath(path)


def _failure_policy(name: str, value: object) -> str:
    if value is None or value == "" or value == FAILURE_POLICY_IGNORE:
        return FAILURE_POLICY_IGNORE
    if value == FAILURE_POLICY_FAIL:
        return FAILURE_POLICY_FAIL
    raise RegistrationError(f"{name}: failure-policy: must be Fail or Ignore, got {value!r}")


def _hooks(name: str, value: object) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise RegistrationError(f"{name}: runtime-hooks: must be a list of stage names, got {value!r}")
    stages = []
    unknown = []
    for item in value:
        stage = normalize_stage(item) if isinstance(item, str) else None
        if stage is None:
            unknown.append(item)
        else:
            stages.append(stage)
    if unknown:
        raise RegistrationError(
            f"{name}: runtime-hooks: unknown stage {', '.join(map(repr, unknown))}; known: {', '.join(STAGES)}"
        )
    return frozenset(stages)


@dataclass(frozen=True)
class _Seen:
    """What the registry last read from one file."""

    body: bytes | None
    """None when the file could not be read."""
    server: HookServer | None
    error: str | None


class Registry:
    """Hook servers registered in ``directory``; thread-safe.

    :meth:`reload` reads the directory now; :meth:`start` reloads and then watches it from a thread,
    reloading when a file's name, inode, size or mtime changes (every ``poll_interval`` seconds).
    """

    def __init__(self, directory: str, poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval: must be > 0, got {poll_interval!r}")
        self.directory = directory
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._good: dict[str, HookServer] = {}
        self._by_stage: dict[str, HookServer] = {}
        """Stage -> the first server in file-name order that serves it (rebuilt on every change of ``_good``)."""
        self._errors: dict[str, str] = {}
        self._generation = 0
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> None:
        """Reload now, then watch the directory until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("hook-server registry: already started")
        # Taken before reading, so a change made while reading is seen by the first poll.
        signature = self._signature()
        self.reload()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._watch, args=(signature,), name="hookserver-registry", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stop watching; waits up to ``timeout_seconds`` for the watcher to end."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_seconds)

    def _watch(self, signature: tuple[tuple[str, int, int, int, int], ...]) -> None:
        while not self._stop.wait(self.poll_interval):
            current = self._signature()
            if current == signature:
                continue
            signature = current
            try:
                self.reload()
            except Exception:  # the watcher must survive anything a reload meets
                log.exception("hook-server registry: reloading failed", extra={"directory": self.directory})

    def _signature(self) -> tuple[tuple[str, int, int, int, int], ...]:
        # Inode and ctime too: an atomic rename of a same-size file within one timestamp tick (the kernel
        # stamps files at jiffy granularity) still changes the inode.
        entries = []
        for name in self._file_names():
            try:
                st = os.stat(os.path.join(self.directory, name))
            except OSError:
                continue
            entries.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(entries)

    def _file_names(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        # Dot files are editors' and writers' temporaries (koordlet writes .koordlet.*.tmp, then renames).
        return sorted(n for n in names if n.endswith(REGISTRATION_SUFFIX) and not n.startswith("."))

    # -- reading --

    def reload(self) -> None:
        """Read every registration file now; logs once for each file that changed, appeared or went away."""
        with self._reload_lock:
            bodies: dict[str, bytes | OSError] = {}
            for name in self._file_names():
                path = os.path.join(self.directory, name)
                if not os.path.isfile(path):
                    continue
                try:
                    with open(path, "rb") as f:
                        bodies[name] = f.read()
                except FileNotFoundError:
                    continue
                except OSError as error:
                    bodies[name] = error
            with self._lock:
                previous = dict(self._seen)
            for name, body in bodies.items():
                seen = previous.get(name)
                if isinstance(body, OSError):
                    why = f"{name}: cannot be read: {body}"
                    if seen is None or seen.error != why:
                        self._record(name, _Seen(None, None, why))
                    continue
                if seen is not None and seen.body == body:
                    continue
                try:
                    server = parse_registration(name, body)
                except RegistrationError as rejected:
                    self._record(name, _Seen(body, None, str(rejected)))
                else:
                    self._record(name, _Seen(body, server, None))
            for name in previous.keys() - bodies.keys():
                self._forget(name)

    def _record(self, name: str, seen: _Seen) -> None:
        with self._lock:
            self._seen[name] = seen
            if seen.server is not None:
                self._good[name] = seen.server
                self._errors.pop(name, None)
                log.info("hook-server registry: server registered",
                         extra={"file": name, "endpoint": seen.server.endpoint,
                                "failure_policy": seen.server.failure_policy,
                                "stages": ", ".join(sorted(seen.server.hooks))})
            else:
                assert seen.error is not None
                self._errors[name] = seen.error
                kept = self._good.get(name)
                if kept is None:
                    log.error("hook-server registry: rejected", extra={"error": seen.error})
                else:
                    log.error("hook-server registry: rejected; keeping its last good version",
                              extra={"error": seen.error})
            self._changed_locked()

    def _forget(self, name: str) -> None:
        with self._lock:
            self._seen.pop(name, None)
            self._errors.pop(name, None)
            if self._good.pop(name, None) is not None:
                log.info("hook-server registry: removed", extra={"file": name})
            self._changed_locked()

    def _changed_locked(self) -> None:
        """Under the lock, after a change: the per-stage index (read on every CRI call, so built here once
        rather than per call), the generation, the waiters."""
        by_stage: dict[str, HookServer] = {}
        for name in sorted(self._good):
            for stage in self._good[name].hooks:
                by_stage.setdefault(stage, self._good[name])
        self._by_stage = by_stage
        self._generation += 1
        self._changed.notify_all()

    # -- queries --

    def servers(self) -> tuple[HookServer, ...]:
        """Hook servers in force, in file-name order."""
        with self._lock:
            return tuple(self._good[name] for name in sorted(self._good))

    def server_for(self, stage: str) -> HookServer | None:
        """The first server (in file-name order) that serves ``stage``; None if none does.

        ``stage`` may carry the ``Hook`` suffix; an unknown stage is a programming error (ValueError).
        """
        normalized = normalize_stage(stage)
        if normalized is None:
            raise ValueError(f"unknown runtime hook stage {stage!r}; known: {', '.join(STAGES)}")
        return self._by_stage.get(normalized)  # replaced whole under the lock, never changed in place

    def errors(self) -> dict[str, str]:
        """File name -> why its current content is rejected (a copy)."""
        with self._lock:
            return dict(self._errors)

    @property
    def generation(self) -> int:
        """Increases whenever a file is (re)read or removed; see :meth:`wait_for_change`."""
        with self._lock:
            return self._generation

    def wait_for_change(self, after: int, timeout_seconds: float) -> bool:
        """Wait until :attr:`generation` exceeds ``after``; False if ``timeout_seconds`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._generation > after, timeout_seconds)
