"""ttrpc over NRI's multiplexed socket, on asyncio: one :class:`MuxSession` per connection.

The plugin is the ttrpc *server* on conn 1 (the runtime calls ``nri.pkg.api.v1alpha1.Plugin``) and a
ttrpc *client* on conn 2 (it calls ``Runtime/RegisterPlugin``).  What the wire can throw at us and what
we do, following ttrpc's server (``server.go``, ``channel.go``):

* a request over 4 MiB: its body is skipped unread and the stream answered ResourceExhausted, unless the
  ``oversize`` callback supplies an answer (the plugin answers the handshake's Synchronize, whose content
  it does not need, so a node with huge annotations still gets a working plugin: Koordinator #2678);
* a request that is not a ``ttrpc.Request`` protobuf: InvalidArgument; an unknown service or method:
  Unimplemented (the handler raises :class:`TtrpcError`);
* an unknown message type, or a response/data message on the server conn: dropped;
* a response on the client conn for a stream nobody waits for: dropped;
* a mux frame over the mux cap, or EOF: the session ends; the caller reconnects.

Requests are served concurrently, one task each, started in arrival order: a request waiting for a slow
answer must not hold the ones behind it past the runtime's timeout (containerd times each request from
when it sent it).  At most :data:`MAX_CONCURRENT_REQUESTS` are in flight; more are answered
ResourceExhausted at once.

Outgoing messages are cut into mux frames of at most 4096 bytes (see :data:`.frames.MUX_SEND_FRAME_MAX`)
and written with one ``write`` each, so frames of two messages never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from google.protobuf.message import DecodeError

from koordlet.apis.proto.ttrpc import request_pb2
from koordlet.runtimehooks.nri import frames
from koordlet.runtimehooks.nri.frames import MessageType

log = logging.getLogger(__name__)

OK = 0
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
_READ_SIZE = 1 << 16
MAX_CONCURRENT_REQUESTS = 64


class TtrpcError(Exception):
    """A ttrpc call's non-OK status (code from google.rpc.Code)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


class SessionClosed(ConnectionError):
    """The connection ended while a call waited for its answer."""


Handler = Callable[[str, str, bytes], Awaitable[bytes]]
"""(service, method, request payload) -> response payload; raises :class:`TtrpcError` for a status."""
Oversize = Callable[[int], "bytes | None"]
"""stream id of a request over 4 MiB -> an answer payload, or None for ResourceExhausted."""


