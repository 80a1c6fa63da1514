"""The states informer: configured workloads, kubepods discovery for both drivers, publishing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet import native
from koordlet.apis.extension import QoSClass
from koordlet.apis.pod import pod_from_json
from koordlet.config import load
from koordlet.config.types import Config, WorkloadConfig
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.informer import StatesInformer, kubelet_pod_meta
from koordlet.statesinformer.standalone import scan_kubepods, workload_pods
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.node import read_node_info
from tests.fixtures.fakehost import FakeHost

UID = "6f7e2a1c-1b2c-4d5e-8f90-a1b2c3d4e5f6"
CID = "a" * 64


def test_workloads_become_pods() -> None:
    pods = workload_pods([WorkloadConfig(name="nginx", systemd_unit="nginx.service", qos_class="LS", priority=9000),
                          WorkloadConfig(name="yarn", cgroup_path="/hadoop-yarn/", qos_class="BE", priority=5000)])
    assert [(p.uid, p.cgroup_dir, p.qos, p.source) for p in pods] == [
        ("standalone-nginx", "system.slice/nginx.service", QoSClass.LS, "config"),
        ("standalone-yarn", "hadoop-yarn", QoSClass.BE, "config"),
    ]


@pytest.mark.parametrize(("driver", "pod_dir", "container_dir"), [
    (CgroupDriver.CGROUPFS, f"kubepods/besteffort/pod{UID}", CID),
    (CgroupDriver.SYSTEMD,
     f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice",
     f"cri-containerd-{CID}.scope"),
])
def test_scan_kubepods_finds_pods_and_containers(fake_host: FakeHost, driver: CgroupDriver, pod_dir: str,
                                                  container_dir: str) -> None:
    fake_host.mkdir_cgroup(f"{pod_dir}/{container_dir}")
    fake_host.mkdir_cgroup(pod_dir.rsplit("/", 1)[0] + "/not-a-pod")
    (pod,) = scan_kubepods(fake_host.layout(), driver)
    assert (pod.uid, pod.qos, pod.cgroup_dir, pod.source) == (UID, QoSClass.BE, pod_dir, "kubepods")
    assert [(c.container_id, c.cgroup_dir) for c in pod.containers] == [(CID, f"{pod_dir}/{container_dir}")]


def test_a_rescan_returns_the_pods_it_knows_until_their_directories_change(fake_host: FakeHost) -> None:
    pod_dir = f"kubepods/burstable/pod{UID}"
    fake_host.mkdir_cgroup(f"{pod_dir}/{CID}")
    layout = fake_host.layout()
    (first,) = scan_kubepods(layout, CgroupDriver.CGROUPFS)
    (again,) = scan_kubepods(layout, CgroupDriver.CGROUPFS, known={first.cgroup_dir: first})
    assert again is first
    # Filed under this directory but describing another: made anew.
    other = PodMeta(first.pod, f"kubepods/besteffort/pod{UID}", first.containers, first.source)
    (fresh,) = scan_kubepods(layout, CgroupDriver.CGROUPFS, known={pod_dir: other})
    assert fresh is not other and fresh == first
    fake_host.mkdir_cgroup(f"{pod_dir}/{'b' * 64}")
    (grown,) = scan_kubepods(layout, CgroupDriver.CGROUPFS, known={first.cgroup_dir: first})
    assert grown is not first
    assert [c.container_id for c in grown.containers] == [CID, "b" * 64]


def test_scan_under_a_kubelet_cgroup_root(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(f"mytree/kubepods/burstable/pod{UID}/{CID}")
    (pod,) = scan_kubepods(fake_host.layout(), CgroupDriver.CGROUPFS, "mytree")
    assert pod.qos is QoSClass.LS and pod.cgroup_dir == f"mytree/kubepods/burstable/pod{UID}"
    assert scan_kubepods(fake_host.layout(), CgroupDriver.CGROUPFS) == []


def test_kubelet_pods_get_their_cgroup_dirs() -> None:
    pod = pod_from_json({"metadata": {"uid": UID, "name": "web", "namespace": "default"},
                         "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]},
                         "status": {"qosClass": "Guaranteed", "containerStatuses": [
                             {"name": "app", "containerID": f"containerd://{CID}"}]}})
    meta = kubelet_pod_meta(pod, CgroupDriver.CGROUPFS, "tree")
    assert meta.cgroup_dir == f"tree/kubepods/pod{UID}"
    assert [(c.name, c.container_id, c.cgroup_dir) for c in meta.containers] == [
        ("app", CID, f"tree/kubepods/pod{UID}/{CID}"), ("sidecar", "", "")]


def test_informer_publishes_only_changes(fake_host: FakeHost, tmp_path: Path) -> None:
    config_file = tmp_path / "c.yaml"
    config_file.write_text("standalone: true\nworkloads: [{name: app, cgroupPath: app, qosClass: LS}]\n")
    config: Config = load(config_file)
    informer = StatesInformer(config, fake_host.layout(), CgroupDriver.CGROUPFS,
                              read_node_info(fake_host.paths, native))
    seen: list[tuple[PodMeta, ...]] = []
    informer.subscribe(lambda pods: seen.append(tuple(pods)))
    assert informer.sync_standalone() is True
    assert informer.sync_standalone() is False
    fake_host.mkdir_cgroup(f"kubepods/besteffort/pod{UID}/{CID}")
    assert informer.sync_standalone() is True
    assert [[p.uid for p in pods] for pods in seen] == [["standalone-app"], [UID, "standalone-app"]]
    assert informer.pods() == seen[-1]
    assert informer.pleg_dirs()[0].endswith("cpu/kubepods")


def test_plain_host_reservation_from_config(fake_host: FakeHost, tmp_path: Path) -> None:
    config_file = tmp_path / "c.yaml"
    config_file.write_text("standalone: true\nnode: {reservedCpu: 500m, reservedMemory: 1Gi}\n")
    informer = StatesInformer(load(config_file), fake_host.layout(), CgroupDriver.CGROUPFS,
                              read_node_info(fake_host.paths, native))
    assert (informer.reservation().cpu_milli, informer.reservation().memory_bytes) == (500, 2**30)
    config_file.write_text("node: {reservedCpu: lots}\n")
    with pytest.raises(Exception, match=r"node\.reservedCpu: invalid quantity 'lots'"):
        load(config_file)
