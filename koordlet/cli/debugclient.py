"""A client of koordlet's local debug API (:mod:`koordlet.debugapi.contract`): HTTP/1.1 + JSON on a unix socket.

Failures are classified for ``koordctl``'s exit codes: :class:`DaemonDown` (no socket, nobody listening),
:class:`PermissionDenied` (the socket is root only), :class:`DaemonTimeout` (the daemon accepted but did
not answer in time) and :class:`ApiError` (the daemon answered with an error document).
"""

from __future__ import annotations

import errno
import http.client
import json
import socket
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, urlencode

from koordlet import errors
from koordlet.debugapi import contract

DEFAULT_TIMEOUT_SECONDS: Final = 10.0
"""Connect and read timeout: every endpoint answers from memory or a few small cgroup files."""

# ECONNREFUSED: a stale socket file nobody listens on; ENOENT: no file; ENOTDIR: a parent is a file.
_DOWN_ERRNOS: Final = frozenset({errno.ECONNREFUSED, errno.ENOENT, errno.ENOTDIR, errno.ENOTSOCK})


class DebugClientError(errors.KoordletError):
    """Root of the errors of talking to the debug API."""


class DaemonDown(DebugClientError, ConnectionError):
    """No koordlet answers on the socket: the file is missing or nobody listens on it."""

    def __init__(self, socket_path: str, reason: str = "") -> None:
        super().__init__(f"koordlet is not running (no debug socket at {socket_path})")
        self.socket_path = socket_path
        self.reason = reason


class PermissionDenied(DebugClientError, errors.PermissionDenied):
    """The socket exists but this user may not connect to it (mode 0600, owned by root)."""

    def __init__(self, socket_path: str) -> None:
        super().__init__(f"cannot open {socket_path}: permission denied")
        self.socket_path = socket_path


class DaemonTimeout(DebugClientError, TimeoutError):
    """koordlet accepted the connection but did not answer in time."""

    def __init__(self, socket_path: str, timeout_seconds: float) -> None:
        super().__init__(f"koordlet did not answer on {socket_path} within {timeout_seconds:g} s")
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds


class ApiError(DebugClientError):
    """The daemon answered with an error status; ``message`` is its ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class UnixHTTPConnection(http.client.HTTPConnection):
    """``HTTPConnection`` whose transport is a unix stream socket; the Host header stays ``localhost``."""

    def __init__(self, socket_path: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class DebugClient:
    """One request per call, a fresh connection each time (the CLI makes one or two requests per run)."""

    def __init__(self, socket_path: str = contract.DEFAULT_SOCKET,
                 timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        """GET ``path`` with ``query`` (``None`` values left out) and return the JSON object answered."""
        params = {key: str(value) for key, value in query.items() if value is not None}
        target = quote(path) + (f"?{urlencode(params)}" if params else "")
        return self._request("GET", target)

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path`` (an admin endpoint) and return the JSON object answered."""
        return self._request("POST", quote(path), json.dumps(body).encode())

    def _request(self, method: str, target: str, body: bytes | None = None) -> dict[str, Any]:
        conn = UnixHTTPConnection(self.socket_path, self.timeout_seconds)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                body = response.read()
            except TimeoutError as exc:
                raise DaemonTimeout(self.socket_path, self.timeout_seconds) from exc
            except PermissionError as exc:
                raise PermissionDenied(self.socket_path) from exc
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as exc:
                # Accepted, then dropped without an answer: the daemon is shutting down.
                raise DaemonDown(self.socket_path, str(exc)) from exc
            except OSError as exc:
                if exc.errno in _DOWN_ERRNOS:
                    raise DaemonDown(self.socket_path, str(exc)) from exc
                raise
        finally:
            conn.close()
        return _decode(response.status, body)


def _decode(status: int, body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        snippet = body[:200].decode("utf-8", "replace").strip()
        raise ApiError(status, f"the daemon answered HTTP {status} with a body that is not a JSON object: {snippet!r}")
    if status >= 400:
        message = document.get("error")
        raise ApiError(status, str(message) if message else f"HTTP {status}")
    return document
