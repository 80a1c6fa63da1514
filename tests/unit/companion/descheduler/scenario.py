"""A scripted cluster for descheduler tests: nodes, owned pods and the NodeMetric each node's koordlet would
report, seeded into the fake apiserver (or turned into a Snapshot directly for pure tests).

Usage numbers are what the tests reason about: CPU in milli-cores, memory in MiB.  A node's usage is its
system usage plus the usage of every pod on it, which is how LowNodeLoad adds it up from NodeMetric."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, PodMetricInfo, ResourceMap
from koordlet.companion.descheduler.cluster import Snapshot, build_snapshot
from tests.fixtures.fakeapiserver import FakeApiServer, make_node, make_pod

MIB = 1024 * 1024


@dataclass
class PodSpec:
    name: str
    namespace: str
    node: str
    cpu: int
    """Usage in milli-cores (the request is the same)."""
    memory: int
    """Usage in MiB (the request is the same)."""
    owner: str | None = "ReplicaSet"
    priority: int | None = None
    priority_class_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def to_object(self) -> dict[str, Any]:
        obj = make_pod(self.name, self.namespace, self.node, uid=f"uid-{self.namespace}-{self.name}")
        meta = obj["metadata"]
        meta["labels"] = dict(self.labels)
        meta["annotations"] = dict(self.annotations)
        meta["creationTimestamp"] = "2026-01-02T03:04:05Z"
        if self.owner:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": self.owner, "name": f"{self.name}-owner",
                                        "uid": f"owner-{self.name}", "controller": True}]
        obj["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": f"{self.cpu}m", "memory": f"{self.memory}Mi"}}
        if self.priority is not None:
            obj["spec"]["priority"] = self.priority
        if self.priority_class_name:
            obj["spec"]["priorityClassName"] = self.priority_class_name
        if self.volumes:
            obj["spec"]["volumes"] = self.volumes
        obj["spec"].update(self.spec)
        return obj


@dataclass
class NodeSpec:
    name: str
    cpu_cores: int = 16
    memory_gib: int = 64
    labels: dict[str, str] = field(default_factory=dict)
    system_cpu: int = 400
    system_memory: int = 2048
    unschedulable: bool = False

    @property
    def cpu_milli(self) -> int:
        return self.cpu_cores * 1000

    @property
    def memory_mib(self) -> int:
        return self.memory_gib * 1024


@dataclass
class Scenario:
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodSpec] = field(default_factory=dict)
    metric_time: float = field(default_factory=time.time)

    def node(self, name: str, **kwargs: Any) -> NodeSpec:
        self.nodes[name] = NodeSpec(name, **kwargs)
        return self.nodes[name]

    def pod(self, name: str, node: str, cpu: int, memory: int, *, namespace: str = "default",
            **kwargs: Any) -> PodSpec:
        spec = PodSpec(name, namespace, node, cpu, memory, **kwargs)
        self.pods[spec.key] = spec
        return spec

    def pods_on(self, node: str, gone: set[tuple[str, str]] | None = None) -> list[PodSpec]:
        return [p for p in self.pods.values() if p.node == node and p.key not in (gone or set())]

    def usage(self, node: str, gone: set[tuple[str, str]] | None = None) -> tuple[int, int]:
        """(CPU milli-cores, memory MiB) of ``node`` without the pods in ``gone``."""
        spec = self.nodes[node]
        pods = self.pods_on(node, gone)
        return spec.system_cpu + sum(p.cpu for p in pods), spec.system_memory + sum(p.memory for p in pods)

    # ------------------------------------------------------------------------------------------- objects

    def node_object(self, spec: NodeSpec) -> dict[str, Any]:
        obj = make_node(spec.name, labels=spec.labels,
                        capacity={"cpu": str(spec.cpu_cores), "memory": f"{spec.memory_gib}Gi", "pods": "110"})
        if spec.unschedulable:
            obj["spec"]["unschedulable"] = True
        return obj

    def metric_object(self, spec: NodeSpec) -> dict[str, Any]:
        cpu, memory = self.usage(spec.name)
        status = NodeMetricStatus(
            update_time=self.metric_time,
            node_metric=NodeMetricInfo(node_usage=ResourceMap(cpu, memory * MIB),
                                       system_usage=ResourceMap(spec.system_cpu, spec.system_memory * MIB)),
            pods_metric=tuple(PodMetricInfo(p.name, p.namespace, ResourceMap(p.cpu, p.memory * MIB))
                              for p in self.pods_on(spec.name)),
        )
        return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": spec.name}, "spec": {}, "status": status.to_json()}

    def seed(self, server: FakeApiServer) -> None:
        for spec in self.nodes.values():
            server.seed(self.node_object(spec))
            server.seed(self.metric_object(spec))
        for pod in self.pods.values():
            server.seed(pod.to_object())

    def snapshot(self, now: float | None = None) -> Snapshot:
        """The Snapshot a round would list, without an apiserver."""
        return build_snapshot([self.node_object(n) for n in self.nodes.values()],
                              [p.to_object() for p in self.pods.values()],
                              [self.metric_object(n) for n in self.nodes.values()],
                              self.metric_time if now is None else now)


def threshold(spec: NodeSpec, percents: Mapping[str, float]) -> tuple[int, int]:
    """(CPU milli-cores, memory bytes) at ``percents`` of the node, truncated as upstream's
    ``resourceThreshold``."""
    return int(percents["cpu"] * 0.01 * spec.cpu_milli), int(percents["memory"] * 0.01 * spec.memory_mib * MIB)
