"""What a collector is and what it gets.

Collectors that tick at the same interval share one :class:`FileGroup`: each tracks its files there, the
runner reads the whole group with one C call per tick, then hands the same result to every collector of
the group in registration order (so derived collectors such as sysresource run after the ones they
read).  Pod changes reach collectors in the runner's thread, never concurrently with a collect.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordlet import native
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.config.types import CollectorConfig
from koordlet.metriccache import MetricCache
from koordlet.statesinformer.framework import PodMeta, StatesInformer
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import CgroupLayout


def _clock_ticks_per_second() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class CollectorDeps:
    """What every collector's ``new`` gets when the registry builds it: host constants fixed for the
    process.  What depends on the daemon's config, cache and informer arrives later through
    :class:`Options` in :meth:`Collector.setup`, so a collector can be built (and listed) before those exist."""

    clock_ticks_per_second: float = field(default_factory=_clock_ticks_per_second)
    """USER_HZ, the unit of /proc/stat's CPU times."""


@dataclass(frozen=True)
class Options:
    """Dependencies handed to every collector at setup; injected rather than imported, so tests hand in a
    fake host, cache, informer and clock."""

    paths: HostPaths
    """Where /proc and /sys are (node-level files: /proc/stat, /proc/meminfo, /proc/pressure)."""
    layout: CgroupLayout
    """The host's cgroup hierarchies (pod, container and QoS-level files)."""
    driver: CgroupDriver
    """kubelet's cgroup driver: how the QoS-level directories are named."""
    cache: MetricCache
    """Where the samples go."""
    informer: StatesInformer
    """The pods to collect for, and the node (CPI counts on its online CPUs)."""
    config: CollectorConfig
    """Intervals and windows (``collector`` section of the config)."""
    gates: Mapping[str, bool]
    """Feature gates in force; gated collectors check theirs in ``enabled``."""
    clock: Callable[[], float]
    """Wall clock stamping samples (seconds since the epoch), as the metric cache expects."""
    kube_parent: str = ""
    """Where kubepods sits below the hierarchy roots (kubelet --cgroup-root)."""
    perf: Any = native
    """The module perf groups come from (tests inject a fake)."""
    host_apps: Callable[[], Sequence[HostApplicationSpec]] = lambda: ()
    """NodeSLO ``hostApplications`` in force (the hostapp collector reads it every tick)."""
    memory_with_page_cache: Callable[[], bool] = lambda: False
    """NodeMetric's memory policy is ``usageWithPageCache``: host-app memory sums include page cache."""


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
