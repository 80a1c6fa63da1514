"""RuntimeHookService server: real gRPC over a unix socket, called with Koordinator-shaped requests
through the generated stub."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from koordlet.apis.extension import ANNOTATION_EXTENDED_RESOURCE_SPEC, LABEL_QOS
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2, api_pb2_grpc
from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import FailurePolicy, Hook, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource
from koordlet.runtimehooks.hookserver import convert
from koordlet.runtimehooks.hookserver.server import HookServer
from koordlet.system.kubepaths import KubeQoS

FAIL_ANNOTATION = "test.koordlet/fail"
SPEC = {"containers": {"c": {
    "requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1Gi"},
    "limits": {"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "2Gi"}}}}
GI = 1 << 30


def probe(ctx: HookContext) -> None:
    """A test hook: echoes what it saw into env/annotations, sets cpuset and the pod cgroup parent."""
    req = ctx.request
    if req.pod.annotations.get(FAIL_ANNOTATION):
        raise KoordletError("probe refused")
    if req.container is None:
        ctx.set("cgroup_parent", "/kubepods/besteffort/pod-u1")
        ctx.set_entry("annotations", "probe/seen", f"{req.pod.key}:{req.pod.uid}:{req.pod_cgroup_parent}")
        return
    ctx.set("cpuset_cpus", "2-3")
    ctx.set_entry("env", "PROBE_CONTAINER", f"{req.container.name}:{req.container_id}")
    ctx.set_entry("env", "PROBE_LIMIT_MILLI", str(req.container.limits.cpu_milli))
    ctx.set_entry("annotations", "probe/stage", req.stage.value)


PROBE = Hook("probe", "test", frozenset(Stage), probe)


def start(tmp_path: Path, policy: FailurePolicy = FailurePolicy.IGNORE, proxy_policy: str = "Ignore",
          registration: bool = True) -> HookServer:
    runner = HookRunner([batchresource.new(HookDeps()), PROBE], policy=policy)
    server = HookServer(runner, str(tmp_path / "run" / "koordlet.sock"),
                        str(tmp_path / "hookserver.d") if registration else None, proxy_policy)
    server.start()
    return server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HookServer]:
    s = start(tmp_path)
    yield s
    s.stop()


def stub_for(server: HookServer) -> Iterator[api_pb2_grpc.RuntimeHookServiceStub]:
    with grpc.insecure_channel(f"unix:{server.socket_path}") as channel:
        yield api_pb2_grpc.RuntimeHookServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture
def stub(server: HookServer) -> Iterator[api_pb2_grpc.RuntimeHookServiceStub]:
    yield from stub_for(server)


def pod_meta() -> api_pb2.PodSandboxMetadata:
    return api_pb2.PodSandboxMetadata(name="batch", uid="u1", namespace="ns", attempt=0)


def container_request(annotations: dict[str, str] | None = None,
                      qos: str = "BE") -> api_pb2.ContainerResourceHookRequest:
    pod_annotations = {ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(SPEC)}
    pod_annotations.update(annotations or {})
    return api_pb2.ContainerResourceHookRequest(
        pod_meta=pod_meta(),
        container_mata=api_pb2.ContainerMetadata(name="c", attempt=1, id="cid-1"),
        container_annotations={"io.kubernetes.container.name": "c"},
        container_resources=api_pb2.LinuxContainerResources(
            cpu_period=100_000, cpu_quota=50_000, cpu_shares=2, memory_limit_in_bytes=0, oom_score_adj=1000,
            cpuset_mems="0", unified={"memory.high": "max"}),
        pod_annotations=pod_annotations, pod_labels={LABEL_QOS: qos},
        pod_cgroup_parent="/kubepods/besteffort/pod-u1", container_envs={"HOME": "/root"})


def test_pre_create_container_be_pod(stub: api_pb2_grpc.RuntimeHookServiceStub) -> None:
    resp = stub.PreCreateContainerHook(container_request(), timeout=5)
    res = resp.container_resources
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit_in_bytes) == (1024, 400_000, 2 * GI)
    assert res.cpuset_cpus == "2-3"
    # fields no hook set are the request's
    assert (res.cpu_period, res.oom_score_adj, res.cpuset_mems, dict(res.unified)) == (
        100_000, 1000, "0", {"memory.high": "max"})
    assert dict(resp.container_envs) == {"HOME": "/root", "PROBE_CONTAINER": "c:cid-1", "PROBE_LIMIT_MILLI": "500"}
    assert dict(resp.container_annotations) == {"io.kubernetes.container.name": "c",
                                                "probe/stage": "PreCreateContainer"}
    assert resp.pod_cgroup_parent == "/kubepods/besteffort/pod-u1"


def test_pre_update_container_resources(stub: api_pb2_grpc.RuntimeHookServiceStub) -> None:
    res = stub.PreUpdateContainerResourcesHook(container_request(), timeout=5).container_resources
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit_in_bytes) == (1024, 400_000, 2 * GI)


def test_ls_pod_left_to_the_request(stub: api_pb2_grpc.RuntimeHookServiceStub) -> None:
    resp = stub.PreCreateContainerHook(container_request(qos="LS"), timeout=5)
    res = resp.container_resources
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit_in_bytes, res.cpuset_cpus) == (2, 50_000, 0, "2-3")


@pytest.mark.parametrize("rpc", ["PreStartContainerHook", "PostStartContainerHook", "PostStopContainerHook"])
def test_other_container_stages(stub: api_pb2_grpc.RuntimeHookServiceStub, rpc: str) -> None:
    resp = getattr(stub, rpc)(container_request(), timeout=5)
    # batchresource runs at create/update only: the request's cpu values come back unchanged
    assert (resp.container_resources.cpu_shares, resp.container_resources.cpu_quota) == (2, 50_000)
    assert resp.container_annotations["probe/stage"] == convert.RPC_STAGES[rpc].value


@pytest.mark.parametrize("rpc", ["PreRunPodSandboxHook", "PostStopPodSandboxHook"])
def test_pod_sandbox_stages(stub: api_pb2_grpc.RuntimeHookServiceStub, rpc: str) -> None:
    request = api_pb2.PodSandboxHookRequest(
        pod_meta=pod_meta(), runtime_handler="runc", labels={LABEL_QOS: "BE"}, annotations={"a": "1"},
        cgroup_parent="/kubepods/besteffort", resources=api_pb2.LinuxContainerResources(cpu_shares=2))
    resp = getattr(stub, rpc)(request, timeout=5)
    assert dict(resp.labels) == {LABEL_QOS: "BE"}
    assert dict(resp.annotations) == {"a": "1", "probe/seen": "ns/batch:u1:/kubepods/besteffort"}
    assert resp.cgroup_parent == "/kubepods/besteffort/pod-u1"
    assert resp.resources.cpu_shares == 2


class Writes:
    """The executor's ``apply``: records the updates, reports them written."""

    def __init__(self) -> None:
        self.updates: list[CgroupUpdate] = []

    def __call__(self, updates: list[CgroupUpdate]) -> list[Result]:
        self.updates += updates
        return [Result(u, Outcome.WRITTEN) for u in updates]


