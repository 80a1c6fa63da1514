"""The Node's facts down to the koordlet (``node_json`` on the NodeSLO watch) and the topology report up
(``topology_json`` on ReportNodeMetric), end to end over TCP, and wire compatibility both ways: a koordlet or a
companion built from the proto before these fields (message classes derived from the current descriptor with
the new fields removed, so they parse exactly as the old generated code did) keeps working with the new peer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from koordlet.apis.proto.companion.v1 import companion_pb2
from koordlet.companion.api import CompanionServer, node_json_of
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.statesinformer.companion import CompanionClient, CompanionError, CompanionNodeMetricSink
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeinfo import KubeNodeInfo, ResourcePair
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.waiting import wait_until
from tests.unit.companion import test_app_kube as kube_t
from tests.unit.companion.test_api import NODE, SPEC_A, TOKEN, FakeController, sample_status, threshold
from tests.unit.companion.test_app_kube import cluster  # noqa: F401 (a fixture)

NEW_FIELDS = {"ReportNodeMetricRequest": {"topology_json"}, "WatchNodeSLORequest": {"want_node", "last_node_version"},
              "NodeSLOUpdate": {"node_json", "node_version"}}
"""Everything this issue added to companion.proto: the old peer knows none of it."""


def kube_node(batch_cpu: str = "12000", batch_memory: str = "24Gi", ratio: str | None = None,
              heartbeat: str = "t0") -> dict[str, Any]:
    annotations = {"node.koordinator.sh/cpu-normalization-ratio": ratio} if ratio is not None else {}
    return {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}, "annotations": annotations,
                         "resourceVersion": heartbeat},
            "status": {"capacity": {"cpu": "32", "memory": "128Gi"},
                       "allocatable": {"cpu": "31500m", "memory": "120Gi", "kubernetes.io/batch-cpu": batch_cpu,
                                       "kubernetes.io/batch-memory": batch_memory},
                       "conditions": [{"type": "Ready", "lastHeartbeatTime": heartbeat}]}}


class NodeController(FakeController):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, tuple[bytes, str]] = {}
        self.topologies: list[tuple[str, dict[str, Any]]] = []

    def node_for(self, node: str) -> tuple[bytes, str] | None:
        return self.nodes.get(node)

    def on_topology(self, node: str, topology: dict[str, Any]) -> None:
        self.topologies.append((node, topology))


@pytest.fixture
def controller() -> NodeController:
    return NodeController()


@pytest.fixture
def server(controller: NodeController) -> Iterator[CompanionServer]:
    srv = CompanionServer("127.0.0.1:0", TOKEN, controller.slo_for_node, controller.on_metric,
                          node_for_node=controller.node_for, on_topology=controller.on_topology)
    srv.start()
    yield srv
    srv.stop(0.5)


@pytest.fixture
def client(server: CompanionServer) -> Iterator[CompanionClient]:
    c = CompanionClient(f"127.0.0.1:{server.port}", TOKEN, NODE)
    yield c
    c.close()


@pytest.fixture
def kube_companion(cluster: Any) -> Iterator[Companion]:  # noqa: F811 (the imported fixture)
    instance = kube_t.start_companion(cluster)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def start_source(tmp_path: Path, failures: ComponentFailures
                 ) -> Iterator[Callable[[CompanionClient], tuple[CompanionNodeSLOSource, NodeSLOHolder, list]]]:
    started: list[CompanionNodeSLOSource] = []

    def start(client: CompanionClient) -> tuple[CompanionNodeSLOSource, NodeSLOHolder, list[KubeNodeInfo]]:
        holder, nodes = NodeSLOHolder(), []
        source = CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo.json", initial_backoff_seconds=0.2,
                                        max_backoff_seconds=1.0, on_node=nodes.append)
        source.start(failures.callback(f"companion-nodeslo {len(started)}"))
        started.append(source)
        return source, holder, nodes

    yield start
    for source in started:
        source.stop(2.0)


# ---------------------------------------------------------------------------------------------- node facts


def test_node_json_is_the_facts_only_and_stable_across_heartbeats() -> None:
    raw, version = node_json_of(kube_node(heartbeat="t0"))
    assert node_json_of(kube_node(heartbeat="t1")) == (raw, version), "a heartbeat is not a change"
    assert node_json_of(kube_node(batch_cpu="8000"))[1] != version
    info = KubeNodeInfo.from_json(raw)
    assert info.batch_allocatable() == ResourcePair(12000, 24 << 30)
    assert info.mid_allocatable() is None
    assert info.allocatable_value("cpu") == 31500
    assert (info.capacity_cpu_milli(), info.capacity_memory_bytes()) == (32000, 128 << 30)


@pytest.mark.parametrize(("document", "where"), [
    (b"{", "node_json: not valid JSON"),
    (b"[]", "node_json: must be an object"),
    (json.dumps({"metadata": {"labels": {"a": 1}}}).encode(), "node_json.metadata.labels.a"),
    (json.dumps({"status": {"allocatable": {"kubernetes.io/batch-cpu": "lots"}}}).encode(),
     "node_json.status.allocatable.kubernetes.io/batch-cpu"),
    (json.dumps({"status": []}).encode(), "node_json.status"),
])
def test_a_bad_node_document_is_refused_naming_the_field(document: bytes, where: str) -> None:
    with pytest.raises(ValueError, match=where.replace(".", r"\.")):
        KubeNodeInfo.from_json(document)


def test_the_normalization_ratio_is_read_and_an_invalid_one_is_absent() -> None:
    assert KubeNodeInfo.from_json(node_json_of(kube_node(ratio="1.25"))[0]).cpu_normalization_ratio() == 1.25
    assert KubeNodeInfo.from_json(node_json_of(kube_node())[0]).cpu_normalization_ratio() is None
    bad = KubeNodeInfo.from_json(node_json_of(kube_node(ratio="-3"))[0])
    assert bad.cpu_normalization_ratio() is None
    assert bad.problems() and "cpu-normalization-ratio" in bad.problems()[0]


def test_the_node_prediction_designs_mid_tier_node(shared_dir: Path) -> None:
    """crs/node-mid-tier-allocatable.yaml (designs/node-prediction.md): the koordlet reads the Node's mid-tier
    allocatable as upstream's ``ConvertQuantityToInt64`` does: mid-cpu is milli-cores, mid-memory ``Ki`` bytes."""
    document = yaml.safe_load((shared_dir / "reference/koordinator-samples/crs/node-mid-tier-allocatable.yaml")
                              .read_text())
    info = KubeNodeInfo.from_json(node_json_of(document)[0])
    assert info.mid_allocatable() == ResourcePair(16_000, 64_818_120 * 1024)
    assert info.batch_allocatable() is None


