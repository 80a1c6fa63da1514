"""What cpuburst believes a cgroup file holds: the value it last read or wrote there, and when.

Not a cache of what was sent (the executor skips a value it wrote recently by itself); it spares reads
and tells changes apart:

* Koordinator reads every container's quota every second.  On a node with a thousand containers that is
  most of a round's cost while almost every value stays the same, so a quota known for less than the
  refresh interval (the executor's force-update interval, 60 s by default) is trusted instead: the
  strategy wrote it or read it itself.  A change behind its back (kubelet applying a pod update) is seen
  at the next refresh, as the executor's own periodic rewrite would repair it.  A refresh of 0 reads
  every round, as Koordinator does.
* A burst written is counted as set only when it differs from the one the file held (the executor's
  periodic rewrite of the same value is not a change the decision should report)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from koordlet.system.cgroupfile import CgroupFile


@dataclass(slots=True)
class _Entry:
    value: int
    at: float


class Known:
    """Values by (resource, cgroup dir)."""

    def __init__(self, refresh_seconds: float) -> None:
        self.refresh_seconds = refresh_seconds
        # Keyed by the descriptor's registry key: hashing the descriptor itself hashes every field of
        # the frozen dataclass, which costs more than the rest of a lookup over thousands of containers.
        self._entries: dict[tuple[str, str], _Entry] = {}

    def get(self, resource: CgroupFile, rel_dir: str) -> int | None:
        """The value whatever its age (None when unknown)."""
        entry = self._entries.get((resource.key, rel_dir))
        return None if entry is None else entry.value

    def fresh(self, resource: CgroupFile, rel_dir: str, now: float) -> int | None:
        """The value when known for less than the refresh interval."""
        entry = self._entries.get((resource.key, rel_dir))
        if entry is None or now - entry.at >= self.refresh_seconds:
            return None
        return entry.value

    def remember(self, resource: CgroupFile, rel_dir: str, value: int, now: float) -> int | None:
        """Returns the value known before (None when unknown)."""
        key = (resource.key, rel_dir)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(value, now)
            return None
        # Every steady round remembers every file again: no new entry for that.
        previous = entry.value
        entry.value = value
        entry.at = now
        return previous

    def drop(self, resource: CgroupFile, rel_dir: str) -> None:
        self._entries.pop((resource.key, rel_dir), None)

    def keep_only(self, dirs: Container[str]) -> None:
        """Forgets the files of cgroups not in ``dirs`` (pods and containers that went)."""
        for key in [k for k in self._entries if k[1] not in dirs]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
