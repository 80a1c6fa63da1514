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
   container start/stop events run their hooks for their side effects.  Every answer is computed inline
   (hooks are in-memory work plus a few cgroup writes), far inside the runtime's 2 s request timeout.

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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from google.protobuf.message import DecodeError

from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage, StageResult
from koordlet.runtimehooks.nri import convert
from koordlet.runtimehooks.nri.ttrpc import INTERNAL, INVALID_ARGUMENT, UNIMPLEMENTED, MuxSession, TtrpcError
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
    registrations: int = 0
    configured: int = 0
    requests: int = 0
    errors: int = 0
    connected: bool = False


class NriPlugin:
    def __init__(self, runner: HookRunner, applier: Applier, socket_path: str, *, name: str = PLUGIN_NAME,
                 idx: str = PLUGIN_IDX, backoff_start: float = BACKOFF_START, backoff_max: float = BACKOFF_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
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
        self.stats = NriStats()

    # --- lifecycle --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connects, serves, reconnects, until :meth:`stop`."""
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
        message_type, fn = handler
        request = message_type()
        try:
            request.ParseFromString(payload)
        except DecodeError as exc:
            self.stats.errors += 1
            raise TtrpcError(INVALID_ARGUMENT, f"{method}: bad {message_type.__name__}: {exc}") from None
        self.stats.requests += 1
        answer: Any = fn(self, request)
        return bytes(answer.SerializeToString())

    def _configure(self, request: Any) -> Any:
        self._scheme = convert.container_id_scheme(request.runtime_name)
        self.stats.configured += 1
        log.info("NRI plugin configured", extra={"runtime": request.runtime_name,
                                                 "version": request.runtime_version, "events": hex(self._events)})
        return api_pb2.ConfigureResponse(events=self._events & EVENT_MASK_MAX)

    def _synchronize(self, request: Any) -> Any:
        if not request.more:
            self._synchronized = True
        return api_pb2.SynchronizeResponse(more=request.more)

    def _shutdown(self, request: Any) -> Any:
        return api_pb2.Empty()

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

    def _create_container(self, request: Any) -> Any:
        hook_request = convert.container_request(Stage.PRE_CREATE_CONTAINER, request.pod, request.container,
                                                 self._scheme)
        result = self._run(hook_request)
        adjustment = result.adjustment
        self._applier.defer_quota(hook_request, adjustment)
        if adjustment.writes:
            # The container's cgroup does not exist yet: the reconciler writes these once it does.
            log.debug("NRI create: cgroup writes deferred to the reconciler",
                      extra={"pod": hook_request.pod.key, "writes": sorted(adjustment.writes)})
        return api_pb2.CreateContainerResponse(adjust=convert.container_adjustment(adjustment))

    def _update_container(self, request: Any) -> Any:
        hook_request = convert.container_request(Stage.PRE_UPDATE_CONTAINER_RESOURCES, request.pod,
                                                 request.container, self._scheme, request.linux_resources)
        result = self._run(hook_request)
        self._applier.defer_quota(hook_request, result.adjustment)
        self._applier.write(hook_request, result.adjustment, with_fields=False,
                            rel_dir=self._container_dir(request.container))
        return api_pb2.UpdateContainerResponse(update=convert.container_updates(request.container.id,
                                                                               result.adjustment))

    def _stop_container(self, request: Any) -> Any:
        self._run(convert.container_request(Stage.POST_STOP_CONTAINER, request.pod, request.container,
                                            self._scheme))
        return api_pb2.StopContainerResponse()

    def _update_pod_sandbox(self, request: Any) -> Any:
        return api_pb2.UpdatePodSandboxResponse()

    def _state_change(self, request: Any) -> Any:
        stage = EVENT_STAGES.get(request.event)
        if stage is None or not self.runner.hooks(stage):
            return api_pb2.Empty()
        if request.event in POD_EVENTS:
            hook_request = convert.pod_request(stage, request.pod)
            result = self._run(hook_request)
            if stage is Stage.PRE_RUN_POD_SANDBOX:
                # A notification: nothing carries values back, and the pod cgroup exists already.
                self._applier.write(hook_request, result.adjustment, with_fields=True)
        else:
            hook_request = convert.container_request(stage, request.pod, request.container, self._scheme)
            result = self._run(hook_request)
            self._applier.write(hook_request, result.adjustment, with_fields=False,
                                rel_dir=self._container_dir(request.container))
        return api_pb2.Empty()

    _METHODS: ClassVar[dict[str, tuple[Any, Callable[[NriPlugin, Any], Any]]]] = {
        "Configure": (api_pb2.ConfigureRequest, _configure),
        "Synchronize": (api_pb2.SynchronizeRequest, _synchronize),
        "Shutdown": (api_pb2.Empty, _shutdown),
        "CreateContainer": (api_pb2.CreateContainerRequest, _create_container),
        "UpdateContainer": (api_pb2.UpdateContainerRequest, _update_container),
        "StopContainer": (api_pb2.StopContainerRequest, _stop_container),
        "UpdatePodSandbox": (api_pb2.UpdatePodSandboxRequest, _update_pod_sandbox),
        "StateChange": (api_pb2.StateChangeEvent, _state_change),
    }

