"""The passthrough-only proxy in front of a real containerd 1.6: the whole CRI flow of a pod, run once
through the proxy and once directly, gives the same results.

Each flow runs its own pod (same shape, its own UID); the results compared are the meaningful fields:
id formats, states, exit codes, exec output, image lists, what reached the cgroup, and error codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy import server as server_module
from runtimeproxy.backend import Backend, PassthroughHandler, serve
from tests.fixtures.cleanup import Cleanup
from tests.fixtures.containerd import IMAGE, Containerd, CriClient, read_container_cgroup, unique_pod_uid

ID = re.compile(r"^[0-9a-f]{64}$")
TIMEOUT = 20.0


@dataclass
class Proxy:
    socket: str
    client: CriClient


@pytest.fixture(params=["passthrough", "koord-runtime-proxy"])
def proxy(request: pytest.FixtureRequest, containerd16: Containerd) -> Iterator[Proxy]:
    """The bare passthrough, and the whole proxy (hooked calls, registry, checkpoint) with no hook server
    registered: both must be invisible to the CRI client."""
    socket = str(containerd16.tmp / "proxy.sock")
    if request.param == "passthrough":
        backend = Backend(str(containerd16.socket))
        server = serve(socket, PassthroughHandler(backend, {}), max_workers=8)
        stop = lambda: (server.stop(None), backend.close())  # noqa: E731
    else:
        whole = server_module.Proxy(server_module.ProxyOptions(
            endpoint=socket, runtime_endpoint=str(containerd16.socket),
            hook_config_dir=str(containerd16.tmp / "hookserver.d"),
            checkpoint_path=str(containerd16.tmp / "checkpoint.json")))
        whole.start()
        stop = whole.stop
    client = CriClient(socket)
    try:
        yield Proxy(socket, client)
    finally:
        with Cleanup(f"{request.param} on {socket}") as cleanup:
            cleanup.attempt("close the CRI client", client.close)
            cleanup.attempt("stop the proxy", stop)


def _code(call: Any) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def cri_flow(client: CriClient, containerd: Containerd, name: str) -> dict[str, Any]:
    """One pod's life over ``client``; returns what must not depend on the path the calls took."""
    rt, images, t = client.runtime, client.images, TIMEOUT
    out: dict[str, Any] = {}

    out["version"] = client.version()
    out["conditions"] = sorted((c.type, c.status) for c in client.status().status.conditions)
    listed = images.ListImages(cri.ListImagesRequest(), timeout=t).images
    out["images"] = sorted((i.id, tuple(i.repo_tags), tuple(i.repo_digests), i.size) for i in listed)
    image = images.ImageStatus(cri.ImageStatusRequest(image=cri.ImageSpec(image=IMAGE)), timeout=t).image
    out["image_status"] = (image.id, tuple(image.repo_tags), image.size)

    uid = unique_pod_uid()
    parent = containerd.pod_parent("besteffort", uid)
    containerd.track_cgroup_parent(parent)
    pod_id = client.run_pod(name, uid, "default", parent, labels={"app": "passthrough"})
    assert ID.match(pod_id), pod_id
    pod = rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id), timeout=t).status
    assert (pod.id, pod.metadata.uid) == (pod_id, uid)
    out["pod_state"] = pod.state
    out["pod_labels"] = dict(pod.labels)
    out["pod_namespaces"] = pod.linux.namespaces.options.network
    pods = rt.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=t).items
    out["pod_listed"] = [p.state for p in pods if p.id == pod_id]

    resources = cri.LinuxContainerResources(cpu_shares=512, cpu_quota=50000, cpu_period=100000)
    container_id = client.create_container(
        pod_id, None, "app", ["/bin/sleep", "3600"], annotations={"koordlet.test/c": "1"}, resources=resources
    )
    assert ID.match(container_id), container_id
    out["created_state"] = client.container_status(container_id).state
    client.start(container_id)
    status = client.container_status(container_id)
    assert status.id == container_id
    out["running"] = (status.state, status.metadata.name, status.image.image, dict(status.annotations))

    stats = rt.ContainerStats(cri.ContainerStatsRequest(container_id=container_id), timeout=t).stats
    assert stats.attributes.id == container_id
    out["stats"] = (stats.attributes.metadata.name, stats.HasField("cpu"), stats.HasField("memory"))

    hi = rt.ExecSync(cri.ExecSyncRequest(container_id=container_id, cmd=["/bin/sh", "-c", "echo hi"]), timeout=t)
    out["exec_hi"] = (hi.stdout, hi.stderr, hi.exit_code)
    fail_request = cri.ExecSyncRequest(container_id=container_id, cmd=["/bin/sh", "-c", "echo oops >&2; exit 3"])
    fail = rt.ExecSync(fail_request, timeout=t)
    out["exec_fail"] = (fail.stdout, fail.stderr, fail.exit_code)

    update = cri.LinuxContainerResources(cpu_shares=256, cpu_quota=30000, cpu_period=100000)
    client.update_resources(container_id, update)
    out["cgroup"] = (
        read_container_cgroup(parent, container_id, "cpu.shares"),
        read_container_cgroup(parent, container_id, "cpu.cfs_quota_us"),
    )

    client.stop(container_id, timeout_seconds=0)
    stopped = client.container_status(container_id)
    out["stopped"] = (stopped.state, stopped.exit_code, stopped.reason, stopped.finished_at > 0)
    client.remove(container_id)
    listed_containers = rt.ListContainers(cri.ListContainersRequest(), timeout=t).containers
    out["container_gone"] = container_id not in {c.id for c in listed_containers}
    out["status_of_removed"] = _code(lambda: client.container_status(container_id))

    client.stop_pod(pod_id)
    stopped_pod = rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id), timeout=t).status
    out["pod_stopped"] = stopped_pod.state
    client.remove_pod(pod_id)
    out["pod_gone"] = pod_id not in {p.id for p in client.list_pods()}
    out["status_of_removed_pod"] = _code(
        lambda: rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id), timeout=t)
    )
    return out


