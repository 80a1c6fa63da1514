"""The companion API end to end: a real :class:`CompanionServer` on 127.0.0.1 and the koordlet's real client,
sink and NodeSLO source over TCP, with the bearer token on."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    AggregatedUsage,
    AggregationType,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.companion.api import CompanionAPIError, CompanionServer
from koordlet.companion.auth import AuthUnavailable, Identity, Unauthenticated
from koordlet.errors import ParseError
from koordlet.statesinformer.companion import CompanionClient, CompanionError, CompanionNodeMetricSink, token_from_file
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import Effective, NodeSLOHolder
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakekubelet import make_tls_files

TOKEN = "s3cret-token"
NODE = "node-a"
PUSH_DEADLINE_SECONDS = 2.0
"""A ConfigMap change must reach the koordlet within 2 s end to end."""
RECONNECT_DEADLINE_SECONDS = 10.0
"""Generous: the test source backs off from 0.2 s, but the host is shared with other work."""
SPEC_A = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 61}}
SPEC_B = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 72}}
SPEC_C = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 83}}
BAD_SPEC = {"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": "lots"}}


class FakeController:
    """The SLO controller side: NodeSLO per node with generations, and the reports received."""

    def __init__(self) -> None:
        self.specs: dict[str, tuple[int, Mapping[str, Any], str]] = {}
        self.reports: list[tuple[str, NodeMetricStatus]] = []
        self.policy: NodeMetricCollectPolicy | None = None

    def set(self, node: str, spec: Mapping[str, Any]) -> None:
        generation = self.specs[node][0] + 1 if node in self.specs else 1
        self.specs[node] = (generation, spec, "configmap:koordinator-system/slo-controller-config")

    def slo_for_node(self, node: str) -> tuple[int, Mapping[str, Any], str] | None:
        return self.specs.get(node)

    def on_metric(self, node: str, status: NodeMetricStatus) -> None:
        self.reports.append((node, status))

    def collect_policy(self, node: str) -> NodeMetricCollectPolicy | None:
        return self.policy


def start_server(controller: FakeController, bind: str = "127.0.0.1:0") -> CompanionServer:
    server = CompanionServer(bind, TOKEN, controller.slo_for_node, controller.on_metric,
                             collect_policy=controller.collect_policy)
    server.start()
    return server


@pytest.fixture
def controller() -> FakeController:
    return FakeController()


@pytest.fixture
def server(controller: FakeController) -> Iterator[CompanionServer]:
    srv = start_server(controller)
    yield srv
    srv.stop(0.5)


@pytest.fixture
def client(server: CompanionServer) -> Iterator[CompanionClient]:
    c = CompanionClient(f"127.0.0.1:{server.port}", TOKEN, NODE)
    yield c
    c.close()


def wait_until(condition: Callable[[], bool], deadline_seconds: float) -> bool:
    """Polls ``condition`` until it holds or the deadline passes; the caller asserts the result."""
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def threshold(holder: NodeSLOHolder) -> int | None:
    strategy = holder.current().spec.resource_used_threshold_with_be
    return strategy.cpu_suppress_threshold_percent if strategy is not None else None


def sample_status(pods: int = 3) -> NodeMetricStatus:
    windows = tuple(AggregatedUsage(seconds, {kind: ResourceMap(1500, 6 << 30) for kind in AggregationType})
                    for seconds in (300.0, 600.0, 1800.0))
    return NodeMetricStatus(
        update_time=1_700_000_000.0,
        node_metric=NodeMetricInfo(ResourceMap(2000, 8 << 30), windows, ResourceMap(250, 1 << 30), windows),
        pods_metric=tuple(PodMetricInfo(f"pod-{i}", "default", ResourceMap(100 + i, (256 << 20) + 4096 * i),
                                        PriorityClass.PROD, QoSClass.LS) for i in range(pods)),
    )


class Source:
    """A running CompanionNodeSLOSource with its holder and a record of every change the holder made."""

    def __init__(self, client: CompanionClient, persist_path: Path,
                 on_failure: Callable[[BaseException], None]) -> None:
        """``reconnects`` counts the calls of ``on_reconnect`` (the NodeMetric runner's ``report_now``)."""
        self.holder = NodeSLOHolder()
        self.changes: list[Effective] = []
        self.reconnects = 0
        self.holder.subscribe(self.changes.append)
        self.source = CompanionNodeSLOSource(client, self.holder, persist_path, initial_backoff_seconds=0.2,
                                             max_backoff_seconds=1.0, on_reconnect=self._reconnected)
        self.source.start(on_failure)

    def _reconnected(self) -> None:
        self.reconnects += 1

    def stop(self) -> None:
        self.source.stop(2.0)


@pytest.fixture
def make_source(tmp_path: Path, failures: ComponentFailures) -> Iterator[Callable[[CompanionClient], Source]]:
    made: list[Source] = []

    def make(client: CompanionClient) -> Source:
        made.append(Source(client, tmp_path / "nodeslo.json", failures.callback(f"companion-nodeslo {len(made)}")))
        return made[-1]

    yield make
    for source in made:
        source.stop()


# ---------------------------------------------------------------------------------------------- NodeMetric


def test_report_is_accepted_and_handed_to_on_metric(controller: FakeController, client: CompanionClient) -> None:
    status = sample_status()
    response = client.report(status)
    assert response.accepted
    assert response.collect_policy_json == b""
    [(node, received)] = controller.reports
    assert node == NODE
    assert received.to_json() == status.to_json()


def test_sink_applies_the_collect_policy_the_companion_asks_for(controller: FakeController,
                                                                client: CompanionClient) -> None:
    controller.policy = NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": {"reportIntervalSeconds": 45}})
    policies: list[NodeMetricCollectPolicy] = []
    sink = CompanionNodeMetricSink(client, on_policy=policies.append)
    sink.report(sample_status())
    sink.report(sample_status())
    assert [p.report_interval_seconds for p in policies] == [45.0]  # handed on once, not every round
    assert sink.reports == 2 and not sink.failing


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_bad_or_missing_token_is_unauthenticated(controller: FakeController, server: CompanionServer,
                                                   token: str | None) -> None:
    bad = CompanionClient(f"127.0.0.1:{server.port}", token, NODE)
    try:
        with pytest.raises(CompanionError, match="UNAUTHENTICATED"):
            bad.report(sample_status())
        controller.set(NODE, SPEC_A)
        with pytest.raises(grpc.RpcError) as info:
            next(iter(bad.watch(0)))
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        bad.close()
    assert controller.reports == []


@pytest.mark.parametrize(("status_json", "path"), [
    (b'{"podsMetric": [{"name": "p"}, {"podUsage": {"resources": {"cpu": "lots"}}}]}',
     "status.podsMetric[1].podUsage.resources"),
    (b'{"nodeMetric": {"aggregatedNodeUsages": [{"duration": "forever"}]}}',
     "status.nodeMetric.aggregatedNodeUsages[0].duration"),
    (b'{"podsMetric": {"name": "p"}}', "status.podsMetric"),
    (b"not json", "status_json"),
])
def test_a_bad_status_is_invalid_argument_naming_the_field(controller: FakeController, server: CompanionServer,
                                                           status_json: bytes, path: str) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = companion_pb2_grpc.CompanionStub(channel)  # type: ignore[no-untyped-call]
        request = companion_pb2.ReportNodeMetricRequest(node_name=NODE, status_json=status_json)
        with pytest.raises(grpc.RpcError) as info:
            stub.ReportNodeMetric(request, timeout=5, metadata=(("authorization", f"Bearer {TOKEN}"),))
    finally:
        channel.close()
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert path in info.value.details()
    assert controller.reports == []


def test_sink_logs_a_failure_streak_once_and_never_raises(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    # Nothing listens on this unix socket: every report fails fast.
    unreachable = CompanionClient(f"unix:{tmp_path / 'absent.sock'}", TOKEN, NODE)
    sink = CompanionNodeMetricSink(unreachable, timeout_seconds=1.0)
    try:
        with caplog.at_level(logging.WARNING, logger="koordlet.statesinformer.companion"):
            for _ in range(3):
                sink.report(sample_status())
    finally:
        unreachable.close()
    assert sink.failures == 3 and sink.failing
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


# ---------------------------------------------------------------------------------------------- NodeSLO


def test_watch_sends_the_current_spec_then_pushes_each_change(
        controller: FakeController, server: CompanionServer, client: CompanionClient,
        make_source: Callable[[CompanionClient], Source]) -> None:
    controller.set(NODE, SPEC_A)
    controller.set("node-b", SPEC_C)  # another node's spec never reaches this koordlet
    source = make_source(client)
    assert wait_until(lambda: threshold(source.holder) == 61, RECONNECT_DEADLINE_SECONDS)
    assert source.holder.current().origin == "companion:configmap:koordinator-system/slo-controller-config"

    controller.set(NODE, SPEC_B)
    server.notify(NODE)
    assert wait_until(lambda: threshold(source.holder) == 72, PUSH_DEADLINE_SECONDS)

    controller.set(NODE, SPEC_A)
    server.notify(None)  # a change that may concern every node
    assert wait_until(lambda: threshold(source.holder) == 61, PUSH_DEADLINE_SECONDS)
    assert [threshold_of(e) for e in source.changes] == [61, 72, 61]


def threshold_of(effective: Effective) -> int | None:
    strategy = effective.spec.resource_used_threshold_with_be
    return strategy.cpu_suppress_threshold_percent if strategy is not None else None


def test_a_rejected_spec_keeps_the_last_good_one_in_force_and_on_disk(
        controller: FakeController, server: CompanionServer, client: CompanionClient,
        make_source: Callable[[CompanionClient], Source], tmp_path: Path) -> None:
    controller.set(NODE, SPEC_A)
    source = make_source(client)
    assert wait_until(lambda: threshold(source.holder) == 61, RECONNECT_DEADLINE_SECONDS)
    assert wait_until(lambda: (tmp_path / "nodeslo.json").exists(), PUSH_DEADLINE_SECONDS)

    controller.set(NODE, BAD_SPEC)
    server.notify(NODE)
    assert wait_until(lambda: source.holder.current().rejected is not None, PUSH_DEADLINE_SECONDS)
    assert "cpuSuppressThresholdPercent" in (source.holder.current().rejected or "")
    assert threshold(source.holder) == 61
    assert json.loads((tmp_path / "nodeslo.json").read_text())["spec"] == SPEC_A


def test_a_dead_companion_changes_nothing_and_a_restarted_one_is_caught_up(
        controller: FakeController, make_source: Callable[[CompanionClient], Source]) -> None:
    server = start_server(controller)
    port = server.port
    client = CompanionClient(f"127.0.0.1:{port}", TOKEN, NODE)
    try:
        controller.set(NODE, SPEC_A)
        source = make_source(client)
        assert wait_until(lambda: threshold(source.holder) == 61 and source.source.connected,
                          RECONNECT_DEADLINE_SECONDS)
        assert source.reconnects == 0  # the first watch is no reconnection
        before = source.holder.current()

        server.stop(0.2)
        assert wait_until(lambda: not source.source.connected, RECONNECT_DEADLINE_SECONDS)
        # Several failed reopen attempts (backoff 0.2 s, 0.4 s, 0.8 s) later, the holder has not moved.
        time.sleep(1.5)
        assert source.holder.current() == before
        assert len(source.changes) == 1

        # The restarted companion changed the spec while it was away and counts generations afresh: its
        # generation 1 is not the koordlet's generation 1, and the koordlet still catches up.
        restarted = FakeController()
        restarted.set(NODE, SPEC_B)
        assert restarted.specs[NODE][0] == source.source.last_generation
        server = start_server(restarted, f"127.0.0.1:{port}")
        assert wait_until(lambda: threshold(source.holder) == 72, RECONNECT_DEADLINE_SECONDS)
        assert source.source.connects >= 2
        # The restarted companion lost this node's figures: the reporter is asked for them at once.
        assert source.reconnects == source.source.connects - 1

        restarted.set(NODE, SPEC_C)
        server.notify(NODE)
        assert wait_until(lambda: threshold(source.holder) == 83, PUSH_DEADLINE_SECONDS)
        assert [threshold_of(e) for e in source.changes] == [61, 72, 83]
        source.source.stop(2.0)  # before the client's channel closes under its watch loop
    finally:
        server.stop(0.2)
        client.close()


def test_an_unchanged_spec_is_not_resent_to_a_watcher_that_holds_it(
        controller: FakeController, server: CompanionServer, client: CompanionClient) -> None:
    controller.set(NODE, SPEC_A)
    first = client.watch(0)
    update = next(iter(first))
    first.cancel()
    assert (update.generation, json.loads(update.spec_json)) == (1, SPEC_A)
    assert update.instance == server.instance

    held = client.watch(update.generation, update.instance)
    try:
        held.initial_metadata()
        controller.set(NODE, SPEC_B)
        server.notify(NODE)
        # The first message on a watch that holds generation 1 is the change, not generation 1 again.
        assert next(iter(held)).generation == 2
    finally:
        held.cancel()
    other = client.watch(update.generation, "another-instance")
    try:
        assert next(iter(other)).generation == 2  # generation 1 of another instance says nothing
    finally:
        other.cancel()


def test_a_new_source_starts_from_the_persisted_spec_while_the_companion_is_away(
        controller: FakeController, make_source: Callable[[CompanionClient], Source], tmp_path: Path) -> None:
    server = start_server(controller)
    port = server.port
    client = CompanionClient(f"127.0.0.1:{port}", TOKEN, NODE)
    try:
        controller.set(NODE, SPEC_B)
        first = make_source(client)
        assert wait_until(lambda: threshold(first.holder) == 72, RECONNECT_DEADLINE_SECONDS)
        assert wait_until(lambda: (tmp_path / "nodeslo.json").exists(), PUSH_DEADLINE_SECONDS)
        first.stop()
    finally:
        server.stop(0.2)

    try:
        restarted = make_source(client)  # start() loads the persisted copy before any watch
        assert threshold(restarted.holder) == 72
        assert restarted.holder.current().origin.endswith("(persisted)")
        assert restarted.source.last_generation == controller.specs[NODE][0]
        time.sleep(0.5)
        assert threshold(restarted.holder) == 72  # the unreachable companion does not undo it
        restarted.source.stop(2.0)  # before the client's channel closes under its watch loop
    finally:
        client.close()


def test_a_malformed_persisted_copy_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "nodeslo.json").write_text("{half")
    holder = NodeSLOHolder()
    client = CompanionClient(f"unix:{tmp_path / 'absent.sock'}", TOKEN, NODE)
    try:
        source = CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo.json")
        assert not source.load_persisted()
        assert holder.current().origin == "defaults"
    finally:
        client.close()


def test_backoff_doubles_from_one_second_to_thirty_with_jitter(tmp_path: Path) -> None:
    client = CompanionClient(f"unix:{tmp_path / 'absent.sock'}", TOKEN, NODE)
    try:
        middle = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "x.json", rng=lambda: 0.5)
        assert [middle.backoff(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        low = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "x.json", rng=lambda: 0.0)
        high = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "x.json", rng=lambda: 1.0)
        assert low.backoff(1) == pytest.approx(0.8) and high.backoff(1) == pytest.approx(1.2)
    finally:
        client.close()


