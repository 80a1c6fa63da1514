"""Fuzzing of what koordlet decodes from kubelet (koordlet/statesinformer/kubelet.py, koordlet/apis/pod.py,
koordlet/statesinformer/reservation.py).

``/pods`` carries every tenant's pod object (labels, annotations, resources); ``/configz`` kubelet's config.
Contracts: ``pod_from_json`` and ``pods_from_podlist`` raise ``ParseError``; ``KubeletClient.get_pods`` and
``get_reservation`` raise ``KubeletError`` (what the pod source and the reservation sync catch), whatever the
body is.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis.pod import pod_from_json, pods_from_podlist
from koordlet.errors import ParseError
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError, KubeletOptions
from koordlet.statesinformer.reservation import reservation_from_configz
from tests.security.fuzzkit import (
    cpulist_text,
    decode,
    fuzz_settings,
    json_bytes,
    junk_json,
    quantity_value,
    raw_bytes,
    shaped,
)

_RESOURCE_NAMES = st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory", "x"])
resource_list = st.dictionaries(_RESOURCE_NAMES, quantity_value, max_size=4)
container = shaped({"name": st.text(max_size=10), "resources": shaped({"requests": resource_list,
                                                                        "limits": resource_list})})
string_map = st.dictionaries(st.text(max_size=30), st.text(max_size=40), max_size=4)
ip_text = st.one_of(st.ip_addresses().map(str), st.sampled_from(["", "::ffff:1.2.3.4", "1.2.3.4%eth0", "fe80::1%1",
                                                                 "999.1.1.1", "1.2.3"]), st.text(max_size=12))
pod = shaped({
    "metadata": shaped({"uid": st.text(min_size=1, max_size=36), "name": st.text(min_size=1, max_size=20),
                        "namespace": st.text(max_size=20), "labels": string_map, "annotations": string_map,
                        "creationTimestamp": st.text(max_size=25), "deletionTimestamp": st.text(max_size=25)}),
    "spec": shaped({"containers": st.lists(container, max_size=3), "priority": st.integers(),
                    "nodeName": st.text(max_size=10), "priorityClassName": st.text(max_size=10),
                    "hostNetwork": st.booleans()}),
    "status": shaped({"qosClass": st.sampled_from(["Guaranteed", "Burstable", "BestEffort", "x", ""]),
                      "phase": st.sampled_from(["Running", "Pending", "Succeeded"]),
                      "containerStatuses": st.lists(shaped({"name": st.text(max_size=10),
                                                            "containerID": st.text(max_size=20)}), max_size=3),
                      "podIP": ip_text, "podIPs": st.lists(shaped({"ip": ip_text}), max_size=3)}),
}, junk_rate=6)
"""A v1.Pod as kubelet lists it, any field wrong, missing or in another case."""

pod_list = shaped({"kind": st.just("PodList"), "apiVersion": st.just("v1"), "items": st.lists(pod, max_size=4)},
                  junk_rate=8)
reserved = st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage", "pid"]), quantity_value, max_size=3)
configz = shaped({"kubeletconfig": shaped({
    "kubeReserved": reserved, "systemReserved": reserved, "reservedSystemCPUs": cpulist_text,
    "cpuManagerPolicy": st.sampled_from(["none", "static", "", "Static", "dynamic"])})}, junk_rate=8)


@fuzz_settings(300)
@given(obj=st.one_of(pod, pod, junk_json()))
@example(obj={"metadata": {"uid": "u", "name": "n"}, "status": {"qosClass": ["Guaranteed"]}})
def test_pod_from_json(obj: Any) -> None:
    decode("kubelet pod_from_json", lambda: pod_from_json(obj), (ParseError,))


@fuzz_settings(200)
@given(obj=st.one_of(pod_list, junk_json()))
def test_pods_from_podlist(obj: Any) -> None:
    decode("kubelet pods_from_podlist", lambda: pods_from_podlist(obj), (ParseError,))


def _client_answering(body: bytes) -> KubeletClient:
    """A client whose HTTP fetch returns ``body`` (the parsing path from the bytes on, without a socket)."""
    client = KubeletClient(KubeletOptions(scheme="http", port=10255, token_file=""))
    client._fetch = lambda path="/pods": (body, "application/json")  # type: ignore[method-assign]
    return client


@fuzz_settings(200)
@given(body=st.one_of(json_bytes(pod_list), raw_bytes))
@example(body=b"[" * 3000)
def test_get_pods_body(body: bytes) -> None:
    decode("kubelet KubeletClient.get_pods(body)", lambda: _client_answering(body).get_pods(), (KubeletError,))


@fuzz_settings(250)
@given(obj=st.one_of(configz, junk_json()))
@example(obj={"kubeletconfig": {"reservedSystemCPUs": "0-4294967295"}})
@example(obj={"kubeletconfig": {"cpuManagerPolicy": ["static"]}})
def test_reservation_from_configz(obj: Any) -> None:
    decode("kubelet reservation_from_configz", lambda: reservation_from_configz(obj), (ParseError,))


@fuzz_settings(200)
@given(body=st.one_of(json_bytes(configz), raw_bytes))
def test_get_reservation_body(body: bytes) -> None:
    decode("kubelet KubeletClient.get_reservation(body)", lambda: _client_answering(body).get_reservation(),
           (KubeletError,))
