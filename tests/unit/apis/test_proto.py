"""The committed protocol stubs: importable, wire-compatible with upstream, current with ``proto/``.

Field numbers are checked against the upstream definitions they must stay wire-compatible with:
koordinator-sh/koordinator ``apis/runtime/v1alpha1/api.proto`` (RuntimeHookService), containerd/nri
``pkg/api/api.proto`` (package ``nri.pkg.api.v1alpha1``) and containerd/ttrpc ``request.proto``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor

from koordlet.apis.proto import generate
from koordlet.apis.proto.nri.v1alpha1 import api_pb2 as nri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2_grpc as hook_grpc
from koordlet.apis.proto.ttrpc import request_pb2 as ttrpc

HOOK_SERVICE = "runtime.v1alpha1.RuntimeHookService"

# Method -> (request, response) as in koordinator's RuntimeHookService.
HOOK_METHODS = {
    "PreRunPodSandboxHook": ("PodSandboxHookRequest", "PodSandboxHookResponse"),
    "PostStopPodSandboxHook": ("PodSandboxHookRequest", "PodSandboxHookResponse"),
    "PreCreateContainerHook": ("ContainerResourceHookRequest", "ContainerResourceHookResponse"),
    "PreStartContainerHook": ("ContainerResourceHookRequest", "ContainerResourceHookResponse"),
    "PostStartContainerHook": ("ContainerResourceHookRequest", "ContainerResourceHookResponse"),
    "PostStopContainerHook": ("ContainerResourceHookRequest", "ContainerResourceHookResponse"),
    "PreUpdateContainerResourcesHook": ("ContainerResourceHookRequest", "ContainerResourceHookResponse"),
}


def field_numbers(descriptor: Descriptor) -> dict[str, int]:
    return {f.name: f.number for f in descriptor.fields}


def test_packages_are_upstreams() -> None:
    assert hook.DESCRIPTOR.package == "runtime.v1alpha1"
    assert nri.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    assert ttrpc.DESCRIPTOR.package == "ttrpc"


def test_runtime_hook_service_methods_and_types() -> None:
    service = hook.DESCRIPTOR.services_by_name["RuntimeHookService"]
    assert service.full_name == HOOK_SERVICE
    got = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert got == HOOK_METHODS
    assert all(not (m.client_streaming or m.server_streaming) for m in service.methods)


def test_grpc_stub_uses_full_method_paths() -> None:
    channel = grpc.insecure_channel("unix:///nonexistent/koordlet-test.sock")
    try:
        stub = hook_grpc.RuntimeHookServiceStub(channel)
        for method in HOOK_METHODS:
            assert callable(getattr(stub, method))
    finally:
        channel.close()
    source = Path(hook_grpc.__file__).read_text()
    for method in HOOK_METHODS:
        assert f"'/{HOOK_SERVICE}/{method}'" in source
    servicer = hook_grpc.RuntimeHookServiceServicer()
    assert all(callable(getattr(servicer, m)) for m in HOOK_METHODS)
    assert callable(hook_grpc.add_RuntimeHookServiceServicer_to_server)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # koordinator apis/runtime/v1alpha1/api.proto
        (hook.PodSandboxMetadata, {"name": 1, "uid": 2, "namespace": 3, "attempt": 4}),
        (hook.ContainerMetadata, {"name": 1, "attempt": 2, "id": 3}),
        (
            hook.ContainerResourceHookRequest,
            {
                "pod_meta": 1,
                "container_mata": 2,
                "container_annotations": 3,
                "container_resources": 4,
                "pod_resources": 5,
                "pod_annotations": 6,
                "pod_labels": 7,
                "pod_cgroup_parent": 8,
                "container_envs": 9,
            },
        ),
        (
            hook.ContainerResourceHookResponse,
            {"container_annotations": 1, "container_resources": 2, "pod_cgroup_parent": 3, "container_envs": 4},
        ),
        (
            hook.PodSandboxHookRequest,
            {
                "pod_meta": 1,
                "runtime_handler": 2,
                "labels": 3,
                "annotations": 4,
                "cgroup_parent": 5,
                "overhead": 6,
                "resources": 7,
            },
        ),
        (
            hook.LinuxContainerResources,
            {
                "cpu_period": 1,
                "cpu_quota": 2,
                "cpu_shares": 3,
                "memory_limit_in_bytes": 4,
                "oom_score_adj": 5,
                "cpuset_cpus": 6,
                "cpuset_mems": 7,
                "hugepage_limits": 8,
                "unified": 9,
                "memory_swap_limit_in_bytes": 10,
            },
        ),
        # containerd/ttrpc request.proto
        (ttrpc.Request, {"service": 1, "method": 2, "payload": 3, "timeout_nano": 4, "metadata": 5}),
        (ttrpc.Response, {"status": 1, "payload": 2}),
        (ttrpc.Status, {"code": 1, "message": 2, "details": 3}),
    ],
    ids=lambda v: v.DESCRIPTOR.full_name if hasattr(v, "DESCRIPTOR") else "",
)
def test_field_numbers_match_upstream(message: Any, expected: dict[str, int]) -> None:
    assert field_numbers(message.DESCRIPTOR) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # containerd/nri pkg/api/api.proto; the subset may omit fields, never renumber them.
        (nri.RegisterPluginRequest, {"plugin_name": 1, "plugin_idx": 2, "NRI_version": 3}),
        (nri.ConfigureRequest, {"config": 1, "runtime_name": 2, "registration_timeout": 4, "request_timeout": 5}),
        (nri.ConfigureResponse, {"events": 2}),
        (nri.SynchronizeRequest, {"pods": 1, "containers": 2, "more": 3}),
        (nri.SynchronizeResponse, {"update": 1, "more": 2}),
        (nri.CreateContainerRequest, {"pod": 1, "container": 2}),
        (nri.CreateContainerResponse, {"adjust": 1, "update": 2, "evict": 3}),
        (nri.UpdateContainerRequest, {"pod": 1, "container": 2, "linux_resources": 3}),
        (nri.StateChangeEvent, {"event": 1, "pod": 2, "container": 3}),
        (nri.PodSandbox, {"id": 1, "uid": 3, "namespace": 4, "annotations": 6, "linux": 8}),
        (nri.LinuxPodSandbox, {"pod_overhead": 1, "pod_resources": 2, "cgroup_parent": 3, "cgroups_path": 4}),
        (nri.Container, {"id": 1, "pod_sandbox_id": 2, "name": 3, "env": 8, "linux": 11, "pid": 12}),
        (nri.LinuxContainer, {"resources": 3, "oom_score_adj": 4, "cgroups_path": 5}),
        (nri.LinuxResources, {"memory": 1, "cpu": 2, "rdt_class": 5, "unified": 6, "pids": 8}),
        (nri.LinuxCPU, {"shares": 1, "quota": 2, "period": 3, "cpus": 6, "mems": 7}),
        (nri.LinuxMemory, {"limit": 1, "swap": 3}),
        (nri.ContainerAdjustment, {"annotations": 2, "mounts": 3, "env": 4, "linux": 6, "args": 9}),
        (nri.LinuxContainerAdjustment, {"devices": 1, "resources": 2, "oom_score_adj": 4}),
        (nri.ContainerUpdate, {"container_id": 1, "linux": 2, "ignore_failure": 3}),
        (nri.OptionalInt64, {"value": 1}),
    ],
    ids=lambda v: v.DESCRIPTOR.full_name if hasattr(v, "DESCRIPTOR") else "",
)
def test_nri_field_numbers_match_upstream(message: Any, expected: dict[str, int]) -> None:
    got = field_numbers(message.DESCRIPTOR)
    assert {name: got.get(name) for name in expected} == expected


def test_nri_services_and_events() -> None:
    runtime = nri.DESCRIPTOR.services_by_name["Runtime"]
    plugin = nri.DESCRIPTOR.services_by_name["Plugin"]
    assert runtime.full_name == "nri.pkg.api.v1alpha1.Runtime"
    assert {m.name for m in runtime.methods} == {"RegisterPlugin", "UpdateContainers"}
    assert {
        "Configure",
        "Synchronize",
        "Shutdown",
        "CreateContainer",
        "UpdateContainer",
        "StopContainer",
        "StateChange",
    } <= {m.name for m in plugin.methods}
    assert plugin.methods_by_name["CreateContainer"].output_type.name == "CreateContainerResponse"
    # Event numbers define the ConfigureResponse.events bit mask (bit 1 << (event - 1)).
    assert [nri.RUN_POD_SANDBOX, nri.REMOVE_POD_SANDBOX, nri.CREATE_CONTAINER, nri.UPDATE_CONTAINER] == [1, 3, 4, 8]
    assert nri.VALIDATE_CONTAINER_ADJUSTMENT == 14
    mask = sum(
        1 << (e - 1) for e in (nri.RUN_POD_SANDBOX, nri.REMOVE_POD_SANDBOX, nri.CREATE_CONTAINER, nri.UPDATE_CONTAINER)
    )
    assert mask == 0x8D  # koordlet's subscription, koordinator-facts §3


def test_container_hook_request_round_trip() -> None:
    request = hook.ContainerResourceHookRequest(
        pod_meta=hook.PodSandboxMetadata(name="be-pod", uid="0b0c-uid", namespace="default", attempt=1),
        container_mata=hook.ContainerMetadata(name="main", attempt=0, id="c0ffee"),
        container_annotations={"io.kubernetes.container.name": "main"},
        container_resources=hook.LinuxContainerResources(
            cpu_period=100_000,
            cpu_quota=-1,
            cpu_shares=2,
            memory_limit_in_bytes=1 << 30,
            oom_score_adj=1000,
            cpuset_cpus="0-3",
            hugepage_limits=[hook.HugepageLimit(page_size="2MB", limit=0)],
            unified={"cpu.idle": "1"},
        ),
        pod_annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-3"}'},
        pod_labels={"koordinator.sh/qosClass": "BE"},
        pod_cgroup_parent="kubepods-besteffort-pod0b0c.slice",
        container_envs={"GOMAXPROCS": "4"},
    )
    data = request.SerializeToString(deterministic=True)
    decoded = hook.ContainerResourceHookRequest.FromString(data)
    assert decoded == request
    assert decoded.container_mata.id == "c0ffee"
    assert decoded.container_resources.cpu_quota == -1
    assert decoded.pod_labels["koordinator.sh/qosClass"] == "BE"
    # pod_meta is field 1, length-delimited: tag byte (1 << 3) | 2.
    assert data[0] == 0x0A

    response = hook.ContainerResourceHookResponse(
        container_resources=hook.LinuxContainerResources(cpu_shares=2, cpuset_cpus=""),
        container_envs={"GOMAXPROCS": "4"},
    )
    assert hook.ContainerResourceHookResponse.FromString(response.SerializeToString()) == response


def test_unknown_fields_survive_reserialisation() -> None:
    # A newer peer's field (number 99, varint 7) must pass through unchanged.
    data = hook.PodSandboxMetadata(name="p").SerializeToString() + bytes([0x98, 0x06, 0x07])
    assert hook.PodSandboxMetadata.FromString(data).SerializeToString() == data


def test_nri_configure_round_trip() -> None:
    configure = nri.ConfigureRequest(
        runtime_name="containerd", runtime_version="v1.7.24", registration_timeout=5000, request_timeout=2000
    )
    assert nri.ConfigureRequest.FromString(configure.SerializeToString()) == configure
    reply = nri.ConfigureResponse(events=0x8D)
    assert reply.SerializeToString() == bytes([0x10, 0x8D, 0x01])  # field 2, varint 141
    assert nri.ConfigureResponse.FromString(reply.SerializeToString()).events == 0x8D


def test_nri_create_container_round_trip() -> None:
    pod = nri.PodSandbox(
        id="sandbox-1",
        name="ls-pod",
        uid="uid-1",
        namespace="default",
        annotations={"scheduling.koordinator.sh/resource-status": "{}"},
        linux=nri.LinuxPodSandbox(cgroup_parent="kubepods-burstable-poduid_1.slice"),
    )
    container = nri.Container(
        id="ctr-1",
        pod_sandbox_id="sandbox-1",
        name="main",
        state=nri.CONTAINER_CREATED,
        env=["A=1"],
        linux=nri.LinuxContainer(
            resources=nri.LinuxResources(cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=1024))),
            cgroups_path="kubepods-burstable-poduid_1.slice:cri-containerd:ctr-1",
        ),
    )
    request = nri.CreateContainerRequest(pod=pod, container=container)
    assert nri.CreateContainerRequest.FromString(request.SerializeToString()) == request

    adjust = nri.ContainerAdjustment(
        env=[nri.KeyValue(key="GOMAXPROCS", value="2")],
        linux=nri.LinuxContainerAdjustment(
            resources=nri.LinuxResources(
                cpu=nri.LinuxCPU(shares=nri.OptionalUInt64(value=2), quota=nri.OptionalInt64(value=-1), cpus=""),
                memory=nri.LinuxMemory(limit=nri.OptionalInt64(value=1 << 30)),
                rdt_class=nri.OptionalString(value="BE"),
            )
        ),
    )
    response = nri.CreateContainerResponse(
        adjust=adjust,
        update=[
            nri.ContainerUpdate(
                container_id="ctr-0",
                linux=nri.LinuxContainerUpdate(resources=nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-3"))),
            )
        ],
    )
    decoded = nri.CreateContainerResponse.FromString(response.SerializeToString())
    assert decoded == response
    # Optional wrappers keep "set to zero" apart from "unset".
    assert decoded.adjust.linux.resources.cpu.HasField("shares")
    assert not decoded.adjust.linux.resources.cpu.HasField("period")


def test_ttrpc_envelope_round_trip() -> None:
    payload = nri.ConfigureResponse(events=0x8D).SerializeToString()
    request = ttrpc.Request(
        service="nri.pkg.api.v1alpha1.Plugin",
        method="Configure",
        payload=payload,
        timeout_nano=2_000_000_000,
        metadata=[ttrpc.KeyValue(key="k", value="v")],
    )
    assert ttrpc.Request.FromString(request.SerializeToString()) == request
    response = ttrpc.Response(status=ttrpc.Status(code=5, message="not found"), payload=b"")
    assert ttrpc.Response.FromString(response.SerializeToString()).status.code == 5


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools not installed")
def test_committed_stubs_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    if not generate.PROTO_ROOT.is_dir():
        pytest.skip("proto/ sources are not in this tree")
    assert generate.main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools not installed")
def test_check_reports_drift(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    generate.generate(fresh)
    committed = tmp_path / "committed"
    committed.mkdir()
    generate.generate(committed)
    assert generate.diff(fresh, committed) == []
    stub = committed / "ttrpc" / "request_pb2.py"
    stub.write_text(stub.read_text() + "# hand edit\n")
    (committed / "ttrpc" / "stale_pb2.py").write_text("")
    drift = "".join(generate.diff(fresh, committed))
    assert "+++ generated/ttrpc/request_pb2.py" in drift
    assert "stale: committed/ttrpc/stale_pb2.py" in drift
    (fresh / "nri" / "v1alpha1" / "api_pb2.pyi").unlink()
    assert "stale: committed/nri/v1alpha1/api_pb2.pyi" in "".join(generate.diff(fresh, committed))


def test_generated_imports_are_absolute() -> None:
    grpc_source = Path(hook_grpc.__file__).read_text()
    assert "from koordlet.apis.proto.runtime.v1alpha1 import api_pb2" in grpc_source
    for path in Path(generate.PACKAGE_DIR).rglob("*_pb2*.py*"):
        if path.suffix not in (".py", ".pyi"):  # compiled bytecode next to them under CI
            continue
        for line in path.read_text().splitlines():
            assert not line.startswith(("from runtime", "from nri", "from ttrpc", "import runtime")), (path, line)
