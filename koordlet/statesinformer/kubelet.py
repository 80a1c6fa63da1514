"""A client for kubelet's ``GET /pods/``: the node's pods as kubelet sees them (a v1 PodList).

Koordinator's koordlet polls the same endpoint (``statesinformer/impl/kubelet_stub.go``).  This client
differs on purpose in two ways: it verifies kubelet's serving certificate unless told not to
(Koordinator always skips verification), and it re-reads the bearer token file on every request,
because projected service-account tokens rotate (hourly by default) and a cached one expires.

Every failure is a :class:`KubeletError` with a one-line reason and a short ``outcome`` class
(``timeout``, ``refused``, ``tls``, ``http_500``, ``bad_json``, ``bad_podlist``...), the same string the
``observe`` hook receives, so logs and metrics agree on what went wrong.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis.pod import Pod, pod_from_json
from koordlet.errors import ConfigError, KoordletError, ParseError
from koordlet.statesinformer.reservation import Reservation, reservation_from_configz
from koordlet.streaklog import Streak

log = logging.getLogger(__name__)

PODS_PATH: Final = "/pods/"
CONFIGZ_PATH: Final = "/configz"
MAX_BODY_BYTES: Final = 64 * 1024 * 1024
"""Largest PodList accepted.  Pods with big annotations reach ~100 KiB each; 64 MiB covers several
hundred of them while a broken or hostile peer cannot make the agent allocate without bound."""
_READ_CHUNK_BYTES: Final = 1024 * 1024
_BODY_SNIPPET_CHARS: Final = 200
_ERROR_BODY_READ_BYTES: Final = 4096
SCHEMES: Final = ("https", "http")

Observer = Callable[[str, float], None]
"""Receives ``(outcome, seconds)`` after each request: ``"ok"`` or the error's outcome class."""


