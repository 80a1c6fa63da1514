"""How Go's encoding/json finds a struct field in a JSON object, for the Koordinator documents we decode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def member(obj: Mapping[str, Any], json_name: str) -> Any:
    """``obj[json_name]`` found the way encoding/json finds a struct field: exact key, else case-folded."""
    if json_name in obj:
        return obj[json_name]
    folded = json_name.casefold()
    found = None
    for key, value in obj.items():
        if isinstance(key, str) and key.casefold() == folded:
            found = value
    return found
