"""koord-runtime-proxy between a CRI client and real containerd 1.6, calling koordlet's real RuntimeHookService:
BE containers land with the hooked values in their cgroup files (v1 on the host, v2 in the guest of
``python -m tests.vm``), and a BE pod's cgroup, made by "kubelet" before RunPodSandbox, gets the sums of its
containers' batch resources at PreRunPodSandbox; a dead hook server is handled per failure
policy; a proxy restarted while pods come and go loses no pod and its Post-stop hooks still get pod info.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
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
from koordlet.config import gates
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import FailurePolicy, Hook, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hooks import build_hooks
from koordlet.runtimehooks.hookserver.server import HookServer
from koordlet.system.hostpaths import HostPaths
from koordlet.system.layout import detect_layout
from runtimeproxy.server import Proxy, ProxyOptions
from tests.fixtures.cleanup import Cleanup, kill_process, remove_tree
from tests.fixtures.containerd import (
    Containerd,
    CriClient,
    container_cgroup_files,
    read_container_cgroup,
    read_container_cgroup_files,
    unique_pod_uid,
)
from tests.fixtures.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
BE_SPEC = json.dumps({"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                                "limits": {"kubernetes.io/batch-cpu": "1000",
                                                           "kubernetes.io/batch-memory": "256Mi"}}}})
BE_LABELS = {"koordinator.sh/qosClass": "BE"}
BE_ANNOTATIONS = {"node.koordinator.sh/extended-resource-spec": BE_SPEC}
SLEEP = ["/bin/sleep", "3600"]
ORIGINAL = cri.LinuxContainerResources(cpu_shares=2, cpu_period=100_000)




@dataclass
class Seen:
    """What koordlet's hooks saw at the Post-stop stages."""

    pods: list[tuple[str, str]] = field(default_factory=list)  # (uid, qos label)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hook(self) -> Hook:
        def fn(ctx: HookContext) -> None:
            with self.lock:
                self.pods.append((ctx.request.pod.uid, ctx.request.pod.labels.get("koordinator.sh/qosClass", "")))
        return Hook("zz-seen", "test: records Post-stop pod info", frozenset({Stage.POST_STOP_POD_SANDBOX}), fn)


@dataclass
class Rig:
    tmp: Path
    containerd: Containerd
    seen: Seen
    hook_socket: Path
    registrations: Path
    server: HookServer | None = None
    processes: list[ProxyProcess] = field(default_factory=list)
    """Proxy processes started; killed at teardown whatever the test did."""

    def start_hooks(self, policy: str = "Ignore") -> None:
        runner = HookRunner([*build_hooks(HookDeps(gates=gates.resolve({}))), self.seen.hook()],
                            FailurePolicy.IGNORE)
        # The daemon's writer on the real cgroups: the hook server writes pod cgroups through it.
        executor = ResourceExecutor(detect_layout(HostPaths()), time.monotonic, None)
        self.server = HookServer(runner, str(self.hook_socket), str(self.registrations), policy,
                                 Applier(executor.apply))
        self.server.start()

    def kill_hooks(self, keep_registration: bool = True) -> None:
        """The hook server dies; its registration file stays, as after a koordlet crash."""
        assert self.server is not None
        registration = (self.registrations / "koordlet.json").read_text()
        self.server.stop()
        self.server = None
        if keep_registration:
            (self.registrations / "koordlet.json").write_text(registration)

    def proxy_process(self) -> ProxyProcess:
        process = ProxyProcess(self.options())
        self.processes.append(process)
        return process

    def options(self) -> ProxyOptions:
        return ProxyOptions(endpoint=str(self.tmp / "proxy.sock"), runtime_endpoint=str(self.containerd.socket),
                            hook_config_dir=str(self.registrations),
                            checkpoint_path=str(self.tmp / "checkpoint.json"), hook_timeout_seconds=2.0)


@pytest.fixture
def rig(containerd16: Containerd) -> Iterator[Rig]:
    tmp = Path(tempfile.mkdtemp(prefix="kprx-"))
    rig = Rig(tmp, containerd16, Seen(), tmp / "koordlet.sock", tmp / "hookserver.d")
    try:
        yield rig
    finally:
        cleanup = Cleanup("runtime proxy rig")
        for process in rig.processes:
            if process.proc is not None:
                cleanup.attempt(f"koord-runtime-proxy pid {process.proc.pid}", functools.partial(kill_process,
                                                                                                process.proc))
        if rig.server is not None:
            cleanup.attempt("stop the hook server", rig.server.stop)
        cleanup.attempt(f"remove {tmp}", functools.partial(remove_tree, tmp))
        cleanup.close()


