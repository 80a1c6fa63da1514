"""Inputs several strategies share: node capacity, usage of pods split by class, the BE QoS directory,
a standalone host's BE workloads.

Usage comes from the metric cache and only when fresh: a sample older than ``STALE_INTERVALS`` collect intervals
means the collector or the cgroup is gone, and acting on it would suppress or evict on a number that no longer
describes the node.  The one exception is a round a pressure trigger woke (:class:`FreshMemory`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from koordlet import native
from koordlet.apis.extension import QoSClass
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.cache import pod_labels
from koordlet.metricsadvisor import cgroupfiles
from koordlet.qosmanager.framework import Options
from koordlet.resourceexecutor import Outcome, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import WORKLOAD_SOURCE
from koordlet.system.kubepaths import KubeQoS, qos_dir, under_parent

STALE_INTERVALS = 3.0


def max_age(options: Options, interval_seconds: float | None = None) -> float:
    base = options.collector.res_used_interval_seconds if interval_seconds is None else interval_seconds
    return base * STALE_INTERVALS


def be_qos_dir(options: Options) -> str:
    """``kubepods/besteffort`` (or the systemd slice) below the kube parent."""
    return under_parent(options.kube_parent, qos_dir(options.driver, KubeQoS.BESTEFFORT))


def kube_qos_dir(options: Options, qos: KubeQoS) -> str:
    return under_parent(options.kube_parent, qos_dir(options.driver, qos))


def is_be(pod: PodMeta) -> bool:
    return pod.qos is QoSClass.BE


def be_workloads(pods: Iterable[PodMeta]) -> list[PodMeta]:
    """A standalone host's configured BE workloads (class from the ``koordinator.sh/qosClass`` label their
    config gives them), by cgroup path: each is limited and evicted through its own cgroup."""
    return sorted((p for p in pods if p.source == WORKLOAD_SOURCE and p.qos is QoSClass.BE),
                  key=lambda p: p.cgroup_dir)


@dataclass(frozen=True)
class PodUsage:
    """Latest usage per pod UID (pods without a fresh sample are absent) and the node's."""

    node: float | None
    pods: Mapping[str, float]


class PodSeries:
    """The UIDs of a pod list and their metric-cache labels, worked out again only when the list is another
    object (the informer hands out the same tuple until a pod changes): a strategy asking every pod's
    usage every round keeps one."""

    __slots__ = ("_chosen", "_select", "_source", "labels", "uids")

    def __init__(self) -> None:
        self._source: object = None
        self.uids: list[str] = []
        self.labels: tuple[tuple[tuple[str, str], ...], ...] = ()
        """A tuple: the metric cache keeps its lookup of a tuple asked again."""
        self._select: Callable[[PodMeta], bool] | None = None
        self._chosen: list[bool] = []

    def of(self, pods: Sequence[PodMeta]) -> PodSeries:
        if pods is not self._source:
            self.uids = [pod.uid for pod in pods]
            self.labels = tuple(pod_labels(uid) for uid in self.uids)
            self._select = None
            self._source = pods
        return self

    def chosen(self, pods: Sequence[PodMeta], select: Callable[[PodMeta], bool]) -> list[bool]:
        """``select(pod)`` of each pod, for the same list and the same ``select`` as last time."""
        self.of(pods)
        if select is not self._select:
            self._chosen = [select(pod) for pod in pods]
            self._select = select
        return self._chosen


def cpu_usage(options: Options, pods: Sequence[PodMeta], series: PodSeries | None = None) -> PodUsage:
    """Cores used by the node and by each pod, from samples no older than :func:`max_age`; ``series``
    keeps the pods' labels between rounds."""
    return _usage(options, pods, names.NODE_CPU_USAGE, names.POD_CPU_USAGE,
                  max_age(options), series)


def memory_usage(options: Options, pods: Sequence[PodMeta]) -> PodUsage:
    """Bytes used by the node and by each pod (pod memory is collected every ``memory_interval``)."""
    return _usage(options, pods, names.NODE_MEMORY_USAGE, names.POD_MEMORY_USAGE,
                  max_age(options, max(options.collector.memory_interval_seconds,
                                       options.collector.res_used_interval_seconds)))


