"""Raw-bytes CRI passthrough: the proxy's channels to the runtime, its gRPC handler and its server.

Everything the proxy does not intercept is relayed without being decoded: request and response bytes,
invocation metadata, the caller's deadline, cancellation, and the backend's status code, details and
metadata. Methods the proxy's CRI subset does not declare - newer CRI methods, other services such as
``runtime.v1alpha2`` - are relayed as ``stream_stream`` calls: gRPC frames a unary call exactly like a
stream that carries one message each way, so the relay need not know a method's cardinality.

Unary calls are driven by the handler's own thread and can be cancelled from another one, so a cancelled
caller cancels the backend call.  A ``future()`` unary call is completed by the channel's spin thread, which
gRPC starts when a channel gets a call in flight and ends when it has none - with kubelet's calls one after
another, that is a new thread per call and a hand-off to it and back (measured: a third or more of the
proxy's CPU per relayed call).  With the gRPC release the proxy was measured on, a unary call is started as
gRPC's own blocking call starts one - every operation in one batch on a completion queue of its own, one
wait for the whole call (:class:`OneBatchCall`, ~10% of the proxy's CPU per relayed call below the
alternative) - but keeping the call's handle for a cancel.  That takes gRPC's Cython layer, which is not a
public API: any other release gets the public fallback, a single-threaded unary-stream call (gRPC's
experimental ``SingleThreadedUnaryStream`` channel option; the bytes on the wire are a unary call's), which
waits once per message and once for the status.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType, TracebackType
from typing import Any, NoReturn, Protocol

import grpc
import grpc.experimental

try:  # gRPC's Cython layer: not a public API, used only with the releases it was checked with
    from grpc._cython import cygrpc as _cygrpc
except ImportError:  # pragma: no cover - a gRPC without it gets the public path
    _cygrpc = None

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri

# kubelet's CRI client limit (k8s.io/kubernetes pkg/kubelet/cri/remote maxMsgSize), both directions.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# gRPC's default reconnect backoff grows to 120 s: after a containerd restart the proxy would fail kubelet's
# calls for up to two minutes.  A local socket is cheap to retry, so the backoff stays short.
RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
SINGLE_THREADED_UNARY_STREAM = ((grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),)
"""A Python-side channel option (never passed to gRPC core): unary-stream calls run on the calling thread."""
CHANNEL_OPTIONS = SERVER_OPTIONS + RECONNECT_OPTIONS + SINGLE_THREADED_UNARY_STREAM
SOCKET_MODE = 0o660
DEFAULT_MAX_WORKERS = 32
QUEUED_CALLS_PER_WORKER = 8
"""Calls admitted at once are ``max_workers`` times this (running or waiting for a thread); beyond, a call
fails at once with RESOURCE_EXHAUSTED rather than joining an unbounded queue behind a stuck backend."""

IMAGE_SERVICE_PREFIXES = ("/runtime.v1.ImageService/", "/runtime.v1alpha2.ImageService/")

# A server context without a deadline reports the time left to gRPC's "infinite future" (centuries);
# anything beyond this is no deadline at all.
_NO_DEADLINE_SECONDS = 10 * 365 * 24 * 3600.0
# Rich error details (google.rpc.Status) travel in this reserved trailer; the other grpc-* keys belong
# to the transport and are rebuilt by each hop.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_HOP_BY_HOP_KEYS = frozenset({"user-agent", "content-type", "te", "host"})

Metadata = Sequence[tuple[str, str | bytes]]
UnaryFunction = Callable[[bytes, grpc.ServicerContext], bytes]


class UnaryCall(Protocol):
    """A backend unary call in flight: ``result()`` (on the thread that made it) waits for the call's end and
    gives the response, or raises ``grpc.RpcError``; any thread may ``cancel`` it."""

    def result(self) -> bytes: ...
    def cancel(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def initial_metadata(self) -> Metadata | None: ...
    def trailing_metadata(self) -> Metadata | None: ...


class StreamCall(Iterator[bytes], Protocol):
    """A backend streaming call: iterate it for the responses; it is also a ``grpc.Call``."""

    def cancel(self) -> bool: ...
    def initial_metadata(self) -> Metadata | None: ...
    def trailing_metadata(self) -> Metadata | None: ...


def unix_target(endpoint: str) -> str:
    """The gRPC target of a unix socket given as a path, ``unix:PATH`` or ``unix://ABSOLUTE-PATH``."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://") :]
    elif endpoint.startswith("unix:"):
        path = endpoint[len("unix:") :]
    elif "://" in endpoint:
        raise ValueError(f"not a unix socket endpoint: {endpoint!r}")
    else:
        path = endpoint
    if not path:
        raise ValueError(f"not a unix socket endpoint: {endpoint!r}")
    return f"unix:{os.path.abspath(path)}"


