"""Metric name prefix, label keys and label values shared by koordlet's metrics.

The same spellings as Koordinator's ``pkg/koordlet/metrics/metrics.go`` (and the feature files that add
their own keys), so queries and dashboards written for Koordinator's koordlet keep working.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "koordlet_"
"""Koordinator's ``KoordletSubsystem``: every metric name starts with it."""

NODE: Final = "node"
STATUS: Final = "status"
RESOURCE: Final = "resource"
UNIT: Final = "unit"

POD_UID: Final = "pod_uid"
POD_NAME: Final = "pod_name"
POD_NAMESPACE: Final = "pod_namespace"
CONTAINER_ID: Final = "container_id"
CONTAINER_NAME: Final = "container_name"

# Keys of one metric family each (PSI; BE suppression, evictions, strategy timings).
PSI_RESOURCE_TYPE: Final = "psi_resource_type"
PSI_PRECISION: Final = "psi_precision"
PSI_DEGREE: Final = "psi_degree"
CPU_FULL_SUPPORTED: Final = "cpu_full_supported"
SUPPRESS_TYPE: Final = "type"
REASON: Final = "reason"
STRATEGY: Final = "strategy"
KOORD_POD_NAME: Final = "koord_pod_name"

SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"

UNIT_CORE: Final = "core"
UNIT_BYTE: Final = "byte"

RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"

POD_LABELS: Final = (NODE, POD_UID, POD_NAME, POD_NAMESPACE)
"""Leading labels of a per-pod series, in Koordinator's order."""
CONTAINER_LABELS: Final = (NODE, CONTAINER_ID, CONTAINER_NAME, POD_UID, POD_NAME, POD_NAMESPACE)
"""Leading labels of a per-container series, in Koordinator's order."""


def status_of(ok: bool) -> str:
    """The ``status`` label value of an outcome."""
    return SUCCEEDED if ok else FAILED
