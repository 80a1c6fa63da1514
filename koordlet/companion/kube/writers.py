"""Writes to kube-apiserver: the node status batch patch, create-or-update of the cluster-scoped NodeSLO and
NodeMetric custom resources (owned by their Node, written only when the content differs), and eviction."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from kubernetes import client

from koordlet.apis.nodemetric import parse_time
from koordlet.companion.kube.backoff import ApplyResult, WriteBackoff
from koordlet.companion.kube.client import (
    BATCH_CPU,
    BATCH_MEMORY,
    MERGE_PATCH,
    NODEMETRIC_PLURAL,
    NODESLO_PLURAL,
    REQUEST_TIMEOUT_SECONDS,
    SLO_GROUP,
    SLO_VERSION,
    KubeApiError,
    call_json,
    resource_version_of,
)

log = logging.getLogger(__name__)


NodeLookup = Callable[[str], Mapping[str, Any] | None]
"""The Node object of a name (a watcher's cache, say), or None when there is no such node."""


def node_owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference naming ``node`` (a v1 Node object) as the owner of an object.

    The garbage collector deletes a dependent once none of its owners exists (matched by uid), so the NodeSLO
    and NodeMetric of a deleted node go with it and the companion needs no delete permission.  Neither
    ``controller`` nor ``blockOwnerDeletion`` is set: nothing adopts these objects by controller reference, and
    ``blockOwnerDeletion: true`` would need ``update`` on ``nodes/finalizers`` (the
    OwnerReferencesPermissionEnforcement admission plugin) only to make a foreground deletion of the Node wait
    for its NodeSLO, which buys nothing.
    """
    meta = node.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    if not name or not uid:
        raise ValueError(f"a Node owner needs metadata.name and metadata.uid, got {name!r} / {uid!r}")
    return {"apiVersion": "v1", "kind": "Node", "name": str(name), "uid": str(uid)}


def _owned_by_node(meta: Mapping[str, Any], node: str) -> bool:
    return any(isinstance(ref, Mapping) and ref.get("kind") == "Node" and ref.get("apiVersion") == "v1"
               and ref.get("name") == node and ref.get("uid") for ref in meta.get("ownerReferences") or [])


class _NodeOwners:
    """Finds the Node that owns a node's objects: from ``lookup`` when given, else ``GET /api/v1/nodes/<name>``
    (once per object created or adopted, not per write)."""

    def __init__(self, api_client: client.ApiClient, lookup: NodeLookup | None, timeout_seconds: float) -> None:
        self._core = client.CoreV1Api(api_client)
        self._lookup = lookup
        self._timeout = timeout_seconds

    def reference(self, node: str, what: str) -> dict[str, Any]:
        """The owner reference for ``node``; a 404 :class:`KubeApiError` (permanent) when the node does not
        exist: an object without an existing owner would never be collected."""
        obj: Mapping[str, Any] | None
        if self._lookup is not None:
            obj = self._lookup(node)
        else:
            try:
                obj = call_json(self._core.read_node, node, timeout=self._timeout)
            except KubeApiError as err:
                if err.status != 404:
                    raise
                obj = None
        if obj is None or not (obj.get("metadata") or {}).get("uid"):
            raise KubeApiError(404, "NotFound", f"node {node} does not exist: its {what} is not written (nothing "
                                                f"would garbage-collect it)")
        return node_owner_reference(obj)

    def adopted(self, node: str, what: str, meta: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """``meta``'s ownerReferences with the node added (an object made before owners were set, or by
        someone else); None when it already names the node."""
        if _owned_by_node(meta, node):
            return None
        ours = self.reference(node, what)
        others = [dict(ref) for ref in meta.get("ownerReferences") or []
                  if isinstance(ref, Mapping) and not (ref.get("kind") == "Node" and ref.get("name") == node)]
        return [*others, ours]


def patch_node_batch_resources(
    api_client: client.ApiClient,
    node: str,
    batch_cpu_milli: int | None,
    batch_memory_bytes: int | None,
    *,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """Sets ``kubernetes.io/batch-cpu``/``batch-memory`` in the node's status capacity and allocatable.

    A JSON merge patch on the status subresource; None removes the key (a merge-patch ``null``).
    Returns the patched Node.
    """
    body = _batch_patch(batch_cpu_milli, batch_memory_bytes)
    node_obj: dict[str, Any] = call_json(client.CoreV1Api(api_client).patch_node_status, node, body,
                                     timeout=timeout_seconds, _content_type=MERGE_PATCH)
    return node_obj


def _batch_patch(batch_cpu_milli: int | None, batch_memory_bytes: int | None) -> dict[str, Any]:
    values: dict[str, str | None] = {}
    for key, value in ((BATCH_CPU, batch_cpu_milli), (BATCH_MEMORY, batch_memory_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{key} must be a non-negative integer or None, got {value!r}")
        values[key] = None if value is None else str(value)
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


class NodeBatchResourceWriter:
    """:func:`patch_node_batch_resources` with the per-node :class:`WriteBackoff`: a node whose patch is refused
    for good (gone: 404; rejected: 422) is skipped until its pause ends instead of holding up the writer."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self._api = api_client
        self._timeout = timeout_seconds
        self.backoff = WriteBackoff("node batch resources", on_retry=on_retry)

    def apply(self, node: str, batch_cpu_milli: int | None, batch_memory_bytes: int | None) -> ApplyResult:
        """UPDATED once the patch is in (kube-apiserver skips a no-op patch itself), DEFERRED while backing off."""
        _batch_patch(batch_cpu_milli, batch_memory_bytes)  # bad values raise ValueError before any backoff

        def write() -> ApplyResult:
            patch_node_batch_resources(self._api, node, batch_cpu_milli, batch_memory_bytes,
                                       timeout_seconds=self._timeout)
            return ApplyResult.UPDATED

        return self.backoff.guard(node, write)


