"""Strategic merge patch of a Pod: the ``patch`` field of a ClusterColocationProfile, applied as koordinator does
with ``strategicpatch.StrategicMergePatch(pod, patch, &corev1.Pod{})`` (k8s.io/apimachinery
``pkg/util/strategicpatch/patch.go``, server-side options: parallel lists merged, unmatched nulls ignored).

- Objects merge member by member; ``null`` deletes a member; a value of another JSON type replaces.
- Lists replace, except the Pod's merge lists (:data:`POD_SCHEMA`, from the ``patchStrategy``/``patchMergeKey``
  tags of k8s.io/api core/v1): lists of objects merge by their key, lists of scalars merge as a set.
- Directives: ``$patch: replace|delete`` on an object or a list element, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>``.  A value set where the pod has none
  loses its null members and the objects carrying ``$patch`` (apimachinery's ``removeDirectives``).
- Order, as apimachinery's ``normalizeElementOrder``: items named by the patch keep the patch's order, the
  pod's other items keep theirs, interleaved where the pod's order relates them.

Upstream decodes the result into a typed Pod, which drops members that are not Pod fields; here directive
members (``$...``) carried along verbatim are dropped the same way, other unknown members are kept.

Checked against the raw cases of apimachinery's ``TestStrategicMergePatch``; the one kind of case that differs
is ``$setElementOrder`` together with ``$patch: delete`` in one list, whose order there follows from Go slices
sharing their backing array -- kubectl writes such patches, a profile has no reason to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

DIRECTIVE: Final = "$patch"
RETAIN_KEYS: Final = "$retainKeys"
DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"
SET_ELEMENT_ORDER: Final = "$setElementOrder"
_NO_FIELDS: Final[Mapping[str, Any]] = MappingProxyType({})


class PatchError(ValueError):
    """The patch cannot be applied (apimachinery's error is the admission's 500)."""


@dataclass(frozen=True)
class MergeList:
    """A list field with ``patchStrategy:"merge"``."""

    key: str = ""
    """``patchMergeKey`` of a list of objects; "" for a list of scalars (merged as a set)."""
    item: Mapping[str, Any] = field(default_factory=lambda: _NO_FIELDS)
    """The fields of its elements that are themselves merge lists or objects holding some."""


_CONTAINER: Final = MappingProxyType({
    "ports": MergeList("containerPort"), "env": MergeList("name"), "volumeMounts": MergeList("mountPath"),
    "volumeDevices": MergeList("devicePath")})
POD_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType({
    "metadata": MappingProxyType({"finalizers": MergeList(), "ownerReferences": MergeList("uid")}),
    "spec": MappingProxyType({
        "volumes": MergeList("name"), "initContainers": MergeList("name", _CONTAINER),
        "containers": MergeList("name", _CONTAINER), "ephemeralContainers": MergeList("name", _CONTAINER),
        "imagePullSecrets": MergeList("name"), "hostAliases": MergeList("ip"),
        "topologySpreadConstraints": MergeList("topologyKey"), "schedulingGates": MergeList("name"),
        "resourceClaims": MergeList("name")}),
    "status": MappingProxyType({
        "conditions": MergeList("type"), "podIPs": MergeList("ip"), "hostIPs": MergeList("ip"),
        "resourceClaimStatuses": MergeList("name")}),
})
"""Pod fields with a merge strategy (k8s.io/api core/v1 v0.35 tags); every other list is replaced."""


def strategic_merge_pod(pod: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` with ``patch`` applied; ``pod`` is changed in place and returned, ``patch`` is only read.
    Raises PatchError for a patch apimachinery refuses."""
    if not isinstance(patch, Mapping):
        raise PatchError("patch: must be an object")
    return _merge_map(pod, patch, POD_SCHEMA)


