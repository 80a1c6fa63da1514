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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlsplit

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.debugapi import contract
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.cache import Labels, pod_labels
from koordlet.qosmanager.evictor import EvictionAttempt
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.nodeslo import Effective
from koordlet.qosmanager.reader import CgroupReader
from koordlet.runtimehooks.framework import HookCall
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.system.cgroupfile import FileKind
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits
from koordlet.system.layout import CgroupLayout, clean_rel_dir
from koordlet.system.probes import ProbeResult
from koordlet.system.resources import REGISTRY
from koordlet.system.unixsocket import remove_stale_socket
from koordlet.system.validators import format_cpulist

log = logging.getLogger(__name__)

VALUE_RESOURCES: Final = ("cpu_shares", "cpu_cfs_quota", "cpu_cfs_period", "memory_limit", "cpuset_cpus")
"""The registry resources ``/v1/pods`` shows as current and desired values (canonical v1 units)."""
MAX_METRICS_WINDOW_SECONDS: Final = 3600.0
"""Longer windows would read the disk store for every pod; the metric cache's memory holds minutes."""
MAX_BODY_BYTES: Final = 64 * 1024
CONNECTION_TIMEOUT_SECONDS: Final = 10.0
"""An idle keep-alive connection is closed after this long, so its thread does not linger."""
DEFAULT_LIMITS: Final = ServerLimits(max_connections=16, idle_timeout_seconds=CONNECTION_TIMEOUT_SECONDS,
                                     header_timeout_seconds=10.0, body_timeout_seconds=10.0,
                                     write_timeout_seconds=30.0, max_body_bytes=MAX_BODY_BYTES)
"""Only root reaches the socket, but a stuck or looping client must not pile up threads in the daemon."""
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


class ApiError(KoordletError):
    """A request the API answers with ``{"error": message}`` and ``status``."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class CgroupView(Protocol):
    """Cgroup reads for the debug API; ``rel_dir`` is relative to the hierarchy roots."""

    def current(self, rel_dir: str) -> dict[str, Any]:
        """:data:`VALUE_RESOURCES` read now; files that cannot be read are left out."""
        ...

    def desired(self, rel_dir: str) -> dict[str, Any]:
        """The values the resource executor last wrote to those files (left out when it did not)."""
        ...

    def files(self, rel_dir: str) -> dict[str, str]:
        """``<hierarchy>/<file>`` -> content of every readable regular file of the directory."""
        ...


class StrategyView(Protocol):
    """What ``/v1/qos`` needs of a QoS strategy (:class:`koordlet.qosmanager.framework.Strategy`)."""

    name: str

    def enabled(self, slo: NodeSLOSpec) -> bool: ...

    def interval(self) -> float: ...


class DecisionView(Protocol):
    """What ``/v1/qos`` needs of :class:`koordlet.qosmanager.framework.DecisionLog`."""

    def last(self, strategy: str) -> Decision | None: ...

    def history(self) -> list[Decision]: ...


@dataclass(frozen=True)
class DebugSources:
    """Everything the endpoints read; the agent builds it from its parts (``koordlet.cli.agent``)."""

    version: str
    node: str
    mode: str
    """``standalone`` or ``kubernetes``."""
    started_at: float
    components: Callable[[], Sequence[tuple[str, bool]]]
    """(name, running) of the daemon's components, in start order."""
    feature_gates: Mapping[str, bool]
    probes: Callable[[], Sequence[ProbeResult]]
    companion: Callable[[], Mapping[str, Any] | None]
    """``{"address", "nodeslo_connected", "reports_failing"}``, None without a companion."""
    pods: Callable[[], Sequence[PodMeta]]
    cgroups: CgroupView
    mean: Callable[[str, Labels, float], float | None]
    """The metric cache's average of a series over the last seconds (None without samples)."""
    slo: Callable[[], Effective]
    strategies: Callable[[], Sequence[StrategyView]]
    decisions: DecisionView
    hook_names: Sequence[str]
    hook_calls: Callable[[int], Sequence[HookCall]]
    evictions: Callable[[int], Sequence[EvictionAttempt]]
    pid: int = field(default_factory=os.getpid)
    clock: Callable[[], float] = time.time
    """Wall clock (uptime)."""
    root_logger: logging.Logger = field(default_factory=logging.getLogger)
    """The logger ``/v1/admin/log-level`` sets the level of."""
    refused: Callable[[str], Sequence[str]] = lambda _uid: ()
    """The pod's (by uid) labels and annotations the tenant policy refused, one ``key: field: reason`` each."""