def test_the_node_reaches_the_koordlet_and_each_change_is_pushed(
        controller: NodeController, server: CompanionServer, client: CompanionClient, start_source: Any) -> None:
    controller.set(NODE, SPEC_A)
    controller.nodes[NODE] = node_json_of(kube_node())
    source, holder, nodes = start_source(client)
    wait_until("the first Node", lambda: nodes)
    assert threshold(holder) == 61
    assert nodes[-1].batch_allocatable() == ResourcePair(12000, 24 << 30)

    controller.nodes[NODE] = node_json_of(kube_node(batch_cpu="4000", ratio="1.5"))
    server.notify(NODE)  # what the companion does on a Node event whose facts changed
    wait_until("the changed Node", lambda: len(nodes) == 2)
    assert nodes[-1].batch_allocatable() == ResourcePair(4000, 24 << 30)
    assert nodes[-1].cpu_normalization_ratio() == 1.5
    assert source.last_node_version == controller.nodes[NODE][1]
    assert holder.current().generation == 1, "the NodeSLO in force did not change"


def test_an_unchanged_node_is_not_resent_to_a_watcher_that_holds_it(
        controller: NodeController, server: CompanionServer, client: CompanionClient) -> None:
    controller.set(NODE, SPEC_A)
    controller.nodes[NODE] = node_json_of(kube_node())
    first = client.watch(0)
    update = next(iter(first))
    first.cancel()
    assert (update.node_json, update.node_version) == controller.nodes[NODE]

    held = client.watch(update.generation, update.instance, update.node_version)
    try:
        held.initial_metadata()
        controller.nodes[NODE] = node_json_of(kube_node(batch_cpu="1000"))
        server.notify(NODE)
        message = next(iter(held))
        # The first message on a watch holding generation 1 and that Node is the Node's change.
        assert (message.generation, message.node_version) == (1, controller.nodes[NODE][1])
    finally:
        held.cancel()


