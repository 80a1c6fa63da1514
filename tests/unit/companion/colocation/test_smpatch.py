"""Strategic merge patch of a Pod, against results worked out from apimachinery's strategicpatch rules
(``mergeMap``/``mergeSlice``/``normalizeElementOrder``).  Worked example of the ordering: containers [a, b]
patched with [c, a] give [c, a, b] -- patch items in patch order, a server-only item goes first only when the
server's order puts it before the patch item it is compared with (c is new, so it comes first)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from koordlet.companion.colocation.smpatch import PatchError, strategic_merge_pod


def base() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["a", "b", "c"]},
        "spec": {
            "containers": [{"name": "a", "image": "x", "env": [{"name": "X", "value": "1"}],
                            "ports": [{"containerPort": 80}]},
                           {"name": "b", "image": "y"}],
            "tolerations": [{"key": "t1"}],
            "nodeSelector": {"zone": "z1"},
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "scalar-replaced-and-added": (
        {"spec": {"terminationGracePeriodSeconds": 30, "nodeSelector": {"pool": "batch"}}},
        {"/spec/terminationGracePeriodSeconds": 30, "/spec/nodeSelector": {"zone": "z1", "pool": "batch"}}),
    "null-deletes-member": ({"spec": {"nodeSelector": {"zone": None}, "tolerations": None}},
                            {"/spec/nodeSelector": {}, "/spec/tolerations": "ABSENT"}),
    "plain-list-replaced": ({"spec": {"tolerations": [{"key": "t2"}]}}, {"/spec/tolerations": [{"key": "t2"}]}),
    "merge-list-by-name-new-first": (
        {"spec": {"containers": [{"name": "c", "image": "z"}, {"name": "a", "image": "x2"}]}},
        {"containers": ["c", "a", "b"], "/spec/containers/1/image": "x2",
         "/spec/containers/1/env": [{"name": "X", "value": "1"}]}),
    "nested-merge-list-env": (
        {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "3"}]}]}},
        {"/spec/containers/0/env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "3"}]}),
    "ports-merge-by-container-port": (
        {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}},
        {"/spec/containers/0/ports": [{"containerPort": 80, "name": "http"}]}),
    "delete-element-directive": ({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
                                 {"containers": ["b"]}),
    "replace-list-directive": ({"spec": {"containers": [{"name": "z"}, {"$patch": "replace"}]}},
                               {"/spec/containers": [{"name": "z"}]}),
    "replace-map-directive": ({"spec": {"nodeSelector": {"$patch": "replace", "pool": "b"}}},
                              {"/spec/nodeSelector": {"pool": "b"}}),
    "delete-map-directive-leaves-empty-object": ({"spec": {"nodeSelector": {"$patch": "delete"}}},
                                                 {"/spec/nodeSelector": {}}),
    "primitive-merge-list-union": ({"metadata": {"finalizers": ["b", "d"]}},
                                   {"/metadata/finalizers": ["a", "b", "d", "c"]}),
    "delete-from-primitive-list": ({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}},
                                   {"/metadata/finalizers": ["a", "c"]}),
    "set-element-order": ({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}},
                          {"containers": ["b", "a"]}),
    "set-element-order-with-new-item": (
        {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "n"}, {"name": "a"}],
                  "containers": [{"name": "n", "image": "q"}]}},
        {"containers": ["b", "n", "a"]}),
    "retain-keys-clears-other-volume-source": (
        {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}]}},
        {"/spec/volumes": [{"name": "data", "hostPath": {"path": "/d"}}]}),
    "type-change-replaces": ({"spec": {"nodeSelector": "oops"}}, {"/spec/nodeSelector": "oops"}),
    "new-member-loses-nulls-and-directive-objects": (
        {"spec": {"affinity": {"nodeAffinity": {"$patch": "merge", "x": 1}, "podAffinity": {"a": None, "b": 1}},
                  "readinessGates": [{"conditionType": "a", "$patch": "delete"}, {"conditionType": "b"}]}},
        {"/spec/affinity": {"podAffinity": {"b": 1}}, "/spec/readinessGates": [{"conditionType": "b"}]}),
    "deletion-list-for-missing-list-deletes-nothing": (
        {"spec": {"$deleteFromPrimitiveList/args": ["x"]}}, {"/spec/args": "ABSENT"}),
    "replaced-list-keeps-elements-minus-directive-members": (
        {"spec": {"tolerations": [{"key": "t9", "$patch": "delete"}]}}, {"/spec/tolerations": [{"key": "t9"}]}),
    "labels-merge": ({"metadata": {"labels": {"tier": "batch", "app": None}}},
                     {"/metadata/labels": {"tier": "batch"}}),
}


def lookup(doc: Any, pointer: str) -> Any:
    for token in pointer[1:].split("/"):
        if isinstance(doc, list):
            doc = doc[int(token)]
        elif token in doc:
            doc = doc[token]
        else:
            return "ABSENT"
    return doc


@pytest.mark.parametrize(("patch", "expected"), list(CASES.values()), ids=list(CASES))
def test_patch(patch: dict[str, Any], expected: dict[str, Any]) -> None:
    frozen = copy.deepcopy(patch)
    result = strategic_merge_pod(base(), patch)
    assert patch == frozen, "the profile's patch must not be consumed"
    for where, value in expected.items():
        if where == "containers":
            assert names(result["spec"]["containers"]) == value
        else:
            assert lookup(result, where) == value, where


def test_result_does_not_share_the_patch() -> None:
    patch = {"spec": {"tolerations": [{"key": "t2"}]}}
    result = strategic_merge_pod(base(), patch)
    result["spec"]["tolerations"][0]["key"] = "changed"
    assert patch["spec"]["tolerations"][0]["key"] == "t2"


@pytest.mark.parametrize("patch", [
    pytest.param({"spec": {"containers": [{"image": "no-name"}]}}, id="missing-merge-key"),
    pytest.param({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}, id="merge-directive-in-list"),
    pytest.param({"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}}, id="unknown-list-directive"),
    pytest.param({"spec": {"nodeSelector": {"$patch": "bogus"}}}, id="unknown-map-directive"),
    pytest.param({"spec": {"containers": ["a"]}}, id="mixed-element-types"),
    pytest.param({"metadata": {"finalizers": [["x"]]}}, id="list-of-lists"),
    pytest.param({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {}}]}},
                 id="retain-keys-excludes-a-set-field"),
    pytest.param({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b"}]}},
                 id="set-element-order-mismatch"),
    pytest.param({"metadata": {"$deleteFromPrimitiveList": ["a"]}}, id="delete-list-without-field"),
    pytest.param(["not", "an", "object"], id="not-an-object"),
])
def test_refused(patch: Any) -> None:
    with pytest.raises(PatchError):
        strategic_merge_pod(base(), patch)