def _merge_map(original: dict[str, Any] | None, patch: Mapping[str, Any], schema: Mapping[str, Any]
               ) -> dict[str, Any]:
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            return {key: _verbatim(value) for key, value in patch.items() if key != DIRECTIVE}
        if directive == "delete":  # the object becomes empty, its member stays
            return {}
        raise PatchError(f"unknown patch type {directive!r} in an object")
    if original is None:
        original = {}
    entries = dict(patch)  # the directives are consumed from this copy: the profile's patch is shared
    if RETAIN_KEYS in entries:
        _retain_keys(original, entries, entries.pop(RETAIN_KEYS))
    for key in [key for key in entries if key.startswith(SET_ELEMENT_ORDER)]:
        _set_element_order(original, entries, key, entries.pop(key), schema)
    for key, value in entries.items():
        delete_list = key.startswith(DELETE_FROM_PRIMITIVE_LIST)
        if delete_list:
            key = _field_of(key, DELETE_FROM_PRIMITIVE_LIST)
        elif key.startswith("$"):
            continue  # an unknown directive: Go carries it along and the typed decode drops it
        if value is None:
            original.pop(key, None)
            continue
        if key not in original or _kind(original[key]) is not _kind(value):
            if not delete_list:  # a deletion list for a missing list deletes nothing
                _set_new(original, key, value)
            continue
        current, field_schema = original[key], schema.get(key)
        if isinstance(current, dict):
            original[key] = _merge_map(current, value, field_schema if isinstance(field_schema, Mapping)
                                       else _NO_FIELDS)
        elif isinstance(current, list) and (delete_list or isinstance(field_schema, MergeList)):
            merge = field_schema if isinstance(field_schema, MergeList) else MergeList()
            original[key] = _merge_list(current, value, merge, delete_list)
        elif isinstance(current, list):
            original[key] = _verbatim(value)
        else:
            _set_new(original, key, value)
    return original


def _retain_keys(original: dict[str, Any], entries: Mapping[str, Any], retain: Any) -> None:
    """``$retainKeys``: members of the pod's object not listed are cleared; the patch may set only listed ones."""
    if not isinstance(retain, list):
        raise PatchError("$retainKeys: must be a list")
    allowed = {_hashable(item, "$retainKeys") for item in retain}
    for key, value in entries.items():
        if value is not None and not key.startswith((DELETE_FROM_PRIMITIVE_LIST, SET_ELEMENT_ORDER)) \
                and _hashable(key, "$retainKeys") not in allowed:
            raise PatchError(f"$retainKeys: the patch sets {key!r}, which the list does not retain")
    for key in [key for key in original if _hashable(key, "$retainKeys") not in allowed]:
        del original[key]


def _merge_list(original: list[Any], patch: list[Any], schema: MergeList, delete_list: bool) -> list[Any]:
    if not original and not patch:
        return original
    if _element_kind(original, patch) is not dict:
        if delete_list:
            dropped = {_hashable(item, "$deleteFromPrimitiveList") for item in patch}
            return [item for item in original if _hashable(item, "list item") not in dropped]
        merged = _dedupe(original + [_verbatim(item) for item in patch])
        wanted = {_hashable(item, "list item") for item in patch}
        return _ordered(merged, lambda item: _hashable(item, "list item") in wanted, patch, original, "")
    if not schema.key:
        raise PatchError("cannot merge lists without merge key")
    original, patch = _special_elements(original, patch, schema.key)
    merged = list(original)
    for item in patch:
        value = _merge_value(item, schema.key)
        index = _find(merged, schema.key, value)
        if index is None:
            merged.append(_verbatim(item))
        else:
            merged[index] = _merge_map(merged[index], item, schema.item)
    in_patch = {_merge_value(item, schema.key) for item in patch}
    return _ordered(merged, lambda item: _merge_value(item, schema.key) in in_patch, patch, original, schema.key)


