"""Pleg on the real cgroup v1 ``cpu`` hierarchy: kernfs reports mkdir/rmdir of cgroups to inotify.

Everything happens under the test's own ``/sys/fs/cgroup/cpu/koordlet-test-<pid>-<rand>/`` (the
``real_cgroups`` fixture removes it afterwards); the host's real kubepods tree is never watched.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from koordlet.statesinformer.pleg import Pleg
from tests.fixtures.realcgroup import RealCgroups


class Events:
    def __init__(self) -> None:
        self.calls = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.calls += 1
            self._cond.notify_all()

    def wait(self, calls: int, timeout_seconds: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= calls, timeout_seconds)


def wait_until(predicate: Callable[[], bool], timeout_seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def kube_tree(real_cgroups: RealCgroups) -> Iterator[RealCgroups]:
    real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
    yield real_cgroups


def test_pod_cgroups_created_and_removed(kube_tree: RealCgroups) -> None:
    kubepods = kube_tree.path("cpu", "kubepods")
    besteffort = kube_tree.path("cpu", "kubepods/besteffort")
    events = Events()
    pleg = Pleg([kubepods, besteffort], events)
    pleg.start()
    try:
        assert pleg.watched == (str(kubepods), str(besteffort))
        be_pod = f"kubepods/besteffort/pod{uuid.uuid4()}"
        kube_tree.mkdir(be_pod, subsystems=("cpu",))
        assert events.wait(1)
        # kubelet's container cgroups one level down are not watched: no event for them.
        kube_tree.mkdir(f"{be_pod}/{'ab' * 32}", subsystems=("cpu",))
        kube_tree.remove(f"{be_pod}/{'ab' * 32}")
        kube_tree.remove(be_pod)
        assert events.wait(2)
        guaranteed = f"kubepods/pod{uuid.uuid4()}"
        kube_tree.mkdir(guaranteed, subsystems=("cpu",))
        assert events.wait(3)
        kube_tree.remove(guaranteed)
        assert events.wait(4)
        assert pleg.events == 4
    finally:
        pleg.stop(5)


def test_systemd_pod_slices(real_cgroups: RealCgroups) -> None:
    qos = "kubepods.slice/kubepods-burstable.slice"
    real_cgroups.mkdir(qos, subsystems=("cpu",))
    events = Events()
    pleg = Pleg([real_cgroups.path("cpu", qos)], events)
    pleg.start()
    try:
        pod = f"{qos}/kubepods-burstable-pod{str(uuid.uuid4()).replace('-', '_')}.slice"
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(1)
        real_cgroups.remove(pod)
        assert events.wait(2)
    finally:
        pleg.stop(5)


def test_qos_cgroup_created_later_and_recreated(real_cgroups: RealCgroups) -> None:
    real_cgroups.mkdir("kubepods", subsystems=("cpu",))
    kubepods = real_cgroups.path("cpu", "kubepods")
    besteffort = real_cgroups.path("cpu", "kubepods/besteffort")
    events = Events()
    pleg = Pleg([kubepods, besteffort], events, retry_interval_seconds=0.05)
    pleg.start()
    try:
        assert pleg.watched == (str(kubepods),)
        real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
        assert wait_until(lambda: str(besteffort) in pleg.watched)
        pod = f"kubepods/besteffort/pod{uuid.uuid4()}"
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(1)
        real_cgroups.remove(pod)
        assert events.wait(2)

        # kubelet removing and recreating the QoS cgroup: the watch follows the new directory.
        real_cgroups.remove("kubepods/besteffort")
        assert wait_until(lambda: str(besteffort) not in pleg.watched)
        real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
        assert wait_until(lambda: str(besteffort) in pleg.watched)
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(3)
        real_cgroups.remove(pod)
        assert events.wait(4)
    finally:
        pleg.stop(5)
