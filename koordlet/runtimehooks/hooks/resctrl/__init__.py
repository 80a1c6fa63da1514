"""``resctrl`` (Koordinator ``runtimehooks/hooks/resctrl``, gate ``Resctrl`` for pod groups, off by
default; the class groups are the ``resctrl`` QoS strategy's, gate ``RdtResctrl``): L3 cache ways and
memory bandwidth of a pod from its first process on.

* PreRunPodSandbox: a pod annotated ``node.koordinator.sh/resctrl`` gets its control group
  ``koordlet-<uid>`` with the annotation's schemata (:mod:`koordlet.isolation.resctrl.annotation`,
  the same parsing and arithmetic as the strategy, which keeps the group right afterwards) — upstream
  ``SetPodResctrlResourcesForHooks``.
* PreCreateContainer: ``rdt_class`` = the pod's group for an annotated pod (upstream
  ``SetContainerResctrlResources``, whose ``Closid`` is ``koordlet-<uid>``); the group is made first if
  the sandbox stage did not (koordlet restarted in between).  Other pods get their class's group
  (``LSR`` for LSE and LSR, ``LS``, ``BE``) when that class has ``resctrlQOS.enable`` and gate
  ``RdtResctrl`` is on and the strategy has made the group; upstream leaves class placement to the
  strategy's task moves, which this only anticipates.
* PreRemovePodSandbox: the pod's group is removed (the kernel hands its tasks back to the root group) —
  upstream ``RemovePodResctrlResources``.

Per-pod groups are for LSR and LSE pods only (the tenant policy drops the annotation of other pods before
this hook sees them), and a new one is made only while CLOSIDs stay for the class groups and the reserve
(``tenant.podResctrlClosidReserve``); otherwise the pod stays in its class group.

No resctrl executor, or resctrl not mounted (this test host): nothing, no error.  A malformed annotation
is a :class:`KoordletError` naming the pod and the annotation, before anything is written; so is a
schemata write the kernel refused.
"""

from __future__ import annotations

import functools

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.pod import Pod
from koordlet.apis.tenantpolicy import KEY_POD_RESCTRL, Refusal, pod_group_room
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.isolation.resctrl import annotation
from koordlet.isolation.resctrl.host import HostError, read_host, read_num_closids
from koordlet.isolation.resctrl.policy import class_cfg, pod_group
from koordlet.isolation.resctrl.schemata import PlanError
from koordlet.isolation.slo import qos_strategy
from koordlet.plugins import Plugin
from koordlet.resourceexecutor import Outcome
from koordlet.resourceexecutor.resctrl import ResctrlGroups
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, Stage

NAME = "resctrl"
GATE = gates.RDT_RESCTRL
"""Class groups: the strategy's gate, so the hook places containers only in groups the strategy keeps."""
POD_GATE = gates.RESCTRL
"""Per-pod groups from the annotation."""
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER, Stage.PRE_REMOVE_POD_SANDBOX})
DEFAULT_CPUINFO = "/proc/cpuinfo"
_CLASS_GROUP = {QoSClass.LSE: "LSR", QoSClass.LSR: "LSR", QoSClass.LS: "LS", QoSClass.BE: "BE"}

__all__ = ["GATE", "NAME", "PLUGIN", "POD_GATE", "STAGES", "class_group", "new", "run"]


def class_group(slo: NodeSLOSpec | None, qos: QoSClass) -> str | None:
    """The class group of ``qos`` when its ``resctrlQOS.enable`` is true, else None."""
    group = _CLASS_GROUP.get(qos)
    if group is None or slo is None:
        return None
    cfg = class_cfg(qos_strategy(slo), group)
    return group if cfg is not None and cfg.enable is True else None


def _cpuinfo(deps: HookDeps) -> str:
    return deps.layout.paths.proc("cpuinfo") if deps.layout is not None else DEFAULT_CPUINFO