def test_stop_ends_a_source_blocked_on_an_idle_watch(controller: FakeController, client: CompanionClient,
                                                     tmp_path: Path, failures: ComponentFailures) -> None:
    source = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "nodeslo.json")
    source.start(failures.callback("companion-nodeslo"))
    assert wait_until(lambda: source.connected, RECONNECT_DEADLINE_SECONDS)
    stopper = threading.Thread(target=source.stop, args=(5.0,))
    stopper.start()
    stopper.join(5.0)
    assert not stopper.is_alive() and not source.connected


def test_a_unix_socket_without_a_token_serves_the_embedded_case(controller: FakeController, tmp_path: Path) -> None:
    path = tmp_path / "run" / "companion.sock"
    server = CompanionServer(f"unix:{path}", None, controller.slo_for_node, controller.on_metric)
    server.start()
    client = CompanionClient(f"unix:{path}", None, NODE)
    try:
        assert (path.stat().st_mode & 0o777) == 0o600
        assert client.report(sample_status()).accepted
        assert [node for node, _ in controller.reports] == [NODE]
    finally:
        client.close()
        server.stop(0.5)
    assert not path.exists()


@pytest.mark.parametrize("as_pem", [False, True], ids=["files", "pem"])
def test_tls_serves_a_client_that_trusts_the_ca_and_refuses_one_that_does_not(
        controller: FakeController, tmp_path: Path, as_pem: bool) -> None:
    """The certificate as files (--tls-cert-file) or as PEM bytes (what --tls-secret reads from its Secret)."""
    tls = make_tls_files(tmp_path)
    if as_pem:
        server = CompanionServer("127.0.0.1:0", TOKEN, controller.slo_for_node, controller.on_metric,
                                 cert_pem=tls.server_cert.read_bytes(), key_pem=tls.server_key.read_bytes())
    else:
        server = CompanionServer("127.0.0.1:0", TOKEN, controller.slo_for_node, controller.on_metric,
                                 cert_file=str(tls.server_cert), key_file=str(tls.server_key))
    server.start()
    trusting = CompanionClient(f"127.0.0.1:{server.port}", TOKEN, NODE, ca_file=str(tls.ca_cert))
    stranger = CompanionClient(f"127.0.0.1:{server.port}", TOKEN, NODE, ca_file=str(tls.other_ca_cert))
    try:
        assert trusting.report(sample_status()).accepted
        with pytest.raises(CompanionError, match="UNAVAILABLE"):
            stranger.report(sample_status(), timeout_seconds=2.0)
    finally:
        trusting.close()
        stranger.close()
        server.stop(0.5)
    assert len(controller.reports) == 1


