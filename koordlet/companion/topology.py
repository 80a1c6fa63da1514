"""Node topology reports -> NodeResourceTopology objects (``topology.node.k8s.io/v1alpha1``), as Koordinator's
koordlet writes them itself (``statesinformer/impl/states_noderesourcetopology.go``); here the koordlet reports
and the companion replica receiving its reports writes, leader or not (:mod:`koordlet.companion.reports`), so
nodes need no write access to kube-apiserver.

A report (:mod:`koordlet.statesinformer.topology` builds it) is node input: every member is checked (types,
bounds, CPU lists, zone names and quantities) and re-rendered here, so an object never carries text a node
made up.  A report refused keeps the node's last good one in force.  What the object gets:

* annotations ``node.koordinator.sh/cpu-topology``, ``cpu-basic-info``, ``pod-cpu-allocs``,
  ``cpu-shared-pools``, ``be-cpu-shared-pools``, ``reservation``, ``system-qos-resource`` and
  ``kubelet.koordinator.sh/cpu-manager-policy``, in Go's ``json.Marshal`` form of upstream's types (compact,
  fields in declaration order, ``omitempty``, an empty list as ``null``);
* ``topologyPolicies``: ``[<kubelet topology manager policy>]``; ``zones``: one per NUMA node;
* on create, the label ``app.kubernetes.io/managed-by: Koordinator`` and the Node as owner.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.apis.quantity import parse_quantity
from koordlet.errors import KoordletError
from koordlet.system.validators import format_cpulist, parse_cpulist

log = logging.getLogger(__name__)

ANNOTATION_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_POD_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
MANAGED_ANNOTATIONS = (ANNOTATION_CPU_BASIC_INFO, ANNOTATION_CPU_MANAGER_POLICY, ANNOTATION_CPU_SHARED_POOLS,
                       ANNOTATION_BE_CPU_SHARED_POOLS, ANNOTATION_CPU_TOPOLOGY, ANNOTATION_POD_CPU_ALLOCS,
                       ANNOTATION_NODE_RESERVATION, ANNOTATION_SYSTEM_QOS_RESOURCE)
"""The annotations this writer owns (upstream ``managedNRTAnnotationKeys``)."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "Koordinator"
TOPOLOGY_POLICIES = ("None", "SingleNUMANodeContainerLevel", "SingleNUMANodePodLevel", "BestEffortContainerLevel",
                     "BestEffortPodLevel", "RestrictedContainerLevel", "RestrictedPodLevel")
ZONE_RESOURCES = ("cpu", "memory", "hugepages-2Mi", "hugepages-1Gi")
"""Zone resources the report may set (upstream ``managedNRTResources`` less GPUs)."""
MAX_ITEMS = 4096
"""Most CPUs, pools, pod allocations or zones one report may list (a node has at most a few hundred CPUs)."""
MAX_TEXT = 256
RESYNC_SECONDS = 600.0
"""Every node's latest report is checked against its object this often even when nothing changed (upstream's
koordlet re-checks on every topology sync)."""
_ZONE_NAME = re.compile(r"node-(\d{1,4})")
_CPU_MANAGER_POLICIES = ("none", "static")


class TopologyError(KoordletError, ValueError):
    """A report that is not a node topology; the message names the member."""


def _get(obj: Mapping[str, Any], key: str, kind: type, where: str, default: Any) -> Any:
    value: Any = obj.get(key, default)
    if value is None:
        value = default
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TopologyError(f"{where}.{key}: expected an integer, got {value!r}")
    if not isinstance(value, kind):
        raise TopologyError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, int) and not 0 <= value <= 1 << 20:
        raise TopologyError(f"{where}.{key}: {value} out of range")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise TopologyError(f"{where}.{key}: longer than {MAX_TEXT} characters")
    if isinstance(value, list) and len(value) > MAX_ITEMS:
        raise TopologyError(f"{where}.{key}: more than {MAX_ITEMS} items")
    return value