# ------------------------------------------------------------------------------------------ host reads


class HostCgroups:
    """:class:`CgroupView` on this host's hierarchies; ``written`` is the resource executor's
    :meth:`~koordlet.resourceexecutor.executor.ResourceExecutor.last_written`."""

    def __init__(self, layout: CgroupLayout, written: Callable[[str], str | None],
                 reader: CgroupReader | None = None) -> None:
        self.layout = layout
        self._written = written
        self._reader = reader or CgroupReader(layout)

    def current(self, rel_dir: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for resource in VALUE_RESOURCES:
            try:
                value = self._reader.read(resource, rel_dir)
            except (KoordletError, OSError, ValueError):
                continue  # gone, unsupported here, or garbage: the contract leaves it out
            values[resource] = format_cpulist(value) if isinstance(value, list) else value
        return values

    def desired(self, rel_dir: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for resource in VALUE_RESOURCES:
            descriptor = REGISTRY[resource]
            try:
                version = descriptor.version(self.layout)
                text = self._written(descriptor.path(self.layout, rel_dir))
            except (KoordletError, ValueError):
                continue
            if text is None:
                continue
            value = decode_written(resource, version, text)
            if value is not None:
                values[resource] = value
        return values

    def hierarchies(self) -> list[tuple[str, str]]:
        """(name, root) of each mounted hierarchy: v1 subsystems sharing a mount are named together
        (``cpu,cpuacct``); the v2 hierarchy is ``unified``."""
        by_root: dict[str, list[str]] = {}
        for subsystem, root in self.layout.v1_mounts.items():
            by_root.setdefault(root, []).append(subsystem)
        found = sorted((",".join(sorted(subsystems)), root) for root, subsystems in by_root.items())
        if self.layout.unified_root is not None:
            found.append(("unified", self.layout.unified_root))
        return found

    def files(self, rel_dir: str) -> dict[str, str]:
        rel = clean_rel_dir(rel_dir)
        contents: dict[str, str] = {}
        for name, root in self.hierarchies():
            directory = os.path.join(root, rel) if rel else root
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue  # not in this hierarchy (or gone)
            for entry in entries:
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    with open(entry.path, "rb") as f:
                        data = f.read(contract.CGROUP_FILE_CAP_BYTES)
                except OSError:
                    continue  # write-only (cgroup.kill, memory.reclaim...) or gone meanwhile
                contents[f"{name}/{entry.name}"] = data.decode("utf-8", "replace")
        return contents


def decode_written(resource: str, version: int, text: str) -> Any:
    """The canonical value of ``text`` written to ``resource``'s file, None when the text does not
    carry it (a v2 ``cpu.max`` written with the quota only has no period)."""
    descriptor = REGISTRY[resource]
    spec = descriptor.spec(version)
    try:
        if spec.kind is FileKind.INT:
            stripped = text.strip()
            return descriptor.decode(-1 if stripped == "max" else int(stripped), version)
        if spec.kind is FileKind.CPU_MAX:
            raw = tuple(-1 if token == "max" else int(token) for token in text.split())
            if spec.index is None or spec.index >= len(raw):
                return None
            return descriptor.decode(raw, version)
    except ValueError:
        return text.strip()
    return text.strip()


# -------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Request:
    query: Mapping[str, str]
    body: Any = None


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: not an integer: {text!r}") from None
    if value < 1:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: must be >= 1, got {value}")
    return value


def _pod_json(sources: DebugSources, meta: PodMeta) -> dict[str, Any]:
    pod = meta.pod

    def values(rel_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
        # No directory: reading "" would show the hierarchy roots' values as the pod's.
        if not rel_dir:
            return {}, {}
        return sources.cgroups.current(rel_dir), sources.cgroups.desired(rel_dir)

    containers = []
    for container in meta.containers:
        current, desired = values(container.cgroup_dir)
        containers.append({"name": container.name, "id": container.container_id,
                           "cgroup_dir": container.cgroup_dir, "current": current, "desired": desired})
    current, desired = values(meta.cgroup_dir)
    return {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "qos": meta.qos.value,
            "kube_qos": pod.kube_qos.value if pod.kube_qos is not None else None,
            "priority_class": meta.priority_class.value, "priority": pod.priority, "phase": pod.phase,
            "source": meta.source, "cgroup_dir": meta.cgroup_dir, "containers": containers,
            "current": current, "desired": desired, "refused_keys": list(sources.refused(pod.uid))}


def _probe_json(probe: ProbeResult) -> dict[str, Any]:
    return {"name": probe.name, "supported": bool(probe.supported), "reason": probe.reason}


def status(sources: DebugSources, request: Request) -> dict[str, Any]:
    return {"version": sources.version, "pid": sources.pid, "node": sources.node, "mode": sources.mode,
            "started_at": sources.started_at,
            "uptime_seconds": round(max(0.0, sources.clock() - sources.started_at), 3),
            "components": [{"name": name, "running": running} for name, running in sources.components()],
            "feature_gates": {name: bool(on) for name, on in sorted(sources.feature_gates.items())},
            "probes": [_probe_json(p) for p in sources.probes()],
            "companion": dict(companion) if (companion := sources.companion()) is not None else None}


def pods(sources: DebugSources, request: Request) -> dict[str, Any]:
    return {"pods": [_pod_json(sources, meta) for meta in sources.pods()]}


def metrics(sources: DebugSources, request: Request) -> dict[str, Any]:
    text = request.query.get("window")
    window = float(contract.DEFAULT_METRICS_WINDOW_SECONDS)
    if text is not None:
        try:
            window = float(text)
        except ValueError:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"window: not a number of seconds: {text!r}") from None
        if not 0 < window <= MAX_METRICS_WINDOW_SECONDS:
            raise ApiError(HTTPStatus.BAD_REQUEST,
                           f"window: must be > 0 and <= {MAX_METRICS_WINDOW_SECONDS:g} seconds, got {text}")
    cpu = sources.mean(names.NODE_CPU_USAGE, (), window)
    memory = sources.mean(names.NODE_MEMORY_USAGE, (), window)
    node = None if cpu is None and memory is None else {"cpu_cores": cpu, "memory_bytes": memory}
    rows = []
    for meta in sources.pods():
        labels = pod_labels(meta.uid)
        rows.append({"namespace": meta.pod.namespace, "name": meta.pod.name, "qos": meta.qos.value,
                     "cpu_cores": sources.mean(names.POD_CPU_USAGE, labels, window),
                     "memory_bytes": sources.mean(names.POD_MEMORY_USAGE, labels, window)})
    return {"window_seconds": window, "node": node, "pods": rows}


def slo(sources: DebugSources, request: Request) -> dict[str, Any]:
    effective = sources.slo()
    return {"origin": effective.origin, "generation": effective.generation, "rejected": effective.rejected,
            "spec": effective.spec.to_json()}


def qos(sources: DebugSources, request: Request) -> dict[str, Any]:
    spec = sources.slo().spec
    rows = []
    for strategy in sources.strategies():
        try:
            enabled = bool(strategy.enabled(spec))
        except Exception as exc:  # the manager reports a failing strategy; here it is just not enabled
            log.debug("strategy enabled() failed", extra={"strategy": strategy.name, "error": repr(exc)})
            enabled = False
        last = sources.decisions.last(strategy.name)
        rows.append({"name": strategy.name, "enabled": enabled, "interval_seconds": strategy.interval(),
                     "last": last.to_json() if last is not None else None})
    return {"strategies": rows, "history": [d.to_json() for d in sources.decisions.history()]}


def hooks(sources: DebugSources, request: Request) -> dict[str, Any]:
    limit = _int_param(request, "limit", contract.DEFAULT_LIMIT)
    return {"hooks": list(sources.hook_names), "calls": [c.to_json() for c in sources.hook_calls(limit)]}


def evictions(sources: DebugSources, request: Request) -> dict[str, Any]:
    limit = _int_param(request, "limit", contract.DEFAULT_LIMIT)
    return {"evictions": [e.to_json() for e in sources.evictions(limit)]}


def cgroup(sources: DebugSources, request: Request) -> dict[str, Any]:
    key = request.query.get("pod")
    if key is None:
        raise ApiError(HTTPStatus.BAD_REQUEST, "pod: missing (pod=<namespace>/<name>)")
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"pod: expected <namespace>/<name>, got {key!r}")
    meta = next((m for m in sources.pods() if m.pod.namespace == namespace and m.pod.name == name), None)
    if meta is None:
        raise ApiError(HTTPStatus.NOT_FOUND, f"pod {key} not found")
    container_name = request.query.get("container")
    rel_dir = meta.cgroup_dir
    if container_name is not None:
        found: ContainerMeta | None = next((c for c in meta.containers if c.name == container_name), None)
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"container {container_name} not found in pod {key}")
        rel_dir = found.cgroup_dir
    if not rel_dir:
        what = f"container {container_name} of pod {key}" if container_name is not None else f"pod {key}"
        raise ApiError(HTTPStatus.NOT_FOUND, f"{what} has no cgroup directory (yet)")
    return {"pod": key, "container": container_name, "dir": rel_dir, "files": sources.cgroups.files(rel_dir)}


