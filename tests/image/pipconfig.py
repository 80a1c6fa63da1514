"""The host's pip settings, lent to the build stage's RUN steps (never copied into a layer).

The build stage installs from the package index the way the host does: this machine's pip reaches it through its
own configuration (a CA certificate, local wheel directories, extra indexes, constraints). The settings pip reports
(``pip config list``: files and ``PIP_*`` variables) are written to a private pip.conf, bind-mounted read-only at
/etc/pip.conf for the RUN steps only, and every local file or directory they name is bind-mounted read-only below
/run/host-pip (its host path appended) with the setting rewritten to point there: at its own path it could collide
with a file a package installs in the build stage (the CA bundle of ca-certificates). Values are never printed.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

_LINE = re.compile(r"^(?P<section>[^.]+)\.(?P<key>[^=]+)=(?P<value>.*)$")
# Settings the Containerfile makes itself; the host's would only repeat or contradict them.
MOUNT_PREFIX = "/run/host-pip"
_SKIPPED_KEYS = {"no-cache-dir", "disable-pip-version-check", "cache-dir", "target", "prefix", "user", "root"}


def host_pip_settings() -> dict[str, dict[str, str]]:
    """``{section: {key: value}}`` as this interpreter's pip sees them (``:env:`` folded into ``global``)."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    settings: dict[str, dict[str, str]] = {}
    # PIP_* variables override the files, as in pip itself: applied last.
    for line in sorted(listing.stdout.splitlines(), key=lambda line: line.startswith(":env:")):
        match = _LINE.match(line.strip())
        if not match or match.group("key") in _SKIPPED_KEYS:
            continue
        section = "global" if match.group("section") == ":env:" else match.group("section")
        value = match.group("value")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        settings.setdefault(section, {})[match.group("key")] = value
    return settings


def local_paths(settings: dict[str, dict[str, str]]) -> list[Path]:
    """Existing absolute paths (or file:// URLs; for a local index, its root) named by any setting's value."""
    found: list[Path] = []
    for values in settings.values():
        for value in values.values():
            for token in value.split():
                path = Path(token.removeprefix("file://")) if token.startswith(("/", "file:///")) else None
                if path is not None and token.startswith("file://") and path.name == "simple":
                    # A local index's pages link to its files with relative URLs (../../files/...): lend its root.
                    path = path.parent
                if path is not None and path.exists() and path not in found:
                    found.append(path)
    return found


def _relocated(value: str, paths: list[Path]) -> str:
    tokens = []
    for token in value.split():
        for path in paths:
            for spelling in (str(path), f"file://{path}"):
                if token == spelling or token.startswith(spelling + "/"):
                    token = token.replace(str(path), f"{MOUNT_PREFIX}{path}", 1)
                    break
            else:
                continue
            break
        tokens.append(token)
    return " ".join(tokens)


def build_volumes(private_dir: Path) -> list[str]:
    """``buildah bud --volume`` values lending the host's pip settings to the RUN steps ([] when pip has none)."""
    settings = host_pip_settings()
    if not settings:
        return []
    paths = local_paths(settings)
    parser = configparser.ConfigParser(interpolation=None)
    for section, values in settings.items():
        parser[section] = {key: _relocated(value, paths) for key, value in values.items()}
    conf = private_dir / "pip.conf"
    descriptor = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        parser.write(handle)
    volumes = [f"{conf}:/etc/pip.conf:ro"]
    volumes += [f"{path}:{MOUNT_PREFIX}{path}:ro" for path in paths]
    return volumes
