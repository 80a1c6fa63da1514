"""The NRI plugin's job queues: hooks and cgroup writes run off the event loop, each kind on a thread of
its own, so a slow cgroup write never holds up the next request's answer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

MAX_QUEUED_JOBS = 256
"""Jobs a queue holds at most; beyond that a request is answered per the failure policy (hooks) or its
writes are left to the reconciler, instead of queueing without bound behind a stuck write."""


Job = Callable[[], Any]


class JobQueue:
    """One daemon thread running jobs in submission order.  Daemon: a write stuck in the kernel must not keep
    the process from exiting.  A job cancelled before it starts (its request gave up) is skipped."""

    def __init__(self, name: str, limit: int = MAX_QUEUED_JOBS) -> None:
        self.name = name
        self._limit = limit
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Job] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queued = 0

    def submit(self, job: Job) -> concurrent.futures.Future[Any]:
        """Queues ``job``; raises :class:`queue.Full` when :data:`MAX_QUEUED_JOBS` wait already."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._queued >= self._limit:
                raise queue.Full(f"{self.name}: {self._queued} jobs queued")
            self._queued += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put((future, job))  # under the lock: never behind a stop()'s end marker
        return future

    @property
    def queued(self) -> int:
        with self._lock:
            return self._queued

    def stop(self) -> None:
        """The thread ends once the jobs queued before are done (at once when idle)."""
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, job = item
            try:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = job()
                except BaseException as exc:  # handed to the waiting request, never lost
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            finally:
                with self._lock:
                    self._queued -= 1


def awaitable(future: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
    """An asyncio future settled from ``future``; unlike ``asyncio.wrap_future`` it stays quiet when the job
    ends after the loop closed (a write that outlived the plugin)."""
    waiter: asyncio.Future[Any] = loop.create_future()

    def settle(done: concurrent.futures.Future[Any]) -> None:
        if waiter.done():
            return
        if done.cancelled():
            waiter.cancel()
        elif (exc := done.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(done.result())

    def on_done(done: concurrent.futures.Future[Any]) -> None:
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed in between
                loop.call_soon_threadsafe(settle, done)

    future.add_done_callback(on_done)
    return waiter
