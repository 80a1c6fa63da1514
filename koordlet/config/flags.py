"""Pieces every command-line tool of this project shares (koordlet, koordctl, koord-companion): the version
flag, host-root flags, default directories and the debug socket."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from koordlet.version import __version__

DEFAULT_DEBUG_SOCKET: Final = "/var/run/koordlet/debug.sock"
"""Where koordlet (as root) serves its debug API and koordctl looks for it."""

ROOT_STATE_DIR: Final = Path("/var/lib/koordlet")
"""State directory of a koordlet running as root (a systemd service or the DaemonSet)."""

# Flag name -> (HostPaths field, help).  The flag names are Koordinator's, so existing unit files and
# DaemonSet arguments keep working.
HOST_ROOT_FLAGS: Final[Mapping[str, tuple[str, str]]] = {
    "--cgroup-root-dir": ("cgroup_root", "mount point of the cgroup hierarchies (default /sys/fs/cgroup)"),
    "--proc-root-dir": ("proc_root", "the host's procfs (default /proc)"),
    "--sys-root-dir": ("sys_root", "the host's sysfs (default /sys)"),
    "--var-run-root-dir": ("var_run_root", "the host's /var/run: runtime sockets (default /var/run)"),
}


def new_parser(prog: str, description: str, version: str = __version__) -> argparse.ArgumentParser:
    """The top-level parser of a command: its name, what it does, and ``--version``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} {version}")
    return parser


def add_host_root_flags(parser: argparse.ArgumentParser) -> None:
    """Add Koordinator's host-root flags; unset ones keep the HostPaths defaults."""
    group = parser.add_argument_group("host roots", "where this process sees the host's trees")
    for flag, (field, help_text) in HOST_ROOT_FLAGS.items():
        group.add_argument(flag, dest=field, metavar="DIR", default=None, help=help_text)


def host_root_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The host-root flags given on the command line, as absolute paths keyed by HostPaths field."""
    overrides: dict[str, str] = {}
    for field, _ in HOST_ROOT_FLAGS.values():
        value = getattr(args, field, None)
        if value is not None:
            overrides[field] = os.path.abspath(value)
    return overrides


def default_state_dir(euid: int | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``/var/lib/koordlet`` for root; otherwise ``$XDG_STATE_HOME/koordlet`` (``~/.local/state/koordlet``).

    The XDG base-directory spec says a relative ``$XDG_STATE_HOME`` is invalid and must be ignored.
    """
    euid = os.geteuid() if euid is None else euid
    env = os.environ if environ is None else environ
    if euid == 0:
        return ROOT_STATE_DIR
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "koordlet"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "koordlet"
