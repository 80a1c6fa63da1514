"""The proxy assembled: backend channels, the hook-server registry, the checkpoint, the hooked calls and the
gRPC server on the proxy's socket.

Start order: registry (so the first call already knows the hook servers), checkpoint loaded then
reconciled with what the backend reports (pods and containers made or removed while the proxy was down),
then the socket.  Stop: the socket first (in-flight calls get a grace period), then the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import grpc

from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimeproxy.backend import Backend, PassthroughHandler, forward_unary, serve
from runtimeproxy.hookclient import HookClient
from runtimeproxy.intercept import DEFAULT_SKIP, Interceptor
from runtimeproxy.registry import Registry
from runtimeproxy.store import Store

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 5.0


class ProxyError(Exception):
    """The proxy cannot start (bad option, socket unusable)."""


@dataclass(frozen=True)
class ProxyOptions:
    endpoint: str
    runtime_endpoint: str
    image_endpoint: str = ""
    backend_mode: str = "Containerd"
    skip: tuple[str, str] = DEFAULT_SKIP
    hook_config_dir: str = "/etc/runtime/hookserver.d"
    checkpoint_path: str | None = None
    hook_timeout_seconds: float = 5.0
    max_workers: int = 32


class Proxy:
    def __init__(self, options: ProxyOptions) -> None:
        if options.backend_mode != "Containerd":
            raise ProxyError(f"backend runtime mode {options.backend_mode!r} is not supported (only Containerd: "
                             "dockershim left Kubernetes in 1.24)")
        self.options = options
        self.backend = Backend(options.runtime_endpoint, options.image_endpoint or options.runtime_endpoint)
        self.registry = Registry(options.hook_config_dir)
        self.store = Store(options.checkpoint_path)
        self.hooks = HookClient(options.hook_timeout_seconds)
        self.interceptor = Interceptor(self._forward, self.registry, self.store, self.hooks, options.skip)
        self._server: grpc.Server | None = None

    def _forward(self, method: str, raw: bytes, context: Any) -> bytes:
        return forward_unary(self.backend, method, raw, context)

    def start(self) -> None:
        self.registry.reload()
        self.registry.start()
        self.store.load()
        self._rebuild()
        try:
            self._server = serve(self.options.endpoint, PassthroughHandler(self.backend, self.interceptor.handlers()),
                                 self.options.max_workers)
        except Exception as exc:
            self.registry.stop()
            raise ProxyError(f"cannot serve on {self.options.endpoint}: {exc}") from exc

    def _rebuild(self) -> None:
        """Pods and containers changed while the proxy was down; an unreachable backend is not fatal (the
        checkpoint as loaded serves, and kubelet retries its calls)."""
        try:
            report = self.store.rebuild(cri_grpc.RuntimeServiceStub(self.backend.runtime_channel))  # type: ignore[no-untyped-call]
        except grpc.RpcError as exc:
            log.warning("checkpoint not reconciled with the backend: %s", exc)
            return
        log.info("checkpoint reconciled with the backend: %s", report)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(STOP_GRACE_SECONDS).wait()
            self._server = None
        self.registry.stop()
        self.hooks.close()
        self.backend.close()