def _special_elements(original: list[Any], patch: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    """List elements carrying ``$patch``: ``delete`` removes the pod's items with that key, ``replace`` makes
    the list exactly the patch's other elements."""
    rest: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get(DIRECTIVE)
        if DIRECTIVE not in item:
            rest.append(item)
        elif directive == "delete":
            value = _merge_value(item, key)
            original = [kept for kept in original if _find([kept], key, value) is None]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(f"unknown patch type {directive!r} in a list element")
    if replace:
        return [_verbatim(item) for item in rest], []
    return original, rest


def _set_element_order(original: dict[str, Any], entries: dict[str, Any], directive: str, order: Any,
                       schema: Mapping[str, Any]) -> None:
    """``$setElementOrder/<field>``: merge that field now and order it as the directive lists."""
    if not isinstance(order, list):
        raise PatchError(f"{directive}: must be a list")
    name = _field_of(directive, SET_ELEMENT_ORDER)
    current, patched = original.get(name), entries.pop(name, None)
    if (name in original and not isinstance(current, list)) or (patched is not None and not isinstance(patched,
                                                                                                       list)):
        raise PatchError(f"{directive}: {name} is not a list")
    field_schema = schema.get(name)
    key = field_schema.key if isinstance(field_schema, MergeList) else ""
    _check_order(patched or [], order, key)
    if current is None and patched is None:
        return
    merged: list[Any]
    if patched is None:
        merged = current or []
    elif current is None:
        merged = [_verbatim(item) for item in patched]
    elif isinstance(field_schema, MergeList):
        merged = _merge_list(current, patched, field_schema, False)
    else:
        merged = [_verbatim(item) for item in patched]
    _element_kind(current or [], patched or [])
    named = {_merge_value(item, key) if key else _hashable(item, "list item") for item in order}
    original[name] = _ordered(merged, lambda item: (_merge_value(item, key) if key else _hashable(item, "list item"))
                              in named, order, current or [], key)


def _check_order(patch: list[Any], order: list[Any], key: str) -> None:
    """``validatePatchWithSetOrderList``: the patch's items appear in the directive, in the same order."""
    if key:
        patch = [item for item in patch if not (isinstance(item, dict) and item.get(DIRECTIVE) == "delete")]
    if not order or not patch:
        return
    at = 0
    for wanted in order:
        while at < len(patch) and isinstance(patch[at], dict) and DIRECTIVE in patch[at]:
            at += 1
        if at >= len(patch):
            return
        if key:
            at += _merge_value(patch[at], key) == _merge_value(wanted, key)
        else:
            at += _hashable(patch[at], "list item") == _hashable(wanted, "list item")
    if at < len(patch):
        raise PatchError(f"the order in the patch list does not match the {SET_ELEMENT_ORDER} list")


def _ordered(merged: list[Any], named_by_patch: Callable[[Any], bool], patch_order: list[Any],
             server_order: list[Any], key: str) -> list[Any]:
    """``normalizeElementOrder``: the patch's items in ``patch_order``, the others in ``server_order``, then
    interleaved: a server item goes first only when the server's order puts it before the patch item."""
    patch_items = [item for item in merged if named_by_patch(item)]
    server_only = [item for item in merged if not named_by_patch(item)]

    def identity(item: Any) -> Any:
        return _merge_value(item, key) if key else _hashable(item, "list item")

    if key:
        for item in patch_order + server_order:
            _merge_value(item, key)  # every item must carry the merge key (validateMergeKeyInLists)
    server_rank = _first_index([identity(item) for item in server_order])
    patch_items = _go_stable_sort(patch_items, _first_index([identity(item) for item in patch_order]), identity)
    server_only = _go_stable_sort(server_only, server_rank, identity)
    result: list[Any] = []
    left = right = 0
    while left < len(server_only) or right < len(patch_items):
        if left < len(server_only) and right < len(patch_items):
            mine = server_rank.get(identity(server_only[left]))
            theirs = server_rank.get(identity(patch_items[right]))
            take_server = mine is not None and theirs is not None and mine < theirs
        else:
            take_server = left < len(server_only)
        if take_server:
            result.append(server_only[left])
            left += 1
        else:
            result.append(patch_items[right])
            right += 1
    return result


def _go_stable_sort(items: list[Any], rank: Mapping[Any, int], identity: Callable[[Any], Any]) -> list[Any]:
    """Go's ``sort.SliceStable`` insertion sort with apimachinery's comparator, which calls an item missing
    from the order "less" than anything: replayed literally so such items land where Go puts them."""
    out = list(items)

    def less(a: Any, b: Any) -> bool:
        ra, rb = rank.get(identity(a)), rank.get(identity(b))
        return ra is None or rb is None or ra < rb

    for i in range(1, len(out)):
        j = i
        while j > 0 and less(out[j], out[j - 1]):
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


def _first_index(identities: list[Any]) -> dict[Any, int]:
    rank: dict[Any, int] = {}
    for index, identity in enumerate(identities):
        rank.setdefault(identity, index)
    return rank


def _find(items: list[Any], key: str, value: Any) -> int | None:
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PatchError(f"list item {index} is not an object")
        if key in item and _hashable(item[key], key) == value:
            return index
    return None


def _merge_value(item: Any, key: str) -> Any:
    if not isinstance(item, dict):
        raise PatchError(f"a list merged by {key!r} holds something other than an object")
    if key not in item:
        raise PatchError(f"a list item does not contain the declared merge key {key!r}")
    return _hashable(item[key], key)


def _hashable(value: Any, where: str) -> tuple[str, Any]:
    """A scalar compared as Go compares interface values: 1 and 1.0 equal, true and 1 not."""
    kind = _kind(value)
    if kind is dict or kind is list:
        raise PatchError(f"{where}: an object or a list where a scalar is expected")
    return kind.__name__, value


def _dedupe(items: list[Any]) -> list[Any]:
    seen: set[tuple[str, Any]] = set()
    out = []
    for item in items:
        identity = _hashable(item, "list item")
        if identity not in seen:
            seen.add(identity)
            out.append(item)
    return out


def _element_kind(*lists: list[Any]) -> type:
    """``sliceElementType``: every element of every list has one JSON type, and it is not a list."""
    kinds = {_kind(item) for items in lists for item in items}
    if not kinds:
        raise PatchError("no elements in any of the given lists")
    if len(kinds) > 1:
        raise PatchError("list element types are not identical")
    kind = kinds.pop()
    if kind is list:
        raise PatchError("lists of lists are not supported")
    return kind


def _field_of(directive: str, prefix: str) -> str:
    head, slash, name = directive.partition("/")
    if head != prefix or not slash:
        raise PatchError(f"{directive!r}: expected {prefix}/<field>")
    return name


def _kind(value: Any) -> type:
    """The JSON type of a decoded value (Go decodes every number as float64)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return type(value)
    if isinstance(value, int | float):
        return float
    if isinstance(value, Mapping):
        return dict
    return list if isinstance(value, list | tuple) else type(value)


def _set_new(target: dict[str, Any], key: str, value: Any) -> None:
    """A patch value where the pod has none (or one of another type), as apimachinery takes it: null members
    discarded, objects carrying ``$patch`` dropped (``removeDirectives``)."""
    kept = _without_directives(value)
    if kept is _DROPPED:
        target.pop(key, None)
    else:
        target[key] = kept


_DROPPED: Final = object()


def _without_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        if DIRECTIVE in value:
            return _DROPPED
        kept = {key: _without_directives(item) for key, item in value.items()
                if item is not None and not key.startswith("$")}
        return {key: item for key, item in kept.items() if item is not _DROPPED}
    if isinstance(value, list | tuple):
        return [item for item in map(_without_directives, value) if item is not _DROPPED]
    return value


def _verbatim(value: Any) -> Any:
    """A fresh copy of a patch value taken as it is, without the ``$`` members the typed decode drops."""
    if isinstance(value, Mapping):
        return {key: _verbatim(item) for key, item in value.items() if not key.startswith("$")}
    if isinstance(value, list | tuple):
        return [_verbatim(item) for item in value]
    return value
