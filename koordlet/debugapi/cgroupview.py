"""The debug API's view of cgroups: values read now, values the executor last wrote, and raw files."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final, Protocol

from koordlet.debugapi import contract
from koordlet.errors import KoordletError
from koordlet.qosmanager.reader import CgroupReader
from koordlet.system.cgroupfile import CgroupFile, FileKind
from koordlet.system.layout import CgroupLayout, clean_rel_dir
from koordlet.system.resources import CPU_CFS_PERIOD, CPU_CFS_QUOTA, CPU_SHARES, CPUSET_CPUS, MEMORY_LIMIT
from koordlet.system.validators import format_cpulist

VALUE_RESOURCES: Final = (CPU_SHARES, CPU_CFS_QUOTA, CPU_CFS_PERIOD, MEMORY_LIMIT, CPUSET_CPUS)
"""The resources ``/v1/pods`` shows as current and desired values (canonical v1 units), keyed by their
registry key."""


class CgroupView(Protocol):
    """Cgroup reads for the debug API; ``rel_dir`` is relative to the hierarchy roots."""

    def current(self, rel_dir: str) -> dict[str, Any]:
        """:data:`VALUE_RESOURCES` read now; files that cannot be read are left out."""
        ...

    def desired(self, rel_dir: str) -> dict[str, Any]:
        """The values the resource executor last wrote to those files (left out when it did not)."""
        ...

    def files(self, rel_dir: str) -> dict[str, str]:
        """``<hierarchy>/<file>`` -> content of every readable regular file of the directory."""
        ...

    def intended(self, rel_dir: str) -> dict[str, Any]:
        """Shadow mode: ``{key: {"value", "because"}}`` of the values strategies would have written there."""
        ...


class HostCgroups:
    """:class:`CgroupView` on this host's hierarchies; ``written`` is the resource executor's
    :meth:`~koordlet.resourceexecutor.executor.ResourceExecutor.last_written`."""

    def __init__(self, layout: CgroupLayout, written: Callable[[str], str | None],
                 reader: CgroupReader | None = None,
                 intended: Callable[[str], tuple[str, str] | None] = lambda _path: None) -> None:
        self.layout = layout
        self._written = written
        self._reader = reader or CgroupReader(layout)
        self._intended = intended

    def current(self, rel_dir: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for resource in VALUE_RESOURCES:
            try:
                value = self._reader.read(resource, rel_dir)
            except (KoordletError, OSError, ValueError):
                continue  # gone, unsupported here, or garbage: the contract leaves it out
            values[resource.key] = format_cpulist(value) if isinstance(value, list) else value
        return values

    def desired(self, rel_dir: str) -> dict[str, Any]:
        return {key: value for key, value, _owner in self._decoded(rel_dir, self._written_text)}

    def intended(self, rel_dir: str) -> dict[str, Any]:
        return {key: {"value": value, "because": owner}
                for key, value, owner in self._decoded(rel_dir, self._intended)}

    def _written_text(self, path: str) -> tuple[str, str] | None:
        text = self._written(path)
        return None if text is None else (text, "")

    def _decoded(self, rel_dir: str, lookup: Callable[[str], tuple[str, str] | None]) -> list[tuple[str, Any, str]]:
        """(key, value, owner) of each value resource ``lookup`` knows a text for (text, owner), decoded as the
        file would read."""
        found = []
        for resource in VALUE_RESOURCES:
            try:
                version = resource.version(self.layout)
                known = lookup(resource.path(self.layout, rel_dir))
            except (KoordletError, ValueError):
                continue
            if known is None:
                continue
            value = decode_written(resource, version, known[0])
            if value is not None:
                found.append((resource.key, value, known[1]))
        return found

    def hierarchies(self) -> list[tuple[str, str]]:
        """(name, root) of each mounted hierarchy: v1 subsystems sharing a mount are named together
        (``cpu,cpuacct``); the v2 hierarchy is ``unified``."""
        by_root: dict[str, list[str]] = {}
        for subsystem, root in self.layout.v1_mounts.items():
            by_root.setdefault(root, []).append(subsystem)
        found = sorted((",".join(sorted(subsystems)), root) for root, subsystems in by_root.items())
        if self.layout.unified_root is not None:
            found.append(("unified", self.layout.unified_root))
        return found

    def files(self, rel_dir: str) -> dict[str, str]:
        rel = clean_rel_dir(rel_dir)
        contents: dict[str, str] = {}
        for name, root in self.hierarchies():
            directory = os.path.join(root, rel) if rel else root
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue  # not in this hierarchy (or gone)
            for entry in entries:
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    with open(entry.path, "rb") as f:
                        data = f.read(contract.CGROUP_FILE_CAP_BYTES)
                except OSError:
                    continue  # write-only (cgroup.kill, memory.reclaim...) or gone meanwhile
                contents[f"{name}/{entry.name}"] = data.decode("utf-8", "replace")
        return contents


def decode_written(descriptor: CgroupFile, version: int, text: str) -> Any:
    """The canonical value of ``text`` written to ``descriptor``'s file, None when the text does not
    carry it (a v2 ``cpu.max`` written with the quota only has no period)."""
    spec = descriptor.spec(version)
    try:
        if spec.kind is FileKind.INT:
            stripped = text.strip()
            return descriptor.decode(-1 if stripped == "max" else int(stripped), version)
        if spec.kind is FileKind.CPU_MAX:
            raw = tuple(-1 if token == "max" else int(token) for token in text.split())
            if spec.index is None or spec.index >= len(raw):
                return None
            return descriptor.decode(raw, version)
    except ValueError:
        return text.strip()
    return text.strip()
