"""The shape of a cgroup file descriptor (:class:`CgroupFile`) and of the registry holding them.

A descriptor names a resource's file in cgroup v1 and in v2 (name, subsystem or controller, how the C
core parses it, where the kernel creates it, whether only Alibaba Cloud Linux / Anolis kernels have it),
validates values to write and decodes values read.  Values are canonical in v1 terms (shares, ``-1``
for unlimited) and converted for v2 on the way out.  The descriptors are in
:mod:`koordlet.system.resources`.
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from koordlet.errors import ConfigError, ParseError, Unsupported
from koordlet.system.layout import CgroupLayout, clean_rel_dir
from koordlet.system.validators import Validator


class InvalidValue(ConfigError):
    """A value is not acceptable for a cgroup file; the message names the file and the value."""


class FileKind(enum.IntEnum):
    """How the C core parses a file: the ``KC_KIND_*`` values of ``csrc/kcore.h``."""

    INT = 1
    KV = 2
    CPU_MAX = 3
    CPULIST = 4
    PSI = 5
    MEMINFO = 6
    RAW = 7
    PROC_STAT = 8


class Hierarchy(enum.Enum):
    """Which hierarchy a resource is read from."""

    CONTROLLER = "controller"
    """The hierarchy that controls it: the v1 subsystem in v1 and hybrid mode, the v2 root in v2."""
    UNIFIED = "unified"
    """The v2 hierarchy whenever one is mounted (also in hybrid mode: per-cgroup PSI exists only there);
    the v1 subsystem otherwise."""


class Placement(enum.Enum):
    """Where in a hierarchy the kernel creates a file."""

    ANY = "any"
    NON_ROOT = "non_root"
    """Not in the root cgroup (v2 controller interface files: ``cpu.max``, ``memory.max``...)."""
    ROOT_ONLY = "root_only"
    """Only in the root cgroup (``io.cost.qos``)."""


@dataclass(frozen=True)
class Field:
    """One key of a flat keyed file, with its canonical name and the factor to canonical units."""

    name: str
    key: str
    scale: int = 1


@dataclass(frozen=True)
class FileVersion:
    """A resource's file in one cgroup version."""

    name: str
    kind: FileKind
    subsystem: str | None = None
    """v1: the subsystem whose hierarchy holds the file.  v2: the controller that must be enabled for
    the file to exist; None for core files (``cgroup.procs``, ``*.pressure``)."""
    placement: Placement = Placement.ANY
    fields: tuple[Field, ...] = ()
    """KV files: the keys that carry the resource."""
    scale: int = 1
    """INT / CPU_MAX: factor from the file's unit to the canonical one."""
    index: int | None = None
    """CPU_MAX: 0 for the quota, 1 for the period."""
    anolis_only: bool = False
    """Only Alibaba Cloud Linux / Anolis kernels create this file."""
    write_note: str | None = None
    """Set when this file cannot take the resource on its own; the text says what to write instead."""

    def keys(self) -> tuple[str, ...]:
        """The keys to ask the C core for (``native.read_kv(path, keys)``)."""
        return tuple(f.key for f in self.fields)


@dataclass(frozen=True)
class Support:
    """Whether a file is usable here, and why (the reason names the file and the directory)."""

    supported: bool
    reason: str

    def __bool__(self) -> bool:
        return self.supported


