"""The CRI StopContainer backend (koordlet/qosmanager/cri.py) against an in-process gRPC server on a
unix socket: the request bytes are decoded field by field here, independently of the encoder."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.qosmanager.cri import CONTAINER_STATUS, STOP_CONTAINER, CRIBackend, _endpoint, stop_container_request
from koordlet.qosmanager.evictor import EvictionFailed, Evictions
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from tests.unit.qosmanager.fakes import FakeClock, make_pod


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def decode(data: bytes) -> dict[int, Any]:
    """A protobuf message as field number -> value (varints as ints, length-delimited as bytes)."""
    fields: dict[int, Any] = {}
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number], i = read_varint(data, i)
        elif wire == 2:
            length, i = read_varint(data, i)
            fields[number] = data[i:i + length]
            i += length
        else:
            raise AssertionError(f"unexpected wire type {wire} for field {number}")
    return fields


# ------------------------------------------------------------------------------------------ encoding


@pytest.mark.parametrize(
    ("container_id", "timeout", "expected"),
    [
        ("abc", 0, b"\x0a\x03abc"),                      # proto3: a zero timeout is not on the wire
        ("abc", 10, b"\x0a\x03abc\x10\x0a"),
        ("c" * 200, 0, b"\x0a\xc8\x01" + b"c" * 200),   # a two-byte length
        ("abc", 300, b"\x0a\x03abc\x10\xac\x02"),
    ],
)
def test_stop_container_request_bytes(container_id: str, timeout: int, expected: bytes) -> None:
    assert stop_container_request(container_id, timeout) == expected


def test_negative_timeout_is_int64_twos_complement() -> None:
    fields = decode(stop_container_request("abc", -1))
    assert fields == {1: b"abc", 2: (1 << 64) - 1}
    assert len(stop_container_request("abc", -1)) == 5 + 1 + 10


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:/run/x.sock", "unix:/run/x.sock"),
        ("localhost:1234", "localhost:1234"),
    ],
)
def test_endpoint_normalisation(given: str, expected: str) -> None:
    assert _endpoint(given) == expected


# ------------------------------------------------------------------------------------------ a fake runtime


@dataclass
class FakeRuntime(grpc.GenericRpcHandler):  # type: ignore[misc]
    """RuntimeService with StopContainer and ContainerStatus; ``answers`` and ``status_answers`` map a container
    id to the (code, details) of a failing StopContainer and ContainerStatus."""

    answers: dict[str, tuple[grpc.StatusCode, str]] = field(default_factory=dict)
    status_answers: dict[str, tuple[grpc.StatusCode, str]] = field(default_factory=dict)
    requests: list[bytes] = field(default_factory=list)
    status_requests: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def service(self, handler_call_details: Any) -> Any:
        if handler_call_details.method == STOP_CONTAINER:
            return grpc.unary_unary_rpc_method_handler(self._stop)  # raw bytes in and out
        if handler_call_details.method == CONTAINER_STATUS:
            return grpc.unary_unary_rpc_method_handler(self._status)
        return None

    def _status(self, request: bytes, context: Any) -> bytes:
        with self.lock:
            self.status_requests.append(request)
        answer = self.status_answers.get(decode(request)[1].decode())
        if answer is not None:
            context.abort(*answer)
        return b""  # a status with no fields: the tests only ask whether the runtime has the container

    def _stop(self, request: bytes, context: Any) -> bytes:
        with self.lock:
            self.requests.append(request)
        answer = self.answers.get(decode(request)[1].decode())
        if answer is not None:
            context.abort(*answer)
        return b""  # StopContainerResponse has no fields


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[FakeRuntime, str]]:
    handler = FakeRuntime()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    socket = tmp_path / "cri.sock"
    assert server.add_insecure_port(f"unix://{socket}") != 0
    server.start()
    try:
        yield handler, str(socket)
    finally:
        server.stop(grace=None)


def two_container_pod() -> PodMeta:
    """A pod with started containers be-a and be-b plus one not started yet (no id)."""
    pod = make_pod("be", "BE", containers=("a", "b"))
    unstarted = ContainerMeta(name="c", container_id="", cgroup_dir="")
    return PodMeta(pod=pod.pod, cgroup_dir=pod.cgroup_dir, containers=(*pod.containers, unstarted))


def backend_for(socket: str) -> Iterator[CRIBackend]:
    backend = CRIBackend(socket, 2.0)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def cri(runtime: tuple[FakeRuntime, str]) -> Iterator[CRIBackend]:
    yield from backend_for(runtime[1])


def test_stops_every_started_container_with_timeout_zero(runtime: tuple[FakeRuntime, str], cri: CRIBackend) -> None:
    handler, _ = runtime
    cri.evict(two_container_pod(), "EvictPodByNodeMemoryUsage", "m")
    assert [decode(r) for r in handler.requests] == [{1: b"be-a"}, {1: b"be-b"}]  # field 2 absent = timeout 0
    assert handler.requests == [b"\x0a\x04be-a", b"\x0a\x04be-b"]


def test_not_found_is_tolerated_and_the_rest_are_stopped(runtime: tuple[FakeRuntime, str], cri: CRIBackend) -> None:
    handler, _ = runtime
    handler.answers["be-a"] = (grpc.StatusCode.NOT_FOUND, "container be-a not found")
    cri.evict(two_container_pod(), "r", "m")
    assert [decode(r)[1] for r in handler.requests] == [b"be-a", b"be-b"]


def test_each_stopped_container_is_looked_up(runtime: tuple[FakeRuntime, str], cri: CRIBackend) -> None:
    handler, _ = runtime
    cri.evict(two_container_pod(), "r", "m")
    assert [decode(r) for r in handler.status_requests] == [{1: b"be-a"}, {1: b"be-b"}]


@pytest.mark.parametrize("runtime_version", ["1.6", "1.7"])
def test_a_pod_the_runtime_knows_no_container_of_is_not_evicted(runtime: tuple[FakeRuntime, str], cri: CRIBackend,
                                                                 runtime_version: str) -> None:
    # An id the runtime never had: containerd 1.6 answers StopContainer with NOT_FOUND, 1.7 with success and
    # ContainerStatus with NOT_FOUND (tests/integration/qosmanager/test_cri_evictor_real.py).  Nothing was
    # stopped, so the eviction fails rather than counting as done.
    handler, socket = runtime
    for container in ("be-a", "be-b"):
        answers = handler.answers if runtime_version == "1.6" else handler.status_answers
        answers[container] = (grpc.StatusCode.NOT_FOUND, f"container {container} not found")
    with pytest.raises(EvictionFailed) as caught:
        cri.evict(two_container_pod(), "r", "m")
    assert str(caught.value) == (f"CRI StopContainer: the runtime on unix://{socket} knows no container of pod "
                                 "default/be (be-a, be-b): removed meanwhile, or qos.runtimeEndpoint is not the "
                                 "runtime that runs the pods")


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.UNIMPLEMENTED])
def test_other_errors_fail_naming_the_endpoint(runtime: tuple[FakeRuntime, str], cri: CRIBackend,
                                               code: grpc.StatusCode) -> None:
    handler, socket = runtime
    handler.answers["be-a"] = (code, "runtime says no")
    with pytest.raises(EvictionFailed) as caught:
        cri.evict(two_container_pod(), "r", "m")
    text = str(caught.value)
    assert f"unix://{socket}" in text and "be-a" in text and "default/be" in text
    assert str(code) in text and "runtime says no" in text
    assert len(handler.requests) == 1  # stops at the first failure
    assert not caught.value.unreachable, "the runtime answered: another pod may still be stopped"


def test_failure_through_evictions_leaves_nothing_pending(runtime: tuple[FakeRuntime, str], cri: CRIBackend) -> None:
    handler, _ = runtime
    handler.answers["be-b"] = (grpc.StatusCode.INTERNAL, "boom")
    front = Evictions(cri, FakeClock(1.0))
    pod = two_container_pod()
    assert not front.evict(pod, "r", "m")
    assert front.pending([pod]) == set()


def test_runtime_not_listening_fails_within_the_deadline(tmp_path: Path) -> None:
    socket = str(tmp_path / "absent.sock")
    backend = CRIBackend(socket, 1.0)
    try:
        with pytest.raises(EvictionFailed, match=f"unix://{socket}.*UNAVAILABLE") as caught:
            backend.evict(two_container_pod(), "r", "m")
        assert caught.value.unreachable, "no runtime: every other pod would fail the same way"
    finally:
        backend.close()


def test_pod_without_started_containers_fails(tmp_path: Path) -> None:
    pod = make_pod("be", "BE")
    bare = PodMeta(pod=pod.pod, cgroup_dir=pod.cgroup_dir,
                   containers=(ContainerMeta(name="main", container_id="", cgroup_dir=""),))
    backend = CRIBackend(str(tmp_path / "cri.sock"), 1.0)
    with pytest.raises(EvictionFailed, match="pod default/be has no started container to stop"):
        backend.evict(bare, "r", "m")
    backend.close()


def test_channel_is_reused_and_closed(runtime: tuple[FakeRuntime, str]) -> None:
    handler, socket = runtime
    backend = CRIBackend(socket, 2.0)
    first: Callable[[], object] = backend._stop_call
    first()
    channel = backend._channel
    backend.evict(two_container_pod(), "r", "m")
    assert backend._channel is channel
    backend.close()
    assert backend._channel is None
    assert len(handler.requests) == 2
