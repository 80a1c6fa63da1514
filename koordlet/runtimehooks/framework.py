"""The hook framework shared by the NRI plugin, the RuntimeHookService server and the reconciler
(Koordinator ``runtimehooks/hooks``): what a hook is, the stages it runs at, and the runner.

A hook reads a :class:`HookRequest` (the pod, the container when there is one) and states the values it
wants through :meth:`HookContext.set`.  The runner calls the hooks of a stage in name order, each into a
scratch :class:`Adjustment` that is merged only when the hook returned: a hook that fails leaves nothing
half-applied.  A field two hooks both set is an error of the second one (their order must not decide a
container's resources silently).  The failure policy is Koordinator's
``--runtime-hooks-plugin-failure-policy``: ``Ignore`` (default) logs the hook's error and goes on with the
next hook; ``Fail`` stops the stage at the first error, which the transport reports to the runtime.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordlet.apis.extension import QoSClass, pod_qos
from koordlet.apis.gojson import loads
from koordlet.apis.pod import Container, Pod
from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.sysctl import SysctlUpdate
from koordlet.shadowmodes import ShadowModes
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.kubepaths import KubeQoS, cgroup_parent_dir, kube_qos_of_parent
from koordlet.system.resources import REGISTRY

log = logging.getLogger(__name__)


class Stage(enum.Enum):
    """Where in a pod's or container's life a hook runs (the RuntimeHookService method names)."""

    PRE_RUN_POD_SANDBOX = "PreRunPodSandbox"
    PRE_CREATE_CONTAINER = "PreCreateContainer"
    PRE_START_CONTAINER = "PreStartContainer"
    POST_START_CONTAINER = "PostStartContainer"
    POST_STOP_CONTAINER = "PostStopContainer"
    POST_STOP_POD_SANDBOX = "PostStopPodSandbox"
    PRE_UPDATE_CONTAINER_RESOURCES = "PreUpdateContainerResources"
    PRE_REMOVE_POD_SANDBOX = "PreRemovePodSandbox"


POD_STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.POST_STOP_POD_SANDBOX, Stage.PRE_REMOVE_POD_SANDBOX})
"""Stages about the pod sandbox: their requests carry no container."""


class FailurePolicy(enum.Enum):
    IGNORE = "Ignore"
    FAIL = "Fail"


def failure_policy(text: str) -> FailurePolicy:
    """``Ignore`` (also empty, as Koordinator reads it) or ``Fail``."""
    if text in ("", FailurePolicy.IGNORE.value):
        return FailurePolicy.IGNORE
    if text == FailurePolicy.FAIL.value:
        return FailurePolicy.FAIL
    raise ConfigError(f"runtime_hooks.plugin_failure_policy: must be Ignore or Fail, got {text!r}")


FIELDS = frozenset({
    "cpu_shares", "cpu_quota", "cpu_period", "cpuset_cpus", "cpuset_mems", "memory_limit", "oom_score_adj",
    "rdt_class", "blockio_class", "cgroup_parent",
})
"""Single-valued fields a hook may set (container resources in cgroup v1 units, as in the NRI and
RuntimeHookService messages: shares, quota/period in microseconds, limit in bytes)."""
MAPS = frozenset({"env", "annotations", "unified"})
"""Keyed fields: each key (``env`` ``FOO``) is owned separately, so two hooks may add different keys."""
WRITE_PREFIX = "cgroup."
"""Owner key prefix of a cgroup write (``cgroup.cpu_idle``)."""


def load_json(text: str, where: str) -> Any:
    """An annotation's JSON; raises :class:`KoordletError` naming ``where`` (the pod and the annotation) when
    it is not JSON, so a hook refuses garbage before it sets anything."""
    try:
        return loads(text)
    except ValueError as exc:
        raise KoordletError(f"{where}: not JSON: {exc}") from None


class HookConflict(KoordletError):
    """Two hooks set the same field."""


@dataclass(frozen=True)
class HookRequest:
    """What a hook sees: the pod as the runtime describes it (labels, annotations, resources), the
    container at container stages, and where their cgroups are."""

    stage: Stage
    pod: Pod
    pod_cgroup_parent: str = ""
    """The pod's cgroup directory relative to the hierarchy root, as the runtime was told it."""
    container: Container | None = None
    container_id: str = ""

    @property
    def kube_qos(self) -> KubeQoS | None:
        """The pod's kube QoS, else the QoS level its cgroup parent sits in (upstream
        ``GetKubeQoSByCgroupParent``): the runtime's requests carry no ``status.qosClass``, and a pod without
        a class label must be placed as the strategies, which see kubelet's QoS, place it."""
        if self.pod.kube_qos is not None or not self.pod_cgroup_parent:
            return self.pod.kube_qos
        try:
            return kube_qos_of_parent(cgroup_parent_dir(self.pod_cgroup_parent))
        except KoordletError as exc:
            raise KoordletError(f"pod {self.pod.key}: cgroup parent {self.pod_cgroup_parent!r}: {exc}") from None

    def pod_with_kube_qos(self) -> Pod:
        kube_qos = self.kube_qos
        return self.pod if kube_qos is self.pod.kube_qos else dataclasses.replace(self.pod, kube_qos=kube_qos)

    @property
    def qos(self) -> QoSClass:
        """The pod's Koordinator class (label, else from :attr:`kube_qos`)."""
        return pod_qos(self.pod.labels, self.kube_qos)


