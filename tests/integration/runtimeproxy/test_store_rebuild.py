"""Store.rebuild against a real containerd 1.6: what a restarted proxy recovers from the backend alone."""

from __future__ import annotations

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hookapi
from runtimeproxy.store import Store
from tests.fixtures.containerd import Containerd, unique_pod_uid


def test_rebuild_recovers_pod_and_container_then_drops_them(containerd16: Containerd) -> None:
    client = containerd16.client()
    uid = unique_pod_uid()
    parent = containerd16.pod_parent("burstable", uid)
    pod_id = client.run_pod(
        "rebuild", uid, "koordlet-test", parent,
        labels={"app": "rebuild", "io.kubernetes.pod.uid": uid},
        annotations={"koordinator.sh/qosClass": "LS"},
    )
    resources = cri.LinuxContainerResources(
        cpu_period=100000, cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=64 << 20, cpuset_cpus="0"
    )
    container_id = client.create_container(
        pod_id, None, "sleeper", ["/bin/sleep", "3600"],
        envs={"KOORD_TEST": "1", "OTHER": "x"}, annotations={"koordlet.test/c": "2"}, resources=resources,
    )
    client.start(container_id)

    store = Store(None)
    report = store.rebuild(client.runtime)
    assert report.added == tuple(sorted([pod_id, container_id]))
    assert report.kept == () and report.dropped == ()

    pod = store.pod(pod_id)
    assert pod is not None
    assert pod.pod_meta == hookapi.PodSandboxMetadata(name="rebuild", uid=uid, namespace="koordlet-test")
    assert pod.cgroup_parent == parent
    assert dict(pod.labels) == {"app": "rebuild", "io.kubernetes.pod.uid": uid}
    assert dict(pod.annotations) == {"koordinator.sh/qosClass": "LS"}

    entry = store.container(container_id)
    assert entry is not None
    owner, container = entry
    assert owner == pod_id
    assert container.container_mata == hookapi.ContainerMetadata(name="sleeper", id=container_id)
    assert dict(container.container_envs) == {"KOORD_TEST": "1", "OTHER": "x"}
    assert container.container_resources == hookapi.LinuxContainerResources(
        cpu_period=100000, cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=64 << 20, cpuset_cpus="0"
    )
    assert container.container_annotations["koordlet.test/c"] == "2"
    assert container.pod_cgroup_parent == parent
    assert dict(container.pod_labels) == dict(pod.labels)
    assert container.pod_meta == pod.pod_meta

    again = store.rebuild(client.runtime)
    assert again.kept == tuple(sorted([pod_id, container_id])) and again.added == () and again.dropped == ()

    client.stop(container_id)
    client.remove(container_id)
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)
    gone = store.rebuild(client.runtime)
    assert gone.dropped == tuple(sorted([pod_id, container_id]))
    assert store.pods() == {} and store.containers() == {}
