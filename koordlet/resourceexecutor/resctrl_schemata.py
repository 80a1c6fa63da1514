"""Checking and rendering resctrl schemata against the host's ``info/`` limits, before anything is written.

Kernel facts (Documentation/arch/x86/resctrl.rst):

* A schemata write holds lines ``<resource>:<id>=<value>;<id>=<value>`` ending in a newline; the kernel
  parses every line before applying any, so one ``write(2)`` of all lines is all-or-nothing.
* L3 masks are hex bit masks within ``info/<L3|L3CODE|L3DATA>/cbm_mask`` with at least ``min_cbm_bits``
  bits set; Intel CAT requires the set bits to be contiguous unless ``sparse_masks`` says 1 (6.7+).
* MB values lie between ``info/MB/min_bandwidth`` and 100 (percent) on Intel, which rounds them up to a
  multiple of ``bandwidth_gran``; AMD takes absolute units up to 2048 (unlimited) with granularity 1.
  A value that is not a multiple is refused here, so what we write is what the kernel keeps and the
  skip-unchanged comparison stays true.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from koordlet.errors import ParseError
from koordlet.resourceexecutor.update import Outcome

CAT_RESOURCES = ("L3", "L3CODE", "L3DATA")
"""Schemata resources holding cache bit masks (L3CODE/L3DATA when CDP is on)."""
MB_RESOURCE = "MB"
RESERVED_NAMES = frozenset({"info", "mon_groups", "mon_data"})
"""Directories of the resctrl root that are not control groups."""

MB_MAX_PERCENT = 100
"""Intel MBA: percent of the full bandwidth."""
MB_MAX_AMD = 2048
"""AMD: absolute units of 1/8 GB/s; 2048 means unlimited (Koordinator ``system/resctrl.go``)."""

# One path component: no '/', no leading dot (rules out "." and ".."), printable ASCII only.
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_DECIMAL = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class _CatLimits:
    cbm_mask: int | None
    min_cbm_bits: int
    sparse: bool


@dataclass(frozen=True)
class _MbLimits:
    min_bandwidth: int
    granularity: int


@dataclass
class HostLimits:
    """What the host's ``info/`` directory and root schemata allow."""

    cat: dict[str, _CatLimits] = field(default_factory=dict)
    mb: _MbLimits | None = None
    domains: dict[str, frozenset[int]] | None = None
    """Resource -> domain ids of the root schemata; None when it could not be read."""


class Invalid(Exception):
    """A schemata that must not be written; the message names the group, line and value."""

    def __init__(self, message: str, outcome: Outcome = Outcome.INVALID) -> None:
        super().__init__(message)
        self.outcome = outcome


def group_label(group: str) -> str:
    """How messages name a group: its name, or "(root)"."""
    return repr(group) if group else "(root)"


def check_group_name(group: str, *, allow_root: bool) -> None:
    """Raises ``ValueError`` unless ``group`` is "" (the root, when allowed) or one safe path component
    that is not a reserved directory (info, mon_groups, mon_data)."""
    if group == "":
        if allow_root:
            return
        raise ValueError("resctrl group: the root group cannot be removed")
    if not isinstance(group, str) or not _GROUP_NAME.fullmatch(group):
        raise ValueError(
            f"resctrl group {group!r}: must be one path component of letters, digits, '_', '.' or '-' "
            "not starting with '.'"
        )
    if group in RESERVED_NAMES:
        raise ValueError(f"resctrl group {group!r}: reserved by the kernel ({', '.join(sorted(RESERVED_NAMES))})")


def parse_schemata(content: str) -> dict[str, dict[int, str]]:
    """``"    L3:0=7ff;1=7ff\\n    MB:0=100;1=100\\n"`` -> ``{"L3": {0: "7ff", 1: "7ff"}, "MB": {...}}``.

    The kernel right-aligns resource names; lines it prints that are not ``name:id=value`` pairs
    (Arm MPAM extras) are kept with the pairs that parse."""
    result: dict[str, dict[int, str]] = {}
    for raw in content.splitlines():
        name, sep, body = raw.strip().partition(":")
        if not sep:
            continue
        pairs: dict[int, str] = {}
        for pair in body.split(";"):
            key, eq, value = pair.partition("=")
            if eq and key.strip().isdigit():
                pairs[int(key.strip())] = value.strip()
        result[name.strip()] = pairs
    return result


def read_limits(root: str, read: Callable[[str], str]) -> HostLimits:
    """The limits under the resctrl mount ``root``; ``read`` raises ``OSError`` for a file it cannot read."""
    limits = HostLimits()
    for name in CAT_RESOURCES:
        info = os.path.join(root, "info", name)
        if not os.path.isdir(info):
            continue
        mask = _read_info(read, info, "cbm_mask", 16)
        min_bits = _read_info(read, info, "min_cbm_bits", 10)
        sparse = _read_info(read, info, "sparse_masks", 10)
        limits.cat[name] = _CatLimits(mask, 1 if min_bits is None else min_bits, sparse == 1)
    info = os.path.join(root, "info", MB_RESOURCE)
    if os.path.isdir(info):
        minimum = _read_info(read, info, "min_bandwidth", 10)
        granularity = _read_info(read, info, "bandwidth_gran", 10)
        limits.mb = _MbLimits(minimum or 0, granularity or 1)
    try:
        root_schemata = parse_schemata(read(os.path.join(root, "schemata")))
    except OSError:
        return limits
    limits.domains = {name: frozenset(pairs) for name, pairs in root_schemata.items()}
    return limits


