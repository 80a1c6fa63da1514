"""``groupidentity`` (Koordinator ``runtimehooks/hooks/groupidentity``, plugin ``GroupIdentity``, gate
``GroupIdentity``, on by default): a pod cgroup's ``cpu.bvt_warp_ns`` from its class, stated at
PreRunPodSandbox so the pod's first process already runs with it.

The rule (upstream ``rule.go`` ``parseRule``, from the NodeSLO merged over the defaults):

* only under ``resourceQOSStrategy.policies.cpuPolicy`` = ``groupIdentity`` (the default; empty counts);
* a class whose ``cpuQOS.enable`` is false gets 0 (Koordinator's ``NoneCPUQOS``), an enabled one its
  ``cpuQOS.groupIdentity`` (defaults LSR 2, LS 2, BE -1);
* the pod's value: by its ``koordinator.sh/qosClass`` *label* (LSE and LSR take the LSR value, LS, BE);
  a pod without one of those labels (SYSTEM included, as upstream's map has no SYSTEM entry) by its
  kube QoS: Guaranteed the LSR value if LSR is enabled else the LS value if LS is enabled else 0,
  Burstable the LS value, BestEffort the BE value; no kube QoS either: 0;
* with no class enabled (or another policy) every pod gets 0.  Upstream skips when neither the rule nor
  the ``sched_group_identity_enabled`` sysctl is on, and writes the 0s once the sysctl is on (which it
  turns on when enabling); the hook cannot read the sysctl and always states the value, so a pod the
  reconciler re-applies goes back to 0 when the feature is switched off.

The pod annotation ``koordinator.sh/cpuQOS`` (``{"enable": true, "groupIdentity": 1}``) overrides the
value of LS pods only (upstream ``interceptor.go``: LS may go down to BE, BE may not go up, LSR/LSE are
never changed): its ``groupIdentity`` when set, and 0 when ``enable`` is not true — so the v1.6 blog's
``{"groupIdentity": 1}`` gives 0, exactly as upstream.  A malformed annotation is an error for any pod
(upstream returns the parse error before looking at the class), naming the pod and the annotation.

A container cgroup inherits the group identity of its pod and is not written (upstream writes container
dirs only from its reconciler, to reset them when the feature is switched off).

Kube-QoS directories (upstream ``SetKubeQOSBvtValue``, the reconciler's ``KubeQOSLevel``, and
``ruleUpdateCb``), every reconciler round through :mod:`.kubeqos`: ``burstable`` gets the LS value,
``besteffort`` the BE value and ``kubepods`` itself 0 ("guaranteed root dir must set as 0 until kernel
supported").  With the rule enabled, the sysctl ``kernel.sched_group_identity_enabled`` is set to 1 where the
kernel has it (Anolis >= 26.4 switches bvt off by default; upstream ``initSysctl``), through the sysctl
executor; switching the rule off leaves it on, as upstream does, and writes the 0s.

Host applications (NodeSLO ``hostApplications``): every reconciler round through :mod:`.hostapp`.

Host support: ``cpu.bvt_warp_ns`` exists only on Anolis kernels (probe ``cpu_bvt_warp_ns``).  Elsewhere
(this project's test host) the nearest thing the kernel offers is ``cpu.idle`` (>= 5.15, probe
``cpu_idle``): a BE pod whose value is -1 ("lowest, yield to everyone") gets ``cpu.idle = 1``
(SCHED_IDLE for the whole pod cgroup), and a BE pod whose value is anything else gets ``cpu.idle = 0``,
so switching the class off undoes it.  Non-BE pods are left alone, and so is everything under the
``coreSched`` policy, whose ``cpu.idle`` belongs to the coresched hook and strategy.  Neither file: nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label
from koordlet.apis.nodeslo import CPUQOSCfg, NodeSLOSpec, ResourceQOS, default_resource_qos_strategy
from koordlet.apis.pod import Pod
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, HookRequest, Stage, load_json
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import CPU_BVT_WARP_NS, CPU_IDLE

NAME = "groupidentity"
GATE = gates.GROUP_IDENTITY
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX})
POLICY_GROUP_IDENTITY = "groupIdentity"
ANNOTATION_CPU_QOS = "koordinator.sh/cpuQOS"
NONE_BVT = 0
"""Koordinator ``NoneCPUQOS().GroupIdentity``: the kernel default, "no identity"."""
LOWEST_BVT = -1
"""The value that maps onto ``cpu.idle = 1`` where bvt is missing."""


@dataclass(frozen=True)
class BvtRule:
    """Koordinator's ``bvtRule``: values by QoS label and by kube QoS."""

    enabled: bool
    """Some class is enabled under the groupIdentity policy."""
    group_identity: bool
    """The CPU QoS policy is groupIdentity (or unset)."""
    by_qos: Mapping[QoSClass, int]
    by_kube_qos: Mapping[KubeQoS, int]
    """Pods without a class label, by their kube QoS."""
    by_kube_qos_dir: Mapping[KubeQoS, int]
    """The kube-QoS directories themselves (upstream ``kubeQOSDirParams``)."""

    def pod_value(self, qos: QoSClass, kube_qos: KubeQoS | None) -> int:
        if qos in self.by_qos:
            return self.by_qos[qos]
        if kube_qos is not None and kube_qos in self.by_kube_qos:
            return self.by_kube_qos[kube_qos]
        return NONE_BVT


