"""kubelet cgroup names for both drivers, container ids of each runtime, and parsing them back."""

from __future__ import annotations

import pytest

from koordlet.errors import ParseError
from koordlet.system import (
    CgroupDriver,
    ContainerRef,
    ContainerRuntime,
    KubeQoS,
    container_dir,
    container_dir_name,
    detect_driver,
    kubepods_dir,
    parse_container_dir_name,
    parse_container_id,
    parse_pod_dir_name,
    pod_dir,
    qos_dir,
)
from tests.fixtures.fakehost import FakeHost

UID = "7d0b4f3c-1a2b-4c5d-8e9f-0123456789ab"
CID = "e1f2" * 16
CGROUPFS, SYSTEMD = CgroupDriver.CGROUPFS, CgroupDriver.SYSTEMD


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        (CGROUPFS, KubeQoS.GUARANTEED, "kubepods"),
        (CGROUPFS, KubeQoS.BURSTABLE, "kubepods/burstable"),
        (CGROUPFS, KubeQoS.BESTEFFORT, "kubepods/besteffort"),
        (SYSTEMD, KubeQoS.GUARANTEED, "kubepods.slice"),
        (SYSTEMD, KubeQoS.BURSTABLE, "kubepods.slice/kubepods-burstable.slice"),
        (SYSTEMD, KubeQoS.BESTEFFORT, "kubepods.slice/kubepods-besteffort.slice"),
    ],
)
def test_qos_dirs(driver: CgroupDriver, qos: KubeQoS, expected: str) -> None:
    assert qos_dir(driver, qos) == expected


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        (CGROUPFS, KubeQoS.GUARANTEED, f"kubepods/pod{UID}"),
        (CGROUPFS, KubeQoS.BURSTABLE, f"kubepods/burstable/pod{UID}"),
        (CGROUPFS, KubeQoS.BESTEFFORT, f"kubepods/besteffort/pod{UID}"),
        (SYSTEMD, KubeQoS.GUARANTEED, "kubepods.slice/kubepods-pod7d0b4f3c_1a2b_4c5d_8e9f_0123456789ab.slice"),
        (
            SYSTEMD,
            KubeQoS.BURSTABLE,
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7d0b4f3c_1a2b_4c5d_8e9f_0123456789ab.slice",
        ),
        (
            SYSTEMD,
            KubeQoS.BESTEFFORT,
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7d0b4f3c_1a2b_4c5d_8e9f_0123456789ab.slice",
        ),
    ],
)
def test_pod_dirs(driver: CgroupDriver, qos: KubeQoS, expected: str) -> None:
    assert pod_dir(driver, qos, UID) == expected


@pytest.mark.parametrize(
    ("container_id", "systemd_name", "runtime"),
    [
        (f"containerd://{CID}", f"cri-containerd-{CID}.scope", ContainerRuntime.CONTAINERD),
        (f"cri-o://{CID}", f"crio-{CID}.scope", ContainerRuntime.CRIO),
        (f"docker://{CID}", f"docker-{CID}.scope", ContainerRuntime.DOCKER),
        (f"pouch://{CID}", f"pouch-{CID}.scope", ContainerRuntime.POUCH),
    ],
)
def test_container_names_per_runtime(container_id: str, systemd_name: str, runtime: ContainerRuntime) -> None:
    assert parse_container_id(container_id) == ContainerRef(runtime, CID)
    assert container_dir_name(CGROUPFS, container_id) == CID
    assert container_dir_name(SYSTEMD, container_id) == systemd_name
    assert parse_container_dir_name(SYSTEMD, systemd_name) == ContainerRef(runtime, CID)
    assert parse_container_dir_name(CGROUPFS, CID) == ContainerRef(None, CID)


def test_full_container_dirs() -> None:
    assert container_dir(CGROUPFS, KubeQoS.BESTEFFORT, UID, f"containerd://{CID}") == (
        f"kubepods/besteffort/pod{UID}/{CID}"
    )
    assert container_dir(SYSTEMD, KubeQoS.GUARANTEED, UID, f"cri-o://{CID}") == (
        f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope"
    )


