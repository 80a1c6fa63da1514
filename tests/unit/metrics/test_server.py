"""The HTTP endpoint: Koordinator's paths in Prometheus text format, health, content negotiation, stop."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from koordlet.component import Component
from koordlet.errors import ConfigError
from koordlet.metriccache import CacheSettings, MetricCache, labels_of, names
from koordlet.metrics import KoordletMetrics, MetricsServer, serve
from koordlet.metrics.server import parse_addr
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.failures import ComponentFailures

NOW = 1_700_000_000.0


class NoPods:
    def pods(self) -> list[PodMeta]:
        return []


@pytest.fixture
def metrics(tmp_path: Path) -> KoordletMetrics:
    cache = MetricCache(CacheSettings(path=tmp_path / "m.db"), lambda: NOW)
    cache.append(names.NODE_CPU_USAGE, labels_of(), NOW, 2.0)
    metrics = KoordletMetrics(node_name="n1", cache=cache, pods=NoPods())
    metrics.lifecycle.record_start(NOW)
    metrics.kubelet.observe("/pods/", 200, 0.01)
    return metrics


@pytest.fixture
def server(metrics: KoordletMetrics) -> Iterator[MetricsServer]:
    server = serve(metrics, "127.0.0.1:0")
    yield server
    server.stop()


def get(server: MetricsServer, path: str, accept: str | None = None) -> tuple[int, str, str]:
    host, port = server.address
    request = urllib.request.Request(f"http://{host}:{port}{path}")
    if accept is not None:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def family_names(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


def test_metrics_is_prometheus_text(server: MetricsServer) -> None:
    status, content_type, body = get(server, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["koordlet_start_time"].samples[0].value == NOW
    assert families["koordlet_node_used_cpu_cores"].samples[0].value == 2.0
    assert families["koordlet_kubelet_request_duration_seconds"].type == "histogram"
    assert "process_resident_memory_bytes" in families


def test_internal_and_external_paths(server: MetricsServer) -> None:
    _, _, internal = get(server, "/internal-metrics")
    _, _, external = get(server, "/external-metrics")
    _, _, merged = get(server, "/metrics")
    assert "koordlet_start_time" in family_names(internal)
    assert "koordlet_start_time" not in family_names(external)
    assert family_names(merged) == family_names(internal) | family_names(external)


def test_openmetrics_when_asked(server: MetricsServer) -> None:
    status, content_type, body = get(server, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


def test_healthz_and_unknown_paths(server: MetricsServer) -> None:
    assert get(server, "/healthz")[::2] == (200, "ok\n")
    assert get(server, "/nope")[0] == 404
    assert get(server, "/metrics?debug=1")[0] == 200  # a query string does not change the path


def test_unhealthy_is_503(metrics: KoordletMetrics) -> None:
    server = serve(metrics, "127.0.0.1:0", healthz=lambda: False)
    try:
        assert get(server, "/healthz")[::2] == (503, "unhealthy\n")
    finally:
        server.stop()


def test_a_failing_collector_is_a_500_not_a_dead_server() -> None:
    class Broken:
        def collect(self) -> list[object]:
            raise RuntimeError("collector bug")

    registry = CollectorRegistry()
    registry.register(Broken())  # type: ignore[arg-type]
    server = serve(registry, "127.0.0.1:0")
    try:
        assert get(server, "/metrics")[0] == 500
        assert get(server, "/healthz")[0] == 200
    finally:
        server.stop()


def test_a_bare_registry_is_served_at_metrics() -> None:
    registry = CollectorRegistry()
    Gauge("koordlet_test_value", "a test gauge", registry=registry).set(7)
    server = serve(registry, "127.0.0.1:0")
    try:
        _, _, body = get(server, "/metrics")
        assert {f.name: f.samples[0].value for f in text_string_to_metric_families(body)} == {"koordlet_test_value": 7}
        assert get(server, "/internal-metrics")[0] == 404
    finally:
        server.stop()


def test_stop_closes_the_port(metrics: KoordletMetrics) -> None:
    server = serve(metrics, "127.0.0.1:0")
    host, port = server.address
    server.stop()
    with pytest.raises(OSError), socket.create_connection((host, port), timeout=1):
        pass
    server.stop()  # idempotent


def test_port_in_use_names_the_address(metrics: KoordletMetrics) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"metrics server cannot listen on 127.0.0.1:{port}"):
            serve(metrics, f"127.0.0.1:{port}")


def test_component_start_stop(metrics: KoordletMetrics, failures: ComponentFailures) -> None:
    server = MetricsServer(metrics.routes, "127.0.0.1:0")
    component: Component = server  # checked by mypy: the daemon can own it
    assert component.name == "metrics-server"
    server.start(failures.callback("metrics-server"))
    try:
        with pytest.raises(RuntimeError, match="already started"):
            server.start(failures.callback("metrics-server started twice"))
        assert get(server, "/healthz")[0] == 200
    finally:
        server.stop(5.0)


def test_all_interfaces_address(metrics: KoordletMetrics) -> None:
    server = serve(metrics, ":0")  # Koordinator's ":9316" form, on an ephemeral port
    try:
        port = server.address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("addr", "expected"),
    [(":9316", ("", 9316)), ("127.0.0.1:9316", ("127.0.0.1", 9316)), ("[::1]:9316", ("::1", 9316)),
     ("0.0.0.0:0", ("0.0.0.0", 0))],
)
def test_parse_addr(addr: str, expected: tuple[str, int]) -> None:
    assert parse_addr(addr) == expected


@pytest.mark.parametrize(("addr", "message"), [("9316", "expected host:port"), (":http", "is not a number"),
                                               (":70000", "out of range")])
def test_bad_addr(addr: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_addr(addr)