def _read_info(read: Callable[[str], str], directory: str, name: str, base: int) -> int | None:
    path = os.path.join(directory, name)
    try:
        text = read(path).strip()
    except OSError:
        return None
    try:
        return int(text, base)
    except ValueError:
        raise Invalid(f"{path}: cannot parse {text!r} (base {base})", Outcome.FAILED) from None


def render(group: str, lines: Sequence[str], limits: HostLimits, mb_max: int) -> str:
    """The schemata text of ``lines`` for ``group``, every line checked; raises :class:`Invalid`."""
    where = f"resctrl group {group_label(group)}"
    if isinstance(lines, str):
        raise Invalid(f"{where}: lines must be a sequence of schemata lines, got one string {lines!r}")
    if not lines:
        raise Invalid(f"{where}: no schemata lines")
    rendered: list[str] = []
    seen: set[str] = set()
    for line in lines:
        name, pairs = _parse_line(where, line)
        if name in seen:
            raise Invalid(f"{where}: line {line!r}: resource {name} given twice")
        seen.add(name)
        if limits.domains is not None:
            known = limits.domains.get(name)
            if known is None:
                raise Invalid(
                    f"{where}: line {line!r}: this host's resctrl has no {name} "
                    f"(schemata lists {', '.join(sorted(limits.domains)) or 'nothing'})",
                    Outcome.UNSUPPORTED,
                )
            unknown = sorted(set(pairs) - known)
            if unknown:
                raise Invalid(
                    f"{where}: line {line!r}: domain {unknown[0]} unknown "
                    f"(this host's {name} domains: {', '.join(map(str, sorted(known)))})"
                )
        if name == MB_RESOURCE:
            values = {d: _check_mb(where, line, d, v, limits.mb, mb_max) for d, v in pairs.items()}
            body = ";".join(f"{d}={values[d]}" for d in sorted(values))
        else:
            masks = {d: _check_cbm(where, line, name, d, v, limits.cat.get(name)) for d, v in pairs.items()}
            body = ";".join(f"{d}={masks[d]:x}" for d in sorted(masks))
        rendered.append(f"{name}:{body}")
    # The kernel refuses a write that does not end in a newline.
    return "\n".join(rendered) + "\n"


def _check_mb(where: str, line: str, domain: int, text: str, mb: _MbLimits | None, mb_max: int) -> int:
    if not _DECIMAL.fullmatch(text):
        raise Invalid(f"{where}: line {line!r}: MB value {text!r} on domain {domain} is not a decimal number")
    value = int(text)
    minimum = mb.min_bandwidth if mb is not None else 0
    if value < minimum or value > mb_max:
        raise Invalid(
            f"{where}: line {line!r}: MB value {value} on domain {domain} outside "
            f"{minimum}..{mb_max} (info/MB/min_bandwidth..max)"
        )
    if mb is not None and mb.granularity > 1 and value % mb.granularity:
        rounded = -(-value // mb.granularity) * mb.granularity
        raise Invalid(
            f"{where}: line {line!r}: MB value {value} on domain {domain} is not a multiple of "
            f"info/MB/bandwidth_gran {mb.granularity} (the kernel would round it up to {rounded})"
        )
    return value


def _parse_line(where: str, line: str) -> tuple[str, dict[int, str]]:
    if not isinstance(line, str) or "\n" in line.strip():
        raise Invalid(f"{where}: line {line!r}: one schemata line per entry")
    name, sep, body = line.strip().partition(":")
    name = name.strip()
    if not sep or name not in (*CAT_RESOURCES, MB_RESOURCE):
        raise Invalid(
            f"{where}: line {line!r}: resource {name!r} unknown (want {', '.join((*CAT_RESOURCES, MB_RESOURCE))})"
        )
    pairs: dict[int, str] = {}
    # Koordinator writes a trailing ';', which the kernel ignores.
    for pair in body.strip().rstrip(";").split(";"):
        key, eq, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not _DECIMAL.fullmatch(key) or not value:
            raise Invalid(f"{where}: line {line!r}: {pair.strip()!r} is not <domain id>=<value>")
        domain = int(key)
        if domain in pairs:
            raise Invalid(f"{where}: line {line!r}: domain {domain} given twice")
        pairs[domain] = value
    return name, pairs


def _check_cbm(where: str, line: str, name: str, domain: int, text: str, cat: _CatLimits | None) -> int:
    if not _HEX.fullmatch(text):
        raise Invalid(f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is not hexadecimal")
    mask = int(text, 16)
    if mask == 0:
        raise Invalid(f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is empty")
    if cat is not None and cat.cbm_mask is not None and mask & ~cat.cbm_mask:
        raise Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} outside "
            f"info/{name}/cbm_mask {cat.cbm_mask:x}"
        )
    bits = mask.bit_count()
    min_bits = cat.min_cbm_bits if cat is not None else 1
    if bits < min_bits:
        raise Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} has {bits} bits, "
            f"info/{name}/min_cbm_bits is {min_bits}"
        )
    shifted = mask >> ((mask & -mask).bit_length() - 1)
    if shifted & (shifted + 1) and not (cat is not None and cat.sparse):
        raise Invalid(
            f"{where}: line {line!r}: {name} mask {text!r} on domain {domain} is not contiguous "
            "(Intel CAT needs one run of set bits)"
        )
    return mask


def parse_tasks(content: str, path: str) -> set[int]:
    tasks: set[int] = set()
    for raw in content.split():
        if not raw.isdigit():
            raise ParseError(f"{path}: task id {raw!r} is not a number")
        tasks.add(int(raw))
    return tasks
