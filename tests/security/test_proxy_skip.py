"""A tenant's pod bypassing every koordlet hook with its own ``runtimeproxy.koordinator.sh/skip-hookserver``
label or annotation, performed through the real koord-runtime-proxy (``runtimeproxy.server.Proxy``, default
options as the CLI and the systemd unit give them) serving CRI on a unix socket, between a CRI client
("kubelet"), a fake runtime recording what reaches it, and a scripted RuntimeHookService registered in the
proxy's hookserver.d as koordlet registers.  The hook answers what koordlet answers a BE container (CPU
shares and quota of its batch resources): a skipped pod escapes those limits.

Before: the proxy honoured the key in every namespace.  Now: only pods of ``--skip-hookserver-namespaces``
(kube-system and koordinator-system by default) skip; a tenant's pod is hooked like any other.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2_grpc as hook_grpc
from runtimeproxy.registry import STAGES
from runtimeproxy.server import Proxy, ProxyOptions
from tests.unit.runtimeproxy.test_intercept import Script, ScriptedServicer

SKIP = "runtimeproxy.koordinator.sh/skip-hookserver"
RUNTIME = "/runtime.v1.RuntimeService/"
CALL_TIMEOUT = 10.0
HOOKED_SHARES, HOOKED_QUOTA = 512, 50_000
"""What the hook server answers for every container: the BE limits a skipped pod escapes."""


@dataclass
class FakeRuntime(grpc.GenericRpcHandler):  # type: ignore[misc]
    """containerd's RuntimeService as far as these calls go; records each request's bytes."""

    received: list[tuple[str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 0

    def last(self, name: str) -> bytes:
        with self.lock:
            return [raw for method, raw in self.received if method == RUNTIME + name][-1]

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self.lock:
                self.received.append((method, request))
                self.next_id += 1
                n = self.next_id
            if method == RUNTIME + "RunPodSandbox":
                return bytes(cri.RunPodSandboxResponse(pod_sandbox_id=f"sb{n}").SerializeToString())
            if method == RUNTIME + "CreateContainer":
                return bytes(cri.CreateContainerResponse(container_id=f"c{n}").SerializeToString())
            return b""  # every other response message of these calls is empty (ListPodSandbox: no pods)

        return grpc.unary_unary_rpc_method_handler(answer)


@dataclass
class Node:
    script: Script
    runtime: FakeRuntime
    cri: Any
    """RuntimeServiceStub on the proxy's socket: kubelet."""


def hooked_container(request: Any) -> Any:
    resources = hook.LinuxContainerResources()
    resources.CopyFrom(request.container_resources)
    resources.cpu_shares, resources.cpu_quota = HOOKED_SHARES, HOOKED_QUOTA
    return hook.ContainerResourceHookResponse(container_resources=resources)


@pytest.fixture
def node() -> Iterator[Node]:
    tmp = Path(tempfile.mkdtemp(prefix="kprx-", dir="/tmp"))  # AF_UNIX paths are short
    servers: list[grpc.Server] = []
    proxy: Proxy | None = None
    channel: grpc.Channel | None = None
    try:
        script = Script(answers={"PreCreateContainerHook": hooked_container})
        hooks = grpc.server(ThreadPoolExecutor(max_workers=4))
        hook_grpc.add_RuntimeHookServiceServicer_to_server(ScriptedServicer(script), hooks)  # type: ignore[no-untyped-call]
        hooks.add_insecure_port(f"unix:{tmp / 'koordlet.sock'}")
        servers.append(hooks)
        hooks.start()
        runtime = FakeRuntime()
        containerd = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=[runtime])
        containerd.add_insecure_port(f"unix:{tmp / 'containerd.sock'}")
        servers.append(containerd)
        containerd.start()
        (tmp / "hookserver.d").mkdir()
        (tmp / "hookserver.d" / "koordlet.json").write_text(json.dumps({
            "remote-endpoint": str(tmp / "koordlet.sock"), "failure-policy": "Ignore", "runtime-hooks": list(STAGES)}))
        proxy = Proxy(ProxyOptions(endpoint=str(tmp / "proxy.sock"), runtime_endpoint=str(tmp / "containerd.sock"),
                                   hook_config_dir=str(tmp / "hookserver.d"), checkpoint_path=None,
                                   hook_timeout_seconds=5.0))
        proxy.start()
        channel = grpc.insecure_channel(f"unix:{tmp / 'proxy.sock'}")
        yield Node(script, runtime, cri_grpc.RuntimeServiceStub(channel))  # type: ignore[no-untyped-call]
    finally:
        if channel is not None:
            channel.close()
        if proxy is not None:
            proxy.stop()
        for server in servers:
            server.stop(None)
        shutil.rmtree(tmp, ignore_errors=True)


def start_pod(node: Node, namespace: str, where: str) -> tuple[Any, list[str]]:
    """kubelet starts a pod carrying the skip key (as a label or an annotation) and its container; the
    CreateContainer request as the runtime got it, and the hook methods the proxy called."""
    node.script.calls.clear()
    carried = {SKIP: "true"}
    config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="escape", uid=f"uid-{namespace}-{where}", namespace=namespace),
        labels={"koordinator.sh/qosClass": "BE", **(carried if where == "label" else {})},
        annotations=carried if where == "annotation" else {},
        linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/besteffort/pod-escape"))
    sandbox = node.cri.RunPodSandbox(cri.RunPodSandboxRequest(config=config), timeout=CALL_TIMEOUT)
    created = node.cri.CreateContainer(cri.CreateContainerRequest(
        pod_sandbox_id=sandbox.pod_sandbox_id, sandbox_config=config,
        config=cri.ContainerConfig(metadata=cri.ContainerMetadata(name="main"), image=cri.ImageSpec(image="busybox"),
                                   linux=cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(
                                       cpu_shares=1024, cpu_period=100_000)))), timeout=CALL_TIMEOUT)
    node.cri.StartContainer(cri.StartContainerRequest(container_id=created.container_id), timeout=CALL_TIMEOUT)
    sent = cri.CreateContainerRequest()
    sent.ParseFromString(node.runtime.last("CreateContainer"))
    return sent, [method for method, _ in node.script.calls]


@pytest.mark.parametrize("where", ["label", "annotation"])
def test_a_tenant_pod_cannot_skip_the_hooks(node: Node, where: str) -> None:
    sent, called = start_pod(node, "tenant-a", where)
    assert called == ["PreRunPodSandboxHook", "PreCreateContainerHook", "PreStartContainerHook",
                      "PostStartContainerHook"], f"the tenant's {where} {SKIP} bypassed koordlet's hooks"
    resources = sent.config.linux.resources
    assert (resources.cpu_shares, resources.cpu_quota) == (HOOKED_SHARES, HOOKED_QUOTA), "BE limits escaped"


@pytest.mark.parametrize("namespace", ["kube-system", "koordinator-system"])
@pytest.mark.parametrize("where", ["label", "annotation"])
def test_a_pod_of_an_allowed_namespace_still_skips(node: Node, namespace: str, where: str) -> None:
    sent, called = start_pod(node, namespace, where)
    assert called == []
    resources = sent.config.linux.resources
    assert (resources.cpu_shares, resources.cpu_quota) == (1024, 0), "kubelet's request went on untouched"
