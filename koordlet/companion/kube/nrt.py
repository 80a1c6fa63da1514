"""Create-or-update of ``NodeResourceTopology/<node>`` (``topology.node.k8s.io/v1alpha1``, cluster-scoped; the
CRD of github.com/k8stopologyawareschedwg/noderesourcetopology-api), writing only when what the companion
manages in it differs, as upstream's ``nodeTopologyStatus.isChanged`` / ``updateNRT``:

* the managed annotations (compared as JSON, so a re-ordered but equal value is no change); others stay;
* ``topologyPolicies``;
* the zones: a zone the report no longer has is dropped, and in each zone the managed resources are replaced
  while resources other components added to it stay (upstream ``MergeZoneList(TrimDifferentZone(...))``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from koordlet.companion.kube.backoff import ApplyResult, WriteBackoff
from koordlet.companion.kube.client import REQUEST_TIMEOUT_SECONDS, KubeApiError, call_json
from koordlet.companion.kube.writers import NodeLookup, _NodeOwners
from koordlet.companion.topology import LABEL_MANAGED_BY, MANAGED_ANNOTATIONS, MANAGED_BY, ZONE_RESOURCES, NodeTopology

NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha1"
NRT_PLURAL = "noderesourcetopologies"
NRT_KIND = "NodeResourceTopology"
_ATTEMPTS = 3
"""Writes retried after a 409 (someone else wrote in between), each after a fresh read."""


def _json_or_text(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def merged_zones(current: list[Any], wanted: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
    """``wanted``'s zones, each keeping the resources other components put in the current zone of that name."""
    by_name = {z.get("name"): z for z in current if isinstance(z, Mapping)}
    out = []
    for zone in wanted:
        mine = {r["name"] for r in zone["resources"]}
        old = by_name.get(zone["name"]) or {}
        kept = [r for r in old.get("resources") or [] if isinstance(r, Mapping) and r.get("name") not in mine
                and r.get("name") not in ZONE_RESOURCES]
        merged = dict(copy.deepcopy(dict(zone)))
        merged["resources"] = [*copy.deepcopy(list(zone["resources"])), *copy.deepcopy(kept)]
        for key, value in old.items():  # costs, attributes, parent: not ours
            merged.setdefault(key, copy.deepcopy(value))
        out.append(merged)
    return out


def changed(current: Mapping[str, Any], wanted: NodeTopology) -> str:
    """Why ``current`` needs writing ("" when it does not)."""
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    for key in MANAGED_ANNOTATIONS:
        if key not in annotations or _json_or_text(annotations[key]) != json.loads(wanted.annotations[key]):
            return f"annotation {key}"
    if current.get("topologyPolicies") != list(wanted.topology_policies):
        return "topologyPolicies"
    zones = [z for z in current.get("zones") or [] if isinstance(z, Mapping)]
    if [(z.get("name"), z.get("type")) for z in zones] != [(z["name"], z["type"]) for z in wanted.zones]:
        return "zones"
    for old, new in zip(zones, wanted.zones, strict=True):
        ours = {r.get("name"): r for r in old.get("resources") or []
                if isinstance(r, Mapping) and r.get("name") in ZONE_RESOURCES}
        if ours != {r["name"]: r for r in new["resources"]}:
            return f"zone {new['name']} resources"
    return ""


def nrt_object(node: str, topology: NodeTopology, owner: Mapping[str, Any]) -> dict[str, Any]:
    """A new node's object (upstream ``newNodeTopo`` filled by ``updateNRT``)."""
    return {"apiVersion": f"{NRT_GROUP}/{NRT_VERSION}", "kind": NRT_KIND,
            "metadata": {"name": node, "labels": {LABEL_MANAGED_BY: MANAGED_BY},
                         "annotations": dict(topology.annotations), "ownerReferences": [dict(owner)]},
            **topology.json_fields()}


class NodeResourceTopologyWriter:
    """Creates or updates a node's NodeResourceTopology; owned by its Node and backed off per node like the
    NodeSLO writer (:class:`~koordlet.companion.kube.writers.NodeSLOWriter`)."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 node_lookup: NodeLookup | None = None, on_retry: Callable[[str], None] | None = None) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._timeout = timeout_seconds
        self._owners = _NodeOwners(api_client, node_lookup, timeout_seconds)
        self.backoff = WriteBackoff("NodeResourceTopology", on_retry=on_retry)

    def get(self, node: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = call_json(self._api.get_cluster_custom_object, NRT_GROUP, NRT_VERSION, NRT_PLURAL,
                                            node, timeout=self._timeout)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return obj

    def apply(self, node: str, topology: NodeTopology) -> ApplyResult:
        return self.backoff.guard(node, lambda: self._apply(node, topology))

    def _apply(self, node: str, topology: NodeTopology) -> ApplyResult:
        for _ in range(_ATTEMPTS):
            current = self.get(node)
            try:
                if current is None:
                    self._create(node, topology)
                    return ApplyResult.CREATED
                owners = self._owners.adopted(node, NRT_KIND, current.get("metadata") or {})
                if owners is None and not changed(current, topology):
                    return ApplyResult.UNCHANGED
                body = copy.deepcopy(current)
                meta = body.setdefault("metadata", {})
                meta["annotations"] = {**(meta.get("annotations") or {}), **topology.annotations}
                if owners is not None:
                    meta["ownerReferences"] = owners
                body["topologyPolicies"] = list(topology.topology_policies)
                body["zones"] = merged_zones(current.get("zones") or [], topology.zones)
                call_json(self._api.replace_cluster_custom_object, NRT_GROUP, NRT_VERSION, NRT_PLURAL, node, body,
                          timeout=self._timeout)
                return ApplyResult.UPDATED
            except KubeApiError as err:
                if err.status != 409:
                    raise
        raise KubeApiError(409, "Conflict", f"NodeResourceTopology {node} kept changing during {_ATTEMPTS} attempts")

    def _create(self, node: str, topology: NodeTopology) -> None:
        body = nrt_object(node, topology, self._owners.reference(node, NRT_KIND))
        call_json(self._api.create_cluster_custom_object, NRT_GROUP, NRT_VERSION, NRT_PLURAL, body,
                  timeout=self._timeout)

