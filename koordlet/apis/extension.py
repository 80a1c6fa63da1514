"""Koordinator's QoS classes, priority bands and the label/annotation keys koordlet reads
(koordinator apis/extension: qos.go, qos_utils.go, priority.go)."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from koordlet.apis import gojson
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.validators import parse_cpulist

LABEL_QOS = "koordinator.sh/qosClass"
LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"
LABEL_CORE_SCHED_GROUP = "koordinator.sh/core-sched-group-id"
LABEL_EVICTION_ENABLED = "koordinator.sh/eviction-enabled"
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
RESOURCE_BATCH_CPU = "kubernetes.io/batch-cpu"
RESOURCE_BATCH_MEMORY = "kubernetes.io/batch-memory"
RESOURCE_MID_CPU = "kubernetes.io/mid-cpu"
RESOURCE_MID_MEMORY = "kubernetes.io/mid-memory"


class QoSClass(enum.Enum):
    """Koordinator QoS: LSE exclusive CPUs, LSR bound cpuset, LS share pool, BE batch, SYSTEM daemons."""

    LSE = "LSE"
    LSR = "LSR"
    LS = "LS"
    BE = "BE"
    SYSTEM = "SYSTEM"
    NONE = ""


_FALLBACK = {KubeQoS.GUARANTEED: QoSClass.LSR, KubeQoS.BURSTABLE: QoSClass.LS, KubeQoS.BESTEFFORT: QoSClass.BE}


_QOS_BY_LABEL = {c.value: c for c in QoSClass}
"""A dict, not ``QoSClass(value)``: strategies ask every pod's class every round, and the enum
constructor costs ten times a lookup."""


def qos_from_label(value: str | None) -> QoSClass:
    """The class a ``koordinator.sh/qosClass`` label names; NONE for a missing or unknown value."""
    return _QOS_BY_LABEL.get(value or "", QoSClass.NONE)


def pod_qos(labels: Mapping[str, str], kube_qos: KubeQoS | None) -> QoSClass:
    """The label when it names a class, else Guaranteed->LSR, Burstable->LS, BestEffort->BE.

    Only a *label* counts: an annotation named qosClass (seen in Koordinator's docs) is not a QoS label."""
    labelled = qos_from_label(labels.get(LABEL_QOS))
    if labelled is not QoSClass.NONE:
        return labelled
    return _FALLBACK.get(kube_qos, QoSClass.NONE) if kube_qos else QoSClass.NONE


class PriorityClass(enum.Enum):
    """Koordinator's priority bands (docs/architecture/priority.md)."""

    PROD = "koord-prod"
    MID = "koord-mid"
    BATCH = "koord-batch"
    FREE = "koord-free"
    NONE = ""


PRIORITY_BANDS = {
    PriorityClass.PROD: (9000, 9999),
    PriorityClass.MID: (7000, 7999),
    PriorityClass.BATCH: (5000, 5999),
    PriorityClass.FREE: (3000, 3999),
}
PRIORITY_DEFAULTS = {PriorityClass.PROD: 9000, PriorityClass.MID: 7000, PriorityClass.BATCH: 5000,
                     PriorityClass.FREE: 3000}


def priority_class(priority: int | None, labels: Mapping[str, str] | None = None) -> PriorityClass:
    """The band of a pod: the ``koordinator.sh/priority-class`` label wins, else the band holding
    ``priority``; pods outside every band (0, system-critical...) are NONE and count as prod-like."""
    if labels:
        label = labels.get(LABEL_PRIORITY_CLASS)
        if label:
            try:
                return PriorityClass(label)
            except ValueError:
                pass
    if priority is None:
        return PriorityClass.NONE
    for band, (low, high) in PRIORITY_BANDS.items():
        if low <= priority <= high:
            return band
    return PriorityClass.NONE


def resource_status_cpus(annotations: Mapping[str, str]) -> list[int]:
    """The CPUs the ``scheduling.koordinator.sh/resource-status`` annotation binds a pod to (empty without
    one); raises ValueError naming what is wrong with the annotation."""
    raw = annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return []
    status = gojson.load_object(raw, ANNOTATION_RESOURCE_STATUS, ValueError)
    return gojson.parsed(status.get("cpuset") or "", f"{ANNOTATION_RESOURCE_STATUS}.cpuset", parse_cpulist,
                         ValueError)
