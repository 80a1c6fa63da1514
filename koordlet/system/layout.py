"""Which cgroup hierarchies the host mounts, and which one serves what.

Three layouts exist in the field:

* **v1**: one directory per subsystem under the root (``cpu/``, ``cpuacct/``, ``memory/``...; a
  co-mounted ``cpu,cpuacct/`` with ``cpu``/``cpuacct`` symlinks is the same thing).
* **v2**: the root itself is the unified hierarchy (it holds ``cgroup.controllers``).
* **hybrid**: v1 subsystem directories plus a controller-less v2 mount at ``unified/`` (systemd's
  "hybrid" mode, and this project's test host).  Controllers live in v1; per-cgroup PSI and per-cgroup
  perf events work only through the unified directory.

Detection looks at the tree under ``cgroup_root`` rather than at ``/proc/self/mountinfo``: inside the
DaemonSet the hierarchies are bind-mounted under ``/host-cgroup`` and fake test trees are plain
directories, and in both the tree is the only thing that tells the truth about ``cgroup_root``.
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from koordlet.errors import ParseError, Unsupported, from_errno
from koordlet.system.hostpaths import HostPaths

UNIFIED_DIR = "unified"
"""Name of the v2 mount inside the cgroup root in hybrid mode (systemd's choice)."""


class CgroupMode(enum.Enum):
    """How cgroups are mounted under the cgroup root."""

    V1 = "v1"
    V2 = "v2"
    HYBRID = "hybrid"


@dataclass(frozen=True)
class CgroupLayout:
    """The detected hierarchies of one host (see :func:`detect_layout`)."""

    paths: HostPaths
    mode: CgroupMode
    # Left out of the hash (a mapping is unhashable); equal layouts still hash equal.
    v1_mounts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """v1 subsystem name (``cpu``, ``memory``, ``name=systemd``...) -> absolute directory."""
    unified_root: str | None = None
    """Absolute path of the v2 hierarchy: the cgroup root (v2), ``<root>/unified`` (hybrid), or None."""

    @property
    def controller_version(self) -> int:
        """The cgroup version whose files control resources: 1 in v1 and hybrid, 2 in v2."""
        return 2 if self.mode is CgroupMode.V2 else 1

    def subsystem_dir(self, subsystem: str) -> str | None:
        """Absolute directory of a v1 subsystem's hierarchy, or None when it is not mounted."""
        return self.v1_mounts.get(subsystem)

    def controller_root(self, subsystem: str) -> str:
        """Root directory of the hierarchy that holds ``subsystem``'s control files.

        Raises :class:`~koordlet.errors.Unsupported` naming the subsystem when a v1 host lacks it.
        """
        if self.mode is CgroupMode.V2:
            assert self.unified_root is not None
            return self.unified_root
        found = self.subsystem_dir(subsystem)
        if found is None:
            mounted = ", ".join(sorted(self.v1_mounts)) or "none"
            raise Unsupported(
                errno.ENOENT,
                f"cgroup v1 subsystem {subsystem!r} is not mounted under {self.paths.cgroup_root} (mounted: {mounted})",
            )
        return found

    def controller_dir(self, subsystem: str, rel_dir: str = "") -> str:
        """Absolute directory of cgroup ``rel_dir`` in the hierarchy controlling ``subsystem``."""
        return _under(self.controller_root(subsystem), rel_dir)

    def unified_dir(self, rel_dir: str = "") -> str:
        """Absolute directory of cgroup ``rel_dir`` in the v2 hierarchy (per-cgroup PSI and perf).

        Raises :class:`~koordlet.errors.Unsupported` on a v1-only host."""
        if self.unified_root is None:
            raise Unsupported(errno.ENOENT, f"no cgroup v2 hierarchy under {self.paths.cgroup_root} (v1 only)")
        return _under(self.unified_root, rel_dir)

    def v2_controllers(self) -> frozenset[str]:
        """Controllers listed in the v2 root's ``cgroup.controllers`` (empty without a v2 hierarchy).

        In hybrid mode every controller bound to a v1 hierarchy is missing here, which is why cpu, memory
        and io cannot be enabled in ``unified/`` on such hosts.
        """
        if self.unified_root is None:
            return frozenset()
        path = os.path.join(self.unified_root, "cgroup.controllers")
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read()
        except OSError as exc:
            raise from_errno(exc.errno or errno.EIO, path) from exc
        names = text.split()
        for name in names:
            if not name.replace("_", "").isalnum():
                raise ParseError(f"{path}: invalid controller name {name!r} in {text.strip()!r}")
        return frozenset(names)

    def describe(self) -> str:
        """One line for logs and ``koordctl doctor``."""
        root = self.paths.cgroup_root
        if self.mode is CgroupMode.V2:
            return f"v2: unified hierarchy at {root}"
        subsystems = ",".join(sorted(s for s in self.v1_mounts if not s.startswith("name=")))
        text = f"{self.mode.value}: v1 controllers {{{subsystems}}} under {root}"
        if self.mode is CgroupMode.HYBRID:
            text += f", cgroup2 at {self.unified_root} (PSI and perf only)"
        return text


def clean_rel_dir(rel_dir: str) -> str:
    """A cgroup directory relative to a hierarchy root, without empty or '.' parts ('/kubepods/' ->
    'kubepods'); raises ParseError for '..', which would leave the hierarchy."""
    parts = [p for p in rel_dir.split("/") if p and p != "."]
    if ".." in parts:
        raise ParseError(f"cgroup directory {rel_dir!r} must not contain '..'")
    return "/".join(parts)


def _under(root: str, rel_dir: str) -> str:
    rel = clean_rel_dir(rel_dir)
    return os.path.join(root, rel) if rel else root


def _is_v2_root(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "cgroup.controllers"))


