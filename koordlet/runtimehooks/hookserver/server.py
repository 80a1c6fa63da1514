"""The RuntimeHookService server on a unix socket, and its registration with koord-runtime-proxy.

Every method converts the request (:mod:`.convert`), runs the stage's hooks and answers with the request's
values adjusted; ``PreRunPodSandbox`` also writes the adjusted cgroup values into the pod cgroup through the
executor (see :mod:`koordlet.runtimehooks.apply`).  A stage that failed as a whole (hook failure policy
``Fail``) is answered with ``INTERNAL`` and the hooks' errors, so the proxy applies *its* failure policy
(``failure-policy`` of the registration file: ``Fail`` fails the CRI call, ``Ignore`` forwards the original
request).  Hook errors under policy ``Ignore`` are logged by the runner and the merged adjustment of the
other hooks is returned.

The registration file is ``<registration_dir>/koordlet.json``
(``{"remote-endpoint", "failure-policy", "runtime-hooks"}``, Koordinator ``pkg/runtimeproxy/config``
``RuntimeHookConfig``), written atomically so the proxy's file watcher never reads half of it, and removed
on stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from koordlet.apis.proto.runtime.v1alpha1 import api_pb2_grpc
from koordlet.errors import KoordletError
from koordlet.resourceexecutor.update import Outcome
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.framework import failure_policy as parse_failure_policy
from koordlet.runtimehooks.hookserver import convert
from koordlet.system import atomicfile
from koordlet.system.unixsocket import remove_stale_socket

log = logging.getLogger(__name__)

REGISTRATION_FILE = "koordlet.json"
SOCKET_MODE = 0o600
MAX_WORKERS = 4
MAX_CONCURRENT_RPCS = 64
"""Calls admitted at once (running or queued for a worker); beyond, a call fails at once with
RESOURCE_EXHAUSTED and the proxy applies its failure policy, instead of queueing without bound."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""A hook request carries one pod's or container's config (annotations are capped at 256 KiB by the
apiserver); gRPC's default, stated so a bigger message is refused with RESOURCE_EXHAUSTED before decoding."""
MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000
"""A connection without calls this long is closed (GOAWAY); the proxy's channel reconnects on its next call."""
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_concurrent_streams", MAX_CONCURRENT_RPCS),
    ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
)
STOP_GRACE_SECONDS = 2.0
_FAILED = frozenset({Outcome.INVALID, Outcome.FAILED})
RUNTIME_HOOKS: tuple[str, ...] = tuple(stage.value for stage in convert.RPC_STAGES.values())
"""The hook types advertised to the proxy (its ``RuntimeHookType`` names: the stage, no ``Hook`` suffix)."""


RpcMethod = Callable[["_Servicer", Any, Any], Any]


def _rpc(rpc: str, to_hook: Callable[[Stage, Any], HookRequest], respond: Callable[[Any, Any], Any]) -> RpcMethod:
    def method(self: _Servicer, request: Any, context: Any) -> Any:
        return self._handle(rpc, request, context, to_hook, respond)

    method.__name__ = method.__qualname__ = rpc
    return method


def _pod_rpc(rpc: str) -> RpcMethod:
    return _rpc(rpc, convert.pod_sandbox_request, convert.pod_sandbox_response)


def _container_rpc(rpc: str) -> RpcMethod:
    return _rpc(rpc, convert.container_request, convert.container_response)


