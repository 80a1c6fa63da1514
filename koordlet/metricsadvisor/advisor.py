"""The metrics advisor: runs the collectors on their intervals in one thread, one batch read per group."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from koordlet.component import Worker
from koordlet.metricsadvisor.framework import Collector, FileGroup, Options
from koordlet.streaklog import Streak

log = logging.getLogger(__name__)


class _Group:
    def __init__(self, interval: float) -> None:
        self.files = FileGroup(interval)
        self.collectors: list[Collector] = []
        self.next_due = 0.0


class MetricsAdvisor:
    """A daemon component; ``run_once`` is what the thread does each tick (tests call it directly)."""

    name = "metricsadvisor"

    def __init__(self, options: Options, collectors: Sequence[Collector],
                 monotonic: Callable[[], float] | None = None) -> None:
        import time

        self._options = options
        self._monotonic = monotonic or time.monotonic
        self._groups: dict[float, _Group] = {}
        for collector in collectors:
            if not collector.enabled(options):
                log.info("collector disabled", extra={"collector": collector.name})
                continue
            interval = collector.interval(options)
            group = self._groups.setdefault(interval, _Group(interval))
            group.collectors.append(collector)
        for group in self._groups.values():
            for collector in group.collectors:
                collector.setup(options, group.files)
        self._pods: object = None
        self._errors: dict[tuple[str, str], int] = {}
        self._streaks: dict[tuple[str, str], Streak] = {}
        """(collector, method) -> its failure streak."""
        self._worker = Worker("koordlet-metricsadvisor")
        self.ticks = 0

    @property
    def collectors(self) -> list[str]:
        return [c.name for g in self._groups.values() for c in g.collectors]

    def run_once(self, force: bool = False) -> float:
        """Collects every group that is due (all when ``force``); returns seconds until the next is due."""
        pods = self._options.informer.pods()
        if pods is not self._pods:
            self._pods = pods
            for group in self._groups.values():
                for collector in group.collectors:
                    self._guard(collector, collector.on_pods, pods)
        now_mono = self._monotonic()
        for group in self._groups.values():
            if not force and now_mono < group.next_due:
                continue
            # Schedule from the previous due time so ticks do not drift by the collection cost; after a stall
            # (or on the first tick) the next one is a full interval away: a read right after this one
            # would turn counters of 10 ms granularity (/proc/stat, usage_usec) into rates over ~0 s.
            due = group.next_due + group.files.interval_seconds
            group.next_due = due if due > now_mono else now_mono + group.files.interval_seconds
            batch = group.files.read()
            now = self._options.clock()
            for collector in group.collectors:
                self._guard(collector, collector.collect, batch, now)
        self.ticks += 1
        return max(0.0, min(g.next_due for g in self._groups.values()) - self._monotonic()) if self._groups else 1.0

    def _guard(self, collector: Collector, call: Callable[..., None], *args: Any) -> None:
        # One log line per streak of the same failure of a collector (and one when it works again), then a
        # count: a broken collector must neither stop the others nor flood the log every tick.
        name = getattr(call, "__name__", "call")
        streak = self._streaks.get((collector.name, name))
        if streak is None:
            streak = self._streaks[(collector.name, name)] = Streak(log, self._monotonic)
        try:
            call(*args)
        except Exception as exc:
            key = (collector.name, type(exc).__name__)
            self._errors[key] = self._errors.get(key, 0) + 1
            streak.fail(type(exc).__name__, "collector failed", level=logging.ERROR, exc_info=True,
                        extra={"collector": collector.name, "call": name})
        else:
            streak.ok("collector works again", extra={"collector": collector.name, "call": name})

    @property
    def errors(self) -> dict[tuple[str, str], int]:
        return dict(self._errors)

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self._worker.loop(self.run_once, on_failure)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stop(timeout_seconds)
        for group in self._groups.values():
            group.files.close()
