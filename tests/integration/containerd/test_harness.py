"""The containerd harness against real containerd: 1.6 (system, CRI backend) and 1.7.24 with NRI enabled.

A host-network pod with a busybox ``sleep`` container runs in a private containerd; the CRI resources
reach the real cgroup v1 files; everything (pods, shims, mounts, the pod cgroups) is gone afterwards.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from tests.fixtures.containerd import (
    CGROUP_ROOT,
    Containerd,
    CriClient,
    cgroup_dir,
    read_container_cgroup,
    unique_pod_uid,
)


def _pod_cgroup_dirs(cgroup_parent: str) -> list[Path]:
    return [p / cgroup_parent.strip("/") for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]


def test_containerd16_runs_pod_and_resources_reach_cgroup(containerd16: Containerd) -> None:
    client = containerd16.client()
    version = client.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_version.startswith("1.6")
    conditions = {c.type: c.status for c in client.status().status.conditions}
    assert conditions["RuntimeReady"] is True

    uid = unique_pod_uid()
    parent = containerd16.pod_parent("besteffort", uid)
    pod_id = client.run_pod(
        "harness", uid, "default", parent, labels={"app": "harness"}, annotations={"koordlet.test/a": "1"}
    )
    resources = cri.LinuxContainerResources(cpu_shares=512, cpu_quota=50000, cpu_period=100000)
    container_id = client.create_container(
        pod_id,
        None,
        "sleeper",
        ["/bin/sleep", "3600"],
        envs={"K": "V"},
        annotations={"koordlet.test/c": "2"},
        labels={"c": "1"},
        resources=resources,
    )
    client.start(container_id)

    status = client.container_status(container_id)
    assert status.state == cri.CONTAINER_RUNNING
    assert status.annotations["koordlet.test/c"] == "2"
    assert read_container_cgroup(parent, container_id, "cpu.shares") == "512"
    assert read_container_cgroup(parent, container_id, "cpu.cfs_quota_us") == "50000"
    assert read_container_cgroup(parent, container_id, "cpu.cfs_period_us") == "100000"
    tasks = (cgroup_dir(parent, container_id) / "cgroup.procs").read_text().split()
    assert tasks, "the container's process is in its cgroup"

    client.update_resources(
        container_id, cri.LinuxContainerResources(cpu_shares=256, cpu_quota=20000, cpu_period=100000)
    )
    assert read_container_cgroup(parent, container_id, "cpu.shares") == "256"
    assert read_container_cgroup(parent, container_id, "cpu.cfs_quota_us") == "20000"

    client.stop(container_id)
    client.remove(container_id)
    assert not cgroup_dir(parent, container_id).exists(), "runc removes the container's leaf cgroup"
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)
    assert client.list_pods() == []

    containerd16.close()
    assert not any(d.exists() for d in _pod_cgroup_dirs(parent)), "pod cgroups removed on cleanup"
    assert not any(d.exists() for d in _pod_cgroup_dirs(containerd16.cgroup_prefix)), "and the prefix"
    assert not containerd16.tmp.exists()


def test_containerd16_cleanup_removes_running_pods(requires_containerd: None) -> None:
    uid = unique_pod_uid()
    with Containerd() as instance:
        parent = instance.pod_parent("besteffort", uid)
        client = instance.client()
        pod_id = client.run_pod("left-running", uid, "default", parent)
        container_id = client.create_container(pod_id, None, "sleeper", ["/bin/sleep", "3600"])
        client.start(container_id)
        assert cgroup_dir(parent, container_id).is_dir()
        pid = instance.pid
    assert pid is not None
    assert not Path(f"/proc/{pid}").exists(), "containerd stopped by PID"
    assert instance._own_shim_pids() == [], "no shim of this instance survives"
    assert not any(d.exists() for d in _pod_cgroup_dirs(parent))
    assert not any(d.exists() for d in _pod_cgroup_dirs(instance.cgroup_prefix))
    assert not instance.tmp.exists()


def test_containerd17_with_nri_starts_and_runs_pod(containerd17: Containerd) -> None:
    assert containerd17.nri_socket.exists()
    assert stat.S_ISSOCK(os.stat(containerd17.nri_socket).st_mode)

    client = containerd17.client()
    assert client.version().runtime_version.startswith("1.7")
    uid = unique_pod_uid()
    parent = containerd17.pod_parent("besteffort", uid)
    pod_id = client.run_pod("nri-harness", uid, "default", parent)
    container_id = client.create_container(
        pod_id, None, "sleeper", ["/bin/sleep", "3600"], resources=cri.LinuxContainerResources(cpu_shares=300)
    )
    client.start(container_id)
    assert client.container_status(container_id).state == cri.CONTAINER_RUNNING
    assert containerd17.binary_dir is not None
    shims = containerd17.shim_executables()
    assert shims and all(exe.parent == containerd17.binary_dir for exe in shims), shims
    # No NRI plugin is connected: the container is created as the CRI asked.
    assert read_container_cgroup(parent, container_id, "cpu.shares") == "300"


def test_cri_client_works_on_a_plain_socket(containerd16: Containerd) -> None:
    # The untracked client is what a proxy test points at a socket it did not start.
    client = CriClient(containerd16.socket)
    try:
        images = client.images.ListImages(cri.ListImagesRequest(), timeout=10)
        tags = {tag for image in images.images for tag in image.repo_tags}
        assert "koordlet.test/busybox:1" in tags
    finally:
        client.close()
