"""Loading the configuration: defaults, then a YAML file, then flags; validated once, errors name the field.

The YAML mirrors :class:`~koordlet.config.types.Config`: keys are field names in camelCase and groups nest
(``kubelet: {syncIntervalSeconds: 10}``).  Flags use Koordinator's names where it has them
(``--collect-res-used-interval-seconds``, ``--kubelet-sync-interval``, ``--feature-gates``...).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from koordlet.apis.duration import parse_seconds_or_duration
from koordlet.config import gates
from koordlet.config.types import Config, WorkloadConfig
from koordlet.errors import ConfigError


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _leaf(path: str, kind: Any, meta: Mapping[str, Any], raw: Any) -> Any:
    """Converts one value (from YAML, or a flag's string) to the field's type, or raises naming the path."""
    from_flag = isinstance(raw, str)
    try:
        if kind is bool:
            if from_flag and raw.lower() in ("true", "false"):
                return raw.lower() == "true"
            if isinstance(raw, bool):
                return raw
        elif kind is int:
            if from_flag:
                return int(raw)
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
        elif kind is float:
            if from_flag or (isinstance(raw, str) and meta.get("duration")):
                return parse_seconds_or_duration(raw) if meta.get("duration") else float(raw)
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                return float(raw)
        elif kind is str:
            if isinstance(raw, str):
                return raw
        elif typing.get_origin(kind) in (Mapping, dict):  # feature gates
            if from_flag:
                return gates.parse_gate_flag(raw)
            if isinstance(raw, Mapping) and all(isinstance(v, bool) for v in raw.values()):
                return {str(k): v for k, v in raw.items()}
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    raise ConfigError(f"{path}: expected {_type_name(kind)}, got {raw!r}")


def _type_name(kind: Any) -> str:
    if typing.get_origin(kind) in (Mapping, dict):
        return "a mapping of name to true/false"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))


def _build(cls: type, data: Any, path: str, flags: Mapping[str, Any]) -> Any:
    """An instance of dataclass ``cls`` from a YAML mapping and the flags given (dotted path -> text)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    fields = {camel(f.name): f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for key, f in fields.items():
        here = f"{path}.{key}" if path else key
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            values[f.name] = _build(kind, data.get(key), here, flags)  # type: ignore[arg-type]
            continue
        if typing.get_origin(kind) is tuple:
            if key in data:
                values[f.name] = _workloads(data[key], here)
            continue
        raw = flags.get(here, data.get(key, dataclasses.MISSING))
        if raw is dataclasses.MISSING:
            continue
        value = _leaf(here, kind, f.metadata, raw)
        check = f.metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"{here}: {problem}")
        values[f.name] = MappingProxyType(value) if isinstance(value, dict) else value
    return cls(**values)


def _workloads(data: Any, path: str) -> tuple[WorkloadConfig, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of workloads, got {type(data).__name__}")
    items = tuple(_build(WorkloadConfig, item, f"{path}[{i}]", {}) for i, item in enumerate(data))
    seen: set[str] = set()
    for i, w in enumerate(items):
        where = f"{path}[{i}]"
        if not w.name:
            raise ConfigError(f"{where}.name: required")
        if w.name in seen:
            raise ConfigError(f"{where}.name: duplicate workload {w.name!r}")
        seen.add(w.name)
        if bool(w.cgroup_path) == bool(w.systemd_unit):
            raise ConfigError(f"{where}: set exactly one of cgroupPath and systemdUnit")
        if ".." in w.cgroup_path.split("/"):
            raise ConfigError(f"{where}.cgroupPath: must not contain '..', got {w.cgroup_path!r}")
    return items


def _flag_fields(cls: type = Config, path: str = "") -> list[tuple[str, str, dataclasses.Field[Any]]]:
    """(dotted YAML path, flag, field) of every option that has a flag."""
    found = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        here = f"{path}.{camel(f.name)}" if path else camel(f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            found.extend(_flag_fields(hints[f.name], here))
        elif f.metadata.get("flag"):
            found.append((here, f.metadata["flag"], f))
    return found


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds one flag per flagged option; unset flags leave the file's or the default value."""
    for path, flag, f in _flag_fields():
        kind = _hints_for(path)
        default_text = f" (default {f.default})" if f.default is not dataclasses.MISSING and f.default != "" else ""
        text = f"{f.metadata['help']}{default_text}".replace("%", "%%")  # argparse %-formats help
        if kind is bool:
            parser.add_argument(flag, dest=path, nargs="?", const="true", default=None, metavar="true|false",
                                help=text)
        else:
            parser.add_argument(flag, dest=path, default=None, help=text)


def _hints_for(path: str) -> Any:
    cls: Any = Config
    parts = path.split(".")
    for part in parts[:-1]:
        cls = _hints(cls)[_snake(part)]
    return _hints(cls)[_snake(parts[-1])]


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def embedded_standalone_default() -> dict[str, Any]:
    """The configuration ``koordlet run --standalone`` starts from (koordlet/config/standalone.yaml)."""
    from importlib import resources

    text = resources.files("koordlet.config").joinpath("standalone.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def load(config_file: Path | None = None, flags: Mapping[str, Any] | None = None,
         base: Mapping[str, Any] | None = None) -> Config:
    """Builds the configuration: ``base`` (e.g. the embedded standalone default), then the file, then flags.

    ``flags`` maps dotted YAML paths to the flags' text (as :func:`flags_from_args` returns)."""
    merged: dict[str, Any] = _deep_merge(dict(base or {}), {})
    if config_file is not None:
        data = read_yaml(config_file)
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"{config_file}: expected a mapping at the top, got {type(data).__name__}")
        try:
            merged = _deep_merge(merged, data or {})
            config = _build(Config, merged, "", flags or {})
            gates.resolve(config.feature_gates)  # unknown gate names fail here, at load
        except ConfigError as exc:
            raise ConfigError(f"{config_file}: {exc}") from None
    else:
        config = _build(Config, merged, "", flags or {})
        gates.resolve(config.feature_gates)
    assert isinstance(config, Config)
    return config


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key != "featureGates":
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The flags actually given, keyed by dotted YAML path."""
    return {path: getattr(args, path) for path, _, _ in _flag_fields() if getattr(args, path, None) is not None}
