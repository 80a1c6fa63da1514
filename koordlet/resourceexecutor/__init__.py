"""The single writer of cgroup files: plugins hand :class:`CgroupUpdate` values to a
:class:`ResourceExecutor`, which validates, skips unchanged values, orders leveled writes, writes,
audits and records a metric (CONVENTIONS #14, Koordinator ``pkg/koordlet/resourceexecutor``)."""

from koordlet.resourceexecutor.audit import AuditEntry, AuditLog, Auditor
from koordlet.resourceexecutor.executor import (
    DEFAULT_FORCE_UPDATE_SECONDS,
    DEFAULT_UNSUPPORTED_RETRY_SECONDS,
    ResourceExecutor,
)
from koordlet.resourceexecutor.leveled import MERGE as LEVELED_RESOURCES
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter

__all__ = [
    "DEFAULT_FORCE_UPDATE_SECONDS",
    "DEFAULT_UNSUPPORTED_RETRY_SECONDS",
    "LEVELED_RESOURCES",
    "AuditEntry",
    "AuditLog",
    "Auditor",
    "CgroupUpdate",
    "CgroupWriter",
    "FileWriter",
    "Outcome",
    "ResourceExecutor",
    "Result",
]
