"""Fuzzing of what the companion's gRPC API decodes from koordlets (koordlet/companion/api.py and what it feeds).

- ``ReportNodeMetric``: the raw request bytes (protobuf), the ``status_json`` bytes through
  ``CompanionServer.ingest`` (JSON, then ``NodeMetricStatus.from_json``), and a decoded status through the
  consumers the companion hands it to (the extender's node store and filter, the batch-resource calculation,
  the NodeMetric CR write's ``to_json``);
- ``EvictPod`` / ``WatchNodeSLO``: raw request bytes, and the request fields through a real server on loopback
  (any node name, namespace, name, reason, generation, instance): the call ends with a gRPC status, never a
  server error, and the server keeps serving;
- authentication (koordlet/companion/auth.py): the bearer token's JWT payload and the TokenReview answer.

A status that is not a NodeMetric status is a ``ParseError`` (INVALID_ARGUMENT); nothing else may escape.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis.nodemetric import NodeMetricStatus
from koordlet.apis.proto.companion.v1 import companion_pb2
from koordlet.apis.sloconfig import default_colocation_strategy
from koordlet.companion import auth
from koordlet.companion.api import CompanionServer, EvictionRefused
from koordlet.companion.batchresource import CPUMemory, NodeInput, calculate
from koordlet.companion.extender import LoadAwareExtender, NodeStore
from koordlet.errors import ParseError
from tests.security.fuzzkit import (
    decode,
    duration_text,
    fuzz_settings,
    json_bytes,
    junk_json,
    k8s_time,
    quantity_text,
    raw_bytes,
    shaped,
)

_PRIORITIES = st.sampled_from(["koord-prod", "koord-mid", "koord-batch", "koord-free", "", "koord-PROD", "x"])
_QOS = st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", "", "ls", "Guaranteed"])

resources = shaped({"cpu": quantity_text, "memory": quantity_text, "nvidia.com/gpu": quantity_text})
resource_map = shaped({"resources": resources})
aggregated = shaped({
    "usage": st.dictionaries(st.one_of(st.sampled_from(["avg", "p50", "p90", "p95", "p99"]), st.text(max_size=5)),
                             resource_map, max_size=6),
    "duration": duration_text,
})
node_metric = shaped({
    "nodeUsage": resource_map, "aggregatedNodeUsages": st.lists(aggregated, max_size=4),
    "systemUsage": resource_map, "aggregatedSystemUsages": st.lists(aggregated, max_size=4),
})
pod_metric = shaped({"name": st.text(max_size=20), "namespace": st.text(max_size=20), "podUsage": resource_map,
                     "priority": _PRIORITIES, "qos": _QOS})
status_object = shaped({
    "updateTime": k8s_time, "nodeMetric": node_metric, "podsMetric": st.lists(pod_metric, max_size=6),
    "prodReclaimableMetric": shaped({"resource": resource_map}),
})
"""A NodeMetric status as koordlets send it, with any field wrong, missing or in another case."""

status_bytes = st.one_of(json_bytes(status_object), json_bytes(junk_json()), raw_bytes)

_valid_quantity = st.one_of(st.integers(0, 2**63).map(str), st.sampled_from(
    ["0", "1m", "0.5", "1e18", "9Ei", "8Ei", "1e-9", "123456789Gi", "1n", "999999999999999999999"]))
_valid_usage = st.fixed_dictionaries({}, optional={"resources": st.fixed_dictionaries(
    {}, optional={"cpu": _valid_quantity, "memory": _valid_quantity})})
_valid_aggregated = st.fixed_dictionaries({"duration": st.sampled_from(["5m", "1s", "720h", "0s"])}, optional={
    "usage": st.dictionaries(st.sampled_from(["avg", "p50", "p90", "p95", "p99"]), _valid_usage, max_size=5)})
valid_status = st.fixed_dictionaries({}, optional={
    "updateTime": st.sampled_from(["2024-01-02T03:04:05Z", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
                                   "2024-01-02T03:04:05.999999999-23:59"]),
    "nodeMetric": st.fixed_dictionaries({}, optional={
        "nodeUsage": _valid_usage, "systemUsage": _valid_usage,
        "aggregatedNodeUsages": st.lists(_valid_aggregated, max_size=3),
        "aggregatedSystemUsages": st.lists(_valid_aggregated, max_size=3)}),
    "podsMetric": st.lists(st.fixed_dictionaries({
        "name": st.text(max_size=8), "namespace": st.text(max_size=8), "podUsage": _valid_usage,
        "priority": st.sampled_from(["koord-prod", "koord-batch", ""]), "qos": st.sampled_from(["LS", "BE", ""])}),
        max_size=4),
    "prodReclaimableMetric": st.fixed_dictionaries({"resource": _valid_usage}),
})
"""Statuses that decode, with extreme but valid values (usage of 2**63 milli-cores, year 9999): for the
consumers, which trust what the decoder accepted."""


def _store_with_node() -> NodeStore:
    store = NodeStore()
    store.update_node("node-a", {"cpu": "8", "memory": "32Gi"})
    return store


def _ingest(status_json: bytes) -> tuple[bytes, list[NodeMetricStatus]]:
    received: list[NodeMetricStatus] = []
    server = CompanionServer("127.0.0.1:0", None, lambda node: None, lambda node, status: received.append(status))
    return server.ingest("node-a", status_json), received


@fuzz_settings(350)
@given(status_bytes)
@example(b"[" * 3000)  # RecursionError out of json.loads
@example(b'{"updateTime": "2024-01-02T03:04:05Z", "podsMetric": [{"podUsage": {"resources": {"cpu": "1e999999"}}}]}')
def test_report_node_metric_status_json(status_json: bytes) -> None:
    """``CompanionServer.ingest``: the status_json bytes of a ReportNodeMetric request."""
    decode("companion.ReportNodeMetric.status_json", lambda: _ingest(status_json), (ParseError,))


@fuzz_settings(250)
@given(st.one_of(valid_status, valid_status, status_object))
def test_decoded_status_through_consumers(obj: dict[str, Any]) -> None:
    """A status that decodes is used without error by everything the companion hands it to."""
    status = decode("companion.NodeMetricStatus.from_json", lambda: NodeMetricStatus.from_json(obj, "status"),
                    (ParseError,))
    if status is None:
        return

    def consume() -> None:
        assert status is not None
        status.to_json()  # the NodeMetric CR write
        store = _store_with_node()
        store.update_node_metric("node-a", status)
        pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}, "status": {}}
        LoadAwareExtender(store).filter({"Pod": pod, "NodeNames": ["node-a"]})
        LoadAwareExtender(store).prioritize({"Pod": pod, "NodeNames": ["node-a"]})
        node = NodeInput("node-a", CPUMemory(8000, 32 << 30), CPUMemory(7500, 30 << 30))
        calculate(node, [], status, default_colocation_strategy(), 1_700_000_000.0)

    decode("companion.NodeMetricStatus consumers", consume, ())


_MESSAGES = {
    "ReportNodeMetricRequest": companion_pb2.ReportNodeMetricRequest,
    "EvictPodRequest": companion_pb2.EvictPodRequest,
    "WatchNodeSLORequest": companion_pb2.WatchNodeSLORequest,
}


@pytest.mark.parametrize("message", sorted(_MESSAGES))
@fuzz_settings(200)
@given(data=st.one_of(st.binary(max_size=300), st.sampled_from([
    b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x80\x80\x80\x80\x10", b"\x0a\x02\xff\xfe", b"\x08" + b"\xff" * 10])))
def test_request_protobuf(message: str, data: bytes) -> None:
    """The request parser grpc runs on the raw bytes: a message or DecodeError (grpc answers INTERNAL)."""
    decode(f"companion.{message} (protobuf)", lambda: _MESSAGES[message].FromString(data), (DecodeError,))


# --------------------------------------------------------------------------------- through a real server


class _Served:
    """A companion API on loopback with authentication off, serving a fixed NodeSLO and refusing every
    eviction of a pod not on the asking node."""

    def __init__(self, failures: Any) -> None:
        self.evictions: list[tuple[str, ...]] = []

        def evict(node: str, namespace: str, name: str, reason: str, message: str) -> str:
            self.evictions.append((node, namespace, name, reason, message))
            if node != "node-a":
                raise EvictionRefused(f"pod {namespace}/{name} is not on node {node}")
            return "evicted"

        self.server = CompanionServer("127.0.0.1:0", None, lambda node: (1, {"resourceUsedThresholdWithBE": {}}, "t"),
                                      lambda node, status: None, evict=evict)
        self.server.start(failures.callback("companion-api"))
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")

    def unary(self, method: str, body: bytes) -> grpc.StatusCode:
        call = self.channel.unary_unary(f"/koordinator.companion.v1.Companion/{method}")
        try:
            call(body, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    def watch_first(self, body: bytes) -> grpc.StatusCode:
        call = self.channel.unary_stream("/koordinator.companion.v1.Companion/WatchNodeSLO")
        stream = call(body, timeout=10)
        try:
            next(iter(stream))
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        finally:
            stream.cancel()
        return grpc.StatusCode.OK


@pytest.fixture
def served(failures: Any) -> Iterator[_Served]:
    """One server per test (all of its examples): a handler error that kills the server fails the test."""
    served = _Served(failures)
    yield served
    served.channel.close()
    served.server.stop()


_SERVED_METHOD_NAME = st.one_of(st.text(max_size=40), st.sampled_from(["node-a", "", "node-a\x00", "n" * 70_000]))
_ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED}
"""Statuses a handler answers on purpose (INTERNAL and UNKNOWN mean a handler raised; UNAVAILABLE that the
server went away)."""

evict_requests = st.builds(
    companion_pb2.EvictPodRequest, node_name=_SERVED_METHOD_NAME, namespace=st.text(max_size=30),
    name=st.text(max_size=30), reason=st.text(max_size=30), message=st.text(max_size=200))
watch_requests = st.builds(
    companion_pb2.WatchNodeSLORequest, node_name=_SERVED_METHOD_NAME,
    last_generation=st.integers(-2**63, 2**63 - 1), last_instance=st.text(max_size=30))
report_requests = st.builds(
    companion_pb2.ReportNodeMetricRequest, node_name=_SERVED_METHOD_NAME, status_json=status_bytes,
    sent_at_unix_ms=st.integers(-2**63, 2**63 - 1))


@fuzz_settings(200)
@given(request=evict_requests)
def test_served_evict_pod(served: _Served, request: Any) -> None:
    code = decode("companion server EvictPod", lambda: served.unary("EvictPod", request.SerializeToString()), ())
    assert code in _ALLOWED, code


@fuzz_settings(100)
@given(request=watch_requests)
def test_served_watch_node_slo(served: _Served, request: Any) -> None:
    code = decode("companion server WatchNodeSLO", lambda: served.watch_first(request.SerializeToString()), ())
    assert code in _ALLOWED, code


@fuzz_settings(200)
@given(request=report_requests)
def test_served_report_node_metric(served: _Served, request: Any) -> None:
    code = decode("companion server ReportNodeMetric",
                  lambda: served.unary("ReportNodeMetric", request.SerializeToString()), ())
    assert code in _ALLOWED, code


@fuzz_settings(150)
@given(method=st.sampled_from(["EvictPod", "ReportNodeMetric"]), body=st.binary(max_size=200))
def test_served_raw_bytes(served: _Served, method: str, body: bytes) -> None:
    """Garbage bytes: grpc's own deserialisation failure (INTERNAL or UNKNOWN) is allowed here; the server must
    go on serving."""
    code = decode(f"companion server {method} (raw bytes)", lambda: served.unary(method, body), ())
    assert code in _ALLOWED | {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}, code
    assert served.unary("ReportNodeMetric", companion_pb2.ReportNodeMetricRequest(
        node_name="node-a", status_json=b"{}").SerializeToString()) is grpc.StatusCode.OK


# ------------------------------------------------------------------------------- authentication (tokens)

_CLAIMS = {"authentication.kubernetes.io/pod-name": "koordlet-abc", "authentication.kubernetes.io/pod-uid": "uid-1",
           "authentication.kubernetes.io/node-name": "node-a"}


def _jwt(claims: Any) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln"


tokens = st.one_of(st.text(max_size=60), st.builds(_jwt, st.one_of(shaped({"exp": st.one_of(
    st.integers(), st.floats(), st.text(max_size=5)), "sub": st.text(max_size=10)}), junk_json(6))),
    st.just("a." + "W" * 4000 + ".b"), st.just("a." + base64.urlsafe_b64encode(b"[" * 3000).decode() + ".b"))

review_answers = shaped({"status": shaped({
    "authenticated": st.one_of(st.just(True), st.booleans()),
    "audiences": st.one_of(st.just(["koord-companion"]), st.lists(st.one_of(st.text(max_size=5), junk_json(2)),
                                                                 max_size=2)),
    "error": st.text(max_size=10),
    "user": shaped({"username": st.sampled_from(["system:serviceaccount:koordinator-system:koordlet", "x"]),
                    "extra": st.dictionaries(st.sampled_from(sorted(_CLAIMS)), st.one_of(
                        st.sampled_from([["koordlet-abc"], ["uid-1"], ["node-a"]]), st.text(max_size=5),
                        st.lists(st.text(max_size=5), max_size=2)), max_size=3)}),
})}, junk_rate=6)
pod_answers = shaped({"metadata": shaped({"uid": st.sampled_from(["uid-1", "uid-2"])}),
                      "spec": shaped({"nodeName": st.sampled_from(["node-a", "node-b", ""])})})


class _ReviewAPI:
    def __init__(self, review: Any, pod: Any) -> None:
        self.review, self.pod = review, pod

    def create_token_review(self, body: Any, timeout_seconds: float) -> Any:
        return self.review

    def read_pod(self, namespace: str, name: str, timeout_seconds: float) -> Any:
        return self.pod


@fuzz_settings(250)
@given(token=tokens)
def test_token_expiry(token: str) -> None:
    """The bearer token's JWT payload, read by the companion before any review (any caller sends one)."""
    decode("companion auth.token_expiry", lambda: auth.token_expiry(token), ())


@fuzz_settings(250)
@given(token=tokens, review=st.one_of(review_answers, junk_json(6)), pod=st.one_of(pod_answers, junk_json(4)))
@example(token="t", review={"status": {"authenticated": True, "audiences": [["koord-companion"]]}}, pod={})
def test_token_review_answer(token: str, review: Any, pod: Any) -> None:
    """A TokenReview answer and the token's pod, as the companion decodes them: an identity or an AuthError."""
    authenticator = auth.TokenReviewAuthenticator(_ReviewAPI(review, pod))
    decode("companion auth TokenReview answer", lambda: authenticator.authenticate(token), (auth.AuthError,))
