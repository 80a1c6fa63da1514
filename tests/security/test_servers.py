"""Servers that hold under abuse: each test performs the attack against the real server on loopback or a unix
socket and shows it is refused or bounded.

- the scheduler extender: a 64 MiB body (413 from the header alone; chunked, read only up to the 16 MiB cap),
  and a ``Nodes``-carrying request that would rewrite a real node's allocatable and thresholds;
- every HTTP server (extender, koordlet's :9316 metrics, the debug API): slowloris (headers byte by byte) and
  more idle connections than the cap (threads counted);
- the RuntimeHookService server: an oversized message and more concurrent calls than it admits; the runtime
  proxy's server: more calls than it admits behind a hung backend;
- the companion's gRPC API: more concurrent calls than it admits, oversized metadata; the companion's metrics
  server: slowloris and an idle flood.

Timeouts are made small through the servers' limits so the suite stays fast; waits poll with a deadline.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from koordlet.apis.nodemetric import NodeMetricStatus, format_time
from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2, api_pb2_grpc
from koordlet.companion import api as companion_api_module
from koordlet.companion.api import CompanionServer
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.extender import (
    ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    DEFAULT_LIMITS,
    MAX_BODY_BYTES,
    LoadAwareExtender,
    NodeStore,
    make_server,
)
from koordlet.debugapi.server import DebugServer, DebugSources
from koordlet.metrics import MetricsServer
from koordlet.runtimehooks.framework import Hook, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hookserver import server as hookserver
from koordlet.system.httpserver import LimitedHTTPServer, ServerLimits
from runtimeproxy import backend as proxy_backend
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.waiting import wait_until

MIB = 1024 * 1024
SHORT = ServerLimits(max_connections=4, idle_timeout_seconds=2.0, header_timeout_seconds=0.5,
                     body_timeout_seconds=0.5, write_timeout_seconds=2.0, max_body_bytes=64 * 1024)
"""Small limits for the connection attacks: four connections, idle ones closed after 2 s (long enough to
open the whole flood on a busy machine), half a second for a request's headers."""
UNRELATED_THREADS = 2
"""Slack for threads the process starts or ends meanwhile (gRPC's, pytest's); the flood is 40."""


# ---------------------------------------------------------------------------------------------- targets

@dataclass
class Target:
    """One HTTP server under attack: how to reach it and a request it answers when not overwhelmed."""

    name: str
    connect: Callable[[], socket.socket]
    good_request: bytes


