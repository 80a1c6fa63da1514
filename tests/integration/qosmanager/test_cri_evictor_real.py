"""The default evictor - CRI ``StopContainer`` (koordlet/qosmanager/cri.py) - against real containerd 1.6 and 1.7.

A BE pod of busybox ``sleep`` containers runs in a private containerd (its own socket and cgroup prefix); the
evictor is built as the agent builds it (``build_backend("cri", ...)`` behind ``Evictions``) on that runtime's
real CRI socket.  It stops every container of the pod: CRI then reports each one exited, killed by the
SIGKILL that timeout 0 means, and its process is gone.  Against the same runtime, errors are clear and break
nothing: a pod whose containers the runtime never had is not counted as evicted (for an unknown id containerd
1.6 answers StopContainer with NOT_FOUND and 1.7 with success; the backend's ContainerStatus lookup tells
both), and with containerd stopped the eviction fails naming the socket, while the pod's processes - the shims
outlive their daemon - run on.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence

import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.qosmanager.evictor import Evictions, EvictionUnreachable, build_backend
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.system.hostpaths import HostPaths
from koordlet.system.layout import detect_layout
from tests.fixtures.containerd import Containerd, CriClient, unique_pod_uid
from tests.unit.qosmanager.fakes import make_pod

CRI_TIMEOUT_SECONDS = 5.0
REASON = "EvictPodByNodeMemoryUsage"
SLEEP = ["/bin/sleep", "3600"]
KILLED = 128 + signal.SIGKILL
"""A container's exit code after SIGKILL, which ``StopContainer`` with timeout 0 sends at once."""


@pytest.fixture(params=["containerd16", "containerd17"])
def runtime(request: pytest.FixtureRequest) -> Containerd:
    """The runtime under test: the system containerd 1.6, then containerd 1.7.24."""
    instance: Containerd = request.getfixturevalue(request.param)
    return instance


def evictions_on(runtime: Containerd) -> Evictions:
    """The QoS manager's eviction front with the default backend, as ``koordlet run`` builds it."""
    backend = build_backend("cri", detect_layout(HostPaths()), f"unix://{runtime.socket}", CRI_TIMEOUT_SECONDS)
    assert backend.name == "cri"
    return Evictions(backend, time.time)


def running_be_pod(runtime: Containerd, client: CriClient, name: str, containers: Sequence[str]) -> PodMeta:
    """A BE pod with one started ``sleep`` per name, as the states informer describes it."""
    uid = unique_pod_uid()
    parent = runtime.pod_parent("besteffort", uid)
    pod_id = client.run_pod(name, uid, "default", parent, labels={"koordinator.sh/qosClass": "BE"})
    metas = []
    for container in containers:
        container_id = client.create_container(pod_id, None, container, SLEEP)
        client.start(container_id)
        metas.append(ContainerMeta(name=container, container_id=container_id,
                                   cgroup_dir=f"{parent.strip('/')}/{container_id}"))
    template = make_pod(name, "BE", uid=uid, containers=tuple(containers))
    return PodMeta(pod=template.pod, cgroup_dir=parent.strip("/"), containers=tuple(metas))


def process_of(client: CriClient, container_id: str) -> int:
    """The container's first process on the host, from CRI's verbose status."""
    response = client.runtime.ContainerStatus(cri.ContainerStatusRequest(container_id=container_id, verbose=True),
                                              timeout=client.timeout)
    pid = json.loads(response.info["info"])["pid"]
    assert isinstance(pid, int) and pid > 0, dict(response.info)
    return pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_cri_evictor_stops_every_container_of_the_pod(runtime: Containerd) -> None:
    client = runtime.client()
    pod = running_be_pod(runtime, client, "be", ["main", "side"])
    processes = {c.container_id: process_of(client, c.container_id) for c in pod.containers}
    assert all(alive(pid) for pid in processes.values())
    evictions = evictions_on(runtime)

    assert evictions.evict(pod, REASON, "memory usage over the threshold")

    for container_id, pid in processes.items():
        status = client.container_status(container_id)
        assert (cri.ContainerState.Name(status.state), status.exit_code) == ("CONTAINER_EXITED", KILLED), status
        # StopContainer answers once the runtime saw the task exit, which its shim reaped.
        assert not alive(pid), f"process {pid} of container {container_id} still exists"
    [attempt] = evictions.recent(10)
    assert (attempt.pod, attempt.reason, attempt.outcome, attempt.backend) == ("default/be", REASON, "evicted", "cri")
    assert evictions.pending([pod]) == {pod.uid}


def test_a_pod_the_runtime_never_had_fails_clearly_and_the_evictor_goes_on(runtime: Containerd) -> None:
    client = runtime.client()
    real = running_be_pod(runtime, client, "real", ["main"])
    template = make_pod("ghost", "BE", uid=unique_pod_uid())
    ghost = PodMeta(pod=template.pod, cgroup_dir=template.cgroup_dir,
                    containers=(ContainerMeta(name="main", container_id="0" * 64, cgroup_dir=""),))
    evictions = evictions_on(runtime)

    assert not evictions.evict(ghost, REASON, "m")

    [failed] = evictions.recent(10)
    assert (failed.pod, failed.outcome) == ("default/ghost", "failed")
    assert (f"the runtime on unix://{runtime.socket} knows no container of pod default/ghost ({'0' * 64})"
            in failed.message), failed.message
    assert evictions.pending([ghost]) == set(), "a failed eviction is not waited for"
    # The runtime and the evictor are both fine: the next eviction works.
    [container] = real.containers
    assert cri.ContainerState.Name(client.container_status(container.container_id).state) == "CONTAINER_RUNNING"
    assert evictions.evict(real, REASON, "m")
    assert cri.ContainerState.Name(client.container_status(container.container_id).state) == "CONTAINER_EXITED"


def test_with_the_runtime_stopped_the_eviction_fails_naming_the_socket(runtime: Containerd) -> None:
    client = runtime.client()
    pod = running_be_pod(runtime, client, "be", ["main"])
    [container] = pod.containers
    pid = process_of(client, container.container_id)
    evictions = evictions_on(runtime)

    runtime.stop_daemon()
    with pytest.raises(EvictionUnreachable):  # no runtime: the strategy stops its walk, no other pod is tried
        evictions.evict(pod, REASON, "m")

    [failed] = evictions.recent(10)
    assert failed.outcome == "failed"
    assert (f"CRI StopContainer {container.container_id} of pod default/be on unix://{runtime.socket}: "
            "StatusCode.UNAVAILABLE" in failed.message), failed.message
    assert evictions.pending([pod]) == set()
    assert alive(pid), "nothing stopped the container: its shim outlives containerd"
