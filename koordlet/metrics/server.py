"""The metrics HTTP endpoint (Koordinator ``--addr=:9316``): ``/metrics``, ``/internal-metrics``,
``/external-metrics`` and ``/healthz``, served from a thread of the daemon.

Responses use the exposition format the scraper asks for (Prometheus text by default, OpenMetrics when
its ``Accept`` header prefers it), as prometheus_client's own handler does.  An address with an empty host
(``:9316``) listens on every interface, IPv6 included where the host has it, as Go's listener does.

The port is open to the node's network, so the server holds under abuse (:data:`DEFAULT_LIMITS`): a
bounded number of connections, each with deadlines on its request and its answer, and no request body read.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Mapping
from typing import Final
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from koordlet.component import alive
from koordlet.errors import ConfigError
from koordlet.metrics.registry import PATH_METRICS, KoordletMetrics
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, ServerLimits

DEFAULT_ADDR: Final = ":9316"
PATH_HEALTHZ: Final = "/healthz"
DEFAULT_LIMITS: Final = ServerLimits(max_connections=16, idle_timeout_seconds=30.0, header_timeout_seconds=10.0,
                                     body_timeout_seconds=10.0, write_timeout_seconds=30.0, max_body_bytes=0)
"""A few scrapers at a time (Prometheus scrapes over one connection at a time per target); a scrape's
request must arrive within 10 s and its answer be taken within 30 s (Prometheus' default scrape timeout
is 10 s); requests carry no body."""

log = logging.getLogger(__name__)


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port`` (``:9316``, ``127.0.0.1:9316``, ``[::1]:9316``) -> (host, port); empty host = all."""
    host, sep, port_text = addr.rpartition(":")
    if not sep:
        raise ConfigError(f"metrics address {addr!r}: expected host:port, e.g. :9316")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"metrics address {addr!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"metrics address {addr!r}: port {port} is out of range")
    return host, port


class _Server(LimitedHTTPServer):
    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, dual_stack: bool,
                 routes: Mapping[str, Collector], healthz: Callable[[], bool] | None, limits: ServerLimits) -> None:
        self.address_family = family
        self.dual_stack = dual_stack
        self.routes = dict(routes)
        self.healthz = healthz
        super().__init__(address, _Handler, limits)

    def server_bind(self) -> None:
        if self.dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # HTTPServer.server_bind would also resolve the host's FQDN, a DNS round trip we have no use for.
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])


class _Handler(LimitedRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        path = urlsplit(self.path).path
        if path == PATH_HEALTHZ:
            healthy = self.server.healthz is None or self.server.healthz()
            self._send(200 if healthy else 503, b"ok\n" if healthy else b"unhealthy\n", "text/plain; charset=utf-8")
            return
        collector = self.server.routes.get(path)
        if collector is None:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        try:
            body = encoder(collector)
        except Exception:
            log.exception("metrics scrape failed", extra={"path": path})
            self._send(500, b"metrics collection failed\n", "text/plain; charset=utf-8")
            return
        self._send(200, body, content_type)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_body(code, body, content_type)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics request", extra={"client": self.client_address[0], "request": format % args})


class MetricsServer:
    """The HTTP endpoint as a daemon component: :meth:`start` binds (raising if the port is taken) and
    serves on a thread; :meth:`stop` closes the socket and joins the thread."""

    name: Final = "metrics-server"

    def __init__(self, routes: Mapping[str, Collector], addr: str = DEFAULT_ADDR,
                 healthz: Callable[[], bool] | None = None, limits: ServerLimits = DEFAULT_LIMITS) -> None:
        self._routes = dict(routes)
        self._limits = limits
        self._addr = addr
        self._host, self._port = parse_addr(addr)
        self._healthz = healthz
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the real port when started with port 0)."""
        if self._server is None:
            return self._host, self._port
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def running(self) -> bool:
        return alive(self._thread)

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        if self._server is not None:
            raise RuntimeError("metrics server already started")
        try:
            self._server = self._bind()
        except OSError as exc:
            raise OSError(exc.errno, f"metrics server cannot listen on {self._addr}: {exc.strerror or exc}") from exc
        server = self._server

        def serve() -> None:
            try:
                server.serve_forever()
            except BaseException as exc:
                if on_failure is None:
                    raise
                on_failure(exc)

        self._thread = threading.Thread(target=serve, name="koordlet-metrics-http", daemon=True)
        self._thread.start()
        log.info("serving metrics", extra={"address": f"{self.address[0]}:{self.address[1]}",
                                           "paths": sorted(self._routes)})

    def stop(self, timeout_seconds: float = 5.0) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout_seconds)
        self._server = None
        self._thread = None

    def _bind(self) -> _Server:
        host = self._host
        if host == "" and socket.has_dualstack_ipv6():
            try:
                return _Server(("::", self._port), socket.AF_INET6, True, self._routes, self._healthz, self._limits)
            except OSError as exc:
                # IPv6 compiled in but disabled on the host: IPv4 on every interface is what is left.
                log.debug("dual-stack listen failed, using IPv4", extra={"error": str(exc)})
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return _Server((host or "0.0.0.0", self._port), family, False, self._routes, self._healthz, self._limits)


def serve(source: KoordletMetrics | Collector, addr: str = DEFAULT_ADDR,
          healthz: Callable[[], bool] | None = None, limits: ServerLimits = DEFAULT_LIMITS) -> MetricsServer:
    """Serve ``source`` on ``addr`` from a thread and return the running server (call ``stop()``).

    A :class:`KoordletMetrics` gets all of Koordinator's paths; any other collector (a bare registry, such
    as the companion's ``prometheus_client.REGISTRY``) is served at ``/metrics``."""
    routes = source.routes if isinstance(source, KoordletMetrics) else {PATH_METRICS: source}
    server = MetricsServer(routes, addr, healthz, limits)
    server.start()
    return server