def _known_unary_methods() -> frozenset[str]:
    return frozenset(
        f"/{service.full_name}/{method.name}"
        for service in cri.DESCRIPTOR.services_by_name.values()
        for method in service.methods
        if not method.client_streaming and not method.server_streaming
    )


KNOWN_UNARY_METHODS = _known_unary_methods()
"""Full names of the unary methods of our ``runtime.v1`` subset; other methods are relayed as streams."""


def _known_methods() -> frozenset[str]:
    names = [(service.name, method.name) for service in cri.DESCRIPTOR.services_by_name.values()
             for method in service.methods]
    # runtime.v1alpha2 (containerd 1.6's older CRI) has the same services and method names.
    return frozenset(f"/{package}.{service}/{method}" for package in ("runtime.v1", "runtime.v1alpha2")
                     for service, method in names)


KNOWN_METHODS = _known_methods()
"""Every CRI method name a runtime serves (``runtime.v1`` and ``runtime.v1alpha2``): their callables are
cached for the proxy's life, the set being finite."""
UNKNOWN_METHODS_CACHED = 32
"""Callables kept for other method names, least recently used first out: the names come from callers, and a
client sending random method paths must not grow the proxy's memory."""


class _Callables:
    """Method name -> a reusable multi-callable: known CRI methods kept, any other name in a small LRU."""

    def __init__(self, make: Callable[[str], Any], unknown_limit: int = UNKNOWN_METHODS_CACHED) -> None:
        self._make = make
        self._known: dict[str, Any] = {}
        self._unknown: OrderedDict[str, Any] = OrderedDict()
        self._unknown_limit = unknown_limit
        self._lock = threading.Lock()

    def get(self, method: str) -> Any:
        with self._lock:
            if method in KNOWN_METHODS:
                found = self._known.get(method)
                if found is None:
                    found = self._known[method] = self._make(method)
                return found
            found = self._unknown.get(method)
            if found is not None:
                self._unknown.move_to_end(method)
                return found
            found = self._unknown[method] = self._make(method)
            while len(self._unknown) > self._unknown_limit:
                self._unknown.popitem(last=False)
            return found

    def __len__(self) -> int:
        with self._lock:
            return len(self._known) + len(self._unknown)


_STATUS_CODES: Mapping[int, grpc.StatusCode] = MappingProxyType({code.value[0]: code for code in grpc.StatusCode})
"""gRPC core's status numbers -> ``grpc.StatusCode``."""
ONE_BATCH_RELEASES = ("1.85.",)
"""gRPC releases whose Cython call API :class:`OneBatchCall` was written and tested against."""


def one_batch_supported(version: str = grpc.__version__) -> bool:
    """Whether unary calls may be made by :class:`OneBatchCall` with this gRPC release."""
    return _cygrpc is not None and version.startswith(ONE_BATCH_RELEASES)


class OneBatchError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """How a :class:`OneBatchCall` failed, as ``grpc.RpcError`` objects of failed calls tell it."""

    def __init__(self, code: grpc.StatusCode, details: str, initial: Metadata | None, trailing: Metadata | None
                 ) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details, self._initial, self._trailing = code, details, initial, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Metadata | None:
        return self._initial

    def trailing_metadata(self) -> Metadata | None:
        return self._trailing

    # grpc.Call's other methods: the call has ended.
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


