"""What cpuburst believes a cgroup file holds: the value it last read or wrote there, and when.

Koordinator reads every container's quota every second.  On a node with a thousand containers that is
most of a round's cost while almost every value stays the same, so a value known for less than the
refresh interval (the executor's force-update interval, 60 s by default) is trusted instead: the
strategy wrote it or read it itself.  A change behind its back (kubelet applying a pod update) is seen
at the next refresh, as the executor's own periodic rewrite would repair it.  A refresh of 0 reads
every round, as Koordinator does."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass
class _Entry:
    value: int
    at: float


class Known:
    """Values by (resource, cgroup dir)."""

    def __init__(self, refresh_seconds: float) -> None:
        self.refresh_seconds = refresh_seconds
        self._entries: dict[tuple[str, str], _Entry] = {}

    def get(self, resource: str, rel_dir: str) -> int | None:
        """The value whatever its age (None when unknown)."""
        entry = self._entries.get((resource, rel_dir))
        return None if entry is None else entry.value

    def fresh(self, resource: str, rel_dir: str, now: float) -> int | None:
        """The value when known for less than the refresh interval."""
        entry = self._entries.get((resource, rel_dir))
        if entry is None or now - entry.at >= self.refresh_seconds:
            return None
        return entry.value

    def needs_write(self, resource: str, rel_dir: str, value: int, now: float) -> bool:
        """True unless ``value`` is what the file is known to hold, recently."""
        return self.fresh(resource, rel_dir, now) != value

    def remember(self, resource: str, rel_dir: str, value: int, now: float) -> None:
        self._entries[(resource, rel_dir)] = _Entry(value, now)

    def drop(self, resource: str, rel_dir: str) -> None:
        self._entries.pop((resource, rel_dir), None)

    def keep_only(self, dirs: Container[str]) -> None:
        """Forgets the files of cgroups not in ``dirs`` (pods and containers that went)."""
        for key in [k for k in self._entries if k[1] not in dirs]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
