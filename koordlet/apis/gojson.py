"""Decoded JSON, read the way Go reads it: how ``encoding/json`` finds a struct field (:func:`member`), a
``json.loads`` that fails like a parse error on input nested past Python's recursion limit (and
:func:`load_object` on top of it for a document that must be an object), and the typed
getters every decoder uses (:func:`mapping`, :func:`array`, :func:`string`, :func:`str_map`, and
:func:`parsed` for a string in a grammar of its own), which name the field path in their errors.

The getters take the error class to raise because the same shape is a configuration error in a spec
(ConfigError), a parse error in a status or a request (ParseError) and, in a runtime hook, a KoordletError
that makes the hook refuse the container."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from koordlet.errors import ParseError

T = TypeVar("T")


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


def load_object(text: str | bytes, where: str, error: type[Exception] = ParseError) -> Mapping[str, Any]:
    """The JSON object in ``text`` (an annotation, a checkpoint file); raises ``error`` naming ``where`` when
    the text is not JSON or holds something other than an object."""
    try:
        value = loads(text)
    except ValueError as exc:
        raise error(f"{where}: not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def mapping(value: Any, where: str, error: type[Exception] = ParseError, *, optional: bool = True
            ) -> Mapping[str, Any]:
    """``value`` as a JSON object; ``None`` (JSON null or an absent member) is an empty object unless
    ``optional`` is false.  Raises ``error`` naming ``where`` for anything else."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected an object, got {type(value).__name__}")
    return value


def array(value: Any, where: str, error: type[Exception] = ParseError) -> list[Any]:
    """``value`` as a JSON array; ``None`` is an empty one.  Raises ``error`` naming ``where`` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where}: expected a list, got {type(value).__name__}")
    return value


def string(value: Any, where: str, error: type[Exception] = ParseError) -> str:
    """``value`` as a JSON string; ``None`` is the empty string (Go's zero value for an absent field)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise error(f"{where}: expected a string, got {value!r}")
    return value


def boolean(obj: Mapping[str, Any], key: str, where: str, default: bool, error: type[Exception] = ParseError
            ) -> bool:
    """Member ``key`` of ``obj`` as a JSON boolean; absent or ``null`` is ``default``."""
    value = member(obj, key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise error(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def str_map(value: Any, where: str, error: type[Exception] = ParseError) -> dict[str, str]:
    """``value`` as a ``map[string]string`` (labels, annotations); ``None`` is an empty map."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise error(f"{where}: expected a map of strings")
    return dict(value)


def parsed(value: Any, where: str, parse: Callable[[str], T], error: type[Exception] = ParseError, *,
           expected: str = "a string", quote: bool = True) -> T:
    """``parse(value)`` for a member that is a string in a grammar of its own (a cpu list, a duration).

    Raises ``error`` naming ``where`` when ``value`` is not a string (``expected`` says what was wanted) or
    ``parse`` raises ValueError; that message follows the quoted value, or ``where`` alone when ``quote`` is
    false (for a parser whose messages already quote the whole text)."""
    if not isinstance(value, str):
        raise error(f"{where}: expected {expected}, got {value!r}")
    try:
        return parse(value)
    except ValueError as exc:
        raise error(f"{where} {value!r}: {exc}" if quote else f"{where}: {exc}") from None


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def dumps_string(text: str) -> str:
    """``text`` as encoding/json (Go 1.22 on) writes a string: the escapes Python writes too (``\\"``, ``\\\\``,
    ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``, other control characters as ``\\u00xx``), plus the HTML-safe
    escapes of ``<``, ``>``, ``&`` and of U+2028/U+2029 that Go adds; a lone surrogate (which Go's decoder
    never yields) is U+FFFD as Go would have decoded it."""
    clean = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return "".join(_GO_ESCAPES.get(ch, ch) for ch in json.dumps(clean, ensure_ascii=False))