def _ensure_pod_group(deps: HookDeps, executor: ResctrlGroups, pod: Pod, text: str) -> str:
    """Creates (or updates) the pod's group with the annotation's schemata; returns the group."""
    where = f"pod {pod.key}: annotation {annotation.ANNOTATION_RESCTRL}"
    try:
        spec = annotation.parse(text)
    except PlanError as exc:
        raise KoordletError(f"{where}: {exc}") from None
    try:
        host = read_host(executor.root, _cpuinfo(deps))
    except HostError as exc:
        raise KoordletError(f"pod {pod.key}: resctrl host unusable: {exc}") from None
    try:
        schemata = annotation.pod_schemata(spec, host)
    except PlanError as exc:
        raise KoordletError(f"{where}: {exc}") from None
    group = pod_group(pod.uid)
    result = executor.apply_schemata(group, schemata.lines(), f"{NAME}: pod {pod.key}")
    if not result.ok:
        raise KoordletError(f"pod {pod.key}: resctrl group {group}: {result.outcome.value} ({result.error})")
    return group


def _room(deps: HookDeps, executor: ResctrlGroups, pod: Pod) -> bool:
    """Whether the pod's group exists or may be made: a new one never takes the CLOSIDs kept for the class
    groups not made yet and the reserve (:func:`koordlet.apis.tenantpolicy.pod_group_room`).  A refusal is
    recorded with the tenant policy (logged once, shown by ``koordctl pods``); the pod stays in its class
    group."""
    groups = _existing(executor)
    num_closids = read_num_closids(executor.root)
    if pod_group(pod.uid) in groups or num_closids is None:
        return True
    why = pod_group_room(num_closids, groups, deps.tenant.closid_reserve)
    if why is None:
        return True
    deps.tenant.note(pod, (Refusal(KEY_POD_RESCTRL, f"annotation {annotation.ANNOTATION_RESCTRL}", why),),
                     latest=False)
    return False


def _existing(executor: ResctrlGroups) -> set[str]:
    try:
        return set(executor.groups())
    except (KoordletError, OSError):
        return set()


def run(deps: HookDeps, ctx: HookContext) -> None:
    executor = deps.resctrl
    if executor is None or executor.unsupported_reason() is not None:
        return
    request = ctx.request
    pod = request.pod
    pods_on = gates.enabled(deps.gates, POD_GATE)
    text = pod.annotations.get(annotation.ANNOTATION_RESCTRL) if pods_on else None
    if text is not None and request.stage in (Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_CREATE_CONTAINER):
        text = text if _room(deps, executor, pod) else None
    if request.stage is Stage.PRE_RUN_POD_SANDBOX:
        if text is not None:
            _ensure_pod_group(deps, executor, pod, text)
    elif request.stage is Stage.PRE_CREATE_CONTAINER:
        if text is not None:
            ctx.set("rdt_class", _ensure_pod_group(deps, executor, pod, text))
            return
        if not gates.enabled(deps.gates, GATE):
            return
        group = class_group(deps.nodeslo(), request.qos)
        # runc refuses a container whose class does not exist; until the strategy made it, none.
        if group is not None and group in _existing(executor):
            ctx.set("rdt_class", group)
    elif request.stage is Stage.PRE_REMOVE_POD_SANDBOX:
        # Gate or annotation may have changed since the pod started: remove the group whenever it exists.
        group = pod_group(pod.uid)
        result = executor.remove_group(group, f"{NAME}: pod {pod.key} removed")
        if result.outcome not in (Outcome.WRITTEN, Outcome.INTENDED, Outcome.GONE):
            raise KoordletError(f"pod {pod.key}: remove resctrl group {group}: {result.outcome.value} "
                                f"({result.error})")


def new(deps: HookDeps) -> Hook:
    return Hook(NAME, "per-pod resctrl group from node.koordinator.sh/resctrl; container rdt_class", STAGES,
                functools.partial(run, deps))


# No registration gate: two gates decide per stage what the hook does, and a pod group must still be removed
# after its gate was turned off.
PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new)
