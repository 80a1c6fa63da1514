"""The debug API server: HTTP/1.1 with JSON bodies on a unix socket, one thread per connection.

Paths and JSON shapes are :mod:`koordlet.debugapi.contract`.  Each endpoint is a small function over a
:class:`DebugSources` (callables and objects the agent assembles, fakes in tests) and answers from memory
or a few file reads: it never waits on the daemon's loops.  The socket is made mode 0600 in a directory
created 0700, so only root talks to it; a socket left by a dead koordlet is replaced, a live one or any
other file in its place stops the start-up.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlsplit

from koordlet.debugapi import contract
from koordlet.debugapi.cgroupview import HostCgroups, decode_written
from koordlet.debugapi.handlers import ROUTES, ApiError, DebugSources, Request, parse_query
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits
from koordlet.system.unixsocket import remove_stale_socket

__all__ = ["DEFAULT_LIMITS", "DebugServer", "DebugSources", "HostCgroups", "decode_written"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 64 * 1024
CONNECTION_TIMEOUT_SECONDS: Final = 10.0
"""An idle keep-alive connection is closed after this long, so its thread does not linger."""
DEFAULT_LIMITS: Final = ServerLimits(max_connections=16, idle_timeout_seconds=CONNECTION_TIMEOUT_SECONDS,
                                     header_timeout_seconds=10.0, body_timeout_seconds=10.0,
                                     write_timeout_seconds=30.0, max_body_bytes=MAX_BODY_BYTES)
"""Only root reaches the socket, but a stuck or looping client must not pile up threads in the daemon."""


class _Handler(LimitedRequestHandler):
    protocol_version = "HTTP/1.1"
    # A request line too garbled to carry a version still gets a status line and a JSON error, not the
    # bare body an HTTP/0.9 answer would be.
    default_request_version = "HTTP/1.1"
    server_version = "koordlet-debugapi"
    server: DebugServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            status_code, document = HTTPStatus.OK, self._answer(method)
        except ApiError as exc:
            status_code, document = exc.status, {"error": exc.message}
        except Exception as exc:
            log.exception("debug API request failed", extra={"path": self.path})
            status_code, document = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"}
        self._send(status_code, document)

    def _answer(self, method: str) -> dict[str, Any]:
        parts = urlsplit(self.path)
        route = ROUTES.get(parts.path)
        if route is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"unknown path {parts.path!r}")
        if route.method != method:
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{parts.path} takes {route.method}, not {method}")
        query = parse_query(parts.query, route.params)
        body = self._read_body() if method == "POST" else None
        return route.handler(self.server.sources, Request(query, body))

    def _read_body(self) -> Any:
        try:
            raw = self.read_body(length_required=False)  # up to the limits' max_body_bytes
        except RequestRefused as exc:
            raise ApiError(exc.status, f"body: {exc.message}") from None
        try:
            return json.loads(raw) if raw else None
        except (ValueError, RecursionError) as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"body: not JSON: {exc}") from None

    def _send(self, status_code: int, document: Mapping[str, Any]) -> None:
        data = json.dumps(document, default=str).encode()
        self.send_response(status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status_code == HTTPStatus.METHOD_NOT_ALLOWED:
            route = ROUTES.get(urlsplit(self.path).path)
            if route is not None:
                self.send_header("Allow", route.method)
        self.end_headers()
        self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (a garbage request line, an unsupported method) as JSON too."""
        text = message or explain or HTTPStatus(code).phrase
        data = json.dumps({"error": text}).encode()
        try:
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (HTTPStatus.NO_CONTENT,
                                                                       HTTPStatus.NOT_MODIFIED):
                self.wfile.write(data)
        finally:
            self.close_connection = True

    def address_string(self) -> str:
        return "unix"  # a unix socket's peer has no address (client_address is "")

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("debug API request", extra={"detail": format % args})


class DebugServer(LimitedHTTPServer):
    """The debug API on ``socket_path``; a daemon component (``debugapi``) started last and stopped first."""

    address_family = socket.AF_UNIX
    # A client keeping its connection open must not hold the daemon's stop up; idle ones time out.
    block_on_close = False
    name = "debugapi"

    def __init__(self, socket_path: str, sources: DebugSources, limits: ServerLimits = DEFAULT_LIMITS) -> None:
        self.socket_path = socket_path
        self.sources = sources
        self._thread: threading.Thread | None = None
        self._inode: int | None = None
        super().__init__(socket_path, _Handler, limits, bind_and_activate=False)

    def server_bind(self) -> None:
        # HTTPServer.server_bind splits the address into host and port, which a unix socket has not.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "localhost"
        self.server_port = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is its own business; anything else is logged (the base
        class prints to stderr)."""
        if isinstance(sys.exception(), ConnectionError):
            log.debug("debug API client went away", exc_info=True)
            return
        log.exception("debug API connection failed")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        """Binds the socket (mode 0600) and serves in a thread; raises when the path is taken."""
        self._prepare_path()
        try:
            self.server_bind()
            os.chmod(self.socket_path, contract.SOCKET_MODE)
            self._inode = os.stat(self.socket_path).st_ino
            self.server_activate()
        except BaseException:
            self.socket.close()
            raise

        def serve() -> None:
            try:
                self.serve_forever()
            except BaseException as exc:
                on_failure(exc)

        self._thread = threading.Thread(target=serve, name="debugapi", daemon=True)
        self._thread.start()
        log.info("debug API listening", extra={"socket": self.socket_path})

    def stop(self, timeout_seconds: float) -> None:
        if self._thread is not None:
            self.shutdown()  # wakes serve_forever and waits for it to return
            self._thread.join(timeout_seconds)
            self._thread = None
        self.server_close()
        self._remove_own_socket()

    def _prepare_path(self) -> None:
        parent = os.path.dirname(self.socket_path) or "."
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
        # --debug-socket= turns it off when another koordlet (or anything else) holds the path.
        remove_stale_socket(self.socket_path, "debug socket")

    def _remove_own_socket(self) -> None:
        # Only the socket this server made: a successor may already have replaced it.
        try:
            if self._inode is not None and os.lstat(self.socket_path).st_ino == self._inode:
                os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        self._inode = None