def test_a_restarted_koordlet_starts_from_the_persisted_node(
        controller: NodeController, server: CompanionServer, client: CompanionClient, start_source: Any,
        tmp_path: Path) -> None:
    controller.set(NODE, SPEC_A)
    controller.nodes[NODE] = node_json_of(kube_node(batch_cpu="7000"))
    first, _, nodes = start_source(client)
    wait_until("the Node", lambda: nodes)
    copy = tmp_path / "nodeslo.json"
    wait_until("the persisted copy", lambda: copy.exists() and "node" in json.loads(copy.read_text()))
    first.stop(2.0)

    holder, restored = NodeSLOHolder(), []
    again = CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo.json", on_node=restored.append)
    assert again.load_persisted()  # what start() does first, with the companion possibly away
    assert restored[-1].batch_allocatable() == ResourcePair(7000, 24 << 30)
    assert again.last_node_version == controller.nodes[NODE][1]


def test_an_invalid_node_keeps_the_last_good_one(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    nodes: list[KubeNodeInfo] = []
    source = CompanionNodeSLOSource(CompanionClient("127.0.0.1:1", None, NODE), NodeSLOHolder(),
                                    tmp_path / "nodeslo.json", on_node=nodes.append)
    good = node_json_of(kube_node())
    source.apply(companion_pb2.NodeSLOUpdate(generation=1, spec_json=b"{}", node_json=good[0], node_version=good[1]))
    source.apply(companion_pb2.NodeSLOUpdate(generation=1, spec_json=b"{}", node_json=b"{\"status\": 7}",
                                             node_version="x"))
    assert len(nodes) == 1 and source.node == nodes[0] and source.last_node_version == good[1]
    assert "companion sent an invalid Node" in caplog.text


def test_the_companion_pushes_a_node_whose_facts_changed_and_ignores_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text("data: {}\n")
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", config_file=str(path), token=TOKEN))
    pushed: list[str | None] = []
    companion.server.notify = pushed.append  # type: ignore[method-assign]
    companion.set_node(kube_node(heartbeat="t0"))
    assert NODE in pushed
    pushed.clear()
    companion.set_node(kube_node(heartbeat="t1"))
    assert pushed == [], "a heartbeat is not pushed to the koordlet"
    companion.set_node(kube_node(batch_cpu="3000"))
    assert pushed == [NODE]
    raw, _ = companion.server.node_for(NODE) or (b"", "")
    assert KubeNodeInfo.from_json(raw).batch_allocatable() == ResourcePair(3000, 24 << 30)


# ---------------------------------------------------------------------------------------------- topology


def test_the_topology_goes_up_when_it_changes_and_again_after_a_reconnect(
        controller: NodeController, client: CompanionClient) -> None:
    topology: dict[str, Any] = {"cpus": [{"id": 0, "core": 0, "socket": 0, "node": 0}], "policy": "none"}
    sink = CompanionNodeMetricSink(client)
    sink.topology = lambda: topology
    for _ in range(3):
        sink.report(sample_status())
    assert controller.topologies == [(NODE, topology)]
    assert len(controller.reports) == 3
    topology = {**topology, "policy": "static"}
    sink.report(sample_status())
    sink.topology_reconnected()  # the companion restarted: it holds nothing
    sink.report(sample_status())
    assert [t["policy"] for _, t in controller.topologies] == ["none", "static", "static"]


def test_a_failing_topology_source_does_not_stop_the_report(controller: NodeController,
                                                           client: CompanionClient) -> None:
    def broken() -> dict[str, Any]:
        raise OSError("sysfs gone")

    sink = CompanionNodeMetricSink(client)
    sink.topology = broken
    sink.report(sample_status())
    assert len(controller.reports) == 1 and controller.topologies == []


@pytest.mark.parametrize(("raw", "message"), [(b"{", "topology_json: not valid JSON"),
                                             (b"[1]", "topology_json: must be a JSON object")])
def test_a_bad_topology_is_invalid_argument(server: CompanionServer, client: CompanionClient, raw: bytes,
                                            message: str) -> None:
    with pytest.raises(CompanionError, match=message) as info:
        client.report(sample_status(), topology_json=raw)
    assert "INVALID_ARGUMENT" in str(info.value)


def test_a_listener_that_refuses_a_topology_keeps_neither_the_others_nor_the_metric_from_it(tmp_path: Path) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text("data: {}\n")
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", config_file=str(path), token=TOKEN))
    seen: list[str] = []

    def refuse(node: str, topology: dict[str, Any]) -> None:
        raise ValueError("cpus[0].core: required")

    companion.topology_listeners += [refuse, lambda node, topology: seen.append(node)]
    companion.server.ingest(NODE, json.dumps(sample_status().to_json()).encode(), b'{"cpus": []}')
    assert seen == [NODE]
    assert companion.store is not None and companion._nodes[NODE].metric is not None


# ---------------------------------------------------------------------------------------------- old peers


def _old_classes() -> dict[str, Any]:
    """companion.proto as it was before the new fields: the current descriptor with them removed."""
    proto = descriptor_pb2.FileDescriptorProto()
    companion_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = "old/companion.proto"
    for message in proto.message_type:
        keep = [f for f in message.field if f.name not in NEW_FIELDS.get(message.name, set())]
        del message.field[:]
        message.field.extend(keep)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{proto.package}.{m.name}"))
            for m in proto.message_type}