class OneBatchCall:
    """A raw unary call as gRPC's blocking unary call makes it (all operations in one batch on a completion
    queue of the call's own, driven by the thread that waits), keeping the handle for a cancel from another
    thread (gRPC's Cython layer checks under the channel's lock that the call is still running)."""

    __slots__ = ("_call", "_cancelled", "_ended", "_initial", "_trailing")

    def __init__(self, channel: Any, method: bytes, handle: int | None, request: bytes, metadata: Metadata,
                 timeout: float | None) -> None:
        assert _cygrpc is not None
        cy = _cygrpc
        operations = (
            cy.SendInitialMetadataOperation(metadata, 0),
            cy.SendMessageOperation(request, 0),
            cy.SendCloseFromClientOperation(0),
            cy.ReceiveInitialMetadataOperation(0),
            cy.ReceiveMessageOperation(0),
            cy.ReceiveStatusOnClientOperation(0),
        )
        deadline = None if timeout is None else time.time() + timeout
        self._cancelled = self._ended = False
        self._initial: Metadata | None = None
        self._trailing: Metadata | None = None
        self._call = channel.segregated_call(cy.PropagationConstants.GRPC_PROPAGATE_DEFAULTS, method, None,
                                             deadline, metadata, None, ((operations, None),), None, handle)

    def result(self) -> bytes:
        response: bytes | None = None
        code, details = grpc.StatusCode.UNKNOWN, ""
        event = self._call.next_event()
        self._ended = True
        for operation in event.batch_operations:
            kind = operation.type()
            if kind == _cygrpc.OperationType.receive_initial_metadata:
                self._initial = operation.initial_metadata()
            elif kind == _cygrpc.OperationType.receive_message:
                response = operation.message()
            elif kind == _cygrpc.OperationType.receive_status_on_client:
                self._trailing = operation.trailing_metadata()
                code = _STATUS_CODES.get(operation.code(), grpc.StatusCode.UNKNOWN)
                details = operation.details()
        if code is not grpc.StatusCode.OK:
            raise OneBatchError(code, details, self._initial, self._trailing)
        # A backend that answers OK without a message: None goes on, as a unary call's result did (the proxy's
        # server then fails the caller's call, INTERNAL).
        return response  # type: ignore[return-value]

    def cancel(self) -> bool:
        """False once the call has ended (then nothing happens), as for gRPC's own calls."""
        if self._ended:
            return False
        self._cancelled = True
        self._call.cancel(_cygrpc.StatusCode.cancelled, "Locally cancelled by application!")
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def initial_metadata(self) -> Metadata | None:
        return self._initial

    def trailing_metadata(self) -> Metadata | None:
        return self._trailing


class _StreamedUnaryCall:
    """The public fallback: a unary call made as a single-threaded unary-stream call."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    def result(self) -> bytes:
        return unary_response(self._call)

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def cancelled(self) -> bool:
        return bool(self._call.cancelled())

    def initial_metadata(self) -> Metadata | None:
        return self._call.initial_metadata()  # type: ignore[no-any-return]

    def trailing_metadata(self) -> Metadata | None:
        return self._call.trailing_metadata()  # type: ignore[no-any-return]


class Backend:
    """Channels to the runtime's RuntimeService and ImageService endpoints (one channel if they agree)."""

    def __init__(self, runtime_endpoint: str, image_endpoint: str | None = None, one_batch: bool | None = None
                 ) -> None:
        """``one_batch``: make unary calls with :class:`OneBatchCall` (default: when
        :func:`one_batch_supported`)."""
        self.runtime_target = unix_target(runtime_endpoint)
        self.image_target = unix_target(image_endpoint) if image_endpoint else self.runtime_target
        # Public for callers that need a typed stub on the runtime (the proxy's checkpoint rebuild).
        self.runtime_channel: Any = grpc.insecure_channel(self.runtime_target, options=CHANNEL_OPTIONS)
        self.image_channel: Any = (
            self.runtime_channel
            if self.image_target == self.runtime_target
            else grpc.insecure_channel(self.image_target, options=CHANNEL_OPTIONS)
        )
        # Multi-callables are reusable and thread-safe.
        # Known CRI methods are registered with gRPC core (a call then skips core's per-call method lookup); other
        # names come from callers and are not, as core keeps every registered name for the channel's life.
        self._unary = _Callables(lambda method: self.channel_for(method).unary_stream(
            method, _registered_method=method in KNOWN_METHODS))
        self._stream = _Callables(lambda method: self.channel_for(method).stream_stream(
            method, _registered_method=method in KNOWN_METHODS))
        self.one_batch = one_batch_supported() if one_batch is None else one_batch
        # Method name -> (its bytes, the registered-call handle of a known CRI method or None), for OneBatchCall.
        self._one_batch = _Callables(self._one_batch_target)

    def _one_batch_target(self, method: str) -> tuple[Any, bytes, int | None]:
        channel = self.channel_for(method)
        handle = channel._get_registered_call_handle(method) if method in KNOWN_METHODS else None
        return channel._channel, method.encode(), handle

    def channel_for(self, method: str) -> Any:
        """The channel that serves ``method`` (a full name, ``/package.Service/Method``)."""
        return self.image_channel if method.startswith(IMAGE_SERVICE_PREFIXES) else self.runtime_channel

    def unary_call(self, method: str, request: bytes, metadata: Metadata, timeout: float | None) -> UnaryCall:
        """Start a raw unary call; its ``result()`` gives the response bytes or raises ``grpc.RpcError``."""
        if self.one_batch:
            channel, name, handle = self._one_batch.get(method)
            return OneBatchCall(channel, name, handle, request, metadata, timeout)
        return _StreamedUnaryCall(self._unary.get(method)(request, timeout=timeout, metadata=metadata))

    def unary(self, method: str, request: bytes, metadata: Metadata, timeout: float | None) -> bytes:
        """A raw unary call: response bytes, or ``grpc.RpcError``."""
        return self.unary_call(method, request, metadata, timeout).result()

    def stream(
        self, method: str, request_iterator: Iterable[bytes], metadata: Metadata, timeout: float | None
    ) -> StreamCall:
        """A raw ``stream_stream`` call; iterating it raises ``grpc.RpcError`` when the call fails."""
        callable_ = self._stream.get(method)
        call: StreamCall = callable_(iter(request_iterator), timeout=timeout, metadata=metadata)
        return call

    def cached_callables(self) -> int:
        """How many method callables the backend holds (bounded: see :data:`UNKNOWN_METHODS_CACHED`)."""
        return len(self._unary) + len(self._stream) + len(self._one_batch)

    def close(self) -> None:
        self.runtime_channel.close()
        if self.image_channel is not self.runtime_channel:
            self.image_channel.close()

    def __enter__(self) -> Backend:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- relaying