@dataclass(frozen=True)
class CgroupFile:
    """A cgroup resource: its v1 and v2 files, how to validate writes, how to decode reads."""

    key: str
    description: str
    v1: FileVersion | None
    v2: FileVersion | None
    validator: Validator | None = None
    """None: read-only."""
    to_v2: Callable[[Any], str] | None = None
    """Canonical value -> v2 text, when it differs from the v1 text."""
    from_v2: Callable[[int], int] | None = None
    """A v2 integer -> the canonical value (``cpu.weight`` -> shares)."""
    from_v1: Callable[[int], int] | None = None
    """A v1 integer -> the canonical value (v1's page-rounded "unlimited" -> -1)."""
    hierarchy: Hierarchy = Hierarchy.CONTROLLER
    optional: bool = False
    """The file depends on the kernel (version, vendor or config): probe before relying on it."""

    def __post_init__(self) -> None:
        if self.v1 is None and self.v2 is None:
            raise ConfigError(f"cgroup file {self.key!r} has neither a v1 nor a v2 file")
        if self.v1 is not None and self.v1.subsystem is None:
            raise ConfigError(f"cgroup file {self.key!r}: its v1 file {self.v1.name} needs a subsystem")

    # -------------------------------------------------------------------------------- where

    def version(self, layout: CgroupLayout) -> int:
        """The cgroup version whose file is used on this host."""
        if self.hierarchy is Hierarchy.UNIFIED and layout.unified_root is not None:
            return 2
        return layout.controller_version

    def spec(self, version: int) -> FileVersion:
        """This resource's file in ``version``; raises :class:`~koordlet.errors.Unsupported` when the
        version has no such file."""
        spec = self.v1 if version == 1 else self.v2 if version == 2 else None
        if spec is None:
            other = self.v2 if version == 1 else self.v1
            known = f" ({other.name} exists only in the other version)" if other else ""
            raise Unsupported(errno.ENOENT, f"{self.key} has no cgroup v{version} file{known}")
        return spec

    def spec_for(self, layout: CgroupLayout) -> FileVersion:
        """This resource's file on this host."""
        return self.spec(self.version(layout))

    def hierarchy_root(self, layout: CgroupLayout) -> str:
        """Absolute root of the hierarchy holding this resource on this host."""
        version = self.version(layout)
        spec = self.spec(version)
        if version == 2:
            assert layout.unified_root is not None  # version() picks 2 only with a v2 hierarchy
            return layout.unified_root
        assert spec.subsystem is not None  # checked in __post_init__
        return layout.controller_root(spec.subsystem)

    def directory(self, layout: CgroupLayout, rel_dir: str = "") -> str:
        """Absolute directory of cgroup ``rel_dir`` in this resource's hierarchy."""
        rel = clean_rel_dir(rel_dir)
        root = self.hierarchy_root(layout)
        return os.path.join(root, rel) if rel else root

    def path(self, layout: CgroupLayout, rel_dir: str = "") -> str:
        """Absolute path of this resource's file in cgroup ``rel_dir`` (relative to the hierarchy root)."""
        return os.path.join(self.directory(layout, rel_dir), self.spec_for(layout).name)

    # -------------------------------------------------------------------------------- probing

    def supported(self, layout: CgroupLayout, rel_dir: str = "") -> Support:
        """Whether the file exists in cgroup ``rel_dir`` (the hierarchy root by default; for files the
        kernel keeps out of the root, the first child cgroup that has the needed controller)."""
        try:
            version = self.version(layout)
            spec = self.spec(version)
            root = self.hierarchy_root(layout)
        except Unsupported as exc:
            return Support(False, str(exc.strerror))
        if version == 2 and spec.subsystem is not None:
            try:
                controllers = layout.v2_controllers()
            except (OSError, ParseError) as exc:
                return Support(False, f"cannot read the controllers of {root}: {exc}")
            if spec.subsystem not in controllers:
                listed = " ".join(sorted(controllers)) or "none"
                return Support(
                    False,
                    f"{spec.name} needs the {spec.subsystem} controller, absent from "
                    f"{root}/cgroup.controllers (lists: {listed})",
                )
        directory = self._probe_dir(version, spec, root, clean_rel_dir(rel_dir))
        if directory is None:
            return Support(
                False,
                f"{spec.name} exists only below the root and no child cgroup of {root} has "
                f"{'the ' + spec.subsystem + ' controller' if spec.subsystem else 'been created'}",
            )
        if not os.path.isdir(directory):
            return Support(False, f"cgroup directory {directory} does not exist")
        if os.path.exists(os.path.join(directory, spec.name)):
            return Support(True, f"{spec.name} present in {directory}")
        vendor = " (a file of Alibaba Cloud Linux / Anolis kernels)" if spec.anolis_only else ""
        return Support(False, f"{spec.name} absent from {directory}{vendor}")

    @staticmethod
    def _probe_dir(version: int, spec: FileVersion, root: str, rel: str) -> str | None:
        if spec.placement is Placement.ROOT_ONLY:
            return root
        if rel:
            return os.path.join(root, rel)
        if spec.placement is Placement.ANY:
            return root
        try:
            with os.scandir(root) as entries:
                children = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            return None
        for child in children:
            if version == 1 or spec.subsystem is None:
                return child
            try:
                with open(os.path.join(child, "cgroup.controllers"), encoding="ascii") as f:
                    if spec.subsystem in f.read().split():
                        return child
            except OSError:
                continue
        return None

    # -------------------------------------------------------------------------------- writes

    def format(self, value: object, version: int) -> str:
        """The text to write for ``value`` (canonical, v1 semantics) into this resource's file of
        ``version``; raises :class:`InvalidValue` naming the file and the value, or
        :class:`~koordlet.errors.Unsupported` when ``version`` has no such file."""
        spec = self.spec(version)
        if self.validator is None:
            raise InvalidValue(f"{spec.name} is read-only ({self.key}); refusing to write {value!r}")
        if spec.write_note:
            raise InvalidValue(f"{spec.name} cannot take {self.key} alone: {spec.write_note}")
        try:
            canonical = self.validator.check(value)
        except ValueError as exc:
            raise InvalidValue(f"invalid value {value!r} for {spec.name} ({self.key}): {exc}") from None
        if version == 2 and self.to_v2 is not None:
            return self.to_v2(canonical)
        return self.validator.render(canonical)

    def validate(self, value: object) -> object:
        """The canonical value; raises :class:`InvalidValue` naming the (v1) file and the value."""
        name = self.v1.name if self.v1 is not None else self.v2.name if self.v2 is not None else self.key
        if self.validator is None:
            raise InvalidValue(f"{name} is read-only ({self.key}); refusing to write {value!r}")
        try:
            return self.validator.check(value)
        except ValueError as exc:
            raise InvalidValue(f"invalid value {value!r} for {name} ({self.key}): {exc}") from None

    # -------------------------------------------------------------------------------- reads

    def decode(self, raw: Any, version: int) -> Any:
        """A value read by the C core (``native.read_int`` / ``read_cpu_max`` / ``read_kv``...) in
        canonical units: an int for INT, CPU_MAX and single-field KV files, a dict of canonical names
        for multi-field KV files, the raw value otherwise.  Raises ParseError for a missing KV key."""
        spec = self.spec(version)
        if spec.kind is FileKind.INT:
            number = int(raw) * spec.scale
            convert = self.from_v2 if version == 2 else self.from_v1
            return convert(number) if convert else number
        if spec.kind is FileKind.CPU_MAX:
            assert spec.index is not None
            number = int(raw[spec.index])
            return number if number == -1 else number * spec.scale
        if spec.kind is FileKind.KV and spec.fields:
            values: dict[str, int] = {}
            for f in spec.fields:
                if f.key not in raw:
                    have = ", ".join(sorted(raw)) or "nothing"
                    raise ParseError(f"{spec.name}: key {f.key!r} missing (have: {have})")
                values[f.name] = int(raw[f.key]) * f.scale
            return values[spec.fields[0].name] if len(spec.fields) == 1 else values
        return raw


def build_registry(files: Iterable[CgroupFile]) -> Mapping[str, CgroupFile]:
    """A read-only registry keyed by :attr:`CgroupFile.key`; a duplicate key raises ConfigError."""
    registry: dict[str, CgroupFile] = {}
    for item in files:
        if item.key in registry:
            raise ConfigError(f"duplicate cgroup file key {item.key!r} in the registry")
        registry[item.key] = item
    return MappingProxyType(registry)
