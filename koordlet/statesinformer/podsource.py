"""The node's pods from kubelet, kept fresh by a periodic sync and by pod lifecycle events.

Like Koordinator's ``statesinformer/impl/states_pods.go``: kubelet's ``/pods/`` is fetched every
``interval_seconds`` (``--kubelet-sync-interval``, 10 s) and as soon as the PLEG sees a pod directory
appear or vanish, at most 5 times a second.  A failed fetch keeps the last good list in force: the
agent must not forget its pods (and un-throttle BE work) because kubelet was briefly unreachable.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol

from koordlet.apis.pod import Pod
from koordlet.component import alive
from koordlet.statesinformer.kubelet import KubeletError
from koordlet.statesinformer.pleg import Pleg

log = logging.getLogger(__name__)

DEFAULT_MIN_TRIGGER_INTERVAL_SECONDS: Final = 0.2
"""Event-driven syncs start at least this far apart (Koordinator's PLEG rate limit, 5/s)."""


class PodLister(Protocol):
    """Where pods come from: :class:`~koordlet.statesinformer.kubelet.KubeletClient` or a test fake."""

    def get_pods(self) -> list[Pod]:
        """The current pods; raises on failure (:class:`KubeletError` for the expected ones)."""
        ...

    def abort(self) -> None:
        """Makes a ``get_pods`` in flight in another thread fail promptly."""
        ...


PodsHandler = Callable[[list[Pod]], None]


def _pod_order(pod: Pod) -> tuple[str, str, str]:
    return pod.namespace, pod.name, pod.uid


class KubeletPodSource:
    """Keeps the last good pod list from ``client`` and reports changes to ``on_pods``.

    ``on_pods(pods)`` runs in the source's thread after the first successful sync and after each sync
    whose parsed pods differ from the previous list (kubelet's own order does not count).  Counters for
    metrics and ``koordctl``: :attr:`sync_ok`, :attr:`sync_errors`, :attr:`last_error`,
    :attr:`failure_streak`, :attr:`last_success_at`.  ``clock`` decides when syncs are due (the
    thread's waits are real time, bounded by what the clock says is left); ``pleg_paths`` are the
    directories a :class:`~koordlet.statesinformer.pleg.Pleg` watches to call :meth:`trigger`.
    """

    def __init__(
        self,
        client: PodLister,
        interval_seconds: float,
        on_pods: PodsHandler,
        clock: Callable[[], float] = time.monotonic,
        *,
        pleg_paths: Sequence[str | Path] = (),
        min_trigger_interval_seconds: float = DEFAULT_MIN_TRIGGER_INTERVAL_SECONDS,
        pleg_factory: Callable[[Sequence[str | Path], Callable[[], None]], Pleg] = Pleg,
    ) -> None:
        if not math.isfinite(interval_seconds) or interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        if not math.isfinite(min_trigger_interval_seconds) or min_trigger_interval_seconds < 0:
            raise ValueError(f"min_trigger_interval_seconds must be >= 0, got {min_trigger_interval_seconds}")
        self._client = client
        self._interval = interval_seconds
        self._on_pods = on_pods
        self._clock = clock
        self._min_trigger_interval = min_trigger_interval_seconds
        self._pleg_paths = tuple(pleg_paths)
        self._pleg_factory = pleg_factory
        self.pleg: Pleg | None = None
        """The PLEG feeding :meth:`trigger`, once started (None without paths or when inotify failed)."""

        self._cond = threading.Condition()  # guards the schedule and wakes the thread and waiters
        self._sync_lock = threading.Lock()  # one sync at a time (the thread, or a caller of sync_once)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pending_trigger = False
        self._last_attempt: float | None = None
        self._pods: list[Pod] = []
        self._delivered = False
        self._streak_began = 0.0

        self.sync_ok = 0
        """Successful syncs."""
        self.sync_errors = 0
        """Failed syncs."""
        self.last_error: str | None = None
        """Reason of the most recent failure (kept after recovery; see :attr:`failure_streak`)."""
        self.failure_streak = 0
        """Consecutive failed syncs up to now (0 while healthy)."""
        self.last_success_at: float | None = None
        """Clock time the last successful sync started."""

    @property
    def name(self) -> str:
        return "kubelet-pods"

    # ---------------------------------------------------------------------------------- readers

    def pods(self) -> list[Pod]:
        """The last good pod list, sorted by namespace and name; empty before the first success."""
        return list(self._pods)

    def wait_for_attempts(self, count: int, timeout_seconds: float) -> bool:
        """Blocks until ``count`` syncs (good or failed) have finished; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.sync_ok + self.sync_errors >= count, timeout_seconds)

    def wait_synced(self, timeout_seconds: float) -> bool:
        """Blocks until the first successful sync (start-up ordering); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.sync_ok > 0, timeout_seconds)

    # ---------------------------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        return alive(self._thread)

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """Starts the PLEG (if paths were given) and the sync thread, whose first sync is immediate.

        ``on_failure`` is called if the thread dies of an unexpected error.  A PLEG that cannot start
        (no inotify instance left) is logged and the source runs on the periodic sync alone.
        """
        if self._thread is not None:
            raise RuntimeError("KubeletPodSource already started")
        if self._pleg_paths:
            pleg = self._pleg_factory(self._pleg_paths, self.trigger)
            try:
                pleg.start()
            except Exception as exc:
                log.warning(
                    "pod lifecycle events unavailable, relying on the periodic sync",
                    extra={"reason": str(exc), "interval_seconds": self._interval},
                )
            else:
                self.pleg = pleg
        self._thread = threading.Thread(target=self._run, args=(on_failure,), name="koordlet-kubelet-pods",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Stops the PLEG and the thread within ``timeout_seconds``, aborting a request in flight."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.pleg is not None:
            self.pleg.stop(max(0.0, deadline - time.monotonic()))
        thread = self._thread
        if thread is None:
            return
        # Abort more than once: a request may start between the stop flag and the first abort.
        while thread.is_alive():
            self._client.abort()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("kubelet pod sync thread did not stop in time", extra={"timeout_seconds": timeout_seconds})
                return
            thread.join(min(0.05, remaining))

    def trigger(self) -> None:
        """Asks for a sync now; within ``min_trigger_interval_seconds`` of the last one it is deferred,
        and triggers that arrive meanwhile are merged into that one sync (never lost)."""
        with self._cond:
            self._pending_trigger = True
            self._cond.notify_all()

    # ---------------------------------------------------------------------------------- sync

    def sync_once(self) -> bool:
        """Fetches the pods now, ignoring the schedule; True on success.  Never raises."""
        with self._sync_lock:
            started = self._clock()
            with self._cond:
                self._last_attempt = started
            try:
                pods = self._client.get_pods()
            except Exception as exc:
                if self._stopping:
                    return False  # most likely our own abort; nothing is waiting for this list anymore
                self._record_failure(exc, started)
                return False
            self._record_success(pods, started)
            return True

    def _record_success(self, pods: list[Pod], started: float) -> None:
        pods = sorted(pods, key=_pod_order)
        # Frozen dataclasses compare field by field: only what koordlet parses counts as a change,
        # not kubelet's status churn (probe times, resourceVersion).
        changed = not self._delivered or pods != self._pods
        self._pods = pods
        if self.failure_streak:
            log.info(
                "kubelet pod sync recovered",
                extra={"failed_attempts": self.failure_streak, "down_seconds": round(started - self._streak_began, 3),
                       "pods": len(pods)},
            )
        elif not self._delivered:
            log.info("kubelet pod list received", extra={"pods": len(pods)})
        if changed and not self._stopping:
            self._delivered = True
            try:
                self._on_pods(list(pods))
            except Exception:
                # The list itself was good; a consumer's bug is logged, not retried every tick.
                log.exception("pod list consumer failed")
        # Counted last: whoever waits for an attempt sees its delivery done as well.
        with self._cond:
            self.sync_ok += 1
            self.failure_streak = 0
            self.last_success_at = started
            self._cond.notify_all()

    def _record_failure(self, exc: Exception, started: float) -> None:
        known = isinstance(exc, KubeletError)
        reason = exc.reason if isinstance(exc, KubeletError) else f"{type(exc).__name__}: {exc}"
        outcome = exc.outcome if isinstance(exc, KubeletError) else "internal"
        if self.failure_streak == 0:
            self._streak_began = started
            # One line per failure streak, whatever its length: the metric counts the attempts.
            log.warning(
                "kubelet pod sync failing, keeping the last good pod list",
                extra={"reason": reason, "outcome": outcome, "pods_kept": len(self._pods)},
                exc_info=None if known else exc,
            )
        else:
            log.debug("kubelet pod sync still failing", extra={"reason": reason, "outcome": outcome})
        with self._cond:
            self.sync_errors += 1
            self.failure_streak += 1
            self.last_error = reason
            self._cond.notify_all()

    # ---------------------------------------------------------------------------------- thread

    def _due(self) -> float:
        """When the next sync may start (the clock's time); called with ``_cond`` held."""
        if self._last_attempt is None:
            return -math.inf
        due = self._last_attempt + self._interval
        if self._pending_trigger:
            due = min(due, self._last_attempt + self._min_trigger_interval)
        return due

    def _run(self, on_failure: Callable[[BaseException], None] | None) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stopping:
                        wait = self._due() - self._clock()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    if self._stopping:
                        return
                    self._pending_trigger = False
                self.sync_once()
        except Exception as exc:
            log.exception("kubelet pod sync thread died")
            if on_failure is not None:
                on_failure(exc)
