"""The proxy's hooked CRI calls against a scripted RuntimeHookService over a real unix socket."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2_grpc as hook_grpc
from runtimeproxy.hookclient import HookClient
from runtimeproxy.intercept import RUNTIME, Interceptor, check_resources
from runtimeproxy.store import Store

# --- a scripted hook server -----------------------------------------------------------------------------


@dataclass
class Script:
    """Per hook method: a function request -> response, or a grpc status code to fail with."""

    answers: dict[str, Callable[[Any], Any] | grpc.StatusCode] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)


class ScriptedServicer(hook_grpc.RuntimeHookServiceServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    def _answer(self, method: str, request: Any, context: Any, default: Any) -> Any:
        self.script.calls.append((method, request))
        answer = self.script.answers.get(method)
        if isinstance(answer, grpc.StatusCode):
            context.abort(answer, f"scripted {method} failure")
        return answer(request) if answer is not None else default

    def PreRunPodSandboxHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PreRunPodSandboxHook", request, context, hook.PodSandboxHookResponse())

    def PostStopPodSandboxHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PostStopPodSandboxHook", request, context, hook.PodSandboxHookResponse())

    def PreCreateContainerHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PreCreateContainerHook", request, context, hook.ContainerResourceHookResponse())

    def PreStartContainerHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PreStartContainerHook", request, context, hook.ContainerResourceHookResponse())

    def PostStartContainerHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PostStartContainerHook", request, context, hook.ContainerResourceHookResponse())

    def PostStopContainerHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PostStopContainerHook", request, context, hook.ContainerResourceHookResponse())

    def PreUpdateContainerResourcesHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._answer("PreUpdateContainerResourcesHook", request, context,
                            hook.ContainerResourceHookResponse())


@dataclass(frozen=True)
class Server:
    name: str
    endpoint: str
    failure_policy: str


class Servers:
    def __init__(self, server: Server | None) -> None:
        self.server = server

    def server_for(self, stage: str) -> Server | None:
        return self.server


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Context:
    """What the interceptor uses of a ServicerContext: abort raises, as grpc's does."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


