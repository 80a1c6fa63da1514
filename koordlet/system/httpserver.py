"""HTTP/1.1 servers that hold under abuse: a thread per connection up to a cap, deadlines on every read, and
request bodies read only up to a size cap.

The standard library's ``ThreadingHTTPServer`` starts a thread for every connection it accepts and reads with
no deadline, so a client that opens connections and never finishes its headers (slowloris) holds a thread
each, forever.  :class:`LimitedHTTPServer` bounds both:

- at most ``max_connections`` connections are served at once; one more is answered ``503`` (written without
  blocking the accept loop) and closed, so the thread count stays bounded whatever the clients do;
- a kept-alive connection waiting for its next request is closed after ``idle_timeout_seconds``;
- from the first byte of a request, its request line and headers must arrive within
  ``header_timeout_seconds`` in total (not per read: one byte every few seconds does not keep it alive), and
  its body within ``body_timeout_seconds``; a response must be written within ``write_timeout_seconds``;
- :meth:`LimitedRequestHandler.read_body` refuses a body over the cap with ``413`` before reading it when
  ``Content-Length`` says so, and after at most the cap when it arrives chunked;
- :meth:`LimitedRequestHandler.request_slot` bounds how many requests are read and answered at once (the
  memory their bodies and decoded documents take), waiting a little for a slot and answering ``503``
  otherwise.

Header lines and counts are bounded by ``http.server`` itself (64 KiB per line, 100 headers: ``431``).

Its serving loop sleeps until a connection arrives or :meth:`LimitedHTTPServer.shutdown` wakes it: socketserver's
own loop wakes every ``poll_interval`` to look for a stop request, which on an idle node agent is most of the
serving thread's cost.
"""

from __future__ import annotations

import contextlib
import io
import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from koordlet.errors import ConfigError, KoordletError

_READ_BUFFER_BYTES: Final = 64 * 1024
_MAX_CHUNK_LINE_BYTES: Final = 1024
"""A chunk-size line (hex size and extensions); anything longer is not a client we serve."""
_MAX_TRAILER_LINES: Final = 100
_DRAIN_BYTES: Final = 4 * 1024 * 1024
_DRAIN_SECONDS: Final = 1.0
"""After refusing a body, what is still arriving is read and dropped for this long (at most _DRAIN_BYTES) before
the connection closes: closing with unread data sends a reset, which can destroy the answer before the
client reads it (Go's net/http lingers the same way)."""


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """How much one HTTP server lets its clients take."""

    max_connections: int = 64
    """Connections served at once, one thread each; one more is answered 503 and closed at once."""
    idle_timeout_seconds: float = 60.0
    """A kept-alive connection with no next request is closed after this long."""
    header_timeout_seconds: float = 10.0
    """Request line and headers must arrive within this long of the request's first byte."""
    body_timeout_seconds: float = 30.0
    """A request body must arrive within this long of the end of its headers (408 otherwise)."""
    write_timeout_seconds: float = 30.0
    """A response must be taken by the client within this long, or the connection is dropped."""
    max_body_bytes: int = 1024 * 1024
    """Largest request body :meth:`LimitedRequestHandler.read_body` accepts (413 beyond)."""
    max_active_requests: int | None = None
    """Requests read and answered at once (:meth:`LimitedRequestHandler.request_slot`); None: no bound
    beyond ``max_connections``."""
    slot_wait_seconds: float = 5.0
    """How long a request waits for one of ``max_active_requests`` before it is answered 503."""

    def __post_init__(self) -> None:
        for name in ("idle_timeout_seconds", "header_timeout_seconds", "body_timeout_seconds",
                     "write_timeout_seconds", "slot_wait_seconds"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"server limits: {name} must be positive, got {value!r}")
        if self.max_connections < 1:
            raise ConfigError(f"server limits: max_connections must be at least 1, got {self.max_connections}")
        if self.max_body_bytes < 0:
            raise ConfigError(f"server limits: max_body_bytes must not be negative, got {self.max_body_bytes}")
        if self.max_active_requests is not None and self.max_active_requests < 1:
            raise ConfigError("server limits: max_active_requests must be at least 1 (or None), got "
                              f"{self.max_active_requests}")


class RequestRefused(KoordletError):
    """A request the server answers with ``status`` and ``message`` instead of serving it."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _DeadlineReader(io.RawIOBase):
    """The connection's receive side, failing with TimeoutError once ``deadline`` (monotonic) has passed:
    a socket timeout alone restarts with every byte received."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = float("inf")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:  # a writable buffer (typeshed's WriteableBuffer)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


