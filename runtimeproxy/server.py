"""The proxy assembled: backend channels, the hook-server registry, the checkpoint, the hooked calls and the
gRPC server on the proxy's socket.

Start order: registry (so the first call already knows the hook servers), checkpoint loaded, the socket,
then - in the background, retried until the backend answers - the checkpoint reconciled with what the
backend reports (pods and containers made or removed while the proxy was down).  Stop: the socket first
(in-flight calls get a grace period), then the rest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimeproxy.backend import Backend, PassthroughHandler, forward_unary, serve
from runtimeproxy.hookclient import HookClient
from runtimeproxy.intercept import Interceptor
from runtimeproxy.registry import Registry
from runtimeproxy.skipping import DEFAULT_SKIP, DEFAULT_SKIP_NAMESPACES
from runtimeproxy.store import Store

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 5.0
REBUILD_BACKOFF_START = 1.0
REBUILD_BACKOFF_MAX = 30.0


class ProxyError(Exception):
    """The proxy cannot start (bad option, socket unusable)."""


@dataclass(frozen=True)
class ProxyOptions:
    endpoint: str
    runtime_endpoint: str
    image_endpoint: str = ""
    backend_mode: str = "Containerd"
    skip: tuple[str, str] = DEFAULT_SKIP
    skip_namespaces: frozenset[str] = DEFAULT_SKIP_NAMESPACES
    """Namespaces whose pods the skip label applies to (``*``: every namespace); elsewhere it is ignored."""
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
        self.interceptor = Interceptor(self._forward, self.registry, self.store, self.hooks, options.skip,
                                       options.skip_namespaces)
        self._server: grpc.Server | None = None
        self._rebuilder: threading.Thread | None = None
        self._stopping = threading.Event()
        self.rebuilt = threading.Event()
        """Set once the checkpoint has been reconciled with the backend."""

    def _forward(self, method: str, raw: bytes, context: Any) -> bytes:
        return forward_unary(self.backend, method, raw, context)

    def start(self) -> None:
        self.registry.reload()
        self.registry.start()
        self.store.load()
        try:
            self._server = serve(self.options.endpoint, PassthroughHandler(self.backend, self.interceptor.handlers()),
                                 self.options.max_workers)
        except Exception as exc:
            self.registry.stop()
            raise ProxyError(f"cannot serve on {self.options.endpoint}: {exc}") from exc
        self._rebuilder = threading.Thread(target=self._rebuild, name="checkpoint-rebuild", daemon=True)
        self._rebuilder.start()

    def _rebuild(self) -> None:
        """Pods and containers changed while the proxy was down.  The proxy serves meanwhile (the checkpoint
        as loaded answers; a backend that is not up yet fails calls as it would without the proxy), and the
        reconciliation is retried until the backend answers."""
        backoff = REBUILD_BACKOFF_START
        stub = cri_grpc.RuntimeServiceStub(self.backend.runtime_channel)  # type: ignore[no-untyped-call]
        while not self._stopping.is_set():
            try:
                report = self.store.rebuild(stub)
            except grpc.RpcError as exc:
                log.warning("checkpoint not reconciled with the backend yet; retrying",
                            extra={"retry_seconds": round(backoff),
                                   "error": str(exc.details() if hasattr(exc, "details") else exc)})
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, REBUILD_BACKOFF_MAX)
                continue
            log.info("checkpoint reconciled with the backend", extra={"report": str(report)})
            self.rebuilt.set()
            return

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(STOP_GRACE_SECONDS).wait()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(self.options.endpoint).st_mode):
                    os.unlink(self.options.endpoint)  # kubelet sees "no runtime" rather than a dead socket
        if self._rebuilder is not None:
            self._rebuilder.join(STOP_GRACE_SECONDS)
        self.registry.stop()
        self.store.close()
        self.hooks.close()
        self.backend.close()