class Backend:
    """The runtime: records what reaches it and answers with canned responses."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.next_id = 0

    def forward(self, method: str, raw: bytes, context: Any) -> bytes:
        self.received.append((method, raw))
        self.next_id += 1
        name = method.rsplit("/", 1)[1]
        if name == "RunPodSandbox":
            return cri.RunPodSandboxResponse(pod_sandbox_id=f"sb{self.next_id}").SerializeToString()
        if name == "CreateContainer":
            return cri.CreateContainerResponse(container_id=f"c{self.next_id}").SerializeToString()
        return b""

    def last(self, message_type: Any) -> Any:
        message = message_type()
        message.ParseFromString(self.received[-1][1])
        return message


@dataclass
class Env:
    script: Script
    backend: Backend
    store: Store
    socket: str

    def interceptor(self, policy: str | None = "Ignore", endpoint: str | None = None, **options: Any) -> Interceptor:
        server = None if policy is None else Server("koordlet.json", endpoint or self.socket, policy)
        return Interceptor(self.backend.forward, Servers(server), self.store, HookClient(timeout_seconds=2.0),
                           **options)

    def call(self, interceptor: Interceptor, name: str, request: Any) -> bytes:
        return interceptor.handlers()[RUNTIME + name](request.SerializeToString(), Context())  # type: ignore[arg-type]


@pytest.fixture
def env() -> Iterator[Env]:
    with scripted_hook_server() as made:
        yield made


@contextlib.contextmanager
def scripted_hook_server() -> Iterator[Env]:
    """A scripted RuntimeHookService on a unix socket, with a recording backend and a memory checkpoint."""
    script = Script()
    with tempfile.TemporaryDirectory(prefix="kprx-") as tmp:
        socket = str(Path(tmp) / "hook.sock")
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        hook_grpc.add_RuntimeHookServiceServicer_to_server(ScriptedServicer(script), server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix:{socket}")
        server.start()
        try:
            yield Env(script, Backend(), Store(None), socket)
        finally:
            server.stop(None)


# --- requests -------------------------------------------------------------------------------------------


def sandbox_config(labels: dict[str, str] | None = None, namespace: str = "default", uid: str = "uid-1",
                   annotations: dict[str, str] | None = None) -> Any:
    return cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="web", uid=uid, namespace=namespace),
        labels=labels if labels is not None else {"koordinator.sh/qosClass": "BE"},
        annotations=annotations if annotations is not None else {"a": "1"},
        linux=cri.LinuxPodSandboxConfig(cgroup_parent="/kubepods/besteffort/poduid-1"))


def run_pod(env: Env, interceptor: Interceptor, labels: dict[str, str] | None = None, **pod: Any) -> str:
    answer = env.call(interceptor, "RunPodSandbox", cri.RunPodSandboxRequest(config=sandbox_config(labels, **pod)))
    reply = cri.RunPodSandboxResponse()
    reply.ParseFromString(answer)
    return str(reply.pod_sandbox_id)


def create_request(pod_id: str, labels: dict[str, str] | None = None, **pod: Any) -> Any:
    return cri.CreateContainerRequest(
        pod_sandbox_id=pod_id, sandbox_config=sandbox_config(labels, **pod),
        config=cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="main"), image=cri.ImageSpec(image="busybox"),
            envs=[cri.KeyValue(key="PATH", value="/bin"), cri.KeyValue(key="HOME", value="/root")],
            annotations={"c": "1"},
            linux=cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(cpu_shares=2, cpu_period=100000))))


def create(env: Env, interceptor: Interceptor, pod_id: str, labels: dict[str, str] | None = None, **pod: Any) -> str:
    reply = cri.CreateContainerResponse()
    reply.ParseFromString(env.call(interceptor, "CreateContainer", create_request(pod_id, labels, **pod)))
    return str(reply.container_id)


def batch_answer(request: Any) -> Any:
    resources = hook.LinuxContainerResources()
    resources.CopyFrom(request.container_resources)
    resources.cpu_shares, resources.cpu_quota = 512, 50000
    return hook.ContainerResourceHookResponse(
        container_annotations={**request.container_annotations, "hooked": "yes"},
        container_resources=resources, container_envs={"HOME": "/home/be", "KOORD": "1"})


# --- tests ----------------------------------------------------------------------------------------------


def test_run_pod_sandbox_merges_the_hook_answer_and_checkpoints_the_pod(env: Env) -> None:
    env.script.answers["PreRunPodSandboxHook"] = lambda r: hook.PodSandboxHookResponse(
        labels={**r.labels, "hooked": "yes"}, annotations=dict(r.annotations),
        cgroup_parent=r.cgroup_parent, resources=hook.LinuxContainerResources(cpu_shares=64))
    interceptor = env.interceptor()
    pod_id = run_pod(env, interceptor)
    sent = env.backend.last(cri.RunPodSandboxRequest)
    assert sent.config.labels["hooked"] == "yes"
    assert sent.config.linux.resources.cpu_shares == 64
    assert sent.config.linux.cgroup_parent == "/kubepods/besteffort/poduid-1"
    stored = env.store.pod(pod_id)
    assert stored is not None and stored.labels["hooked"] == "yes" and stored.pod_meta.uid == "uid-1"


def test_create_container_merges_resources_annotations_and_envs(env: Env) -> None:
    env.script.answers["PreCreateContainerHook"] = batch_answer
    interceptor = env.interceptor()
    pod_id = run_pod(env, interceptor)
    container_id = create(env, interceptor, pod_id)
    method, request = env.script.calls[-1]
    assert method == "PreCreateContainerHook"
    assert request.pod_labels["koordinator.sh/qosClass"] == "BE"
    assert request.pod_cgroup_parent == "/kubepods/besteffort/poduid-1"
    assert dict(request.container_envs) == {"PATH": "/bin", "HOME": "/root"}
    sent = env.backend.last(cri.CreateContainerRequest)
    assert (sent.config.linux.resources.cpu_shares, sent.config.linux.resources.cpu_quota) == (512, 50000)
    assert sent.config.linux.resources.cpu_period == 100000
    assert [(kv.key, kv.value) for kv in sent.config.envs] == [("PATH", "/bin"), ("HOME", "/home/be"), ("KOORD", "1")]
    assert sent.config.annotations["hooked"] == "yes"
    stored = env.store.container(container_id)
    assert stored is not None and stored[0] == pod_id
    assert stored[1].container_mata.id == container_id and stored[1].container_resources.cpu_shares == 512


def test_without_a_hook_server_the_bytes_pass_untouched(env: Env) -> None:
    interceptor = env.interceptor(policy=None)
    request = create_request("sb-x")
    raw = request.SerializeToString() + bytes([0xF8, 0x07, 0x01])  # unknown field 127 = 1 (a newer kubelet's)
    interceptor.handlers()[RUNTIME + "CreateContainer"](raw, Context())  # type: ignore[arg-type]
    assert env.backend.received[-1] == (RUNTIME + "CreateContainer", raw)


@pytest.mark.parametrize("pod_checkpointed", [True, False], ids=["pod-checkpointed", "pod-from-sandbox-config"])
def test_without_a_hook_server_the_container_is_checkpointed_as_a_hooked_call_would(
        env: Env, tmp_path: Path, pod_checkpointed: bool) -> None:
    # The no-hook path stores a recipe (runtimeproxy.store.Deferred); what it stores must be what the hooked
    # path stores when the hook gives nothing back (an unreachable server, policy Ignore).
    unhooked, ignored = env.interceptor(policy=None), env.interceptor("Ignore", endpoint=str(tmp_path / "nobody.sock"))
    pod_id = run_pod(env, unhooked) if pod_checkpointed else "sb-unknown"
    stored = []
    for interceptor in (unhooked, ignored):
        container_id = create(env, interceptor, pod_id)
        entry = env.store.container(container_id)
        assert entry is not None and entry[0] == pod_id
        assert entry[1].container_mata.id == container_id
        entry[1].container_mata.id = ""
        stored.append(entry[1])
    assert stored[0] == stored[1]
    assert stored[0].pod_meta.uid == "uid-1" and stored[0].pod_labels["koordinator.sh/qosClass"] == "BE"
    assert dict(stored[0].container_envs) == {"PATH": "/bin", "HOME": "/root"}
    assert stored[0].container_resources.cpu_shares == 2


def test_without_a_hook_server_a_skipped_pod_s_container_is_not_checkpointed(env: Env) -> None:
    interceptor = env.interceptor(policy=None)
    skip = {"runtimeproxy.koordinator.sh/skip-hookserver": "true"}
    container_id = create(env, interceptor, "sb-system", labels=skip, namespace="kube-system")
    assert container_id and env.store.container(container_id) is None


def test_hooked_requests_keep_unknown_fields(env: Env) -> None:
    env.script.answers["PreCreateContainerHook"] = batch_answer
    interceptor = env.interceptor()
    raw = create_request("sb-x").SerializeToString() + bytes([0xF8, 0x07, 0x01])
    interceptor.handlers()[RUNTIME + "CreateContainer"](raw, Context())  # type: ignore[arg-type]
    assert env.backend.received[-1][1].endswith(bytes([0xF8, 0x07, 0x01]))


def test_the_skip_label_bypasses_the_hooks(env: Env) -> None:
    # A kube-system pod: elsewhere the label is refused (tests/unit/runtimeproxy/test_skip_namespaces.py).
    env.script.answers["PreCreateContainerHook"] = batch_answer
    interceptor = env.interceptor()
    skip = {"runtimeproxy.koordinator.sh/skip-hookserver": "true"}
    pod_id = run_pod(env, interceptor, labels=skip, namespace="kube-system")
    request = create_request(pod_id, labels=skip, namespace="kube-system")
    env.call(interceptor, "CreateContainer", request)
    assert env.script.calls == []
    assert env.backend.received[-1][1] == request.SerializeToString()


@pytest.mark.parametrize("resources", [
    hook.LinuxContainerResources(cpu_quota=-5),
    hook.LinuxContainerResources(cpuset_cpus="0-x"),
    hook.LinuxContainerResources(cpuset_cpus="3-1"),
    hook.LinuxContainerResources(cpu_shares=1),
    hook.LinuxContainerResources(memory_limit_in_bytes=-1),
])
def test_invalid_answers_are_refused(env: Env, resources: Any) -> None:
    env.script.answers["PreCreateContainerHook"] = lambda r: hook.ContainerResourceHookResponse(
        container_resources=resources)
    request = create_request("sb-x")
    env.call(env.interceptor("Ignore"), "CreateContainer", request)
    assert env.backend.received[-1][1] == request.SerializeToString(), "Ignore: the original goes on"
    sent_before = len(env.backend.received)
    with pytest.raises(Aborted) as failed:
        env.call(env.interceptor("Fail"), "CreateContainer", request)
    assert failed.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid answer" in failed.value.details and "failure-policy Fail" in failed.value.details
    assert len(env.backend.received) == sent_before, "Fail: nothing reaches the runtime"


def test_an_unreachable_hook_server_follows_the_failure_policy(env: Env, tmp_path: Path) -> None:
    gone = str(tmp_path / "nobody.sock")
    request = create_request("sb-x")
    env.call(env.interceptor("Ignore", endpoint=gone), "CreateContainer", request)
    assert env.backend.received[-1][1] == request.SerializeToString()
    with pytest.raises(Aborted) as failed:
        env.call(env.interceptor("Fail", endpoint=gone), "CreateContainer", request)
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE
    assert "PreCreateContainerHook" in failed.value.details
    assert len(env.backend.received) == 1


def test_a_hook_error_status_follows_the_failure_policy(env: Env) -> None:
    env.script.answers["PreRunPodSandboxHook"] = grpc.StatusCode.INTERNAL
    with pytest.raises(Aborted) as failed:
        run_pod(env, env.interceptor("Fail"))
    assert failed.value.code is grpc.StatusCode.INTERNAL and "scripted" in failed.value.details
    assert env.backend.received == []
    assert run_pod(env, env.interceptor("Ignore"))


def test_post_stop_hooks_get_the_checkpointed_pod_and_container(env: Env) -> None:
    interceptor = env.interceptor()
    pod_id = run_pod(env, interceptor)
    container_id = create(env, interceptor, pod_id)
    env.call(interceptor, "StartContainer", cri.StartContainerRequest(container_id=container_id))
    env.call(interceptor, "StopContainer", cri.StopContainerRequest(container_id=container_id))
    env.call(interceptor, "StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod_id))
    calls = [(m, r) for m, r in env.script.calls if m != "PreRunPodSandboxHook" and m != "PreCreateContainerHook"]
    assert [m for m, _ in calls] == ["PreStartContainerHook", "PostStartContainerHook", "PostStopContainerHook",
                                     "PostStopPodSandboxHook"]
    assert all(r.container_mata.id == container_id and r.pod_meta.uid == "uid-1" for _, r in calls[:3])
    assert calls[3][1].labels["koordinator.sh/qosClass"] == "BE"
    env.call(interceptor, "RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod_id))
    assert env.store.pod(pod_id) is None and env.store.container(container_id) is None


def test_update_container_resources_is_hooked_and_checkpointed(env: Env) -> None:
    interceptor = env.interceptor()
    container_id = create(env, interceptor, run_pod(env, interceptor))
    env.script.answers["PreUpdateContainerResourcesHook"] = lambda r: hook.ContainerResourceHookResponse(
        container_resources=hook.LinuxContainerResources(cpu_quota=30000, cpu_period=100000, cpu_shares=256))
    env.call(interceptor, "UpdateContainerResources", cri.UpdateContainerResourcesRequest(
        container_id=container_id, linux=cri.LinuxContainerResources(cpu_quota=80000, cpu_period=100000)))
    assert env.script.calls[-1][1].container_resources.cpu_quota == 80000
    sent = env.backend.last(cri.UpdateContainerResourcesRequest)
    assert (sent.linux.cpu_quota, sent.linux.cpu_shares) == (30000, 256)
    stored = env.store.container(container_id)
    assert stored is not None and stored[1].container_resources.cpu_quota == 30000


def test_garbage_requests_are_forwarded_for_the_runtime_to_refuse(env: Env) -> None:
    interceptor = env.interceptor()
    interceptor.handlers()[RUNTIME + "CreateContainer"](b"\xff\xff\xff", Context())  # type: ignore[arg-type]
    assert env.backend.received == [(RUNTIME + "CreateContainer", b"\xff\xff\xff")]
    assert env.script.calls == []


def test_check_resources_accepts_what_kubelet_sends() -> None:
    assert check_resources(hook.LinuxContainerResources()) is None
    assert check_resources(hook.LinuxContainerResources(
        cpu_period=100000, cpu_quota=-1, cpu_shares=2, memory_limit_in_bytes=1 << 30, oom_score_adj=-997,
        cpuset_cpus="0-3,6", cpuset_mems="0")) is None


def test_a_restarted_hook_server_is_called_again_within_a_second(env: Env, tmp_path: Path) -> None:
    # gRPC's default reconnect backoff would keep failing calls for up to two minutes after an outage.
    socket = str(tmp_path / "late.sock")
    interceptor = env.interceptor("Ignore", endpoint=socket)
    env.script.answers["PreCreateContainerHook"] = batch_answer
    # A 10 s outage: gRPC's default backoff (1 s, x1.6) would not try again until ~16 s, 6 s after the return.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        env.call(interceptor, "CreateContainer", create_request("sb-x"))
        time.sleep(0.05)
    assert env.script.calls == []
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    hook_grpc.add_RuntimeHookServiceServicer_to_server(ScriptedServicer(env.script), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        back = time.monotonic()
        while not env.script.calls:
            assert time.monotonic() - back < 3.0, "the hook server was not called again within 3 s"
            env.call(interceptor, "CreateContainer", create_request("sb-x"))
            time.sleep(0.05)
        print(f"hook server back -> first hooked call: {(time.monotonic() - back) * 1000:.0f} ms")
    finally:
        server.stop(None)