@dataclass
class Adjustment:
    """The values the hooks of one stage want, each with the hook that set it."""

    values: dict[str, object] = field(default_factory=dict)
    maps: dict[str, dict[str, str]] = field(default_factory=dict)
    writes: dict[str, object] = field(default_factory=dict)
    """Cgroup files the runtime's messages cannot carry (``cpu_idle``, ``cpu_bvt_warp_ns``,
    ``net_cls_classid``: registry key -> value), written through the resource executor into the pod's
    cgroup at pod stages and the container's at container stages (see :mod:`.apply`)."""
    owners: dict[str, str] = field(default_factory=dict)
    """``field``, ``map.key`` or ``cgroup.resource`` -> the hook that set it."""

    def empty(self) -> bool:
        return not self.values and not any(self.maps.values()) and not self.writes

    def merge(self, other: Adjustment) -> None:
        """Takes ``other``'s values; raises :class:`HookConflict` (changing nothing) when one of its
        fields already has another owner."""
        for key, owner in other.owners.items():
            mine = self.owners.get(key)
            if mine is not None and mine != owner:
                raise HookConflict(f"{key} is set by both hook {mine} and hook {owner}")
        self.values.update(other.values)
        self.writes.update(other.writes)
        for name, entries in other.maps.items():
            self.maps.setdefault(name, {}).update(entries)
        self.owners.update(other.owners)


class HookContext:
    """One hook's view of a stage: the request and a setter that records the hook as the owner."""

    __slots__ = ("_adjustment", "hook", "request")

    def __init__(self, request: HookRequest, hook: str) -> None:
        self.request = request
        self.hook = hook
        self._adjustment: Adjustment | None = None

    @property
    def adjustment(self) -> Adjustment:
        """What the hook set; made on first use, as most hooks set nothing for most pods (the reconciler runs
        every hook for every pod and container each round)."""
        if self._adjustment is None:
            self._adjustment = Adjustment()
        return self._adjustment

    def set(self, name: str, value: object) -> None:
        if name not in FIELDS:
            raise KoordletError(f"hook {self.hook}: unknown field {name!r} (known: {', '.join(sorted(FIELDS))})")
        self.adjustment.values[name] = value
        self.adjustment.owners[name] = self.hook

    def set_entry(self, name: str, key: str, value: str) -> None:
        if name not in MAPS:
            raise KoordletError(f"hook {self.hook}: unknown map {name!r} (known: {', '.join(sorted(MAPS))})")
        self.adjustment.maps.setdefault(name, {})[key] = value
        self.adjustment.owners[f"{name}.{key}"] = self.hook

    def write(self, resource: CgroupFile, value: object) -> None:
        """Asks for a cgroup file the runtime cannot set (a descriptor of :mod:`koordlet.system.resources`);
        the value is validated by the executor when it is written."""
        if REGISTRY.get(resource.key) is not resource:
            raise KoordletError(f"hook {self.hook}: unknown cgroup resource {resource.key!r}")
        self.adjustment.writes[resource.key] = value
        self.adjustment.owners[WRITE_PREFIX + resource.key] = self.hook


