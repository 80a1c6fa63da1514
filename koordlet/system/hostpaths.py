"""Where the host's pseudo filesystems are, as seen by this process.

On a plain host they are at their usual places; in the DaemonSet they are bind-mounted under
``/host-*`` (Koordinator's ``NewDsModeConfig``); in tests they live under ``tmp_path``.  Everything in
:mod:`koordlet.system` takes a :class:`HostPaths` instead of hard-coding ``/sys/fs/cgroup``, so one code
path serves all three (Koordinator's global ``system.Conf`` is the thing this replaces).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from koordlet.errors import ConfigError


def _join(root: str, parts: tuple[str, ...]) -> str:
    # os.path.join drops everything before an absolute part ("/proc" + "/etc" = "/etc"), which would
    # let a caller escape the root by accident; parts are always taken as relative.
    cleaned = [p.strip("/") for p in parts if p.strip("/")]
    return os.path.join(root, *cleaned) if cleaned else root


@dataclass(frozen=True)
class HostPaths:
    """Roots of the host's cgroup, proc, sys and var-run trees (absolute, no trailing slash)."""

    cgroup_root: str = "/sys/fs/cgroup"
    """Mount point of the cgroup hierarchies (v1 subsystem dirs, or the v2 root)."""
    proc_root: str = "/proc"
    """The host's procfs (the DaemonSet runs with hostPID, so its own /proc is the host's)."""
    sys_root: str = "/sys"
    """The host's sysfs (CPU topology, NUMA nodes)."""
    var_run_root: str = "/var/run"
    """The host's /var/run (runtime sockets, NRI socket)."""
    resctrl_root: str = ""
    """Mount point of the resctrl filesystem; empty means ``<sys_root>/fs/resctrl``."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "resctrl_root" and value == "":
                value = os.path.join(self.sys_root.rstrip("/") or "/", "fs", "resctrl")
            if not isinstance(value, str) or not os.path.isabs(value):
                raise ConfigError(f"host_paths.{f.name}: must be an absolute path, got {value!r}")
            normalized = os.path.normpath(value)
            # normpath keeps a leading "//" (POSIX allows it to mean something else); one slash is meant.
            if normalized.startswith("//"):
                normalized = "/" + normalized.lstrip("/")
            object.__setattr__(self, f.name, normalized)

    @classmethod
    def under(cls, prefix: str | os.PathLike[str]) -> HostPaths:
        """The default layout re-rooted under ``prefix``: ``<prefix>/sys/fs/cgroup``, ``<prefix>/proc``,
        ``<prefix>/sys``, ``<prefix>/var/run`` and ``<prefix>/sys/fs/resctrl`` (fake host trees)."""
        base = os.path.abspath(os.fspath(prefix))
        default = cls()
        return cls(
            cgroup_root=_join(base, (default.cgroup_root,)),
            proc_root=_join(base, (default.proc_root,)),
            sys_root=_join(base, (default.sys_root,)),
            var_run_root=_join(base, (default.var_run_root,)),
            resctrl_root=_join(base, (default.resctrl_root,)),
        )

    @classmethod
    def daemonset(cls) -> HostPaths:
        """The mounts of Koordinator's koordlet DaemonSet: ``/host-cgroup``, ``/host-sys``,
        ``/host-sys-fs/resctrl`` and ``/host-var-run``; ``/proc`` is the host's through hostPID."""
        return cls(
            cgroup_root="/host-cgroup",
            proc_root="/proc",
            sys_root="/host-sys",
            var_run_root="/host-var-run",
            resctrl_root="/host-sys-fs/resctrl",
        )

    def cgroup(self, *parts: str) -> str:
        """A path under the cgroup root; parts are relative even if they start with '/'."""
        return _join(self.cgroup_root, parts)

    def proc(self, *parts: str) -> str:
        """A path under the proc root, e.g. ``proc("pressure", "memory")``."""
        return _join(self.proc_root, parts)

    def sys(self, *parts: str) -> str:
        """A path under the sys root, e.g. ``sys("devices/system/cpu/online")``."""
        return _join(self.sys_root, parts)

    def var_run(self, *parts: str) -> str:
        """A path under the var-run root, e.g. ``var_run("nri", "nri.sock")``."""
        return _join(self.var_run_root, parts)

    def resctrl(self, *parts: str) -> str:
        """A path under the resctrl mount point, e.g. ``resctrl("schemata")``."""
        return _join(self.resctrl_root, parts)
