"""Series the collectors write and the reporters read: one name, one unit, fixed label keys.

Label keys: ``pod`` is the pod UID, ``container`` the bare container id, ``resource`` one of cpu, memory,
io (PSI), ``kind`` some or full (PSI).  CPU is in cores, memory in bytes, ratios in 0..1, PSI in percent.
"""

from __future__ import annotations

from typing import Final

NODE_CPU_USAGE: Final = "node_cpu_usage_cores"
NODE_MEMORY_USAGE: Final = "node_memory_usage_bytes"
POD_CPU_USAGE: Final = "pod_cpu_usage_cores"
POD_MEMORY_USAGE: Final = "pod_memory_usage_bytes"
CONTAINER_CPU_USAGE: Final = "container_cpu_usage_cores"
CONTAINER_MEMORY_USAGE: Final = "container_memory_usage_bytes"
POD_CPU_THROTTLED: Final = "pod_cpu_throttled_ratio"
CONTAINER_CPU_THROTTLED: Final = "container_cpu_throttled_ratio"
BE_CPU_USAGE: Final = "be_cpu_usage_cores"
BE_CPU_REQUEST: Final = "be_cpu_request_cores"
BE_CPU_LIMIT: Final = "be_cpu_limit_cores"
SYSTEM_CPU_USAGE: Final = "system_cpu_usage_cores"
SYSTEM_MEMORY_USAGE: Final = "system_memory_usage_bytes"
NODE_PSI: Final = "node_psi_avg10_percent"
POD_PSI: Final = "pod_psi_avg10_percent"
CONTAINER_PSI: Final = "container_psi_avg10_percent"
CONTAINER_CPI: Final = "container_cpi"

NODE_SERIES: Final = frozenset({NODE_CPU_USAGE, NODE_MEMORY_USAGE, SYSTEM_CPU_USAGE, SYSTEM_MEMORY_USAGE,
                                BE_CPU_USAGE, BE_CPU_REQUEST, BE_CPU_LIMIT, NODE_PSI})
"""Node-level series: kept in memory long enough for the 30-minute NodeMetric aggregates."""

VOLATILE_SERIES: Final = frozenset({POD_CPU_THROTTLED, CONTAINER_CPU_THROTTLED, POD_PSI, CONTAINER_PSI,
                                    CONTAINER_CPI})
"""Per-pod signals kept in memory only, for a short window: strategies act on their recent values."""