@pytest.fixture
def proxy(rig: Rig) -> Iterator[Proxy]:
    instance = Proxy(rig.options())
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def through(rig: Rig) -> CriClient:
    """A CRI client on the proxy socket (the harness removes every pod of its containerd at the end)."""
    return CriClient(rig.tmp / "proxy.sock")


def be_pod(client: CriClient, containerd: Containerd, name: str, labels: dict[str, str] | None = None
           ) -> tuple[str, str]:
    uid = unique_pod_uid()
    parent = containerd.pod_parent("besteffort", uid)
    containerd.track_cgroup_parent(parent)
    return client.run_pod(name, uid, "default", parent, labels=labels if labels is not None else BE_LABELS,
                          annotations=BE_ANNOTATIONS), parent


def test_be_containers_land_with_the_hooked_values(rig: Rig, proxy: Proxy, cgroup_version: int) -> None:
    rig.start_hooks()
    proxy.registry.reload()  # the watcher would see the registration within its poll interval
    client = through(rig)
    pod_id, parent = be_pod(client, rig.containerd, "be")
    container_id = client.create_container(pod_id, None, "main", SLEEP, resources=ORIGINAL)
    client.start(container_id)
    # The hooks replaced the CRI's 2 shares and no quota: 500m batch-cpu request, 1000m limit, 256Mi memory.
    expected = container_cgroup_files(cgroup_version, shares=512, quota_us=100_000, memory_bytes=256 << 20)
    assert read_container_cgroup_files(parent, container_id, expected) == expected
    client.stop(container_id)
    client.remove(container_id)
    client.stop_pod(pod_id)
    assert rig.seen.pods[-1][1] == "BE", "PostStopPodSandbox got the pod's labels"
    client.remove_pod(pod_id)
    assert proxy.store.pod(pod_id) is None