OLD = _old_classes()
METHOD = "/koordinator.companion.v1.Companion/"


def test_the_old_messages_really_lack_the_new_fields() -> None:
    for name, fields in NEW_FIELDS.items():
        assert not fields & set(OLD[name].DESCRIPTOR.fields_by_name), name


def test_an_old_koordlet_gets_exactly_the_updates_it_always_got(controller: NodeController,
                                                                server: CompanionServer) -> None:
    controller.set(NODE, SPEC_A)
    controller.nodes[NODE] = node_json_of(kube_node())
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        watch = channel.unary_stream(METHOD + "WatchNodeSLO",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=OLD["NodeSLOUpdate"].FromString)(
            OLD["WatchNodeSLORequest"](node_name=NODE), metadata=(("authorization", f"Bearer {TOKEN}"),))
        stream = iter(watch)
        first = next(stream)
        assert json.loads(first.spec_json) == SPEC_A and first.generation == 1
        assert not companion_pb2.NodeSLOUpdate.FromString(first.SerializeToString()).node_json, \
            "no node_json is sent to a koordlet that did not ask"
        controller.nodes[NODE] = node_json_of(kube_node(batch_cpu="1"))
        server.notify(NODE)  # a Node change: nothing for the old koordlet ...
        controller.set(NODE, {"resourceUsedThresholdWithBE": {"enable": True}})
        server.notify(NODE)
        assert next(stream).generation == 2  # ... its next message is the spec change
        watch.cancel()

        report = channel.unary_unary(METHOD + "ReportNodeMetric", request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=OLD["ReportNodeMetricResponse"].FromString)
        answer = report(OLD["ReportNodeMetricRequest"](node_name=NODE, status_json=json.dumps(
            sample_status().to_json()).encode()), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=5)
        assert answer.accepted and controller.reports and controller.topologies == []
    finally:
        channel.close()


