"""Whether an evicted pod could land on another node (upstream ``pkg/descheduler/node/node.go`` ``NodeFit``): its
node selector and required node affinity, NoSchedule/NoExecute taints against its tolerations, its requests
against what the node has left, and the node being schedulable."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from koordlet.apis.gojson import member
from koordlet.companion.descheduler.cluster import CPU, MEMORY, PODS, NodeInfo, PodInfo


def requested_on(pods: Iterable[PodInfo]) -> dict[str, int]:
    """Upstream ``NodeUtilization``: the summed requests of ``pods`` plus their count under ``pods``."""
    total: dict[str, int] = {CPU: 0, MEMORY: 0, PODS: 0}
    for pod in pods:
        total[PODS] += 1
        for name, value in pod.requests.items():
            if name != PODS:
                total[name] = total.get(name, 0) + value
    return total


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _requirement_holds(requirement: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key = str(member(requirement, "key") or "")
    operator = member(requirement, "operator")
    values = [str(v) for v in _as_list(member(requirement, "values"))]
    present = key in values_of
    if operator == "In":
        return present and values_of[key] in values
    if operator == "NotIn":
        return not present or values_of[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    # An unknown operator is an invalid selector, which matches nothing (nodeaffinity.NewNodeSelector errors).
    return False


def _term_matches(term: Mapping[str, Any], node: NodeInfo) -> bool:
    expressions = _as_list(member(term, "matchExpressions"))
    fields = _as_list(member(term, "matchFields"))
    if not expressions and not fields:
        return False  # an empty term matches no node (k8s.io/component-helpers nodeaffinity)
    return (all(_requirement_holds(_as_map(r), node.labels) for r in expressions)
            and all(_requirement_holds(_as_map(r), {"metadata.name": node.name}) for r in fields))


def matches_node_selector(pod: PodInfo, node: NodeInfo) -> bool:
    """``spec.nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution`` (terms ORed)."""
    spec = _as_map(member(pod.raw, "spec"))
    for key, value in _as_map(member(spec, "nodeSelector")).items():
        if node.labels.get(str(key)) != str(value):
            return False
    affinity = _as_map(member(_as_map(member(spec, "affinity")), "nodeAffinity"))
    required = member(affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    terms = _as_list(member(_as_map(required), "nodeSelectorTerms"))
    return any(_term_matches(_as_map(term), node) for term in terms)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``."""
    effect = member(toleration, "effect") or ""
    if effect and effect != member(taint, "effect"):
        return False
    key = member(toleration, "key") or ""
    if key and key != member(taint, "key"):
        return False
    operator = member(toleration, "operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (member(toleration, "value") or "") == (member(taint, "value") or "")


def tolerates_taints(pod: PodInfo, node: NodeInfo) -> bool:
    """Every NoSchedule/NoExecute taint of ``node`` is tolerated by ``pod`` (PreferNoSchedule is ignored)."""
    tolerations = [_as_map(t) for t in _as_list(member(_as_map(member(pod.raw, "spec")), "tolerations"))]
    for taint in node.taints:
        if member(taint, "effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def insufficient_resources(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> list[str]:
    """Upstream ``fitsRequest``: each resource ``pod`` requests against the node's allocatable minus
    ``requested`` (a resource the node does not offer has nothing left)."""
    reasons: list[str] = []
    for name, want in pod.requests.items():
        if name not in node.allocatable and name not in (CPU, MEMORY, PODS):
            if want > 0:
                reasons.append(f"insufficient {name}")
            continue
        if want > node.allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"insufficient {name}")
    return reasons


def node_fit_reasons(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> list[str]:
    """Why ``pod`` would not fit ``node`` (empty: it fits).  ``requested`` is what the node's pods already
    request (:func:`requested_on`, plus whatever the caller already plans to move there)."""
    reasons: list[str] = []
    if not matches_node_selector(pod, node):
        reasons.append("pod node selector does not match the node label")
    if not tolerates_taints(pod, node):
        reasons.append("pod does not tolerate taints on the node")
    reasons.extend(insufficient_resources(pod, node, requested))
    if node.unschedulable:
        reasons.append("node is not schedulable")
    return reasons


def fits_any_other_node(pod: PodInfo, nodes: Iterable[NodeInfo], requested: Mapping[str, Mapping[str, int]]
                        ) -> bool:
    """Upstream ``PodFitsAnyOtherNode``: some node other than the pod's own would take it."""
    return any(node.name != pod.node and not node_fit_reasons(pod, node, requested.get(node.name, {}))
               for node in nodes)
