"""NodeMetric ``hostApplicationMetric`` (koordinator ``states_nodemetric.go``, ``collectHostAppMetric``):
per NodeSLO host application, the average CPU and memory over the aggregate window, with the entry's
priority and QoS as written.  The memory figure follows the collect policy: with page cache for
``usageWithPageCache``, without it otherwise (``usageWithHotPageCache`` needs kidled, which is not
collected, and degrades as upstream degrades it without kidled).  An application without samples in the
window is left out, as upstream leaves out one whose query fails; the list is sorted by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import HostApplicationMetricInfo, MemoryCollectPolicy, ResourceMap
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.metriccache import names
from koordlet.metriccache.aggregate import Aggregate
from koordlet.metriccache.cache import Labels
from koordlet.statesinformer import hostapps

_PRIORITIES = {p.value: p for p in PriorityClass}
_QOS = {q.value: q for q in QoSClass}


class _Querier(Protocol):
    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        ...


def host_app_metrics(cache: _Querier, apps: Sequence[HostApplicationSpec], memory_policy: MemoryCollectPolicy,
                     seconds: float, now: float) -> tuple[HostApplicationMetricInfo, ...]:
    memory_series = (names.HOST_APP_MEMORY_WITH_PAGE_CACHE if memory_policy is MemoryCollectPolicy.WITH_PAGE_CACHE
                     else names.HOST_APP_MEMORY_USAGE)
    found = []
    for app in hostapps.unique(apps):
        labels = hostapps.labels(app.name or "")
        cpu = cache.aggregate(names.HOST_APP_CPU_USAGE, labels, seconds, now)
        memory = cache.aggregate(memory_series, labels, seconds, now)
        if cpu is None or memory is None:
            continue
        found.append(HostApplicationMetricInfo(
            name=app.name or "", usage=ResourceMap.from_usage(cpu.avg, memory.avg),
            priority=_PRIORITIES.get(app.priority or "", PriorityClass.NONE),
            qos=_QOS.get(app.qos or "", QoSClass.NONE)))
    return tuple(sorted(found, key=lambda m: m.name))