class FreshMemory:
    """:func:`memory_usage` read now from the files the collectors read (``/proc/meminfo``, each pod's memory.stat),
    for a round woken because usage just changed, when the metric cache's samples (pod memory every
    ``memoryIntervalSeconds``) would be seconds old.  One C batch read per call; the files stay open between calls
    (re-read with ``pread``), those of pods no longer asked for are closed.  A pod whose cgroup is gone or
    unreadable is absent from the usage."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._files = native.FileSet()
        self._meminfo = self._files.add(options.layout.paths.proc("meminfo"), native.Kind.MEMINFO,
                                        ["MemTotal", "MemAvailable"])
        self._slots: dict[str, int] = {}
        """memory.stat path -> its slot in the set."""

    def usage(self, pods: Sequence[PodMeta]) -> PodUsage:
        layout = self._options.layout
        paths = {pod.uid: cgroupfiles.memory_stat(layout, pod.cgroup_dir) for pod in pods}
        wanted = {spec.path for spec in paths.values()}
        for path in [p for p in self._slots if p not in wanted]:
            self._files.remove(self._slots.pop(path))
        for uid, spec in list(paths.items()):
            if spec.path not in self._slots:
                try:
                    self._slots[spec.path] = self._files.add(spec.path, spec.kind, spec.keys)
                except (OSError, KoordletError):  # a path the core refuses: that pod is absent, as if unreadable
                    del paths[uid]
        batch = self._files.read()
        total, available = batch.key_value(self._meminfo, 0), batch.key_value(self._meminfo, 1)
        node = float(max(total - available, 0)) if total is not None and available is not None else None
        per_pod = {uid: float(used) for uid, spec in paths.items()
                   if (used := batch.key_sum(self._slots[spec.path])) is not None}
        return PodUsage(node, per_pod)


def _usage(options: Options, pods: Sequence[PodMeta], node_name: str, pod_name: str, age: float,
           series: PodSeries | None = None) -> PodUsage:
    cache = options.cache
    node = cache.latest(node_name, (), age)
    found = (series or PodSeries()).of(pods)
    values = cache.latest_values(pod_name, found.labels, age)
    per_pod = {uid: value for uid, value in zip(found.uids, values, strict=True) if value is not None}
    return PodUsage(node[1] if node is not None else None, per_pod)


@dataclass(frozen=True)
class SplitUsage:
    """The node's usage split the way Koordinator's ``CalculateFilterPodsUsed`` does."""

    node: float
    matched: float
    """Used by pods the filter selects (non-BE for suppress)."""
    others: float
    """Used by the other pods."""
    system: float
    """max(node - all pods, 0): daemons, kernel threads, host applications."""


def split_usage(usage: PodUsage, pods: Sequence[PodMeta], select: Callable[[PodMeta], bool],
                series: PodSeries | None = None) -> SplitUsage | None:
    """None without a fresh node sample; ``series`` keeps the pods' UIDs and ``select`` answers between
    rounds (``select`` must then answer from what the pod object holds)."""
    if usage.node is None:
        return None
    matched = others = 0.0
    per_pod = usage.pods
    if series is not None:
        found = series.of(pods)
        for uid, chosen in zip(found.uids, found.chosen(pods, select), strict=True):
            value = per_pod.get(uid)
            if value is None:
                continue
            if chosen:
                matched += value
            else:
                others += value
        return SplitUsage(usage.node, matched, others, max(usage.node - matched - others, 0.0))
    for pod in pods:
        value = per_pod.get(pod.uid)
        if value is None:
            continue
        if select(pod):
            matched += value
        else:
            others += value
    return SplitUsage(usage.node, matched, others, max(usage.node - matched - others, 0.0))


def write_outcomes(results: Iterable[Result]) -> dict[str, int]:
    """A batch's results counted by outcome, under the names decisions report them with."""
    counted = Counter(r.outcome for r in results)
    return {"writes": counted[Outcome.WRITTEN], "intended": counted[Outcome.INTENDED],
            "unchanged": counted[Outcome.SKIPPED_UNCHANGED], "gone": counted[Outcome.GONE],
            "refused": counted[Outcome.UNSUPPORTED], "invalid": counted[Outcome.INVALID],
            "failed": counted[Outcome.FAILED]}


def writes_made(counts: Mapping[str, int]) -> int:
    """Writes made, or in shadow mode decided and not made: a round reads and decides the same in either mode."""
    return counts["writes"] + counts["intended"]


def write_problems(results: Iterable[Result]) -> list[str]:
    """Writes that neither landed nor met a vanished cgroup, with the executor's reason."""
    return [f"{r.path or r.update.rel_dir}: {r.outcome.value}{f' ({r.error})' if r.error else ''}"
            for r in results if not r.ok and r.outcome is not Outcome.GONE]


def write_tail(counts: Mapping[str, int]) -> str:
    """``; 2 writes to vanished cgroups, 1 writes failed`` for a summary; empty when all landed."""
    parts = []
    if counts["gone"]:
        parts.append(f"{counts['gone']} writes to vanished cgroups")
    bad = counts["refused"] + counts["invalid"] + counts["failed"]
    if bad:
        parts.append(f"{bad} writes failed")
    return "; " + ", ".join(parts) if parts else ""