def test_cri_flow_through_proxy_equals_direct(containerd16: Containerd, proxy: Proxy) -> None:
    through_proxy = cri_flow(proxy.client, containerd16, "via-proxy")
    direct = cri_flow(containerd16.client(), containerd16, "direct")

    assert through_proxy == direct
    # And the results are the ones expected, not merely equal.
    assert through_proxy["version"].runtime_name == "containerd"
    assert ("RuntimeReady", True) in through_proxy["conditions"]
    assert any(IMAGE in tags for _, tags, _, _ in through_proxy["images"])
    assert through_proxy["pod_state"] == cri.SANDBOX_READY
    assert through_proxy["pod_listed"] == [cri.SANDBOX_READY]
    assert through_proxy["created_state"] == cri.CONTAINER_CREATED
    assert through_proxy["running"] == (cri.CONTAINER_RUNNING, "app", IMAGE, {"koordlet.test/c": "1"})
    assert through_proxy["stats"] == ("app", True, True)
    assert through_proxy["exec_hi"] == (b"hi\n", b"", 0)
    assert through_proxy["exec_fail"] == (b"", b"oops\n", 3)
    assert through_proxy["cgroup"] == ("256", "30000")
    assert through_proxy["stopped"][:2] == (cri.CONTAINER_EXITED, 137)  # timeout 0: SIGKILL at once
    assert through_proxy["stopped"][3] is True
    assert through_proxy["container_gone"] is True
    assert through_proxy["status_of_removed"] == grpc.StatusCode.NOT_FOUND
    assert through_proxy["pod_stopped"] == cri.SANDBOX_NOTREADY
    assert through_proxy["pod_gone"] is True
    assert through_proxy["status_of_removed_pod"] == grpc.StatusCode.NOT_FOUND


def test_methods_outside_the_subset_behave_as_direct(containerd16: Containerd, proxy: Proxy) -> None:
    direct = grpc.insecure_channel(f"unix:{containerd16.socket}")
    proxied = grpc.insecure_channel(f"unix:{proxy.socket}")
    version = cri.VersionRequest(version="v1alpha2").SerializeToString()
    try:
        # containerd 1.6 still serves runtime.v1alpha2, which our subset does not declare: relayed as a stream.
        v1alpha2 = "/runtime.v1alpha2.RuntimeService/Version"
        assert proxied.unary_unary(v1alpha2)(version, timeout=TIMEOUT) == direct.unary_unary(v1alpha2)(
            version, timeout=TIMEOUT
        )
        for method in (
            "/runtime.v1.RuntimeService/NoSuchMethod",
            "/runtime.v9.RuntimeService/Version",
        ):
            assert _code(lambda m=method: proxied.unary_unary(m)(b"", timeout=TIMEOUT)) == _code(
                lambda m=method: direct.unary_unary(m)(b"", timeout=TIMEOUT)
            )
        # Server-streaming (containerd 1.6 may not implement it: then both say so with the same code).
        events = "/runtime.v1.RuntimeService/GetContainerEvents"
        request = cri.GetEventsRequest().SerializeToString()
        codes = []
        for channel in (proxied, direct):
            stream = channel.unary_stream(events)(request, timeout=1.0)
            try:
                for _ in stream:
                    pass
            except grpc.RpcError as error:
                codes.append((error.code(), error.details()))
            else:
                codes.append((grpc.StatusCode.OK, ""))
        assert codes[0] == codes[1]
    finally:
        proxied.close()
        direct.close()
