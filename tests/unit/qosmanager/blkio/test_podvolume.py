"""blkio per pod (upstream reconcile's pod loop): the ``koordinator.sh/blkioQOS`` annotation's blocks in the
pod's own cgroup, ``podvolume`` blocks resolved through kubelet's CSI mount of the volume, the host's
``1/mountinfo`` and sysfs to the whole disk (partition -> disk, LVM -> its disks).  Fake trees only: the
fake sysfs of fakesys.standard (vdb 254:16 with vdb1 254:17; dm-0 253:0 an LV on vdb1), a fake mountinfo and
a fake kubelet root under tmp_path."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.pod import Volume, pod_from_json
from koordlet.qosmanager.plugins.blkio.podvolume import mount_devices
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.blkio.test_strategy import MIB4, Rig, make_rig, spec, throttles
from tests.unit.qosmanager.fakes import make_pod

ANN = "koordinator.sh/blkioQOS"
UID = "uid-db"


def annotated(blocks: list[dict[str, Any]], volumes: tuple[Volume, ...]) -> PodMeta:
    meta = make_pod("db", "LS", annotations={ANN: json.dumps({"blocks": blocks})})
    return dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, volumes=volumes))


def podvolume(name: str, **io: int) -> dict[str, Any]:
    return {"name": name, "type": "podvolume", "ioCfg": io}


@pytest.fixture
def rig(fake_cgroup_host: FakeHost, tmp_path: Path) -> Rig:
    rig = make_rig(fake_cgroup_host, tmp_path)
    options = dataclasses.replace(rig.strategy.options, kubelet_root_dir=str(tmp_path / "kubelet"))
    rig.strategy = type(rig.strategy)(options)
    return rig


def mount(rig: Rig, tmp_path: Path, directory: str, number: str) -> None:
    point = tmp_path / "kubelet" / "pods" / UID / "volumes" / "kubernetes.io~csi" / directory / "mount"
    point.mkdir(parents=True)
    path = Path(rig.host.paths.proc("1/mountinfo"))
    old = path.read_text() if path.exists() else "22 1 254:1 / / rw - ext4 /dev/vda1 rw\n"
    rig.host.write_proc("1/mountinfo", old + f"90 22 {number} / {point} rw - ext4 /dev/x rw\n")


def pod_writes(rig: Rig, meta: PodMeta) -> tuple[Any, list[tuple[str, str]]]:
    rig.host.mkdir_cgroup(meta.cgroup_dir)
    rig.strategy.options.informer.pod_list[:] = [meta]  # type: ignore[attr-defined]
    decision, _ = rig.run(spec())
    return decision, [(Path(e.path).name, e.new) for e in rig.audit.entries
                      if e.outcome == "written" and meta.cgroup_dir in e.path]


def test_csi_ephemeral_volume_on_a_partition_limits_its_disk(rig: Rig, tmp_path: Path) -> None:
    mount(rig, tmp_path, "scratch", "254:17")  # vdb1 -> disk vdb 254:16
    meta = annotated([podvolume("scratch", writeBPS=MIB4)], (Volume("scratch", csi=True),))
    decision, writes = pod_writes(rig, meta)
    assert writes == throttles(rig.mode, "254:16", wbps=MIB4)
    assert decision.numbers["pods"]["default/db"]["254:16"]["write_bps"] == MIB4
    assert "1 annotated pods" in decision.summary


def test_pvc_volume_on_lvm_resolves_through_its_only_csi_mount(rig: Rig, tmp_path: Path) -> None:
    mount(rig, tmp_path, "pvc-0a1b", "253:0")  # dm-0 data-lv1 on vdb1 -> vdb
    meta = annotated([podvolume("data", readIOPS=100), {"name": "vdc", "type": "device", "ioCfg": {"readBPS": 1}}],
                     (Volume("data", claim_name="data-claim"), Volume("config")))
    _, writes = pod_writes(rig, meta)
    assert writes == throttles(rig.mode, "254:16", riops=100) + throttles(rig.mode, "254:32", rbps=1)


@pytest.mark.parametrize(("volumes", "dirs", "error"), [
    ((Volume("data", claim_name="c"),), ["pvc-a", "pvc-b"], "several PVC mounts (pvc-a, pvc-b); telling which one "
                                                             "is claim 'c' needs the PVC"),
    ((Volume("other", csi=True),), [], "volume 'data': the pod has no such volume"),
    ((Volume("data"),), [], "volume 'data': neither a PVC nor a CSI volume"),
    ((Volume("data", csi=True),), [], "kubernetes.io~csi/data/mount is not mounted"),
])
def test_unresolvable_volumes_are_a_note_and_the_pods_limits_stay(rig: Rig, tmp_path: Path,
                                                                   volumes: tuple[Volume, ...], dirs: list[str],
                                                                   error: str) -> None:
    for i, directory in enumerate(dirs):
        mount(rig, tmp_path, directory, f"254:{16 * (i + 1)}")
    meta = annotated([podvolume("data", writeBPS=MIB4)], volumes)
    decision, writes = pod_writes(rig, meta)
    assert writes == []
    assert f"pod default/db: annotation {ANN}.blocks[0].name: pod default/db: volume 'data': " in decision.summary
    assert error in decision.summary
    assert "the pod's limits in force stay" in decision.summary


def test_removed_annotation_removes_our_rules_and_annotation_alone_enables(rig: Rig, tmp_path: Path) -> None:
    mount(rig, tmp_path, "scratch", "254:17")
    meta = annotated([podvolume("scratch", writeBPS=MIB4)], (Volume("scratch", csi=True),))
    assert not rig.strategy.enabled(spec())
    rig.strategy.options.informer.pod_list[:] = [meta]  # type: ignore[attr-defined]
    assert rig.strategy.enabled(spec())  # an annotated pod is enough, as upstream reconciles pods always
    pod_writes(rig, meta)
    plain = dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, annotations={}))
    _, writes = pod_writes(rig, plain)
    assert writes == throttles(rig.mode, "254:16")  # every limit back to none


def test_switching_off_removes_pod_rules(rig: Rig, tmp_path: Path) -> None:
    mount(rig, tmp_path, "scratch", "254:17")
    meta = annotated([podvolume("scratch", writeBPS=MIB4)], (Volume("scratch", csi=True),))
    pod_writes(rig, meta)
    rig.audit.entries.clear()
    rig.strategy.run_once(spec(), enabled=False)
    writes = [(Path(e.path).name, e.new) for e in rig.audit.entries if e.outcome == "written"]
    assert writes == throttles(rig.mode, "254:16")


def test_malformed_annotation_names_the_pod(rig: Rig) -> None:
    meta = make_pod("db", "LS", annotations={ANN: "{nope"})
    decision, writes = pod_writes(rig, meta)
    assert writes == [] and f"pod default/db: annotation {ANN}: " in decision.summary


def test_mountinfo_parsing(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "mountinfo").write_text(
        "22 1 254:1 / / rw shared:1 - ext4 /dev/vda1 rw\n"
        "91 22 253:0 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/my\\040pv/mount rw - xfs /dev/dm-0 rw\n"
        "garbage\n")
    assert mount_devices(str(proc)) == {"/": (254, 1),
                                        "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/my pv/mount": (253, 0)}
    assert mount_devices(str(tmp_path / "none")) == {}


def test_pod_volumes_are_parsed_from_the_spec() -> None:
    pod = pod_from_json({"metadata": {"uid": "u", "name": "p"}, "status": {}, "spec": {"containers": [], "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
        {"name": "scratch", "csi": {"driver": "x"}}, {"name": "cfg", "configMap": {"name": "c"}}, {"bad": 1}]}})
    assert pod.volumes == (Volume("data", "data-claim"), Volume("scratch", csi=True), Volume("cfg"))