def probes(sources: DebugSources, request: Request) -> dict[str, Any]:
    return {"probes": [_probe_json(p) for p in sources.probes()]}


def log_level(sources: DebugSources, request: Request) -> dict[str, Any]:
    body = request.body
    level = body.get("level") if isinstance(body, dict) else None
    if not isinstance(level, str) or level.lower() not in LOG_LEVELS:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       f"level: must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    sources.root_logger.setLevel(level.upper())
    log.warning("log level changed through the debug API", extra={"level": level.lower()})
    return {"level": level.lower()}


Handler = Callable[[DebugSources, Request], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    handler: Handler
    params: frozenset[str] = frozenset()


ROUTES: Final[Mapping[str, Route]] = {
    contract.STATUS: Route("GET", status),
    contract.PODS: Route("GET", pods),
    contract.METRICS: Route("GET", metrics, frozenset({"window"})),
    contract.SLO: Route("GET", slo),
    contract.QOS: Route("GET", qos),
    contract.HOOKS: Route("GET", hooks, frozenset({"limit"})),
    contract.EVICTIONS: Route("GET", evictions, frozenset({"limit"})),
    contract.CGROUP: Route("GET", cgroup, frozenset({"pod", "container"})),
    contract.PROBES: Route("GET", probes),
    contract.ADMIN_LOG_LEVEL: Route("POST", log_level),
}


def parse_query(text: str, allowed: frozenset[str]) -> dict[str, str]:
    """The query's parameters; raises a 400 :class:`ApiError` naming an unknown or repeated one."""
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"bad query {text!r}: {exc}") from None
    query: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: unknown parameter (known: {known})")
        if name in query:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: given more than once")
        query[name] = value
    return query


# ---------------------------------------------------------------------------------------------- server


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
        log.debug("debug API: " + format, *args)


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
                self.serve_forever(poll_interval=0.2)
            except BaseException as exc:
                on_failure(exc)

        self._thread = threading.Thread(target=serve, name="debugapi", daemon=True)
        self._thread.start()
        log.info("debug API listening", extra={"socket": self.socket_path})

    def stop(self, timeout_seconds: float) -> None:
        if self._thread is not None:
            self.shutdown()  # returns once serve_forever has seen the request (within poll_interval)
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
