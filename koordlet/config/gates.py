"""The one feature-gate table (Koordinator pkg/features/koordlet_features.go: names, defaults, stages)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from koordlet.errors import ConfigError


class Stage(enum.Enum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "GA"


@dataclass(frozen=True)
class Gate:
    default: bool
    stage: Stage


# The gate names, for code that checks a gate: a typo is then an import error, not a gate that is never on.
BE_CPU_SUPPRESS: Final = "BECPUSuppress"
CPU_BURST: Final = "CPUBurst"
RDT_RESCTRL: Final = "RdtResctrl"
NODE_TOPOLOGY_REPORT: Final = "NodeTopologyReport"
GROUP_IDENTITY: Final = "GroupIdentity"
CPU_SET_ALLOCATOR: Final = "CPUSetAllocator"
BATCH_RESOURCE: Final = "BatchResource"
BE_CPU_MANAGER: Final = "BECPUManager"
BE_CPU_EVICT: Final = "BECPUEvict"
CPU_EVICT: Final = "CPUEvict"
CPU_ALLOCATABLE_EVICT: Final = "CPUAllocatableEvict"
BE_MEMORY_EVICT: Final = "BEMemoryEvict"
MEMORY_EVICT: Final = "MemoryEvict"
MEMORY_ALLOCATABLE_EVICT: Final = "MemoryAllocatableEvict"
SYSTEM_CONFIG: Final = "SystemConfig"
CGROUP_RECONCILE: Final = "CgroupReconcile"
BLKIO_RECONCILE: Final = "BlkIOReconcile"
RESCTRL_COLLECTOR: Final = "ResctrlCollector"
CPI_COLLECTOR: Final = "CPICollector"
LIBPFM4: Final = "Libpfm4"
PSI_COLLECTOR: Final = "PSICollector"
COLD_PAGE_COLLECTOR: Final = "ColdPageCollector"
HUGE_PAGE_REPORT: Final = "HugePageReport"
PER_CPU_METRIC: Final = "PerCPUMetric"
NODE_METRIC_PROM_METRICS: Final = "NodeMetricPromMetrics"
ACCELERATORS: Final = "Accelerators"
RDMA_DEVICES: Final = "RDMADevices"
POD_RESOURCES_PROXY: Final = "PodResourcesProxy"
HAMI_CORE_VGPU_MONITOR: Final = "HamiCoreVGPUMonitor"
AUDIT_EVENTS: Final = "AuditEvents"
AUDIT_EVENTS_HTTP_HANDLER: Final = "AuditEventsHTTPHandler"
GPU_ENV_INJECT: Final = "GPUEnvInject"
RDMA_DEVICE_INJECT: Final = "RDMADeviceInject"
CPU_NORMALIZATION: Final = "CPUNormalization"
CORE_SCHED: Final = "CoreSched"
TERWAY_QOS: Final = "TerwayQoS"
TC_NETWORK_QOS: Final = "TCNetworkQoS"
RESCTRL: Final = "Resctrl"
OOM_SCORE_ADJ: Final = "OOMScoreAdj"

_B, _A = Stage.BETA, Stage.ALPHA
GATES: Mapping[str, Gate] = MappingProxyType({
    # On by default.
    BE_CPU_SUPPRESS: Gate(True, _B),
    CPU_BURST: Gate(True, _B),
    RDT_RESCTRL: Gate(True, _B),
    NODE_TOPOLOGY_REPORT: Gate(True, _B),
    GROUP_IDENTITY: Gate(True, _B),
    CPU_SET_ALLOCATOR: Gate(True, _B),
    BATCH_RESOURCE: Gate(True, _B),
    # Off by default.
    BE_CPU_MANAGER: Gate(False, _A),
    BE_CPU_EVICT: Gate(False, _A),
    CPU_EVICT: Gate(False, _A),
    CPU_ALLOCATABLE_EVICT: Gate(False, _A),
    BE_MEMORY_EVICT: Gate(False, _A),
    MEMORY_EVICT: Gate(False, _A),
    MEMORY_ALLOCATABLE_EVICT: Gate(False, _A),
    SYSTEM_CONFIG: Gate(False, _A),
    CGROUP_RECONCILE: Gate(False, _A),
    BLKIO_RECONCILE: Gate(False, _A),
    RESCTRL_COLLECTOR: Gate(False, _A),
    CPI_COLLECTOR: Gate(False, _A),
    LIBPFM4: Gate(False, _A),
    PSI_COLLECTOR: Gate(False, _A),
    COLD_PAGE_COLLECTOR: Gate(False, _A),
    HUGE_PAGE_REPORT: Gate(False, _A),
    PER_CPU_METRIC: Gate(False, _A),
    NODE_METRIC_PROM_METRICS: Gate(False, _A),
    ACCELERATORS: Gate(False, _A),
    RDMA_DEVICES: Gate(False, _A),
    POD_RESOURCES_PROXY: Gate(False, _A),
    HAMI_CORE_VGPU_MONITOR: Gate(False, _A),
    AUDIT_EVENTS: Gate(False, _A),
    AUDIT_EVENTS_HTTP_HANDLER: Gate(False, _A),
    GPU_ENV_INJECT: Gate(False, _A),
    RDMA_DEVICE_INJECT: Gate(False, _A),
    CPU_NORMALIZATION: Gate(False, _A),
    CORE_SCHED: Gate(False, _A),
    TERWAY_QOS: Gate(False, _A),
    TC_NETWORK_QOS: Gate(False, _A),
    RESCTRL: Gate(False, _A),
    OOM_SCORE_ADJ: Gate(False, _A),
})
ALL_ALPHA, ALL_BETA = "AllAlpha", "AllBeta"

NOT_IMPLEMENTED: Final = frozenset({
    # Needs the BE shared pools of the scheduler's NUMA-aware allocation (node.koordinator.sh/be-cpu-shared-pools)
    # in the cpuset hook and a cpusuppress mode built on them; neither exists here.
    BE_CPU_MANAGER,
    # Per-pod LLC occupancy / memory bandwidth from resctrl mon_data groups: no collector reads them.
    RESCTRL_COLLECTOR,
    # CPI through libpfm4 event names (a C library binding); the CPI collector opens the generic hardware perf
    # events (cycles, instructions) directly.
    LIBPFM4,
    # kidled cold-page statistics (Alibaba Cloud Linux kernels only); usageWithHotPageCache degrades to
    # usageWithoutPageCache exactly as upstream does when kidled is not running.
    COLD_PAGE_COLLECTOR,
    # Hugepages per NUMA node in NodeResourceTopology: the topology report carries CPUs only.
    HUGE_PAGE_REPORT,
    # Per-share-pool CPU usage records in the cpuset hook: not collected.
    PER_CPU_METRIC,
    # Devices (NVIDIA GPU via NVML, RDMA NICs, HAMi-core vGPU) and their device reports / env and device
    # injection hooks: no device plugin side exists in this project.
    ACCELERATORS, RDMA_DEVICES, HAMI_CORE_VGPU_MONITOR, GPU_ENV_INJECT, RDMA_DEVICE_INJECT,
    # The kubelet PodResources gRPC proxy.
    POD_RESOURCES_PROXY,
    # Upstream's audit event log (a rotating file of recent events) and its HTTP reader.
    AUDIT_EVENTS, AUDIT_EVENTS_HTTP_HANDLER,
})
"""Gates this koordlet has no code for.  Naming one ``=true`` fails the start (:func:`resolve`) instead of being
accepted and silently doing nothing; ``AllAlpha``/``AllBeta`` leave them off; ``koordctl status`` marks them.
Every other gate is read by the code it names (a test per gate fails when that read is removed)."""


def implemented(name: str) -> bool:
    """Whether this koordlet has code behind gate ``name``."""
    return name not in NOT_IMPLEMENTED


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
    """Every gate's effective value: defaults, then AllAlpha/AllBeta, then named overrides.

    Raises ConfigError naming each gate of :data:`NOT_IMPLEMENTED` that ``overrides`` turns on."""
    unknown = sorted(set(overrides) - set(GATES) - {ALL_ALPHA, ALL_BETA})
    if unknown:
        raise ConfigError(f"featureGates: unknown gate(s) {', '.join(unknown)}; known: {', '.join(sorted(GATES))}")
    refused = sorted(name for name, on in overrides.items() if on and name in NOT_IMPLEMENTED)
    if refused:
        raise ConfigError("featureGates: " + "; ".join(
            f"feature gate {name} is not implemented by this koordlet" for name in refused))
    effective = {name: gate.default for name, gate in GATES.items()}
    for name, gate in GATES.items():
        if name in NOT_IMPLEMENTED:
            continue  # every one defaults to off; AllAlpha must not turn on a gate nothing reads
        if gate.stage is Stage.ALPHA and ALL_ALPHA in overrides:
            effective[name] = overrides[ALL_ALPHA]
        if gate.stage is Stage.BETA and ALL_BETA in overrides:
            effective[name] = overrides[ALL_BETA]
    effective.update({k: v for k, v in overrides.items() if k in GATES})
    return MappingProxyType(effective)


def enabled(gates: Mapping[str, bool], name: str) -> bool:
    """Whether gate ``name`` is on in ``gates`` (the resolved table); a gate missing from it (a test or a tool
    handing a partial table) takes its default."""
    return gates.get(name, GATES[name].default)
