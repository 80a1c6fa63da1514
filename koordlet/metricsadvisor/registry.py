"""The collectors koordlet knows, by name, in the order they run within a shared tick."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from koordlet.metricsadvisor.collectors.beresource import BEResourceCollector
from koordlet.metricsadvisor.collectors.cpi import CPICollector
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.podmemory import PodMemoryCollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.collectors.psi import PSICollector
from koordlet.metricsadvisor.collectors.sysresource import SysResourceCollector
from koordlet.metricsadvisor.collectors.throttled import ThrottledCollector
from koordlet.metricsadvisor.framework import Collector

# sysresource derives from noderesource and podresource samples of the same tick: it comes after them.
FACTORIES: Sequence[tuple[str, Callable[[], Collector]]] = (
    ("noderesource", NodeResourceCollector),
    ("podresource", PodResourceCollector),
    ("podmemory", PodMemoryCollector),
    ("throttled", ThrottledCollector),
    ("beresource", BEResourceCollector),
    ("sysresource", SysResourceCollector),
    ("psi", PSICollector),
    ("cpi", CPICollector),
)


def build_collectors() -> list[Collector]:
    """One instance of every collector; a duplicate name is a programming error caught at start-up."""
    names = [name for name, _ in FACTORIES]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate collector names: {', '.join(duplicates)}")
    collectors = [factory() for _, factory in FACTORIES]
    for (name, _), collector in zip(FACTORIES, collectors, strict=True):
        if collector.name != name:
            raise ValueError(f"collector registered as {name!r} calls itself {collector.name!r}")
    return collectors