def _objects(obj: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    items: list[Mapping[str, Any]] = _get(obj, key, list, where, [])
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise TopologyError(f"{where}.{key}[{i}]: expected an object, got {type(item).__name__}")
    return items


def _cpus(obj: Mapping[str, Any], key: str, where: str) -> str:
    text = _get(obj, key, str, where, "")
    try:
        return format_cpulist(parse_cpulist(text))
    except ValueError as exc:
        raise TopologyError(f"{where}.{key}: {exc}") from None


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cpu_topology(report: Mapping[str, Any]) -> str:
    topo = _get(report, "cpuTopology", Mapping, "report", {})
    detail, seen = [], set()
    for i, cpu in enumerate(_objects(topo, "detail", "cpuTopology")):
        where = f"cpuTopology.detail[{i}]"
        entry = {k: _get(cpu, k, int, where, 0) for k in ("id", "core", "socket", "node")}
        if entry["id"] in seen:
            raise TopologyError(f"{where}.id: CPU {entry['id']} listed twice")
        seen.add(entry["id"])
        detail.append(entry)
    return _compact({"detail": sorted(detail, key=lambda e: e["id"])} if detail else {})


def _basic_info(report: Mapping[str, Any]) -> str:
    info = _get(report, "cpuBasicInfo", Mapping, "report", {})
    out: dict[str, Any] = {}
    for key, kind in (("cpuModel", str), ("hyperThreadEnabled", bool), ("turboEnabled", bool),
                      ("catL3CbmMask", str), ("vendorID", str)):
        value = _get(info, key, kind, "cpuBasicInfo", kind())
        if value:
            out[key] = value
    return _compact(out)


def _cpu_manager_policy(report: Mapping[str, Any]) -> str:
    policy = _get(report, "kubeletCPUManagerPolicy", Mapping, "report", {})
    where = "kubeletCPUManagerPolicy"
    out: dict[str, Any] = {}
    name = _get(policy, "policy", str, where, "")
    if name and name not in _CPU_MANAGER_POLICIES:
        raise TopologyError(f"{where}.policy: expected one of {', '.join(_CPU_MANAGER_POLICIES)}, got {name!r}")
    if name:
        out["policy"] = name
    options = _get(policy, "options", Mapping, where, {})
    if len(options) > 64 or not all(isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MAX_TEXT
                                    for k, v in options.items()):
        raise TopologyError(f"{where}.options: expected at most 64 short option names and string values")
    if options:
        out["options"] = dict(sorted(options.items()))
    reserved = _cpus(policy, "reservedCPUs", where)
    if reserved:
        out["reservedCPUs"] = reserved
    return _compact(out)


def _node_reservation(report: Mapping[str, Any]) -> str:
    """Upstream ``extension.NodeReservation``: resources, reservedCPUs, applyPolicy (all omitempty)."""
    reservation = _get(report, "nodeReservation", Mapping, "report", {})
    where = "nodeReservation"
    out: dict[str, Any] = {}
    resources = _get(reservation, "resources", Mapping, where, {})
    if len(resources) > 64:
        raise TopologyError(f"{where}.resources: more than 64 resources")
    checked = {}
    for name, text in sorted(resources.items()):
        if not isinstance(name, str) or not isinstance(text, str) or len(name) > MAX_TEXT:
            raise TopologyError(f"{where}.resources: expected resource names and quantity strings, got {name!r}")
        try:
            parse_quantity(text)
        except (KoordletError, ValueError) as exc:
            raise TopologyError(f"{where}.resources[{name!r}]: not a quantity: {text!r} ({exc})") from None
        checked[name] = text
    if checked:
        out["resources"] = checked
    if cpus := _cpus(reservation, "reservedCPUs", where):
        out["reservedCPUs"] = cpus
    policy = _get(reservation, "applyPolicy", str, where, "")
    if policy not in ("", "Default", "ReservedCPUsOnly"):
        raise TopologyError(f"{where}.applyPolicy: expected Default or ReservedCPUsOnly, got {policy!r}")
    if policy:
        out["applyPolicy"] = policy
    return _compact(out)


def _system_qos(report: Mapping[str, Any]) -> str:
    """Upstream ``extension.SystemQOSResource``: cpuset, cpusetExclusive (omitempty; a pointer, so false shows)."""
    system = _get(report, "systemQOSResource", Mapping, "report", {})
    out: dict[str, Any] = {}
    if cpus := _cpus(system, "cpuset", "systemQOSResource"):
        out["cpuset"] = cpus
    if system.get("cpusetExclusive") is not None:
        out["cpusetExclusive"] = _get(system, "cpusetExclusive", bool, "systemQOSResource", True)
    return _compact(out)


def _pod_allocs(report: Mapping[str, Any]) -> str:
    out = []
    for i, alloc in enumerate(_objects(report, "podCPUAllocs", "report")):
        where = f"podCPUAllocs[{i}]"
        entry: dict[str, Any] = {}
        for key in ("namespace", "name", "uid"):
            if value := _get(alloc, key, str, where, ""):
                entry[key] = value
        if "uid" not in entry:
            raise TopologyError(f"{where}.uid: a pod allocation names its pod's uid")
        entry["cpuset"] = _cpus(alloc, "cpuset", where)
        if _get(alloc, "managedByKubelet", bool, where, False):
            entry["managedByKubelet"] = True
        out.append(entry)
    return _compact(sorted(out, key=lambda e: e["uid"]) or None)


def _pools(report: Mapping[str, Any], key: str) -> str:
    out = []
    for i, pool in enumerate(_objects(report, key, "report")):
        where = f"{key}[{i}]"
        entry: dict[str, Any] = {"socket": _get(pool, "socket", int, where, 0),
                                 "node": _get(pool, "node", int, where, 0)}
        if cpus := _cpus(pool, "cpuset", where):
            entry["cpuset"] = cpus
        out.append(entry)
    return _compact(sorted(out, key=lambda e: (e["socket"], e["node"])) or None)


def _zones(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    zones, names = [], set()
    for i, zone in enumerate(_objects(report, "zones", "report")):
        where = f"zones[{i}]"
        name = _get(zone, "name", str, where, "")
        if not _ZONE_NAME.fullmatch(name) or name in names:
            raise TopologyError(f"{where}.name: expected a unique node-<NUMA id>, got {name!r}")
        names.add(name)
        if _get(zone, "type", str, where, "") != "Node":
            raise TopologyError(f"{where}.type: expected Node, got {zone.get('type')!r}")
        resources = {}
        for j, res in enumerate(_objects(zone, "resources", where)):
            rwhere = f"{where}.resources[{j}]"
            rname = _get(res, "name", str, rwhere, "")
            if rname not in ZONE_RESOURCES or rname in resources:
                raise TopologyError(f"{rwhere}.name: expected one of {', '.join(ZONE_RESOURCES)} once, got {rname!r}")
            values = {}
            for field in ("capacity", "allocatable", "available"):
                text = _get(res, field, str, rwhere, "")
                try:
                    if parse_quantity(text) < 0:
                        raise ValueError("negative")
                except (KoordletError, ValueError) as exc:
                    raise TopologyError(f"{rwhere}.{field}: not a quantity: {text!r} ({exc})") from None
                values[field] = text
            resources[rname] = {"name": rname, **values}
        zones.append({"name": name, "type": "Node", "resources": [resources[k] for k in sorted(resources)]})
    return sorted(zones, key=lambda z: z["name"])


@dataclass(frozen=True)
class NodeTopology:
    """What a node's NodeResourceTopology holds, checked and rendered."""

    annotations: Mapping[str, str]
    topology_policies: tuple[str, ...]
    zones: tuple[Mapping[str, Any], ...]

    def json_fields(self) -> dict[str, Any]:
        """The object's top-level fields (NRT v1alpha1 has no spec/status)."""
        return {"topologyPolicies": list(self.topology_policies), "zones": [dict(z) for z in self.zones]}


def parse_report(report: Any) -> NodeTopology:
    """A node's report checked and rendered; raises :class:`TopologyError` naming the bad member."""
    if not isinstance(report, Mapping):
        raise TopologyError(f"report: expected a JSON object, got {type(report).__name__}")
    policy = _get(report, "topologyPolicy", str, "report", "None")
    if policy not in TOPOLOGY_POLICIES:
        raise TopologyError(f"report.topologyPolicy: expected one of {', '.join(TOPOLOGY_POLICIES)}, got {policy!r}")
    annotations = {
        ANNOTATION_CPU_TOPOLOGY: _cpu_topology(report),
        ANNOTATION_CPU_BASIC_INFO: _basic_info(report),
        ANNOTATION_CPU_MANAGER_POLICY: _cpu_manager_policy(report),
        ANNOTATION_POD_CPU_ALLOCS: _pod_allocs(report),
        ANNOTATION_CPU_SHARED_POOLS: _pools(report, "cpuSharedPools"),
        ANNOTATION_BE_CPU_SHARED_POOLS: _pools(report, "beCPUSharedPools"),
        ANNOTATION_NODE_RESERVATION: _node_reservation(report),
        ANNOTATION_SYSTEM_QOS_RESOURCE: _system_qos(report),
    }
    return NodeTopology(annotations, (policy,), tuple(_zones(report)))


class TopologyReports:
    """The nodes' latest good reports and a writer thread that turns them into objects; only a report that
    differs from what was last written for its node is written (upstream ``isChanged``).  ``on_topology`` runs
    on the API's ingest pool: it checks and queues, never writes.

    ``may_write(node)`` says whether this replica writes the node's object now: only the replica its koordlet
    reports to does (one writer per node, whichever replica leads); a replica the koordlet left keeps the last
    report, but neither a resync nor a retry writes it over the new replica's object."""

    def __init__(self, may_write: Callable[[str], bool]) -> None:
        self._may_write = may_write
        self._lock = threading.Lock()
        self._latest: dict[str, NodeTopology] = {}
        self._written: dict[str, NodeTopology] = {}
        self._pending: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer: Any = None
        self.writes = 0

    def on_topology(self, node: str, report: Any) -> None:
        """A node's report; raises :class:`TopologyError` (the node's last good report stays) when it is bad."""
        topology = parse_report(report)
        with self._lock:
            self._latest[node] = topology
            if self._written.get(node) == topology:
                return
            self._pending.add(node)
        self._wake.set()

    def latest(self, node: str) -> NodeTopology | None:
        with self._lock:
            return self._latest.get(node)

    def start(self, api_client: Any) -> None:
        """Writes through ``api_client`` from now on (with Kubernetes only)."""
        from koordlet.companion.kube.nrt import NodeResourceTopologyWriter

        self._writer = NodeResourceTopologyWriter(api_client, on_retry=self._requeue)
        self._thread = threading.Thread(target=self._run, name="companion-topology", daemon=True)
        self._thread.start()

    def resync(self) -> None:
        """Every node's latest report is checked against its object again (those this replica may write)."""
        with self._lock:
            self._written.clear()
            self._pending.update(self._latest)
        self._wake.set()

    def rewrite(self, node: str) -> None:
        """The node reports here again after reporting elsewhere: its object may hold another replica's write,
        so its next report is written even when it equals what this replica wrote last."""
        with self._lock:
            self._written.pop(node, None)

    def forget(self, node: str) -> None:
        """The node is gone (the garbage collector removes its object)."""
        with self._lock:
            for held in (self._latest, self._written):
                held.pop(node, None)
            self._pending.discard(node)
        if self._writer is not None:
            self._writer.backoff.forget(node)

    def _requeue(self, node: str) -> None:
        with self._lock:
            if node in self._latest:
                self._pending.add(node)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._wake.wait(RESYNC_SECONDS):
                self.resync()  # an object deleted or edited by hand comes back without a new report
            self._wake.clear()
            with self._lock:
                pending = sorted((n, self._latest[n]) for n in self._pending if n in self._latest)
                self._pending.clear()
            batch = []
            for node, topology in pending:
                if self._may_write(node):
                    batch.append((node, topology))
                else:  # its koordlet reports elsewhere: that replica writes; a report back here rewrites
                    self.rewrite(node)
            for node, topology in batch:
                if self._stop.is_set():
                    return
                self._write(node, topology)

    def _write(self, node: str, topology: NodeTopology) -> None:
        from koordlet.companion.kube.backoff import ApplyResult

        try:
            result = self._writer.apply(node, topology)
        except Exception as exc:  # one node's failure must not stop the others; retried after a pause
            log.warning("NodeResourceTopology write failed, retried", extra={"node": node, "error": str(exc)})
            self._stop.wait(1.0)
            self._requeue(node)
            return
        if result is ApplyResult.DEFERRED:
            return  # the backoff's on_retry queues it again
        with self._lock:
            self._written[node] = topology
        if result is not ApplyResult.UNCHANGED:
            self.writes += 1
            log.info("NodeResourceTopology written", extra={"node": node, "result": result.value})

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._writer is not None:
            self._writer.backoff.close()
        if self._thread is not None:
            self._thread.join(5.0)