def unary_response(call: Iterator[bytes]) -> bytes:
    """The one response of ``call``, once the call has ended (so its status and trailing metadata are in);
    raises ``grpc.RpcError`` when it failed.  A backend that answers OK without a message gets None through,
    as a unary call's ``result()`` did (the proxy's server then fails the caller's call, INTERNAL)."""
    response = next(call, None)
    for _ in call:  # reads the status; a second message (a broken backend's) is dropped, not waited on
        pass
    return response  # type: ignore[return-value]


def forwardable_metadata(metadata: Metadata | None) -> tuple[tuple[str, str | bytes], ...]:
    """Caller metadata to hand on: without HTTP/2 pseudo-headers, transport keys and ``grpc-*`` keys."""
    return tuple(
        (key, value)
        for key, value in metadata or ()
        if not key.startswith((":", "grpc-")) and key not in _HOP_BY_HOP_KEYS
    )


def _returnable_metadata(metadata: Metadata | None) -> tuple[tuple[str, str | bytes], ...]:
    return tuple(
        (key, value)
        for key, value in metadata or ()
        if key == _STATUS_DETAILS_KEY or (not key.startswith((":", "grpc-")) and key not in _HOP_BY_HOP_KEYS)
    )


def deadline_of(context: grpc.ServicerContext) -> float | None:
    """Seconds left of the caller's deadline, or None when the caller set none."""
    remaining: float | None = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE_SECONDS:
        return None
    return max(remaining, 0.0)


def _send_initial_metadata(context: grpc.ServicerContext, metadata: Metadata | None) -> None:
    relayed = _returnable_metadata(metadata)
    if relayed:
        # An interceptor may already have sent its own; the first one wins.
        with contextlib.suppress(ValueError):
            context.send_initial_metadata(relayed)


def _abort_like(context: grpc.ServicerContext, error: grpc.RpcError) -> NoReturn:
    """End the caller's RPC with the backend's status code, details and trailing metadata."""
    trailing = _returnable_metadata(getattr(error, "trailing_metadata", lambda: None)())
    if trailing:
        context.set_trailing_metadata(trailing)
    code = getattr(error, "code", lambda: None)() or grpc.StatusCode.UNKNOWN
    details = getattr(error, "details", lambda: None)() or ""
    context.abort(code, details)
    raise AssertionError("grpc.ServicerContext.abort returned")  # pragma: no cover


