"""The companion's gRPC API (``koordinator.companion.v1.Companion``): NodeMetric in, NodeSLO out.

Koordlets push their NodeMetric status with ``ReportNodeMetric`` and hold one ``WatchNodeSLO`` stream each.
The server runs on grpc's asyncio stack in a thread of its own, so an idle watch costs a coroutine rather than
a thread (a cluster has one stream per node), and :meth:`CompanionServer.notify` pushes a changed NodeSLO to
its watchers at once: there is no polling between a ConfigMap change and the koordlet.  The loop is uvloop's:
in C, it costs each report about a tenth less CPU than asyncio's own.

Every call authenticates to an :class:`~koordlet.companion.auth.Identity` (``authorization: Bearer <token>``;
see :mod:`koordlet.companion.auth`).  A koordlet's identity is bound to its node: a ``node_name`` other than
that node is ``PERMISSION_DENIED``, so a node reports, watches and evicts for itself only.  The unbound modes
(a shared token, none) are refused on an address other hosts reach unless ``insecure``.  A review that needs
kube-apiserver runs on a thread; a cached one is answered on the loop.  TLS is optional (certificate and key as
files or PEM bytes).  HTTP/2 keepalive pings on both ends notice a peer that vanished without closing its
connection (a powered-off node), so its stream and coroutine are released.

The server holds under abuse: at most ``max_concurrent_rpcs`` calls at once (RESOURCE_EXHAUSTED beyond, never a
queue), :data:`MAX_CONCURRENT_STREAMS` per connection, connections without calls closed after
:data:`MAX_CONNECTION_IDLE_MS`, request headers capped at :data:`MAX_METADATA_BYTES`, messages at
:data:`MAX_MESSAGE_BYTES`, and a client pinging too often is sent GOAWAY.

The status arrives as Koordinator JSON and is decoded with :meth:`NodeMetricStatus.from_json`, so the CR shape
has one definition; a status that does not decode is ``INVALID_ARGUMENT`` with the field path.  Decoding (up to
:data:`MAX_MESSAGE_BYTES`) and ``on_metric`` run on a few ingest threads (:class:`IngestQueue`), off the event
loop, so a large report or a slow consumer never delays a NodeSLO push.

A koordlet that sets ``want_node`` also gets the Kubernetes Node's facts (``node_json``: labels, annotations,
capacity, allocatable incl. batch-* and mid-*) with each update, and an update whenever they change; an older
koordlet that does not ask gets exactly the updates it always got.  A report's ``topology_json`` (the node's
topology, when it changed) is decoded and handed to ``on_topology`` before the status.

``EvictPod`` answers ``PERMISSION_DENIED`` for a pod that is not on the caller's node (never saying where it is)
and ``RESOURCE_EXHAUSTED`` when an eviction rate limit refuses it (:mod:`koordlet.companion.ratelimit`); the
koordlet retries either on a later round.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import grpc
import uvloop

from koordlet.apis.nodemetric import NodeMetricCollectPolicy, NodeMetricStatus
from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.companion.auth import (
    AnonymousAuthenticator,
    Authenticator,
    AuthError,
    Forbidden,
    Identity,
    StaticTokenAuthenticator,
    Unauthenticated,
    check_exposure,
    is_loopback,
)
from koordlet.companion.metricdecode import decode_status
from koordlet.companion.ratelimit import EvictionRateLimited
from koordlet.errors import KoordletError, ParseError
from koordlet.system.unixsocket import remove_stale_socket

log = logging.getLogger(__name__)

SLOForNode = Callable[[str], tuple[int, Mapping[str, Any], str] | None]
"""``node name -> (generation, NodeSLO spec JSON, origin)``, or None while the node has no spec.  Called on the
event loop: it must only read state (no I/O).  The generation must change whenever the spec does and should
survive a companion restart (the NodeSLO object's ``metadata.generation``), since koordlets send back the
generation they hold and an equal one is not re-sent."""

NodeForNode = Callable[[str], tuple[bytes, str] | None]
"""``node name -> (node_json, node_version)``: the Node subset the koordlet receives and a digest naming its
content, or None while the Node is unknown.  Called on the event loop: it must only read state."""

TopologyConsumer = Callable[[str, dict[str, Any]], None]
"""Receives a node's topology report (a JSON object) on the ingest pool, before its status."""

MetricConsumer = Callable[[str, NodeMetricStatus], None]
"""Receives each decoded report with its node name; runs on the ingest pool, may block briefly."""

AUTHORIZATION_KEY: Final = "authorization"
BEARER_PREFIX: Final = "Bearer "
SOCKET_MODE: Final = 0o600
INGEST_WORKERS: Final = 2
"""Threads decoding reports and calling ``on_metric``.  Decoding holds the GIL, so more threads do not decode
faster; they keep reports flowing while ``on_metric`` waits on I/O (an apiserver write)."""
INGEST_BATCH: Final = 4
"""Answers an ingest thread hands back to the event loop at once, at most: the reports that queued up while it
decoded are answered with one wake-up of the loop, and the first of them waits for no more than a few others."""
MAX_POLICY_JSONS: Final = 64
"""Distinct collect policies whose JSON is kept (a cluster has a handful: the policy is per node pool)."""
AUTH_WORKERS: Final = 8
"""Threads asking kube-apiserver for token reviews (a companion restart brings every koordlet back at once;
reviews of one token are coalesced, and the answers cached)."""
START_TIMEOUT_SECONDS: Final = 10.0
STOP_GRACE_SECONDS: Final = 2.0
MAX_MESSAGE_BYTES: Final = 16 << 20
"""A status with thousands of pods stays well below this; anything larger is a bug or an attack."""

KEEPALIVE_TIME_MS: Final = 30_000
"""Ping an idle connection every 30 s ..."""
KEEPALIVE_TIMEOUT_MS: Final = 10_000
"""... and drop it when the ping is not answered within 10 s."""
MIN_CLIENT_PING_INTERVAL_MS: Final = 20_000
"""Pings from clients closer together than this are answered with GOAWAY ``too_many_pings``; the koordlet
pings every ``KEEPALIVE_TIME_MS`` (30 s), above it."""

MAX_PING_STRIKES: Final = 2
"""Pings too close together tolerated before that GOAWAY (gRPC's default, stated)."""

DEFAULT_MAX_CONCURRENT_RPCS: Final = 10_000
"""Calls admitted at once across all connections; beyond, a call fails at once with RESOURCE_EXHAUSTED (the
koordlet retries it) instead of taking another coroutine.  Each koordlet holds one ``WatchNodeSLO`` stream for
good, so this must stay above the number of nodes (``--max-concurrent-rpcs``)."""
MAX_CONCURRENT_STREAMS: Final = 16
"""Calls at once on one connection: a koordlet needs its watch and a few unary calls; more streams from one
client wait on its side (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS) rather than queue on the server."""
MAX_CONNECTION_IDLE_MS: Final = 10 * 60 * 1000
"""A connection with no call for this long is closed (GOAWAY): a connection opened and never used is not held
for good.  A koordlet's connection is never idle (its watch is open); its channel reconnects when it needs to."""
MAX_METADATA_BYTES: Final = 16 * 1024
"""Request headers: the bearer token (a projected service-account JWT is 1-2 KiB) and gRPC's own."""
# No grpc.max_connection_age_ms: when the age and its grace run out, gRPC ends the koordlet's open watch with
# UNAVAILABLE ("max connection age"), which the koordlet logs as a failed watch and answers with an extra
# report, every age on every node.  Watches would first have to end themselves cleanly within the grace.

SERVER_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    # gRPC binds with SO_REUSEPORT by default: a second companion on the same port would then start "fine" and
    # take half the connections.  Off, the second bind fails loudly.
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
    ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
    ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
)


