"""The debug API's endpoints: one function per path over a :class:`DebugSources`, and the route table.

Each endpoint answers from memory or a few file reads: it never waits on the daemon's loops.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.debugapi import contract, profiler
from koordlet.debugapi.cgroupview import CgroupView
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.cache import Labels, pod_labels
from koordlet.qosmanager.evictor import EVICTION_HISTORY, EvictionAttempt
from koordlet.qosmanager.framework import Decision
from koordlet.runtimehooks.framework import HookCall
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.statesinformer.nodeslo import Effective
from koordlet.system.probes import ProbeResult

log = logging.getLogger(__name__)

MAX_METRICS_WINDOW_SECONDS: Final = 3600.0
"""Longer windows would read the disk store for every pod; the metric cache's memory holds minutes."""
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


class ApiError(KoordletError):
    """A request the API answers with ``{"error": message}`` and ``status``."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StrategyView(Protocol):
    """What ``/v1/qos`` needs of a QoS strategy (:class:`koordlet.qosmanager.framework.Strategy`)."""

    name: str

    def enabled(self, slo: NodeSLOSpec) -> bool: ...

    def interval(self) -> float: ...


class DecisionView(Protocol):
    """What ``/v1/qos`` needs of :class:`koordlet.qosmanager.framework.DecisionLog`."""

    def last(self, strategy: str) -> Decision | None: ...

    def history(self) -> list[Decision]: ...


class ShadowView(Protocol):
    """Shadow mode's switches (:class:`~koordlet.qosmanager.shadow.ShadowModes`)."""

    def shadow(self, strategy: str) -> bool: ...

    def set(self, strategy: str | None, shadow: bool | None) -> None: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DebugSources:
    """Everything the endpoints read; the agent builds it from its parts (``koordlet.daemon.agent``)."""

    version: str
    node: str
    mode: str
    """``standalone`` or ``kubernetes``."""
    started_at: float
    components: Callable[[], Sequence[tuple[str, bool]]]
    """(name, running) of the daemon's components, in start order."""
    feature_gates: Mapping[str, bool]
    probes: Callable[[], Sequence[ProbeResult]]
    companion: Callable[[], Mapping[str, Any] | None]
    """``{"address", "nodeslo_connected", "reports_failing"}``, None without a companion."""
    pods: Callable[[], Sequence[PodMeta]]
    cgroups: CgroupView
    mean: Callable[[str, Labels, float], float | None]
    """The metric cache's average of a series over the last seconds (None without samples)."""
    slo: Callable[[], Effective]
    strategies: Callable[[], Sequence[StrategyView]]
    decisions: DecisionView
    hook_names: Sequence[str]
    hook_calls: Callable[[int], Sequence[HookCall]]
    evictions: Callable[[int], Sequence[EvictionAttempt]]
    pid: int = field(default_factory=os.getpid)
    clock: Callable[[], float] = time.time
    """Wall clock (uptime)."""
    root_logger: logging.Logger = field(default_factory=logging.getLogger)
    """The logger ``/v1/admin/log-level`` sets the level of."""
    refused: Callable[[str], Sequence[str]] = lambda _uid: ()
    """The pod's (by uid) labels and annotations the tenant policy refused, one ``key: field: reason`` each."""
    shadow: ShadowView | None = None
    """Shadow mode's switches; None: this koordlet runs every strategy in active mode, always."""
    hook_shadow: ShadowView | None = None
    """The runtime hooks' shadow mode switches; None: no runtime hooks."""
    pressure: Callable[[], Mapping[str, Any] | None] = lambda: None
    """Event-driven pressure: ``{"enabled", "reason", "debounce_seconds", "triggers", "wakes"}``; None: no QoS
    manager."""


@dataclass(frozen=True)
class Request:
    query: Mapping[str, str]
    body: Any = None


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: not an integer: {text!r}") from None
    if value < 1:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: must be >= 1, got {value}")
    return value


