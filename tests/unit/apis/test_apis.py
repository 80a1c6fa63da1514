"""Quantities, QoS/priority resolution and pod parsing against Koordinator's rules and samples."""

from __future__ import annotations

from decimal import Decimal

import pytest

from koordlet.apis.extension import KubeQoS, PriorityClass, QoSClass, pod_qos, priority_class
from koordlet.apis.pod import pod_from_json, pods_from_podlist
from koordlet.apis.quantity import format_milli, int_value, milli_value, parse_quantity
from koordlet.errors import ParseError


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("100m", 100),
        ("1", 1000),
        ("4k", 4_000_000),
        ("0.5", 500),
        ("1.5", 1500),
        ("1e3", 1_000_000),
        (2, 2000),
        ("250m", 250),
        ("0.0001", 1),
    ],
)
def test_milli_value(text: str, milli: int) -> None:
    assert milli_value(text) == milli


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("64Mi", 64 * 2**20),
        ("1G", 10**9),
        ("4Gi", 4 * 2**30),
        ("1815637738", 1815637738),
        ("64818120Ki", 64818120 * 1024),
        ("100M", 10**8),
    ],
)
def test_int_value(text: str, value: int) -> None:
    assert int_value(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "Gi", "1Q", "1 Gi", "abc", "--1", "1e"])
def test_bad_quantities(bad: str) -> None:
    with pytest.raises(ParseError, match="invalid quantity"):
        parse_quantity(bad)


def test_format_milli() -> None:
    assert (format_milli(2000), format_milli(1500)) == ("2", "1500m")
    assert parse_quantity("-1") == Decimal(-1)


def test_qos_label_first_then_kubernetes_class() -> None:
    assert pod_qos({"koordinator.sh/qosClass": "BE"}, KubeQoS.GUARANTEED) is QoSClass.BE
    assert pod_qos({}, KubeQoS.GUARANTEED) is QoSClass.LSR
    assert pod_qos({}, KubeQoS.BURSTABLE) is QoSClass.LS
    assert pod_qos({}, KubeQoS.BESTEFFORT) is QoSClass.BE
    assert pod_qos({"koordinator.sh/qosClass": "bogus"}, KubeQoS.BURSTABLE) is QoSClass.LS
    assert pod_qos({}, None) is QoSClass.NONE


def test_priority_bands_and_label_override() -> None:
    assert priority_class(9000) is PriorityClass.PROD
    assert priority_class(7999) is PriorityClass.MID
    assert priority_class(5500) is PriorityClass.BATCH
    assert priority_class(3000) is PriorityClass.FREE
    assert priority_class(0) is PriorityClass.NONE
    assert priority_class(None) is PriorityClass.NONE
    assert priority_class(9000, {"koordinator.sh/priority-class": "koord-batch"}) is PriorityClass.BATCH


def _pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {
            "uid": "u1",
            "name": "be-demo",
            "namespace": "default",
            "labels": {"koordinator.sh/qosClass": "BE"},
        },
        "spec": {
            "priority": 5000,
            "nodeName": "n1",
            "containers": [
                {
                    "name": "stress",
                    "resources": {
                        "requests": {"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "4Gi"},
                        "limits": {"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "4Gi"},
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "stress", "containerID": "containerd://abc"}],
            **status,
        },
    }


def test_pod_from_json_be_batch_pod() -> None:
    pod = pod_from_json(_pod())
    assert pod.qos is QoSClass.BE and pod.priority_class is PriorityClass.BATCH
    assert pod.kube_qos is KubeQoS.BESTEFFORT  # batch-* extended resources do not make it Burstable
    container = pod.containers[0]
    assert container.container_id == "containerd://abc"
    assert container.requests.batch_cpu_milli == 4000 and container.limits.batch_memory_bytes == 4 * 2**30


def test_pod_list_errors_name_the_field() -> None:
    with pytest.raises(ParseError, match="PodList"):
        pods_from_podlist(["not", "a", "list"])
    bad = _pod(qosClass="Platinum")
    with pytest.raises(ParseError, match=r"default/be-demo: status.qosClass"):
        pods_from_podlist({"items": [bad]})
    bad_quantity = _pod()
    bad_quantity["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"  # type: ignore[index]
    with pytest.raises(ParseError, match=r"containers\[0\].resources.limits: invalid quantity 'lots'"):
        pod_from_json(bad_quantity)
    with pytest.raises(ParseError, match="uid"):
        pod_from_json({"metadata": {"name": "x"}})


@pytest.mark.parametrize("bad", [{"metadata": [1]}, {"metadata": {"uid": "u", "name": "n"}, "spec": "x"},
                                 {"metadata": {"uid": "u", "name": "n"}, "status": {"containerStatuses": {}}},
                                 {"metadata": {"uid": "u", "name": "n"}, "spec": {"containers": [{"name": "c",
                                                                                               "resources": 1}]}}])
def test_wrong_types_are_parse_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ParseError, match=r"expected (an object|a list)"):
        pod_from_json(bad)


@pytest.mark.parametrize(("spec", "status", "ips"), [
    ({}, {"podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::0005"}]}, ("10.0.0.5", "fd00::5")),
    ({}, {"podIP": "10.0.0.5"}, ("10.0.0.5",)),  # pre-dual-stack kubelet: podIP only
    ({}, {"podIPs": []}, ()),  # pending: no address yet
    ({}, {"podIPs": [{"ip": "10.0.0.5"}, {"ip": "10.0.0.5"}]}, ("10.0.0.5",)),
    ({"hostNetwork": True}, {"podIP": "192.168.1.10", "podIPs": [{"ip": "192.168.1.10"}]}, ()),
])
def test_pod_ips(spec: dict[str, object], status: dict[str, object], ips: tuple[str, ...]) -> None:
    obj = _pod(**status)
    obj["spec"].update(spec)  # type: ignore[attr-defined]
    assert pod_from_json(obj).ips == ips


@pytest.mark.parametrize(("status", "message"), [
    ({"podIPs": [{"ip": "10.0.0.300"}]}, r"be-demo: status.podIPs\[0\].ip '10.0.0.300' is not an IP address"),
    ({"podIPs": [{}]}, r"status.podIPs\[0\].ip None is not an IP address"),
    ({"podIP": "bogus"}, r"status.podIP 'bogus' is not an IP address"),
    ({"podIPs": {"ip": "10.0.0.1"}}, r"status.podIPs: expected a list"),
])
def test_bad_pod_ips_name_the_field(status: dict[str, object], message: str) -> None:
    with pytest.raises(ParseError, match=message):
        pod_from_json(_pod(**status))
