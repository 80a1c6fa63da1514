"""The Node annotations the topology report carries (the companion sends the Node down to its koordlet):
``node.koordinator.sh/reservation`` and ``node.koordinator.sh/system-qos-resource`` (Koordinator
``apis/extension/node_reservation.go``, ``system_qos.go``), read and normalised as upstream's
``getNodeReserved`` and ``GetSystemQOSResource`` do."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from koordlet.apis.quantity import milli_value
from koordlet.errors import KoordletError
from koordlet.system.node import NodeInfo
from koordlet.system.validators import format_cpulist, parse_cpulist

ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"


def _object(annotations: Mapping[str, str], key: str) -> Mapping[str, Any] | None:
    text = annotations.get(key, "")
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise KoordletError(f"{key}: not JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise KoordletError(f"{key}: expected an object, got {type(raw).__name__}")
    return raw


def _cpus(raw: Mapping[str, Any], key: str, where: str) -> list[int]:
    text = raw.get(key) or ""
    if not isinstance(text, str):
        raise KoordletError(f"{where}: {key}: expected a cpu list string, got {text!r}")
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise KoordletError(f"{where}: {key}: {exc}") from None


def system_qos_resource(annotations: Mapping[str, str]) -> dict[str, Any]:
    """``{"cpuset": "0-1", "cpusetExclusive": false}`` with the CPU list normalised; {} without the annotation."""
    raw = _object(annotations, ANNOTATION_SYSTEM_QOS_RESOURCE)
    if raw is None:
        return {}
    out: dict[str, Any] = {}
    if cpus := _cpus(raw, "cpuset", ANNOTATION_SYSTEM_QOS_RESOURCE):
        out["cpuset"] = format_cpulist(cpus)
    exclusive = raw.get("cpusetExclusive")
    if exclusive is not None:
        if not isinstance(exclusive, bool):
            raise KoordletError(f"{ANNOTATION_SYSTEM_QOS_RESOURCE}: cpusetExclusive: expected a boolean, "
                                f"got {exclusive!r}")
        out["cpusetExclusive"] = exclusive
    return out

ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"


def node_reservation(node: NodeInfo, annotations: Mapping[str, str],
                     take: Callable[[NodeInfo, int], tuple[int, ...]]) -> dict[str, Any]:
    """Upstream ``getNodeReserved``: the Node's reservation (``{"resources": {"cpu": "2"}, "reservedCPUs":
    "0-1", "applyPolicy": "Default"}``) with ``reservedCPUs`` normalised or, when only a CPU quantity is
    reserved, filled with the CPUs ``take(node, count)`` chooses (kubelet's static policy's choice).  {} without
    the annotation; raises :class:`KoordletError` naming the member of a value that is not such an object."""
    raw = _object(annotations, ANNOTATION_NODE_RESERVATION)
    if raw is None:
        return {}
    out: dict[str, Any] = {}
    resources = raw.get("resources") or {}
    if not isinstance(resources, Mapping) or not all(isinstance(v, str | int) for v in resources.values()):
        raise KoordletError(f"{ANNOTATION_NODE_RESERVATION}: resources: expected a map of resource to quantity")
    if resources:
        out["resources"] = {str(k): str(v) for k, v in sorted(resources.items())}
    cpus = _cpus(raw, "reservedCPUs", ANNOTATION_NODE_RESERVATION)
    try:
        milli = milli_value(resources["cpu"]) if "cpu" in resources else 0
    except KoordletError as exc:
        raise KoordletError(f"{ANNOTATION_NODE_RESERVATION}: resources.cpu: {exc}") from None
    if not cpus and milli > 0:
        cpus = list(take(node, math.ceil(milli / 1000)))
    if cpus:
        out["reservedCPUs"] = format_cpulist(cpus)
    policy = raw.get("applyPolicy") or ""
    if policy not in ("", "Default", "ReservedCPUsOnly"):
        raise KoordletError(f"{ANNOTATION_NODE_RESERVATION}: applyPolicy: expected Default or ReservedCPUsOnly, "
                            f"got {policy!r}")
    if policy:
        out["applyPolicy"] = policy
    return out
