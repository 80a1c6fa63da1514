"""What ``systemStrategy`` asks of the node's kernel knobs, without I/O (Koordinator
``qosmanager/plugins/sysreconcile/system_config.go`` ``calculateMemoryConfig``).

Each knob is wanted (a value), unset (the NodeSLO leaves it out: whatever koordlet changed goes back) or
rejected (its value fails the knob's bounds: the value in force stays and the plan says why).  Koordinator
skips a rejected knob with a verbose-level log only; here the reason reaches the decision and the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from koordlet.apis.nodeslo import SystemStrategy
from koordlet.system.sysfiles import (
    MEMCG_REAP_BACKGROUND,
    MIN_FREE_KBYTES,
    PAGE_CACHE_LIMIT_ENABLED,
    SCHED_GROUP_IDENTITY_ENABLED,
    SCHED_IDLE_SAVER_WMARK,
    WATERMARK_SCALE_FACTOR,
    SysFile,
    check_feature_name,
)

FACTOR_DENOMINATOR = 10000
"""``minFreeKbytesFactor`` is in 1/10000 of the node's memory (apis/slo/v1alpha1 ``SystemStrategy``)."""

KNOBS: tuple[tuple[SysFile, str, str], ...] = (
    (MIN_FREE_KBYTES, "minFreeKbytesFactor", "min_free_kbytes_factor"),
    (WATERMARK_SCALE_FACTOR, "watermarkScaleFactor", "watermark_scale_factor"),
    (MEMCG_REAP_BACKGROUND, "memcgReapBackGround", "memcg_reap_background"),
    (SCHED_GROUP_IDENTITY_ENABLED, "schedGroupIdentityEnabled", "sched_group_identity_enabled"),
    (SCHED_IDLE_SAVER_WMARK, "schedIdleSaverWmark", "sched_idle_saver_wmark_ns"),
    (PAGE_CACHE_LIMIT_ENABLED, "pageCacheLimitEnabled", "page_cache_limit_enabled"),
)
"""(knob, NodeSLO field, attribute of :class:`SystemStrategy`), in Koordinator's order of writes."""


@dataclass(frozen=True)
class Want:
    value: int
    why: str
    """``systemStrategy.<field>=<value>`` (with the derivation for min_free_kbytes), for the audit."""


@dataclass(frozen=True)
class Plan:
    wanted: Mapping[SysFile, Want] = field(default_factory=dict)
    unset: tuple[SysFile, ...] = ()
    rejected: Mapping[SysFile, str] = field(default_factory=dict)
    """Knob -> why its value was refused (the value in force stays)."""
    features: Mapping[str, bool] = field(default_factory=dict)
    """Scheduler feature -> set (True) or cleared (``schedFeatures``)."""
    rejected_features: Mapping[str, str] = field(default_factory=dict)


def min_free_kbytes(factor: int, memory_total_bytes: int) -> int:
    """Koordinator's ``totalMemory(KiB) * factor / 10000`` with Go's truncating int64 division."""
    return (memory_total_bytes // 1024) * factor // FACTOR_DENOMINATOR


def plan(strategy: SystemStrategy | None, memory_total_bytes: int) -> Plan:
    """The knobs ``strategy`` sets on a node with ``memory_total_bytes`` of memory (MemTotal, which is what
    kubelet reports as the node's memory capacity and Koordinator reads)."""
    wanted: dict[SysFile, Want] = {}
    unset: list[SysFile] = []
    rejected: dict[SysFile, str] = {}
    for knob, json_name, attr in KNOBS:
        setting = getattr(strategy, attr) if strategy is not None else None
        if setting is None:
            unset.append(knob)
            continue
        where = f"systemStrategy.{json_name}={setting}"
        value = setting
        if knob is MIN_FREE_KBYTES:
            if memory_total_bytes <= 0:
                rejected[knob] = f"{where}: node memory unknown ({memory_total_bytes} bytes); the value in force stays"
                continue
            value = min_free_kbytes(setting, memory_total_bytes)
            where = f"{where} x {memory_total_bytes // 1024} KiB / {FACTOR_DENOMINATOR}"
        try:
            knob.check(value)
        except ValueError as exc:
            rejected[knob] = f"{where}: {exc}; the value in force stays"
            continue
        wanted[knob] = Want(value, where)
    features: dict[str, bool] = {}
    rejected_features: dict[str, str] = {}
    for name, enabled in sorted(((strategy.sched_features or {}) if strategy is not None else {}).items()):
        try:
            features[check_feature_name(name)] = enabled
        except ValueError as exc:
            rejected_features[name] = f"systemStrategy.schedFeatures: {exc}; the value in force stays"
    return Plan(wanted, tuple(unset), rejected, features, rejected_features)
