"""The daemon's lifecycle: ordered start, one stop event, bounded ordered stop.

:class:`Daemon` owns no work itself.  It starts its components in dependency order (Koordinator's is
executor -> metriccache -> statesinformer -> metricsadvisor -> prediction -> qosmanager -> runtimehooks),
waits until asked to stop (a signal, a caller, or a component whose root task died), then stops them in
reverse order within one time budget that stays below systemd's ``TimeoutStopSec`` and Kubernetes'
default ``terminationGracePeriodSeconds`` (30 s), so the process exits before it is killed.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Final

from koordlet.component import Component
from koordlet.errors import KoordletError

DEFAULT_SHUTDOWN_TIMEOUT_SECONDS: Final = 20.0
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

log = logging.getLogger("koordlet.daemon")


class ComponentFailed(KoordletError, RuntimeError):
    """A component failed to start or its root task died; the daemon stopped everything."""


class Daemon:
    """Runs components from :meth:`run` until stopped; see the module docstring."""

    def __init__(
        self,
        components: Sequence[Component],
        *,
        shutdown_timeout_seconds: float = DEFAULT_SHUTDOWN_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [c.name for c in components]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate component names: {', '.join(duplicates)}")
        if shutdown_timeout_seconds < 0:
            raise ValueError(f"shutdown_timeout_seconds must be >= 0, got {shutdown_timeout_seconds}")
        self._components = tuple(components)
        self._shutdown_timeout = shutdown_timeout_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._failure: tuple[str, BaseException] | None = None

    @property
    def stop_reason(self) -> str | None:
        """Why the daemon stopped (``signal SIGTERM``, ``component X failed``...), once it has."""
        return self._stop_reason

    def request_stop(self, reason: str, stop_event: threading.Event) -> None:
        """Ask :meth:`run` to stop; the first reason given is the one reported."""
        with self._lock:
            first = self._stop_reason is None
            if first:
                self._stop_reason = reason
        if first:
            log.info("stop requested", extra={"reason": reason})
        else:
            log.info("already stopping", extra={"reason": reason, "stopping_because": self._stop_reason})
        stop_event.set()

    def run(self, stop_event: threading.Event) -> None:
        """Start every component, block until ``stop_event`` is set, then stop them all.

        In the main thread, SIGTERM and SIGINT set ``stop_event`` for the duration of the call (the
        previous handlers are restored afterwards).  Raises :class:`ComponentFailed` if a component
        failed to start or died while running, after everything started has been stopped.
        """
        restore = self._install_signal_handlers(stop_event)
        started: list[Component] = []
        try:
            for component in self._components:
                if stop_event.is_set():
                    break
                log.debug("starting component", extra={"component": component.name})
                try:
                    component.start(self._failure_callback(component.name, stop_event))
                except Exception as exc:
                    self._record_failure(component.name, exc)
                    self.request_stop(f"component {component.name} failed to start", stop_event)
                    break
                started.append(component)
            else:
                # What start-up built lives as long as the process: keep it out of the cyclic collector's
                # scans, which otherwise walk every ring and pod object again and again.
                gc.freeze()
                log.info("koordlet started", extra={"components": [c.name for c in started]})
            stop_event.wait()
        finally:
            self._stop_all(started)
            restore()
        if self._failure is not None:
            name, error = self._failure
            raise ComponentFailed(f"component {name} failed: {error}") from error

    def _failure_callback(self, name: str, stop_event: threading.Event) -> Callable[[BaseException], None]:
        def on_failure(exc: BaseException) -> None:
            log.error("component failed", extra={"component": name, "error": repr(exc)})
            self._record_failure(name, exc)
            self.request_stop(f"component {name} failed", stop_event)

        return on_failure

    def _record_failure(self, name: str, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = (name, exc)

    def _stop_all(self, started: Sequence[Component]) -> None:
        deadline = self._clock() + self._shutdown_timeout
        for component in reversed(started):
            remaining = max(0.0, deadline - self._clock())
            if remaining == 0.0:
                log.warning("shutdown budget spent, not waiting", extra={"component": component.name})
            try:
                component.stop(remaining)
            except Exception:
                # One component failing to stop must not keep the others running.
                log.exception("component failed to stop", extra={"component": component.name})
            else:
                log.debug("stopped component", extra={"component": component.name})

    def _install_signal_handlers(self, stop_event: threading.Event) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            # Python delivers signals only to the main thread; an embedding caller owns them there.
            return lambda: None

        def handler(signum: int, _frame: FrameType | None) -> None:
            # Setting the event from here could deadlock: the handler runs in the main thread between
            # bytecodes, possibly while that thread holds the event's internal lock (threading.Event
            # uses a non-reentrant Lock).  A short-lived thread takes the lock once it is free.
            reason = f"signal {signal.Signals(signum).name}"
            threading.Thread(
                target=self.request_stop, args=(reason, stop_event), name="koordlet-signal", daemon=True
            ).start()

        previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}

        def restore() -> None:
            for sig, old in previous.items():
                # None: the old handler was not installed from Python; the default is the best guess.
                signal.signal(sig, old if old is not None else signal.SIG_DFL)

        return restore
