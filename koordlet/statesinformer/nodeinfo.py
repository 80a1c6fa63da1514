"""The Kubernetes Node as the koordlet sees it: the facts the companion sends alongside NodeSLO.

The koordlet never talks to kube-apiserver, so what upstream's koordlet reads from its Node informer
(``statesinformer.GetNode()``: the allocatable ``kubernetes.io/batch-cpu``/``batch-memory`` and ``mid-*`` the
companion itself wrote, the ``node.koordinator.sh/cpu-normalization-ratio`` annotation, labels) arrives on the
NodeSLO watch as ``node_json``, a v1.Node subset::

    {"metadata": {"name", "labels", "annotations"}, "status": {"capacity", "allocatable"}}

:meth:`KubeNodeInfo.from_json` validates it (a bad document raises ParseError naming the field, and the last good
node stays in force); readers get it through ``StatesInformer.kube_node()``, None until the companion sent one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis.cpunormalization import parse_ratio
from koordlet.apis.extension import RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, RESOURCE_MID_CPU, RESOURCE_MID_MEMORY
from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ParseError

# Kubernetes' caps on a Node's annotations (256 KiB in all) and on a name: bounds the document we accept.
MAX_NODE_JSON_BYTES: Final = 1 << 20


@dataclass(frozen=True)
class ResourcePair:
    """A CPU and memory amount: CPU in milli-cores, memory in bytes."""

    cpu_milli: int
    memory_bytes: int


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(f"{where}: must be an object, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise ParseError(f"{where}.{key}: must be a string, got {type(item).__name__}")
        out[str(key)] = item
    return out


def _resources(value: Any, where: str) -> dict[str, str]:
    """A resource list; quantities are checked now so readers never meet an unparsable one."""
    if not isinstance(value, Mapping):
        raise ParseError(f"{where}: must be an object, got {type(value).__name__}")
    out = {}
    for key, item in value.items():
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            raise ParseError(f"{where}.{key}: must be a quantity, got {type(item).__name__}")
        try:
            int_value(item)
        except (ValueError, ArithmeticError) as exc:
            raise ParseError(f"{where}.{key}: {exc}") from None
        out[str(key)] = item
    return out


@dataclass(frozen=True)
class KubeNodeInfo:
    """The Node's name, labels, annotations, capacity and allocatable (quantities as Kubernetes strings)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes | str | Mapping[str, Any], where: str = "node_json") -> KubeNodeInfo:
        """Raises ParseError naming the field of a document that is not a v1.Node subset."""
        if isinstance(raw, (bytes, str)):
            if len(raw) > MAX_NODE_JSON_BYTES:
                raise ParseError(f"{where}: {len(raw)} bytes, more than {MAX_NODE_JSON_BYTES}")
            try:
                document = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                raise ParseError(f"{where}: not valid JSON: {exc}") from None
        else:
            document = raw
        if not isinstance(document, Mapping):
            raise ParseError(f"{where}: must be an object, got {type(document).__name__}")
        meta = document.get("metadata")
        meta = {} if meta is None else meta
        status = document.get("status")
        status = {} if status is None else status
        for key, part in (("metadata", meta), ("status", status)):
            if not isinstance(part, Mapping):
                raise ParseError(f"{where}.{key}: must be an object, got {type(part).__name__}")
        name = meta.get("name", "")
        if not isinstance(name, str):
            raise ParseError(f"{where}.metadata.name: must be a string, got {type(name).__name__}")
        return cls(name=name, labels=_string_map(meta.get("labels"), f"{where}.metadata.labels"),
                   annotations=_string_map(meta.get("annotations"), f"{where}.metadata.annotations"),
                   capacity=_resources(status.get("capacity") or {}, f"{where}.status.capacity"),
                   allocatable=_resources(status.get("allocatable") or {}, f"{where}.status.allocatable"))

    def to_json(self) -> dict[str, Any]:
        return {"metadata": {"name": self.name, "labels": dict(self.labels), "annotations": dict(self.annotations)},
                "status": {"capacity": dict(self.capacity), "allocatable": dict(self.allocatable)}}

    def allocatable_value(self, resource: str) -> int | None:
        """``resource``'s allocatable as an integer (milli-cores for ``cpu``, whole units otherwise: batch-cpu
        and mid-cpu are already milli-cores), as upstream's ``ConvertQuantityToInt64``; None when absent."""
        raw = self.allocatable.get(resource)
        if raw is None:
            return None
        return milli_value(raw) if resource == "cpu" else int_value(raw)

    def capacity_cpu_milli(self) -> int | None:
        raw = self.capacity.get("cpu")
        return None if raw is None else milli_value(raw)

    def capacity_memory_bytes(self) -> int | None:
        raw = self.capacity.get("memory")
        return None if raw is None else int_value(raw)

    def batch_allocatable(self) -> ResourcePair | None:
        """``kubernetes.io/batch-cpu`` (milli-cores) and ``batch-memory`` (bytes); None unless both are set."""
        return self._pair(RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY)

    def mid_allocatable(self) -> ResourcePair | None:
        """``kubernetes.io/mid-cpu`` (milli-cores) and ``mid-memory`` (bytes); None unless both are set."""
        return self._pair(RESOURCE_MID_CPU, RESOURCE_MID_MEMORY)

    def cpu_normalization_ratio(self) -> float | None:
        """The ``node.koordinator.sh/cpu-normalization-ratio`` annotation (CPUNormalization); None when absent
        or invalid (:meth:`problems` says why; the source logs it when the Node arrives)."""
        try:
            return parse_ratio(self.annotations)
        except ParseError:
            return None

    def problems(self) -> list[str]:
        """What is wrong in facts the readers treat as absent (an unparsable ratio annotation)."""
        try:
            parse_ratio(self.annotations)
        except ParseError as exc:
            return [str(exc)]
        return []

    def _pair(self, cpu: str, memory: str) -> ResourcePair | None:
        cpu_value, memory_value = self.allocatable_value(cpu), self.allocatable_value(memory)
        if cpu_value is None or memory_value is None:
            return None
        return ResourcePair(cpu_value, memory_value)

