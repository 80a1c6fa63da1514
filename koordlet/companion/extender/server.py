"""The extender's HTTP server: ``POST .../filter``, ``POST .../prioritize`` and ``GET /healthz`` with bounded
bodies, deadlines and connections."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

from koordlet.companion.extender.loadaware import LoadAwareExtender
from koordlet.errors import ParseError
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Largest request body: ExtenderArgs of 5,000 node names is under 100 KiB; the full ``Nodes`` form of a
large cluster is tens of MiB and such a cluster configures the extender ``nodeCacheCapable`` (names only).
Decoded, a body takes several times its size, and the companion runs with a 512 MiB memory limit."""
MAX_ACTIVE_REQUESTS: Final = 2
"""Requests read, decoded and answered at once: the work holds the GIL anyway (kube-scheduler sends one pod's
filter, then its prioritize), and this bounds the memory of bodies in flight to twice the cap plus decoding."""
DEFAULT_LIMITS: Final = ServerLimits(max_connections=64, idle_timeout_seconds=90.0, header_timeout_seconds=10.0,
                                     body_timeout_seconds=30.0, write_timeout_seconds=30.0,
                                     max_body_bytes=MAX_BODY_BYTES, max_active_requests=MAX_ACTIVE_REQUESTS,
                                     slot_wait_seconds=10.0)
"""The extender's HTTP limits (kube-scheduler's default extender ``httpTimeout`` is 30 s)."""


class _Handler(LimitedRequestHandler):
    server: _ExtenderHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("extender request", extra={"client": self.client_address[0], "line": format % args})

    def _send(self, status: HTTPStatus, payload: Any, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        self.send_body(status, body, content_type)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, {"Error": message})

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        if self.path.split("?", 1)[0].rstrip("/") in ("/healthz", "/readyz"):
            self._send(HTTPStatus.OK, b"ok", "text/plain; charset=utf-8")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        # kube-scheduler posts to urlPrefix + "/" + verb; route on the verb whatever the prefix.
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        extender = self.server.extender
        handlers: dict[str, Callable[[Any], Any]] = {"filter": extender.filter, "prioritize": extender.prioritize_body}
        handler = handlers.get(verb)
        if handler is None:
            self.close_connection = True  # its body stays unread (and is drained before the close)
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path} (filter, prioritize)")
            return
        try:
            with self.request_slot():
                status, answer = self._answer(verb, handler, self.read_body())
        except RequestRefused as exc:
            status, answer = exc.status, {"Error": f"{verb}: {exc.message}"}
        self._send(status, answer)

    def _answer(self, verb: str, handler: Callable[[Any], Any], raw: bytes | bytearray) -> tuple[HTTPStatus, Any]:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            return HTTPStatus.BAD_REQUEST, {"Error": f"{verb}: request body is not valid JSON: {exc}"}
        try:
            return HTTPStatus.OK, handler(body)
        except (ParseError, RecursionError) as exc:
            return HTTPStatus.BAD_REQUEST, {"Error": f"{verb}: not ExtenderArgs: {exc}"}
        except Exception as exc:  # the scheduler gets an answer, the log the traceback
            log.exception("extender request failed", extra={"verb": verb})
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"Error": f"{verb}: internal error: {exc}"}


class _ExtenderHTTPServer(LimitedHTTPServer):
    def __init__(self, address: tuple[str, int], extender: LoadAwareExtender, limits: ServerLimits) -> None:
        super().__init__(address, _Handler, limits)
        self.extender = extender


def make_server(extender: LoadAwareExtender, host: str = "127.0.0.1", port: int = 0,
                limits: ServerLimits = DEFAULT_LIMITS) -> LimitedHTTPServer:
    """A bound (not yet serving) HTTP server for ``extender``; call ``serve_forever()`` in a thread and
    ``shutdown()`` then ``server_close()`` to stop.  Port 0 picks a free port (``server_address``).

    ``limits`` bounds connections, request time and body size (:data:`DEFAULT_LIMITS`)."""
    return _ExtenderHTTPServer((host, port), extender, limits)
