"""The descheduler component (upstream ``pkg/descheduler/descheduler.go``): every ``deschedulingInterval``,
while this replica leads, list the cluster and run each profile's balance plugins over its nodes.

A round needs at least two ready nodes (evicting from a one-node cluster only disrupts).  The eviction limits
count over the whole round, across profiles.  A plugin that raises ends the round (logged); the next round
runs as usual."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kubernetes import client
from prometheus_client import CollectorRegistry

from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.descheduler.cluster import Snapshot, list_snapshot
from koordlet.companion.descheduler.config import DeschedulerConfig, ProfileConfig
from koordlet.companion.descheduler.evictor import EvictionCounts, EvictionRecord, Evictor, EvictorMetrics
from koordlet.companion.descheduler.evictorargs import Limits
from koordlet.companion.descheduler.framework import BalancePlugin, Handle
from koordlet.companion.descheduler.registry import PLUGIN_FACTORIES
from koordlet.companion.kube.client import KubeApiError, call_json

log = logging.getLogger(__name__)

SINGLE_ROUND_RETRY_SECONDS = 1.0
"""With ``deschedulingInterval`` 0, how often to look again for leadership before the single round."""


@dataclass
class RoundReport:
    """What one round did."""

    started: float
    finished: float = 0.0
    skipped: str = ""
    """Why the round did nothing ("" when it ran)."""
    nodes: int = 0
    pods: int = 0
    dry_run: bool = False
    records: list[EvictionRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def evicted(self) -> list[EvictionRecord]:
        """Pods evicted (or, dry-run, that would have been)."""
        return [r for r in self.records if r.result in ("success", "dry-run")]

    @property
    def refused(self) -> list[EvictionRecord]:
        return [r for r in self.records if r.result not in ("success", "dry-run")]


@dataclass
class _Profile:
    config: ProfileConfig
    plugins: list[BalancePlugin]


def _restrict(snap: Snapshot, selector: LabelSelector | None, *, ready_only: bool) -> Snapshot:
    """The snapshot limited to ready nodes matching ``selector`` (and the pods on them)."""
    names = [n.name for n in snap.nodes.values()
             if (not ready_only or n.ready) and (selector is None or selector.matches(n.labels))]
    return replace(snap, nodes={n: snap.nodes[n] for n in names},
                   pods_by_node={n: snap.pods_by_node.get(n, []) for n in names})


class Descheduler:
    """Runs rounds on its own thread between :meth:`start` and :meth:`stop`; :meth:`run_once` runs one now."""

    def __init__(self, api_client: client.ApiClient, config: DeschedulerConfig, *,
                 is_leader: Callable[[], bool], dry_run: bool | None = None,
                 clock: Callable[[], float] = time.time, metrics_registry: CollectorRegistry | None = None,
                 list_snapshot_fn: Callable[[], Snapshot] | None = None) -> None:
        self.api_client = api_client
        self.config = config
        self.is_leader = is_leader
        self.dry_run = config.dry_run if dry_run is None else dry_run
        self._clock = clock
        # A private registry unless the caller exports one: two descheduler instances (tests) must not collide.
        self._metrics = EvictorMetrics(metrics_registry if metrics_registry is not None else CollectorRegistry())
        self._list = list_snapshot_fn or (lambda: list_snapshot(api_client, clock=clock))
        self.handle = Handle(api_client, logger=log, dry_run=self.dry_run, clock=clock,
                             interval_seconds=config.interval_seconds)
        self._profiles = [
            _Profile(p, [PLUGIN_FACTORIES[name](p.plugin_args.get(name), self.handle) for name in p.balance])
            for p in config.profiles]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.last_report: RoundReport | None = None

    def plugins(self) -> list[BalancePlugin]:
        return [plugin for profile in self._profiles for plugin in profile.plugins]

    # -------------------------------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="descheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 10.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_seconds)
            if thread.is_alive():
                log.warning("descheduler: the round in progress did not end in time",
                            extra={"timeout_seconds": timeout_seconds})
        self._thread = None

    def _loop(self) -> None:
        interval = self.config.interval_seconds
        next_start = time.monotonic()
        while not self._stop.is_set():
            report = self._guarded_round()
            if interval <= 0:
                if report is not None and not report.skipped.startswith("not the leader"):
                    return
                self._stop.wait(SINGLE_ROUND_RETRY_SECONDS)
                continue
            # Non-sliding: the next round starts one interval after this one started.
            next_start += interval
            self._stop.wait(max(0.0, next_start - time.monotonic()))
            if time.monotonic() > next_start + interval:
                next_start = time.monotonic()

    def _guarded_round(self) -> RoundReport | None:
        try:
            return self.run_once()
        except Exception:  # a bug in a round must not end the loop
            log.exception("descheduler: round failed")
            return None

    # ------------------------------------------------------------------------------------------ round

    def _priority_threshold(self, name: str) -> int:
        obj = call_json(client.SchedulingV1Api(self.api_client).read_priority_class, name)
        value = obj.get("value")
        if not isinstance(value, int):
            raise KubeApiError(0, "BadResponse", f"PriorityClass {name} has no integer value")
        return value

    def run_once(self) -> RoundReport:
        """One round now (when this replica leads); the report is also kept as :attr:`last_report`."""
        with self._lock:
            report = RoundReport(started=self._clock(), dry_run=self.dry_run)
            try:
                self._round(report)
            finally:
                report.finished = self._clock()
                self.last_report = report
                self._log_summary(report)
            return report

    def _round(self, report: RoundReport) -> None:
        if not self.is_leader():
            report.skipped = "not the leader"
            return
        try:
            snap = _restrict(self._list(), self.config.node_selector, ready_only=True)
        except KubeApiError as exc:
            report.skipped = f"listing the cluster failed: {exc}"
            report.errors.append(report.skipped)
            return
        report.nodes = len(snap.nodes)
        report.pods = sum(len(p) for p in snap.pods_by_node.values())
        if len(snap.nodes) <= 1:
            report.skipped = "the cluster has 0 or 1 ready nodes: eviction would only disrupt"
            return
        counts = EvictionCounts()
        for profile in self._profiles:
            if not profile.plugins:
                continue
            view = _restrict(snap, profile.config.node_selector, ready_only=False)
            args = profile.config.evictor_args
            try:
                threshold = (self._priority_threshold(args.priority_threshold_name)
                             if args.priority_threshold_name else None)
            except KubeApiError as exc:
                report.errors.append(f"profile {profile.config.name}: priorityThreshold.name "
                                     f"{args.priority_threshold_name}: {exc}")
                return
            limits = self.config.limits.tighter(Limits(args.max_per_node, args.max_per_namespace, args.max_total))
            evictor = Evictor(self.api_client, args, limits, dry_run=self.dry_run or args.dry_run, snap=view,
                              metrics=self._metrics, priority_threshold=threshold, counts=counts)
            try:
                for plugin in profile.plugins:
                    evictor.strategy = plugin.name
                    plugin.balance(view, evictor)
            except Exception as exc:
                log.exception("descheduler: plugin failed, the round ends",
                              extra={"profile": profile.config.name, "plugin": evictor.strategy})
                report.errors.append(f"{profile.config.name}/{evictor.strategy}: {type(exc).__name__}: {exc}")
                return
            finally:
                report.records.extend(evictor.records)

    @staticmethod
    def _log_summary(report: RoundReport) -> None:
        if report.skipped:
            # A standby replica skips every round: not worth a line each interval.
            level = logging.DEBUG if report.skipped == "not the leader" else logging.INFO
            log.log(level, "descheduler round skipped", extra={"reason": report.skipped})
            return
        by_result: dict[str, int] = {}
        for record in report.records:
            by_result[record.result] = by_result.get(record.result, 0) + 1
        # In dry-run, the evictions are the pods the round would have evicted.
        log.info("descheduler round done", extra={
            "dry_run": report.dry_run, "nodes": report.nodes, "pods": report.pods, "evictions": len(report.evicted),
            "results": by_result, "errors": len(report.errors),
            "seconds": round(report.finished - report.started, 3)})
