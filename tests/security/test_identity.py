"""Abuse suite: who may speak for a node at the companion API.

Each test performs an attack against a real koord-companion (:class:`~koordlet.companion.app.Companion` with its
gRPC server on 127.0.0.1) whose Kubernetes is the fake kube-apiserver driven by the real client.  The cluster has
two nodes, a koordlet pod on each (service account ``koordinator-system/koordlet``) and one workload pod on each.
Tokens are minted by the fake apiserver as the TokenRequest API mints projected tokens; the companion runs with
its defaults (``auth`` resolves to ``tokenreview`` with Kubernetes), so what these tests show is what ships.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
from koordlet.companion import cli
from koordlet.companion.api import CompanionAPIError, CompanionServer
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.auth import StaticTokenAuthenticator
from koordlet.companion.kube import make_api_client
from tests.fixtures.fakeapiserver import API_AUDIENCE, FakeApiServer, make_node, make_pod
from tests.fixtures.waiting import wait_until

NS = "koordinator-system"
AUDIENCE = "koord-companion"
STATUS = {"updateTime": "2026-01-02T03:04:05Z",
          "nodeMetric": {"nodeUsage": {"resources": {"cpu": "100", "memory": "1000Gi"}}}}
"""A report claiming a node is at 100 cores and 1000 GiB: the extender would filter the node out."""


def workload(name: str, node: str) -> dict[str, Any]:
    pod = make_pod(name, "prod", node, uid=f"uid-{name}")
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


@pytest.fixture
def cluster(fake_apiserver: FakeApiServer) -> FakeApiServer:
    for node in ("node-1", "node-2"):
        fake_apiserver.seed(make_node(node))
        fake_apiserver.seed(make_pod(f"koordlet-{node}", NS, node, service_account="koordlet"))
    fake_apiserver.seed(workload("web", "node-1"))
    fake_apiserver.seed(workload("db", "node-2"))
    return fake_apiserver


@pytest.fixture
def companion(cluster: FakeApiServer) -> Iterator[Companion]:
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", leader_elect=False),
                         api)
    instance.start()
    try:
        wait_until("the pods to be known", lambda: instance._pod_nodes.get(("prod", "db")) == "node-2")
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def stub(companion: Companion) -> Iterator[Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{companion.server.port}")
    try:
        yield companion_pb2_grpc.CompanionStub(channel)  # type: ignore[no-untyped-call]
    finally:
        channel.close()


def koordlet_token(cluster: FakeApiServer, node: str, audience: str = AUDIENCE) -> str:
    return cluster.mint_token(NS, f"koordlet-{node}", audiences=[audience])


def auth(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def evict(stub: Any, node: str, namespace: str, name: str, token: str | None) -> Any:
    request = companion_pb2.EvictPodRequest(node_name=node, namespace=namespace, name=name, reason="attack",
                                            message="attack")
    return stub.EvictPod(request, timeout=10, metadata=auth(token))


def report(stub: Any, node: str, token: str | None) -> Any:
    request = companion_pb2.ReportNodeMetricRequest(node_name=node, status_json=json.dumps(STATUS).encode(),
                                                    sent_at_unix_ms=int(time.time() * 1000))
    return stub.ReportNodeMetric(request, timeout=10, metadata=auth(token))


def refused(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def untouched(cluster: FakeApiServer, name: str = "db") -> bool:
    return cluster.get("pods", name, "prod") is not None and not any(e["name"] == name for e in cluster.evictions)


def test_an_unauthenticated_eviction_is_refused(cluster: FakeApiServer, stub: Any) -> None:
    for token in (None, "not-a-token", koordlet_token(cluster, "node-2") + "x"):
        error = refused(lambda t=token: evict(stub, "node-2", "prod", "db", t))
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, error.details()
    assert untouched(cluster)


def test_a_node_cannot_evict_a_pod_of_another_node_nor_learn_where_it_is(cluster: FakeApiServer, stub: Any) -> None:
    token = koordlet_token(cluster, "node-1")
    # node-1 asks for the pod under its own name: refused, and the answer is the one a pod that does not exist gets.
    error = refused(lambda: evict(stub, "node-1", "prod", "db", token))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "node-2" not in (error.details() or "")
    missing = refused(lambda: evict(stub, "node-1", "prod", "no-such-pod", token))
    assert missing.code() is grpc.StatusCode.PERMISSION_DENIED
    assert (missing.details() or "").replace("no-such-pod", "db") == error.details()
    # ... and under the other node's name: its token speaks for node-1 only.
    error = refused(lambda: evict(stub, "node-2", "prod", "db", token))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "node-1" in (error.details() or "")
    assert untouched(cluster)
    # The pod's own node may evict it.
    assert evict(stub, "node-2", "prod", "db", koordlet_token(cluster, "node-2")).result == "evicted"
    assert cluster.deleting("pods", "db", "prod")


def test_a_node_cannot_report_metrics_or_watch_for_another_node(cluster: FakeApiServer, companion: Companion,
                                                                 stub: Any) -> None:
    token = koordlet_token(cluster, "node-1")
    error = refused(lambda: report(stub, "node-2", token))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert companion._nodes.get("node-2") is None or companion._nodes["node-2"].metric is None
    watch = stub.WatchNodeSLO(companion_pb2.WatchNodeSLORequest(node_name="node-2"), timeout=10,
                              metadata=auth(token))
    error = refused(lambda: next(iter(watch)))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    # Its own node's report goes through.
    assert report(stub, "node-1", token).accepted


def test_a_token_of_another_service_account_is_refused(cluster: FakeApiServer, stub: Any) -> None:
    # A workload pod's own projected token with the companion's audience: authenticated by kube-apiserver, but not
    # the koordlet.
    token = cluster.mint_token("prod", "web", audiences=[AUDIENCE])
    error = refused(lambda: evict(stub, "node-1", "prod", "web", token))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "system:serviceaccount:prod:default" in (error.details() or "")
    assert untouched(cluster, "web")


def test_a_token_for_another_audience_is_refused(cluster: FakeApiServer, stub: Any) -> None:
    # The koordlet's ordinary API token (audience: kube-apiserver), as any holder of it could replay.
    token = koordlet_token(cluster, "node-1", audience=API_AUDIENCE)
    error = refused(lambda: evict(stub, "node-1", "prod", "web", token))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert untouched(cluster, "web")


def test_a_token_not_bound_to_a_pod_or_of_a_deleted_pod_is_refused(cluster: FakeApiServer, stub: Any) -> None:
    unbound = cluster.mint_token(NS, None, service_account="koordlet", audiences=[AUDIENCE])
    error = refused(lambda: evict(stub, "node-1", "prod", "web", unbound))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "not bound to a pod" in (error.details() or "")
    cluster.seed(make_pod("koordlet-old", NS, "node-1", service_account="koordlet"))
    stale = cluster.mint_token(NS, "koordlet-old", audiences=[AUDIENCE])
    cluster.delete("pods", "koordlet-old", NS)
    error = refused(lambda: evict(stub, "node-1", "prod", "web", stale))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert untouched(cluster, "web")


def test_an_unbound_mode_is_refused_on_an_address_other_hosts_reach() -> None:
    def slo(node: str) -> None:
        return None

    def metric(node: str, status: Any) -> None:
        return None

    for bind in ("0.0.0.0:0", "[::]:0", "10.1.2.3:9320", "companion.example:9320"):
        with pytest.raises(CompanionAPIError, match="refusing to listen"):
            CompanionServer(bind, None, slo, metric)
        with pytest.raises(CompanionAPIError, match="shared token"):
            CompanionServer(bind, "s3cret", slo, metric)
        CompanionServer(bind, None, slo, metric, insecure=True)  # the operator said so
    for bind in ("127.0.0.1:0", "[::1]:0", "localhost:0", "unix:/run/x.sock"):
        CompanionServer(bind, None, slo, metric)
        CompanionServer(bind, None, slo, metric, authenticator=StaticTokenAuthenticator("s3cret"))


def test_the_companion_command_refuses_a_public_listen_without_authentication(tmp_path: Any) -> None:
    config = tmp_path / "slo-controller-config.yaml"
    config.write_text("data: {}\n")
    # --config-file (no Kubernetes): auth resolves to none, and ":0" is every address.
    common = ["--metrics-addr=", "--extender-addr=127.0.0.1:0", f"--config-file={config}"]
    assert cli.main([*common, "--grpc-addr=:0"]) == cli.EXIT_FAILURE
    token = tmp_path / "token"
    token.write_text("s3cret")
    assert cli.main([*common, "--grpc-addr=0.0.0.0:0", "--auth=token", f"--token-file={token}"]) == cli.EXIT_FAILURE
    with pytest.raises(SystemExit) as exited:  # tokenreview needs Kubernetes: a flag error
        cli.main([*common, "--grpc-addr=0.0.0.0:0", "--auth=tokenreview"])
    assert exited.value.code == 2
