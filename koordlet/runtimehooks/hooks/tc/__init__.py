"""``tc`` (Koordinator ``runtimehooks/hooks/tc``, plugin ``tcPlugin``, gate ``TCNetworkQoS``, off by
default): a pod cgroup's ``net_cls.classid`` names the HTB class of the pod's network QoS class, so a
``cgroup`` classifier (or anything else reading the socket's classid) sends its traffic there.

Upstream ``SetPodNetCls``: SYSTEM -> ``1:2``, LSE/LSR/LS -> ``1:3``, BE -> ``1:4`` (``tc_linux.go``
``MAJOR_ID`` 1, ``{SYSTEM,LS,BE}_CLASS_MINOR_ID`` 2/3/4; the value is ``major << 16 | minor``, e.g.
``0x10003``); a pod of no class gets nothing.  The handles are the ones our tc backend creates
(:data:`koordlet.resourceexecutor.tc.CLASS_MINOR` under :data:`~koordlet.resourceexecutor.tc_netlink.ROOT_HANDLE`),
and the class is chosen as the ``netqos`` strategy chooses the ipset a pod's addresses go to, so both
classifications agree: the ``koordinator.sh/qosClass`` label, else the kube QoS (from the cgroup parent
when the runtime gives none).  Upstream reads the label only.

A pod with a bandwidth of its own (annotation ``koordinator.sh/networkQOS`` with an ingress or egress limit,
:mod:`koordlet.isolation.netqos.podlimit`) gets the id of its own class ``1:<minor>``, the minor derived
from its UID as the netqos strategy derives it when it makes that class (upstream: the pod's handle from the
rule's uid map).  A malformed annotation counts as none here, as in the strategy (which reports it), so
both classify the pod with its class (upstream logs the parse error and goes on the same way).

Runs at PreRunPodSandbox (upstream sets it from its pod reconciler only, "TODO register NRI") while the
gate is on, the NodeSLO's ``resourceQOSStrategy.policies.netQOSPolicy`` is ``tc`` (the default) and the
host has ``net_cls`` (probe ``net_cls_classid``; a v1 controller, absent on pure cgroup v2).
"""

from __future__ import annotations

import functools

from koordlet.apis.extension import QoSClass
from koordlet.config import gates
from koordlet.errors import ConfigError
from koordlet.isolation.netqos.podlimit import pod_minor, pod_net_limit
from koordlet.isolation.netqos.policy import POLICY_TC, policy_of
from koordlet.plugins import Plugin
from koordlet.resourceexecutor.tc import CLASS_MINOR
from koordlet.resourceexecutor.tc_netlink import ROOT_HANDLE
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, Stage
from koordlet.system.resources import NET_CLS_CLASSID

NAME = "tc"
GATE = gates.TC_NETWORK_QOS
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX})
NET_CLASS = {QoSClass.SYSTEM: "system", QoSClass.LSE: "ls", QoSClass.LSR: "ls", QoSClass.LS: "ls",
             QoSClass.BE: "be"}
"""Koordinator ``GetPodNetQoSClassByName``."""


def classid(net_class: str) -> int:
    """``net_cls.classid`` of an HTB class of our backend: ``1:<minor>`` as ``0x0001MMMM``."""
    return ROOT_HANDLE | CLASS_MINOR[net_class]


def run(deps: HookDeps, ctx: HookContext) -> None:
    if not gates.enabled(deps.gates, GATE) or not deps.probes.get(NET_CLS_CLASSID.key, False):
        return
    slo = deps.nodeslo()
    if slo is None or policy_of(slo) != POLICY_TC:
        return
    net_class = NET_CLASS.get(ctx.request.qos)
    if net_class is None:
        return
    pod = ctx.request.pod
    try:
        limit = pod_net_limit(pod.key, pod.annotations)
    except ConfigError:
        limit = None
    if limit is not None and limit.limited:
        ctx.write(NET_CLS_CLASSID, ROOT_HANDLE | pod_minor(pod.uid))
        return
    ctx.write(NET_CLS_CLASSID, classid(net_class))


def new(deps: HookDeps) -> Hook:
    return Hook(NAME, "pod net_cls.classid of its tc network QoS class", STAGES, functools.partial(run, deps))


# No registration gate: the hook checks its gate itself, per request, with the NodeSLO's network policy.
PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new)
