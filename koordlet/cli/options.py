"""Options of ``koordlet run``: command-line flags over an optional YAML file over defaults.

The YAML file is a flat mapping whose keys are the flags' names in camelCase (``logFormat``,
``cgroupRootDir``...), so a value can move between a unit file's flags and a config file unchanged.
It is validated once at load: an unknown key or a bad value is a :class:`~koordlet.errors.ConfigError`
naming the file, the key and the value.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from koordlet.cli.common import HOST_ROOT_FLAGS, default_state_dir, host_root_overrides
from koordlet.errors import ConfigError
from koordlet.log import FORMATS, LEVELS, LogFormat


def _camel(flag: str) -> str:
    head, *rest = flag.lstrip("-").split("-")
    return head + "".join(word.capitalize() for word in rest)


# YAML key -> HostPaths field, derived from the flags so the two spellings cannot drift apart.
_HOST_ROOT_KEYS: Final[Mapping[str, str]] = {_camel(flag): fld for flag, (fld, _) in HOST_ROOT_FLAGS.items()}
CONFIG_KEYS: Final[frozenset[str]] = frozenset({"logFormat", "logLevel", "stateDir", *_HOST_ROOT_KEYS})


@dataclass(frozen=True)
class RunOptions:
    """Everything ``koordlet run`` needs before it starts components."""

    standalone: bool
    """Run without Kubernetes: workloads from the host, NodeSLO from a file, companion in-process."""
    log_format: LogFormat = "text"
    """``text`` (logfmt-like) or ``json`` (one object per line)."""
    log_level: str = "info"
    """Lowest level logged: debug, info, warning, error or critical."""
    state_dir: Path = field(default_factory=default_state_dir)
    """Where the agent keeps state across restarts (metric store, checkpoints)."""
    host_roots: Mapping[str, str] = field(default_factory=dict)
    """HostPaths fields overridden by flags or the config file (absolute paths)."""
    config_file: Path | None = None
    """The YAML file the options were read from, if any."""


def _check_choice(source: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in choices:
        raise ConfigError(f"{source}: {key}: expected one of {', '.join(choices)}, got {value!r}")
    return value.lower()


def _check_path(source: str, key: str, value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {key}: expected a directory path, got {value!r}")
    # Relative paths in a file are relative to the file, not to wherever the daemon was started.
    return os.path.normpath(os.path.join(base, value))


def load_config_file(path: Path) -> dict[str, Any]:
    """Read and validate a YAML config file; returns its values keyed like :data:`CONFIG_KEYS`."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of option to value, got {type(data).__name__}")
    unknown = sorted(str(key) for key in data if key not in CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(CONFIG_KEYS))}")
    base = path.resolve().parent
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "logFormat":
            values[key] = _check_choice(source, key, value, FORMATS)
        elif key == "logLevel":
            values[key] = _check_choice(source, key, value, LEVELS)
        else:
            values[key] = _check_path(source, key, value, base)
    return values


def resolve_run_options(args: argparse.Namespace) -> RunOptions:
    """Merge ``koordlet run`` flags (highest), the ``--config`` file, then defaults."""
    config_file = Path(args.config).resolve() if args.config is not None else None
    from_file = load_config_file(config_file) if config_file is not None else {}

    host_roots = {fld: from_file[key] for key, fld in _HOST_ROOT_KEYS.items() if key in from_file}
    host_roots.update(host_root_overrides(args))

    state_dir = args.state_dir if args.state_dir is not None else from_file.get("stateDir")
    return RunOptions(
        standalone=bool(args.standalone),
        log_format=args.log_format or from_file.get("logFormat", "text"),
        log_level=args.log_level or from_file.get("logLevel", "info"),
        state_dir=Path(os.path.abspath(state_dir)) if state_dir is not None else default_state_dir(),
        host_roots=host_roots,
        config_file=config_file,
    )