@dataclass(frozen=True)
class KubeletOptions:
    """Where kubelet is and how to talk to it."""

    address: str = "127.0.0.1"
    """kubelet's host name or IP address (IPv6 with or without brackets)."""
    port: int = 10250
    """kubelet's port: 10250 is the authenticated HTTPS port, 10255 the (deprecated) read-only HTTP one."""
    scheme: str = "https"
    """``https``, or ``http`` for a read-only port; a bearer token is only ever sent over https."""
    token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    """File holding the bearer token, re-read on every request (empty: send no token)."""
    ca_file: str = ""
    """PEM bundle of the CA that signed kubelet's serving certificate; empty: the system trust store."""
    insecure_skip_verify: bool = False
    """Accept any serving certificate.  Only when asked for: it lets anyone on the path forge the pod list."""
    timeout_seconds: float = 5.0
    """Budget of one request: connect, TLS handshake, headers and body together."""
    sync_interval_seconds: float = 10.0
    """Seconds between two pod list fetches (Koordinator's ``--kubelet-sync-interval``)."""

    def validate(self, path: str = "kubelet") -> None:
        """Raises :class:`~koordlet.errors.ConfigError` naming ``<path>.<field>`` and the bad value."""
        address = self.address.strip("[]") if isinstance(self.address, str) else None
        if not address or any(ch.isspace() or ch in "/?#@" for ch in address):
            raise ConfigError(f"{path}.address: must be a host name or IP address, got {self.address!r}")
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 1 <= self.port <= 65535:
            raise ConfigError(f"{path}.port: must be 1..65535, got {self.port!r}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"{path}.scheme: must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        for name in ("token_file", "ca_file"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{path}.{name}: must be a path string, got {getattr(self, name)!r}")
        if not isinstance(self.insecure_skip_verify, bool):
            raise ConfigError(f"{path}.insecure_skip_verify: must be true or false, got {self.insecure_skip_verify!r}")
        if self.insecure_skip_verify and self.ca_file:
            # client-go refuses the same combination: a CA that is then ignored is a misconfiguration.
            raise ConfigError(f"{path}.ca_file: must be empty when insecure_skip_verify is set, got {self.ca_file!r}")
        for name in ("timeout_seconds", "sync_interval_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{path}.{name}: must be a number of seconds > 0, got {value!r}")

    @property
    def url(self) -> str:
        """The pod list URL (``https://127.0.0.1:10250/pods/``)."""
        return self.url_for(PODS_PATH)

    def url_for(self, path: str) -> str:
        host = self.address.strip("[]")
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}{path}"


class KubeletError(KoordletError):
    """A pod list request failed; ``outcome`` is the short class the metrics use."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def _one_line(text: str, limit: int | None = None) -> str:
    flat = " ".join(text.split())
    if limit is not None and len(flat) > limit:
        return flat[:limit] + "..."
    return flat


def _classify(exc: BaseException, url: str, timeout: float) -> KubeletError:
    """Maps what http.client, ssl and socket raise to an outcome class and a one-line reason."""
    if isinstance(exc, TimeoutError):
        return KubeletError("timeout", f"GET {url}: no answer within {timeout:g}s")
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or exc.reason or str(exc)
        return KubeletError("tls", f"GET {url}: TLS verification failed: {_one_line(str(detail))}")
    if isinstance(exc, ssl.SSLError):
        return KubeletError("tls", f"GET {url}: TLS failed: {_one_line(exc.reason or str(exc))}")
    if isinstance(exc, ConnectionRefusedError):
        return KubeletError("refused", f"GET {url}: connection refused (is kubelet running on this port?)")
    if isinstance(exc, http.client.RemoteDisconnected):
        return KubeletError("disconnected", f"GET {url}: kubelet closed the connection without answering")
    if isinstance(exc, ConnectionResetError):
        return KubeletError("reset", f"GET {url}: connection reset by kubelet")
    if isinstance(exc, http.client.IncompleteRead):
        got, missing = len(exc.partial), exc.expected
        what = f"{missing} more bytes expected" if missing is not None else "body cut short"
        return KubeletError("truncated", f"GET {url}: response truncated after {got} bytes ({what})")
    if isinstance(exc, http.client.HTTPException):
        return KubeletError("bad_http", f"GET {url}: malformed HTTP response: {_one_line(repr(exc), 200)}")
    if isinstance(exc, socket.gaierror):
        return KubeletError("dns", f"GET {url}: cannot resolve the address: {_one_line(str(exc.strerror))}")
    if isinstance(exc, OSError):
        return KubeletError("connect", f"GET {url}: {_one_line(exc.strerror or str(exc))}")
    return KubeletError("error", f"GET {url}: {_one_line(repr(exc), 200)}")


def _pod_identity(item: object, index: int) -> str:
    """``namespace/name/uid`` of a raw pod object, as far as it has them (``items[i]`` when it has nothing)."""
    meta = item.get("metadata") if isinstance(item, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"items[{index}]"
    parts = []
    for key, default in (("namespace", "default"), ("name", "?"), ("uid", "?")):
        value = meta.get(key, default)
        parts.append(_one_line(value, 253) if isinstance(value, str) else "?")
    return "/".join(parts)


class KubeletClient:
    """Fetches the node's pods from kubelet; safe to call from several threads.

    ``observe`` is called with ``(outcome, seconds)`` after each request (``"ok"`` or
    :attr:`KubeletError.outcome`); an error inside it is logged once and never fails the request.
    """

    def __init__(
        self,
        options: KubeletOptions,
        *,
        observe: Observer | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        options.validate()
        self.options = options
        self._observe = observe
        self._clock = clock
        self._max_body_bytes = max_body_bytes
        self._lock = threading.Lock()  # guards the in-flight sockets
        self._credentials_lock = threading.Lock()  # guards the token state and the TLS context cache
        self._in_flight: set[socket.socket] = set()
        self._aborted: set[socket.socket] = set()
        self._ssl_context: ssl.SSLContext | None = None
        self._ca_stamp: tuple[int, int, int] | None = None
        self._token_problem: str | None = None
        self._observe_failed = False
        self._bad_pods_lock = threading.Lock()
        self._bad_pods: dict[str, Streak] = {}
        """namespace/name/uid of each pod of the last list that did not parse -> its log streak."""
        self.skipped_pods = 0
        """Pods of the last list skipped because they did not parse."""

    # ---------------------------------------------------------------------------------- public

    def get_pods(self) -> list[Pod]:
        """The pods kubelet reports, in its order; raises :class:`KubeletError` on any failure."""
        began = self._clock()
        outcome = "error"
        try:
            body, content_type = self._fetch()
            obj = self._decode(body, content_type)
            items = obj.get("items") if isinstance(obj, Mapping) else None
            if not isinstance(obj, Mapping) or not isinstance(items if items is not None else [], list):
                outcome = "bad_podlist"
                reason = f"GET {self.options.url}: not a PodList: expected a PodList object with an items array"
                raise KubeletError(outcome, reason)
            pods = self._parse_pods(items or [])
            outcome = "ok"
            return pods
        except KubeletError as exc:
            outcome = exc.outcome
            raise
        finally:
            self._report(outcome, self._clock() - began)

    def _parse_pods(self, items: list[Any]) -> list[Pod]:
        """The pods of the list that parse; a pod that does not is skipped, not the whole list (one pod with
        a field of the wrong type must not freeze every other pod's state).  Each bad pod is logged when it
        turns bad and when it parses again, naming its namespace/name/uid and the field, not every poll."""
        pods: list[Pod] = []
        bad: dict[str, str] = {}
        for index, item in enumerate(items):
            try:
                pods.append(pod_from_json(item))
            except (ParseError, AttributeError, TypeError, ValueError) as exc:
                # AttributeError/TypeError/ValueError: a field of the wrong JSON type deep in a pod, which the
                # parser does not check everywhere.
                bad[_pod_identity(item, index)] = _one_line(f"{type(exc).__name__}: {exc}", 300)
        with self._bad_pods_lock:
            self.skipped_pods = len(bad)
            for identity, problem in bad.items():
                streak = self._bad_pods.get(identity)
                if streak is None:
                    streak = self._bad_pods[identity] = Streak(log, self._clock)
                streak.fail(problem, "kubelet pod skipped: it does not parse",
                            extra={"pod": identity, "error": problem})
            for identity in [i for i in self._bad_pods if i not in bad]:
                # Parses again, or left the list: ends the streak (and keeps the table as long as the list).
                self._bad_pods.pop(identity).ok("kubelet pod no longer skipped", extra={"pod": identity})
        return pods

    def abort(self) -> None:
        """Makes requests in flight fail now with outcome ``aborted`` (called from another thread on stop)."""
        with self._lock:
            for sock in self._in_flight:
                self._aborted.add(sock)
                # The plain-socket shutdown, not SSLSocket's: it wakes a blocked recv() in the other thread
                # without touching the TLS object that thread is using.  OSError: the peer already closed.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    # ---------------------------------------------------------------------------------- request

    def get_reservation(self) -> Reservation:
        """kubelet's ``kubeReserved`` + ``systemReserved`` from ``/configz``; raises :class:`KubeletError`."""
        body, content_type = self._fetch(CONFIGZ_PATH)
        obj = self._decode(body, content_type, CONFIGZ_PATH)
        try:
            return reservation_from_configz(obj)
        except ParseError as exc:
            raise KubeletError("bad_configz", f"GET {self.options.url_for(CONFIGZ_PATH)}: {exc}") from None

    def _fetch(self, path: str = PODS_PATH) -> tuple[bytes, str]:
        """The body of a 200 answer and its content type."""
        opts = self.options
        url = opts.url_for(path)
        deadline = self._clock() + opts.timeout_seconds
        host = opts.address.strip("[]")
        with self._credentials_lock:
            headers = self._headers()
            context = self._tls_context() if opts.scheme == "https" else None
        conn: http.client.HTTPConnection
        if context is not None:
            conn = http.client.HTTPSConnection(host, opts.port, timeout=opts.timeout_seconds, context=context)
        else:
            conn = http.client.HTTPConnection(host, opts.port, timeout=opts.timeout_seconds)
        sock: socket.socket | None = None
        try:
            try:
                conn.connect()
                sock = conn.sock
                assert sock is not None
                with self._lock:
                    self._in_flight.add(sock)
                conn.request("GET", path, headers=headers)
                self._set_timeout(sock, deadline, url)
                response = conn.getresponse()
                result = self._read_body(response, sock, deadline, url)
                if self._was_aborted(sock):
                    raise KubeletError("aborted", "")  # the shutdown may have cut the body short
                return result
            except Exception as exc:
                # Whatever an abort made the request fail with (EOF, a short body...), it was the abort.
                if sock is not None and self._was_aborted(sock):
                    raise KubeletError("aborted", f"GET {url}: aborted (shutting down)") from None
                if isinstance(exc, KubeletError):
                    raise
                raise _classify(exc, url, opts.timeout_seconds) from None
        finally:
            if sock is not None:
                with self._lock:
                    self._in_flight.discard(sock)
                    self._aborted.discard(sock)
            conn.close()

    def _read_body(self, response: http.client.HTTPResponse, sock: socket.socket, deadline: float,
                   url: str) -> tuple[bytes, str]:
        if response.status != 200:
            # Only the start is quoted: read no more of an error page than that.
            self._set_timeout(sock, deadline, url)
            head = response.read(_ERROR_BODY_READ_BYTES)
            snippet = _one_line(head.decode("utf-8", errors="replace"), _BODY_SNIPPET_CHARS)
            raise KubeletError(
                f"http_{response.status}",
                f"GET {url}: HTTP {response.status} {response.reason}" + (f": {snippet}" if snippet else ""),
            )
        limit = self._max_body_bytes
        header = response.getheader("Content-Length", "")
        expected = int(header) if header.isdigit() else None
        if expected is not None and expected > limit:
            raise KubeletError("too_large", f"GET {url}: body of {expected} bytes exceeds the {limit}-byte limit")
        chunks: list[bytes] = []
        size = 0
        # isclosed(): http.client closes the socket itself once the announced length has been read.
        while not response.isclosed():
            self._set_timeout(sock, deadline, url)
            # One byte past the limit is enough to detect a body without a length that is too big.
            chunk = response.read(min(_READ_CHUNK_BYTES, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise KubeletError("too_large", f"GET {url}: body exceeds the {limit}-byte limit")
        if expected is not None and size < expected:
            # http.client's read(amt) returns short at EOF instead of raising IncompleteRead.
            raise KubeletError("truncated", f"GET {url}: response truncated after {size} of {expected} bytes")
        return b"".join(chunks), response.getheader("Content-Type") or ""

    def _set_timeout(self, sock: socket.socket, deadline: float, url: str) -> None:
        # One budget for the whole request: each blocking step gets what is left of it, so a peer that
        # trickles bytes cannot hold the sync thread for many timeouts in a row.
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise KubeletError("timeout", f"GET {url}: no complete answer within {self.options.timeout_seconds:g}s")
        sock.settimeout(remaining)

    def _decode(self, body: bytes, content_type: str, path: str = PODS_PATH) -> object:
        try:
            # RFC 8259: JSON between systems is UTF-8 (json.loads(bytes) would also guess UTF-16/32).
            return json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError; "[[[[..." nested deep
            raise KubeletError(
                "bad_json",
                f"GET {self.options.url_for(path)}: body is not JSON "
                f"({content_type or 'no content type'}, {len(body)} bytes): "
                f"{_one_line(str(exc), 120)}",
            ) from None

    def _was_aborted(self, sock: socket.socket) -> bool:
        with self._lock:
            return sock in self._aborted

    # ---------------------------------------------------------------------------------- credentials

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Connection": "close", "User-Agent": "koordlet"}
        if self.options.scheme == "https" and self.options.token_file:
            token = self._read_token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    def _read_token(self) -> str | None:
        path = self.options.token_file
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            problem = f"cannot read it: {exc.strerror}"
            token = ""
        else:
            problem = "it is empty"
        if token:
            if self._token_problem is not None:
                log.info("kubelet token file readable again", extra={"token_file": path})
                self._token_problem = None
            return token
        # Said once per streak: the file may come later (a projected volume being mounted), and
        # kubelet's read-only endpoints or an anonymous-auth kubelet still answer without a token.
        if self._token_problem != problem:
            log.warning(
                "kubelet token file unusable, sending requests without a bearer token",
                extra={"token_file": path, "reason": problem},
            )
            self._token_problem = problem
        return None

    def _tls_context(self) -> ssl.SSLContext:
        opts = self.options
        if opts.insecure_skip_verify:
            if self._ssl_context is None:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                self._ssl_context = context
            return self._ssl_context
        if not opts.ca_file:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            return self._ssl_context
        # Reload the CA bundle when the file changes (a rotated cluster CA), not on every request.
        try:
            st = os.stat(opts.ca_file)
        except OSError as exc:
            raise KubeletError("ca_file", f"CA file {opts.ca_file}: {exc.strerror}") from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._ssl_context is None or stamp != self._ca_stamp:
            try:
                context = ssl.create_default_context(cafile=opts.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise KubeletError("ca_file", f"CA file {opts.ca_file}: not a PEM CA bundle: {exc}") from None
            self._ssl_context, self._ca_stamp = context, stamp
        return self._ssl_context

    # ---------------------------------------------------------------------------------- metrics

    def _report(self, outcome: str, seconds: float) -> None:
        if self._observe is None:
            return
        try:
            self._observe(outcome, seconds)
        except Exception:
            if not self._observe_failed:
                self._observe_failed = True
                log.exception("kubelet request observer failed; further failures are not logged")
