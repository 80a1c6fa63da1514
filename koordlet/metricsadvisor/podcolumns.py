"""Per-pod and per-container files read as columns: what the pod-level collectors share.

A collector describes, for each pod and container it wants, one file and the series that file feeds;
:class:`PodColumns` tracks the files in the collector's file group, drops the series of pods that went,
and keeps slot arrays and series columns in one stable order so each tick is a few C gathers and one C
append per series column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from koordlet import native
from koordlet.errors import KoordletError
from koordlet.metriccache import Labels, MetricCache, labels_of
from koordlet.metricsadvisor.cgroupfiles import FileSpec
from koordlet.metricsadvisor.framework import FileGroup
from koordlet.native import RingColumn
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.layout import CgroupLayout

Key = tuple[str, str]
"""(pod uid, container id); the container id is "" for the pod itself."""


Series = tuple[tuple[str, Labels], ...]
Wanted = dict[Hashable, tuple[FileSpec, Series]]
"""Tracked key -> (the file, one (series name, labels) per column)."""


@dataclass(frozen=True)
class Owner:
    key: Key
    rel_dir: str
    labels: Labels
    is_pod: bool


def owners(pods: Sequence[PodMeta]) -> list[Owner]:
    """Every pod with a cgroup directory, and every started container of it."""
    found = []
    for meta in pods:
        if not meta.cgroup_dir:
            continue
        found.append(Owner((meta.uid, ""), meta.cgroup_dir, labels_of(pod=meta.uid), True))
        for c in meta.containers:
            if c.cgroup_dir and c.container_id:
                found.append(Owner((meta.uid, c.container_id), c.cgroup_dir,
                                   labels_of(pod=meta.uid, container=c.container_id), False))
    return found


class PodColumns:
    """Tracked files keyed by (owner key, variant), each feeding ``len(series)`` series columns."""

    def __init__(self, name: str, files: FileGroup, cache: MetricCache, columns: int) -> None:
        self._name = name
        self._files = files
        self._cache = cache
        self._columns = columns
        self._series: dict[Hashable, Series] = {}
        self.keys: list[Hashable] = []
        self.slots = native.Slots([])
        self.columns: list[RingColumn] = [RingColumn([]) for _ in range(columns)]

    def update(self, wanted: Wanted) -> None:
        """Makes the tracked set equal ``wanted``: key -> (file, one (series, labels) per column)."""
        for key in [k for k in self._series if k not in wanted]:
            for name, labels in self._series.pop(key):
                self._cache.drop(name, labels)
            self._files.untrack((self._name, key))
        for key, (spec, series) in wanted.items():
            if key not in self._series:
                self._files.track((self._name, key), spec.path, spec.kind, spec.keys)
                self._series[key] = series
        self.keys = list(self._series)
        self.slots = native.Slots([self._files.slot((self._name, k)) for k in self.keys])
        self.columns = [self._cache.column([self._series[k][c] for k in self.keys]) for c in range(self._columns)]

    def track_owners(self, pods: Sequence[PodMeta], layout: CgroupLayout,
                     make_spec: Callable[[CgroupLayout, str], FileSpec], pod_series: str,
                     container_series: str) -> None:
        """The common case: one file per pod and container (``make_spec(layout, rel_dir)``) feeding one
        series, ``pod_series`` for pods and ``container_series`` for containers."""
        wanted: Wanted = {}
        for owner in owners(pods):
            spec = spec_or_none(make_spec, layout, owner.rel_dir)
            if spec is not None:
                wanted[owner.key] = (spec, ((pod_series if owner.is_pod else container_series, owner.labels),))
        self.update(wanted)

    def remap(self, previous: list[float], old_keys: list[Hashable]) -> list[float]:
        """A per-key state column carried over to the current key order (NaN for new keys)."""
        by_key = dict(zip(old_keys, previous, strict=True))
        return [by_key.get(k, math.nan) for k in self.keys]

    def append(self, column: int, t: float, values: Sequence[float]) -> None:
        self._cache.append_column(self.columns[column], t, values)


def spec_or_none(make: object, layout: CgroupLayout, rel_dir: str, *args: str) -> FileSpec | None:
    """``make(layout, rel_dir, *args)``, or None when this host lacks the hierarchy (probes report it)."""
    try:
        return make(layout, rel_dir, *args)  # type: ignore[operator, no-any-return]
    except KoordletError:
        return None