def test_a_port_in_use_fails_the_start(controller: FakeController, server: CompanionServer) -> None:
    second = CompanionServer(f"127.0.0.1:{server.port}", TOKEN, controller.slo_for_node, controller.on_metric)
    with pytest.raises(CompanionAPIError, match="cannot bind"):
        second.start()


def test_a_token_file_is_reread_when_it_changes(controller: FakeController, server: CompanionServer,
                                                tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    client = CompanionClient(f"127.0.0.1:{server.port}", token_from_file(str(token_file)), NODE)
    try:
        with pytest.raises(CompanionError, match="UNAUTHENTICATED"):
            client.report(sample_status())
        token_file.write_text(f"{TOKEN}\n")  # the Secret was rotated to what the companion expects
        assert client.report(sample_status()).accepted
    finally:
        client.close()


def test_a_projected_token_rotated_by_kubelet_is_picked_up(controller: FakeController, server: CompanionServer,
                                                           tmp_path: Path) -> None:
    """kubelet's atomic writer: the token lives in a timestamped directory, ``..data`` points at it and ``token``
    at ``..data/token``; a rotation writes a new directory and swaps ``..data``."""
    volume = tmp_path / "companion"
    volume.mkdir()

    def project(name: str, token: str) -> None:
        (volume / name).mkdir()
        (volume / name / "token").write_text(token)
        (volume / "..data_tmp").symlink_to(name)
        (volume / "..data_tmp").replace(volume / "..data")

    project("..2026_01_01_00_00_00.1", "expired-token")
    (volume / "token").symlink_to("..data/token")
    client = CompanionClient(f"127.0.0.1:{server.port}", token_from_file(str(volume / "token")), NODE)
    try:
        with pytest.raises(CompanionError, match="UNAUTHENTICATED"):
            client.report(sample_status())
        project("..2026_01_01_00_48_00.2", TOKEN)
        assert client.report(sample_status()).accepted
    finally:
        client.close()


def test_a_token_file_is_reread_periodically_even_when_its_stat_looks_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("aaaa")
    now = [0.0]
    current = token_from_file(str(path), reread_seconds=60, clock=lambda: now[0])
    assert current() == "aaaa"
    stat = path.stat()
    path.write_text("bbbb")  # same size, and the old timestamps put back: a coarse-timestamp filesystem
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    now[0] = 61.0
    assert current() == "bbbb"


# ---------------------------------------------------------------------------------------------- identities


class NodeBound:
    """An authenticator binding every token ``node-<x>`` to node ``node-<x>``; ``down`` answers UNAVAILABLE."""

    mode = "tokenreview"
    bound = True

    def __init__(self) -> None:
        self.down = False
        self.calls: list[str | None] = []

    def cached(self, token: str | None) -> Identity | None:
        return None

    def authenticate(self, token: str | None) -> Identity:
        self.calls.append(threading.current_thread().name)
        if self.down:
            raise AuthUnavailable("cannot review the token now (503); retry")
        if not token or not token.startswith("node-"):
            raise Unauthenticated("token not accepted")
        return Identity(f"koordlet of {token}", token)


@pytest.fixture
def bound_server(controller: FakeController) -> Iterator[tuple[CompanionServer, NodeBound]]:
    authenticator = NodeBound()
    srv = CompanionServer("127.0.0.1:0", None, controller.slo_for_node, controller.on_metric,
                          authenticator=authenticator, evict=lambda *args: "evicted")
    srv.start()
    yield srv, authenticator
    srv.stop(0.5)


def test_a_bound_caller_speaks_for_its_node_only(controller: FakeController,
                                                 bound_server: tuple[CompanionServer, NodeBound]) -> None:
    server, authenticator = bound_server
    controller.set(NODE, SPEC_A)
    mine = CompanionClient(f"127.0.0.1:{server.port}", NODE, NODE)  # the token "node-a" binds to node-a
    other = CompanionClient(f"127.0.0.1:{server.port}", "node-b", NODE)
    try:
        assert mine.report(sample_status()).accepted
        assert mine.evict("default", "pod-0", "BECPUEvict", "test") == "evicted"
        assert next(iter(mine.watch(0))).generation == 1
        for call in (lambda: other.report(sample_status()), lambda: other.evict("default", "pod-0", "r", "m"),
                     lambda: next(iter(other.watch(0)))):
            with pytest.raises((CompanionError, grpc.RpcError), match=r"PERMISSION_DENIED|speaks for node") as caught:
                call()
            if isinstance(caught.value, grpc.RpcError):
                assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert [node for node, _ in controller.reports] == [NODE]
        # The review ran off the event loop.
        assert authenticator.calls and all(name.startswith("companion-auth") for name in authenticator.calls)
        authenticator.down = True
        with pytest.raises(CompanionError, match="UNAVAILABLE"):
            mine.report(sample_status())
    finally:
        mine.close()
        other.close()


def test_a_large_report_is_decoded_off_the_event_loop(controller: FakeController, server: CompanionServer,
                                                      client: CompanionClient) -> None:
    """While one report's consumer is busy, the loop still serves: another report is answered and a watch gets
    its push."""
    release = threading.Event()
    entered = threading.Event()
    threads: list[str] = []

    def slow_on_metric(node: str, status: NodeMetricStatus) -> None:
        threads.append(threading.current_thread().name)
        if not entered.is_set():
            entered.set()
            release.wait(10)

    server._on_metric = slow_on_metric
    controller.set(NODE, SPEC_A)
    blocked = threading.Thread(target=lambda: client.report(sample_status(), timeout_seconds=10))
    blocked.start()
    try:
        assert entered.wait(5)
        watch = client.watch(0)
        assert next(iter(watch)).generation == 1  # the loop is free
        watch.cancel()
        assert client.report(sample_status(), timeout_seconds=5).accepted  # the second ingest worker
    finally:
        release.set()
        blocked.join(10)
    assert threads and all(name.startswith("companion-ingest") for name in threads)


def test_the_ingest_queue_answers_each_report_and_skips_a_cancelled_call() -> None:
    import asyncio

    from koordlet.companion.api import IngestQueue

    release = threading.Event()
    seen: list[str] = []

    def work(node: str, status_json: bytes, topology_json: bytes) -> bytes:
        release.wait(10)
        seen.append(node)
        if node == "bad":
            raise ParseError("status: bad")
        return node.encode() + status_json + topology_json

    async def main() -> tuple[list[Any], bool]:
        queue = IngestQueue(work, workers=1)
        try:
            # Queued while the thread is held: answered together, in one hand-back.
            futures = [queue.submit(node, b"-s", b"-t") for node in ("a", "bad", "gone", "b")]
            futures[2].cancel()  # the call went away while its report waited
            release.set()
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            queue.stop()
        return results, futures[2].cancelled()

    results, cancelled = asyncio.run(main())
    assert results[0] == b"a-s-t" and results[3] == b"b-s-t"
    assert isinstance(results[1], ParseError)
    assert cancelled and isinstance(results[2], BaseException)
    assert seen == ["a", "bad", "gone", "b"]
