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
# ``usageWithPageCache`` (NodeMetric nodeMemoryCollectPolicy): node MemTotal - MemFree; pods and containers the
# memory.stat anon + unevictable + file LRU pages.
NODE_MEMORY_WITH_PAGE_CACHE: Final = "node_memory_usage_with_page_cache_bytes"
POD_MEMORY_WITH_PAGE_CACHE: Final = "pod_memory_usage_with_page_cache_bytes"
CONTAINER_MEMORY_WITH_PAGE_CACHE: Final = "container_memory_usage_with_page_cache_bytes"
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
# Host applications (NodeSLO ``hostApplications``), label ``host_app`` = the application's name; the
# ``host_apps_*`` sums (no labels) are what the system usage excludes, as upstream's shared host-app usage.
HOST_APP_CPU_USAGE: Final = "host_app_cpu_usage_cores"
HOST_APP_MEMORY_USAGE: Final = "host_app_memory_usage_bytes"
HOST_APP_MEMORY_WITH_PAGE_CACHE: Final = "host_app_memory_with_page_cache_bytes"
HOST_APPS_CPU_USAGE: Final = "host_apps_cpu_usage_cores"
HOST_APPS_MEMORY_USAGE: Final = "host_apps_memory_usage_bytes"

NODE_SERIES: Final = frozenset({NODE_CPU_USAGE, NODE_MEMORY_USAGE, NODE_MEMORY_WITH_PAGE_CACHE,
                                SYSTEM_CPU_USAGE, SYSTEM_MEMORY_USAGE,
                                BE_CPU_USAGE, BE_CPU_REQUEST, BE_CPU_LIMIT, NODE_PSI, HOST_APPS_CPU_USAGE,
                                HOST_APPS_MEMORY_USAGE})
"""Node-level series: kept in memory long enough for the 30-minute NodeMetric aggregates."""

VOLATILE_SERIES: Final = frozenset({POD_CPU_THROTTLED, CONTAINER_CPU_THROTTLED, POD_PSI, CONTAINER_PSI,
                                    CONTAINER_CPI})
"""Per-pod signals kept in memory only, for a short window: strategies act on their recent values."""
