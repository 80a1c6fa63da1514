"""Fuzzing of the fields issue 21 added to the companion API: ``topology_json`` (from every koordlet, decoded by
the companion before its listeners get it) and ``node_json`` (from the companion, decoded by the koordlet into
:class:`~koordlet.statesinformer.nodeinfo.KubeNodeInfo`, whose readers the evictions call every round).

A document that is not what it should be is a ``ParseError``; nothing else may escape, and a decoded Node's
accessors never raise."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.companion.api import CompanionServer
from koordlet.errors import ParseError
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from tests.security.fuzzkit import decode, fuzz_settings, json_bytes, junk_json, quantity_text, raw_bytes, shaped

_RESOURCES = shaped({"cpu": quantity_text, "memory": quantity_text, "kubernetes.io/batch-cpu": quantity_text,
                     "kubernetes.io/batch-memory": quantity_text, "kubernetes.io/mid-cpu": quantity_text,
                     "kubernetes.io/mid-memory": quantity_text})
_ANNOTATIONS = shaped({"node.koordinator.sh/cpu-normalization-ratio": st.one_of(
    st.sampled_from(["1.2", "0", "-1", "nan", "inf", " 1.5", "1e308", ""]), st.text(max_size=8))})
_NODE = shaped({"metadata": shaped({"name": st.text(max_size=8), "labels": junk_json(4),
                                    "annotations": _ANNOTATIONS}),
                "status": shaped({"capacity": _RESOURCES, "allocatable": _RESOURCES})})
node_bytes = st.one_of(json_bytes(_NODE), json_bytes(_NODE), json_bytes(junk_json(8)), raw_bytes)
topology_bytes = st.one_of(json_bytes(junk_json(12)), raw_bytes)


def _read_everything(raw: bytes) -> None:
    info = KubeNodeInfo.from_json(raw)
    for resource in ("cpu", "memory", "kubernetes.io/batch-cpu", "kubernetes.io/mid-memory", "x"):
        info.allocatable_value(resource)
    info.batch_allocatable()
    info.mid_allocatable()
    info.capacity_cpu_milli()
    info.capacity_memory_bytes()
    info.cpu_normalization_ratio()
    info.problems()
    info.to_json()


@fuzz_settings(300)
@given(node_bytes)
@example(b'{"status": {"allocatable": {"kubernetes.io/batch-cpu": "1e999999"}}}')
@example(b'{"metadata": {"annotations": {"node.koordinator.sh/cpu-normalization-ratio": "nan"}}}')
def test_node_json(raw: bytes) -> None:
    decode("koordlet.NodeSLOUpdate.node_json", lambda: _read_everything(raw), (ParseError,))


def _ingest(topology_json: bytes) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = []
    server = CompanionServer("127.0.0.1:0", None, lambda node: None, lambda node, status: None,
                             on_topology=lambda node, topology: received.append(topology))
    server.ingest("node-a", b"{}", topology_json)
    assert all(isinstance(t, dict) for t in received)
    return received


@fuzz_settings(300)
@given(topology_bytes)
@example(b"[" * 3000)
def test_topology_json(raw: bytes) -> None:
    decode("companion.ReportNodeMetric.topology_json", lambda: _ingest(raw), (ParseError,))
