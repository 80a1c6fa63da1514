"""Current cgroup values a strategy starts from (BE's cpuset, its quota), read through the C core.

Reads are few (a handful of QoS-level files per round), so they go one file per call; the per-pod
samples strategies compare against come from the metric cache, never from here."""

from __future__ import annotations

import errno
from typing import Any

from koordlet import native
from koordlet.errors import from_errno
from koordlet.system.cgroupfile import CgroupFile, FileKind
from koordlet.system.layout import CgroupLayout
from koordlet.system.resources import REGISTRY

_READERS = {
    FileKind.INT: native.read_int,
    FileKind.CPU_MAX: native.read_cpu_max,
    FileKind.CPULIST: native.read_cpulist,
}


class CgroupReader:
    """Reads registry resources in canonical (v1) units for this host's layout."""

    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout

    def path(self, resource: CgroupFile | str, rel_dir: str) -> str:
        return _descriptor(resource).path(self.layout, rel_dir)

    def read(self, resource: CgroupFile | str, rel_dir: str) -> Any:
        """The value of ``resource`` (a descriptor, or its registry key) in ``rel_dir``; raises
        ``CgroupGone`` when the cgroup vanished, ``ParseError`` for garbage and ``Unsupported`` when this
        host has no such file."""
        descriptor = _descriptor(resource)
        version = descriptor.version(self.layout)
        spec = descriptor.spec(version)
        path = descriptor.path(self.layout, rel_dir)
        reader = _READERS.get(spec.kind)
        if reader is not None:
            return descriptor.decode(reader(path), version)
        if spec.kind is FileKind.KV:
            return descriptor.decode(native.read_kv(path), version)
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                return f.read().strip()
        except OSError as exc:
            raise from_errno(exc.errno or errno.EIO, path) from exc


def _descriptor(resource: CgroupFile | str) -> CgroupFile:
    return REGISTRY[resource] if isinstance(resource, str) else resource
