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


def test_reserved_system_cpus_name_cpus_and_override_the_quantity() -> None:
    config = {"kubeletconfig": {"kubeReserved": {"cpu": "500m", "memory": "1Gi"}, "reservedSystemCPUs": "0,4-5"}}
    assert reservation_from_configz(config) == Reservation(3000, 2**30, (0, 4, 5))


def test_reserved_system_cpus_garbage_names_the_field() -> None:
    with pytest.raises(ParseError, match="reservedSystemCPUs"):
        reservation_from_configz({"kubeletconfig": {"reservedSystemCPUs": "0-x"}})
