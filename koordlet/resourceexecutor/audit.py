"""The audit trail of cgroup writes: one JSON object per line, rotated by size.

Koordinator keeps a write audit under ``/var/log/koordlet``; this one records every attempted write
(time, path, resource, old value when it could be read, new value, owner, outcome, error).  The audit
is a diagnostic: when its own file cannot be written the cgroup write still happens, and the failure
is logged once until the audit works again.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from koordlet.errors import ConfigError

log = logging.getLogger(__name__)

AUDIT_FILE = "resource-executor-audit.log"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_FILES = 3


@dataclass(frozen=True)
class AuditEntry:
    """One attempted write."""

    path: str
    resource: str
    old: str | None
    """The file's content before the write; None when it could not be read."""
    new: str
    owner: str
    outcome: str
    error: str | None = None


class Auditor(Protocol):
    """Where the executor reports each attempted write; must never raise."""

    def record(self, entry: AuditEntry) -> None:
        """Appends ``entry`` to the audit trail."""


class AuditLog:
    """JSON lines in ``<directory>/resource-executor-audit.log``, rotated when a line would push the
    file past ``max_bytes``: the current file becomes ``.1``, ``.1`` becomes ``.2``..., and at most
    ``max_files`` files (the current one included) are kept.  Thread-safe."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_bytes < 1:
            raise ConfigError(f"audit max_bytes: must be positive, got {max_bytes!r}")
        if max_files < 1:
            raise ConfigError(f"audit max_files: must be at least 1, got {max_files!r}")
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, AUDIT_FILE)
        self._max_bytes = max_bytes
        self._max_files = max_files
        self._clock = clock
        self._lock = threading.Lock()
        self._failing = False

    def record(self, entry: AuditEntry) -> None:
        line = self._line(entry)
        with self._lock:
            try:
                self._append(line)
            except OSError as exc:
                if not self._failing:
                    log.warning("audit log write failed", extra={"audit_path": self.path, "error": str(exc)})
                self._failing = True
                return
            if self._failing:
                log.info("audit log writable again", extra={"audit_path": self.path})
            self._failing = False

    def rotated_paths(self) -> list[str]:
        """The audit files that may exist, newest first."""
        return [self.path] + [f"{self.path}.{n}" for n in range(1, self._max_files)]

    def _line(self, entry: AuditEntry) -> bytes:
        when = datetime.fromtimestamp(self._clock(), tz=UTC).isoformat(timespec="milliseconds")
        record = {
            "time": when.replace("+00:00", "Z"),
            "path": entry.path,
            "resource": entry.resource,
            "old": entry.old,
            "new": entry.new,
            "owner": entry.owner,
            "outcome": entry.outcome,
            "error": entry.error,
        }
        return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")

    def _append(self, line: bytes) -> None:
        os.makedirs(self.directory, exist_ok=True)
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(line) > self._max_bytes:
            self._rotate()
        # O_APPEND: one write(2) per line, so a concurrent reader (tail -f) never sees half a line.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        paths = self.rotated_paths()
        if len(paths) == 1:
            os.unlink(self.path)
            return
        # os.replace overwrites the oldest kept file, which drops it.
        for newer, older in reversed(list(itertools.pairwise(paths))):
            if os.path.exists(newer):
                os.replace(newer, older)
