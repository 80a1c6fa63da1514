"""The node's reservation: kubelet's /configz (kubeReserved + systemReserved) or the plain host's config."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.errors import ParseError
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError
from koordlet.statesinformer.kubeletconfig import KubeletConfigSync
from koordlet.statesinformer.reservation import Reservation, reservation_from_configz

CONFIGZ = {"kubeletconfig": {"cgroupDriver": "systemd", "kubeReserved": {"cpu": "500m", "memory": "1Gi"},
                             "systemReserved": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}}}


def test_configz_sums_kube_and_system_reserved() -> None:
    assert reservation_from_configz(CONFIGZ) == Reservation(1500, 1536 * 2**20)
    assert reservation_from_configz({"kubeletconfig": {}}) == Reservation()


@pytest.mark.parametrize(("obj", "message"), [
    ([], "kubeletconfig object"),
    ({"kubeletconfig": {"kubeReserved": ["cpu"]}}, "kubeletconfig.kubeReserved: expected a map"),
    ({"kubeletconfig": {"systemReserved": {"cpu": "lots"}}}, "kubeletconfig.systemReserved: invalid quantity"),
])
def test_bad_configz_names_the_field(obj: Any, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        reservation_from_configz(obj)


def test_sync_reads_kubelet_configz_and_retries(fake_kubelet: Any) -> None:
    client = KubeletClient(fake_kubelet.options())
    got: list[Reservation] = []
    sync = KubeletConfigSync(client, 3600, got.append)
    assert not sync.sync_once()  # /configz not served yet (404)
    fake_kubelet.set_configz({"kubeletconfig": {"kubeReserved": {"cpu": "lots"}}})
    with pytest.raises(KubeletError, match="invalid quantity"):
        client.get_reservation()
    fake_kubelet.set_configz(CONFIGZ)
    assert sync.sync_once()
    assert got == [Reservation(1500, 1536 * 2**20)] and sync.attempts == 2
    # Re-read: the same configuration is not handed on again; a failure keeps the last good one.
    assert sync.sync_once() and len(got) == 1
    fake_kubelet.set_configz(None)
    assert not sync.sync_once() and sync.reservation == got[0]
    fake_kubelet.set_configz({"kubeletconfig": {"cpuManagerPolicy": "static"}})
    assert sync.sync_once()
    assert got[-1] == Reservation(cpu_manager_policy="static")


def test_reserved_system_cpus_name_cpus_and_override_the_quantity() -> None:
    config = {"kubeletconfig": {"kubeReserved": {"cpu": "500m", "memory": "1Gi"}, "reservedSystemCPUs": "0,4-5"}}
    assert reservation_from_configz(config) == Reservation(3000, 2**30, (0, 4, 5))


def test_reserved_system_cpus_garbage_names_the_field() -> None:
    with pytest.raises(ParseError, match="reservedSystemCPUs"):
        reservation_from_configz({"kubeletconfig": {"reservedSystemCPUs": "0-x"}})


@pytest.mark.parametrize(("policy", "expected"), [(None, "none"), ("", "none"), ("none", "none"), ("static", "static")])
def test_cpu_manager_policy_from_configz(policy: str | None, expected: str) -> None:
    config: dict[str, Any] = {"kubeReserved": {"cpu": "500m"}, "reservedSystemCPUs": "0"}
    if policy is not None:
        config["cpuManagerPolicy"] = policy
    reservation = reservation_from_configz({"kubeletconfig": config})
    assert reservation == Reservation(1000, 0, (0,), expected)
    # The sum of two reservations keeps the policy of the first.
    assert (reservation + Reservation(500)).cpu_manager_policy == expected


@pytest.mark.parametrize("policy", ["Static", "dynamic", 3, ["static"]])
def test_unknown_cpu_manager_policy_names_the_field(policy: object) -> None:
    with pytest.raises(ParseError, match=r"kubeletconfig.cpuManagerPolicy: expected one of none, static, got "):
        reservation_from_configz({"kubeletconfig": {"cpuManagerPolicy": policy}})
