"""The NodeSLO specs the companion renders from every documented ``slo-controller-config`` sample are valid for
the CRD manifests/ ships, with no field it would prune (host applications, system strategy, extensions...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.sloconfig import configmap_data_from_yaml, render_nodeslo
from koordlet.errors import KoordletError
from tests.conftest import shared_path
from tests.integration.manifests.crdschema import crd_schema

jsonschema = pytest.importorskip("jsonschema")

SAMPLES = shared_path() / "reference/koordinator-samples/slo-configs"


def _yaml_samples() -> list[str]:
    """The samples that are ConfigMaps (two are Helm templates, not YAML: INDEX.md), read at collection."""
    names = []
    for path in sorted(SAMPLES.glob("*.yaml")) if SAMPLES.is_dir() else []:
        try:
            configmap_data_from_yaml(path.read_text())
        except KoordletError:
            continue
        names.append(path.name)
    return names


@pytest.fixture(scope="module")
def schema() -> Any:
    return crd_schema("nodeslos.slo.koordinator.sh")


@pytest.mark.parametrize("sample", _yaml_samples())
def test_every_samples_nodeslo_is_kept_whole(schema: Any, shared_dir: Path, sample: str) -> None:
    data = configmap_data_from_yaml((shared_dir / "reference/koordinator-samples/slo-configs" / sample).read_text())
    spec, _ = render_nodeslo(data, {})
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
           "spec": spec.to_json()}
    jsonschema.Draft4Validator(schema).validate(obj)