def _cpu_qos(cls: ResourceQOS | None) -> CPUQOSCfg | None:
    return None if cls is None else cls.cpu_qos


_last_rule: tuple[NodeSLOSpec | None, BvtRule | None] = (None, None)
"""The last NodeSLO seen and its rule: the reconciler asks for every pod of a round with the same NodeSLO
(frozen, replaced on each change), and building the defaults each time was most of its groupidentity cost."""


def rule_of(slo: NodeSLOSpec) -> BvtRule:
    """The bvt rule of a NodeSLO (unset fields take Koordinator's defaults)."""
    global _last_rule
    last_slo, last = _last_rule
    if last_slo is slo and last is not None:
        return last
    rule = _build_rule(slo)
    _last_rule = (slo, rule)
    return rule


def _build_rule(slo: NodeSLOSpec) -> BvtRule:
    strategy = slo.resource_qos_strategy or default_resource_qos_strategy()
    defaults = default_resource_qos_strategy()
    policy = strategy.policies.cpu_policy if strategy.policies is not None else None
    group_identity = not policy or policy == POLICY_GROUP_IDENTITY

    def value(attr: str) -> tuple[bool, int]:
        cfg = _cpu_qos(getattr(strategy, attr))
        default = _cpu_qos(getattr(defaults, attr))
        enabled = group_identity and cfg is not None and cfg.enable is True
        if not enabled:
            return False, NONE_BVT
        assert cfg is not None
        chosen = cfg.group_identity
        if chosen is None and default is not None:
            chosen = default.group_identity
        return True, chosen if chosen is not None else NONE_BVT

    lsr_on, lsr = value("lsr_class")
    ls_on, ls = value("ls_class")
    be_on, be = value("be_class")
    guaranteed = lsr if lsr_on else ls if ls_on else NONE_BVT
    return BvtRule(
        enabled=lsr_on or ls_on or be_on,
        group_identity=group_identity,
        by_qos={QoSClass.LSE: lsr, QoSClass.LSR: lsr, QoSClass.LS: ls, QoSClass.BE: be},
        by_kube_qos={KubeQoS.GUARANTEED: guaranteed, KubeQoS.BURSTABLE: ls, KubeQoS.BESTEFFORT: be},
        by_kube_qos_dir={KubeQoS.GUARANTEED: NONE_BVT, KubeQoS.BURSTABLE: ls, KubeQoS.BESTEFFORT: be},
    )


def pod_cpu_qos(pod: Pod) -> CPUQOSCfg | None:
    """The ``koordinator.sh/cpuQOS`` annotation, None without one; raises :class:`KoordletError` naming the
    pod and the annotation when it is not a valid ``cpuQOS`` object (groupIdentity outside -1..2...)."""
    text = pod.annotations.get(ANNOTATION_CPU_QOS)
    if text is None:
        return None
    where = f"pod {pod.key}: annotation {ANNOTATION_CPU_QOS}"
    raw = load_json(text, where)
    try:
        return CPUQOSCfg.from_json(raw, where="cpuQOS")
    except KoordletError as exc:
        raise KoordletError(f"{where}: {exc}") from None


def pod_bvt(rule: BvtRule, request: HookRequest) -> int:
    """The pod's ``cpu.bvt_warp_ns`` under ``rule``, the ``koordinator.sh/cpuQOS`` override applied."""
    pod = request.pod
    qos = qos_from_label(pod.labels.get(LABEL_QOS))
    value = rule.pod_value(qos, request.kube_qos)
    override = pod_cpu_qos(pod)
    if override is not None and qos is QoSClass.LS:
        if override.group_identity is not None:
            value = override.group_identity
        if override.enable is not True:
            value = NONE_BVT
    return value


def is_be(request: HookRequest) -> bool:
    """Labelled BE, or without a class label in the BestEffort level (SYSTEM pods are not BE)."""
    qos = qos_from_label(request.pod.labels.get(LABEL_QOS))
    return qos is QoSClass.BE or (qos is QoSClass.NONE and request.kube_qos is KubeQoS.BESTEFFORT)


def run(deps: HookDeps, ctx: HookContext) -> None:
    if not gates.enabled(deps.gates, GATE):
        return
    slo = deps.nodeslo()
    if slo is None:
        return
    has_bvt = deps.probes.get(CPU_BVT_WARP_NS.key, False)
    has_idle = deps.probes.get(CPU_IDLE.key, False)
    if not has_bvt and not has_idle:
        return
    rule = rule_of(slo)
    value = pod_bvt(rule, ctx.request)
    if has_bvt:
        ctx.write(CPU_BVT_WARP_NS, value)
        return
    if rule.group_identity and is_be(ctx.request):
        ctx.write(CPU_IDLE, 1 if value == LOWEST_BVT else 0)


def new(deps: HookDeps) -> Hook:
    from koordlet.runtimehooks.hooks.groupidentity import hostapp, kubeqos

    return Hook(NAME, "pod cpu.bvt_warp_ns by QoS class (cpu.idle=1 for BE where bvt is missing)", STAGES,
                functools.partial(run, deps), node_fn=functools.partial(kubeqos.run, deps),
                host_app_fn=functools.partial(hostapp.run, deps))


# No registration gate: the hook checks its gate itself, per request, with the NodeSLO policy and the host
# probes it depends on as well.
PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new)