# --- mid-tier resources ---------------------------------------------------------------------------

def _mid_patch(mid_cpu_milli: int | None, mid_memory_bytes: int | None) -> dict[str, Any]:
    from koordlet.apis.extension import RESOURCE_MID_CPU, RESOURCE_MID_MEMORY

    values: dict[str, str | None] = {}
    for key, value in ((RESOURCE_MID_CPU, mid_cpu_milli), (RESOURCE_MID_MEMORY, mid_memory_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{key} must be a non-negative integer or None, got {value!r}")
        # Upstream writes mid-cpu as an integer count of milli-cores, like batch-cpu.
        values[key] = None if value is None else str(value)
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


class NodeMidResourceWriter:
    """Sets ``kubernetes.io/mid-cpu``/``mid-memory`` in the node's status capacity and allocatable (a JSON
    merge patch on the status subresource, None removes the key), with the per-node backoff of the batch
    writer."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self._api = api_client
        self._timeout = timeout_seconds
        self.backoff = WriteBackoff("node mid resources", on_retry=on_retry)

    def apply(self, node: str, mid_cpu_milli: int | None, mid_memory_bytes: int | None) -> ApplyResult:
        body = _mid_patch(mid_cpu_milli, mid_memory_bytes)  # bad values raise ValueError before any backoff

        def write() -> ApplyResult:
            call_json(client.CoreV1Api(self._api).patch_node_status, node, body, timeout=self._timeout,
                      _content_type=MERGE_PATCH)
            return ApplyResult.UPDATED

        return self.backoff.guard(node, write)

# --- end mid-tier resources -----------------------------------------------------------------------------------


class _ClusterCustomObjects:
    """Get/create/replace of one cluster-scoped custom resource, as JSON."""

    def __init__(self, api_client: client.ApiClient, plural: str, kind: str, timeout_seconds: float) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self.plural = plural
        self.kind = kind
        self._timeout = timeout_seconds

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = call_json(self._api.get_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                        name, timeout=self._timeout)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return obj

    def list(self, **selectors: str) -> dict[str, Any]:
        """The list (``kubectl get <plural>``): ``items`` and ``metadata.resourceVersion``."""
        body: dict[str, Any] = call_json(self._api.list_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                     timeout=self._timeout, **selectors)
        return body

    def create(self, name: str, spec: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{SLO_GROUP}/{SLO_VERSION}", "kind": self.kind,
                "metadata": {"name": name, "ownerReferences": [dict(owner)]}, "spec": copy.deepcopy(dict(spec))}
        obj: dict[str, Any] = call_json(self._api.create_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                    body, timeout=self._timeout)
        return obj

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with the object's resourceVersion (409 when someone wrote in between)."""
        new: dict[str, Any] = call_json(self._api.replace_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                    obj["metadata"]["name"], obj, timeout=self._timeout)
        return new

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        new: dict[str, Any] = call_json(self._api.replace_cluster_custom_object_status, SLO_GROUP, SLO_VERSION,
                                    self.plural, obj["metadata"]["name"], obj, timeout=self._timeout)
        return new


def _conflict(err: KubeApiError) -> bool:
    return err.status == 409


_ATTEMPTS = 3
"""Writes retried after a 409 (someone else wrote in between), each after a fresh read."""


class NodeSLOWriter:
    """Creates or updates ``NodeSLO/<node>`` with the given spec, writing only when it differs.

    The object is owned by its Node (:func:`node_owner_reference`); an existing object without that owner is
    adopted at the next apply.  A node whose write is refused for good backs off alone (:attr:`backoff`).
    ``node_lookup`` (a Node watcher's cache) saves the ``GET node`` made when an object is created or adopted.
    """

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 node_lookup: NodeLookup | None = None, on_retry: Callable[[str], None] | None = None) -> None:
        self._objects = _ClusterCustomObjects(api_client, NODESLO_PLURAL, "NodeSLO", timeout_seconds)
        self._owners = _NodeOwners(api_client, node_lookup, timeout_seconds)
        self.backoff = WriteBackoff("NodeSLO", on_retry=on_retry)
        # node -> (resourceVersion our last write produced, spec we wrote): a server that normalises the
        # spec (defaulting, pruning) must not make every apply a write.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}

    def get(self, node: str) -> dict[str, Any] | None:
        return self._objects.get(node)

    def list(self, **selectors: str) -> dict[str, Any]:
        return self._objects.list(**selectors)

    def apply(self, node: str, spec: Mapping[str, Any]) -> ApplyResult:
        wanted = copy.deepcopy(dict(spec))
        return self.backoff.guard(node, lambda: self._apply(node, wanted))

    def _apply(self, node: str, wanted: dict[str, Any]) -> ApplyResult:
        for _ in range(_ATTEMPTS):
            current = self._objects.get(node)
            try:
                if current is None:
                    created = self._objects.create(node, wanted, self._owners.reference(node, "NodeSLO"))
                    self._written[node] = (resource_version_of(created), wanted)
                    return ApplyResult.CREATED
                owners = self._owners.adopted(node, "NodeSLO", current.get("metadata") or {})
                written = (resource_version_of(current), wanted)
                if owners is None and (current.get("spec") == wanted or self._written.get(node) == written):
                    return ApplyResult.UNCHANGED
                body = copy.deepcopy(current)
                body["spec"] = wanted
                if owners is not None:
                    body["metadata"]["ownerReferences"] = owners
                updated = self._objects.replace(body)
                self._written[node] = (resource_version_of(updated), wanted)
                return ApplyResult.UPDATED
            except KubeApiError as err:
                if not _conflict(err):
                    raise
        raise KubeApiError(409, "Conflict", f"NodeSLO {node} kept changing during {_ATTEMPTS} attempts")

    def forget(self, node: str) -> None:
        """The node is gone: drop what is remembered of it (the garbage collector removes the object)."""
        self._written.pop(node, None)
        self.backoff.forget(node)


class NodeMetricWriter:
    """Creates or updates ``NodeMetric/<node>``: ``spec.metricCollectPolicy`` on the object, ``status``
    through the status subresource; each written only when it differs.  Owned by its Node and backed off per
    node like :class:`NodeSLOWriter`.  A status is not written over a later one (``updateTime``) that another
    writer put there: the node's reports have moved to another companion replica."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 node_lookup: NodeLookup | None = None, on_retry: Callable[[str], None] | None = None) -> None:
        self._objects = _ClusterCustomObjects(api_client, NODEMETRIC_PLURAL, "NodeMetric", timeout_seconds)
        self._owners = _NodeOwners(api_client, node_lookup, timeout_seconds)
        self.backoff = WriteBackoff("NodeMetric", on_retry=on_retry)
        self._status_written: dict[str, dict[str, Any]] = {}
        """node -> the status this writer last wrote."""

    def get(self, node: str) -> dict[str, Any] | None:
        return self._objects.get(node)

    def list(self, **selectors: str) -> dict[str, Any]:
        """``kubectl get nodemetric``: the list with ``items`` and ``metadata.resourceVersion``."""
        return self._objects.list(**selectors)

    def apply(
        self, node: str, status: Mapping[str, Any], collect_policy: Mapping[str, Any] | None = None
    ) -> ApplyResult:
        """Writes ``status`` and (unless None) ``spec.metricCollectPolicy``."""
        wanted_status = copy.deepcopy(dict(status))
        wanted_policy = copy.deepcopy(dict(collect_policy)) if collect_policy is not None else None
        return self.backoff.guard(node, lambda: self._apply(node, wanted_status, wanted_policy))

    def _apply(self, node: str, wanted_status: dict[str, Any], wanted_policy: dict[str, Any] | None) -> ApplyResult:
        created = changed = False
        for _ in range(_ATTEMPTS):
            current = self._objects.get(node)
            try:
                if current is None:
                    spec = {"metricCollectPolicy": wanted_policy} if wanted_policy is not None else {}
                    current = self._objects.create(node, spec, self._owners.reference(node, "NodeMetric"))
                    created = True
                owners = self._owners.adopted(node, "NodeMetric", current.get("metadata") or {})
                policy = (current.get("spec") or {}).get("metricCollectPolicy")
                if owners is not None or (wanted_policy is not None and policy != wanted_policy):
                    body = copy.deepcopy(current)
                    if wanted_policy is not None:
                        body.setdefault("spec", {})["metricCollectPolicy"] = wanted_policy
                    if owners is not None:
                        body["metadata"]["ownerReferences"] = owners
                    current = self._objects.replace(body)
                    changed = True
                held = current.get("status")
                if held != wanted_status and held != self._status_written.get(node) and _newer(held, wanted_status):
                    # Another replica, now receiving the node's reports, wrote a later one: ours is stale.  (A
                    # later one of our own is overwritten: the node's clock may have stepped back.)
                    log.info("NodeMetric holds a newer report, not overwritten", extra={"node": node})
                elif held != wanted_status:
                    body = copy.deepcopy(current)
                    body["status"] = wanted_status
                    self._objects.replace_status(body)
                    self._status_written[node] = wanted_status
                    changed = True
            except KubeApiError as err:
                if not _conflict(err):
                    raise
                continue
            if created:
                return ApplyResult.CREATED
            return ApplyResult.UPDATED if changed else ApplyResult.UNCHANGED
        raise KubeApiError(409, "Conflict", f"NodeMetric {node} kept changing during {_ATTEMPTS} attempts")

    def forget(self, node: str) -> None:
        """The node is gone (the garbage collector removes the object)."""
        self._status_written.pop(node, None)
        self.backoff.forget(node)


def _update_time(status: Any) -> float | None:
    try:
        return parse_time(status["updateTime"])
    except (TypeError, KeyError, ValueError):
        return None


def _newer(current: Any, wanted: Mapping[str, Any]) -> bool:
    """Whether the object's status reports a later ``updateTime`` than the one to write."""
    held, ours = _update_time(current), _update_time(wanted)
    return held is not None and ours is not None and held > ours


class EvictionResult(Enum):
    """The answer of the Eviction API."""

    EVICTED = "evicted"
    """201: the pod is being deleted with the given grace period."""
    BLOCKED_BY_PDB = "blocked_by_pdb"
    """429: a PodDisruptionBudget forbids it now (the API's priority-and-fairness throttling answers 429
    too; either way, try again later)."""
    GONE = "gone"
    """404: the pod no longer exists."""


def evict_pod(
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    grace_seconds: int | None = None,
    *,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> EvictionResult:
    """Evicts a pod through ``POST .../pods/<name>/eviction`` (policy/v1); other failures raise
    :class:`KubeApiError`."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if grace_seconds is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": int(grace_seconds)}
    eviction = client.V1Eviction.from_dict(body)
    try:
        call_json(client.CoreV1Api(api_client).create_namespaced_pod_eviction, name, namespace, eviction,
              timeout=timeout_seconds)
    except KubeApiError as err:
        if err.status == 429:
            log.info("eviction blocked", extra={"pod": f"{namespace}/{name}", "reason": err.message})
            return EvictionResult.BLOCKED_BY_PDB
        if err.status == 404:
            return EvictionResult.GONE
        raise
    return EvictionResult.EVICTED
