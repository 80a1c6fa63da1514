"""Per-object write backoff: a write refused for good (a 4xx other than 401/408/409/429) backs off for that
object only, so one bad object never holds up the writes of the others."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from koordlet.companion.kube.client import KubeApiError
from koordlet.errors import ConfigError

log = logging.getLogger(__name__)


class ApplyResult(Enum):
    """What a writer did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    DEFERRED = "deferred"
    """Not written: kube-apiserver refused this object for good a moment ago and it is backing off
    (:class:`WriteBackoff`); the write is tried again once the object's backoff ends."""


WRITE_BACKOFF_INITIAL_SECONDS = 2.0
"""First pause after an object's write was refused for good; doubled at each further refusal."""
WRITE_BACKOFF_MAX_SECONDS = 300.0
"""Cap of that pause: an object refused for good (a schema the CRD rejects, an admission policy, RBAC) is
tried again at most every five minutes, so a fix on the cluster side is picked up without a restart."""
WRITE_BACKOFF_MAX_OBJECTS = 65536
"""Backoff streaks kept at most; past that the oldest is forgotten (that object is simply tried again)."""


@dataclass
class _Streak:
    refusals: int
    until: float
    first_error: str


class WriteBackoff:
    """Per-object exponential backoff after permanent refusals (:attr:`KubeApiError.permanent`).

    The companion has one writer thread for every node: retrying an object that kube-apiserver refuses for good
    on every turn would hold up all the others.  Instead the refused object alone waits (``initial_seconds``,
    doubled per refusal, capped at ``max_seconds``) while the others are written; its first refusal is logged
    as a warning, the rest of the streak at debug, and the first success after it at info.  Temporary errors
    (no answer, 408, 409, 429, 5xx) and 401 (the credential, re-read from its file) are not counted: they stay
    with the caller's retry.  ``on_retry(key)`` (optional) is called from a timer thread when an object's
    pause ends, so the caller can queue it again even if nothing else changes it.
    """

    def __init__(
        self,
        what: str,
        *,
        initial_seconds: float = WRITE_BACKOFF_INITIAL_SECONDS,
        max_seconds: float = WRITE_BACKOFF_MAX_SECONDS,
        max_objects: int = WRITE_BACKOFF_MAX_OBJECTS,
        on_retry: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < initial_seconds <= max_seconds:
            raise ConfigError(f"write backoff: need 0 < initial_seconds <= max_seconds, got {initial_seconds} / "
                              f"{max_seconds}")
        self.what = what
        self.initial = initial_seconds
        self.max = max_seconds
        self._max_objects = max(1, max_objects)
        self._on_retry = on_retry
        self._clock = clock
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._closed = False

    def retry_in(self, key: str) -> float:
        """Seconds until ``key`` may be written again (0: now)."""
        with self._lock:
            streak = self._streaks.get(key)
            return 0.0 if streak is None else max(0.0, streak.until - self._clock())

    def backing_off(self) -> dict[str, float]:
        """Every object in a streak and the seconds until its next try (for logs, koordctl and tests)."""
        now = self._clock()
        with self._lock:
            return {key: max(0.0, streak.until - now) for key, streak in self._streaks.items()}

    def failed(self, key: str, err: KubeApiError) -> float:
        """Records a permanent refusal of ``key``; returns the pause before its next try."""
        with self._lock:
            streak = self._streaks.pop(key, None)  # re-inserted last: the dict stays in age order
            refusals = 1 if streak is None else streak.refusals + 1
            delay = min(self.max, self.initial * (1 << min(refusals - 1, 30)))
            self._streaks[key] = _Streak(refusals, self._clock() + delay,
                                         str(err) if streak is None else streak.first_error)
            while len(self._streaks) > self._max_objects:
                oldest = next(iter(self._streaks))
                del self._streaks[oldest]
                self._cancel(oldest)
            self._schedule(key, delay)
        if refusals == 1:
            # Later refusals of the same streak go to debug: a refused object is retried for as long as it
            # exists, and one warning per streak is enough to act on.
            log.warning("write refused, backing off this object only",
                        extra={"kind": self.what, "object": key, "status": err.status, "reason": err.reason,
                               "error": str(err), "retry_seconds": round(delay), "max_seconds": self.max})
        else:
            log.debug("write refused again", extra={"kind": self.what, "object": key, "refusals": refusals,
                                                    "retry_seconds": round(delay), "error": str(err)})
        return delay

    def succeeded(self, key: str) -> None:
        """``key`` was written (or found up to date): its streak, if any, ends."""
        with self._lock:
            streak = self._streaks.pop(key, None)
            self._cancel(key)
        if streak is not None:
            log.info("write accepted again", extra={"kind": self.what, "object": key, "refusals": streak.refusals,
                                                    "first_error": streak.first_error})

    def forget(self, key: str) -> None:
        """Drops ``key``'s streak without a try (its node is gone)."""
        with self._lock:
            self._streaks.pop(key, None)
            self._cancel(key)

    def close(self) -> None:
        """Cancels the pending ``on_retry`` timers."""
        with self._lock:
            self._closed = True
            for key in list(self._timers):
                self._cancel(key)

    def guard(self, key: str, write: Callable[[], ApplyResult]) -> ApplyResult:
        """Runs ``write`` unless ``key`` is backing off: :attr:`ApplyResult.DEFERRED` while it is, and when
        ``write`` is refused for good; other errors propagate."""
        if self.retry_in(key) > 0:
            return ApplyResult.DEFERRED
        try:
            result = write()
        except KubeApiError as err:
            if not err.permanent:
                raise
            self.failed(key, err)
            return ApplyResult.DEFERRED
        self.succeeded(key)
        return result

    # The caller holds the lock.

    def _schedule(self, key: str, delay: float) -> None:
        self._cancel(key)
        if self._on_retry is None or self._closed:
            return
        timer = threading.Timer(delay, self._fire, args=(key,))
        timer.daemon = True
        timer.name = f"write-backoff-{key}"[:64]
        self._timers[key] = timer
        timer.start()

    def _cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, key: str) -> None:
        with self._lock:
            if self._timers.get(key) is not threading.current_thread():
                return  # cancelled or rescheduled meanwhile
            del self._timers[key]
        if self._on_retry is None:
            return
        try:
            self._on_retry(key)
        except Exception:  # a timer thread must not die with a traceback on stderr
            log.exception("write backoff retry callback failed", extra={"object": key})