def forward_unary(backend: Backend, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Send ``request`` (raw bytes) to the backend as the caller's ``method`` and return the raw response.

    The caller's metadata and remaining deadline go along; a cancelled caller cancels the backend call;
    a backend error ends the caller's RPC with the same code, details and trailing metadata (this
    function then raises, as ``context.abort`` does).
    """
    call = backend.unary_call(
        method, request, forwardable_metadata(context.invocation_metadata()), deadline_of(context)
    )
    context.add_callback(call.cancel)
    try:
        response = call.result()
    except grpc.RpcError as error:
        if call.cancelled():
            context.abort(grpc.StatusCode.CANCELLED, "cancelled by the caller")
            raise AssertionError("grpc.ServicerContext.abort returned") from None  # pragma: no cover
        _abort_like(context, error)
    _send_initial_metadata(context, call.initial_metadata())
    trailing = _returnable_metadata(call.trailing_metadata())
    if trailing:
        context.set_trailing_metadata(trailing)
    return response


def forward_stream(
    backend: Backend, method: str, request_iterator: Iterator[bytes], context: grpc.ServicerContext
) -> Iterator[bytes]:
    """Relay a call of any cardinality as a ``stream_stream`` call, message by message, in order."""
    call = backend.stream(
        method, request_iterator, forwardable_metadata(context.invocation_metadata()), deadline_of(context)
    )
    context.add_callback(call.cancel)
    headers_sent = False
    try:
        for response in call:
            if not headers_sent:
                _send_initial_metadata(context, call.initial_metadata())
                headers_sent = True
            yield response
    except grpc.RpcError as error:
        _abort_like(context, error)
    if not headers_sent:
        _send_initial_metadata(context, call.initial_metadata())
    trailing = _returnable_metadata(call.trailing_metadata())
    if trailing:
        context.set_trailing_metadata(trailing)


class PassthroughHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Serves every method: intercepted ones by their function, the rest relayed to the backend as bytes."""

    def __init__(self, backend: Backend, intercepted: Mapping[str, UnaryFunction] = MappingProxyType({})) -> None:
        self.backend = backend
        self._handlers: dict[str, Any] = {
            method: grpc.unary_unary_rpc_method_handler(self._unary_forwarder(method)) for method in KNOWN_UNARY_METHODS
        }
        for method, function in intercepted.items():
            self._handlers[method] = grpc.unary_unary_rpc_method_handler(function)

    def by_service(self) -> dict[str, dict[str, Any]]:
        """The handlers of the methods it knows (CRI and intercepted: a fixed set), by service and method name."""
        services: dict[str, dict[str, Any]] = {}
        for method, handler in self._handlers.items():
            service, _, name = method[1:].partition("/")
            services.setdefault(service, {})[name] = handler
        return services

    def _unary_forwarder(self, method: str) -> UnaryFunction:
        backend = self.backend

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            return forward_unary(backend, method, request, context)

        return forward

    def _stream_forwarder(self, method: str) -> Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[bytes]]:
        backend = self.backend

        def forward(request_iterator: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            return forward_stream(backend, method, request_iterator, context)

        return forward

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is not None:
            return handler
        # Not cached: the names come from callers, and building the handler costs less than the call.
        return grpc.stream_stream_rpc_method_handler(self._stream_forwarder(method))


# ---------------------------------------------------------------------------------------------- serving


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
    os.unlink(path)


def serve(socket_path: str, handler: grpc.GenericRpcHandler, max_workers: int = DEFAULT_MAX_WORKERS) -> grpc.Server:
    """Serve ``handler`` on the unix socket ``socket_path`` (mode 0660), started; stop it with ``stop()``.

    A socket file left by a previous run is replaced; any other file at that path is an error. Every
    streaming call holds one of the ``max_workers`` threads for its whole life; at most
    ``max_workers * QUEUED_CALLS_PER_WORKER`` calls are admitted at once.
    """
    path = os.path.abspath(socket_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _remove_stale_socket(path)
    server: Any = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="runtimeproxy"),
        handlers=[handler],
        options=SERVER_OPTIONS,
        maximum_concurrent_rpcs=max_workers * QUEUED_CALLS_PER_WORKER,
    )
    if isinstance(handler, PassthroughHandler):
        # Registered with gRPC core, a known method's call is matched by core and skips the generic lookup.
        for service, handlers in handler.by_service().items():
            server.add_registered_method_handlers(service, handlers)
    try:
        bound = server.add_insecure_port(f"unix:{path}")
    except RuntimeError as exc:
        raise OSError(f"cannot bind unix:{path}: {exc}") from None
    if not bound:
        raise OSError(f"cannot bind unix:{path}")
    server.start()
    try:
        os.chmod(path, SOCKET_MODE)
    except BaseException:
        server.stop(None)
        raise
    return server
