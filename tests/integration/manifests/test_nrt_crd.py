"""The NodeResourceTopology objects the companion writes are valid for the CRD manifests/ ships (and for
upstream's v1alpha1 schema, whose fields it copies): rendered with ``kubectl kustomize``, checked offline."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.companion.kube.nrt import NRT_GROUP, NRT_PLURAL, nrt_object
from koordlet.companion.topology import parse_report
from tests.integration.manifests.crdschema import crd_schema
from tests.unit.statesinformer.test_topology import EXPECTED

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def schema() -> Any:
    return crd_schema(f"{NRT_PLURAL}.{NRT_GROUP}")


def test_written_object_is_valid(schema: Any) -> None:
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "u-1"}
    obj = nrt_object("node-1", parse_report(EXPECTED), owner)
    jsonschema.Draft4Validator(schema).validate(obj)
    empty = nrt_object("node-1", parse_report({}), owner)  # topologyPolicies and zones are required: always set
    jsonschema.Draft4Validator(schema).validate(empty)
    bad = {**obj, "zones": [{"name": "node-0"}]}
    with pytest.raises(jsonschema.ValidationError, match="'type' is a required property"):
        jsonschema.Draft4Validator(schema).validate(bad)
