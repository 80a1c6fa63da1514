"""Cycles per instruction per container (Koordinator CPICollector), from hardware perf counters on each
container's unified-hierarchy cgroup, counted for a time window every interval.

Guests without a PMU refuse hardware events (ENOENT): the collector says so once and stays quiet.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from koordlet import native
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.metriccache import labels_of, names
from koordlet.metricsadvisor.framework import Collector, CollectorDeps, FileGroup, Options
from koordlet.plugins import Plugin
from koordlet.statesinformer.framework import PodMeta

NAME = "cpi"
log = logging.getLogger(__name__)
EVENTS = (native.PerfEvent.CPU_CYCLES, native.PerfEvent.INSTRUCTIONS)


class CPICollector:
    name = NAME

    def __init__(self) -> None:
        self._containers: dict[tuple[str, str], str] = {}
        self._groups: dict[tuple[str, str], Any] = {}
        self._started: float | None = None
        self._next_start = 0.0
        self._unsupported: str | None = None

    def enabled(self, options: Options) -> bool:
        return gates.enabled(options.gates, gates.CPI_COLLECTOR)

    def interval(self, options: Options) -> float:
        # Ticks at the counting window so a window ends on time; a new one starts every CPI interval.
        return min(options.config.cpi_time_window_seconds, options.config.cpi_interval_seconds)

    def setup(self, options: Options, files: FileGroup) -> None:
        self._options = options
        self._cpus = list(options.informer.node().online_cpus)

    def on_pods(self, pods: Sequence[PodMeta]) -> None:
        self._containers = {
            (meta.uid, c.container_id): c.cgroup_dir
            for meta in pods for c in meta.containers if c.cgroup_dir and c.container_id
        }
        for key in [k for k in self._groups if k not in self._containers]:
            self._groups.pop(key).close()

    def _check_support(self) -> bool:
        if self._unsupported is not None:
            return False
        layout = self._options.layout
        try:
            with self._options.perf.PerfGroup.open_cgroup(layout.unified_dir(), self._cpus[:1], EVENTS) as group:
                refused = group.event_errors
        except (KoordletError, OSError) as exc:
            refused = {EVENTS[0]: getattr(exc, "errno", 0)}
            reason = str(exc)
        else:
            reason = ", ".join(f"{e.name}: errno {err}" for e, err in refused.items())
        if refused:
            self._unsupported = reason
            log.warning("CPI collection unsupported on this host, disabled", extra={"reason": reason})
            return False
        return True

    def collect(self, batch: native.BatchResult, now: float) -> None:
        if self._started is None:
            if now >= self._next_start and self._containers and self._check_support():
                self._start(now)
            return
        if now - self._started >= self._options.config.cpi_time_window_seconds:
            self._finish(now)

    def _start(self, now: float) -> None:
        layout = self._options.layout
        for key, rel_dir in self._containers.items():
            try:
                group = self._options.perf.PerfGroup.open_cgroup(layout.unified_dir(rel_dir), self._cpus, EVENTS)
            except (KoordletError, OSError):
                continue  # the container went away meanwhile
            if group.event_errors:
                # The support probe counts on one CPU; this group spans every online CPU, where an event can
                # still be refused (hybrid cores): its reading would have no value for it, so no CPI.
                group.close()
                continue
            try:
                group.enable()
            except (KoordletError, OSError):
                group.close()
                continue
            self._groups[key] = group
        self._started = now

    def _finish(self, now: float) -> None:
        samples = []
        try:
            for (uid, cid), group in self._groups.items():
                try:
                    reading = group.read()
                except (KoordletError, OSError):
                    continue
                finally:
                    group.close()
                instructions = reading.scaled(native.PerfEvent.INSTRUCTIONS)
                if instructions > 0:
                    cpi = reading.scaled(native.PerfEvent.CPU_CYCLES) / instructions
                    samples.append((names.CONTAINER_CPI, labels_of(pod=uid, container=cid), now, cpi))
        finally:
            # Whatever a read raised, the window is over: a half-finished one must not make every later
            # tick re-read closed groups and fail again.
            for group in self._groups.values():
                group.close()
            self._groups.clear()
            assert self._started is not None
            self._next_start = self._started + self._options.config.cpi_interval_seconds
            self._started = None
        self._options.cache.append_many(samples)

    @property
    def unsupported_reason(self) -> str | None:
        return self._unsupported


def new(deps: CollectorDeps) -> CPICollector:
    return CPICollector()


PLUGIN: Plugin[CollectorDeps, Collector] = Plugin(NAME, new)
