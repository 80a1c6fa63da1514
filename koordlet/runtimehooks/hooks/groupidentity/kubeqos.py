"""Group identity's node-level part (upstream ``groupidentity`` ``SetKubeQOSBvtValue`` and the sysctl half of
``ruleUpdateCb``), run by the runtime hooks' reconciler every round:

* ``cpu.bvt_warp_ns`` of the kube-QoS directories: ``kubepods`` 0, ``burstable`` the LS value,
  ``besteffort`` the BE value (the rule's ``by_kube_qos_dir``), on hosts with the file (probe
  ``cpu_bvt_warp_ns``).  Without bvt nothing is written at this level: the ``cpu.idle`` fallback of the pod
  level is per BE pod, and ``besteffort``'s own ``cpu.idle`` is the coresched strategy's;
* ``kernel.sched_group_identity_enabled`` = 1 while the rule is enabled, where the kernel has the file
  (upstream ``IsGroupIdentitySysctlSupported``: the file exists), set by the reconciler through the sysctl
  executor (validated, skipped when already 1, audited; in shadow mode only audited as intended).  Upstream
  also turns the core-scheduling sysctl off first (the two exclude each other on Anolis); this project's
  coresched strategy owns that knob, so it is not touched here.
"""

from __future__ import annotations

from koordlet.config import gates
from koordlet.resourceexecutor.sysctl import SysctlUpdate
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import NodeContext
from koordlet.runtimehooks.hooks.groupidentity import GATE, rule_of
from koordlet.system.resources import CPU_BVT_WARP_NS
from koordlet.system.sysfiles import SCHED_GROUP_IDENTITY_ENABLED

OWNER = "runtimehooks/groupidentity"


def run(deps: HookDeps, ctx: NodeContext) -> None:
    if not gates.enabled(deps.gates, GATE):
        return
    slo = deps.nodeslo()
    if slo is None:
        return
    rule = rule_of(slo)
    # kernel.sched_group_identity_enabled = 1; the reconciler writes it where the kernel has it (or, in shadow
    # mode, says it would) and reports a failure once per streak.
    if rule.enabled:
        ctx.set_sysctl(SysctlUpdate(SCHED_GROUP_IDENTITY_ENABLED, 1, f"{OWNER}: group identity enabled"))
    if not deps.probes.get(CPU_BVT_WARP_NS.key, False):
        return
    for kube_qos, value in rule.by_kube_qos_dir.items():
        ctx.write(kube_qos, CPU_BVT_WARP_NS, value)
