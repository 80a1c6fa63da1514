"""The koordlet NRI plugin (Koordinator ``runtimehooks/nri/server.go``): registers with the runtime over its
NRI socket and answers its events with the hook framework.

Life of a connection:

1. dial the socket (6 s, longer than the runtime's 5 s registration timeout);
2. call ``Runtime/RegisterPlugin`` (name ``koordlet_nri``, index ``00``) on conn 2 - once per connection;
3. the runtime calls ``Configure``; the answer subscribes to the events of the stages that have hooks
   (never 0, which means "everything" to NRI, and never a bit above NRI v0.6.1's 0x7ff);
4. ``Synchronize`` (maybe chunked on newer runtimes: ``more`` is echoed): nothing to change, the
   reconciler converges existing containers;
5. events until EOF: ``CreateContainer`` -> ``ContainerAdjustment``, ``UpdateContainer`` ->
   ``ContainerUpdate``; pod events (``StateChange``) run pod-stage hooks and write through the executor;
   container start/stop events run their hooks for their side effects.

Cgroup writes never run on the event loop, nor do hooks that may be slow: a cgroup v1
``memory.limit_in_bytes`` write can take seconds while the kernel reclaims, a hook may read cgroup or resctrl
files, and containerd gives a plugin 2 s per request (``plugin_request_timeout``) before failing the container.
Each event's hooks run on one worker thread (in arrival order), its writes on another; the answer goes out once
both are done or at :data:`ANSWER_DEADLINE`, whichever is first.  The exception is the common fast case, where
handing the hooks to a thread and back costs more than they do (two thread wake-ups, each a scheduling delay on
a busy node): a method's hooks run inline on the loop when the hooks thread is idle (so arrival order holds)
and the method's last :data:`INLINE_AFTER` runs each took at most :data:`INLINE_BUDGET`.  One run over the
budget, wherever it ran, sends the method back to the thread until it has been fast that many times again; an
inline run that overran the answer deadline is answered as one that missed it on the thread.  Writes still
running at the deadline finish in the background (the answer never depends on them; the reconciler converges
whatever they miss).  Hooks not done by the
deadline, a request that does not decode, an answer that does not convert, encode or pass the range
checks (:func:`convert.resource_problems`, the proxy's ranges): all follow the failure policy - ``Fail``
fails the request, ``Ignore`` logs and answers "no adjustment" so the container is created as asked.

On EOF or a broken connection the old connection is closed completely before the next dial, so the
runtime never sees two registrations of this plugin (Koordinator #2334); while nobody listens on the socket
(missing, or refused: the runtime restarting) it is dialled every second; a runtime that accepts and then drops
or refuses the plugin is dialled again after 1 s, doubling to 30 s, reset once a connection has been
configured.  :meth:`NriPlugin.stop` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from google.protobuf.message import DecodeError

from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import FailurePolicy, HookRequest, HookRunner, Stage, StageResult
from koordlet.runtimehooks.nri import convert
from koordlet.runtimehooks.nri.jobs import Job, JobQueue, awaitable
from koordlet.runtimehooks.nri.ttrpc import (
    DEADLINE_EXCEEDED,
    INTERNAL,
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    MuxSession,
    TtrpcError,
)
from koordlet.system.kubepaths import cgroup_parent_dir

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_NAME = "koordlet_nri"
PLUGIN_IDX = "00"
DIAL_TIMEOUT = 6.0
REGISTER_TIMEOUT = 5.0
BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
EVENT_MASK_MAX = 0x7FF  # NRI v0.6.1 (containerd 1.7) rejects a plugin subscribing to a later event
ANSWER_DEADLINE = 1.5
"""Seconds from a request's arrival to its answer at the latest: below containerd's 2 s
``plugin_request_timeout``, with room for the answer to travel."""
INLINE_BUDGET = 0.01
"""Seconds a method's hooks may take per run (wall clock: a hook blocked in the kernel counts) and still be run
inline on the event loop next time, under 1 % of the answer deadline.  Hooks take well under a millisecond; the
headroom is for a run preempted on a busy node, which should not send the method back to the thread."""
INLINE_AFTER = 8
"""Consecutive runs within :data:`INLINE_BUDGET` before a method's hooks run inline (none at first: a method
starts on the hooks thread)."""
E = api_pb2.Event
STAGE_EVENTS: dict[Stage, int] = {
    Stage.PRE_RUN_POD_SANDBOX: E.RUN_POD_SANDBOX,
    Stage.POST_STOP_POD_SANDBOX: E.STOP_POD_SANDBOX,
    Stage.PRE_REMOVE_POD_SANDBOX: E.REMOVE_POD_SANDBOX,
    Stage.PRE_CREATE_CONTAINER: E.CREATE_CONTAINER,
    Stage.PRE_START_CONTAINER: E.START_CONTAINER,
    Stage.POST_START_CONTAINER: E.POST_START_CONTAINER,
    Stage.PRE_UPDATE_CONTAINER_RESOURCES: E.UPDATE_CONTAINER,
    Stage.POST_STOP_CONTAINER: E.STOP_CONTAINER,
}
EVENT_STAGES = {event: stage for stage, event in STAGE_EVENTS.items()}
POD_EVENTS = frozenset({E.RUN_POD_SANDBOX, E.STOP_POD_SANDBOX, E.REMOVE_POD_SANDBOX})


def event_mask(runner: HookRunner) -> int:
    """The events of the stages that have hooks; RunPodSandbox alone when none has (0 would mean all)."""
    mask = 0
    for stage, event in STAGE_EVENTS.items():
        if runner.hooks(stage):
            mask |= 1 << (event - 1)
    return mask or 1 << (E.RUN_POD_SANDBOX - 1)


@dataclass
class NriStats:
    """Counters for tests, metrics and ``koordctl``."""

    dials: int = 0
    """Connections attempted to the runtime's socket."""
    registrations: int = 0
    """``RegisterPlugin`` calls the runtime accepted."""
    configured: int = 0
    """``Configure`` calls answered: one per connection that got as far as subscribing."""
    requests: int = 0
    """Requests from the runtime that decoded."""
    errors: int = 0
    """Requests that failed or were answered per the failure policy (undecodable, too late, hooks failed)."""
    late_writes: int = 0
    """Answers sent while their cgroup writes were still running (at the deadline)."""
    connected: bool = False