def _is_v1_hierarchy(path: str) -> bool:
    # Every v1 hierarchy root has a "tasks" file; a v2 root never has one.
    return os.path.isfile(os.path.join(path, "tasks"))


def _scan_v1(root: str) -> dict[str, str]:
    """Maps each v1 subsystem to its directory: ``cpu`` -> ``<root>/cpu`` even when that is a symlink
    to ``cpu,cpuacct``; a subsystem reachable only through a co-mounted dir maps to that dir."""
    exact: dict[str, str] = {}
    comounted: dict[str, str] = {}
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == UNIFIED_DIR or not entry.is_dir():
                continue
            if not _is_v1_hierarchy(entry.path):
                continue
            if "," not in entry.name:
                exact[entry.name] = entry.path
            for subsystem in entry.name.split(","):
                comounted.setdefault(subsystem, entry.path)
    # systemd names its controller-less hierarchy "systemd" (mount option name=systemd).
    if "systemd" in exact:
        exact["name=systemd"] = exact.pop("systemd")
        comounted.pop("systemd", None)
    return {**comounted, **exact}


def detect_layout(paths: HostPaths) -> CgroupLayout:
    """Detects the cgroup mode under ``paths.cgroup_root``.

    Raises :class:`~koordlet.errors.Unsupported` (ENOENT) naming the root when it holds no hierarchy.
    """
    root = paths.cgroup_root
    if not os.path.isdir(root):
        raise Unsupported(errno.ENOENT, f"cgroup root {root} does not exist")
    if _is_v2_root(root):
        return CgroupLayout(paths=paths, mode=CgroupMode.V2, unified_root=root)
    mounts = _scan_v1(root)
    if not mounts:
        raise Unsupported(
            errno.ENOENT,
            f"no cgroup hierarchy under {root}: neither cgroup.controllers (v2) nor v1 subsystem "
            "directories with a tasks file (cpu/, memory/...)",
        )
    unified = os.path.join(root, UNIFIED_DIR)
    if _is_v2_root(unified):
        return CgroupLayout(paths, CgroupMode.HYBRID, MappingProxyType(mounts), unified)
    return CgroupLayout(paths, CgroupMode.V1, MappingProxyType(mounts), None)
