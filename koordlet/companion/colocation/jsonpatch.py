"""RFC 6902 JSON Patch from one decoded JSON document to another, shaped as the patches of
controller-runtime's ``admission.PatchResponseFromRaw`` (gomodules.xyz/jsonpatch/v2 ``CreatePatch``):

- objects: ``add`` for a new member, ``remove`` for a vanished one, recursion into a member present in both;
- arrays: the elements past the shorter length are removed from the end backwards or added in order, then the
  common prefix is compared element by element, so every path is valid when its operation runs;
- a value whose JSON type changed, or a differing scalar, is a ``replace``.

Equal subtrees are skipped with Python's ``==`` (the pod is mostly unchanged, and that comparison runs in C); it
takes ``true`` for ``1`` and ``false`` for ``0``, so such a change of JSON type is not seen -- no Pod field is
ever one and then the other.

Member names in paths are escaped as RFC 6901 says: ``~`` as ``~0``, ``/`` as ``~1`` (label keys such as
``koordinator.sh/qosClass`` contain slashes).
"""

from __future__ import annotations

from typing import Any


def diff(original: Any, modified: Any) -> list[dict[str, Any]]:
    """The operations that turn ``original`` into ``modified`` (empty when they are equal)."""
    ops: list[dict[str, Any]] = []
    _values(original, modified, "", ops)
    return ops


def escape(key: str) -> str:
    """One RFC 6901 reference token."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def _kind(value: Any) -> type:
    # JSON has one number type: 30 and 30.0 are the same value to Go's decoder.  bool is not a number.
    kind = type(value)
    return float if kind is int else kind


def _values(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if old is new:
        return
    if _kind(old) is not _kind(new):
        ops.append({"op": "replace", "path": path, "value": new})
        return
    if isinstance(new, dict):
        if old != new:
            _objects(old, new, path, ops)
    elif isinstance(new, list):
        if old != new:
            _arrays(old, new, path, ops)
    elif old != new:
        ops.append({"op": "replace", "path": path, "value": new})


def _objects(old: dict[str, Any], new: dict[str, Any], path: str, ops: list[dict[str, Any]]) -> None:
    for key, value in new.items():
        member = f"{path}/{escape(key)}"
        if key not in old:
            ops.append({"op": "add", "path": member, "value": value})
        else:
            _values(old[key], value, member, ops)
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})


def _arrays(old: list[Any], new: list[Any], path: str, ops: list[dict[str, Any]]) -> None:
    common = min(len(old), len(new))
    for index in range(len(old) - 1, common - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{index}"})
    for index in range(common, len(new)):
        ops.append({"op": "add", "path": f"{path}/{index}", "value": new[index]})
    for index in range(common):
        _values(old[index], new[index], f"{path}/{index}", ops)
