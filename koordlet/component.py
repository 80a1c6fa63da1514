"""The shape of a long-running part of a daemon (:class:`Component`) and the one background thread most of
them keep (:class:`Worker`).

Components live in every subsystem, and the daemon that runs them (:mod:`koordlet.daemon`) sits above all of
them, so both the shape and the helper live at the bottom: a component implements the shape without
importing the daemon, and the daemon asks a component (``running``) instead of reaching into it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class Component(Protocol):
    """A long-running part of the daemon."""

    @property
    def name(self) -> str:
        """Short stable name used in logs (``metriccache``, ``qosmanager``...)."""
        ...

    @property
    def running(self) -> bool:
        """Whether its background work is alive (the debug API's component status)."""
        ...

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        """Start background work and return once it is running.

        If a root task of the component dies later, the component calls ``on_failure`` with the error
        (from any thread); the daemon then stops everything.  Raising here aborts the start-up.
        """
        ...

    def stop(self, timeout_seconds: float) -> None:
        """Stop and release everything, waiting at most ``timeout_seconds`` (0: do not wait)."""
        ...


def alive(thread: threading.Thread | None) -> bool:
    """Whether ``thread`` was started and has not ended (a component's ``running`` over a thread of its own)."""
    return thread is not None and thread.is_alive()


class Worker:
    """One daemon thread of a component: asked to stop through :attr:`stopping`, joined within the stop
    budget, and started again once it ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        """The thread's name (``ps -L``, tracebacks)."""
        self.stopping = threading.Event()
        """Set by :meth:`stop`; the thread waits on it between rounds so a stop wakes it at once."""
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the thread was started and has not ended."""
        return alive(self._thread)

    def start(self, target: Callable[[], None]) -> None:
        """Runs ``target`` in the thread; ``target`` returns once :attr:`stopping` is set.  Raises RuntimeError
        while a thread started earlier has not ended: two threads would share one component's state."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self.stopping.clear()
        self._thread = threading.Thread(target=target, name=self.name, daemon=True)
        self._thread.start()

    def loop(self, step: Callable[[], float], on_failure: Callable[[BaseException], None], *,
             first_wait: float = 0.0) -> None:
        """Runs ``step`` in the thread, then waits the seconds it returns, until stopped (after ``first_wait``
        seconds, 0: at once).  An exception out of ``step`` ends the loop and goes to ``on_failure``: the
        loop itself broke, and the daemon must know."""

        def run() -> None:
            try:
                if self.stopping.wait(first_wait):
                    return
                while not self.stopping.is_set():
                    self.stopping.wait(step())
            except BaseException as exc:
                on_failure(exc)

        self.start(run)

    def stop(self, timeout_seconds: float) -> bool:
        """Asks the thread to stop and waits at most ``timeout_seconds`` for it to end; False when it is still
        running then (it will end at its next look at :attr:`stopping`)."""
        self.stopping.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_seconds)
        if thread.is_alive():
            return False
        self._thread = None
        return True