@dataclass(eq=False, repr=False)
class MuxSession:
    """One connection to the runtime: serves its requests on conn 1, makes calls to it on conn 2."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    handler: Handler
    _: KW_ONLY
    oversize: Oversize | None = None
    max_frame: int = frames.MUX_SEND_FRAME_MAX
    _mux: frames.MuxDecoder = field(default_factory=frames.MuxDecoder, init=False)
    _server: frames.MessageDecoder = field(default_factory=frames.MessageDecoder, init=False)
    """Requests from the runtime (conn 1)."""
    _client: frames.MessageDecoder = field(default_factory=frames.MessageDecoder, init=False)
    """Answers to our calls (conn 2)."""
    _ids: frames.StreamIdAllocator = field(default_factory=frames.StreamIdAllocator, init=False)
    _pending: dict[int, asyncio.Future[bytes]] = field(default_factory=dict, init=False)
    """Stream id of a call -> the future its answer settles."""
    _serving: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    """The tasks answering requests now (bounded by :data:`MAX_CONCURRENT_REQUESTS`)."""
    _closed: bool = field(default=False, init=False)

    # --- sending ----------------------------------------------------------------------------------------

    def _send(self, conn_id: int, stream_id: int, message_type: MessageType, payload: bytes) -> None:
        if self._closed:
            raise SessionClosed("NRI connection is closed")
        data = frames.encode_message(stream_id, message_type, payload)
        self.writer.write(frames.encode_mux(conn_id, data, self.max_frame))

    def _respond(self, stream_id: int, code: int, message: str, payload: bytes = b"") -> None:
        response = request_pb2.Response(payload=payload)
        if code != OK:
            response.status.code = code
            response.status.message = message
        self._send(frames.PLUGIN_SERVICE_CONN, stream_id, MessageType.RESPONSE, response.SerializeToString())

    async def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """One unary call to the runtime on conn 2."""
        stream_id = self._ids.allocate()
        request = request_pb2.Request(service=service, method=method, payload=payload,
                                      timeout_nano=int(timeout * 1e9))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            self._send(frames.RUNTIME_SERVICE_CONN, stream_id, MessageType.REQUEST, request.SerializeToString())
            await self.writer.drain()
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TtrpcError(DEADLINE_EXCEEDED, f"{service}/{method}: no answer in {timeout:g} s") from None
        finally:
            self._pending.pop(stream_id, None)

    # --- receiving --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reads and serves until EOF or a broken trunk; then fails pending calls and returns."""
        try:
            while True:
                data = await self.reader.read(_READ_SIZE)
                if not data:
                    return
                for frame in self._mux.feed(data):
                    if frame.conn_id == frames.PLUGIN_SERVICE_CONN:
                        self._server.feed(frame.payload)
                        await self._serve()
                    elif frame.conn_id == frames.RUNTIME_SERVICE_CONN:
                        self._client.feed(frame.payload)
                        self._answers()
                    # mux.go drops frames of conns nobody opened; so do we.
                await self.writer.drain()
        except frames.MuxFrameTooLarge as exc:
            log.warning("NRI connection broken", extra={"error": str(exc)})
        finally:
            self.close()

    async def _serve(self) -> None:
        while True:
            try:
                message = self._server.next_message()
            except frames.MessageTooLarge as exc:
                answer = self.oversize(exc.stream_id) if self.oversize is not None else None
                if answer is None:
                    log.warning("NRI request refused", extra={"stream": exc.stream_id, "error": str(exc)})
                    self._respond(exc.stream_id, RESOURCE_EXHAUSTED, str(exc))
                else:
                    self._respond(exc.stream_id, OK, "", answer)
                continue
            except frames.UnknownMessageType as exc:
                log.warning("NRI message dropped", extra={"stream": exc.stream_id, "error": str(exc)})
                continue
            if message is None:
                return
            if message.type is not MessageType.REQUEST:
                continue
            if len(self._serving) >= MAX_CONCURRENT_REQUESTS:
                self._respond(message.stream_id, RESOURCE_EXHAUSTED,
                              f"{len(self._serving)} requests in flight; try again")
                continue
            task = asyncio.create_task(self._request(message.stream_id, message.payload))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _request(self, stream_id: int, raw: bytes) -> None:
        # SessionClosed: the connection ended while the handler worked, nobody to answer.
        with contextlib.suppress(SessionClosed):
            await self._answer(stream_id, raw)

    async def _answer(self, stream_id: int, raw: bytes) -> None:
        request = request_pb2.Request()
        try:
            request.ParseFromString(raw)
        except DecodeError as exc:
            self._respond(stream_id, INVALID_ARGUMENT, f"not a ttrpc request: {exc}")
            return
        try:
            payload = await self.handler(request.service, request.method, request.payload)
        except TtrpcError as exc:
            self._respond(stream_id, exc.code, exc.message)
            return
        except Exception as exc:  # a handler bug answers this request, it does not end the session
            log.exception("NRI request failed", extra={"service": request.service, "method": request.method})
            self._respond(stream_id, INTERNAL, f"{request.method}: {exc}")
            return
        self._respond(stream_id, OK, "", payload)

    def _answers(self) -> None:
        while True:
            try:
                message = self._client.next_message()
            except frames.FrameError as exc:
                log.warning("NRI answer dropped", extra={"error": str(exc)})
                continue
            if message is None:
                return
            future = self._pending.get(message.stream_id)
            if message.type is not MessageType.RESPONSE or future is None or future.done():
                continue
            response = request_pb2.Response()
            try:
                response.ParseFromString(message.payload)
            except DecodeError as exc:
                future.set_exception(TtrpcError(INTERNAL, f"garbage ttrpc response: {exc}"))
                continue
            if response.status.code != OK:
                future.set_exception(TtrpcError(response.status.code, response.status.message))
            else:
                future.set_result(response.payload)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._serving):
            task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SessionClosed("NRI connection closed before the answer"))
        self.writer.close()

    @property
    def closed(self) -> bool:
        return self._closed