def _serve_extender(limits: ServerLimits) -> Iterator[tuple[NodeStore, LimitedHTTPServer]]:
    store = NodeStore()
    server = make_server(LoadAwareExtender(store), "127.0.0.1", 0, limits)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield store, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _tcp(server_address: Any) -> Callable[[], socket.socket]:
    host, port = str(server_address[0]), int(server_address[1])
    return lambda: socket.create_connection((host, port), timeout=10)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than the 107 bytes a unix socket path may have.
    directory = Path(tempfile.mkdtemp(prefix="ksec-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["extender", "metrics", "debugapi"])
def target(request: pytest.FixtureRequest, sock_dir: Path, failures: ComponentFailures) -> Iterator[Target]:
    kind = request.param
    if kind == "extender":
        for _, server in _serve_extender(SHORT):
            yield Target(kind, _tcp(server.server_address), b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    elif kind == "metrics":
        metrics = MetricsServer({}, "127.0.0.1:0", limits=SHORT)
        metrics.start(failures.callback("metrics-server"))
        try:
            yield Target(kind, _tcp(metrics.address), b"GET /healthz HTTP/1.0\r\n\r\n")
        finally:
            metrics.stop()
    else:
        # Only the 404 path is asked for: no source is read.
        path = str(sock_dir / "debug.sock")
        debug = DebugServer(path, cast(DebugSources, None), limits=SHORT)
        debug.start(failures.callback("debugapi"))

        def connect() -> socket.socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(path)
            return sock

        try:
            yield Target(kind, connect, b"GET /no-such-path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        finally:
            debug.stop(5)


def exchange(sock: socket.socket, data: bytes) -> tuple[int, bytes]:
    """Sends ``data`` and reads one answer: (status, body)."""
    sock.sendall(data)
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, response.read()


def served(target: Target) -> int:
    """The status a fresh connection gets for the target's good request."""
    with target.connect() as sock:
        return exchange(sock, target.good_request)[0]


def closed_by_server(sock: socket.socket) -> bool:
    """Waits (up to the socket's timeout) for the server to end the connection; False if it is still open."""
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- slowloris

def test_slowloris_is_cut_off_and_others_are_served(target: Target) -> None:
    """Headers sent one byte at a time: a per-read timeout would never fire; the header deadline does."""
    attacker = target.connect()
    stop = threading.Event()
    sent = [0]

    def drip() -> None:
        header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 100_000
        for byte in header:
            if stop.wait(0.02):
                return
            try:
                attacker.send(bytes([byte]))
            except OSError:
                return
            sent[0] += 1

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        wait_until("the attack to be under way", lambda: sent[0] >= 5)
        # The server answers others meanwhile.
        assert served(target) in (200, 404)
        assert closed_by_server(attacker), f"{target.name}: a slowloris connection is still open after 10 s"
    finally:
        stop.set()
        dripper.join(timeout=5)
        attacker.close()
    assert served(target) in (200, 404)


# ---------------------------------------------------------------------------------------------- idle flood

def test_idle_connections_beyond_the_cap_are_refused_and_threads_stay_bounded(target: Target) -> None:
    baseline = threading.active_count()
    flood: list[socket.socket] = []
    busiest = baseline
    try:
        for _ in range(40):
            flood.append(target.connect())
            busiest = max(busiest, threading.active_count())
        # A connection over the cap is answered 503 at once, not left hanging and not given a thread.
        refused = 0
        for sock in flood[SHORT.max_connections:]:
            sock.settimeout(5)
            try:
                data = sock.recv(4096)
            except (ConnectionResetError, TimeoutError):
                continue
            refused += data.startswith(b"HTTP/1.1 503 ")
            busiest = max(busiest, threading.active_count())
        assert refused > 0, f"{target.name}: no connection over the cap was refused"
        assert busiest - baseline <= SHORT.max_connections + UNRELATED_THREADS, (
            f"{target.name}: {busiest - baseline} threads for 40 idle connections (cap {SHORT.max_connections})")
        # The idle connections that were let in are closed after the idle timeout, and good requests get
        # through again.
        for sock in flood[:SHORT.max_connections]:
            assert closed_by_server(sock), f"{target.name}: an idle connection is still open after 10 s"
        wait_until(f"{target.name} to serve again", lambda: served(target) in (200, 404))
    finally:
        for sock in flood:
            sock.close()


# ---------------------------------------------------------------------------------------------- extender bodies

@pytest.fixture
def extender() -> Iterator[tuple[NodeStore, LimitedHTTPServer]]:
    yield from _serve_extender(DEFAULT_LIMITS)


def test_a_64_mib_body_is_refused_from_its_header(extender: tuple[NodeStore, LimitedHTTPServer]) -> None:
    _, server = extender
    with _tcp(server.server_address)() as sock:
        sock.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % (64 * MIB))
        sock.sendall(b"[" * MIB)  # a first MiB, and then nothing: an answer proves the rest was never awaited
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 413
        assert json.loads(response.read())["Error"] == (
            f"filter: request body of {64 * MIB} bytes is over the limit of {MAX_BODY_BYTES} bytes")


def test_a_64_mib_chunked_body_is_read_only_up_to_the_cap(extender: tuple[NodeStore, LimitedHTTPServer]) -> None:
    _, server = extender
    chunk = b"%x\r\n%s\r\n" % (MIB, b" " * MIB)
    sock = _tcp(server.server_address)()
    sent = [0]

    def stream() -> None:
        try:
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(64):
                sock.sendall(chunk)
                sent[0] += MIB
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server stopped reading and closed
            pass

    tracemalloc.start()
    sender = threading.Thread(target=stream, daemon=True)
    try:
        sender.start()
        response = http.client.HTTPResponse(sock)
        response.begin()
        status, body = response.status, response.read()
        sender.join(timeout=30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sock.close()
    assert status == 413
    assert json.loads(body)["Error"] == f"filter: chunked request body over the limit of {MAX_BODY_BYTES} bytes"
    assert not sender.is_alive()
    assert sent[0] < 64 * MIB, "the server read the whole 64 MiB"
    # The cap's worth (16 MiB) and the client's 1 MiB chunk, not the 64 MiB sent.
    assert peak < 32 * MIB, f"{peak / MIB:.1f} MiB allocated while refusing a chunked 64 MiB body"


# ---------------------------------------------------------------------------------------------- extender store

BUSY_METRIC = {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "10", "memory": "10Gi"}}}, "podsMetric": []}
"""10 of 16 cores: with the pod's estimate (850m) 68 %, over the default 65 % threshold."""


def _node(name: str, cpu: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}},
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}}}


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u-web"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"qosClass": "Burstable"}}