def _pod_json(sources: DebugSources, meta: PodMeta, evictions: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``evictions``: the shadow-mode evictions of each pod (by ``namespace/name``)."""
    pod = meta.pod
    shadow = sources.shadow is not None

    def values(rel_dir: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        # No directory: reading "" would show the hierarchy roots' values as the pod's.
        if not rel_dir:
            return {}, {}, {}
        return (sources.cgroups.current(rel_dir), sources.cgroups.desired(rel_dir),
                sources.cgroups.intended(rel_dir) if shadow else {})

    containers = []
    for container in meta.containers:
        current, desired, intended = values(container.cgroup_dir)
        containers.append({"name": container.name, "id": container.container_id,
                           "cgroup_dir": container.cgroup_dir, "current": current, "desired": desired,
                           "intended": intended})
    current, desired, intended = values(meta.cgroup_dir)
    return {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "qos": meta.qos.value,
            "kube_qos": pod.kube_qos.value if pod.kube_qos is not None else None,
            "priority_class": meta.priority_class.value, "priority": pod.priority, "phase": pod.phase,
            "source": meta.source, "cgroup_dir": meta.cgroup_dir, "containers": containers,
            "current": current, "desired": desired, "refused_keys": list(sources.refused(pod.uid)),
            "intended": intended, "intended_evictions": evictions.get(pod.key, [])}


def _probe_json(probe: ProbeResult) -> dict[str, Any]:
    return {"name": probe.name, "supported": bool(probe.supported), "reason": probe.reason}


def status(sources: DebugSources, request: Request) -> dict[str, Any]:
    return {"version": sources.version, "pid": sources.pid, "node": sources.node, "mode": sources.mode,
            "started_at": sources.started_at,
            "uptime_seconds": round(max(0.0, sources.clock() - sources.started_at), 3),
            "components": [{"name": name, "running": running} for name, running in sources.components()],
            "feature_gates": {name: bool(on) for name, on in sorted(sources.feature_gates.items())},
            "feature_gates_not_implemented": sorted(gates.NOT_IMPLEMENTED),
            "probes": [_probe_json(p) for p in sources.probes()],
            "companion": dict(companion) if (companion := sources.companion()) is not None else None,
            "shadow": _shadow_json(sources) if sources.shadow is not None else None,
            "pressure": dict(pressure) if (pressure := sources.pressure()) is not None else None}


def pods(sources: DebugSources, request: Request) -> dict[str, Any]:
    # Shadow mode's evictions, gathered once: the evictor keeps the recent attempts of every pod together.
    evictions: dict[str, list[dict[str, Any]]] = {}
    if sources.shadow is not None:
        for attempt in sources.evictions(EVICTION_HISTORY):
            if attempt.outcome == "intended":
                evictions.setdefault(attempt.pod, []).append(attempt.to_json())
    return {"pods": [_pod_json(sources, meta, evictions) for meta in sources.pods()]}


def metrics(sources: DebugSources, request: Request) -> dict[str, Any]:
    text = request.query.get("window")
    window = float(contract.DEFAULT_METRICS_WINDOW_SECONDS)
    if text is not None:
        try:
            window = float(text)
        except ValueError:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"window: not a number of seconds: {text!r}") from None
        if not 0 < window <= MAX_METRICS_WINDOW_SECONDS:
            raise ApiError(HTTPStatus.BAD_REQUEST,
                           f"window: must be > 0 and <= {MAX_METRICS_WINDOW_SECONDS:g} seconds, got {text}")
    cpu = sources.mean(names.NODE_CPU_USAGE, (), window)
    memory = sources.mean(names.NODE_MEMORY_USAGE, (), window)
    node = None if cpu is None and memory is None else {"cpu_cores": cpu, "memory_bytes": memory}
    rows = []
    for meta in sources.pods():
        labels = pod_labels(meta.uid)
        rows.append({"namespace": meta.pod.namespace, "name": meta.pod.name, "qos": meta.qos.value,
                     "cpu_cores": sources.mean(names.POD_CPU_USAGE, labels, window),
                     "memory_bytes": sources.mean(names.POD_MEMORY_USAGE, labels, window)})
    return {"window_seconds": window, "node": node, "pods": rows}


def slo(sources: DebugSources, request: Request) -> dict[str, Any]:
    effective = sources.slo()
    return {"origin": effective.origin, "generation": effective.generation, "rejected": effective.rejected,
            "spec": effective.spec.to_json()}


def qos(sources: DebugSources, request: Request) -> dict[str, Any]:
    spec = sources.slo().spec
    rows = []
    for strategy in sources.strategies():
        try:
            enabled = bool(strategy.enabled(spec))
        except Exception as exc:  # the manager reports a failing strategy; here it is just not enabled
            log.debug("strategy enabled() failed", extra={"strategy": strategy.name, "error": repr(exc)})
            enabled = False
        last = sources.decisions.last(strategy.name)
        shadow = sources.shadow.shadow(strategy.name) if sources.shadow is not None else False
        rows.append({"name": strategy.name, "enabled": enabled, "interval_seconds": strategy.interval(),
                     "shadow": shadow, "last": last.to_json() if last is not None else None})
    return {"strategies": rows, "history": [d.to_json() for d in sources.decisions.history()]}


def hooks(sources: DebugSources, request: Request) -> dict[str, Any]:
    limit = _int_param(request, "limit", contract.DEFAULT_LIMIT)
    return {"hooks": list(sources.hook_names), "calls": [c.to_json() for c in sources.hook_calls(limit)]}


def evictions(sources: DebugSources, request: Request) -> dict[str, Any]:
    limit = _int_param(request, "limit", contract.DEFAULT_LIMIT)
    return {"evictions": [e.to_json() for e in sources.evictions(limit)]}


def cgroup(sources: DebugSources, request: Request) -> dict[str, Any]:
    key = request.query.get("pod")
    if key is None:
        raise ApiError(HTTPStatus.BAD_REQUEST, "pod: missing (pod=<namespace>/<name>)")
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"pod: expected <namespace>/<name>, got {key!r}")
    meta = next((m for m in sources.pods() if m.pod.namespace == namespace and m.pod.name == name), None)
    if meta is None:
        raise ApiError(HTTPStatus.NOT_FOUND, f"pod {key} not found")
    container_name = request.query.get("container")
    rel_dir = meta.cgroup_dir
    if container_name is not None:
        found: ContainerMeta | None = next((c for c in meta.containers if c.name == container_name), None)
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"container {container_name} not found in pod {key}")
        rel_dir = found.cgroup_dir
    if not rel_dir:
        what = f"container {container_name} of pod {key}" if container_name is not None else f"pod {key}"
        raise ApiError(HTTPStatus.NOT_FOUND, f"{what} has no cgroup directory (yet)")
    return {"pod": key, "container": container_name, "dir": rel_dir, "files": sources.cgroups.files(rel_dir)}


def probes(sources: DebugSources, request: Request) -> dict[str, Any]:
    return {"probes": [_probe_json(p) for p in sources.probes()]}


def _float_param(request: Request, name: str, default: float) -> float:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: not a number: {text!r}") from None


def profile(sources: DebugSources, request: Request) -> dict[str, Any]:
    seconds = _float_param(request, "seconds", 10.0)
    interval = _float_param(request, "interval_ms", profiler.DEFAULT_INTERVAL_SECONDS * 1000) / 1000
    log.info("CPU profile started through the debug API", extra={"seconds": seconds})
    try:
        return profiler.take(seconds, interval).to_json()
    except ValueError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
    except profiler.ProfileBusy as exc:
        raise ApiError(HTTPStatus.CONFLICT, str(exc)) from None


def log_level(sources: DebugSources, request: Request) -> dict[str, Any]:
    body = request.body
    level = body.get("level") if isinstance(body, dict) else None
    if not isinstance(level, str) or level.lower() not in LOG_LEVELS:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       f"level: must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    sources.root_logger.setLevel(level.upper())
    log.warning("log level changed through the debug API", extra={"level": level.lower()})
    return {"level": level.lower()}


def _modes_json(modes: ShadowView, names: Sequence[str]) -> dict[str, Any]:
    return {**modes.to_json(), "effective": {name: modes.shadow(name) for name in names}}


def _shadow_json(sources: DebugSources) -> dict[str, Any]:
    assert sources.shadow is not None
    document = _modes_json(sources.shadow, [strategy.name for strategy in sources.strategies()])
    hooks = sources.hook_shadow
    document["hooks"] = _modes_json(hooks, sources.hook_names) if hooks is not None else None
    return document


def shadow(sources: DebugSources, request: Request) -> dict[str, Any]:
    if sources.shadow is None:
        raise ApiError(HTTPStatus.NOT_FOUND, "this koordlet has no shadow mode (no QoS manager)")
    return _shadow_json(sources)


def set_shadow(sources: DebugSources, request: Request) -> dict[str, Any]:
    body = request.body
    keys = set(body) if isinstance(body, dict) else set()
    kind = "hook" if "hook" in keys else "strategy"
    if not keys or keys - {kind, "shadow"} or "shadow" not in keys:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       'expected {"strategy" (or "hook"): <name> or null for all, "shadow": true, false or null '
                       f"(drop its own setting)}}, got {body!r}")
    name, mode = body.get(kind), body["shadow"]
    if not (name is None or isinstance(name, str)) or not (mode is None or isinstance(mode, bool)):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{kind}: a name or null; shadow: true, false or null; got {body!r}")
    modes = sources.hook_shadow if kind == "hook" else sources.shadow
    if sources.shadow is None or modes is None:
        raise ApiError(HTTPStatus.NOT_FOUND, f"this koordlet has no shadow mode for {kind}s")
    try:
        modes.set(name, mode)
    except KoordletError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
    log.warning("shadow mode switched through the debug API", extra={kind: name or "(default)", "shadow": mode})
    return shadow(sources, request)


Handler = Callable[[DebugSources, Request], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    handler: Handler
    params: frozenset[str] = frozenset()


ROUTES: Final[Mapping[str, Route]] = {
    contract.STATUS: Route("GET", status),
    contract.PODS: Route("GET", pods),
    contract.METRICS: Route("GET", metrics, frozenset({"window"})),
    contract.SLO: Route("GET", slo),
    contract.QOS: Route("GET", qos),
    contract.HOOKS: Route("GET", hooks, frozenset({"limit"})),
    contract.EVICTIONS: Route("GET", evictions, frozenset({"limit"})),
    contract.CGROUP: Route("GET", cgroup, frozenset({"pod", "container"})),
    contract.PROBES: Route("GET", probes),
    contract.PROFILE: Route("GET", profile, frozenset({"seconds", "interval_ms"})),
    contract.SHADOW: Route("GET", shadow),
    contract.ADMIN_LOG_LEVEL: Route("POST", log_level),
    contract.ADMIN_SHADOW: Route("POST", set_shadow),
}


def parse_query(text: str, allowed: frozenset[str]) -> dict[str, str]:
    """The query's parameters; raises a 400 :class:`ApiError` naming an unknown or repeated one."""
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"bad query {text!r}: {exc}") from None
    query: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: unknown parameter (known: {known})")
        if name in query:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{name}: given more than once")
        query[name] = value
    return query
