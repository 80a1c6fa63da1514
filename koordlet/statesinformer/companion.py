"""The koordlet's side of the companion API (``koordinator.companion.v1``): the client, and NodeMetric out.

:class:`CompanionClient` holds one gRPC channel to the companion (TCP with optional TLS, or a unix socket) and
adds the bearer token to every call.  On it run:

- :class:`CompanionNodeMetricSink`, a NodeMetric reporter next to :class:`~.nodemetric.LocalNodeMetricSink`:
  one ``ReportNodeMetric`` per round, bounded by a timeout so a companion that is away never stalls reporting;
  the collect policy the companion answers with is handed to a listener (the runner's ``set_policy``).  When a
  :data:`TopologyReport` is attached, its report rides along (``topology_json``) whenever it differs from the last
  one the companion accepted.
- :class:`~.companionslo.CompanionNodeSLOSource` (its own module): NodeSLO in.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import grpc

from koordlet.apis.nodemetric import NodeMetricCollectPolicy, NodeMetricStatus
from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.errors import ConfigError, KoordletError

log = logging.getLogger(__name__)

REPORT_TIMEOUT_SECONDS: Final = 5.0
EVICT_TIMEOUT_SECONDS: Final = 10.0
"""Longest a NodeMetric report may hold the reporter thread (the interval is 60 s, floor 30 s)."""
INITIAL_BACKOFF_SECONDS: Final = 1.0
MAX_BACKOFF_SECONDS: Final = 30.0
TOKEN_REREAD_SECONDS: Final = 60.0
"""A token file is re-read at least this often even when its stat looks unchanged (a filesystem with coarse
timestamps that rewrote it in place with the same size)."""

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

PERMANENT_CODES: Final = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                               grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED})
"""Errors a retry in a second will not cure (a wrong token, an old companion): retried at the longest backoff."""


class CompanionError(KoordletError, ConnectionError):
    """A call to the companion failed; the message names the call and the gRPC status, ``code`` the status's
    name ("" when the call did not get that far)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def describe_error(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return f"{code.name if code is not None else 'UNKNOWN'}: {details}"


def status_code(exc: grpc.RpcError) -> Any:
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
            raise CompanionError(f"ReportNodeMetric to {self.target}: {describe_error(exc)}") from None

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
            code = status_code(exc)
            raise CompanionError(f"EvictPod {namespace}/{name} via {self.target}: {describe_error(exc)}",
                                 code=code.name if code is not None else "") from None
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
