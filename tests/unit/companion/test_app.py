"""The assembled companion without Kubernetes (a ConfigMap file) talking to a koordlet's real client."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.errors import KoordletError
from koordlet.qosmanager.evictor import CompanionEvictionAPI, EvictionFailed
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.waiting import wait_until

TOKEN = "s3cret-token"


def configmap(percent: int, report_seconds: int = 60) -> str:
    threshold = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": percent}})
    colocation = json.dumps({"enable": True, "metricReportIntervalSeconds": report_seconds})
    return f"data:\n  resource-threshold-config: '{threshold}'\n  colocation-config: '{colocation}'\n"




def threshold(holder: NodeSLOHolder) -> int | None:
    spec = holder.current().spec.resource_used_threshold_with_be
    return None if spec is None else spec.cpu_suppress_threshold_percent


@pytest.fixture
def companion(tmp_path: Path) -> Iterator[tuple[Companion, Path]]:
    path = tmp_path / "slo-controller-config.yaml"
    path.write_text(configmap(60))
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", token=TOKEN,
                                          config_file=str(path)))
    instance.start()
    try:
        yield instance, path
    finally:
        instance.stop()


def test_a_config_file_edit_reaches_the_koordlet(companion: tuple[Companion, Path], tmp_path: Path,
                                                 failures: ComponentFailures) -> None:
    instance, path = companion
    holder = NodeSLOHolder()
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    source = CompanionNodeSLOSource(client, holder, tmp_path / "cache.json")
    source.start(failures.callback("companion-nodeslo"))
    try:
        wait_until("the first NodeSLO", lambda: threshold(holder) == 60)
        path.write_text(configmap(70))
        os.utime(path, (time.time() + 5, time.time() + 5))
        started = time.monotonic()
        wait_until("the edited NodeSLO", lambda: threshold(holder) == 70)
        elapsed = time.monotonic() - started
        print(f"file edit -> koordlet holder: {elapsed * 1000:.0f} ms (file poll {1.0:g} s + push)")
        path.write_text("data:\n  resource-threshold-config: '{\"clusterStrategy\": {\"enable\": 7}}'\n")
        os.utime(path, (time.time() + 10, time.time() + 10))
        wait_until("the refusal", lambda: "resource-threshold-config" in instance.controller.errors)
        assert threshold(holder) == 70, "a bad key keeps the last good NodeSLO on the node"
    finally:
        source.stop(5)


def test_reports_come_back_with_the_collect_policy(companion: tuple[Companion, Path]) -> None:
    instance, _ = companion
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    policies: list[Any] = []
    sink = CompanionNodeMetricSink(client, on_policy=policies.append)
    status = NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(cpu_milli=1500, memory_bytes=2 << 30)))
    sink.report(status)
    assert not sink.failing
    assert [p.report_interval_seconds for p in policies] == [60]
    view = instance.store.views(["node-1"])[0]
    assert view is not None, "the extender learned the node's usage"
    assert "node-1" in instance.controller.nodes


def test_the_nodeslo_watch_carries_the_collect_policy_before_any_report(
        companion: tuple[Companion, Path], tmp_path: Path, failures: ComponentFailures) -> None:
    instance, _ = companion
    client = CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1")
    policies: list[Any] = []
    sink = CompanionNodeMetricSink(client, on_policy=policies.append)
    source = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "cache.json", on_policy=sink.offer_policy)
    source.start(failures.callback("companion-nodeslo"))
    try:
        wait_until("the collect policy from the watch", lambda: policies)
    finally:
        source.stop(5)
    assert sink.reports == 0 and [p.report_interval_seconds for p in policies] == [60]
    sink.report(NodeMetricStatus(update_time=time.time(), node_metric=NodeMetricInfo(
        node_usage=ResourceMap(cpu_milli=1, memory_bytes=1))))
    assert len(policies) == 1, "the same policy in a report's reply is not applied twice"


def test_without_kubernetes_evictions_are_refused(companion: tuple[Companion, Path]) -> None:
    instance, _ = companion
    api = CompanionEvictionAPI(CompanionClient(f"127.0.0.1:{instance.server.port}", TOKEN, "node-1"))
    with pytest.raises(EvictionFailed, match=r"UNIMPLEMENTED.*no Kubernetes"):
        api.evict("default", "web", "BECPUEvict", "test")


def test_help_documents_authentication_and_eviction_limits(capsys: pytest.CaptureFixture[str]) -> None:
    from koordlet.companion import cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, also at hyphens
    for flag in ("--auth {tokenreview,token,none}", "--token-audience", "--koordlet-service-account", "--insecure",
                 "--tls-secret NAMESPACE/NAME", "--eviction-rate", "--eviction-burst", "--node-eviction-rate",
                 "--node-eviction-burst", "--max-concurrent-rpcs", "(default 10000)", "default koord-companion",
                 "default system:serviceaccount:koordinator-system:koordlet"):
        assert flag.replace(" ", "") in text, flag


@pytest.mark.parametrize("argv", [
    ["--auth=token"],  # no --token-file
    ["--auth=none", "--token-file=t"],
    ["--auth=tokenreview", "--config-file=c.yaml"],
    ["--tls-secret=no-slash"],
    ["--tls-secret=ns/name", "--tls-cert-file=c", "--tls-key-file=k"],
    ["--tls-cert-file=c"],
    ["--token-audience=,"],
    ["--node-eviction-rate=1", "--node-eviction-burst=0"],
    ["--auth-cache-seconds=-1"],
    ["--koordlet-service-account=koordinator-system/koordlet"],
    ["--max-concurrent-rpcs=0"],
    ["--metrics-addr=9322"],  # no colon: not host:port
])
def test_contradicting_flags_are_usage_errors(argv: list[str]) -> None:
    from koordlet.companion import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2


def test_the_auth_mode_follows_the_options(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(configmap(60))

    def mode(**options: Any) -> str:
        return Companion(CompanionOptions(grpc_addr="127.0.0.1:0", config_file=str(path), **options)).server \
            .authenticator.mode

    assert mode() == "none"
    assert mode(token=TOKEN) == "token"
    assert mode(auth="none") == "none"
    with pytest.raises(KoordletError, match="tokenreview needs Kubernetes"):
        mode(auth="tokenreview")
    with pytest.raises(KoordletError, match="needs the shared token"):
        mode(auth="token")
    with pytest.raises(KoordletError, match=r"refusing to listen on 0\.0\.0\.0:9320 without authentication"):
        Companion(CompanionOptions(grpc_addr="0.0.0.0:9320", config_file=str(path)))
    assert Companion(CompanionOptions(grpc_addr="0.0.0.0:9320", config_file=str(path), insecure=True)).server.insecure


def test_a_taken_metrics_port_fails_the_start_and_releases_the_rest(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "slo-controller-config.yaml"
    path.write_text(configmap(60))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                              metrics_addr=f"127.0.0.1:{port}", config_file=str(path)))
        with pytest.raises(OSError, match=f"metrics server cannot listen on 127.0.0.1:{port}"):
            instance.start()
    grpc_port, extender_port = instance.server.port, instance.extender_port
    for released in (grpc_port, extender_port):  # bindable again: the gRPC and extender servers were stopped
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", released))


def test_the_companion_serves_its_metrics_and_stops_them(tmp_path: Path) -> None:
    import http.client

    path = tmp_path / "slo-controller-config.yaml"
    path.write_text(configmap(60))
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                          metrics_addr="127.0.0.1:0", config_file=str(path)))
    instance.start()
    try:
        assert instance._metrics is not None
        host, port = instance._metrics.address
        connection = http.client.HTTPConnection(host, port, timeout=10)
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200 and b"python_info" in response.read()
        connection.close()
    finally:
        instance.stop()
    assert instance._metrics is None
    with pytest.raises(OSError):
        http.client.HTTPConnection(host, port, timeout=2).request("GET", "/metrics")


def test_a_watched_nodemetric_not_newer_than_the_held_one_is_not_decoded(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """The watch echoes this replica's own writes: told apart by ``status.updateTime`` alone, before decoding."""
    from koordlet.apis.nodemetric import format_time
    from koordlet.companion import app

    path = tmp_path / "slo-controller-config.yaml"
    path.write_text(configmap(60))
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", token=TOKEN,
                                          config_file=str(path)))
    now = float(int(time.time()))

    def nodemetric(updated: float, cpu: str) -> dict[str, Any]:
        return {"metadata": {"name": "node-1"}, "status": {"updateTime": format_time(updated), "nodeMetric": {
            "nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}}

    decoded: list[Any] = []
    real = app.decode_status

    def counting(obj: Any, where: str = "status") -> NodeMetricStatus:
        decoded.append(obj)
        return real(obj, where)

    monkeypatch.setattr(app, "decode_status", counting)
    instance.on_cluster_metric(nodemetric(now, "1"))
    assert len(decoded) == 1
    instance.on_cluster_metric(nodemetric(now, "1"))  # the echo
    instance.on_cluster_metric(nodemetric(now - 60, "2"))  # older
    assert len(decoded) == 1
    view = instance.store.view("node-1")
    assert view is not None and view.filter_used[0] == 1000
    instance.on_cluster_metric(nodemetric(now + 60, "3"))  # newer: decoded and taken
    assert len(decoded) == 2
    view = instance.store.view("node-1")
    assert view is not None and view.filter_used[0] == 3000
