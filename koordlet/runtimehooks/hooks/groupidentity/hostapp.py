"""Group identity's host-application part (upstream ``groupidentity`` ``SetHostAppBvtValue`` with
``getHostQOSBvtValue``), run by the runtime hooks' reconciler every round for each NodeSLO host
application: ``cpu.bvt_warp_ns`` of the application's cgroup is the rule's value for its QoS class (LSE and
LSR the LSR value, LS the LS value, BE the BE value; no class: 0, Koordinator's ``NoneCPUQOS``), on hosts
with the file (probe ``cpu_bvt_warp_ns``).  Without bvt nothing is written: the ``cpu.idle`` fallback is
per BE pod only, as upstream has no host-application ``cpu.idle``.
"""

from __future__ import annotations

from koordlet.config import gates
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HostAppContext
from koordlet.runtimehooks.hooks.groupidentity import GATE, NONE_BVT, rule_of
from koordlet.system.resources import CPU_BVT_WARP_NS


def run(deps: HookDeps, ctx: HostAppContext) -> None:
    if not gates.enabled(deps.gates, GATE) or not deps.probes.get(CPU_BVT_WARP_NS.key, False):
        return
    slo = deps.nodeslo()
    if slo is None:
        return
    ctx.write(CPU_BVT_WARP_NS, rule_of(slo).by_qos.get(ctx.qos, NONE_BVT))
