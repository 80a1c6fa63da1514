"""The openAPIV3 schema of a CRD that manifests/ ships, as ``kubectl kustomize`` renders it, closed so that a
field the schema does not declare is refused: kube-apiserver would prune it silently, losing what was written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever it lists properties and says nothing else."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if "properties" in out and out["properties"] and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def crd_schema(name: str, version_name: str = "v1alpha1") -> Any:
    """The closed schema of CRD ``name`` (``<plural>.<group>``), cluster-scoped, at its only served version."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not found (tests/host-deps.sh installs Debian's kubernetes-client as root)")
    result = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    [crd] = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "CustomResourceDefinition"
             and d["metadata"]["name"] == name]
    assert crd["spec"]["scope"] == "Cluster"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == (version_name, True, True)
    return closed(version["schema"]["openAPIV3Schema"])
