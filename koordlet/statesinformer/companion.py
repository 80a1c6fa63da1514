"""The koordlet's side of the companion API: NodeMetric out, NodeSLO in (``koordinator.companion.v1``).

:class:`CompanionClient` holds one gRPC channel to the companion (TCP with optional TLS, or a unix socket) and
adds the bearer token to every call.  On it run:

- :class:`CompanionNodeMetricSink`, a NodeMetric reporter next to :class:`~.nodemetric.LocalNodeMetricSink`:
  one ``ReportNodeMetric`` per round, bounded by a timeout so a companion that is away never stalls reporting;
  the collect policy the companion answers with is handed to a listener (the runner's ``set_policy``).  When a
  :data:`TopologyReport` is attached, its report rides along (``topology_json``) whenever it differs from the last
  one the companion accepted.
- :class:`CompanionNodeSLOSource`, a thread holding a ``WatchNodeSLO`` stream: each update is offered to the
  NodeSLO holder (a spec the holder rejects leaves the last good one in force), and the last good spec is
  persisted so that a koordlet restarted while the companion is away starts from it rather than from the
  defaults.  A broken stream is reopened with exponential backoff (1 s doubling to 30 s, with jitter so a
  companion restart is not met by every node in the same second); HTTP/2 keepalive notices a dead companion
  behind a silent connection.  The watch asks for the Kubernetes Node's facts too (``want_node``): each
  ``node_json`` is validated into a :class:`~.nodeinfo.KubeNodeInfo` and handed on (``StatesInformer.set_kube_node``)
  and persisted with the spec; a companion that sends none (an older one, or one without Kubernetes) changes
  nothing.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import grpc

from koordlet.apis.nodemetric import NodeMetricCollectPolicy, NodeMetricStatus
from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.component import Worker
from koordlet.errors import ConfigError, KoordletError, ParseError
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.system import atomicfile

log = logging.getLogger(__name__)

REPORT_TIMEOUT_SECONDS: Final = 5.0
EVICT_TIMEOUT_SECONDS: Final = 10.0
"""Longest a NodeMetric report may hold the reporter thread (the interval is 60 s, floor 30 s)."""
INITIAL_BACKOFF_SECONDS: Final = 1.0
MAX_BACKOFF_SECONDS: Final = 30.0
JITTER: Final = 0.2
"""Each backoff is scaled by a random factor in [1 - JITTER, 1 + JITTER]."""
STOP_GRACE_SECONDS: Final = 2.0
PERSIST_FORMAT: Final = 1
TOKEN_REREAD_SECONDS: Final = 60.0
"""A token file is re-read at least this often even when its stat looks unchanged (a filesystem with coarse
timestamps that rewrote it in place with the same size)."""
BAD_SUFFIX: Final = ".bad"
"""An unusable persisted NodeSLO is renamed to its path plus this, for inspection."""

KEEPALIVE_TIME_MS: Final = 30_000
"""Ping the companion every 30 s even with no call in flight (the watch is idle for hours) ..."""
KEEPALIVE_TIMEOUT_MS: Final = 10_000
"""... and treat the connection as dead when a ping is not answered within 10 s: the watch fails with
UNAVAILABLE and is reopened, instead of waiting forever on a peer that is gone."""

CHANNEL_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # The channel's own reconnect backoff, kept in line with the watch loop's so the two do not compound.
    ("grpc.initial_reconnect_backoff_ms", int(INITIAL_BACKOFF_SECONDS * 1000)),
    ("grpc.min_reconnect_backoff_ms", int(INITIAL_BACKOFF_SECONDS * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(MAX_BACKOFF_SECONDS * 1000)),
)

_PERMANENT: Final = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                               grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED})
"""Errors a retry in a second will not cure (a wrong token, an old companion): retried at the longest backoff."""


class CompanionError(KoordletError, ConnectionError):
    """A call to the companion failed; the message names the call and the gRPC status."""


def _describe(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return f"{code.name if code is not None else 'UNKNOWN'}: {details}"


def _code(exc: grpc.RpcError) -> Any:
    return exc.code() if isinstance(exc, grpc.Call) else None


class CompanionClient:
    """One channel to the companion at ``target`` (``host:port`` or ``unix:/path``) for ``node_name``.

    ``token`` goes in ``authorization: Bearer`` metadata on every call: a string, or a function returning the
    current one (:func:`token_from_file`, so a rotated token is picked up without a restart); None or an empty
    token sends none.  ``ca_file`` turns TLS on and names the CA that signed the companion's certificate."""

    def __init__(self, target: str, token: str | Callable[[], str | None] | None, node_name: str,
                 ca_file: str | None = None) -> None:
        if not node_name:
            raise ConfigError("companion: node_name is empty")
        self.target = target
        self.node_name = node_name
        self._token = token
        if ca_file is not None:
            try:
                root = Path(ca_file).read_bytes()
            except OSError as exc:
                raise ConfigError(f"companion.caFile: cannot read {ca_file}: {exc.strerror or exc}") from None
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=root),
                                                options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stub = companion_pb2_grpc.CompanionStub(self._channel)  # type: ignore[no-untyped-call]

    def report(self, status: NodeMetricStatus, timeout_seconds: float = REPORT_TIMEOUT_SECONDS,
               topology_json: bytes = b"") -> Any:
        """Sends one status (and the topology report when given); returns the ``ReportNodeMetricResponse``.
        Raises CompanionError."""
        request = companion_pb2.ReportNodeMetricRequest(
            node_name=self.node_name, status_json=json.dumps(status.to_json(), separators=(",", ":")).encode(),
            sent_at_unix_ms=int(time.time() * 1000), topology_json=topology_json)
        try:
            return self._stub.ReportNodeMetric(request, timeout=timeout_seconds, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise CompanionError(f"ReportNodeMetric to {self.target}: {_describe(exc)}") from None

    def watch(self, last_generation: int, last_instance: str = "", last_node_version: str = "",
              want_node: bool = True) -> Any:
        """Opens ``WatchNodeSLO`` from the generation held and the companion instance it came from, asking for
        the Node's facts (``want_node``) unless the caller holds ``last_node_version`` of them already.

        The result iterates ``NodeSLOUpdate`` messages (raising ``grpc.RpcError`` when the stream breaks), and
        ``cancel()`` ends it from another thread."""
        request = companion_pb2.WatchNodeSLORequest(node_name=self.node_name, last_generation=last_generation,
                                                    last_instance=last_instance, want_node=want_node,
                                                    last_node_version=last_node_version)
        return self._stub.WatchNodeSLO(request, metadata=self._metadata())

    def evict(self, namespace: str, name: str, reason: str, message: str,
              timeout_seconds: float = EVICT_TIMEOUT_SECONDS) -> str:
        """Asks the companion to evict a pod of this node through the Eviction API; returns ``evicted``,
        ``blocked`` or ``gone``.  Raises CompanionError."""
        request = companion_pb2.EvictPodRequest(node_name=self.node_name, namespace=namespace, name=name,
                                                reason=reason, message=message)
        try:
            response = self._stub.EvictPod(request, timeout=timeout_seconds, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise CompanionError(f"EvictPod {namespace}/{name} via {self.target}: {_describe(exc)}") from None
        return str(response.result)

    def close(self) -> None:
        self._channel.close()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        token = self._token() if callable(self._token) else self._token
        return (("authorization", f"Bearer {token}"),) if token else ()


def token_from_file(path: str, *, reread_seconds: float = TOKEN_REREAD_SECONDS,
                    clock: Callable[[], float] = time.monotonic) -> Callable[[], str | None]:
    """A token provider reading ``path`` (surrounding whitespace stripped) when the file changed since the last
    call, and at least every ``reread_seconds``, so a rotated token reaches the next call.

    The companion's default is the koordlet's projected service-account token
    (``/var/run/secrets/koordinator.sh/companion/token``, audience ``koord-companion``), which kubelet replaces
    before it expires by writing a new file and swapping the ``..data`` symlink above it: ``os.stat`` follows the
    link, so the new inode shows at once.  An unreadable file gives the last token read (None before one was),
    logged once per failure streak: the companion then answers UNAUTHENTICATED, which says more."""
    state: dict[str, Any] = {"stamp": None, "token": None, "failing": False, "read_at": 0.0}

    def current() -> str | None:
        try:
            st = os.stat(path)
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)
            now = clock()
            if stamp != state["stamp"] or now - state["read_at"] >= reread_seconds:
                state["token"] = Path(path).read_text(encoding="utf-8").strip() or None
                state["stamp"] = stamp
                state["read_at"] = now
            state["failing"] = False
        except (OSError, UnicodeDecodeError) as exc:
            if not state["failing"]:
                log.warning("cannot read the companion token file", extra={"path": path, "error": str(exc)})
            state["failing"] = True
        token: str | None = state["token"]
        return token

    return current


# ---------------------------------------------------------------------------------------------- NodeMetric

TopologyReport = Callable[[], "dict[str, Any] | None"]
"""The node topology report (CPU topology, kubelet CPU manager, shared pools) for the companion's
NodeResourceTopology, as JSON-shaped data; None while it is not known (nothing is sent).  The NodeTopologyReport
feature provides it (``TopologySource.current``)."""


class CompanionNodeMetricSink:
    """Reports each NodeMetric status to the companion (a :class:`~.nodemetric.NodeMetricReporter`).

    A failure is logged once per streak of failures (and its end once), not every round: a companion that is
    away for an hour would otherwise log 60 identical warnings per node.  It does not raise either, because the
    runner logs every raising reporter; :attr:`failures` and :attr:`failing` say how it goes.  A call never
    holds the reporter longer than ``timeout_seconds``."""

    def __init__(self, client: CompanionClient, timeout_seconds: float = REPORT_TIMEOUT_SECONDS,
                 on_policy: Callable[[NodeMetricCollectPolicy], None] | None = None) -> None:
        self._client = client
        self._timeout = timeout_seconds
        self.on_policy = on_policy
        """Receives the collect policy the companion asks for when it changes (the runner's ``set_policy``)."""
        self._policy_json: bytes = b""
        self.topology: TopologyReport | None = None
        """Attached by the daemon when the topology is reported; its report goes out when it changed."""
        self._topology_sent: bytes = b""
        """The topology the companion last accepted (re-sent whenever the current one differs)."""
        self.failing = False
        self.failures = 0
        self.reports = 0

    def report(self, status: NodeMetricStatus) -> None:
        topology = self._topology_json()
        try:
            response = self._client.report(status, self._timeout, topology_json=topology)
        except CompanionError as exc:
            self.failures += 1
            if not self.failing:
                log.warning("NodeMetric not delivered to the companion; retrying every round, logged again "
                            "when it recovers", extra={"error": str(exc)})
            self.failing = True
            return
        self.reports += 1
        if topology and response.accepted:
            self._topology_sent = topology
        if self.failing:
            log.info("NodeMetric delivered to the companion again", extra={"target": self._client.target})
            self.failing = False
        self.offer_policy(response.collect_policy_json)

    def topology_reconnected(self) -> None:
        """Forget what the companion holds (it restarted, or another replica serves): the next report carries
        the topology again."""
        self._topology_sent = b""

    def _topology_json(self) -> bytes:
        """The current topology as compact, key-sorted JSON when it differs from the accepted one; else b""."""
        source = self.topology
        if source is None:
            return b""
        try:
            current = source()
            if current is None:
                return b""
            raw = json.dumps(current, separators=(",", ":"), sort_keys=True).encode()
        except Exception as exc:  # a failing source must not stop NodeMetric reporting
            log.warning("topology report not built; NodeMetric sent without it", extra={"error": str(exc)})
            return b""
        return b"" if raw == self._topology_sent else raw

    def offer_policy(self, raw: bytes) -> None:
        """The collect policy the companion asks for, from a report's reply or a NodeSLO update; applied
        when it differs from the last one (empty: keep the current policy)."""
        if not raw or raw == self._policy_json:
            return
        self._policy_json = raw
        try:
            policy = NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": json.loads(raw)})
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # ConfigError is a ValueError
            log.error("companion sent an invalid collect policy; keeping the current one", extra={"error": str(exc)})
            return
        if self.on_policy is not None:
            self.on_policy(policy)


# ---------------------------------------------------------------------------------------------- NodeSLO


class NodeSLOTarget(Protocol):
    """What the source needs of :class:`koordlet.statesinformer.nodeslo.NodeSLOHolder`."""

    def offer_spec(self, spec_json: Any, origin: str, where: str = "spec") -> bool:
        ...

    def reject(self, origin: str, reason: str) -> bool:
        ...


class CompanionNodeSLOSource:
    """Keeps the holder's NodeSLO in step with the companion over a ``WatchNodeSLO`` stream (a daemon
    component: :meth:`start`, :meth:`stop`).

    ``persist_path`` holds the last good spec (``{"format", "generation", "instance", "origin", "spec"}``, replaced
    atomically); :meth:`start` offers it first, so a koordlet restarted while the companion is away runs the
    spec it ran before instead of the defaults.  A dead or restarting companion changes nothing in the holder:
    the spec in force stays until the companion sends another one."""

    name: Final = "companion-nodeslo"

    def __init__(self, client: CompanionClient, holder: NodeSLOTarget, persist_path: str | os.PathLike[str], *,
                 initial_backoff_seconds: float = INITIAL_BACKOFF_SECONDS,
                 max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
                 rng: Callable[[], float] = random.random,
                 on_policy: Callable[[bytes], None] | None = None,
                 on_reconnect: Callable[[], None] | None = None,
                 on_node: Callable[[KubeNodeInfo], None] | None = None) -> None:
        """``on_policy`` receives the NodeMetric collect policy each update carries (the report sink's
        ``offer_policy``), so the first report already runs on the companion's cadence.  ``on_reconnect`` is
        called when a watch is established again after the first (the NodeMetric runner's ``report_now``): a
        companion that restarted has no figures of this node until the next report, up to an interval away.
        ``on_node`` receives each valid Node the companion sends (``StatesInformer.set_kube_node``); without it
        the watch does not ask for the Node."""
        self._client = client
        self._on_policy = on_policy
        self._on_reconnect = on_reconnect
        self._on_node = on_node
        self._holder = holder
        self.persist_path = Path(persist_path)
        self._initial_backoff = initial_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._rng = rng
        self._lock = threading.Lock()
        self._worker = Worker("koordlet-companion-nodeslo")
        self._call: Any = None
        self.last_generation = 0
        """Generation of the newest update received (accepted or not): sent back when the watch reopens."""
        self.last_instance = ""
        """The companion instance ``last_generation`` came from (generations compare only within one)."""
        self.last_node_version = ""
        """``node_version`` of the newest valid Node received (sent back so an unchanged one is not re-sent)."""
        self.node: KubeNodeInfo | None = None
        """The newest valid Node (None: none received nor persisted)."""
        self._node_json: bytes = b""
        self.connected = False
        """True while a watch stream is established."""
        self.connects = 0
        """Streams the companion accepted so far."""
        self._persisted: tuple[int, str, Any, bytes] | None = None
        self._persist_failing = False

    # ------------------------------------------------------------------------------------- persistence

    def load_persisted(self) -> bool:
        """Offers the persisted spec to the holder; True when one was found and accepted.  A missing file is
        normal (first start).  One that cannot be read is logged and ignored; one whose content is unusable
        (garbage, truncated, another format) is logged, moved to ``<path>.bad`` for inspection and ignored.
        Either way the holder keeps the spec it has (the defaults at start) until the companion sends one."""
        path = str(self.persist_path)
        try:
            raw = self.persist_path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("persisted NodeSLO unreadable, ignored until the companion sends one",
                        extra={"path": path, "error": exc.strerror or str(exc)})
            return False
        try:
            document = _decode_persisted(raw)
        except ValueError as exc:
            bad = f"{path}{BAD_SUFFIX}"
            try:
                os.replace(path, bad)  # a rename needs no space on a full disk
            except OSError as move_error:
                bad = f"not moved: {move_error.strerror or move_error}"
            log.warning("persisted NodeSLO unusable, dropped until the companion sends one",
                        extra={"path": path, "error": str(exc), "bytes": len(raw), "moved_to": bad})
            return False
        origin = f"companion:{document.get('origin') or self._client.target} (persisted)"
        node_raw = self._load_persisted_node(document.get("node"))
        if not self._holder.offer_spec(document["spec"], origin):
            return False
        self.last_generation = document["generation"]
        instance = document.get("instance")
        self.last_instance = instance if isinstance(instance, str) else ""
        self._persisted = (document["generation"], self.last_instance, document["spec"], node_raw)
        log.info("NodeSLO loaded from the persisted copy", extra={"path": path, "generation": self.last_generation})
        return True

    def _load_persisted_node(self, node: Any) -> bytes:
        """Hands on the persisted Node (an optional key: copies written before it have none); its node_json."""
        if node is None:
            return b""
        try:
            info = KubeNodeInfo.from_json(node, "persisted node")
        except ParseError as exc:
            log.warning("persisted Node unusable, ignored until the companion sends one",
                        extra={"path": str(self.persist_path), "error": str(exc)})
            return b""
        self._set_node(info, str(node.get("version", "")) if isinstance(node, Mapping) else "")
        self._node_json = json.dumps(info.to_json(), sort_keys=True).encode()
        return self._node_json

    def _set_node(self, info: KubeNodeInfo, version: str) -> None:
        self.node = info
        self.last_node_version = version
        if self._on_node is not None:
            self._on_node(info)

    def _persist(self, update: Any, spec: Any) -> None:
        if self._persisted == (update.generation, update.instance, spec, self._node_json):
            return
        document: dict[str, Any] = {"format": PERSIST_FORMAT, "generation": update.generation,
                                    "instance": update.instance, "origin": update.origin, "spec": spec}
        if self.node is not None:
            document["node"] = {**self.node.to_json(), "version": self.last_node_version}
        data = json.dumps(document, sort_keys=True).encode() + b"\n"
        directory = self.persist_path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # A failed directory fsync loses nothing a crash would not: the copy is only a fallback.
            atomicfile.write(self.persist_path, data, mode=0o600, on_dir_sync_error=lambda exc: None)
        except OSError as exc:
            if not self._persist_failing:
                log.warning("cannot persist NodeSLO; a restart without the companion would use the defaults",
                            extra={"path": str(self.persist_path), "error": exc.strerror or str(exc)})
            self._persist_failing = True
            return
        if self._persist_failing:
            log.info("NodeSLO persisted again", extra={"path": str(self.persist_path), "generation": update.generation})
        self._persist_failing = False
        self._persisted = (update.generation, update.instance, spec, self._node_json)

    # ------------------------------------------------------------------------------------- updates

    def apply(self, update: Any) -> bool:
        """Offers one ``NodeSLOUpdate`` to the holder and persists it when accepted; True when accepted."""
        self.last_generation = update.generation
        self.last_instance = update.instance
        origin = f"companion:{update.origin or self._client.target}"
        if self._on_policy is not None and update.collect_policy_json:
            self._on_policy(bytes(update.collect_policy_json))
        if update.node_json:
            self._apply_node(bytes(update.node_json), update.node_version)
        try:
            spec = json.loads(update.spec_json)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return self._holder.reject(origin, f"spec_json: not valid JSON: {exc}")
        if not self._holder.offer_spec(spec, origin):
            return False
        self._persist(update, spec)
        return True

    def _apply_node(self, raw: bytes, version: str) -> None:
        """A Node from the companion: handed on when valid; an invalid one is logged and the last good stays."""
        if raw == self._node_json:
            self.last_node_version = version
            return
        try:
            info = KubeNodeInfo.from_json(raw)
        except ParseError as exc:
            log.error("companion sent an invalid Node; keeping the last good one", extra={"error": str(exc)})
            return
        self._node_json = raw
        for problem in info.problems():
            log.warning("companion sent a Node fact that cannot be used, treated as absent", extra={"error": problem})
        self._set_node(info, version)

    # ------------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        if self._worker.running:
            raise RuntimeError("CompanionNodeSLOSource already started")
        self.load_persisted()
        self._worker.start(lambda: self._loop(on_failure))

    def stop(self, timeout_seconds: float = STOP_GRACE_SECONDS) -> None:
        self._worker.stopping.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()  # a watch in flight ends now rather than at the companion's next message
        if not self._worker.stop(timeout_seconds):
            log.warning("companion NodeSLO watch still busy at stop", extra={"timeout_seconds": timeout_seconds})

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reopening after ``attempt`` consecutive failures (1-based)."""
        base = min(self._initial_backoff * 2.0 ** min(attempt - 1, 32), self._max_backoff)
        return base * (1 - JITTER + 2 * JITTER * self._rng())

    def _loop(self, on_failure: Callable[[BaseException], None]) -> None:
        try:
            attempt = 0
            while not self._worker.stopping.is_set():
                connected, error = self._watch_once()
                if self._worker.stopping.is_set():
                    break
                if connected:  # a stream that worked starts the backoff afresh
                    attempt = 0
                if error is None:  # the companion ended the stream cleanly (shutting down): reopen at once
                    continue
                attempt += 1
                code = _code(error)
                delay = self._max_backoff if code in _PERMANENT else self.backoff(attempt)
                if attempt == 1 or code in _PERMANENT:
                    log.warning("NodeSLO watch on the companion failed; keeping the NodeSLO in force",
                                extra={"target": self._client.target, "error": _describe(error),
                                       "retry_seconds": round(delay, 1)})
                else:
                    log.debug("NodeSLO watch still failing", extra={"attempt": attempt, "error": _describe(error)})
                self._worker.stopping.wait(delay)
        except BaseException as exc:  # a bug in the loop: the daemon decides
            on_failure(exc)

    def _watch_once(self) -> tuple[bool, grpc.RpcError | None]:
        """One stream from open to end: whether the companion accepted it, and the error that ended it (None
        for a clean end)."""
        call = self._client.watch(self.last_generation, self.last_instance, self.last_node_version,
                                  want_node=self._on_node is not None)
        with self._lock:
            self._call = call
        if self._worker.stopping.is_set():  # stop() ran before the call was visible to it
            call.cancel()
        connected = False
        try:
            # Returns once the companion sent its headers (it does so on accepting the watch) or the call failed.
            call.initial_metadata()
            if not call.done():
                connected = True
                self.connects += 1
                self.connected = True
                log.info("watching NodeSLO on the companion", extra={"target": self._client.target,
                                                                     "generation": self.last_generation})
                if self.connects > 1 and self._on_reconnect is not None:
                    self._on_reconnect()
            for update in call:
                self.apply(update)
            return connected, None
        except grpc.RpcError as exc:
            return connected, exc
        finally:
            with self._lock:
                self._call = None
            self.connected = False


def _decode_persisted(raw: bytes) -> Mapping[str, Any]:
    """The persisted document in ``raw``; ValueError naming what is wrong with it."""
    try:
        document = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise ValueError(f"must hold a JSON object, got {type(document).__name__}")
    if document.get("format") != PERSIST_FORMAT:
        raise ValueError(f"format: expected {PERSIST_FORMAT}, got {document.get('format')!r}")
    if not isinstance(document.get("generation"), int):
        raise ValueError(f"generation: must be an integer, got {document.get('generation')!r}")
    if not isinstance(document.get("spec"), Mapping):
        raise ValueError(f"spec: must be an object, got {type(document.get('spec')).__name__}")
    return document


