"""Pleg on real cgroups - the v1 ``cpu`` hierarchy on the host, the one v2 hierarchy in the guest: kernfs
reports mkdir/rmdir of cgroups to inotify.

Everything happens under the test's own ``koordlet-test-<pid>-<rand>/`` (the ``real_cgroups`` fixture
removes it afterwards), which stands for kubelet's ``--cgroup-root``; the host's real kubepods tree is
never watched.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from koordlet import native
from koordlet.config.types import Config
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.pleg import Pleg
from koordlet.system import HostPaths, detect_layout, read_node_info
from koordlet.system.kubepaths import (
    CgroupDriver,
    KubeQoS,
    container_dir,
    detect_driver,
    pod_dir,
    qos_dir,
    under_parent,
)
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.realcgroup import CGROUP_ROOT, RealCgroups
from tests.fixtures.waiting import wait_until


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


@pytest.fixture
def kube_tree(real_cgroups: RealCgroups) -> Iterator[RealCgroups]:
    real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
    yield real_cgroups


def test_pod_cgroups_created_and_removed(kube_tree: RealCgroups, failures: ComponentFailures) -> None:
    kubepods = kube_tree.path("cpu", "kubepods")
    besteffort = kube_tree.path("cpu", "kubepods/besteffort")
    events = Events()
    pleg = Pleg([kubepods, besteffort], events)
    pleg.start(failures.callback("pleg"))
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


def test_systemd_pod_slices(real_cgroups: RealCgroups, failures: ComponentFailures) -> None:
    qos = "kubepods.slice/kubepods-burstable.slice"
    real_cgroups.mkdir(qos, subsystems=("cpu",))
    events = Events()
    pleg = Pleg([real_cgroups.path("cpu", qos)], events)
    pleg.start(failures.callback("pleg"))
    try:
        pod = f"{qos}/kubepods-burstable-pod{str(uuid.uuid4()).replace('-', '_')}.slice"
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(1)
        real_cgroups.remove(pod)
        assert events.wait(2)
    finally:
        pleg.stop(5)


def test_qos_cgroup_created_later_and_recreated(real_cgroups: RealCgroups, failures: ComponentFailures) -> None:
    real_cgroups.mkdir("kubepods", subsystems=("cpu",))
    kubepods = real_cgroups.path("cpu", "kubepods")
    besteffort = real_cgroups.path("cpu", "kubepods/besteffort")
    events = Events()
    pleg = Pleg([kubepods, besteffort], events, retry_interval_seconds=0.05)
    pleg.start(failures.callback("pleg"))
    try:
        assert pleg.watched == (str(kubepods),)
        real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
        wait_until("besteffort watched", lambda: str(besteffort) in pleg.watched)
        pod = f"kubepods/besteffort/pod{uuid.uuid4()}"
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(1)
        real_cgroups.remove(pod)
        assert events.wait(2)

        # kubelet removing and recreating the QoS cgroup: the watch follows the new directory.
        real_cgroups.remove("kubepods/besteffort")
        wait_until("the removed besteffort dropped", lambda: str(besteffort) not in pleg.watched)
        real_cgroups.mkdir("kubepods/besteffort", subsystems=("cpu",))
        wait_until("the new besteffort watched", lambda: str(besteffort) in pleg.watched)
        real_cgroups.mkdir(pod, subsystems=("cpu",))
        assert events.wait(3)
        real_cgroups.remove(pod)
        assert events.wait(4)
    finally:
        pleg.stop(5)


@pytest.mark.parametrize("driver", list(CgroupDriver), ids=lambda d: d.value)
def test_standalone_informer_follows_pods_of_either_driver(real_cgroups: RealCgroups, driver: CgroupDriver,
                                                           failures: ComponentFailures, tmp_path: Path) -> None:
    """The agent's own wiring: the driver detected from the tree, the QoS directories ``pleg_dirs`` names in
    the hierarchy kubelet makes pods in (v1 ``cpu``, v2 the one hierarchy) and rescans driven by PLEG alone
    (the periodic sync is an hour away) find each pod and container as it comes and goes."""
    parent = real_cgroups.name
    for qos in KubeQoS:  # kubelet makes its QoS tree at start, before any pod
        real_cgroups.mkdir(qos_dir(driver, qos))
    paths = HostPaths()
    layout = detect_layout(paths)
    guess = detect_driver(layout, parent)
    assert (guess.driver, guess.guessed) == (driver, False), guess.reason
    config = Config()
    # kubelet's directory is the test's own: the default is the host's (tests/fixtures/isolation.py).
    config = replace(config, standalone=True, host=replace(config.host, cgroup_kube_parent=parent,
                                                           var_lib_kubelet_root_dir=str(tmp_path / "kubelet")),
                     kubelet=replace(config.kubelet, sync_interval_seconds=3600.0))
    plegs: list[Pleg] = []

    def pleg_factory(dirs: Sequence[str], on_event: Callable[[], None]) -> Pleg:
        plegs.append(Pleg(dirs, on_event))
        return plegs[-1]

    informer = StatesInformer(config, layout, guess.driver, read_node_info(paths, native), pleg_factory=pleg_factory)
    # v1: the cpu subsystem's copy of the tree; v2: the one hierarchy, the cgroup root itself.
    hierarchy = CGROUP_ROOT / "cpu" if real_cgroups.version == 1 else CGROUP_ROOT
    assert informer.pleg_dirs() == [str(hierarchy / parent / qos_dir(driver, q)) for q in KubeQoS]
    informer.start(failures.callback("statesinformer"))
    try:
        assert plegs and plegs[0].watched == tuple(informer.pleg_dirs())
        assert informer.pods() == ()
        made = {qos: (str(uuid.uuid4()), os.urandom(32).hex()) for qos in KubeQoS}
        for qos, (uid, cid) in made.items():
            real_cgroups.mkdir(container_dir(driver, qos, uid, f"containerd://{cid}"))
        wanted = {uid: (qos, under_parent(parent, container_dir(driver, qos, uid, f"containerd://{cid}")))
                  for qos, (uid, cid) in made.items()}
        # Only pod directories raise events: a scan woken by a pod may run before its container directory
        # exists.  One more pod made after every container makes a last scan that must see them all.
        last_uid = str(uuid.uuid4())
        real_cgroups.mkdir(pod_dir(driver, KubeQoS.BESTEFFORT, last_uid))
        wanted[last_uid] = (KubeQoS.BESTEFFORT, "")

        def seen() -> dict[str, tuple[KubeQoS | None, str]]:
            return {p.uid: (p.pod.kube_qos, p.containers[0].cgroup_dir if p.containers else "")
                    for p in informer.pods()}

        wait_until("the informer listing the pods with their containers", lambda: seen() == wanted, timeout=30)
        assert plegs[0].events >= len(made)
        gone_qos = KubeQoS.BURSTABLE
        gone_uid, gone_cid = made[gone_qos]
        real_cgroups.remove(container_dir(driver, gone_qos, gone_uid, f"containerd://{gone_cid}"))
        real_cgroups.remove(pod_dir(driver, gone_qos, gone_uid))
        del wanted[gone_uid]
        wait_until("the informer dropping the removed pod", lambda: seen() == wanted, timeout=30)
        print(f"cgroup v{real_cgroups.version} {driver.value}: pleg watched {plegs[0].watched}, "
              f"{plegs[0].events} pod directory events, {informer.syncs} scans; "
              f"pods {sorted(d for _, d in wanted.values())}")
    finally:
        informer.stop(5)
