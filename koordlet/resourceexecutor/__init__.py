"""The single writer of cgroup files: plugins hand :class:`CgroupUpdate` values to a
:class:`ResourceExecutor`, which validates, skips unchanged values, orders leveled writes, writes,
audits and records a metric (Koordinator ``pkg/koordlet/resourceexecutor``); plugins never open the
files themselves, so every write is validated, deduplicated and audited in one place.

The same front, with the same validate / skip-unchanged / unsupported-backoff / audit semantics (one
:class:`WriteLedger`), covers resctrl groups (:class:`ResctrlExecutor`), core-scheduling cookies
(:class:`CoreSchedExecutor`) and the network QoS interface (:class:`NetQoS`, implemented by the tc and
Terway strategies).  Every executor answers with a :class:`Result` holding an :class:`Outcome`, and
reports its writes' durations through a :class:`WriteSink`.
"""

from koordlet.resourceexecutor.audit import AuditEntry, AuditLog, Auditor
from koordlet.resourceexecutor.coresched import CoreSchedExecutor, CoreSchedScope
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.resourceexecutor.ledger import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    WriteLedger,
)
from koordlet.resourceexecutor.leveled import MERGE as LEVELED_RESOURCES
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoS, NetQoSPlan
from koordlet.resourceexecutor.resctrl import (
    MB_MAX_AMD,
    MB_MAX_PERCENT,
    ResctrlExecutor,
    ResctrlFileWriter,
    ResctrlWriter,
)
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter

__all__ = [
    "DEFAULT_FORCE_UPDATE_SECONDS",
    "DEFAULT_UNSUPPORTED_RETRY_SECONDS",
    "LEVELED_RESOURCES",
    "MB_MAX_AMD",
    "MB_MAX_PERCENT",
    "NULL_SINK",
    "AuditEntry",
    "AuditLog",
    "Auditor",
    "CgroupUpdate",
    "CgroupWriter",
    "ClassBandwidth",
    "CoreSchedExecutor",
    "CoreSchedScope",
    "FileWriter",
    "NetQoS",
    "NetQoSPlan",
    "Outcome",
    "ResctrlExecutor",
    "ResctrlFileWriter",
    "ResctrlWriter",
    "ResourceExecutor",
    "Result",
    "WriteLedger",
    "WriteSink",
]
