"""The proxy's pod/container checkpoint: copies, persistence, a garbage file, rebuild from a fake runtime."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hookapi
from runtimeproxy.cli import FieldsFormatter
from runtimeproxy.store import Deferred, RebuildReport, Store

POD_ID = "a" * 64
POD2_ID = "b" * 64
CTR_ID = "c" * 64


def pod_request(name: str = "web", cgroup_parent: str = "/kubepods/burstable/pod1") -> hookapi.PodSandboxHookRequest:
    return hookapi.PodSandboxHookRequest(
        pod_meta=hookapi.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="default", attempt=1),
        runtime_handler="runc",
        labels={"app": name},
        annotations={"koordinator.sh/qosClass": "LS"},
        cgroup_parent=cgroup_parent,
        resources=hookapi.LinuxContainerResources(cpu_shares=1024, memory_limit_in_bytes=1 << 30),
    )


def container_request(name: str = "app") -> hookapi.ContainerResourceHookRequest:
    return hookapi.ContainerResourceHookRequest(
        pod_meta=hookapi.PodSandboxMetadata(name="web", uid="uid-web", namespace="default"),
        container_mata=hookapi.ContainerMetadata(name=name, attempt=0, id=CTR_ID),
        container_annotations={"c": "1"},
        container_resources=hookapi.LinuxContainerResources(
            cpu_quota=50000, cpu_period=100000, cpuset_cpus="0-1", unified={"memory.high": "max"},
            hugepage_limits=[hookapi.HugepageLimit(page_size="2MB", limit=1 << 21)],
        ),
        pod_labels={"app": "web"},
        pod_cgroup_parent="/kubepods/burstable/pod1",
        container_envs={"K": "V"},
    )


# -- in memory ------------------------------------------------------------------------------------------


def test_returns_copies() -> None:
    store = Store(None)
    req = pod_request()
    store.put_pod(POD_ID, req)
    req.cgroup_parent = "/changed-after-put"
    got = store.pod(POD_ID)
    assert got is not None and got.cgroup_parent == "/kubepods/burstable/pod1"
    got.labels["x"] = "y"
    again = store.pod(POD_ID)
    assert again is not None and "x" not in again.labels
    assert store.pod("missing") is None
    assert store.container("missing") is None


def test_remove_pod_drops_its_containers() -> None:
    store = Store(None)
    store.put_pod(POD_ID, pod_request())
    store.put_pod(POD2_ID, pod_request("other"))
    store.put_container(CTR_ID, POD_ID, container_request())
    store.put_container("d" * 64, POD2_ID, container_request("side"))
    entry = store.container(CTR_ID)
    assert entry is not None and entry[0] == POD_ID and entry[1] == container_request()

    store.remove_pod(POD_ID)
    assert set(store.pods()) == {POD2_ID}
    assert set(store.containers()) == {"d" * 64}
    store.remove_container("d" * 64)
    assert store.containers() == {}
    store.remove_container("d" * 64)  # already gone: no error
    store.remove_pod(POD_ID)


# -- persistence ----------------------------------------------------------------------------------------


def test_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "state" / "store.json"
    store = Store(str(path))
    store.load()
    store.put_pod(POD_ID, pod_request())
    store.put_pod(POD2_ID, pod_request("other"))
    store.put_container(CTR_ID, POD_ID, container_request())
    store.remove_pod(POD2_ID)
    store.close()  # the last write happens at once, not after the writer's coalescing delay

    body = json.loads(path.read_text())  # readable JSON with proto field names
    assert body["version"] == 1
    assert body["pods"][POD_ID]["cgroup_parent"] == "/kubepods/burstable/pod1"
    assert body["containers"][CTR_ID]["pod_id"] == POD_ID
    assert body["containers"][CTR_ID]["request"]["container_envs"] == {"K": "V"}
    assert [p.name for p in path.parent.iterdir()] == ["store.json"]  # no temp file left behind

    reopened = Store(str(path))
    reopened.load()
    assert reopened.pods() == {POD_ID: pod_request()}
    assert reopened.containers() == {CTR_ID: (POD_ID, container_request())}


def test_a_deferred_container_is_built_when_first_needed_and_written_as_built(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = Store(str(path), persist_delay_seconds=3600)  # written by close() only
    built: list[str] = []

    def build(name: str) -> hookapi.ContainerResourceHookRequest:
        built.append(name)
        return container_request(name)

    store.put_container_deferred(CTR_ID, POD_ID, Deferred(lambda: build("kept")))
    store.put_container_deferred("d" * 64, POD_ID, Deferred(lambda: build("removed")))
    store.remove_container("d" * 64)
    assert built == [] and set(store.containers()) == {CTR_ID}
    assert built == ["kept"]
    assert store.container(CTR_ID) == (POD_ID, container_request("kept"))
    store.close()
    assert built == ["kept"], "built once, never for the removed one"

    reopened = Store(str(path))
    reopened.load()
    assert reopened.containers() == {CTR_ID: (POD_ID, container_request("kept"))}


def test_each_write_has_the_current_entries_only(tmp_path: Path) -> None:
    # Every write converts only changed entries (runtimeproxy.store._Forms): replaced and removed ones must not
    # come back from the kept forms.
    path = tmp_path / "store.json"
    store = Store(str(path), persist_delay_seconds=3600)
    store.put_pod(POD_ID, pod_request("first"))
    store.put_pod(POD2_ID, pod_request("other"))
    store.put_container(CTR_ID, POD_ID, container_request("first"))
    assert store.flush()
    store.put_pod(POD_ID, pod_request("second"))
    store.remove_pod(POD2_ID)
    store.put_container(CTR_ID, POD_ID, container_request("second"))
    assert store.flush()
    body = json.loads(path.read_text())
    assert set(body["pods"]) == {POD_ID} and body["pods"][POD_ID]["pod_meta"]["name"] == "second"
    assert body["containers"][CTR_ID]["request"]["container_mata"]["name"] == "second"
    store.close()


def test_a_burst_of_changes_is_written_once_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = Store(str(path), persist_delay_seconds=0.2)
    writes: list[int] = []
    original = store._write

    def counting(*args: object) -> None:
        writes.append(1)
        original(*args)  # type: ignore[arg-type]

    store._write = counting  # type: ignore[method-assign]
    for i in range(50):
        store.put_container(f"{i:064x}", POD_ID, container_request())
    deadline = time.monotonic() + 5
    while not path.exists():
        assert time.monotonic() < deadline, "the writer never wrote"
        time.sleep(0.01)
    store.close()
    assert 1 <= len(writes) <= 3, writes  # coalesced, not one write per change
    reopened = Store(str(path))
    reopened.load()
    assert len(reopened.containers()) == 50


def test_missing_checkpoint_is_empty(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store.json"))
    store.load()
    assert store.pods() == {} and store.containers() == {}
    assert not (tmp_path / "store.json").exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"version": 1, "pods": {"x": {"cgroup_par', "not valid JSON"),
        (b"\xff\xfe garbage", "not valid JSON"),
        (b"[]", "must hold a JSON object, got list"),
        (b'{"version": 7, "pods": {}, "containers": {}}', "version: expected 1, got 7"),
        (b'{"version": 1, "pods": [], "containers": {}}', "pods: must be an object, got list"),
        (b'{"version": 1, "pods": {"x": {"cgroup_parent": 5}}, "containers": {}}', "pods.x:"),
        (b'{"version": 1, "pods": {}, "containers": {"c": {"request": {}}}}', "containers.c: must be an object"),
    ],
)
def test_garbage_checkpoint_starts_empty_and_is_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    path = tmp_path / "store.json"
    good = Store(str(path))
    good.put_pod(POD_ID, pod_request())
    good.close()
    path.write_bytes(content)

    store = Store(str(path))
    with caplog.at_level(logging.ERROR, logger="runtimeproxy.store"):
        store.load()
    assert store.pods() == {} and store.containers() == {}
    assert (tmp_path / "store.json.bad").read_bytes() == content
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    message = FieldsFormatter("%(message)s").format(record)
    assert f"path={path}" in message and reason in message

    store.put_pod(POD2_ID, pod_request("other"))  # the next write replaces the garbage
    store.flush()
    reopened = Store(str(path))
    reopened.load()
    assert set(reopened.pods()) == {POD2_ID}


# -- rebuild ----------------------------------------------------------------------------------------------


def not_found() -> grpc.RpcError:
    class NotFound(grpc.RpcError):  # type: ignore[misc]  # grpc ships no types
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.NOT_FOUND

    return NotFound("not found")


@dataclass
class FakeRuntime:
    """A ``runtime.v1.RuntimeService`` stub answering like containerd 1.6 (verbose info as JSON)."""

    sandboxes: list[cri.PodSandbox] = field(default_factory=list)
    sandbox_info: dict[str, dict[str, str]] = field(default_factory=dict)
    containers: list[cri.Container] = field(default_factory=list)
    container_status: dict[str, cri.ContainerStatusResponse] = field(default_factory=dict)
    timeouts: list[float] = field(default_factory=list)

    def ListPodSandbox(self, request: cri.ListPodSandboxRequest, *, timeout: float) -> Any:  # noqa: N802
        self.timeouts.append(timeout)
        return cri.ListPodSandboxResponse(items=self.sandboxes)

    def PodSandboxStatus(self, request: cri.PodSandboxStatusRequest, *, timeout: float) -> Any:  # noqa: N802
        assert request.verbose
        if request.pod_sandbox_id not in self.sandbox_info:
            raise not_found()
        return cri.PodSandboxStatusResponse(info=self.sandbox_info[request.pod_sandbox_id])

    def ListContainers(self, request: cri.ListContainersRequest, *, timeout: float) -> Any:  # noqa: N802
        return cri.ListContainersResponse(containers=self.containers)

    def ContainerStatus(self, request: cri.ContainerStatusRequest, *, timeout: float) -> Any:  # noqa: N802
        assert request.verbose
        if request.container_id not in self.container_status:
            raise not_found()
        return self.container_status[request.container_id]


def sandbox(pod_id: str, name: str) -> cri.PodSandbox:
    return cri.PodSandbox(
        id=pod_id,
        metadata=cri.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="ns", attempt=2),
        labels={"app": name},
        annotations={"a": "1"},
    )


def containerd_sandbox_info(cgroup_parent: str) -> dict[str, str]:
    """What containerd 1.6 returns for PodSandboxStatus(verbose=True) (trimmed)."""
    info = {
        "pid": 4242,
        "runtimeHandler": "runc",
        "config": {
            "metadata": {"name": "web", "uid": "uid-web", "namespace": "ns", "attempt": 2},
            "labels": {"app": "web"},
            "annotations": {"a": "1"},
            "linux": {
                "cgroup_parent": cgroup_parent,
                "security_context": {"namespace_options": {"network": 2, "pid": 1}},
                "resources": {"cpu_shares": 2048},
                "windows_only_field": True,
            },
        },
        "runtimeSpec": {"ociVersion": "1.0.2"},
    }
    return {"info": json.dumps(info)}


def containerd_container_status(pod_id: str) -> cri.ContainerStatusResponse:
    info = {
        "sandboxID": pod_id,
        "config": {
            "metadata": {"name": "app"},
            "envs": [{"key": "K", "value": "V"}, {"key": "PATH", "value": "/bin"}],
            "annotations": {"c": "2"},
            "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 50000, "cpu_shares": 512,
                                    "memory_limit_in_bytes": 67108864, "cpuset_cpus": "0"}},
        },
    }
    return cri.ContainerStatusResponse(
        status=cri.ContainerStatus(
            id=CTR_ID,
            resources=cri.ContainerResources(linux=cri.LinuxContainerResources(cpu_shares=999)),
        ),
        info={"info": json.dumps(info)},
    )


def test_rebuild_adds_from_backend_verbose_info() -> None:
    runtime = FakeRuntime(
        sandboxes=[sandbox(POD_ID, "web")],
        sandbox_info={POD_ID: containerd_sandbox_info("/kubepods/pod-web")},
        containers=[cri.Container(id=CTR_ID, pod_sandbox_id=POD_ID, metadata=cri.ContainerMetadata(name="app"),
                                  annotations={"c": "2"})],
        container_status={CTR_ID: containerd_container_status(POD_ID)},
    )
    store = Store(None)
    report = store.rebuild(runtime, timeout_seconds=3.0)
    assert report == RebuildReport(kept=(), added=tuple(sorted([POD_ID, CTR_ID])), dropped=())
    assert runtime.timeouts == [3.0]

    assert store.pod(POD_ID) == hookapi.PodSandboxHookRequest(
        pod_meta=hookapi.PodSandboxMetadata(name="web", uid="uid-web", namespace="ns", attempt=2),
        runtime_handler="runc",
        labels={"app": "web"},
        annotations={"a": "1"},
        cgroup_parent="/kubepods/pod-web",
        resources=hookapi.LinuxContainerResources(cpu_shares=2048),
    )
    entry = store.container(CTR_ID)
    assert entry is not None
    pod_id, req = entry
    assert pod_id == POD_ID
    assert req == hookapi.ContainerResourceHookRequest(
        pod_meta=hookapi.PodSandboxMetadata(name="web", uid="uid-web", namespace="ns", attempt=2),
        container_mata=hookapi.ContainerMetadata(name="app", id=CTR_ID),
        container_annotations={"c": "2"},
        # The creation config's resources win over the status view (cpu_shares 999).
        container_resources=hookapi.LinuxContainerResources(
            cpu_period=100000, cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=67108864, cpuset_cpus="0"
        ),
        pod_resources=hookapi.LinuxContainerResources(cpu_shares=2048),
        pod_annotations={"a": "1"},
        pod_labels={"app": "web"},
        pod_cgroup_parent="/kubepods/pod-web",
        container_envs={"K": "V", "PATH": "/bin"},
    )


def test_rebuild_without_verbose_info_keeps_what_the_list_gives() -> None:
    runtime = FakeRuntime(
        sandboxes=[sandbox(POD_ID, "web"), sandbox(POD2_ID, "other")],
        sandbox_info={POD2_ID: {"info": "{not json"}},  # POD_ID: the status call fails
        containers=[cri.Container(id=CTR_ID, pod_sandbox_id=POD_ID, metadata=cri.ContainerMetadata(name="app"))],
        container_status={CTR_ID: cri.ContainerStatusResponse(status=cri.ContainerStatus(
            id=CTR_ID, resources=cri.ContainerResources(linux=cri.LinuxContainerResources(cpu_shares=999))))},
    )
    store = Store(None)
    report = store.rebuild(runtime)
    assert set(report.added) == {POD_ID, POD2_ID, CTR_ID}
    pod = store.pod(POD_ID)
    assert pod is not None
    assert (pod.pod_meta.name, dict(pod.labels), dict(pod.annotations), pod.cgroup_parent) == (
        "web", {"app": "web"}, {"a": "1"}, ""
    )
    other = store.pod(POD2_ID)
    assert other is not None and other.pod_meta.uid == "uid-other"
    entry = store.container(CTR_ID)
    assert entry is not None
    assert entry[1].container_mata.name == "app"
    assert entry[1].container_resources == hookapi.LinuxContainerResources(cpu_shares=999)
    assert dict(entry[1].container_envs) == {}


def test_rebuild_keeps_known_and_drops_gone(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = Store(str(path))
    stored = pod_request("web", cgroup_parent="/hooked/by/koordlet")
    store.put_pod(POD_ID, stored)
    store.put_pod(POD2_ID, pod_request("gone"))
    store.put_container(CTR_ID, POD_ID, container_request())
    store.put_container("e" * 64, POD_ID, container_request("exited-and-removed"))
    store.put_container("f" * 64, POD2_ID, container_request("of-gone-pod"))

    runtime = FakeRuntime(
        sandboxes=[sandbox(POD_ID, "web")],
        containers=[cri.Container(id=CTR_ID, pod_sandbox_id=POD_ID, metadata=cri.ContainerMetadata(name="app"))],
    )
    report = store.rebuild(runtime)
    assert report == RebuildReport(
        kept=tuple(sorted([POD_ID, CTR_ID])), added=(), dropped=tuple(sorted([POD2_ID, "e" * 64, "f" * 64]))
    )
    assert store.pod(POD_ID) == stored  # what the hooks answered is kept, not overwritten by the backend

    store.flush()
    reopened = Store(str(path))
    reopened.load()
    assert set(reopened.pods()) == {POD_ID}
    assert set(reopened.containers()) == {CTR_ID}


def test_rebuild_keeps_what_the_proxy_stored_while_it_listed() -> None:
    # The proxy serves during the rebuild: a pod run after the backend's list was read is not "gone".
    store = Store(None)

    class Racing(FakeRuntime):
        def ListContainers(self, request: cri.ListContainersRequest, *, timeout: float) -> Any:  # noqa: N802
            store.put_pod(POD2_ID, pod_request("just-run"))
            store.put_container("e" * 64, POD2_ID, container_request("just-created"))
            return super().ListContainers(request, timeout=timeout)

    report = store.rebuild(Racing())
    assert report.dropped == ()
    assert set(store.pods()) == {POD2_ID} and set(store.containers()) == {"e" * 64}


def test_rebuild_propagates_list_failure() -> None:
    class Down(FakeRuntime):
        def ListPodSandbox(self, request: cri.ListPodSandboxRequest, *, timeout: float) -> Any:  # noqa: N802
            raise not_found()

    store = Store(None)
    store.put_pod(POD_ID, pod_request())
    with pytest.raises(grpc.RpcError):
        store.rebuild(Down())
    assert set(store.pods()) == {POD_ID}
