"""Node annotations the companion owns, written with a JSON merge patch on the Node (``patch nodes``): today
the CPU normalization ratio (``node.koordinator.sh/cpu-normalization-ratio``), which upstream's slo-controller
sets on the Node object the same way.  Only the named keys are sent, so the Node's other annotations (kubelet's,
the user's, other controllers') are never touched, and a ``None`` value removes its key.

Also the read of a NodeResourceTopology's annotations, which the ratio is computed from when no koordlet report
reached this replica."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from koordlet.companion.kube.backoff import ApplyResult, WriteBackoff
from koordlet.companion.kube.client import MERGE_PATCH, REQUEST_TIMEOUT_SECONDS, KubeApiError, call_json
from koordlet.companion.kube.nrt import NRT_GROUP, NRT_PLURAL, NRT_VERSION

MAX_VALUE_BYTES = 1024
"""The longest value this writer sends (its values are short numbers; a bigger one is a bug, refused before
the request)."""


def annotations_patch(annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """The merge patch setting (or, for None, removing) ``annotations``; raises ValueError on a bad key or value."""
    body: dict[str, str | None] = {}
    for key, value in annotations.items():
        if not isinstance(key, str) or not key or "/" not in key:
            raise ValueError(f"annotation key must be a prefixed name, got {key!r}")
        if value is not None and (not isinstance(value, str) or len(value.encode()) > MAX_VALUE_BYTES):
            raise ValueError(f"annotation {key}: value must be a string of at most {MAX_VALUE_BYTES} bytes")
        body[key] = value
    return {"metadata": {"annotations": body}}


class NodeAnnotationWriter:
    """Patches a node's annotations, with the per-node :class:`WriteBackoff` of the other writers (a node whose
    patch is refused for good is skipped until its pause ends, then queued again through ``on_retry``)."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_seconds
        self.backoff = WriteBackoff("node annotations", on_retry=on_retry)

    def apply(self, node: str, annotations: Mapping[str, str | None]) -> ApplyResult:
        """UPDATED once the patch is in, DEFERRED while the node backs off."""
        body = annotations_patch(annotations)  # bad values raise before any backoff

        def write() -> ApplyResult:
            call_json(self._core.patch_node, node, body, timeout=self._timeout, _content_type=MERGE_PATCH)
            return ApplyResult.UPDATED

        return self.backoff.guard(node, write)


def nrt_annotations(api_client: client.ApiClient, node: str, *,
                    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> dict[str, str] | None:
    """The annotations of the node's NodeResourceTopology (``get noderesourcetopologies``, as upstream's CPU
    normalization plugin reads the CPU basic info); None when there is no such object."""
    try:
        obj = call_json(client.CustomObjectsApi(api_client).get_cluster_custom_object, NRT_GROUP, NRT_VERSION,
                        NRT_PLURAL, node, timeout=timeout_seconds)
    except KubeApiError as err:
        if err.status == 404:
            return None
        raise
    annotations = (obj.get("metadata") or {}).get("annotations") if isinstance(obj, dict) else None
    return {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {}