Answer = tuple[Any, Job | None]
"""A handler's answer message and the cgroup writes to run after it was computed (None: nothing to write)."""
Computed = tuple[bytes, Job | None, float]
"""A handler's answer encoded, its cgroup writes, and the seconds the hooks took (to decide where the next run
goes)."""


class NriPlugin:
    def __init__(self, runner: HookRunner, applier: Applier, socket_path: str, *, name: str = PLUGIN_NAME,
                 idx: str = PLUGIN_IDX, backoff_start: float = BACKOFF_START, backoff_max: float = BACKOFF_MAX,
                 clock: Callable[[], float] = time.monotonic, answer_deadline: float = ANSWER_DEADLINE) -> None:
        if len(idx) != 2 or not idx.isdigit():
            raise ValueError(f"NRI plugin index must be two digits, got {idx!r}")
        self.runner = runner
        self._applier = applier
        self.socket_path = socket_path
        self.name = name
        self.idx = idx
        self._backoff_start = backoff_start
        self._backoff_max = backoff_max
        self._clock = clock
        self._scheme = "containerd"
        self._events = event_mask(runner)
        self._session: MuxSession | None = None
        self._synchronized = False
        self._stopping = asyncio.Event()
        self._answer_deadline = answer_deadline
        self._hooks_jobs = JobQueue("nri-hooks")
        self._fast_runs: dict[str, int] = {}
        """Method -> its consecutive hook runs within :data:`INLINE_BUDGET` (only touched on the loop)."""
        self._writes_jobs = JobQueue("nri-writes")
        self.stats = NriStats()

    # --- lifecycle --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connects, serves, reconnects, until :meth:`stop`."""
        try:
            await self._serve()
        finally:
            self._hooks_jobs.stop()
            self._writes_jobs.stop()

    async def _serve(self) -> None:
        backoff = self._backoff_start
        last_error = ""
        while not self._stopping.is_set():
            configured_before = self.stats.configured
            error = "closed by the runtime"
            nobody_listening = False
            try:
                await self._connect_once()
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                error, nobody_listening = str(exc) or type(exc).__name__, True
            except (TimeoutError, OSError, TtrpcError, ConnectionError) as exc:
                error = str(exc) or type(exc).__name__
            if self.stats.configured > configured_before:
                backoff = self._backoff_start
                last_error = ""
            # One line per kind of trouble, not one per retry (a host without NRI would log every 30 s).
            if error != last_error and not self._stopping.is_set():
                log.info("NRI connection ended, retrying", extra={"socket": self.socket_path, "error": error})
            last_error = error
            if self._stopping.is_set():
                return
            # While no runtime listens (restarting, or NRI off) a dial costs a stat or a refused connect: keep
            # dialling every first-backoff so hooks are back about a second after the runtime is; the doubling is
            # for a runtime that answers and then refuses or drops the plugin.
            wait = self._backoff_start if nobody_listening else backoff
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)
            if not nobody_listening:
                backoff = min(backoff * 2, self._backoff_max)

    def stop(self) -> None:
        self._stopping.set()
        if self._session is not None:
            self._session.close()

    async def _connect_once(self) -> None:
        if not os.path.exists(self.socket_path):
            raise FileNotFoundError(f"no NRI socket at {self.socket_path}")
        self.stats.dials += 1
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.socket_path), DIAL_TIMEOUT)
        session = MuxSession(reader, writer, self._handle, oversize=self._oversize)
        self._session = session
        self._synchronized = False
        serving = asyncio.create_task(session.run())
        try:
            request = api_pb2.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.idx)
            await session.call(RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(), REGISTER_TIMEOUT)
            self.stats.registrations += 1
            self.stats.connected = True
            log.info("NRI plugin registered", extra={"plugin": f"{self.idx}-{self.name}",
                                                     "socket": self.socket_path})
            stop = asyncio.create_task(self._stopping.wait())
            await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
        finally:
            self.stats.connected = False
            session.close()
            if not serving.done():
                serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self._session = None

    # --- requests ---------------------------------------------------------------------------------------

    def _oversize(self, stream_id: int) -> bytes | None:
        """The handshake's Synchronize may exceed 4 MiB on a node with huge annotations; its content is
        not needed, so it is answered with "nothing to update" instead of failing the registration."""
        if self.stats.configured and not self._synchronized:
            self._synchronized = True
            log.warning("NRI Synchronize over 4 MiB skipped unread", extra={"stream": stream_id})
            return b""
        return None

    async def _handle(self, service: str, method: str, payload: bytes) -> bytes:
        if service != PLUGIN_SERVICE:
            raise TtrpcError(UNIMPLEMENTED, f"service {service!r} not implemented")
        handler = self._METHODS.get(method)
        if handler is None:
            raise TtrpcError(UNIMPLEMENTED, f"method {service}/{method} not implemented")
        message_type, fn, empty, offloaded = handler
        request = message_type()
        try:
            request.ParseFromString(payload)
        except DecodeError as exc:
            self.stats.errors += 1
            error = TtrpcError(INVALID_ARGUMENT, f"{method}: bad {message_type.__name__}: {exc}")
            return self._policy(method, empty, error) if offloaded else _raise(error)
        self.stats.requests += 1
        if not offloaded:
            answer, _ = fn(self, request)
            return bytes(answer.SerializeToString())
        return await self._offloaded(method, fn, request, empty)

    async def _offloaded(self, method: str, fn: Callable[[NriPlugin, Any], Answer], request: Any,
                         empty: Callable[[], Any]) -> bytes:
        """Runs ``fn`` on the hooks queue (inline when it has been fast: see the module docstring) and its writes
        on the writes queue; answers by the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._answer_deadline

        def compute() -> Computed:
            started = self._clock()
            answer, writes = fn(self, request)
            return bytes(answer.SerializeToString()), writes, self._clock() - started

        try:
            if self._fast_runs.get(method, 0) >= INLINE_AFTER and not self._hooks_jobs.queued:
                encoded, writes, seconds = compute()
                if loop.time() > deadline:
                    self._fast_runs[method] = 0
                    return self._missed_deadline(method, empty)
            else:
                computed = await self._on_hooks_thread(method, compute, empty, loop)
                if isinstance(computed, bytes):
                    return computed
                encoded, writes, seconds = computed
        except TtrpcError:
            self._fast_runs[method] = 0  # not timed: the next runs prove themselves on the thread
            raise  # a hook failed under policy Fail (HookRunner decided)
        except Exception as exc:  # conversion, validation, encoding: outside the runner, same policy
            self._fast_runs[method] = 0
            self.stats.errors += 1
            return self._policy(method, empty, TtrpcError(INTERNAL, f"{method}: {exc}"))
        self._fast_runs[method] = self._fast_runs.get(method, 0) + 1 if seconds <= INLINE_BUDGET else 0
        if writes is not None:
            await self._write_by(deadline, method, writes)
        return bytes(encoded)

    async def _on_hooks_thread(self, method: str, compute: Callable[[], Computed], empty: Callable[[], Any],
                               loop: asyncio.AbstractEventLoop) -> Computed | bytes:
        """What ``compute`` returned on the hooks queue, or the failure policy's answer (bytes) when the backlog
        is full or the hooks missed the deadline."""
        try:
            computing = self._hooks_jobs.submit(compute)
        except queue.Full:
            self.stats.errors += 1
            return self._policy(method, empty, TtrpcError(RESOURCE_EXHAUSTED, f"{method}: hooks backlog full"))
        try:
            computed: Computed = await asyncio.wait_for(awaitable(computing, loop), self._answer_deadline)
        except TimeoutError:
            computing.cancel()  # skipped if it has not started: nobody waits for it any more
            self._fast_runs[method] = 0
            return self._missed_deadline(method, empty)
        return computed

    def _missed_deadline(self, method: str, empty: Callable[[], Any]) -> bytes:
        self.stats.errors += 1
        error = TtrpcError(DEADLINE_EXCEEDED, f"{method}: hooks did not answer within {self._answer_deadline:g} s")
        return self._policy(method, empty, error)

    async def _write_by(self, deadline: float, method: str, writes: Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            writing = self._writes_jobs.submit(writes)
        except queue.Full:
            log.warning("NRI cgroup writes backlog full; left to the reconciler", extra={"method": method})
            return
        waiter = awaitable(writing, loop)
        done, _ = await asyncio.wait({waiter}, timeout=max(deadline - loop.time(), 0.0))
        if not done:
            self.stats.late_writes += 1
            log.warning("NRI cgroup writes still running at the answer deadline; answering without waiting",
                        extra={"method": method, "deadline_seconds": self._answer_deadline,
                               "queued": self._writes_jobs.queued})
            waiter.add_done_callback(_log_late_failure)
            return
        if waiter.exception() is not None:
            # The executor reports refused writes in its results; an exception is a bug, logged, and the
            # answer (already computed) still goes out: the runtime applies it, the reconciler retries.
            log.error("NRI cgroup writes failed", extra={"method": method, "error": str(waiter.exception())})

    def _policy(self, method: str, empty: Callable[[], Any], error: TtrpcError) -> bytes:
        """An error outside the hook runner: fails the request under ``Fail``; under ``Ignore`` logs it and
        answers "no adjustment" (the runtime goes on with the container as asked)."""
        if self.runner.policy is FailurePolicy.FAIL:
            raise error
        log.warning("NRI request failed; answering without adjustments (failure policy Ignore)",
                    extra={"method": method, "error": error.message})
        return bytes(empty().SerializeToString())

    def _configure(self, request: Any) -> Answer:
        self._scheme = convert.container_id_scheme(request.runtime_name)
        self.stats.configured += 1
        log.info("NRI plugin configured", extra={"runtime": request.runtime_name,
                                                 "version": request.runtime_version, "events": hex(self._events)})
        return api_pb2.ConfigureResponse(events=self._events & EVENT_MASK_MAX), None

    def _synchronize(self, request: Any) -> Answer:
        if not request.more:
            self._synchronized = True
        return api_pb2.SynchronizeResponse(more=request.more), None

    def _shutdown(self, request: Any) -> Answer:
        return api_pb2.Empty(), None

    def _run(self, request: HookRequest) -> StageResult:
        result = self.runner.run(request, transport="nri")
        if result.failed:
            self.stats.errors += 1
            raise TtrpcError(INTERNAL, "; ".join(result.errors))
        return result

    def _container_dir(self, container: Any) -> str:
        path = container.linux.cgroups_path
        if ":" in path:  # systemd: "<slice>:<prefix>:<id>"
            slice_, prefix, cid = path.split(":", 2)
            return f"{cgroup_parent_dir(slice_)}/{prefix}-{cid}.scope"
        return cgroup_parent_dir(path)

    # The handlers below run on the hooks queue's thread; the writes they return on the writes queue's.

    def _create_container(self, request: Any) -> Answer:
        hook_request = convert.container_request(Stage.PRE_CREATE_CONTAINER, request.pod, request.container,
                                                 self._scheme)
        result = self._run(hook_request)
        adjustment = result.adjustment
        self._applier.defer_quota(hook_request, adjustment)
        if adjustment.writes:
            # The container's cgroup does not exist yet: the reconciler writes these once it does.
            log.debug("NRI create: cgroup writes deferred to the reconciler",
                      extra={"pod": hook_request.pod.key, "writes": sorted(adjustment.writes)})
        return api_pb2.CreateContainerResponse(adjust=convert.container_adjustment(adjustment)), None

    def _update_container(self, request: Any) -> Answer:
        hook_request = convert.container_request(Stage.PRE_UPDATE_CONTAINER_RESOURCES, request.pod,
                                                 request.container, self._scheme, request.linux_resources)
        result = self._run(hook_request)
        self._applier.defer_quota(hook_request, result.adjustment)
        answer = api_pb2.UpdateContainerResponse(update=convert.container_updates(request.container.id,
                                                                                 result.adjustment))
        rel_dir = self._container_dir(request.container)
        return answer, lambda: self._applier.write(hook_request, result.adjustment, with_fields=False,
                                                   rel_dir=rel_dir)

    def _stop_container(self, request: Any) -> Answer:
        self._run(convert.container_request(Stage.POST_STOP_CONTAINER, request.pod, request.container,
                                            self._scheme))
        return api_pb2.StopContainerResponse(), None

    def _update_pod_sandbox(self, request: Any) -> Answer:
        return api_pb2.UpdatePodSandboxResponse(), None

    def _state_change(self, request: Any) -> Answer:
        stage = EVENT_STAGES.get(request.event)
        if stage is None or not self.runner.hooks(stage):
            return api_pb2.Empty(), None
        if request.event in POD_EVENTS:
            hook_request = convert.pod_request(stage, request.pod)
            result = self._run(hook_request)
            if stage is not Stage.PRE_RUN_POD_SANDBOX:
                return api_pb2.Empty(), None
            # A notification: nothing carries values back, and the pod cgroup exists already.
            return api_pb2.Empty(), lambda: self._applier.write(hook_request, result.adjustment,
                                                                with_fields=True)
        hook_request = convert.container_request(stage, request.pod, request.container, self._scheme)
        result = self._run(hook_request)
        rel_dir = self._container_dir(request.container)
        return api_pb2.Empty(), lambda: self._applier.write(hook_request, result.adjustment, with_fields=False,
                                                            rel_dir=rel_dir)

    _METHODS: ClassVar[dict[str, tuple[Any, Callable[[NriPlugin, Any], Answer], Callable[[], Any], bool]]] = {
        # method: (request type, handler, the "no adjustment" answer, runs off the loop)
        "Configure": (api_pb2.ConfigureRequest, _configure, api_pb2.ConfigureResponse, False),
        "Synchronize": (api_pb2.SynchronizeRequest, _synchronize, api_pb2.SynchronizeResponse, False),
        "Shutdown": (api_pb2.Empty, _shutdown, api_pb2.Empty, False),
        "CreateContainer": (api_pb2.CreateContainerRequest, _create_container, api_pb2.CreateContainerResponse,
                            True),
        "UpdateContainer": (api_pb2.UpdateContainerRequest, _update_container, api_pb2.UpdateContainerResponse,
                            True),
        "StopContainer": (api_pb2.StopContainerRequest, _stop_container, api_pb2.StopContainerResponse, True),
        "UpdatePodSandbox": (api_pb2.UpdatePodSandboxRequest, _update_pod_sandbox,
                             api_pb2.UpdatePodSandboxResponse, True),
        "StateChange": (api_pb2.StateChangeEvent, _state_change, api_pb2.Empty, True),
    }


def _raise(error: TtrpcError) -> bytes:
    raise error


def _log_late_failure(waiter: asyncio.Future[Any]) -> None:
    if not waiter.cancelled() and waiter.exception() is not None:
        log.error("NRI cgroup writes failed after the answer", extra={"error": str(waiter.exception())})
