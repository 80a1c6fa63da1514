"""Output of ``koordctl``: the API document as JSON or YAML, or aligned columns, and the small humanisers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import yaml

OUTPUT_FORMATS: Final = ("table", "json", "yaml")
NONE: Final = "-"
"""What a table shows for a value that is absent or unknown."""

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages); v2 as "max".
_UNLIMITED_BYTES: Final = 1 << 62


def dump(document: Mapping[str, Any], fmt: str) -> str:
    """The document as is, in ``json`` or ``yaml``; keys keep the daemon's order."""
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    if fmt == "yaml":
        return str(yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False, allow_unicode=True))
    raise ValueError(f"unknown output format {fmt!r}")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns separated by two spaces, each as wide as its widest cell; the last column is not padded."""
    lines = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=False)]
        out.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(out) + "\n"


def text(value: Any) -> str:
    """A scalar as a table cell: ``-`` for None, yes/no for booleans."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def age(at: Any, now: float) -> str:
    """How long ago ``at`` (Unix seconds) was, kubectl style: 42s, 5m10s, 3h20m, 2d4h."""
    if not isinstance(at, int | float) or isinstance(at, bool):
        return NONE
    return duration(max(0.0, now - float(at)))


def duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return NONE
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def is_unlimited_bytes(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip() == "max"
    return isinstance(value, int) and not isinstance(value, bool) and (value < 0 or value >= _UNLIMITED_BYTES)


def size(value: Any) -> str:
    """Bytes in binary units (``512Mi``); "unlimited" for cgroup's no-limit values."""
    if value is None:
        return NONE
    if is_unlimited_bytes(value):
        return "unlimited"
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return str(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    amount = float(value)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(amount) < 1024 or unit == "Ti":
            return f"{int(amount)}{unit}" if amount == int(amount) else f"{amount:.1f}{unit}"
        amount /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def cores(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return NONE
    return f"{value:.3f}"


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Leaves of a JSON tree as (dotted path, JSON scalar); an empty object or list is a leaf."""
    if isinstance(value, Mapping) and value:
        pairs: list[tuple[str, str]] = []
        for key, child in value.items():
            pairs.extend(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return pairs
    if isinstance(value, list) and value:
        pairs = []
        for index, child in enumerate(value):
            pairs.extend(flatten(child, f"{prefix}[{index}]"))
        return pairs
    return [(prefix or ".", json.dumps(value))]
