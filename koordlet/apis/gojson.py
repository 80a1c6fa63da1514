"""How Go's encoding/json finds a struct field in a JSON object, for the Koordinator documents we decode; and
a ``json.loads`` that fails like a parse error on input nested past Python's recursion limit."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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


def loads(text: str | bytes | bytearray, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads`` for input from the network or a tenant.

    The C decoder recurses once per nesting level, so ``[[[[...`` a few thousand deep (a 3 KB annotation)
    raises RecursionError, which no caller expects; here it is a :class:`json.JSONDecodeError` (a
    ValueError) like any other malformed document.  Go's decoder has a limit too (encoding/json
    ``maxNestingDepth``, 10000); the documents Koordinator defines nest a handful of levels."""
    try:
        return json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