def test_pre_run_pod_sandbox_writes_the_be_pod_cgroup(tmp_path: Path) -> None:
    """Containerd applies no sandbox resources to the pod cgroup kubelet made: the server writes the sums of
    the annotation's batch resources there itself, and answers them too (memory unlimited is CRI's 0)."""
    spec = {"containers": {
        "a": {"requests": {"kubernetes.io/batch-cpu": "1k"},
              "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}},
        "b": {"requests": {"kubernetes.io/batch-cpu": "500"}, "limits": {"kubernetes.io/batch-cpu": "500"}}}}
    writes = Writes()
    server = HookServer(HookRunner([batchresource.new(HookDeps())]), str(tmp_path / "k.sock"), None,
                        applier=Applier(writes))
    server.start()
    try:
        for stub in stub_for(server):
            def request(labels: dict[str, str], parent: str) -> api_pb2.PodSandboxHookRequest:
                return api_pb2.PodSandboxHookRequest(
                    pod_meta=pod_meta(), labels=labels, cgroup_parent=parent,
                    annotations={ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(spec)})
            resp = stub.PreRunPodSandboxHook(request({LABEL_QOS: "BE"}, "/kubepods/besteffort/pod-u1"), timeout=5)
            ls = stub.PreRunPodSandboxHook(request({LABEL_QOS: "LS"}, "/kubepods/burstable/pod-u2"), timeout=5)
    finally:
        server.stop()
    assert sorted((u.key, u.rel_dir, u.value, u.owner) for u in writes.updates) == [
        ("cpu_cfs_quota", "kubepods/besteffort/pod-u1", 250_000, "runtimehooks/batchresource"),
        ("cpu_shares", "kubepods/besteffort/pod-u1", 1536, "runtimehooks/batchresource"),
        ("memory_limit", "kubepods/besteffort/pod-u1", -1, "runtimehooks/batchresource")]
    res = resp.resources
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit_in_bytes) == (1536, 250_000, 0)
    assert ls.resources == api_pb2.LinuxContainerResources()