@pytest.mark.parametrize("driver", list(CgroupDriver))
@pytest.mark.parametrize("qos", list(KubeQoS))
@pytest.mark.parametrize("uid", [UID, "0123456789abcdef0123456789abcdef"])  # static pods: a hash
def test_pod_dir_name_round_trips(driver: CgroupDriver, qos: KubeQoS, uid: str) -> None:
    name = pod_dir(driver, qos, uid).rsplit("/", 1)[1]
    assert parse_pod_dir_name(driver, name) == uid


@pytest.mark.parametrize(
    "bad",
    ["", "abc", "containerd:/abc", "containerd://", "rkt://abc", "containerd://a/b", "docker:// abc"],
)
def test_bad_container_ids_are_parse_errors(bad: str) -> None:
    with pytest.raises(ParseError, match="container"):
        parse_container_id(bad)


def test_unknown_runtime_lists_the_known_ones() -> None:
    with pytest.raises(ParseError, match=r"unknown container runtime 'rkt' .*known: containerd, cri-o, docker, pouch"):
        container_dir_name(SYSTEMD, "rkt://abc")


@pytest.mark.parametrize("bad", ["", "../x", "a_b", "a/b", "-leading", "has space"])
def test_bad_pod_uids_are_rejected(bad: str) -> None:
    with pytest.raises(ParseError, match="invalid pod uid"):
        pod_dir(CGROUPFS, KubeQoS.BURSTABLE, bad)


@pytest.mark.parametrize(
    ("driver", "name"),
    [
        (CGROUPFS, "burstable"),
        (CGROUPFS, "pod"),
        (SYSTEMD, "kubepods-burstable.slice"),
        (SYSTEMD, f"kubepods-burstable-pod{UID}.scope"),
        (SYSTEMD, "system.slice"),
    ],
)
def test_non_pod_dir_names_are_rejected(driver: CgroupDriver, name: str) -> None:
    with pytest.raises(ParseError, match=f"is not a {driver.value} pod cgroup directory name"):
        parse_pod_dir_name(driver, name)


def test_systemd_container_parsing_edge_cases() -> None:
    # cri-o's infra containers may lack ".scope"; Koordinator accepts them.
    assert parse_container_dir_name(SYSTEMD, f"crio-{CID}") == ContainerRef(ContainerRuntime.CRIO, CID)
    with pytest.raises(ParseError, match="conmon scope, not a container"):
        parse_container_dir_name(SYSTEMD, f"crio-conmon-{CID}.scope")
    for bad in (f"cri-containerd-{CID}", "cri-containerd-.scope", "init.scope", f"docker-{CID}.slice"):
        with pytest.raises(ParseError, match="is not a systemd container scope name"):
            parse_container_dir_name(SYSTEMD, bad)
    with pytest.raises(ParseError, match="is not a cgroupfs container directory name"):
        parse_container_dir_name(CGROUPFS, "a/b")


@pytest.mark.parametrize("mode", ["v1", "v2", "hybrid"])
def test_driver_detection_from_kubepods_name(fake_host: FakeHost, mode: str) -> None:
    fake_host.set_mode(mode)
    guess = detect_driver(fake_host.layout())
    assert (guess.driver, guess.guessed) == (SYSTEMD, True)
    assert "no kubepods or kubepods.slice" in guess.reason

    fake_host.mkdir_cgroup(kubepods_dir(CGROUPFS))
    guess = detect_driver(fake_host.layout())
    assert (guess.driver, guess.guessed) == (CGROUPFS, False)
    assert guess.reason.startswith("kubepods found in ")

    fake_host.mkdir_cgroup(kubepods_dir(SYSTEMD))
    guess = detect_driver(fake_host.layout())
    assert (guess.driver, guess.guessed) == (SYSTEMD, True)
    assert "both kubepods and kubepods.slice" in guess.reason


def test_driver_detection_uses_the_cpu_hierarchy_in_v1(fake_host: FakeHost) -> None:
    # A kubepods.slice only in memory/ says nothing: Koordinator looks under cpu/.
    fake_host.mkdir_cgroup("kubepods.slice", subsystems=["memory"])
    assert detect_driver(fake_host.layout()).guessed
    fake_host.mkdir_cgroup("kubepods.slice", subsystems=["cpu"])
    assert detect_driver(fake_host.layout()).driver is SYSTEMD
    assert not detect_driver(fake_host.layout()).guessed
