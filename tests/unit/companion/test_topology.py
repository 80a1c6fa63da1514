"""Node topology reports -> NodeResourceTopology objects, with the real ``kubernetes`` client against the fake
apiserver: the report is checked and rendered as upstream's annotations, only the replica receiving the node's
reports writes it, and only when the content changed (upstream ``isChanged``); what other components put in the
object stays; a bad report keeps the last good one; the whole chain runs from a koordlet's NodeMetric sink over
gRPC."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import ApplyResult, make_api_client
from koordlet.companion.kube.nrt import NodeResourceTopologyWriter
from koordlet.companion.topology import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_MANAGER_POLICY,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_POD_CPU_ALLOCS,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
    TopologyError,
    TopologyReports,
    parse_report,
)
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
from tests.fixtures.fakeapiserver import FakeApiServer, make_node
from tests.fixtures.waiting import wait_until
from tests.unit.statesinformer.test_topology import EXPECTED

PLURAL = "noderesourcetopologies"


def test_report_rendered_as_upstream_annotations() -> None:
    """Go's json.Marshal of upstream's types: compact, declaration order, omitempty, nil lists as null."""
    topo = parse_report(EXPECTED)
    assert topo.annotations[ANNOTATION_CPU_TOPOLOGY].startswith(
        '{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":1,"socket":0,"node":0},')
    assert topo.annotations[ANNOTATION_CPU_BASIC_INFO] == (
        '{"cpuModel":"Intel(R) Xeon(R) Platinum 8269CY","hyperThreadEnabled":true,"vendorID":"GenuineIntel"}')
    assert topo.annotations[ANNOTATION_CPU_MANAGER_POLICY] == (
        '{"policy":"static","options":{"full-pcpus-only":"true"},"reservedCPUs":"0,4"}')
    assert topo.annotations[ANNOTATION_POD_CPU_ALLOCS] == (
        '[{"namespace":"default","name":"g","uid":"uid-g","cpuset":"3","managedByKubelet":true},'
        '{"uid":"uid-gone","cpuset":"5","managedByKubelet":true}]')
    assert topo.annotations[ANNOTATION_CPU_SHARED_POOLS] == (
        '[{"socket":0,"node":0,"cpuset":"0-1,4"},{"socket":1,"node":1,"cpuset":"7"}]')
    assert topo.annotations[ANNOTATION_BE_CPU_SHARED_POOLS] == (
        '[{"socket":0,"node":0,"cpuset":"0-1,4"},{"socket":1,"node":1,"cpuset":"6-7"}]')
    assert topo.annotations[ANNOTATION_NODE_RESERVATION] == "{}"
    reserved = parse_report(_with("nodeReservation", {"applyPolicy": "Default", "reservedCPUs": "5,4",
                                                      "resources": {"memory": "1Gi", "cpu": "2"}}))
    assert reserved.annotations[ANNOTATION_NODE_RESERVATION] == (
        '{"resources":{"cpu":"2","memory":"1Gi"},"reservedCPUs":"4-5","applyPolicy":"Default"}')
    system = parse_report(_with("systemQOSResource", {"cpuset": "7,6", "cpusetExclusive": False}))
    assert system.annotations[ANNOTATION_SYSTEM_QOS_RESOURCE] == '{"cpuset":"6-7","cpusetExclusive":false}'
    assert topo.annotations[ANNOTATION_SYSTEM_QOS_RESOURCE] == "{}"
    assert topo.topology_policies == ("SingleNUMANodePodLevel",)
    assert [z["name"] for z in topo.zones] == ["node-0", "node-1"]
    empty = parse_report({})
    assert (empty.annotations[ANNOTATION_POD_CPU_ALLOCS], empty.annotations[ANNOTATION_CPU_SHARED_POOLS],
            empty.annotations[ANNOTATION_CPU_TOPOLOGY], empty.annotations[ANNOTATION_CPU_MANAGER_POLICY],
            empty.topology_policies, empty.zones) == ("null", "null", "{}", "{}", ("None",), ())


def _with(path: str, value: Any) -> dict[str, Any]:
    report = copy.deepcopy(EXPECTED)
    target: Any = report
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return report


@pytest.mark.parametrize(("report", "message"), [
    ([], "report: expected a JSON object"),
    (_with("topologyPolicy", "Whatever"), "report.topologyPolicy: expected one of None"),
    (_with("cpuTopology.detail.0.id", -1), r"cpuTopology.detail\[0\].id: -1 out of range"),
    (_with("cpuTopology.detail.1.id", 0), r"cpuTopology.detail\[1\].id: CPU 0 listed twice"),
    (_with("cpuTopology.detail.0.core", "0"), r"cpuTopology.detail\[0\].core: expected an integer"),
    (_with("cpuTopology.detail", [{}] * 5000), "cpuTopology.detail: more than 4096 items"),
    (_with("cpuBasicInfo.cpuModel", "x" * 300), "cpuBasicInfo.cpuModel: longer than 256"),
    (_with("kubeletCPUManagerPolicy.policy", "dynamic"), "kubeletCPUManagerPolicy.policy: expected one of"),
    (_with("kubeletCPUManagerPolicy.reservedCPUs", "0-"), "kubeletCPUManagerPolicy.reservedCPUs: bad list"),
    (_with("kubeletCPUManagerPolicy.options", {"a": 1}), "kubeletCPUManagerPolicy.options"),
    (_with("podCPUAllocs.1", {"cpuset": "5"}), r"podCPUAllocs\[1\].uid: a pod allocation names"),
    (_with("cpuSharedPools.0.cpuset", "0-9999999"), r"cpuSharedPools\[0\].cpuset: id 9999999 above"),
    (_with("beCPUSharedPools.0", "0-3"), r"report.beCPUSharedPools\[0\]: expected an object"),
    (_with("nodeReservation", {"resources": {"cpu": "two"}}), r"nodeReservation.resources\['cpu'\]: not a quantity"),
    (_with("nodeReservation", {"applyPolicy": "Always"}), "nodeReservation.applyPolicy: expected Default"),
    (_with("systemQOSResource", {"cpusetExclusive": "yes"}), "systemQOSResource.cpusetExclusive: expected bool"),
    (_with("zones.0.name", "socket-0"), r"zones\[0\].name: expected a unique node-<NUMA id>"),
    (_with("zones.1.name", "node-0"), r"zones\[1\].name: expected a unique"),
    (_with("zones.0.type", "Socket"), r"zones\[0\].type: expected Node"),
    (_with("zones.0.resources.0.name", "nvidia.com/gpu"), r"zones\[0\].resources\[0\].name: expected one of cpu"),
    (_with("zones.0.resources.0.capacity", "lots"), r"zones\[0\].resources\[0\].capacity: not a quantity"),
    (_with("zones.0.resources.0.capacity", "-4"), r"zones\[0\].resources\[0\].capacity: not a quantity"),
])
def test_bad_reports_are_refused_naming_the_member(report: Any, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_report(report)


@pytest.fixture
def writer(fake_apiserver: FakeApiServer, kube_api: Any) -> NodeResourceTopologyWriter:
    fake_apiserver.seed(make_node("node-1"))
    return NodeResourceTopologyWriter(kube_api)


def test_writer_creates_owned_object_then_writes_only_changes(fake_apiserver: FakeApiServer,
                                                              writer: NodeResourceTopologyWriter) -> None:
    topo = parse_report(EXPECTED)
    assert writer.apply("node-1", topo) is ApplyResult.CREATED
    obj = fake_apiserver.get(PLURAL, "node-1")
    assert obj is not None
    node_uid = fake_apiserver.get("nodes", "node-1")["metadata"]["uid"]  # type: ignore[index]
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-1",
                                                   "uid": node_uid}]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Koordinator"}
    assert obj["metadata"]["annotations"] == dict(topo.annotations)
    assert obj["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    assert obj["zones"] == EXPECTED["zones"]
    updates = fake_apiserver.count("update", PLURAL)
    assert writer.apply("node-1", parse_report(copy.deepcopy(EXPECTED))) is ApplyResult.UNCHANGED
    assert fake_apiserver.count("update", PLURAL) == updates

    # Another component annotates the object and adds a zone resource: a changed report keeps both.
    def foreign(o: dict[str, Any]) -> None:
        o["metadata"]["annotations"]["example.com/note"] = "kept"
        o["zones"][0]["resources"].append({"name": "example.com/widget", "capacity": "2", "allocatable": "2",
                                           "available": "1"})
        o["zones"][0]["costs"] = [{"name": "node-1", "value": 20}]

    fake_apiserver.modify(PLURAL, "node-1", foreign)
    assert writer.apply("node-1", parse_report(EXPECTED)) is ApplyResult.UNCHANGED  # not ours: no change
    changed = _with("cpuSharedPools.1.cpuset", "6-7")
    assert writer.apply("node-1", parse_report(changed)) is ApplyResult.UPDATED
    obj = fake_apiserver.get(PLURAL, "node-1")
    assert obj is not None
    assert obj["metadata"]["annotations"]["example.com/note"] == "kept"
    assert json.loads(obj["metadata"]["annotations"][ANNOTATION_CPU_SHARED_POOLS])[1]["cpuset"] == "6-7"
    assert "example.com/widget" in [r["name"] for r in obj["zones"][0]["resources"]]
    assert obj["zones"][0]["costs"] == [{"name": "node-1", "value": 20}]
    # A NUMA node gone from the report: its zone goes (upstream TrimDifferentZone).
    fewer = _with("zones", [EXPECTED["zones"][0]])
    assert writer.apply("node-1", parse_report(fewer)) is ApplyResult.UPDATED
    assert [z["name"] for z in fake_apiserver.get(PLURAL, "node-1")["zones"]] == ["node-0"]  # type: ignore[index]


def test_no_object_for_a_node_that_does_not_exist(fake_apiserver: FakeApiServer,
                                                  writer: NodeResourceTopologyWriter) -> None:
    assert writer.apply("ghost", parse_report(EXPECTED)) is ApplyResult.DEFERRED  # 404 backs off alone
    assert fake_apiserver.get(PLURAL, "ghost") is None


def test_reports_written_by_their_replica_only_and_only_on_change(fake_apiserver: FakeApiServer,
                                                                  kube_api: Any) -> None:
    fake_apiserver.seed(make_node("node-1"))
    writing = False
    asked: list[str] = []

    def may_write(node: str) -> bool:
        asked.append(node)
        return writing

    reports = TopologyReports(may_write=may_write)
    reports.start(kube_api)
    try:
        reports.on_topology("node-1", EXPECTED)
        assert reports.latest("node-1") == parse_report(EXPECTED)
        with pytest.raises(TopologyError):
            reports.on_topology("node-1", _with("topologyPolicy", "bad"))
        assert reports.latest("node-1") == parse_report(EXPECTED)  # the last good one stays
        # Not this replica's node (its reports go elsewhere): nothing written, a resync included.
        asked.clear()
        reports.resync()
        wait_until("the resync handled", lambda: asked == ["node-1"])
        assert fake_apiserver.get(PLURAL, "node-1") is None
        writing = True
        reports.resync()
        wait_until("the replica's NodeResourceTopology", lambda: fake_apiserver.get(PLURAL, "node-1"))
        wait_until("the write recorded", lambda: reports.writes == 1)
        requests = len(fake_apiserver.requests)
        reports.on_topology("node-1", copy.deepcopy(EXPECTED))  # same content: not even read
        changed = _with("topologyPolicy", "None")
        reports.on_topology("node-1", changed)
        wait_until("the change written", lambda: fake_apiserver.get(PLURAL, "node-1")["topologyPolicies"]  # type: ignore[index]
                   == ["None"])
        assert fake_apiserver.count("update", PLURAL) == 1
        assert len(fake_apiserver.requests) - requests == 2  # one GET, one PUT
        reports.forget("node-1")
        assert reports.latest("node-1") is None
    finally:
        reports.stop()


def test_koordlet_report_reaches_the_object_over_grpc(fake_apiserver: FakeApiServer) -> None:
    """The koordlet's NodeMetric sink carries the topology (H5's transport); the leading companion writes it."""
    fake_apiserver.seed(make_node("node-1"))
    api = make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file)
    companion = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0", leader_elect=False,
                                           auth="none"), api)
    companion.start()
    client = CompanionClient(f"127.0.0.1:{companion.server.port}", None, "node-1")
    try:
        sink = CompanionNodeMetricSink(client)
        sink.topology = lambda: EXPECTED
        sink.report(NodeMetricStatus(update_time=time.time(),
                                     node_metric=NodeMetricInfo(ResourceMap(1000, 1 << 30))))
        wait_until("node-1's NodeResourceTopology", lambda: fake_apiserver.get(PLURAL, "node-1"))
        obj = fake_apiserver.get(PLURAL, "node-1")
        assert obj is not None and obj["metadata"]["annotations"] == dict(parse_report(EXPECTED).annotations)
    finally:
        client.close()
        companion.stop()
        api.close()