class NodeContext:
    """A hook's view of a reconciler round at node level (upstream's ``KubeQOSLevel`` cgroup reconcilers):
    values for the kube-QoS directories (``kubepods``, ``burstable``, ``besteffort``), written through the
    resource executor by the reconciler, which knows where the directories are."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.writes: dict[KubeQoS, dict[str, object]] = {}
        self.sysctls: list[SysctlUpdate] = []
        """Node-wide kernel knobs, set by the reconciler through the kernel knob executor (in shadow mode only
        said, to the audit log)."""

    def write(self, kube_qos: KubeQoS, resource: CgroupFile, value: object) -> None:
        if REGISTRY.get(resource.key) is not resource:
            raise KoordletError(f"hook {self.hook}: unknown cgroup resource {resource.key!r}")
        self.writes.setdefault(kube_qos, {})[resource.key] = value

    def set_sysctl(self, update: SysctlUpdate) -> None:
        self.sysctls.append(update)


class HostAppContext:
    """A hook's view of one NodeSLO host application in a reconciler round (upstream ``HostAppContext``):
    values for the application's cgroup, written through the resource executor by the reconciler, which
    knows where the cgroup is."""

    def __init__(self, hook: str, name: str, qos: QoSClass) -> None:
        self.hook = hook
        self.name = name
        self.qos = qos
        self.writes: dict[str, object] = {}

    def write(self, resource: CgroupFile, value: object) -> None:
        if REGISTRY.get(resource.key) is not resource:
            raise KoordletError(f"hook {self.hook}: unknown cgroup resource {resource.key!r}")
        self.writes[resource.key] = value


@dataclass(frozen=True)
class Hook:
    """A named function run at some stages; ``fn`` states values through the context and raises on error.
    ``node_fn``, when set, runs once per reconciler round for node-level state (kube-QoS directories);
    ``host_app_fn`` once per round and host application (upstream ``RegisterHostAppReconciler``)."""

    name: str
    description: str
    stages: frozenset[Stage]
    fn: Callable[[HookContext], None]
    node_fn: Callable[[NodeContext], None] | None = None
    host_app_fn: Callable[[HostAppContext], None] | None = None


class HookMetricsSink(Protocol):
    def observe_hook(self, hook: str, stage: str, ok: bool, seconds: float) -> None: ...


class NullHookMetrics:
    def observe_hook(self, hook: str, stage: str, ok: bool, seconds: float) -> None: ...


@dataclass
class StageResult:
    """The merged adjustment, the errors of hooks that failed (``hook: reason``), and whether the stage
    failed as a whole (policy Fail)."""

    adjustment: Adjustment
    errors: list[str] = field(default_factory=list)
    failed: bool = False
    ran: list[str] = field(default_factory=list)
    intended: Adjustment = field(default_factory=Adjustment)
    """What the hooks in shadow mode would have set: recorded, never answered or written."""


HOOK_CALL_HISTORY = 512
"""Hook calls kept for the debug API (``/v1/hooks``)."""
RECONCILER = "reconciler"
"""The transport name of the reconciler, whose calls are recorded only when they changed or failed."""


@dataclass(frozen=True)
class HookCall:
    """One stage run as the debug API shows it; ``adjustment`` is flat: ``field``, ``map.key`` and
    ``cgroup.resource`` (the owner keys) -> value."""

    at: float
    stage: str
    pod: str
    container: str
    transport: str
    duration_ms: float
    ok: bool
    errors: tuple[str, ...]
    adjustment: Mapping[str, object]
    intended: Mapping[str, object] = field(default_factory=dict)
    """What hooks in shadow mode would have set (flat, as ``adjustment``), which the answer did not carry."""

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "stage": self.stage, "pod": self.pod, "container": self.container,
                "transport": self.transport, "duration_ms": self.duration_ms, "ok": self.ok,
                "errors": list(self.errors), "adjustment": dict(self.adjustment), "intended": dict(self.intended)}


def flat_adjustment(adjustment: Adjustment) -> dict[str, object]:
    flat: dict[str, object] = dict(adjustment.values)
    for name, entries in adjustment.maps.items():
        flat.update((f"{name}.{key}", value) for key, value in entries.items())
    flat.update((WRITE_PREFIX + resource, value) for resource, value in adjustment.writes.items())
    return flat


class HookCallRecorder:
    """The last ``size`` hook calls, oldest first (thread-safe: the transports run in their own threads)."""

    def __init__(self, size: int = HOOK_CALL_HISTORY, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        """Wall clock stamping :attr:`HookCall.at`."""
        self._lock = threading.Lock()
        self._calls: collections.deque[HookCall] = collections.deque(maxlen=size)

    def record(self, call: HookCall) -> None:
        with self._lock:
            self._calls.append(call)

    def recent(self, limit: int) -> list[HookCall]:
        """The newest ``limit`` calls, oldest first."""
        with self._lock:
            calls = list(self._calls)
        return calls[-limit:] if limit > 0 else []


class HookRunner:
    """Runs the hooks of a stage in name order under a failure policy; ``disabled`` stages run nothing
    (Koordinator ``--runtime-hooks-disable-stages``).  ``recorder`` keeps the recent calls for the debug
    API."""

    def __init__(self, hooks: Iterable[Hook], policy: FailurePolicy = FailurePolicy.IGNORE,
                 metrics: HookMetricsSink | None = None, disabled: Iterable[Stage] = (),
                 clock: Callable[[], float] = time.perf_counter, recorder: HookCallRecorder | None = None,
                 tenant: Callable[[HookRequest], HookRequest] | None = None, shadow: ShadowModes | None = None,
                 shadow_sink: WriteSink = NULL_SINK) -> None:
        """``tenant``: reviews each request's pod before any hook sees it (the tenant policy,
        :class:`koordlet.runtimehooks.tenant.TenantGate`); None: pods are taken as they come.

        ``shadow``: the hooks in shadow mode, the object their deps hold (``HookDeps.shadow``, which their other
        writers follow).  Such a hook runs as in active mode, and what it sets goes to
        :attr:`StageResult.intended` instead of the adjustment: recorded (the call's ``intended``) and counted
        in ``shadow_sink`` for every call of a transport (not the reconciler's rounds, which repeat it), and
        neither answered to the runtime nor written.  What it would do through its other writers (resctrl groups,
        core-scheduling cookies) its own views record (:meth:`~koordlet.runtimehooks.deps.HookDeps.for_hook`)."""
        ordered = sorted(hooks, key=lambda h: h.name)
        names = [h.name for h in ordered]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"duplicate runtime hook names: {', '.join(duplicates)}")
        self.policy = policy
        self.names = tuple(names)
        self._metrics: HookMetricsSink = metrics or NullHookMetrics()
        skipped = frozenset(disabled)
        self._clock = clock
        self.recorder = recorder
        self._tenant = tenant
        self.shadow = shadow
        self._shadow_sink = shadow_sink
        # The hooks each stage runs, disabled stages resolved here: the reconciler asks for every pod and
        # container of every round (and hashing an enum member runs Python code).
        self._by_stage: Mapping[Stage, tuple[Hook, ...]] = {
            stage: () if stage in skipped else tuple(h for h in ordered if stage in h.stages) for stage in Stage}
        self.node_hooks = tuple(h for h in ordered if h.node_fn is not None)
        """Hooks with node-level state, run by the reconciler every round."""
        self.host_app_hooks = tuple(h for h in ordered if h.host_app_fn is not None)
        """Hooks with a host-application part, run by the reconciler every round for each application."""

    def hooks(self, stage: Stage) -> tuple[Hook, ...]:
        return self._by_stage[stage]

    def run(self, request: HookRequest, *, log_errors: bool = True, transport: str = "") -> StageResult:
        """``log_errors`` False: the caller reports the errors itself (the reconciler logs once per
        failure streak, not every round).  ``transport`` (``nri``, ``hookserver``, ``reconciler``) names the
        caller in the recorded call; the reconciler's calls are recorded only when they set something or
        failed, so its rounds over every pod do not flush the history."""
        began = self._clock()
        result = self._reviewed(request, log_errors)
        intended = result.intended.owners
        if intended and transport != RECONCILER:
            for key, hook in intended.items():
                self._shadow_sink.intended(key, f"runtimehooks/{hook}")
        recorder = self.recorder
        if recorder is not None and (transport != RECONCILER or result.errors or not result.adjustment.empty()):
            seconds = self._clock() - began
            recorder.record(HookCall(
                at=recorder.clock(), stage=request.stage.value, pod=request.pod.key,
                container=request.container.name if request.container is not None else "", transport=transport,
                duration_ms=round(seconds * 1000, 3), ok=not result.errors, errors=tuple(result.errors),
                adjustment=flat_adjustment(result.adjustment),
                intended=flat_adjustment(result.intended) if intended else {}))
        return result

    def in_shadow(self, hook: str) -> bool:
        """Whether ``hook`` runs in shadow mode now."""
        return self.shadow is not None and self.shadow.shadow(hook)

    def _reviewed(self, request: HookRequest, log_errors: bool) -> StageResult:
        if self._tenant is not None and self.hooks(request.stage):
            try:
                request = self._tenant(request)
            except Exception as exc:  # fail closed: no hook may see a pod the policy did not review
                error = f"tenant policy: {exc}"
                if log_errors:
                    log.warning("runtime hook request not reviewed", extra={
                        "stage": request.stage.value, "pod": request.pod.key, "error": error})
                return StageResult(Adjustment(), [error], failed=self.policy is FailurePolicy.FAIL)
        return self._run(request, log_errors)

    def _run(self, request: HookRequest, log_errors: bool) -> StageResult:
        result = StageResult(Adjustment())
        stage = request.stage.value  # once, not per hook: an enum's value is a Python-level descriptor
        shadow = self.shadow if self.shadow is not None and self.shadow.any() else None
        # Every hook's values, whatever its mode: two hooks setting one field conflict in shadow mode too.
        every = Adjustment() if shadow is not None else result.adjustment
        for hook in self.hooks(request.stage):
            ctx = HookContext(request, hook.name)
            started = self._clock()
            error: str | None = None
            try:
                hook.fn(ctx)
                mine = ctx._adjustment
                # Most hooks set nothing for most pods: merging an empty adjustment changes nothing.
                if mine is not None and (mine.owners or mine.values or mine.writes or mine.maps):
                    every.merge(mine)
                    if shadow is not None:
                        (result.intended if shadow.shadow(hook.name) else result.adjustment).merge(mine)
            except Exception as exc:  # a hook's bug must not take the runtime's request down with it
                error = f"{hook.name}: {exc}"
            self._metrics.observe_hook(hook.name, stage, error is None, self._clock() - started)
            result.ran.append(hook.name)
            if error is None:
                continue
            result.errors.append(error)
            if log_errors:
                log.warning("runtime hook failed", extra={"hook": hook.name, "stage": stage,
                                                           "pod": request.pod.key, "error": error})
            if self.policy is FailurePolicy.FAIL:
                result.failed = True
                break
        return result