class EvictionRefused(KoordletError, PermissionError):
    """A koordlet asked to evict a pod that is not on its node.  The message must not say where the pod is."""


Evict = Callable[[str, str, str, str, str], str]


class CompanionAPIError(KoordletError, RuntimeError):
    """The companion API server could not start (bind, TLS files)."""


def node_json_of(obj: Mapping[str, Any]) -> tuple[bytes, str]:
    """The ``node_json`` subset of a v1.Node object and its ``node_version``.  Compact and key-sorted, so equal
    facts give equal bytes and the digest changes only with them (not with a heartbeat or a condition)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    subset = {"metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {}),
                           "annotations": dict(meta.get("annotations") or {})},
              "status": {"capacity": dict(status.get("capacity") or {}),
                         "allocatable": dict(status.get("allocatable") or {})}}
    raw = json.dumps(subset, separators=(",", ":"), sort_keys=True).encode()
    return raw, hashlib.sha256(raw).hexdigest()[:16]


def _unix_ms(seconds: float) -> int:
    return int(seconds * 1000)


def _bearer(context: Any) -> str | None:
    """The bearer token of a call's ``authorization`` metadata; None when there is none."""
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_KEY:
            text = value if isinstance(value, str) else bytes(value).decode(errors="replace")
            if text.startswith(BEARER_PREFIX):
                return text[len(BEARER_PREFIX):].strip() or None
            return None
    return None


