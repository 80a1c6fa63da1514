"""Model checkpoints on disk: one JSON file per model, named by the model's UID (Koordinator
``pkg/koordlet/prediction/checkpoint.go``, ``fileCheckpointer``).

A file holds upstream's ``ModelCheckpoint`` encoding (Go field names, no JSON tags)::

    {"UID": "__node-sys__", "CPU": {histogram checkpoint}, "Memory": {...}, "LastUpdated": "2024-...Z"}

Files are replaced atomically (temporary file, fsync, rename); leftover temporary files are removed on
restore, and a file that does not decode comes back with its error so the caller removes it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from koordlet.apis.nodemetric import format_time, parse_time
from koordlet.errors import ParseError
from koordlet.prediction.histogram import HistogramCheckpoint
from koordlet.system import atomicfile

log = logging.getLogger(__name__)

_UID_PATTERN: Final = re.compile(r"[A-Za-z0-9._-]{1,128}")
"""A model UID is a file name: Kubernetes UIDs and the node item names fit; anything with a slash (a path
out of the directory) or a leading dot (a temporary file) does not."""


def valid_uid(uid: str) -> bool:
    return bool(_UID_PATTERN.fullmatch(uid)) and not uid.startswith(".")


@dataclass(slots=True)
class ModelCheckpoint:
    uid: str
    cpu: HistogramCheckpoint | None
    memory: HistogramCheckpoint | None
    last_updated: float
    error: str | None = None
    """Why the file did not decode (upstream ``Error``, not serialised)."""

    def to_json(self) -> dict[str, object]:
        return {"UID": self.uid,
                "CPU": self.cpu.to_json() if self.cpu is not None else None,
                "Memory": self.memory.to_json() if self.memory is not None else None,
                "LastUpdated": format_time(self.last_updated)}


def _decode(uid: str, data: bytes) -> ModelCheckpoint:
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ParseError(f"checkpoint {uid}: expected an object")
        cpu = HistogramCheckpoint.from_json(obj["CPU"], f"checkpoint {uid}.CPU") if obj.get("CPU") else None
        memory = HistogramCheckpoint.from_json(obj["Memory"], f"checkpoint {uid}.Memory") \
            if obj.get("Memory") else None
        updated = obj.get("LastUpdated")
        last_updated = parse_time(updated) if isinstance(updated, str) and updated else 0.0
    except (ValueError, KeyError, TypeError) as exc:
        return ModelCheckpoint(uid, None, None, 0.0, error=str(exc))
    # The file name is the UID, whatever the content says (upstream resets it the same way).
    return ModelCheckpoint(uid, cpu, memory, last_updated)


class FileCheckpointer:
    """Checkpoints under one directory (created on the first save)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def save(self, checkpoint: ModelCheckpoint) -> None:
        """Raises ValueError for a UID that is not a safe file name, OSError when the write fails."""
        if not valid_uid(checkpoint.uid):
            raise ValueError(f"model uid {checkpoint.uid!r} is not a valid checkpoint file name")
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps(checkpoint.to_json(), sort_keys=True).encode() + b"\n"
        atomicfile.write(self.directory / checkpoint.uid, data, mode=0o600, sync_dir=False)

    def remove(self, uid: str) -> None:
        if not valid_uid(uid):
            return
        with contextlib.suppress(FileNotFoundError):
            (self.directory / uid).unlink()

    def restore(self) -> list[ModelCheckpoint]:
        """Every checkpoint in the directory (none when it does not exist); undecodable ones carry ``error``."""
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            if entry.name.endswith(".tmp"):
                # A save cut short by a crash; the model is saved again at its next turn.
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                continue
            if not valid_uid(entry.name):
                continue
            try:
                data = Path(entry.path).read_bytes()
            except OSError as exc:
                log.warning("prediction checkpoint unreadable, skipped", extra={"path": entry.path, "error": str(exc)})
                continue
            found.append(_decode(entry.name, data))
        return found
