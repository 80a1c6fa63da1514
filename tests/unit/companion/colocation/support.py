"""Shared pieces of the colocation admission tests: AdmissionReviews, a dict-backed cluster view and an
RFC 6902 applier written independently of the code under test, so a wrong patch cannot agree with itself."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.companion.colocation import PriorityClassInfo, Profile

ABSENT = object()
"""Expected value of a JSON pointer that must not resolve."""


@dataclass
class DictView:
    """ClusterView over plain dicts."""

    profile_list: Sequence[Profile] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClassInfo] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))

    def profiles(self) -> Sequence[Profile]:
        return self.profile_list

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return self.priority_classes.get(name)


DEFAULT_PRIORITY_CLASSES = {
    "koord-prod": PriorityClassInfo(9000, "PreemptLowerPriority"),
    "koord-mid": PriorityClassInfo(7000, "PreemptLowerPriority"),
    "koord-batch": PriorityClassInfo(5000, "PreemptLowerPriority"),
    "koord-free": PriorityClassInfo(3000, "Never"),
}


def profile(name: str, annotations: Mapping[str, str] | None = None, **spec: Any) -> Profile:
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return Profile.from_object({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                                "metadata": metadata, "spec": spec})


def review(pod: Mapping[str, Any] | None, *, operation: str = "CREATE", resource: str = "pods",
           sub_resource: str = "", namespace: str = "default", old: Mapping[str, Any] | None = None,
           uid: str = "7b1c8a2e") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "namespace": namespace, "operation": operation, "object": copy.deepcopy(pod)}
    if sub_resource:
        request["subResource"] = sub_resource
    if old is not None:
        request["oldObject"] = copy.deepcopy(old)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_ops(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of a response ([] when there is none, after checking the patch type is absent too)."""
    body = response["response"]
    if "patch" not in body:
        assert "patchType" not in body
        return []
    assert body["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(body["patch"]))
    assert isinstance(ops, list)
    return ops


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    assert path.startswith("/"), path
    tokens = [_unescape(token) for token in path[1:].split("/")]
    for token in tokens[:-1]:
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc, tokens[-1]


def apply_patch(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 add/remove/replace, strictly: adding to a missing parent or removing a missing member fails."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, last = _parent(doc, op["path"])
        if op["op"] == "add":
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                assert 0 <= index <= len(parent), op
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                assert last in parent, op
                del parent[last]
        elif op["op"] == "replace":
            if isinstance(parent, list):
                assert 0 <= int(last) < len(parent), op
                parent[int(last)] = copy.deepcopy(op["value"])
            else:
                assert last in parent, op
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(f"unexpected op {op}")
    return doc


def resolve(doc: Any, pointer: str) -> Any:
    """The value at a JSON pointer, or ABSENT."""
    for token in (_unescape(token) for token in pointer[1:].split("/")):
        if isinstance(doc, list):
            if not token.isdigit() or int(token) >= len(doc):
                return ABSENT
            doc = doc[int(token)]
        elif isinstance(doc, Mapping) and token in doc:
            doc = doc[token]
        else:
            return ABSENT
    return doc


def pod(name: str = "app", *, labels: Mapping[str, str] | None = None, namespace: str | None = "default",
        containers: Sequence[Mapping[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod as kube-apiserver hands it to a webhook; one Guaranteed container of 1 cpu / 2Gi by default."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    if containers is None:
        containers = [container("main", cpu="1", memory="2Gi")]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [dict(c) for c in containers], **spec}}


def container(name: str, cpu: str | None = None, memory: str | None = None, *, requests: bool = True,
              limits: bool = True, **extra: Any) -> dict[str, Any]:
    quantities = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    resources: dict[str, Any] = {}
    if quantities and limits:
        resources["limits"] = dict(quantities)
    if quantities and requests:
        resources["requests"] = dict(quantities)
    return {"name": name, "image": "busybox", "resources": resources, **extra}
