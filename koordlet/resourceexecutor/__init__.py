"""The single writer of cgroup files: plugins hand :class:`CgroupUpdate` values to a
:class:`ResourceExecutor`, which validates, skips unchanged values, orders leveled writes, writes,
audits and records a metric (CONVENTIONS #14, Koordinator ``pkg/koordlet/resourceexecutor``).

The same front, with the same validate / skip-unchanged / unsupported-backoff / audit semantics, covers
resctrl groups (:class:`ResctrlExecutor`), core-scheduling cookies (:class:`CoreSchedExecutor`) and the
network QoS interface (:class:`NetQoS`, implemented by the tc and Terway strategies).
"""

from koordlet.resourceexecutor.audit import AuditEntry, AuditLog, Auditor
from koordlet.resourceexecutor.coresched import CallOutcome, CallResult, CoreSchedExecutor, CoreSchedScope, GroupResult
from koordlet.resourceexecutor.executor import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    ResourceExecutor,
)
from koordlet.resourceexecutor.leveled import MERGE as LEVELED_RESOURCES
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoS, NetQoSPlan
from koordlet.resourceexecutor.resctrl import (
    MB_MAX_AMD,
    MB_MAX_PERCENT,
    ResctrlExecutor,
    ResctrlFileWriter,
    ResctrlResult,
    ResctrlWriter,
    TaskAssignment,
)
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter

__all__ = [
    "DEFAULT_FORCE_UPDATE_SECONDS",
    "DEFAULT_UNSUPPORTED_RETRY_SECONDS",
    "LEVELED_RESOURCES",
    "MB_MAX_AMD",
    "MB_MAX_PERCENT",
    "AuditEntry",
    "AuditLog",
    "Auditor",
    "CallOutcome",
    "CallResult",
    "CgroupUpdate",
    "CgroupWriter",
    "ClassBandwidth",
    "CoreSchedExecutor",
    "CoreSchedScope",
    "FileWriter",
    "GroupResult",
    "NetQoS",
    "NetQoSPlan",
    "Outcome",
    "ResctrlExecutor",
    "ResctrlFileWriter",
    "ResctrlResult",
    "ResctrlWriter",
    "ResourceExecutor",
    "Result",
    "TaskAssignment",
]
