"""The NodeMetric statuses the companion writes (a koordlet's report, every field koordlet fills) are valid for
the CRD manifests/ ships, with no field it would prune: rendered with ``kubectl kustomize``, checked offline."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    HostApplicationMetricInfo,
    NodeMetricCollectPolicy,
    PeakMetric,
    ReclaimableMetric,
    ResourceMap,
)
from tests.integration.manifests.crdschema import crd_schema
from tests.unit.companion.test_api import sample_status

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def schema() -> Any:
    return crd_schema("nodemetrics.slo.koordinator.sh")


def test_a_full_report_is_kept_whole(schema: Any) -> None:
    status = dataclasses.replace(
        sample_status(),
        prod_reclaimable_metric=ReclaimableMetric(ResourceMap(3000, 4 << 30)),
        prod_peak_metric=PeakMetric(ResourceMap(9000, 12 << 30)),
        host_application_metric=(HostApplicationMetricInfo("nginx", ResourceMap(500, 1 << 30), PriorityClass.PROD,
                                                           QoSClass.LS),))
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "node-1"},
           "spec": {"metricCollectPolicy": NodeMetricCollectPolicy().to_json()}, "status": status.to_json()}
    assert {"prodPeakMetric", "prodReclaimableMetric", "hostApplicationMetric"} <= set(obj["status"])
    jsonschema.Draft4Validator(schema).validate(obj)
    with pytest.raises(jsonschema.ValidationError, match="'prodPeak' was unexpected"):
        jsonschema.Draft4Validator(schema).validate({**obj, "status": {**obj["status"], "prodPeak": {}}})
