"""What a collector is and what it gets.

Collectors that tick at the same interval share one :class:`FileGroup`: each tracks its files there, the
runner reads the whole group with one C call per tick, then hands the same result to every collector of
the group in registration order (so derived collectors such as sysresource run after the ones they
read).  Pod changes reach collectors in the runner's thread, never concurrently with a collect.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from koordlet import native
from koordlet.config.types import CollectorConfig
from koordlet.metriccache import MetricCache
from koordlet.statesinformer.framework import PodMeta, StatesInformer
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import CgroupLayout


@dataclass(frozen=True)
class Options:
    """Dependencies handed to every collector (CONVENTIONS #4: injected, never imported singletons)."""

    paths: HostPaths
    layout: CgroupLayout
    driver: CgroupDriver
    cache: MetricCache
    informer: StatesInformer
    config: CollectorConfig
    gates: Mapping[str, bool]
    clock: Callable[[], float]
    kube_parent: str = ""
    """Where kubepods sits below the hierarchy roots (kubelet --cgroup-root)."""
    perf: Any = native
    """The module perf groups come from (tests inject a fake)."""


class FileGroup:
    """Files of the collectors sharing one tick, read in one batch; slots are tracked per owner key."""

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self.files = native.FileSet()
        self._slots: dict[Hashable, int] = {}

    def track(self, key: Hashable, path: str, kind: native.Kind, keys: Sequence[str] | None = None) -> int:
        """The slot of ``path`` under ``key`` (added on first use; the same key keeps its slot)."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self.files.add(path, kind, keys)
            self._slots[key] = slot
        return slot

    def slot(self, key: Hashable) -> int:
        """The slot tracked under ``key`` (KeyError when it is not tracked)."""
        return self._slots[key]

    def untrack(self, key: Hashable) -> None:
        slot = self._slots.pop(key, None)
        if slot is not None:
            self.files.remove(slot)

    def keys(self) -> list[Hashable]:
        return list(self._slots)

    def read(self) -> native.BatchResult:
        return self.files.read()

    def close(self) -> None:
        self.files.close()
        self._slots.clear()


class Collector(Protocol):
    """One source of samples.  The runner owns time: it calls ``collect`` once per due tick."""

    name: str

    def enabled(self, options: Options) -> bool:
        """Whether this collector runs at all (feature gates, host support)."""
        ...

    def interval(self, options: Options) -> float:
        """Seconds between collections; collectors with equal intervals share a file group."""
        ...

    def setup(self, options: Options, files: FileGroup) -> None:
        """Tracks host-level files; called once before the first collect."""
        ...

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        """The pod list changed: track new pods' files, untrack and forget gone ones."""
        ...

    def collect(self, batch: native.BatchResult, now: float) -> None:
        """Turns this tick's reads into samples in the cache; must not raise for a vanished cgroup."""
        ...


class UsageCollector:
    """Defaults for collectors that always run and tick with the usage interval (override as needed)."""

    name: str

    def enabled(self, options: Options) -> bool:
        return True

    def interval(self, options: Options) -> float:
        return options.config.res_used_interval_seconds

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        return None
