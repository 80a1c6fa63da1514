"""Leveled writes for resources where a child may not be wider than its parent.

cgroup v1 refuses a ``cpuset.cpus`` that is not a subset of the parent's (EACCES) and a parent that
would no longer cover a child's (EBUSY); ``memory.min`` above the parent's is capped, so the child's
protection is silently lost until the parent grows.  Koordinator's ``LeveledUpdateBatch`` handles a
batch holding a parent and its children in two passes:

1. top-down, each cgroup that has a descendant in the batch gets the *merged* value: the union of its
   current and desired CPUs, or the larger of its current and desired ``memory.min``, so it is wide
   enough for every child's new value;
2. bottom-up, every cgroup gets its *final* value, children first, so a parent shrinks only after its
   children did.

Leaves skip pass 1: their final value is never wider than the merged one, so writing it directly is
as safe and saves a write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from koordlet.system.resources import CPUSET_CPUS, MEMORY_MIN
from koordlet.system.validators import format_cpulist, parse_cpulist


def _merge_cpuset(current: str, desired: object) -> object | None:
    try:
        have = set(parse_cpulist(current))
    except ValueError:
        return None
    union = have | set(parse_cpulist(str(desired)))
    return None if union == have else format_cpulist(union)


def _merge_larger(current: str, desired: object) -> object | None:
    try:
        have = int(current.strip())
    except ValueError:  # "max" or garbage: the current value cannot be narrower than anything we write
        return None
    assert isinstance(desired, int)  # the memory_min validator yields an int
    return desired if desired > have else None


MERGE: dict[str, Callable[[str, object], object | None]] = {
    CPUSET_CPUS.key: _merge_cpuset,
    MEMORY_MIN.key: _merge_larger,
}
"""Leveled resource key -> ``merge(current_text, desired_canonical)``: the canonical value to write
top-down, or None when the current value already covers the desired one (or cannot be parsed)."""


class Leveled(Protocol):
    """An update placed in the tree: its resource key and its cleaned directory."""

    @property
    def key(self) -> str: ...

    @property
    def rel_dir(self) -> str: ...


T = TypeVar("T", bound=Leveled)


def depth(rel_dir: str) -> int:
    """0 for the hierarchy root, 1 for ``kubepods``, 2 for ``kubepods/besteffort``..."""
    return len(rel_dir.split("/")) if rel_dir else 0


def _ancestors(rel_dir: str) -> list[str]:
    """Every proper ancestor of ``rel_dir``, the hierarchy root ``""`` included."""
    if not rel_dir:
        return []
    parts = rel_dir.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts))]


def top_down_parents(items: Sequence[T], changing: Sequence[T] | None = None) -> list[T]:
    """The items with a descendant of the same resource in ``changing`` (default: ``items``),
    shallowest first (pass 1).  A parent needs widening only for a child that is really going to be
    written, so a batch the executor skips as unchanged costs no reads.

    Linear in the batch (times the depth): a batch of thousands of container ``cpuset.cpus`` writes
    must not compare every pair."""
    below = items if changing is None else changing
    has_descendant = {(b.key, ancestor) for b in below for ancestor in _ancestors(b.rel_dir)}
    parents = [a for a in items if (a.key, a.rel_dir) in has_descendant]
    return sorted(parents, key=lambda item: depth(item.rel_dir))


def bottom_up(items: Sequence[T]) -> list[T]:
    """All items, deepest first; the batch order is kept among equal depths (pass 2)."""
    return sorted(items, key=lambda item: -depth(item.rel_dir))