class _Servicer(api_pb2_grpc.RuntimeHookServiceServicer):
    def __init__(self, runner: HookRunner, applier: Applier | None) -> None:
        self._runner = runner
        self._applier = applier

    def _handle(self, rpc: str, request: Any, context: Any, to_hook: Callable[[Stage, Any], HookRequest],
                respond: Callable[[Any, Any], Any]) -> Any:
        stage = convert.RPC_STAGES[rpc]
        try:
            hook_request = to_hook(stage, request)
        except Exception as exc:  # garbage the proto decoder accepted (e.g. a zero period): tell the proxy
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: {exc}")
        result = self._runner.run(hook_request, transport="hookserver")
        if result.failed:
            context.abort(grpc.StatusCode.INTERNAL, f"{rpc}: " + "; ".join(result.errors))
        # Pod-level values go into the pod cgroup here, as upstream's PodContext.ProxyDone does: kubelet made
        # that cgroup before RunPodSandbox, and no runtime applies a sandbox's resources to it.
        with_fields = stage is Stage.PRE_RUN_POD_SANDBOX
        if self._applier is not None and (result.adjustment.writes or (with_fields and result.adjustment.values)):
            try:
                results = self._applier.write(hook_request, result.adjustment, with_fields=with_fields)
            except Exception as exc:  # a bad cgroup parent: the response still goes back; the reconciler retries
                log.warning("runtime hook cgroup writes failed", extra={"rpc": rpc, "error": str(exc)})
            else:
                failed = [f"{r.update.key} in {r.update.rel_dir}: {r.outcome.value}" for r in results
                          if r.outcome in _FAILED]
                if failed:
                    log.warning("runtime hook cgroup writes failed", extra={"rpc": rpc, "error": "; ".join(failed)})
        if self._applier is not None and stage in (Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES):
            self._applier.defer_quota(hook_request, result.adjustment)
        return respond(request, result.adjustment)

    # The gRPC method names the generated servicer dispatches to, one per RuntimeHookService method; each
    # converts with the pod-sandbox or the container messages.
    PreRunPodSandboxHook = _pod_rpc("PreRunPodSandboxHook")
    PostStopPodSandboxHook = _pod_rpc("PostStopPodSandboxHook")
    PreCreateContainerHook = _container_rpc("PreCreateContainerHook")
    PreStartContainerHook = _container_rpc("PreStartContainerHook")
    PostStartContainerHook = _container_rpc("PostStartContainerHook")
    PostStopContainerHook = _container_rpc("PostStopContainerHook")
    PreUpdateContainerResourcesHook = _container_rpc("PreUpdateContainerResourcesHook")


def write_registration(directory: str, endpoint: str, policy: str) -> str:
    """Writes ``<directory>/koordlet.json`` atomically (temp file + rename); returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, REGISTRATION_FILE)
    body = {"remote-endpoint": endpoint, "failure-policy": policy, "runtime-hooks": list(RUNTIME_HOOKS)}
    atomicfile.write(path, (json.dumps(body, indent=2) + "\n").encode(), mode=0o644, sync_dir=False)
    return path


class HookServer:
    """RuntimeHookService on ``unix:<socket_path>`` (mode 0600); ``failure_policy`` is what the proxy is
    told to do when koordlet errs (Koordinator ``--runtime-hooks-failure-policy``, default Ignore)."""

    def __init__(self, runner: HookRunner, socket_path: str, registration_dir: str | None,
                 failure_policy: str = "Ignore", applier: Applier | None = None,
                 endpoint: str = "") -> None:
        self.policy = parse_failure_policy(failure_policy).value
        self.runner = runner
        self.socket_path = os.path.abspath(socket_path)
        self.registration_dir = registration_dir
        self.registration_path: str | None = None
        self.endpoint = endpoint or self.socket_path
        """The socket as the runtime proxy sees it (another mount namespace may name it differently)."""
        self._applier = applier
        self._server: Any = None

    def start(self) -> None:
        if self._server is not None:
            raise KoordletError("runtime hook server: already started")
        os.makedirs(os.path.dirname(self.socket_path), exist_ok=True)
        remove_stale_socket(self.socket_path, "runtime hook server")
        server = grpc.server(ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="hookserver"),
                             options=SERVER_OPTIONS, maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        api_pb2_grpc.add_RuntimeHookServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self.runner, self._applier), server)
        try:
            bound = server.add_insecure_port(f"unix:{self.socket_path}")
        except RuntimeError as exc:
            raise KoordletError(f"runtime hook server: cannot bind unix:{self.socket_path}: {exc}") from None
        if not bound:
            raise KoordletError(f"runtime hook server: cannot bind unix:{self.socket_path}")
        server.start()
        try:
            os.chmod(self.socket_path, SOCKET_MODE)
            if self.registration_dir is not None:
                self.registration_path = write_registration(self.registration_dir, self.endpoint, self.policy)
        except BaseException:
            server.stop(None)
            raise
        self._server = server
        log.info("runtime hook server started", extra={"socket": self.socket_path,
                                                        "registration": self.registration_path})

    def stop(self) -> None:
        """Unregisters first (the proxy stops calling), then drains the server and removes the socket."""
        if self.registration_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.registration_path)
            self.registration_path = None
        server, self._server = self._server, None
        if server is None:
            return
        server.stop(STOP_GRACE_SECONDS).wait()
        try:
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
