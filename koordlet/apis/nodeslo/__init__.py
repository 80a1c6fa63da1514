"""NodeSLO (``slo.koordinator.sh/v1alpha1``): the per-node SLO spec koordlet's QoS manager obeys.

``NodeSLOSpec.from_json(obj, where="spec")`` decodes a spec as Go's ``encoding/json`` would (case-insensitive keys,
unknown keys ignored, absent = ``None``) and validates it, raising :class:`~koordlet.errors.ConfigError` with the
field path and the bad value; ``to_json()`` writes Koordinator's JSON back; ``with_defaults()`` and
:func:`default_nodeslo_spec` give Koordinator's defaults.
"""

from koordlet.apis.nodeslo.defaults import (
    DEFAULT_CPU_SUPPRESS_THRESHOLD_PERCENT,
    DEFAULT_MEMORY_EVICT_THRESHOLD_PERCENT,
    MEMORY_EVICT_LOWER_GAP_PERCENT,
    default_cpu_burst_strategy,
    default_nodeslo_spec,
    default_resource_qos,
    default_resource_qos_strategy,
    default_resource_threshold_strategy,
    default_system_strategy,
    merge_over_defaults,
)
from koordlet.apis.nodeslo.fields import JsonObject, merge_json
from koordlet.apis.nodeslo.types import (
    BlkIOQOSCfg,
    BlockCfg,
    CgroupPath,
    CPUBurstStrategy,
    CPUQOSCfg,
    HostApplicationSpec,
    IOCfg,
    MemoryQOSCfg,
    NetworkQOSCfg,
    NodeSLOSpec,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

API_VERSION = "slo.koordinator.sh/v1alpha1"
KIND = "NodeSLO"

__all__ = [
    "API_VERSION",
    "DEFAULT_CPU_SUPPRESS_THRESHOLD_PERCENT",
    "DEFAULT_MEMORY_EVICT_THRESHOLD_PERCENT",
    "KIND",
    "MEMORY_EVICT_LOWER_GAP_PERCENT",
    "BlkIOQOSCfg",
    "BlockCfg",
    "CPUBurstStrategy",
    "CPUQOSCfg",
    "CgroupPath",
    "HostApplicationSpec",
    "IOCfg",
    "JsonObject",
    "MemoryQOSCfg",
    "NetworkQOSCfg",
    "NodeSLOSpec",
    "ResctrlQOSCfg",
    "ResourceQOS",
    "ResourceQOSPolicies",
    "ResourceQOSStrategy",
    "ResourceThresholdStrategy",
    "SystemStrategy",
    "default_cpu_burst_strategy",
    "default_nodeslo_spec",
    "default_resource_qos",
    "default_resource_qos_strategy",
    "default_resource_threshold_strategy",
    "default_system_strategy",
    "merge_json",
    "merge_over_defaults",
]