def test_failing_hook_under_ignore_still_answers(stub: api_pb2_grpc.RuntimeHookServiceStub) -> None:
    resp = stub.PreCreateContainerHook(container_request({FAIL_ANNOTATION: "1"}), timeout=5)
    assert (resp.container_resources.cpu_shares, resp.container_resources.cpu_quota) == (1024, 400_000)
    assert resp.container_resources.cpuset_cpus == ""  # the probe's values are not half-applied
    assert "PROBE_CONTAINER" not in resp.container_envs


def test_failing_hook_under_fail_is_internal(tmp_path: Path) -> None:
    server = start(tmp_path, policy=FailurePolicy.FAIL, proxy_policy="Fail")
    try:
        for stub in stub_for(server):
            with pytest.raises(grpc.RpcError) as info:
                stub.PreCreateContainerHook(container_request({FAIL_ANNOTATION: "1"}), timeout=5)
            assert info.value.code() is grpc.StatusCode.INTERNAL
            assert "probe: probe refused" in info.value.details()
            # a good request still works on the same server
            assert stub.PreCreateContainerHook(container_request(), timeout=5).container_resources.cpu_shares == 1024
        assert json.loads(Path(server.registration_path or "").read_text())["failure-policy"] == "Fail"
    finally:
        server.stop()


def test_socket_mode_and_registration(tmp_path: Path) -> None:
    server = start(tmp_path)
    try:
        st = os.stat(server.socket_path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        reg = tmp_path / "hookserver.d" / "koordlet.json"
        assert server.registration_path == str(reg)
        assert json.loads(reg.read_text()) == {
            "remote-endpoint": str(tmp_path / "run" / "koordlet.sock"),
            "failure-policy": "Ignore",
            "runtime-hooks": ["PreRunPodSandbox", "PostStopPodSandbox", "PreCreateContainer", "PreStartContainer",
                              "PostStartContainer", "PostStopContainer", "PreUpdateContainerResources"],
        }
        assert [p.name for p in reg.parent.iterdir()] == ["koordlet.json"]  # no temp file left behind
    finally:
        server.stop()
    assert not reg.exists()
    assert not os.path.exists(server.socket_path)


def test_without_registration_dir(tmp_path: Path) -> None:
    server = start(tmp_path, registration=False)
    try:
        assert server.registration_path is None
        for stub in stub_for(server):
            assert stub.PreCreateContainerHook(container_request(), timeout=5).container_resources.cpu_shares == 1024
    finally:
        server.stop()
    server.stop()  # idempotent


def test_stale_socket_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "run" / "koordlet.sock"
    path.parent.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # bound, never listening, closed: what a crashed koordlet leaves behind
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    server = start(tmp_path)
    try:
        for stub in stub_for(server):
            assert stub.PreCreateContainerHook(container_request(), timeout=5).container_resources.cpu_shares == 1024
    finally:
        server.stop()


def test_refuses_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "run" / "koordlet.sock"
    path.parent.mkdir()
    path.write_text("precious")
    with pytest.raises(KoordletError, match="not a socket"):
        start(tmp_path)
    assert path.read_text() == "precious"


def test_bad_proxy_policy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        HookServer(HookRunner([]), str(tmp_path / "k.sock"), None, "Sometimes")


def test_zero_period_leaves_cpu_limit_unset() -> None:
    request = container_request()
    request.container_resources.cpu_period = 0
    hook_request = convert.container_request(Stage.PRE_CREATE_CONTAINER, request)
    assert hook_request.container is not None and hook_request.container.limits.cpu_milli is None
    assert hook_request.container.limits.memory_bytes is None
    assert hook_request.pod.phase == "Pending"


@pytest.mark.parametrize(("parent", "expected"), [
    ("/kubepods/besteffort/pod1", KubeQoS.BESTEFFORT),
    ("/kubepods/burstable/pod1", KubeQoS.BURSTABLE),
    ("/kubepods/pod1", KubeQoS.GUARANTEED),
    ("kubepods-besteffort-pod1.slice", KubeQoS.BESTEFFORT),
    ("kubepods-pod1.slice", KubeQoS.GUARANTEED),
    ("/custom/pod1", None),
    ("", None),
    ("a--b.slice", None),
])
def test_kube_qos_from_the_cgroup_parent(parent: str, expected: KubeQoS | None) -> None:
    request = container_request()
    request.pod_cgroup_parent = parent
    assert convert.container_request(Stage.PRE_CREATE_CONTAINER, request).pod.kube_qos is expected