def _post(server: LimitedHTTPServer, verb: str, body: dict[str, Any]) -> Any:
    with _tcp(server.server_address)() as sock:
        data = json.dumps(body).encode()
        status, raw = exchange(sock, b"POST /scheduler/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (verb.encode(), len(data), data))
    assert status == 200, raw
    return json.loads(raw)


def test_a_nodes_carrying_request_cannot_rewrite_a_real_node(extender: tuple[NodeStore, LimitedHTTPServer]) -> None:
    """The attack: claim the busy node has 1,000 cores and 100 % thresholds; kube-scheduler then sends names
    only, and every later answer would have used the forged values."""
    store, server = extender
    store.update_node_json(_node("busy", "16"))
    status = NodeMetricStatus.from_json({**BUSY_METRIC, "updateTime": format_time(time.time())})
    store.update_node_metric("busy", status)
    before = store.view("busy")
    by_names = {"Pod": _pod(), "NodeNames": ["busy"]}
    assert _post(server, "filter", by_names)["FailedNodes"] == {"busy": "node(s) cpu usage exceed threshold"}

    forged = _node("busy", "1000", {ANNOTATION_CUSTOM_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 100}}'})
    result = _post(server, "filter", {"Pod": _pod(), "Nodes": {"items": [forged]}})
    assert result["FailedNodes"] == {"busy": "node(s) cpu usage exceed threshold"}
    _post(server, "prioritize", {"Pod": _pod(), "Nodes": {"items": [forged]}})

    assert store.view("busy") == before
    assert _post(server, "filter", by_names)["FailedNodes"] == {"busy": "node(s) cpu usage exceed threshold"}


# ---------------------------------------------------------------------------------------------- gRPC hook server

def _sandbox_request(annotations: dict[str, str] | None = None) -> api_pb2.PodSandboxHookRequest:
    return api_pb2.PodSandboxHookRequest(
        pod_meta=api_pb2.PodSandboxMetadata(name="p", uid="u1", namespace="ns"), runtime_handler="runc",
        annotations=annotations or {}, cgroup_parent="/kubepods/besteffort")


@dataclass
class HookTarget:
    server: hookserver.HookServer
    release: threading.Event
    """Cleared: every call holds its worker until set."""

    def stub(self, channel: grpc.Channel) -> api_pb2_grpc.RuntimeHookServiceStub:
        return api_pb2_grpc.RuntimeHookServiceStub(channel)  # type: ignore[no-untyped-call]

    def channel(self) -> grpc.Channel:
        # Its own connection: channels to one target otherwise share one (gRPC's global subchannel pool).
        return grpc.insecure_channel(f"unix:{self.server.socket_path}", options=[("grpc.use_local_subchannel_pool", 1)])


@pytest.fixture
def hooks(sock_dir: Path) -> Iterator[HookTarget]:
    release = threading.Event()
    release.set()

    def held(ctx: HookContext) -> None:
        release.wait(30)

    runner = HookRunner([Hook("held", "waits until released", frozenset({Stage.PRE_RUN_POD_SANDBOX}), held)])
    server = hookserver.HookServer(runner, str(sock_dir / "koordlet.sock"), None)
    server.start()
    try:
        yield HookTarget(server, release)
    finally:
        release.set()
        server.stop()


def test_an_oversized_hook_message_is_resource_exhausted(hooks: HookTarget) -> None:
    channel = hooks.channel()
    stub = hooks.stub(channel)
    huge = _sandbox_request({"padding": "x" * (hookserver.MAX_MESSAGE_BYTES + 1)})
    with pytest.raises(grpc.RpcError) as caught:
        stub.PreRunPodSandboxHook(huge, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.PreRunPodSandboxHook(_sandbox_request({"a": "1"}), timeout=10).annotations["a"] == "1"
    channel.close()


def test_calls_beyond_the_admitted_are_refused_not_queued(hooks: HookTarget) -> None:
    """Three connections with 40 calls each (one connection's streams are capped at the same number, so a
    single client waits for its own calls instead)."""
    hooks.release.clear()
    channels = [hooks.channel() for _ in range(3)]
    calls = [hooks.stub(channel).PreRunPodSandboxHook.future(_sandbox_request(), timeout=30)
             for channel in channels for _ in range(40)]
    # While every admitted call is held, all but MAX_CONCURRENT_RPCS of them are answered at once.
    over = len(calls) - hookserver.MAX_CONCURRENT_RPCS
    wait_until(f"{over} calls over the limit to be refused", lambda: sum(c.done() for c in calls) >= over)
    refused = [c for c in calls if c.done()]
    assert all(cast(grpc.Call, c.exception()).code() == grpc.StatusCode.RESOURCE_EXHAUSTED for c in refused)
    held = [c for c in calls if not c.done()]
    assert len(held) <= hookserver.MAX_CONCURRENT_RPCS
    hooks.release.set()
    assert all(c.exception() is None for c in held)  # the admitted ones are served once released
    for channel in channels:
        channel.close()


# ---------------------------------------------------------------------------------------------- runtime proxy server

def test_the_proxy_admits_a_bounded_number_of_calls(sock_dir: Path) -> None:
    """kubelet's CRI calls queue for the proxy's workers; a backend that hangs must not let the queue grow
    without bound: past ``max_workers * QUEUED_CALLS_PER_WORKER`` a call fails at once."""
    release = threading.Event()

    def hold(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(30)
        return request

    handler = grpc.method_handlers_generic_handler("test.Hung", {"Call": grpc.unary_unary_rpc_method_handler(hold)})
    workers = 2
    admitted_max = workers * proxy_backend.QUEUED_CALLS_PER_WORKER
    server = proxy_backend.serve(str(sock_dir / "proxy.sock"), handler, workers)
    channel = grpc.insecure_channel(f"unix:{sock_dir / 'proxy.sock'}")
    try:
        call = channel.unary_unary("/test.Hung/Call")
        calls = [call.future(b"x", timeout=30) for _ in range(admitted_max + 10)]
        wait_until("the calls over the limit to be refused", lambda: sum(c.done() for c in calls) >= 10)
        refused = [c for c in calls if c.done()]
        assert all(cast(grpc.Call, c.exception()).code() == grpc.StatusCode.RESOURCE_EXHAUSTED for c in refused)
        held = [c for c in calls if not c.done()]
        assert len(held) <= admitted_max
        release.set()
        assert all(c.result() == b"x" for c in held)
    finally:
        release.set()
        channel.close()
        server.stop(None)


# ---------------------------------------------------------------------------------------------- companion gRPC API

COMPANION_CAP = 4
"""A small ``max_concurrent_rpcs`` for the attack (the default is 10,000: one watch per node)."""


@dataclass
class CompanionTarget:
    server: CompanionServer
    release: threading.Event
    """Cleared: every report holds its ingest worker until set."""
    reports: list[str]

    def channel(self) -> grpc.Channel:
        # Its own connection (gRPC's global subchannel pool would share one between channels to one target).
        return grpc.insecure_channel(f"127.0.0.1:{self.server.port}", options=[("grpc.use_local_subchannel_pool", 1)])

    def stub(self, channel: grpc.Channel) -> companion_pb2_grpc.CompanionStub:
        return companion_pb2_grpc.CompanionStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture
def companion_api(failures: ComponentFailures) -> Iterator[CompanionTarget]:
    release = threading.Event()
    release.set()
    reports: list[str] = []

    def on_metric(node: str, status: NodeMetricStatus) -> None:
        release.wait(30)
        reports.append(node)

    # No authentication: loopback only (the attack is on the server's capacity, not on its identities).
    server = CompanionServer("127.0.0.1:0", None, lambda node: (1, {}, "test"), on_metric,
                             max_concurrent_rpcs=COMPANION_CAP)
    server.start(failures.callback("companion-api"))
    try:
        yield CompanionTarget(server, release, reports)
    finally:
        release.set()
        server.stop()


def _report(node: str) -> companion_pb2.ReportNodeMetricRequest:
    return companion_pb2.ReportNodeMetricRequest(node_name=node, status_json=b"{}")


def test_companion_calls_beyond_the_cap_are_refused_and_admitted_ones_finish(companion_api: CompanionTarget) -> None:
    """Calls over ``max_concurrent_rpcs`` fail at once with RESOURCE_EXHAUSTED instead of each taking a
    coroutine and a place in the ingest queue; the admitted ones are served; capacity comes back after."""
    companion_api.release.clear()
    channels = [companion_api.channel() for _ in range(2)]
    calls = [companion_api.stub(channel).ReportNodeMetric.future(_report(f"node-{i}"), timeout=30)
             for i in range(6) for channel in channels]
    over = len(calls) - COMPANION_CAP
    wait_until(f"{over} calls over the cap to be refused", lambda: sum(c.done() for c in calls) >= over)
    refused = [c for c in calls if c.done()]
    assert all(cast(grpc.Call, c.exception()).code() == grpc.StatusCode.RESOURCE_EXHAUSTED for c in refused)
    held = [c for c in calls if not c.done()]
    assert len(held) == COMPANION_CAP
    # A koordlet's watch is a call like any other: refused too while the cap is taken.
    stub = companion_api.stub(channels[0])
    with pytest.raises(grpc.RpcError) as caught:
        next(stub.WatchNodeSLO(companion_pb2.WatchNodeSLORequest(node_name="node-w"), timeout=10))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    companion_api.release.set()
    assert all(c.result().accepted for c in held)  # the admitted ones are served once released
    assert len(companion_api.reports) == COMPANION_CAP
    # The slots are free again: a watch is admitted and gets its NodeSLO.
    watch = stub.WatchNodeSLO(companion_pb2.WatchNodeSLORequest(node_name="node-w"), timeout=10)
    assert next(watch).generation == 1
    watch.cancel()
    for channel in channels:
        channel.close()


def test_companion_server_options_bound_each_connection() -> None:
    """What one connection may take (checked as configured: gRPC enforces each)."""
    options = dict(companion_api_module.SERVER_OPTIONS)
    assert options["grpc.max_concurrent_streams"] == 16
    assert options["grpc.max_connection_idle_ms"] == 10 * 60 * 1000
    assert options["grpc.max_metadata_size"] == 16 * 1024
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert options["grpc.max_receive_message_length"] == 16 * MIB
    assert companion_api_module.DEFAULT_MAX_CONCURRENT_RPCS == 10_000


def test_companion_refuses_oversized_metadata(companion_api: CompanionTarget) -> None:
    """A 64 KiB header (a forged "token") is refused by the transport, before any handler or authentication
    runs; a 12 KiB one (a bound token with many claims is well below) is served: under the 16 KiB soft limit
    gRPC never refuses at random."""
    channel = companion_api.channel()
    stub = companion_api.stub(channel)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReportNodeMetric(_report("node-a"), timeout=10, metadata=(("x-padding", "x" * 65536),))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert companion_api.reports == []
    for _ in range(5):
        assert stub.ReportNodeMetric(_report("node-a"), timeout=10, metadata=(("x-padding", "x" * 12 * 1024),)).accepted
    channel.close()


# ---------------------------------------------------------------------------------------------- companion metrics

@pytest.fixture
def companion_metrics(tmp_path: Path) -> Iterator[Target]:
    """koord-companion's Prometheus endpoint (it was prometheus_client's start_http_server: no deadline, a
    thread per connection), served by the companion itself with the small limits."""
    config = tmp_path / "slo-controller-config.yaml"
    config.write_text("data: {}\n")
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                           metrics_addr="127.0.0.1:0", metrics_limits=SHORT,
                                           config_file=str(config)))
    companion.start()
    try:
        metrics = companion._metrics
        assert metrics is not None
        with _tcp(metrics.address)() as sock:
            status, body = exchange(sock, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert status == 200 and b"python_info" in body
        yield Target("companion-metrics", _tcp(metrics.address), b"GET /healthz HTTP/1.0\r\n\r\n")
    finally:
        companion.stop()
    assert companion._metrics is None, "the metrics server outlived the companion"


def test_companion_metrics_slowloris_is_cut_off(companion_metrics: Target) -> None:
    test_slowloris_is_cut_off_and_others_are_served(companion_metrics)


def test_companion_metrics_idle_flood_is_refused(companion_metrics: Target) -> None:
    test_idle_connections_beyond_the_cap_are_refused_and_threads_stay_bounded(companion_metrics)
