"""The one feature-gate table (Koordinator pkg/features/koordlet_features.go: names, defaults, stages)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from koordlet.errors import ConfigError


class Stage(enum.Enum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "GA"


@dataclass(frozen=True)
class Gate:
    default: bool
    stage: Stage


_B, _A = Stage.BETA, Stage.ALPHA
GATES: Mapping[str, Gate] = MappingProxyType({
    # On by default.
    "BECPUSuppress": Gate(True, _B),
    "CPUBurst": Gate(True, _B),
    "RdtResctrl": Gate(True, _B),
    "NodeTopologyReport": Gate(True, _B),
    "GroupIdentity": Gate(True, _B),
    "CPUSetAllocator": Gate(True, _B),
    "BatchResource": Gate(True, _B),
    # Off by default.
    "BECPUManager": Gate(False, _A),
    "BECPUEvict": Gate(False, _A),
    "CPUEvict": Gate(False, _A),
    "CPUAllocatableEvict": Gate(False, _A),
    "BEMemoryEvict": Gate(False, _A),
    "MemoryEvict": Gate(False, _A),
    "MemoryAllocatableEvict": Gate(False, _A),
    "SystemConfig": Gate(False, _A),
    "CgroupReconcile": Gate(False, _A),
    "BlkIOReconcile": Gate(False, _A),
    "ResctrlCollector": Gate(False, _A),
    "CPICollector": Gate(False, _A),
    "Libpfm4": Gate(False, _A),
    "PSICollector": Gate(False, _A),
    "ColdPageCollector": Gate(False, _A),
    "HugePageReport": Gate(False, _A),
    "PerCPUMetric": Gate(False, _A),
    "NodeMetricPromMetrics": Gate(False, _A),
    "Accelerators": Gate(False, _A),
    "RDMADevices": Gate(False, _A),
    "PodResourcesProxy": Gate(False, _A),
    "HamiCoreVGPUMonitor": Gate(False, _A),
    "AuditEvents": Gate(False, _A),
    "AuditEventsHTTPHandler": Gate(False, _A),
    "GPUEnvInject": Gate(False, _A),
    "RDMADeviceInject": Gate(False, _A),
    "CPUNormalization": Gate(False, _A),
    "CoreSched": Gate(False, _A),
    "TerwayQoS": Gate(False, _A),
    "TCNetworkQoS": Gate(False, _A),
    "Resctrl": Gate(False, _A),
    "OOMScoreAdj": Gate(False, _A),
})
ALL_ALPHA, ALL_BETA = "AllAlpha", "AllBeta"


def parse_gate_flag(text: str) -> dict[str, bool]:
    """``--feature-gates=A=true,B=false`` -> {"A": True, "B": False}; names are checked by :func:`resolve`."""
    result: dict[str, bool] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        lowered = value.strip().lower()
        if not sep or lowered not in ("true", "false"):
            raise ConfigError(f"featureGates: {item!r} must be Name=true or Name=false")
        result[name.strip()] = lowered == "true"
    return result


def resolve(overrides: Mapping[str, bool]) -> Mapping[str, bool]:
    """Every gate's effective value: defaults, then AllAlpha/AllBeta, then named overrides."""
    unknown = sorted(set(overrides) - set(GATES) - {ALL_ALPHA, ALL_BETA})
    if unknown:
        raise ConfigError(f"featureGates: unknown gate(s) {', '.join(unknown)}; known: {', '.join(sorted(GATES))}")
    effective = {name: gate.default for name, gate in GATES.items()}
    for name, gate in GATES.items():
        if gate.stage is Stage.ALPHA and ALL_ALPHA in overrides:
            effective[name] = overrides[ALL_ALPHA]
        if gate.stage is Stage.BETA and ALL_BETA in overrides:
            effective[name] = overrides[ALL_BETA]
    effective.update({k: v for k, v in overrides.items() if k in GATES})
    return MappingProxyType(effective)