_BUSY_BODY: Final = b"server busy: too many connections, retry later\n"
_BUSY: Final = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
                + _BUSY_BODY)


class LimitedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with :class:`ServerLimits`; use it with a :class:`LimitedRequestHandler`."""

    daemon_threads = True  # a connection in flight must not hold up shutdown
    request_queue_size = 128  # excess connections are refused by answer, not left in the backlog
    timeout = 1.0
    """How long ``handle_request`` waits when the connection that woke the loop is gone before it is accepted."""

    def __init__(self, server_address: Any, handler_class: type[LimitedRequestHandler],
                 limits: ServerLimits | None = None, bind_and_activate: bool = True) -> None:
        self.limits = limits if limits is not None else ServerLimits()
        self._active = 0
        self._active_lock = threading.Lock()
        self.refused_connections = 0
        """Connections answered 503 because ``max_connections`` were being served."""
        bound = self.limits.max_active_requests
        self.request_slots = threading.BoundedSemaphore(bound) if bound is not None else None
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        super().__init__(server_address, handler_class, bind_and_activate)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serves until :meth:`shutdown`, asleep in between (``poll_interval`` is socketserver's, unused)."""
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.fileno(), selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while not self._stop_requested.is_set():
                    ready = selector.select()
                    if self._stop_requested.is_set():
                        break
                    if any(key.fd == self.fileno() for key, _ in ready):
                        self.handle_request()
                    self.service_actions()
        finally:
            self._stop_requested.clear()
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 64):  # until empty (BlockingIOError): the pipe never ends
                    pass
            self._stopped.set()

    def shutdown(self) -> None:
        """Stops :meth:`serve_forever` and waits for it to return; when it is not serving (yet), the next
        call returns at once."""
        self._stop_requested.set()
        with contextlib.suppress(OSError):  # a full pipe is already a wake-up; a closed server has no loop
            os.write(self._wake_w, b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1

    @property
    def active_connections(self) -> int:
        with self._active_lock:
            return self._active

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        # http.server sends the headers and the body in two writes: with Nagle's algorithm on, the body waits for
        # the client's delayed ACK of the headers (40 ms on Linux) on every request of a kept-alive connection.
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            admitted = self._active < self.limits.max_connections
            if admitted:
                self._active += 1
            else:
                self.refused_connections += 1
        if not admitted:
            # On the accept loop: a fresh socket's send buffer takes the short answer without blocking.
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1


class LimitedRequestHandler(BaseHTTPRequestHandler):
    """A request handler whose reads have deadlines (see :class:`LimitedHTTPServer`)."""

    server: LimitedHTTPServer

    def setup(self) -> None:
        super().setup()
        # Replace the plain socket file with one whose reads observe a deadline; the old file is closed so the
        # socket is really closed when the server is done with it.
        self.rfile.close()
        self._reader = _DeadlineReader(self.connection)
        self._buffered = io.BufferedReader(self._reader, _READ_BUFFER_BYTES)
        self.rfile = self._buffered
        self._unread_body = False

    def finish(self) -> None:
        super().finish()
        if self._unread_body:
            self._drain()

    def _drain(self) -> None:
        deadline = time.monotonic() + _DRAIN_SECONDS
        dropped = 0
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)  # the answer is complete: the client sees EOF
            while dropped < _DRAIN_BYTES and (remaining := deadline - time.monotonic()) > 0:
                self.connection.settimeout(remaining)
                got = len(self.connection.recv(_READ_BUFFER_BYTES))
                if not got:
                    return
                dropped += got

    def handle_one_request(self) -> None:
        limits = self.server.limits
        self._reader.deadline = time.monotonic() + limits.idle_timeout_seconds
        try:
            pending = self._buffered.peek(1)
        except OSError:  # TimeoutError (idle too long) or the peer reset the connection
            pending = b""
        if not pending:
            self.close_connection = True
            return
        self._reader.deadline = time.monotonic() + limits.header_timeout_seconds
        self._parsed = self._body_read = False
        super().handle_one_request()
        if self._parsed and not self._body_read and self._has_body():
            # The handler did not want the body: it cannot be told from a next request, so the connection ends.
            self.close_connection = True
            self._unread_body = True

    def parse_request(self) -> bool:
        self._parsed = super().parse_request()
        return self._parsed

    def _has_body(self) -> bool:
        length = (self.headers.get("Content-Length") or "").strip()
        return bool(self.headers.get("Transfer-Encoding")) or length not in ("", "0")

    def end_headers(self) -> None:
        # The response is written with a deadline of its own (sendall's timeout is the total since 3.5).
        self.connection.settimeout(self.server.limits.write_timeout_seconds)
        super().end_headers()

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        """One whole answer: status line, ``Content-Type``, ``Content-Length`` (``Connection: close`` when this
        connection ends after it) and the body."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    @contextlib.contextmanager
    def request_slot(self) -> Iterator[None]:
        """Holds one of the server's ``max_active_requests`` while the body is read and answered; raises
        RequestRefused(503) when none frees up within ``slot_wait_seconds``."""
        slots = self.server.request_slots
        if slots is None:
            yield
            return
        if not slots.acquire(timeout=self.server.limits.slot_wait_seconds):
            self.close_connection = True  # the unread body would be taken for the next request
            self._unread_body = True
            raise RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE, "server busy: too many requests in progress, "
                                                                 "retry later")
        try:
            yield
        finally:
            slots.release()

    def read_body(self, max_bytes: int | None = None, length_required: bool = True) -> bytes | bytearray:
        """The request body (``Content-Length`` or chunked), at most ``max_bytes`` (the server's
        ``max_body_bytes`` by default).  Raises RequestRefused naming what was wrong: 413 over the cap (the
        rest is never read), 411 without a length when ``length_required``, 400 for a malformed or truncated
        body, 408 when it does not arrive within ``body_timeout_seconds``.  After a refusal the connection
        is closed (what is left of the body cannot be told from a next request)."""
        limit = self.server.limits.max_body_bytes if max_bytes is None else max_bytes
        self._reader.deadline = time.monotonic() + self.server.limits.body_timeout_seconds
        try:
            body = self._read_limited_body(limit, length_required)
        except RequestRefused:
            self.close_connection = True
            self._unread_body = True
            raise
        except TimeoutError:
            self.close_connection = True
            raise RequestRefused(HTTPStatus.REQUEST_TIMEOUT, "request body not received within "
                                 f"{self.server.limits.body_timeout_seconds:g} s") from None
        self._body_read = True
        return body

    def _read_limited_body(self, limit: int, length_required: bool) -> bytes | bytearray:
        encodings = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if encodings:
            if lengths:  # RFC 9112 6.3: a request smuggling attempt or a broken client; either way, refused
                raise RequestRefused(HTTPStatus.BAD_REQUEST, "both Transfer-Encoding and Content-Length given")
            coding = ",".join(encodings).strip().lower()
            if coding != "chunked":
                raise RequestRefused(HTTPStatus.NOT_IMPLEMENTED,
                                     f"Transfer-Encoding {coding!r}: only chunked is supported")
            return self._read_chunked(limit)
        if not lengths:
            if length_required:
                raise RequestRefused(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header (or a chunked body) "
                                                                 "is required")
            return b""
        text = lengths[0].strip()
        if len(set(lengths)) != 1 or not text.isascii() or not text.isdigit():
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"Content-Length: not one decimal number: {lengths!r}")
        length = int(text)
        if length > limit:
            raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                 f"request body of {length} bytes is over the limit of {limit} bytes")
        data = self.rfile.read(length)
        if len(data) != length:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"request body ended after {len(data)} of {length} bytes")
        return data

    def _read_chunked(self, limit: int) -> bytearray:
        body = bytearray()
        while True:
            line = self.rfile.readline(_MAX_CHUNK_LINE_BYTES)
            size_text = line.split(b";", 1)[0].strip()
            if (not line.endswith(b"\n") or not size_text or len(size_text) > 16
                    or any(c not in b"0123456789abcdefABCDEF" for c in size_text)):
                raise RequestRefused(HTTPStatus.BAD_REQUEST, f"chunked body: bad chunk-size line {line[:64]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > limit:
                raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                     f"chunked request body over the limit of {limit} bytes")
            remaining = size
            while remaining:  # in pieces: a chunk is never held twice
                piece = self.rfile.read(min(remaining, _READ_BUFFER_BYTES))
                if not piece:
                    raise RequestRefused(HTTPStatus.BAD_REQUEST, "chunked body: truncated chunk")
                body += piece
                remaining -= len(piece)
            if self.rfile.read(2) != b"\r\n":
                raise RequestRefused(HTTPStatus.BAD_REQUEST, "chunked body: chunk not followed by CRLF")
        for _ in range(_MAX_TRAILER_LINES):
            line = self.rfile.readline(_MAX_CHUNK_LINE_BYTES)
            if line in (b"\r\n", b"\n"):
                return body
            if not line.endswith(b"\n"):
                break
        raise RequestRefused(HTTPStatus.BAD_REQUEST, "chunked body: trailer section not terminated")