class OldCompanion:
    """A companion speaking the proto before the new fields (unknown fields it receives are ignored)."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.reports: list[Any] = []

    def watch(self, request: Any, context: Any) -> Iterator[Any]:
        self.requests.append(request)
        yield OLD["NodeSLOUpdate"](generation=1, spec_json=json.dumps(SPEC_A).encode(), instance="old")
        ended = threading.Event()
        context.add_callback(ended.set)  # the koordlet went (or the server stops): the stream ends
        ended.wait()

    def report(self, request: Any, context: Any) -> Any:
        self.reports.append(request)
        return OLD["ReportNodeMetricResponse"](accepted=True)


def test_a_new_koordlet_keeps_working_with_an_old_companion(start_source: Any) -> None:
    old = OldCompanion()
    server = grpc.server(ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("koordinator.companion.v1.Companion", {
        "WatchNodeSLO": grpc.unary_stream_rpc_method_handler(
            old.watch, request_deserializer=OLD["WatchNodeSLORequest"].FromString,
            response_serializer=lambda m: m.SerializeToString()),
        "ReportNodeMetric": grpc.unary_unary_rpc_method_handler(
            old.report, request_deserializer=OLD["ReportNodeMetricRequest"].FromString,
            response_serializer=lambda m: m.SerializeToString()),
    }),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = CompanionClient(f"127.0.0.1:{port}", TOKEN, NODE)
    try:
        source, holder, nodes = start_source(client)
        wait_until("the NodeSLO from the old companion", lambda: threshold(holder) == 61)
        assert nodes == [] and source.node is None, "an old companion sends no Node: none is made up"
        sink = CompanionNodeMetricSink(client)
        sink.topology = lambda: {"cpus": []}
        sink.report(sample_status())
        assert sink.failures == 0 and len(old.reports) == 1 and old.reports[0].node_name == NODE
        source.stop(2.0)
    finally:
        client.close()
        server.stop(0)


# ---------------------------------------------------------------------------------------------- with Kubernetes


def test_the_batch_allocatable_the_companion_writes_reaches_the_koordlet(
        cluster: Any,  # noqa: F811 (the imported fixture)
        kube_companion: Companion, tmp_path: Path, failures: ComponentFailures) -> None:
    """Item 5 end to end: a report -> the leader writes batch-cpu/-memory on the Node -> the Node watch sees it ->
    the koordlet's watch delivers it -> ``kube_node().batch_allocatable()`` (what the eviction reads)."""
    token = kube_t.koordlet_token(cluster)
    nodes: list[KubeNodeInfo] = []
    client = CompanionClient(f"127.0.0.1:{kube_companion.server.port}", token, "node-1")
    source = CompanionNodeSLOSource(client, NodeSLOHolder(), tmp_path / "nodeslo.json", initial_backoff_seconds=0.05,
                                    max_backoff_seconds=0.5, on_node=nodes.append)
    source.start(failures.callback("companion-nodeslo"))
    try:
        wait_until("the Node without batch resources", lambda: nodes and nodes[-1].allocatable.get("pods") == "110")
        assert nodes[-1].batch_allocatable() is None
        wait_until("the pod to be known", lambda: kube_companion.compute_batch("node-1") is not None)
        kube_t.report(kube_companion.server.port, 11, token)  # 47 cores, 55G (test_app_kube's worked example)
        wait_until("the batch allocatable on the koordlet",
                   lambda: nodes[-1].batch_allocatable() == ResourcePair(47000, 55 * kube_t.G))
    finally:
        source.stop(5)
        client.close()


def test_a_bad_persisted_node_is_ignored_and_the_spec_still_loads(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "nodeslo.json"
    path.write_text(json.dumps({"format": 1, "generation": 3, "instance": "i", "origin": "o", "spec": SPEC_A,
                                "node": {"status": {"allocatable": {"kubernetes.io/batch-cpu": "lots"}}}}))
    holder, nodes = NodeSLOHolder(), []
    source = CompanionNodeSLOSource(CompanionClient("127.0.0.1:1", None, NODE), holder, path, on_node=nodes.append)
    assert source.load_persisted()
    assert threshold(holder) == 61 and nodes == [] and source.node is None
    assert "persisted Node unusable" in caplog.text
