"""Which core-scheduling group a pod belongs to and which cgroups want ``cpu.idle`` (Koordinator
``runtimehooks/hooks/coresched/rule.go`` and ``helper.go``; labels from ``apis/slo/v1alpha1/pod.go``).

Per class (LSR, LS, BE; LSE follows LSR) the NodeSLO gives ``cpuQOS.enable`` (cookies for the class's pods),
``cpuQOS.coreExpeller`` (the class's group ids get the ``-expeller`` suffix, so its pods never share a core
with pods of a class without it) and ``cpuQOS.schedIdle`` (``cpu.idle=1``).  A pod then picks its group:

* label ``koordinator.sh/core-sched-group-id`` (missing = the group ``""``, which all unlabelled pods share),
  scoped to the pod's namespace (:func:`scoped_group`; upstream's ids are global);
* label ``koordinator.sh/core-sched-policy``: ``exclusive`` makes the pod UID the group id, ``none`` turns
  cookies off for the pod (it is reset to the default cookie 0); any other value is the default policy.

SYSTEM pods never get a cookie: they keep the default cookie, as koordlet itself does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.apis.extension import LABEL_CORE_SCHED_GROUP, QoSClass
from koordlet.apis.nodeslo import CPUQOSCfg, NodeSLOSpec, ResourceQOS
from koordlet.isolation.slo import qos_strategy
from koordlet.statesinformer.framework import PodMeta

LABEL_CORE_SCHED_POLICY = "koordinator.sh/core-sched-policy"
POLICY_DEFAULT = ""
POLICY_NONE = "none"
POLICY_EXCLUSIVE = "exclusive"
EXPELLER_SUFFIX = "-expeller"
CPU_POLICY_CORE_SCHED = "coreSched"

_FIELDS = {QoSClass.LSR: "lsrClass", QoSClass.LS: "lsClass", QoSClass.BE: "beClass"}
_ATTRS = {QoSClass.LSR: "lsr_class", QoSClass.LS: "ls_class", QoSClass.BE: "be_class"}
_CLASS_OF = {QoSClass.LSE: QoSClass.LSR, QoSClass.LSR: QoSClass.LSR, QoSClass.LS: QoSClass.LS,
             QoSClass.BE: QoSClass.BE}


@dataclass(frozen=True)
class ClassParam:
    """What ``cpuQOS`` of one class asks for under the coreSched policy (Koordinator ``Param``)."""

    enabled: bool = False
    expeller: bool = False
    idle: bool = False


@dataclass(frozen=True)
class Rule:
    """The NodeSLO's core-scheduling settings, per class."""

    params: Mapping[QoSClass, ClassParam]

    def param(self, qos: QoSClass) -> ClassParam:
        cls = _CLASS_OF.get(qos)
        return self.params.get(cls, ClassParam()) if cls is not None else ClassParam()

    def numbers(self) -> dict[str, dict[str, bool]]:
        return {_FIELDS[c]: {"enable": p.enabled, "coreExpeller": p.expeller, "schedIdle": p.idle}
                for c, p in self.params.items()}


@dataclass(frozen=True)
class PodGroup:
    """A pod's verdict: ``enabled`` False means "default cookie 0" (policy none, class off, SYSTEM)."""

    enabled: bool
    group: str
    why: str


def cpu_policy(slo: NodeSLOSpec) -> str:
    policies = qos_strategy(slo).policies
    return (policies.cpu_policy if policies is not None else None) or ""


def _cpu_qos(cls: ResourceQOS | None) -> CPUQOSCfg | None:
    return None if cls is None else cls.cpu_qos


def rule_of(slo: NodeSLOSpec) -> Rule:
    """The per-class params; every flag is off unless the policy is coreSched (Koordinator ``newParam``)."""
    strategy = qos_strategy(slo)
    core_sched = cpu_policy(slo) == CPU_POLICY_CORE_SCHED
    params: dict[QoSClass, ClassParam] = {}
    for cls, attr in _ATTRS.items():
        cfg = _cpu_qos(getattr(strategy, attr))
        if cfg is None or not core_sched:
            params[cls] = ClassParam()
            continue
        params[cls] = ClassParam(enabled=cfg.enable is True, expeller=cfg.core_expeller is True,
                                 idle=cfg.sched_idle == 1)
    return Rule(params)


def pod_policy(labels: Mapping[str, str]) -> str:
    value = labels.get(LABEL_CORE_SCHED_POLICY, "")
    return value if value in (POLICY_NONE, POLICY_EXCLUSIVE) else POLICY_DEFAULT


def scoped_group(namespace: str, group_id: str) -> str:
    """The group a ``core-sched-group-id`` label names, within the pod's namespace (``<ns>/<id>``): the label
    is the tenant's own, and a global id would let a pod join another namespace's group (pod UIDs, the ids of
    ``exclusive`` pods, are on the metrics endpoint).  Namespaces hold no ``/`` and UIDs none either, so
    ``ns/id`` never equals another namespace's group or an exclusive pod's UID.  The empty id stays the one
    group all unlabelled pods of a class share."""
    return f"{namespace}/{group_id}" if group_id else ""


def pod_group(rule: Rule, pod: PodMeta) -> PodGroup:
    """Koordinator ``getPodEnabledAndGroup``: the group id carries the expeller suffix even when the pod is
    disabled, so the id names the cookie the pod would share."""
    qos = pod.qos
    if qos is QoSClass.SYSTEM or qos is QoSClass.NONE:
        return PodGroup(False, "", f"QoS {qos.value or 'none'} keeps the default cookie")
    labels = pod.pod.labels
    param = rule.param(qos)
    group = scoped_group(pod.pod.namespace, labels.get(LABEL_CORE_SCHED_GROUP, ""))
    policy = pod_policy(labels)
    enabled, why = param.enabled, f"{_FIELDS[_CLASS_OF[qos]]}.cpuQOS.enable={param.enabled}"
    if policy == POLICY_EXCLUSIVE:
        group = pod.uid
    elif policy == POLICY_NONE:
        enabled, why = False, f"label {LABEL_CORE_SCHED_POLICY}=none"
    if param.expeller:
        group += EXPELLER_SUFFIX
    return PodGroup(enabled, group, why)
