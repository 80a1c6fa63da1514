"""What the node topology report adds to :mod:`koordlet.system.node`: each NUMA node's memory (Koordinator
``koordlet/util/meminfo.go`` ``GetNodeNUMAInfo``, the zones of the NodeResourceTopology).

Plain text parsing: these files are read once per ``nodeCPUInfoIntervalSeconds``, not every tick.
"""

from __future__ import annotations

import errno
import os
import re

from koordlet.errors import ParseError, from_errno
from koordlet.system.hostpaths import HostPaths

_NODE_DIR = re.compile(r"node(\d+)")
_MEMTOTAL = re.compile(r"^Node\s+(\d+)\s+MemTotal:\s+(\d+)\s+kB\s*$", re.MULTILINE)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise from_errno(exc.errno or errno.EIO, path) from exc


def read_numa_memory(paths: HostPaths) -> dict[int, int]:
    """Bytes of memory of each NUMA node (``nodeN/meminfo``'s ``MemTotal``); empty on a kernel without
    CONFIG_NUMA.  Raises :class:`ParseError` naming the file when a node's meminfo has no MemTotal line."""
    base = paths.sys("devices/system/node")
    if not os.path.isdir(base):
        return {}
    out: dict[int, int] = {}
    for name in sorted(os.listdir(base)):
        m = _NODE_DIR.fullmatch(name)
        if not m:
            continue
        node = int(m.group(1))
        path = os.path.join(base, name, "meminfo")
        found = {int(n): int(kb) for n, kb in _MEMTOTAL.findall(_read(path))}
        if node not in found:
            raise ParseError(f"{path}: no 'Node {node} MemTotal' line")
        out[node] = found[node] * 1024
    return out
