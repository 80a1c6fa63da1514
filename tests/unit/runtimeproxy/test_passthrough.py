"""The raw-bytes passthrough (runtimeproxy.backend) between a client and fake backends over unix sockets.

The fake backends are plain gRPC servers with generic handlers that record what reached them: bytes,
metadata, remaining deadline. Nothing here knows the proxy's internals; every assertion is on the wire.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy.backend import (
    KNOWN_UNARY_METHODS,
    MAX_MESSAGE_BYTES,
    Backend,
    PassthroughHandler,
    forward_unary,
    one_batch_supported,
    serve,
    unix_target,
)

UNKNOWN_UNARY = "/runtime.v9.FutureService/Frobnicate"
UNKNOWN_BIDI = "/runtime.v9.FutureService/Chat"
UNKNOWN_FAIL = "/runtime.v9.FutureService/Fail"
SLOW = "/runtime.v9.FutureService/Slow"
SLOW_UNARY = "/runtime.v1.RuntimeService/StopContainer"
"""A known unary method (relayed as a unary call, not a stream) the fake answers as slowly as SLOW."""
NO_ANSWER = "/runtime.v1.RuntimeService/Status"
"""A known unary method the fake ends OK without a message."""
FOREVER = "/runtime.v9.FutureService/Watch"
VERSION = "/runtime.v1.RuntimeService/Version"
EVENTS = "/runtime.v1.RuntimeService/GetContainerEvents"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
LIST_IMAGES_V1ALPHA2 = "/runtime.v1alpha2.ImageService/ListImages"
EVENT_COUNT = 50
CALL_TIMEOUT = 10.0
# A status-details trailer as google.rpc.Status would carry it (any bytes do for the relay).
STATUS_DETAILS = b"\x08\x05\x12\x07missing"


@dataclass
class Seen:
    method: str
    request: bytes
    metadata: dict[str, str | bytes]
    time_remaining: float


@dataclass
class FakeRuntime(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A backend that echoes, fails, streams and blocks on demand, and records every call."""

    name: str
    calls: list[Seen] = field(default_factory=list)
    slow_cancelled: threading.Event = field(default_factory=threading.Event)
    watch_cancelled: threading.Event = field(default_factory=threading.Event)

    def _record(self, method: str, request: bytes, context: grpc.ServicerContext) -> None:
        self.calls.append(Seen(method, request, dict(context.invocation_metadata()), context.time_remaining()))

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method

        def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._record(method, request, context)
            context.send_initial_metadata((("x-backend", self.name),))
            context.set_trailing_metadata((("x-backend-trailer", "done"),))
            return b"\xff" + self.name.encode() + b"\x00" + request[::-1]

        def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._record(method, request, context)
            context.set_trailing_metadata((("x-reason", "gone"), ("grpc-status-details-bin", STATUS_DETAILS)))
            context.abort(grpc.StatusCode.NOT_FOUND, 'container "abc" not found: ✗')
            raise AssertionError("unreachable")

        def events(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self._record(method, request, context)
            for i in range(EVENT_COUNT):
                yield cri.ContainerEventResponse(container_id=f"c{i}", created_at=i).SerializeToString()

        def chat(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            self._record(method, b"", context)
            for request in requests:
                yield request + b"!"

        def slow(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._record(method, request, context)
            deadline = time.monotonic() + CALL_TIMEOUT
            while context.is_active() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not context.is_active():
                self.slow_cancelled.set()
            return b""

        def watch(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self._record(method, request, context)
            # A cancel that lands while a tick is being sent ends the call without resuming this generator, so
            # the termination callback notices it; a stream that ran out its time is no cancel.
            ran_out = threading.Event()
            context.add_callback(lambda: None if ran_out.is_set() else self.watch_cancelled.set())
            deadline = time.monotonic() + CALL_TIMEOUT
            while context.is_active() and time.monotonic() < deadline:
                yield b"tick"
                time.sleep(0.01)
            if context.is_active():
                ran_out.set()

        if method == EVENTS:
            return grpc.unary_stream_rpc_method_handler(events)
        if method == FOREVER:
            return grpc.unary_stream_rpc_method_handler(watch)
        if method == UNKNOWN_BIDI:
            return grpc.stream_stream_rpc_method_handler(chat)
        def no_answer(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self._record(method, request, context)
            return iter(())

        if method in (SLOW, SLOW_UNARY):
            return grpc.unary_unary_rpc_method_handler(slow)
        if method == NO_ANSWER:
            return grpc.unary_stream_rpc_method_handler(no_answer)
        if method == UNKNOWN_FAIL or method.endswith("/ContainerStatus"):
            return grpc.unary_unary_rpc_method_handler(fail)
        return grpc.unary_unary_rpc_method_handler(echo)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # AF_UNIX paths are limited to 108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="rp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_fake(path: Path, handler: FakeRuntime) -> grpc.Server:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        handlers=[handler],
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
    )
    server.add_insecure_port(f"unix:{path}")
    server.start()
    return server


@dataclass
class Rig:
    runtime: FakeRuntime
    images: FakeRuntime
    proxy_socket: Path
    channel: grpc.Channel

    def unary(self, method: str, request: bytes, **kwargs: Any) -> Any:
        return self.channel.unary_unary(method)(request, timeout=kwargs.pop("timeout", CALL_TIMEOUT), **kwargs)


@pytest.fixture(params=[True, False], ids=["one-batch", "streamed"])
def make_rig(sockdir: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Rig]]:
    """Rigs whose backend makes unary calls one way: every rig test runs on both (see Backend's one_batch)."""
    one_batch: bool = request.param
    if one_batch and not one_batch_supported():
        pytest.skip(f"gRPC {grpc.__version__} gets the public unary path only")
    servers: list[grpc.Server] = []
    closers: list[Callable[[], Any]] = []

    def make(intercepted: dict[str, Callable[[bytes, grpc.ServicerContext], bytes]] | None = None) -> Rig:
        runtime, images = FakeRuntime("runtime"), FakeRuntime("images")
        servers.append(start_fake(sockdir / "runtime.sock", runtime))
        servers.append(start_fake(sockdir / "images.sock", images))
        backend = Backend(str(sockdir / "runtime.sock"), f"unix://{sockdir / 'images.sock'}", one_batch=one_batch)
        closers.append(backend.close)
        proxy_socket = sockdir / "proxy.sock"
        servers.append(serve(str(proxy_socket), PassthroughHandler(backend, intercepted or {}), max_workers=8))
        channel = grpc.insecure_channel(
            f"unix:{proxy_socket}", options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        )
        closers.append(channel.close)
        return Rig(runtime, images, proxy_socket, channel)

    yield make
    for close in closers:
        close()
    for server in servers:
        server.stop(None)


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


# ---------------------------------------------------------------------------------------------- bytes


def test_unknown_method_of_unknown_service_relayed_byte_identical(rig: Rig) -> None:
    # Not a valid protobuf message at all: the proxy must never parse it.
    request = bytes(range(256)) * 64 + b"\x00\xff\xfe"
    response = rig.unary(UNKNOWN_UNARY, request)
    (seen,) = rig.runtime.calls
    assert (seen.method, seen.request) == (UNKNOWN_UNARY, request)
    assert response == b"\xffruntime\x00" + request[::-1]


def test_known_method_relayed_byte_identical_with_fields_the_subset_lacks(rig: Rig) -> None:
    request = cri.VersionRequest(version="v1").SerializeToString() + b"\xa8\x06\x07"  # unknown field 101
    response = rig.unary(VERSION, request)
    assert rig.runtime.calls[0].request == request
    assert response == b"\xffruntime\x00" + request[::-1]


def test_empty_message_relayed(rig: Rig) -> None:
    assert rig.unary(UNKNOWN_UNARY, b"") == b"\xffruntime\x00"
    assert rig.unary(VERSION, b"") == b"\xffruntime\x00"


def test_message_larger_than_grpc_default_limit(rig: Rig) -> None:
    request = os.urandom(8 * 1024 * 1024)  # gRPC's default receive limit is 4 MiB; kubelet's CRI is 16 MiB
    assert rig.unary(VERSION, request)[len(b"\xffruntime\x00") :] == request[::-1]
    assert rig.unary(UNKNOWN_UNARY, request)[len(b"\xffruntime\x00") :] == request[::-1]


# ---------------------------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("method", "backend"),
    [
        (LIST_IMAGES, "images"),
        (LIST_IMAGES_V1ALPHA2, "images"),
        ("/runtime.v1.ImageService/ImageFutureCall", "images"),
        (VERSION, "runtime"),
        ("/runtime.v1alpha2.RuntimeService/Version", "runtime"),
        (UNKNOWN_UNARY, "runtime"),
    ],
)
def test_image_service_goes_to_image_endpoint(rig: Rig, method: str, backend: str) -> None:
    response = rig.unary(method, b"x")
    assert response.startswith(b"\xff" + backend.encode() + b"\x00")
    target = rig.images if backend == "images" else rig.runtime
    other = rig.runtime if backend == "images" else rig.images
    assert [c.method for c in target.calls] == [method]
    assert other.calls == []


def test_same_endpoint_shares_one_channel(sockdir: Path) -> None:
    path = sockdir / "c.sock"
    with Backend(str(path), f"unix://{path}") as backend:
        assert backend.image_channel is backend.runtime_channel
    with Backend(str(path), str(sockdir / "other.sock")) as backend:
        assert backend.image_channel is not backend.runtime_channel


@pytest.mark.parametrize(
    ("endpoint", "target"),
    [
        ("/run/containerd/containerd.sock", "unix:/run/containerd/containerd.sock"),
        ("unix:///run/containerd/containerd.sock", "unix:/run/containerd/containerd.sock"),
        ("unix:/run/x/../containerd.sock", "unix:/run/containerd.sock"),
    ],
)
def test_unix_target(endpoint: str, target: str) -> None:
    assert unix_target(endpoint) == target


@pytest.mark.parametrize("endpoint", ["", "unix://", "tcp://127.0.0.1:1234"])
def test_unix_target_rejects(endpoint: str) -> None:
    with pytest.raises(ValueError, match="unix socket"):
        unix_target(endpoint)


def test_known_unary_methods_come_from_the_cri_subset() -> None:
    assert {VERSION, LIST_IMAGES, "/runtime.v1.RuntimeService/ExecSync"} <= KNOWN_UNARY_METHODS
    assert EVENTS not in KNOWN_UNARY_METHODS  # server-streaming: relayed as a stream


# ---------------------------------------------------------------------------------------------- metadata, deadline


@pytest.mark.parametrize("method", [UNKNOWN_UNARY, VERSION])
def test_metadata_reaches_backend_and_comes_back(rig: Rig, method: str) -> None:
    callable_ = rig.channel.unary_unary(method)
    _, call = callable_.with_call(
        b"m",
        timeout=CALL_TIMEOUT,
        metadata=(("x-request-id", "abc-123"), ("x-trace-bin", b"\x00\x01\xfe")),
    )
    seen = rig.runtime.calls[0].metadata
    assert seen["x-request-id"] == "abc-123"
    assert seen["x-trace-bin"] == b"\x00\x01\xfe"
    assert not any(key.startswith(":") for key in seen)
    assert dict(call.initial_metadata())["x-backend"] == "runtime"
    assert dict(call.trailing_metadata())["x-backend-trailer"] == "done"


def within_grpc_rounding(seconds: float) -> float:
    """The most a receiver may see of ``seconds``: grpc-timeout is sent rounded *up* (to 3 significant
    digits, so 30 s arrives as 30.1 s), once per hop."""
    return seconds * 1.01 + 0.01


@pytest.mark.parametrize("method", [UNKNOWN_UNARY, VERSION])
def test_deadline_propagated(rig: Rig, method: str) -> None:
    rig.unary(method, b"d", timeout=5.0)
    remaining = rig.runtime.calls[0].time_remaining
    assert 4.0 < remaining <= within_grpc_rounding(within_grpc_rounding(5.0))


def test_deadline_is_what_remains_not_what_was_asked(make_rig: Callable[..., Rig]) -> None:
    holder: dict[str, Backend] = {}
    at_proxy: list[float] = []

    def slow_hook(request: bytes, context: grpc.ServicerContext) -> bytes:
        time.sleep(0.5)
        at_proxy.append(context.time_remaining())
        return forward_unary(holder["backend"], VERSION, request, context)

    rig = make_rig({VERSION: slow_hook})
    with Backend(str(rig.proxy_socket.parent / "runtime.sock")) as backend:
        holder["backend"] = backend
        rig.unary(VERSION, b"d", timeout=2.0)
    remaining = rig.runtime.calls[0].time_remaining
    assert 0.5 < remaining <= within_grpc_rounding(at_proxy[0])
    assert remaining <= within_grpc_rounding(within_grpc_rounding(2.0) - 0.5)


@pytest.mark.parametrize("method", [UNKNOWN_UNARY, VERSION])
def test_no_deadline_stays_no_deadline(rig: Rig, method: str) -> None:
    rig.channel.unary_unary(method)(b"d")
    assert rig.runtime.calls[0].time_remaining > 365 * 24 * 3600.0


def test_expired_deadline_is_deadline_exceeded(rig: Rig) -> None:
    with pytest.raises(grpc.RpcError) as info:
        rig.unary(SLOW, b"s", timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize("method", [SLOW, SLOW_UNARY])
def test_caller_cancellation_cancels_backend_call(rig: Rig, method: str) -> None:
    future = rig.channel.unary_unary(method).future(b"s")
    deadline = time.monotonic() + CALL_TIMEOUT
    while not rig.runtime.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rig.runtime.calls, "the slow call never reached the backend"
    future.cancel()
    assert rig.runtime.slow_cancelled.wait(CALL_TIMEOUT)


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("method", [UNKNOWN_FAIL, "/runtime.v1.RuntimeService/ContainerStatus"])
def test_backend_error_returned_unchanged(rig: Rig, method: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        rig.unary(method, b"e")
    error = info.value
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == 'container "abc" not found: ✗'
    trailing = dict(error.trailing_metadata())
    assert trailing["x-reason"] == "gone"
    assert trailing["grpc-status-details-bin"] == STATUS_DETAILS


def test_backend_ending_ok_without_a_message_fails_the_call(rig: Rig) -> None:
    with pytest.raises(grpc.RpcError) as info:
        rig.unary(NO_ANSWER, b"n")
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert [c.method for c in rig.runtime.calls] == [NO_ANSWER]


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "streamed"])
def test_cancelling_an_ended_call_is_harmless(rig: Rig, one_batch: bool) -> None:
    if one_batch and not one_batch_supported():
        pytest.skip(f"gRPC {grpc.__version__} gets the public unary path only")
    with Backend(str(rig.proxy_socket.parent / "runtime.sock"), one_batch=one_batch) as backend:
        call = backend.unary_call(VERSION, b"v", (), CALL_TIMEOUT)
        assert call.result().startswith(b"\xffruntime")
        assert call.cancel() is False and not call.cancelled()
        assert dict(call.initial_metadata() or ())["x-backend"] == "runtime"
        assert dict(call.trailing_metadata() or ())["x-backend-trailer"] == "done"


@pytest.mark.parametrize(("version", "supported"), [("1.85.3", True), ("1.86.0", False), ("1.8.5", False)])
def test_one_batch_calls_only_with_the_grpc_releases_checked(version: str, supported: bool) -> None:
    assert one_batch_supported(version) is supported


def test_unreachable_backend_is_unavailable(sockdir: Path) -> None:
    backend = Backend(str(sockdir / "nobody.sock"))
    server = serve(str(sockdir / "proxy.sock"), PassthroughHandler(backend))
    channel = grpc.insecure_channel(f"unix:{sockdir / 'proxy.sock'}")
    try:
        for method in (VERSION, UNKNOWN_UNARY):
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(method)(b"", timeout=CALL_TIMEOUT)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        channel.close()
        server.stop(None)
        backend.close()


# ---------------------------------------------------------------------------------------------- streams


def test_server_streaming_relayed_in_order(rig: Rig) -> None:
    stream = rig.channel.unary_stream(EVENTS)(cri.GetEventsRequest().SerializeToString(), timeout=CALL_TIMEOUT)
    events = [cri.ContainerEventResponse.FromString(raw) for raw in stream]
    assert [(e.container_id, e.created_at) for e in events] == [(f"c{i}", i) for i in range(EVENT_COUNT)]
    assert stream.code() == grpc.StatusCode.OK


def test_caller_closing_a_stream_cancels_backend_stream(rig: Rig) -> None:
    stream = rig.channel.unary_stream(FOREVER)(b"w")
    assert [next(stream) for _ in range(3)] == [b"tick"] * 3
    stream.cancel()
    assert rig.runtime.watch_cancelled.wait(CALL_TIMEOUT)


def test_bidi_stream_of_unknown_method_relayed(rig: Rig) -> None:
    requests = [b"a", b"", b"\x00" * 1000, b"z"]
    responses = list(rig.channel.stream_stream(UNKNOWN_BIDI)(iter(requests), timeout=CALL_TIMEOUT))
    assert responses == [r + b"!" for r in requests]


# ---------------------------------------------------------------------------------------------- interception


def test_intercepted_method_function_called_instead(make_rig: Callable[..., Rig]) -> None:
    received: list[bytes] = []

    def version(request: bytes, context: grpc.ServicerContext) -> bytes:
        received.append(request)
        return b"intercepted"

    rig = make_rig({VERSION: version})
    assert rig.unary(VERSION, b"v") == b"intercepted"
    assert received == [b"v"]
    assert rig.runtime.calls == []
    assert rig.unary(UNKNOWN_UNARY, b"u").startswith(b"\xffruntime")  # everything else still passes


def test_interceptor_may_rewrite_and_forward(make_rig: Callable[..., Rig]) -> None:
    holder: dict[str, Backend] = {}

    def rewrite(request: bytes, context: grpc.ServicerContext) -> bytes:
        return forward_unary(holder["backend"], VERSION, request + b"+hooked", context) + b"+post"

    rig = make_rig({VERSION: rewrite})
    with Backend(str(rig.proxy_socket.parent / "runtime.sock")) as backend:
        holder["backend"] = backend
        response = rig.channel.unary_unary(VERSION)(b"v", timeout=5.0, metadata=(("x-id", "7"),))
    (seen,) = rig.runtime.calls
    assert seen.request == b"v+hooked"
    assert seen.metadata["x-id"] == "7"
    assert 0 < seen.time_remaining <= within_grpc_rounding(within_grpc_rounding(5.0))
    assert response == b"\xffruntime\x00" + b"dekooh+v" + b"+post"


# ---------------------------------------------------------------------------------------------- robustness


def _send_raw(path: Path, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(5.0)
        raw.connect(str(path))
        if payload:
            raw.sendall(payload)
        raw.shutdown(socket.SHUT_WR)
        try:
            while raw.recv(65536):
                pass
        except OSError:
            pass


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        bytes(range(256)) * 16,
        b"PRI * HTTP/2.0\r\n",  # half the HTTP/2 client preface
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x01\x00\x00\x00\x00\x00" + b"\xff" * 64,
    ],
    ids=["connect-close", "http1", "binary", "half-preface", "preface-then-garbage"],
)
def test_garbage_on_proxy_socket_does_not_hurt(rig: Rig, payload: bytes) -> None:
    _send_raw(rig.proxy_socket, payload)
    assert rig.unary(VERSION, b"ok").startswith(b"\xffruntime")
    assert rig.unary(UNKNOWN_UNARY, b"ok").startswith(b"\xffruntime")


def test_half_open_connection_does_not_block_others(rig: Rig) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.connect(str(rig.proxy_socket))
        idle.sendall(b"PRI * HTTP/2.0\r\n")  # and then nothing, connection held open
        assert rig.unary(VERSION, b"ok", timeout=5.0).startswith(b"\xffruntime")


# ---------------------------------------------------------------------------------------------- serve


def test_serve_replaces_stale_socket_and_sets_mode(sockdir: Path) -> None:
    path = sockdir / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    backend = Backend(str(sockdir / "nobody.sock"))
    server = serve(str(path), PassthroughHandler(backend))
    try:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o660
    finally:
        server.stop(None)
        backend.close()


def test_serve_refuses_to_replace_a_regular_file(sockdir: Path) -> None:
    path = sockdir / "precious"
    path.write_text("data")
    backend = Backend(str(sockdir / "nobody.sock"))
    try:
        with pytest.raises(FileExistsError, match="not a socket"):
            serve(str(path), PassthroughHandler(backend))
        assert path.read_text() == "data"
    finally:
        backend.close()
