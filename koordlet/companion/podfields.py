"""The part of a Pod the companion keeps: what its readers use (the batch and mid calculations through
:func:`koordlet.apis.pod.pod_from_json`, the extender's :func:`~koordlet.companion.extender.pods.parse_pod`, the
eviction check of a pod's node), nothing else.

A 150,000-pod cluster sends about 10-20 KB per Pod (managed fields, env, probes, volumes, a last-applied
annotation); the companion needs a few hundred bytes of it.  The watcher trims every listed and watched object
before it hands it on, so the whole Pod never outlives the decoding of its page or event, and caches only
:func:`pod_identity` of it: the companion's readers keep their own state of each pod.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

METADATA: Final = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "creationTimestamp",
                   "deletionTimestamp")
SPEC: Final = ("nodeName", "priority", "priorityClassName", "schedulerName", "overhead")
STATUS: Final = ("phase", "qosClass")
ANNOTATION_DOMAIN: Final = "koordinator.sh/"
"""Annotations kept: Koordinator's (``*.koordinator.sh/...``); kubectl's last-applied copy and the like go."""


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        return {}
    return {k: obj[k] for k in keys if k in obj}


def _intern(fields: dict[str, Any], key: str) -> None:
    value = fields.get(key)
    if type(value) is str:
        fields[key] = sys.intern(value)


def _containers(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [_pick(c, ("name", "resources")) for c in items if isinstance(c, Mapping)]


def pod_fields(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``pod`` the companion reads, as a Pod-shaped dict (unknown or malformed parts are dropped,
    which its readers treat as absent)."""
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    status = pod.get("status")
    out_meta = _pick(metadata, METADATA)
    _intern(out_meta, "namespace")  # a few dozen namespaces and nodes, each named by every pod of the cluster
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if isinstance(annotations, Mapping):
        kept = {k: v for k, v in annotations.items() if isinstance(k, str) and ANNOTATION_DOMAIN in k}
        if kept:
            out_meta["annotations"] = kept
    out_spec = _pick(spec, SPEC)
    _intern(out_spec, "nodeName")
    if isinstance(spec, Mapping):
        out_spec["containers"] = _containers(spec.get("containers"))
        if "initContainers" in spec:
            out_spec["initContainers"] = _containers(spec.get("initContainers"))
        volumes = spec.get("volumes")
        if isinstance(volumes, list):  # by name and kind only (the Pod view lists them; a secret's items go)
            out_spec["volumes"] = [_pick(v, ("name", "persistentVolumeClaim", "csi")) for v in volumes
                                   if isinstance(v, Mapping)]
    out_status = _pick(status, STATUS)
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, list):  # PodScheduled: when the extender's assign cache counts the pod from
        scheduled = [c for c in conditions if isinstance(c, Mapping) and c.get("type") == "PodScheduled"]
        if scheduled:
            out_status["conditions"] = scheduled
    out: dict[str, Any] = {"metadata": out_meta, "spec": out_spec, "status": out_status}
    for key in ("apiVersion", "kind"):
        if key in pod:
            out[key] = pod[key]
    return out


def pod_identity(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the pod watcher caches of a trimmed pod: enough to tell a changed pod from an unchanged one on a relist
    (``resourceVersion``) and to hand a DELETED event on (a pod's key, UID and node)."""
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    out: dict[str, Any] = {"metadata": _pick(metadata, ("name", "namespace", "uid", "resourceVersion"))}
    if isinstance(spec, Mapping) and "nodeName" in spec:
        out["spec"] = {"nodeName": spec["nodeName"]}
    return out
