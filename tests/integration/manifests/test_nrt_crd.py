"""The NodeResourceTopology objects the companion writes are valid for the CRD manifests/ ships (and for
upstream's v1alpha1 schema, whose fields it copies): rendered with ``kubectl kustomize``, checked offline."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.companion.kube.nrt import NRT_GROUP, NRT_PLURAL, nrt_object
from koordlet.companion.topology import parse_report
from tests.unit.statesinformer.test_topology import EXPECTED

jsonschema = pytest.importorskip("jsonschema")

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def _closed(schema: Any) -> Any:
    """Unknown fields refused (kube-apiserver would prune them silently, losing what the companion wrote)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if "properties" in out and out["properties"] and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def schema() -> Any:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not found (tests/host-deps.sh installs Debian's kubernetes-client as root)")
    result = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    [crd] = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "CustomResourceDefinition"
             and d["metadata"]["name"] == f"{NRT_PLURAL}.{NRT_GROUP}"]
    assert crd["spec"]["scope"] == "Cluster"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    return _closed(version["schema"]["openAPIV3Schema"])


def test_written_object_is_valid(schema: Any) -> None:
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "u-1"}
    obj = nrt_object("node-1", parse_report(EXPECTED), owner)
    jsonschema.Draft4Validator(schema).validate(obj)
    empty = nrt_object("node-1", parse_report({}), owner)  # topologyPolicies and zones are required: always set
    jsonschema.Draft4Validator(schema).validate(empty)
    bad = {**obj, "zones": [{"name": "node-0"}]}
    with pytest.raises(jsonschema.ValidationError, match="'type' is a required property"):
        jsonschema.Draft4Validator(schema).validate(bad)
