"""CRI ``RuntimeService/StopContainer`` as an eviction backend (Koordinator's koordlet stops a BE pod's
containers with timeout 0; kubelet then sees them exit and the pod fails).

The request is two fields (``container_id = 1``, ``timeout = 2`` in ``runtime.v1.StopContainerRequest``),
so it is encoded here rather than pulling the whole CRI proto into the koordlet.  ``StopContainer`` is
idempotent in CRI: containerd 1.7 answers it with success for an id it never had (1.6 with NOT_FOUND), so a
``ContainerStatus`` after each stop (``container_id = 1`` too) tells a stopped container from an unknown one,
and a pod none of whose containers the runtime knows is not counted as evicted."""

from __future__ import annotations

import threading

import grpc

from koordlet.qosmanager.evictor import EvictionFailed, containers_to_stop
from koordlet.statesinformer.framework import PodMeta

STOP_CONTAINER = "/runtime.v1.RuntimeService/StopContainer"
CONTAINER_STATUS = "/runtime.v1.RuntimeService/ContainerStatus"
RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 3000)]
"""kubelet's CRI client backoff (100 ms, up to 3 s): gRPC's default grows to 120 s, which would leave evictions
failing for minutes after the runtime restarted."""
UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""The runtime did not answer: stopping any other pod's containers would fail the same way."""


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # int64 on the wire: negatives are ten bytes of two's complement
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def stop_container_request(container_id: str, timeout_seconds: int = 0) -> bytes:
    """``runtime.v1.StopContainerRequest`` bytes (proto3: a zero timeout is left out)."""
    raw_id = container_id.encode()
    body = b"\x0a" + _varint(len(raw_id)) + raw_id
    if timeout_seconds:
        body += b"\x10" + _varint(timeout_seconds)
    return body


def _endpoint(endpoint: str) -> str:
    # kubelet's --container-runtime-endpoint style ("unix:///run/x.sock") is also grpc's; a bare path is not.
    return endpoint if ":" in endpoint.split("/", 1)[0] else f"unix://{endpoint}"


class CRIBackend:
    """Stops every started container of the pod through the runtime's CRI socket."""

    name = "cri"

    def __init__(self, endpoint: str, timeout_seconds: float) -> None:
        self.endpoint = _endpoint(endpoint)
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def _call(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(self.endpoint, options=RECONNECT_OPTIONS)
            return self._channel.unary_unary(method)

    def _stop_call(self) -> grpc.UnaryUnaryMultiCallable:
        return self._call(STOP_CONTAINER)

    def _known(self, container_id: str) -> bool:
        """False only when the runtime says it has no such container; any other answer leaves the stop as done."""
        try:
            # ContainerStatusRequest's container_id is field 1 too: the same bytes as a stop with timeout 0.
            self._call(CONTAINER_STATUS)(stop_container_request(container_id, 0), timeout=self._timeout)
        except grpc.RpcError as exc:
            return (exc.code() if hasattr(exc, "code") else None) is not grpc.StatusCode.NOT_FOUND
        return True

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        ids = containers_to_stop(pod)
        if not ids:
            raise EvictionFailed(f"pod {pod.pod.key} has no started container to stop")
        call = self._stop_call()
        unknown = []
        for container_id in ids:
            try:
                call(stop_container_request(container_id, 0), timeout=self._timeout)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code == grpc.StatusCode.NOT_FOUND:
                    unknown.append(container_id)  # already gone, unless the runtime never had it
                    continue
                details = exc.details() if hasattr(exc, "details") else str(exc)
                raise EvictionFailed(f"CRI StopContainer {container_id} of pod {pod.pod.key} on "
                                     f"{self.endpoint}: {code}: {details}",
                                     unreachable=code in UNREACHABLE_CODES) from None
            if not self._known(container_id):
                unknown.append(container_id)
        if len(unknown) == len(ids):
            # Nothing was stopped: the pod runs on, so this eviction must not count as done.
            raise EvictionFailed(f"CRI StopContainer: the runtime on {self.endpoint} knows no container of pod "
                                 f"{pod.pod.key} ({', '.join(unknown)}): removed meanwhile, or qos.runtimeEndpoint "
                                 "is not the runtime that runs the pods")

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