TWO_CONTAINERS = json.dumps({"containers": {
    "main": {"requests": {"kubernetes.io/batch-cpu": "500"},
             "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "256Mi"}},
    "side": {"requests": {"kubernetes.io/batch-cpu": "300"},
             "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "128Mi"}}}})


def test_be_pod_cgroup_gets_the_sums_at_pre_run_pod_sandbox(rig: Rig, proxy: Proxy, cgroup_version: int) -> None:
    rig.start_hooks()
    proxy.registry.reload()
    client = through(rig)
    uid = unique_pod_uid()
    parent = rig.containerd.pod_parent("besteffort", uid)
    rig.containerd.make_pod_cgroup(parent, cgroup_version)
    pod_id = client.run_pod("be-sums", uid, "default", parent, labels=BE_LABELS,
                            annotations={"node.koordinator.sh/extended-resource-spec": TWO_CONTAINERS})
    # Written before the proxy forwarded RunPodSandbox: 500m + 300m requested -> 800 x 1024 / 1000 = 819
    # shares; 1000m + 500m limits -> 150 ms per 100 ms; 256Mi + 128Mi.
    pod_files = container_cgroup_files(cgroup_version, shares=819, quota_us=150_000, memory_bytes=384 << 20)
    assert read_container_cgroup_files(parent, "", pod_files) == pod_files
    # Both containers start under it with their own values, inside the pod's bounds.
    for name, shares, quota_us, memory in (("main", 512, 100_000, 256 << 20), ("side", 307, 50_000, 128 << 20)):
        container_id = client.create_container(pod_id, None, name, SLEEP, resources=ORIGINAL)
        client.start(container_id)
        expected = container_cgroup_files(cgroup_version, shares=shares, quota_us=quota_us, memory_bytes=memory)
        assert read_container_cgroup_files(parent, container_id, expected) == expected
    assert read_container_cgroup_files(parent, "", pod_files) == pod_files
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)


def test_dead_hook_server_under_ignore_starts_every_pod_as_asked(rig: Rig, proxy: Proxy) -> None:
    rig.start_hooks("Ignore")
    rig.kill_hooks()
    proxy.registry.reload()
    client = through(rig)
    for i in range(50):
        pod_id, parent = be_pod(client, rig.containerd, f"ignored-{i}")
        container_id = client.create_container(pod_id, None, "main", SLEEP, resources=ORIGINAL)
        client.start(container_id)
        assert read_container_cgroup(parent, container_id, "cpu.shares") == "2"
        assert read_container_cgroup(parent, container_id, "cpu.cfs_quota_us") == "-1"
        client.stop_pod(pod_id)
        client.remove_pod(pod_id)


def test_dead_hook_server_under_fail_fails_cleanly(rig: Rig, proxy: Proxy) -> None:
    rig.start_hooks("Fail")
    proxy.registry.reload()
    client = through(rig)
    pod_id, _ = be_pod(client, rig.containerd, "made-while-up")
    rig.kill_hooks()
    with pytest.raises(grpc.RpcError) as failed:
        client.create_container(pod_id, None, "main", SLEEP, resources=ORIGINAL)
    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "PreCreateContainerHook" in failed.value.details() and "failure-policy Fail" in failed.value.details()
    with pytest.raises(grpc.RpcError) as refused:
        be_pod(client, rig.containerd, "made-while-down")
    assert "PreRunPodSandboxHook" in refused.value.details()
    direct = rig.containerd.client()
    assert [c.id for c in direct.list_containers() if c.pod_sandbox_id == pod_id] == [], "no half-created container"
    assert [p.metadata.name for p in direct.list_pods()] == ["made-while-up"], "no half-created sandbox"


# --- the proxy process restarted during pod churn -------------------------------------------------------------


class ProxyProcess:
    def __init__(self, options: ProxyOptions) -> None:
        self.options = options
        self.log = Path(options.endpoint).with_name("proxy.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([
                sys.executable, "-m", "runtimeproxy.cli",
                f"--koord-runtimeproxy-endpoint={self.options.endpoint}",
                f"--remote-runtime-service-endpoint={self.options.runtime_endpoint}",
                f"--remote-image-service-endpoint={self.options.runtime_endpoint}",
                f"--runtime-hook-config-dir={self.options.hook_config_dir}",
                f"--checkpoint-path={self.options.checkpoint_path}", "--runtime-hook-timeout=2s",
            ], stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        assert self.proc.wait(30) in (0, -signal.SIGKILL)
        self.proc = None


def retry(call: Callable[..., Any], *args: Any, timeout: float = 30.0, call_timeout: float | None = None,
          **kwargs: Any) -> Any:
    """Kubelet retries a CRI call that failed because the proxy was restarting: UNAVAILABLE while it is down,
    CANCELLED for a call in flight when a SIGTERM'd proxy's gRPC server stopped."""
    deadline = time.monotonic() + timeout
    if call_timeout is not None:  # the gRPC deadline of each attempt (``timeout`` is retry's own)
        kwargs["timeout"] = call_timeout
    while True:
        try:
            return call(*args, **kwargs)
        except grpc.RpcError as exc:
            restarting = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
            if not restarting or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


RESERVED = re.compile(r'is reserved for "([0-9a-f]{64})"')


def create_or_adopt(call: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """A create whose first attempt reached containerd before the proxy died: the retry finds the name
    taken by what that attempt made, which is then the one (kubelet would remove it and try again)."""
    try:
        return str(retry(call, *args, **kwargs))
    except grpc.RpcError as exc:
        found = RESERVED.search(exc.details() or "")
        if found is None:
            raise
        return found.group(1)


def run_ready_pod(client: CriClient, *args: Any) -> str:
    """RunPodSandbox, adopting the sandbox a first attempt made before the proxy died when it is ready; a
    sandbox whose creation was cut off (containerd cancels it: not ready, no process) is removed and made
    again, as kubelet does."""
    for _ in range(5):
        pod_id = create_or_adopt(client.run_pod, *args)
        status = retry(client.runtime.PodSandboxStatus, cri.PodSandboxStatusRequest(pod_sandbox_id=pod_id),
                       timeout=30.0, call_timeout=client.timeout)
        if status.status.state == cri.SANDBOX_READY:
            return pod_id
        retry(client.stop_pod, pod_id)
        retry(client.remove_pod, pod_id)
    raise AssertionError(f"no ready sandbox for {args!r} after 5 attempts")


def settled(client: CriClient, container_id: str) -> int | None:
    state = retry(client.container_status, container_id).state
    return None if state == cri.CONTAINER_CREATED else int(state)


def start_container(client: CriClient, pod_id: str, config: Any) -> str:
    """Create and start, recovering as kubelet does: a start cut off by a killed proxy is cancelled in
    containerd too (the container exits), so it is removed and made again."""
    for _ in range(5):
        container_id = create_or_adopt(client.create_container, pod_id, config, "main", SLEEP, resources=ORIGINAL)
        try:
            retry(client.start, container_id)
            return container_id
        except grpc.RpcError as exc:
            details = exc.details() or ""
            if "already in starting state" in details:  # the cut-off start is still finishing in containerd
                state = wait_until("the start to settle", functools.partial(settled, client, container_id))
                if state == cri.CONTAINER_RUNNING:
                    return container_id
            elif "CONTAINER_EXITED" not in details:
                raise
            retry(client.remove, container_id)
    raise AssertionError(f"pod {pod_id}: the container never started")


def made_more(made: list[str], before: int, failures: list[BaseException]) -> bool:
    if failures:
        raise AssertionError(f"the churn failed: {failures[0]!r}") from failures[0]
    return len(made) > before


def test_proxy_restarts_during_pod_churn_lose_no_pod(rig: Rig) -> None:
    rig.start_hooks()
    process = rig.proxy_process()
    process.start()
    client = through(rig)
    retry(client.version)
    stop = threading.Event()
    made: list[str] = []  # pod uids created through the proxy
    stopped: list[str] = []
    failures: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                uid = unique_pod_uid()
                parent = rig.containerd.pod_parent("besteffort", uid)
                rig.containerd.track_cgroup_parent(parent)
                pod_id = run_ready_pod(client, "churn", uid, "default", parent, BE_LABELS, BE_ANNOTATIONS)
                made.append(uid)
                config = client.pod_sandbox_config("churn", uid, "default", parent, BE_LABELS, BE_ANNOTATIONS)
                start_container(client, pod_id, config)
                time.sleep(0.2)  # let a restart fall between create and stop now and then
                retry(client.stop_pod, pod_id)
                stopped.append(uid)
                retry(client.remove_pod, pod_id)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for restart in range(6):
            wait_until("pods to be made", functools.partial(made_more, made, len(made), failures), 30)
            process.stop(signal.SIGKILL if restart % 2 else signal.SIGTERM)
            process.start()
    finally:
        stop.set()
        worker.join(60)
        if process.proc is not None:
            process.stop()
    assert not failures, failures
    assert len(made) >= 6
    direct = rig.containerd.client()
    alive = {p.metadata.uid for p in direct.list_pods()}
    assert set(made) - set(stopped) >= alive - set(stopped), "every pod made is accounted for"
    lost = [uid for uid in made if uid not in stopped and uid not in alive]
    assert lost == [], f"pods created but neither removed nor present: {lost}"
    with rig.seen.lock:
        seen = dict(rig.seen.pods)
    assert set(stopped) <= set(seen), "every stop reached PostStopPodSandbox"
    assert {seen[uid] for uid in stopped} == {"BE"}, "with the pod's labels, also after a restart"


class InvalidAnswers(hook_grpc.RuntimeHookServiceServicer):
    """A broken hook server: negative quota and a malformed cpuset for every container."""

    def PreCreateContainerHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        return hook.ContainerResourceHookResponse(
            container_resources=hook.LinuxContainerResources(cpu_quota=-5, cpuset_cpus="1-x", cpu_shares=4096))


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_invalid_hook_answers_never_reach_containerd(rig: Rig, proxy: Proxy, policy: str) -> None:
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    hook_grpc.add_RuntimeHookServiceServicer_to_server(InvalidAnswers(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix:{rig.hook_socket}")
    server.start()
    try:
        rig.registrations.mkdir()
        (rig.registrations / "broken.json").write_text(json.dumps({
            "remote-endpoint": str(rig.hook_socket), "failure-policy": policy,
            "runtime-hooks": ["PreCreateContainer"]}))
        proxy.registry.reload()
        client = through(rig)
        pod_id, parent = be_pod(client, rig.containerd, "broken-hooks")
        if policy == "Fail":
            with pytest.raises(grpc.RpcError) as failed:
                client.create_container(pod_id, None, "main", SLEEP, resources=ORIGINAL)
            assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "cpu_quota -5" in failed.value.details() and "'1-x' is not a CPU list" in failed.value.details()
            assert [c for c in rig.containerd.client().list_containers() if c.pod_sandbox_id == pod_id] == []
            return
        container_id = client.create_container(pod_id, None, "main", SLEEP, resources=ORIGINAL)
        client.start(container_id)
        assert read_container_cgroup(parent, container_id, "cpu.shares") == "2", "the original request went on"
        assert read_container_cgroup(parent, container_id, "cpu.cfs_quota_us") == "-1"
    finally:
        server.stop(None)
