"""The CRI ``runtime.v1`` subset: upstream names and field numbers, and no loss of fields it omits.

Expected numbers are copied from kubernetes/cri-api ``pkg/apis/runtime/v1/api.proto`` (k8s.io/cri-api v1).
The subset leaves out messages and fields (Windows, stop_signal, stats...); a proxy that parses and
re-serialises kubelet's requests must hand them on intact, which protobuf's unknown-field retention gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor
from google.protobuf.internal import decoder, encoder
from google.protobuf.unknown_fields import UnknownFieldSet

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc


def field_numbers(descriptor: Descriptor) -> dict[str, int]:
    return {f.name: f.number for f in descriptor.fields}


UPSTREAM_FIELDS: list[tuple[Any, dict[str, int]]] = [
    (
        cri.LinuxContainerResources,
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
    (
        cri.PodSandboxConfig,
        {
            "metadata": 1,
            "hostname": 2,
            "log_directory": 3,
            "dns_config": 4,
            "port_mappings": 5,
            "labels": 6,
            "annotations": 7,
            "linux": 8,
        },
    ),
    (
        cri.LinuxPodSandboxConfig,
        {
            "cgroup_parent": 1,
            "security_context": 2,
            "sysctls": 3,
            "overhead": 4,
            "resources": 5,
        },
    ),
    (cri.NamespaceOption, {"network": 1, "pid": 2, "ipc": 3, "target_id": 4, "userns_options": 5}),
    (cri.PodSandboxMetadata, {"name": 1, "uid": 2, "namespace": 3, "attempt": 4}),
    (
        cri.ContainerConfig,
        {
            "metadata": 1,
            "image": 2,
            "command": 3,
            "args": 4,
            "working_dir": 5,
            "envs": 6,
            "mounts": 7,
            "devices": 8,
            "labels": 9,
            "annotations": 10,
            "log_path": 11,
            "stdin": 12,
            "stdin_once": 13,
            "tty": 14,
            "linux": 15,
            "CDI_devices": 17,
        },
    ),
    (cri.LinuxContainerConfig, {"resources": 1, "security_context": 2}),
    (cri.CreateContainerRequest, {"pod_sandbox_id": 1, "config": 2, "sandbox_config": 3}),
    (cri.UpdateContainerResourcesRequest, {"container_id": 1, "linux": 2, "annotations": 4}),
    (cri.RunPodSandboxRequest, {"config": 1, "runtime_handler": 2}),
    (
        cri.ImageSpec,
        {
            "image": 1,
            "annotations": 2,
            "user_specified_image": 18,
            "runtime_handler": 19,
            "image_ref": 20,
        },
    ),
    (
        cri.ContainerStatus,
        {
            "id": 1,
            "metadata": 2,
            "state": 3,
            "created_at": 4,
            "started_at": 5,
            "finished_at": 6,
            "exit_code": 7,
            "image": 8,
            "image_ref": 9,
            "reason": 10,
            "message": 11,
            "labels": 12,
            "annotations": 13,
            "mounts": 14,
            "log_path": 15,
            "resources": 16,
            "image_id": 17,
            "user": 18,
        },
    ),
    (
        cri.LinuxSandboxSecurityContext,
        {
            "namespace_options": 1,
            "selinux_options": 2,
            "run_as_user": 3,
            "run_as_group": 8,
            "readonly_rootfs": 4,
            "supplemental_groups": 5,
            "supplemental_groups_policy": 11,
            "privileged": 6,
            "seccomp": 9,
            "apparmor": 10,
            "seccomp_profile_path": 7,
        },
    ),
    (
        cri.Mount,
        {
            "container_path": 1,
            "host_path": 2,
            "readonly": 3,
            "selinux_relabel": 4,
            "propagation": 5,
            "uidMappings": 6,
            "gidMappings": 7,
            "recursive_read_only": 8,
            "image": 9,
            "image_sub_path": 10,
        },
    ),
]


@pytest.mark.parametrize(("message", "expected"), UPSTREAM_FIELDS, ids=lambda v: getattr(v, "__name__", ""))
def test_field_numbers_match_upstream(message: Any, expected: dict[str, int]) -> None:
    assert field_numbers(message.DESCRIPTOR) == expected


def test_package_services_and_enums_match_upstream() -> None:
    assert cri.DESCRIPTOR.package == "runtime.v1"
    runtime = cri.DESCRIPTOR.services_by_name["RuntimeService"]
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert {
        "Version",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "PodSandboxStatus",
        "ListPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "ListContainers",
        "ContainerStatus",
        "UpdateContainerResources",
        "Status",
    } <= {m.name for m in runtime.methods}
    images = cri.DESCRIPTOR.services_by_name["ImageService"]
    assert {m.name for m in images.methods} == {"ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo"}
    assert (cri.POD, cri.CONTAINER, cri.NODE, cri.TARGET) == (0, 1, 2, 3)
    assert (cri.CONTAINER_CREATED, cri.CONTAINER_RUNNING, cri.CONTAINER_EXITED, cri.CONTAINER_UNKNOWN) == (0, 1, 2, 3)
    assert (cri.SANDBOX_READY, cri.SANDBOX_NOTREADY) == (0, 1)
    assert hasattr(cri_grpc, "RuntimeServiceStub") and hasattr(cri_grpc, "ImageServiceServicer")


def _tag(number: int, wire_type: int) -> bytes:
    tag: bytes = encoder.TagBytes(number, wire_type)
    return tag


def _varint(number: int, value: int) -> bytes:
    out: list[bytes] = []
    encoder._EncodeVarint(out.append, value)
    return _tag(number, 0) + b"".join(out)


def _bytes(number: int, payload: bytes) -> bytes:
    out: list[bytes] = []
    encoder._EncodeVarint(out.append, len(payload))
    return _tag(number, 2) + b"".join(out) + payload


def test_unknown_fields_round_trip_byte_identical() -> None:
    # A future upstream LinuxContainerResources field 11, and ContainerConfig's windows (16, a message)
    # and stop_signal (18, an enum = SIGTERM 23) which this subset omits; unknown fields written last, as
    # protobuf serialisers do for fields they carry but do not know.
    resources = cri.LinuxContainerResources(cpu_shares=512, cpu_quota=50000).SerializeToString()
    resources += _varint(11, 7)
    known = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="c"),
        image=cri.ImageSpec(image="busybox"),
        command=["sleep"],
    ).SerializeToString()
    wire = known + _bytes(15, _bytes(1, resources)) + _bytes(16, _bytes(1, _varint(1, 2))) + _varint(18, 23)

    parsed = cri.ContainerConfig.FromString(wire)
    assert parsed.linux.resources.cpu_shares == 512
    assert parsed.SerializeToString() == wire
    assert {f.field_number for f in UnknownFieldSet(parsed)} == {16, 18}
    assert [f.field_number for f in UnknownFieldSet(parsed.linux.resources)] == [11]


def test_unknown_fields_interleaved_survive_modification() -> None:
    # Go's marshaller writes fields in number order, so an unknown 16 sits between known 15 and 17. It is
    # kept through parse, modify and serialise (moved after the known fields, which any parser accepts).
    linux = cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(cpu_shares=2)).SerializeToString()
    cdi = cri.CDIDevice(name="vendor.com/gpu=0").SerializeToString()
    windows = _bytes(1, _varint(1, 2))
    wire = _bytes(15, linux) + _bytes(16, windows) + _bytes(17, cdi) + _varint(18, 23)

    parsed = cri.ContainerConfig.FromString(wire)
    parsed.linux.resources.cpu_shares = 5
    out = parsed.SerializeToString()

    reparsed = cri.ContainerConfig.FromString(out)
    assert reparsed.linux.resources.cpu_shares == 5
    assert [d.name for d in reparsed.CDI_devices] == ["vendor.com/gpu=0"]
    unknown = {f.field_number: f.data for f in UnknownFieldSet(reparsed)}
    assert unknown[18] == 23
    assert unknown[16] == windows
    assert len(out) == len(wire)


def test_decoder_sanity() -> None:
    # The helpers above build real wire format: a known field written by hand decodes as protobuf's own.
    value, _ = decoder._DecodeVarint(_varint(3, 512), 1)
    assert value == 512
    assert cri.LinuxContainerResources.FromString(_varint(3, 512)).cpu_shares == 512