_Answer = tuple["asyncio.Future[bytes]", bytes, BaseException | None]
_Report = tuple["asyncio.Future[bytes]", str, bytes, bytes]


class IngestQueue:
    """Hands reports from the event loop to the ingest threads and their answers back.

    Lighter than ``run_in_executor`` (an executor future, a work item and an asyncio future chained to it, and a
    loop wake-up per report): the loop puts its future and the report on a SimpleQueue, and a thread answers with
    one ``call_soon_threadsafe`` for all the reports it took in one go (up to :data:`INGEST_BATCH`: those that
    queued up while it decoded)."""

    def __init__(self, work: Callable[[str, bytes, bytes], bytes], workers: int = INGEST_WORKERS) -> None:
        self._work = work
        self._queue: queue.SimpleQueue[_Report | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"companion-ingest-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, node: str, status_json: bytes, topology_json: bytes) -> asyncio.Future[bytes]:
        """The future answer of ``work(node, status_json, topology_json)``; call on the event loop."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put((future, node, status_json, topology_json))
        return future

    def stop(self) -> None:
        """Ends the threads once they finish what is queued (without waiting for them)."""
        for _ in self._threads:
            self._queue.put(None)

    def _run(self) -> None:
        take, take_now = self._queue.get, self._queue.get_nowait
        while True:
            report = take()
            answers: list[_Answer] = []
            while report is not None:
                answers.append(self._answer(report))
                if len(answers) >= INGEST_BATCH:
                    break
                try:
                    report = take_now()
                except queue.Empty:
                    break
            if answers:
                _hand_back(answers)
            if report is None:
                return

    def _answer(self, report: _Report) -> _Answer:
        future, node, status_json, topology_json = report
        try:
            return future, self._work(node, status_json, topology_json), None
        except Exception as exc:  # handed to the call, which answers with a status code
            return future, b"", exc


def _hand_back(answers: list[_Answer]) -> None:
    """Settles the futures of ``answers`` on their event loop (from an ingest thread)."""
    with contextlib.suppress(RuntimeError):  # the loop closed under us: nobody waits for these any more
        answers[0][0].get_loop().call_soon_threadsafe(_settle, answers)


def _settle(answers: list[_Answer]) -> None:
    for future, value, error in answers:
        if future.done():  # the call was cancelled (deadline, client gone) while its report was decoded
            continue
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


class _Servicer(companion_pb2_grpc.CompanionServicer):
    def __init__(self, server: CompanionServer) -> None:
        self._server = server

    async def ReportNodeMetric(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method names)
        server = self._server
        await server.authorize(context, request.node_name)
        ingest = server.ingest_queue
        if ingest is None:  # stopping: the threads are gone
            await context.abort(grpc.StatusCode.UNAVAILABLE, "companion API stopping")
        assert ingest is not None  # abort() raised otherwise
        try:
            # On the ingest threads: a typical report decodes in ~0.3 ms, but one may be 16 MiB (seconds of
            # decoding), which on the loop would stall every NodeSLO push and keepalive.
            policy_json = await ingest.submit(request.node_name, bytes(request.status_json),
                                              bytes(request.topology_json))
        except ParseError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:  # the consumer failed: the koordlet retries next interval
            log.warning("NodeMetric consumer failed", extra={"node": request.node_name, "error": str(exc)})
            await context.abort(grpc.StatusCode.INTERNAL, f"NodeMetric not stored: {exc}")
        return companion_pb2.ReportNodeMetricResponse(accepted=True, collect_policy_json=policy_json)

    async def EvictPod(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self._server.authorize(context, request.node_name)
        evict = self._server.evict
        if evict is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this companion has no Kubernetes to evict through")
        assert evict is not None  # abort() raised otherwise
        for field in ("namespace", "name"):
            if not getattr(request, field):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: required")
        loop = asyncio.get_running_loop()
        try:
            # The Eviction API call blocks on kube-apiserver: off the event loop, which serves the watches.
            result = await loop.run_in_executor(None, evict, request.node_name, request.namespace, request.name,
                                                request.reason, request.message)
        except EvictionRefused as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except EvictionRateLimited as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except KoordletError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"eviction of {request.namespace}/{request.name}: {exc}")
        return companion_pb2.EvictPodResponse(result=result)

    async def WatchNodeSLO(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        await self._server.authorize(context, request.node_name)
        node = request.node_name
        # Headers go out at once so the koordlet knows the watch is established even while nothing changes.
        await context.send_initial_metadata(())
        instance = self._server.instance
        # A generation from another companion instance (restarted, or the other replica) compares with nothing.
        sent = request.last_generation if request.last_instance == instance else None
        want_node = request.want_node
        # A digest of the content: comparable across companion instances, unlike generations.
        sent_node = request.last_node_version if want_node else ""
        wake = asyncio.Event()
        self._server.watchers.setdefault(node, set()).add(wake)
        try:
            while not self._server.stopping:
                # Cleared before reading, so a notify() that lands while we read or send is not lost.
                wake.clear()
                current = self._server.slo_for_node(node)
                node_json, node_version = (self._server.node_for(node) or (b"", "")) if want_node else (b"", "")
                if current is not None and (current[0] != sent or node_version != sent_node):
                    generation, spec, origin = current
                    yield companion_pb2.NodeSLOUpdate(
                        generation=generation, spec_json=json.dumps(spec, separators=(",", ":")).encode(),
                        origin=origin, rendered_at_unix_ms=_unix_ms(time.time()), instance=instance,
                        collect_policy_json=self._server.collect_policy_json(node),
                        node_json=node_json, node_version=node_version)
                    sent, sent_node = generation, node_version
                    continue
                await wake.wait()
        finally:
            watchers = self._server.watchers.get(node)
            if watchers is not None:
                watchers.discard(wake)
                if not watchers:
                    del self._server.watchers[node]


class CompanionServer:
    """``Companion`` on ``bind`` (``host:port``, port 0 picks one, or ``unix:/path``).

    Who may call: ``authenticator`` (per-node identities, :class:`~koordlet.companion.auth.TokenReviewAuthenticator`),
    else the shared ``token``, else nobody is asked (a unix socket of mode 0600 in the standalone koordlet).  The
    last two bind no caller to a node and are refused on an address other hosts reach unless ``insecure``.  At
    most ``max_concurrent_rpcs`` calls run at once (every koordlet's watch is one: keep it above the node
    count); one more is answered RESOURCE_EXHAUSTED at once.  TLS is on when ``cert_file`` and ``key_file`` (or
    ``cert_pem`` and ``key_pem``) are given.  ``collect_policy`` (optional) tells each koordlet the NodeMetric
    collect policy wanted for its node; without it the response carries none and koordlets keep their own."""

    name: Final = "companion-api"

    def __init__(self, bind: str, token: str | None, slo_for_node: SLOForNode, on_metric: MetricConsumer, *,
                 collect_policy: Callable[[str], NodeMetricCollectPolicy | None] | None = None,
                 node_for_node: NodeForNode | None = None, on_topology: TopologyConsumer | None = None,
                 cert_file: str | None = None, key_file: str | None = None,
                 cert_pem: bytes | None = None, key_pem: bytes | None = None,
                 evict: Evict | None = None, authenticator: Authenticator | None = None,
                 insecure: bool = False, max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS) -> None:
        if (cert_file is None) != (key_file is None):
            raise CompanionAPIError("companion API: TLS needs both cert_file and key_file")
        if (cert_pem is None) != (key_pem is None):
            raise CompanionAPIError("companion API: TLS needs both cert_pem and key_pem")
        if cert_file is not None and cert_pem is not None:
            raise CompanionAPIError("companion API: give the TLS certificate as files or as PEM, not both")
        if token is not None and not token:
            raise CompanionAPIError("companion API: token is empty (use None to turn authentication off)")
        if token is not None and authenticator is not None:
            raise CompanionAPIError("companion API: give a token or an authenticator, not both")
        if max_concurrent_rpcs < 1:
            raise CompanionAPIError(f"companion API: max_concurrent_rpcs must be at least 1, got "
                                    f"{max_concurrent_rpcs}")
        if authenticator is None:
            authenticator = StaticTokenAuthenticator(token) if token is not None else AnonymousAuthenticator()
        try:
            check_exposure(bind, authenticator, insecure)
        except KoordletError as exc:
            raise CompanionAPIError(str(exc)) from None
        self.authenticator: Authenticator = authenticator
        self.insecure = insecure
        self.max_concurrent_rpcs = max_concurrent_rpcs
        """Calls admitted at once (watches included); beyond, RESOURCE_EXHAUSTED."""
        self.bind = bind
        self.slo_for_node = slo_for_node
        self._on_metric = on_metric
        self._collect_policy = collect_policy
        self._policy_jsons: dict[NodeMetricCollectPolicy, bytes] = {}
        self._node_for_node = node_for_node
        self._on_topology = on_topology
        self.evict = evict
        """(node, namespace, name, reason, message) -> "evicted" | "blocked" | "gone"; raises EvictionRefused
        for a pod of another node (PERMISSION_DENIED), EvictionRateLimited over a rate limit (RESOURCE_EXHAUSTED),
        KoordletError when the eviction could not be asked for (UNAVAILABLE).  ``node`` is the caller's own node
        when the caller is bound to one.  None: no evictions (EvictPod answers UNIMPLEMENTED)."""
        self._cert_file = cert_file
        self._key_file = key_file
        self._cert_pem = cert_pem
        self._key_pem = key_pem
        self.ingest_queue: IngestQueue | None = None
        self._auth_pool: ThreadPoolExecutor | None = None
        self.port = 0
        """The bound TCP port once started (0 for a unix socket)."""
        self.stopping = False
        self.instance = ""
        """Names this serving run in every NodeSLO update; new at each start (see ``last_instance``)."""
        self.watchers: dict[str, set[asyncio.Event]] = {}
        """Per node, the wake-up event of each open watch (touched only on the event loop)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- handlers

    async def authenticate(self, context: Any) -> Identity:
        """The caller's identity; aborts the call with UNAUTHENTICATED (no or a refused token),
        PERMISSION_DENIED (a valid token of someone else) or UNAVAILABLE (kube-apiserver could not be asked)."""
        token = _bearer(context)
        try:
            identity = self.authenticator.cached(token)
            if identity is None:
                loop = asyncio.get_running_loop()
                identity = await loop.run_in_executor(self._auth_pool, self.authenticator.authenticate, token)
        except Unauthenticated as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            raise  # abort() raised already
        except Forbidden as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            raise
        except AuthError as exc:  # AuthUnavailable, or any other refusal the authenticator could not classify
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        return identity

    async def authorize(self, context: Any, node_name: str) -> Identity:
        """Authenticates the caller and checks it may speak for ``node_name`` (required)."""
        identity = await self.authenticate(context)
        if not node_name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node_name: required")
        if identity.node is not None and node_name != identity.node:
            log.warning("companion API call for another node refused",
                        extra={"caller": identity.name, "node": identity.node, "asked_for": node_name})
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"node_name {node_name!r}: this caller speaks for node {identity.node!r} only")
        return identity

    def node_for(self, node: str) -> tuple[bytes, str] | None:
        """``(node_json, node_version)`` of ``node`` for its koordlet; None when unknown or not provided."""
        return self._node_for_node(node) if self._node_for_node is not None else None

    def ingest(self, node: str, status_json: bytes, topology_json: bytes = b"") -> bytes:
        """Decodes one report and hands it on; returns the collect policy JSON for the reply (b"" for none).
        Raises ParseError naming the field path of a bad status or topology."""
        if topology_json and self._on_topology is not None:
            try:
                topology = json.loads(topology_json)
            except (ValueError, UnicodeDecodeError) as exc:
                raise ParseError(f"topology_json: not valid JSON: {exc}") from None
            except RecursionError:
                raise ParseError("topology_json: nested too deeply") from None
            if not isinstance(topology, dict):
                raise ParseError(f"topology_json: must be a JSON object, got {type(topology).__name__}")
            self._on_topology(node, topology)
        status = decode_status(status_json, "status", "status_json")
        self._on_metric(node, status)
        return self.collect_policy_json(node)

    def collect_policy_json(self, node: str) -> bytes:
        """The collect policy the companion wants from ``node`` as Koordinator JSON (b"" for none)."""
        if self._collect_policy is None:
            return b""
        policy = self._collect_policy(node)
        if policy is None:
            return b""
        # Written once per distinct policy, not once per report: every node of a pool has the same one.
        text = self._policy_jsons.get(policy)
        if text is None:
            text = json.dumps(policy.to_json()).encode()
            if len(self._policy_jsons) >= MAX_POLICY_JSONS:
                self._policy_jsons.clear()
            self._policy_jsons[policy] = text
        return text

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """Binds and serves on a thread of its own; returns once serving.  Raises CompanionAPIError when the
        address cannot be bound or the TLS files cannot be read."""
        if self._thread is not None:
            raise CompanionAPIError("companion API: already started")
        credentials = self._credentials()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = uvloop.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(credentials))
            except BaseException as exc:
                failure.append(exc)
                loop.close()
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            except BaseException as exc:  # the loop itself died: nothing is served any more
                if on_failure is not None:
                    on_failure(exc)
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self.stopping = False
        self.instance = secrets.token_hex(8)
        self.ingest_queue = IngestQueue(self.ingest)
        self._auth_pool = ThreadPoolExecutor(AUTH_WORKERS, thread_name_prefix="companion-auth")
        self._thread = threading.Thread(target=run, name="companion-api", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_SECONDS) or failure:
            self._thread.join(STOP_GRACE_SECONDS)
            self._thread = None
            self._shutdown_pools()
            cause = failure[0] if failure else TimeoutError("server did not start")
            if isinstance(cause, CompanionAPIError):
                raise cause
            raise CompanionAPIError(f"companion API: cannot serve on {self.bind}: {cause}") from cause
        log.info("companion API serving", extra={"bind": self.bind, "port": self.port,
                                                 "tls": credentials is not None,
                                                 "auth": self.authenticator.mode})
        if not is_loopback(self.bind) and credentials is None and self.authenticator.mode != "none":
            log.warning("companion API without TLS on a non-loopback address: bearer tokens cross the network in "
                        "clear", extra={"bind": self.bind})

    def _credentials(self) -> Any:
        if self._cert_pem is not None and self._key_pem is not None:
            cert, key = self._cert_pem, self._key_pem
        elif self._cert_file is not None and self._key_file is not None:
            try:
                cert = Path(self._cert_file).read_bytes()
                key = Path(self._key_file).read_bytes()
            except OSError as exc:
                raise CompanionAPIError(f"companion API: cannot read TLS files: {exc}") from None
        else:
            return None
        return grpc.ssl_server_credentials([(key, cert)])

    async def _serve(self, credentials: Any) -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS, maximum_concurrent_rpcs=self.max_concurrent_rpcs)
        companion_pb2_grpc.add_CompanionServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), server)
        unix_path = self.bind[len("unix:"):] if self.bind.startswith("unix:") else None
        if unix_path is not None:
            Path(unix_path).parent.mkdir(parents=True, exist_ok=True)
            try:
                remove_stale_socket(unix_path, "companion API socket")
            except KoordletError as exc:
                raise CompanionAPIError(str(exc)) from None
        try:
            if credentials is not None:
                port = server.add_secure_port(self.bind, credentials)
            else:
                port = server.add_insecure_port(self.bind)
        except RuntimeError as exc:
            await server.stop(None)
            raise CompanionAPIError(f"companion API: cannot bind {self.bind}: {exc}") from None
        if not port:
            await server.stop(None)
            raise CompanionAPIError(f"companion API: cannot bind {self.bind}")
        await server.start()
        if unix_path is not None:
            os.chmod(unix_path, SOCKET_MODE)
        else:
            self.port = port
        self._server = server

    def _shutdown_pools(self) -> None:
        if self.ingest_queue is not None:
            self.ingest_queue.stop()
        if self._auth_pool is not None:
            self._auth_pool.shutdown(wait=False, cancel_futures=True)
        self.ingest_queue = self._auth_pool = None

    def notify(self, node_name: str | None = None) -> None:
        """Wakes the watchers of ``node_name`` (every watcher for None) to re-read their spec; thread-safe and
        cheap, call it on every change of the SLO config."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under us: nobody is watching any more
            loop.call_soon_threadsafe(self._wake, node_name)

    def _wake(self, node_name: str | None) -> None:
        groups = list(self.watchers.values()) if node_name is None else [self.watchers.get(node_name, set())]
        for group in groups:
            for event in group:
                event.set()

    def stop(self, timeout_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Ends every watch, drains unary calls for up to ``timeout_seconds`` and stops the thread."""
        thread, loop, server = self._thread, self._loop, self._server
        self._thread = None
        if thread is None or loop is None:
            return

        async def shutdown() -> None:
            self.stopping = True
            self._wake(None)
            if server is not None:
                await server.stop(timeout_seconds)
            loop.stop()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(timeout_seconds + STOP_GRACE_SECONDS)
        if thread.is_alive():
            log.warning("companion API still stopping", extra={"timeout_seconds": timeout_seconds})
        self._shutdown_pools()
        self._server = None
        if self.bind.startswith("unix:"):
            with contextlib.suppress(OSError):
                os.unlink(self.bind[len("unix:"):])


