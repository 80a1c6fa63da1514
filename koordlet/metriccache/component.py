"""The metric cache as a daemon component: flushes new samples to disk and prunes history on a timer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from koordlet.metriccache.cache import MetricCache

log = logging.getLogger(__name__)


class MetricCacheComponent:
    name = "metriccache"

    def __init__(self, cache: MetricCache, flush_interval_seconds: float, prune_every: int = 10) -> None:
        self.cache = cache
        self._interval = flush_interval_seconds
        self._prune_every = prune_every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flush_errors = 0

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
        def loop() -> None:
            rounds = 0
            while not self._stop.wait(self._interval):
                rounds += 1
                self.flush_once(prune=rounds % self._prune_every == 0)

        self._thread = threading.Thread(target=loop, name="koordlet-metriccache", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)
        self.flush_once()
        self.cache.disk.close()
