"""The metric cache as a daemon component: flushes new samples to disk and prunes history on a timer."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from koordlet.component import Worker
from koordlet.metriccache.cache import MetricCache

log = logging.getLogger(__name__)


class MetricCacheComponent:
    name = "metriccache"

    def __init__(self, cache: MetricCache, flush_interval_seconds: float, prune_every: int = 10) -> None:
        self.cache = cache
        self._interval = flush_interval_seconds
        self._prune_every = prune_every
        self._worker = Worker("koordlet-metriccache")
        self.flush_errors = 0

    @property
    def running(self) -> bool:
        return self._worker.running

    def flush_once(self, prune: bool = False) -> None:
        try:
            self.cache.flush()
            if prune:
                self.cache.prune()
        except Exception:
            # Disk trouble must not stop collection: samples stay in memory for the next try.
            self.flush_errors += 1
            if self.flush_errors == 1 or self.flush_errors % 100 == 0:
                log.exception("metric store flush failed", extra={"failures": self.flush_errors})

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        rounds = itertools.count(1)

        def flush() -> float:
            self.flush_once(prune=next(rounds) % self._prune_every == 0)
            return self._interval

        self._worker.loop(flush, on_failure, first_wait=self._interval)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stop(timeout_seconds)
        self.flush_once()
        self.cache.disk.close()
