"""LimitedHTTPServer: body framing and caps, deadlines, request slots, over a real loopback socket with an echo
handler."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import pytest

from koordlet.errors import ConfigError
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits
from tests.fixtures.waiting import wait_until

LIMITS = ServerLimits(max_connections=8, idle_timeout_seconds=5.0, header_timeout_seconds=5.0,
                      body_timeout_seconds=0.5, write_timeout_seconds=5.0, max_body_bytes=1000,
                      max_active_requests=1, slot_wait_seconds=0.2)


class Echo(LimitedRequestHandler):
    """POST answers the body's length and first bytes; GET answers ok; ``/hold`` keeps the request slot until
    the server's ``release`` is set."""

    protocol_version = "HTTP/1.1"
    server: EchoServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        nodelay = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        self._answer(HTTPStatus.OK, {"ok": True, "nodelay": bool(nodelay)})

    def do_POST(self) -> None:  # noqa: N802
        try:
            with self.request_slot():
                if self.path == "/hold":
                    self.server.holding.set()
                    self.server.release.wait(10)
                body = self.read_body()
        except RequestRefused as exc:
            self._answer(exc.status, {"error": exc.message})
            return
        self._answer(HTTPStatus.OK, {"length": len(body), "head": bytes(body[:20]).decode()})

    def _answer(self, status: HTTPStatus, document: dict[str, Any]) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class EchoServer(LimitedHTTPServer):
    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), Echo, LIMITS)


@pytest.fixture
def server() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def connect(server: EchoServer) -> socket.socket:
    return socket.create_connection(server.server_address[:2], timeout=10)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, json.loads(response.read()), response


def post(server: EchoServer, head: bytes, body: bytes = b"", path: bytes = b"/") -> tuple[int, dict[str, Any]]:
    with connect(server) as sock:
        sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body)
        status, document, _ = read_answer(sock)
        return status, document


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="header_timeout_seconds must be positive"):
        ServerLimits(header_timeout_seconds=0)
    with pytest.raises(ConfigError, match="max_connections must be at least 1"):
        ServerLimits(max_connections=0)
    with pytest.raises(ConfigError, match="max_active_requests"):
        ServerLimits(max_active_requests=0)


def test_accepted_connections_send_without_nagle_delay(server: EchoServer) -> None:
    # The answer leaves as two writes (headers, body); with Nagle on, the body waited for the client's delayed
    # ACK: 44 ms per request on a kept-alive connection (the scheduler extender's, the webhook's).
    with connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        status, document, _ = read_answer(sock)
    assert status == 200
    assert document["nodelay"] is True


def test_content_length_bodies(server: EchoServer) -> None:
    assert post(server, b"Content-Length: 5\r\n", b"hello") == (200, {"length": 5, "head": "hello"})
    assert post(server, b"Content-Length: 1000\r\n", b"a" * 1000)[1]["length"] == 1000
    status, document = post(server, b"Content-Length: 1001\r\n")
    assert (status, document["error"]) == (413, "request body of 1001 bytes is over the limit of 1000 bytes")
    assert post(server, b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello")[0] == 400


def test_chunked_bodies_with_extensions_and_trailers(server: EchoServer) -> None:
    body = b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    assert post(server, b"Transfer-Encoding: chunked\r\n", body) == (200, {"length": 11, "head": "hello world"})
    over = b"3e8\r\n" + b"a" * 1000 + b"\r\n1\r\nb\r\n0\r\n\r\n"  # 1,000 bytes, then one more
    status, document = post(server, b"Transfer-Encoding: chunked\r\n", over)
    assert (status, document["error"]) == (413, "chunked request body over the limit of 1000 bytes")


@pytest.mark.parametrize(("body", "message"), [
    (b"zz\r\nhello\r\n0\r\n\r\n", "bad chunk-size line"),
    (b"5\r\nhelloXX0\r\n\r\n", "chunk not followed by CRLF"),
    (b"-5\r\nhello\r\n0\r\n\r\n", "bad chunk-size line"),
])
def test_malformed_chunked_bodies_are_400(server: EchoServer, body: bytes, message: str) -> None:
    status, document = post(server, b"Transfer-Encoding: chunked\r\n", body)
    assert status == 400 and message in document["error"]


def test_a_body_that_does_not_arrive_is_408_and_the_connection_ends(server: EchoServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        status, document, _ = read_answer(sock)
        assert (status, document["error"]) == (408, "request body not received within 0.5 s")
        assert sock.recv(10) == b""  # closed: the rest of the body cannot be told from a next request


def test_keep_alive_serves_several_requests_on_one_connection(server: EchoServer) -> None:
    with connect(server) as sock:
        for text in (b"one", b"two"):
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n" + text)
            assert read_answer(sock)[:2] == (200, {"length": 3, "head": text.decode()})


def test_an_unread_body_ends_the_connection_after_the_answer(server: EchoServer) -> None:
    with connect(server) as sock:
        # GET with a body the handler never reads: its bytes must not be parsed as a next request.
        smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled))
        assert read_answer(sock)[:2] == (200, {"ok": True, "nodelay": True})
        assert sock.recv(100) == b""


def test_a_request_waits_briefly_for_a_slot_then_is_503(server: EchoServer) -> None:
    holder = connect(server)
    try:
        holder.sendall(b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        wait_until("the slot to be taken", server.holding.is_set)
        status, document = post(server, b"Content-Length: 2\r\n", b"hi")
        assert (status, document["error"]) == (503, "server busy: too many requests in progress, retry later")
        server.release.set()
        assert read_answer(holder)[:2] == (200, {"length": 2, "head": "hi"})
        assert post(server, b"Content-Length: 2\r\n", b"hi")[0] == 200
    finally:
        holder.close()


def test_connections_over_the_cap_are_answered_503(server: EchoServer) -> None:
    idle = [connect(server) for _ in range(LIMITS.max_connections)]
    try:
        wait_until("the cap to be reached", lambda: server.active_connections == LIMITS.max_connections)
        with connect(server) as extra:
            data = extra.recv(4096)
        assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"too many connections" in data
        assert server.refused_connections == 1
    finally:
        for sock in idle:
            sock.close()
    wait_until("the connections to be released", lambda: server.active_connections == 0)


class CountingServer(EchoServer):
    """Counts the serving loop's turns: socketserver's loop turns every ``poll_interval`` (and calls
    ``service_actions``) whether or not anything arrived."""

    def __init__(self) -> None:
        self.turns = 0
        super().__init__()

    def service_actions(self) -> None:
        self.turns += 1


def test_an_idle_server_sleeps_until_a_connection_or_shutdown() -> None:
    server = CountingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        stopped = threading.Event()
        stopped.wait(1.2)  # idle: socketserver's loop would have turned twice at its 0.5 s default
        assert server.turns == 0
        with connect(server) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            status, document, _ = read_answer(sock)
        assert (status, document["ok"]) == (200, True)
        # The loop turns once the request was handled, which may be just after the answer reached us.
        wait_until("the serving loop to turn for the connection", lambda: server.turns >= 1)
        assert server.turns == 1
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_shutdown_before_serving_stops_the_loop_that_starts_later() -> None:
    server = EchoServer()
    server.shutdown()  # returns at once: nothing is serving
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    thread.join(timeout=5)
    server.server_close()
    assert not thread.is_alive()
    server.shutdown()  # after close: nothing to wake, no error
