"""Calls a registered hook server's RuntimeHookService (``runtime.v1alpha1``) over its unix socket.

One channel per endpoint, kept for the process's life (gRPC reconnects by itself when the server comes
back).  Calls do not wait for a server that is down (``wait_for_ready`` off): a dead hook server answers
UNAVAILABLE at once, so the failure policy decides quickly instead of holding up the kubelet.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc

from koordlet.apis.proto.runtime.v1alpha1 import api_pb2_grpc
from runtimeproxy.backend import RECONNECT_OPTIONS

DEFAULT_TIMEOUT_SECONDS = 5.0


def target(endpoint: str) -> str:
    """A gRPC target for a registration's ``remote-endpoint`` (a socket path or a ``unix:`` URI)."""
    if endpoint.startswith("unix:"):
        return endpoint
    return f"unix:{endpoint}"


class HookError(Exception):
    """A hook call failed: transport, status or an answer the proxy refuses (``reason`` says which)."""

    def __init__(self, server: str, method: str, reason: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
                 ) -> None:
        super().__init__(f"hook server {server}: {method}: {reason}")
        self.server = server
        self.method = method
        self.reason = reason
        self.code = code


class HookClient:
    def __init__(self, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.timeout = timeout_seconds
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, Any]] = {}

    def _stub(self, endpoint: str) -> Any:
        with self._lock:
            found = self._stubs.get(endpoint)
            if found is None:
                # Short reconnect backoff: a restarted koordlet is called again within a second, not after
                # gRPC's default of up to 120 s during which every hook would fail.
                channel = grpc.insecure_channel(target(endpoint), options=RECONNECT_OPTIONS)
                found = (channel, api_pb2_grpc.RuntimeHookServiceStub(channel))  # type: ignore[no-untyped-call]
                self._stubs[endpoint] = found
            return found[1]

    def call(self, server: str, endpoint: str, method: str, request: Any) -> Any:
        """``method`` (``PreCreateContainerHook``...) on the server; raises :class:`HookError`."""
        try:
            return getattr(self._stub(endpoint), method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise HookError(server, method, f"{code.name}: {details}", code) from None

    def close(self) -> None:
        with self._lock:
            for channel, _ in self._stubs.values():
                channel.close()
            self._stubs.clear()
