"""What a QoS strategy is and what it gets (Koordinator ``pkg/koordlet/qosmanager/framework``).

A strategy computes intents from the pods, the metric cache and the effective NodeSLO; it never writes a
file itself: cgroup values go to the resource executor (which validates, skips unchanged values and
audits every write), evictions to the evictor.  The
manager owns time: it calls :meth:`Strategy.run_once` at the strategy's interval, and tests call it
directly with a fake clock.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import MetricCache
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.statesinformer.framework import PodMeta, StatesInformer
from koordlet.streaklog import Streak
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import CgroupLayout

if TYPE_CHECKING:
    from koordlet.isolation.coresched.cookies import CookieCalls, Cookies
    from koordlet.resourceexecutor.netqos import NetQoS
    from koordlet.resourceexecutor.resctrl import ResctrlGroups
    from koordlet.resourceexecutor.sysctl import SysctlUpdate
    from koordlet.system.sysfiles import SysFile


class Executor(Protocol):
    """The resource executor as strategies see it."""

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        ...

    def forget(self, path: str | None = None) -> None:
        """Drops the remembered value of ``path`` (changed behind the executor's back) so the next
        apply writes it again instead of skipping it as unchanged."""
        ...


class Reader(Protocol):
    """Current cgroup values as strategies read them (:class:`~koordlet.qosmanager.reader.CgroupReader`, or a
    strategy's shadow-mode view of it)."""

    def path(self, resource: CgroupFile | str, rel_dir: str) -> str:
        ...

    def read(self, resource: CgroupFile | str, rel_dir: str) -> Any:
        ...


class Evictor(Protocol):
    """The evictor as strategies see it (:class:`~koordlet.qosmanager.evictor.Evictions`, or a strategy's
    shadow-mode view of it)."""

    def evict(self, pod: PodMeta, reason: str, message: str) -> bool:
        ...

    def pending(self, pods: Iterable[PodMeta]) -> set[str]:
        ...


class KernelKnobs(Protocol):
    """The kernel knob writer as strategies see it (:class:`~koordlet.resourceexecutor.sysctl.SysctlExecutor`,
    or a strategy's shadow-mode view of it)."""

    def path(self, file: SysFile) -> str: ...
    def original(self, file: SysFile) -> str | None: ...
    def restorable(self) -> Mapping[str, str]: ...
    def apply(self, update: SysctlUpdate) -> Result: ...
    def restore(self, file: SysFile, owner: str) -> Result | None: ...
    def apply_feature(self, name: str, enabled: bool, owner: str) -> Result: ...
    def restore_feature(self, name: str, owner: str) -> Result | None: ...


class Action(enum.StrEnum):
    """What a strategy did in one round (:attr:`Decision.action`).  A ``StrEnum``: the JSON of a decision
    and comparisons with the plain word (``decision.action == "suppress"``) stay what they were."""

    NONE = "none"
    """Nothing to change (or already in place)."""
    SKIP = "skip"
    """Inputs missing (no sample yet, a cgroup gone): the round could not decide."""
    ERROR = "error"
    """The round failed or the configuration was rejected; the values in force stay."""
    INVALID = "invalid"
    """The configuration is invalid; the values in force stay."""
    UNSUPPORTED = "unsupported"
    """The host lacks the kernel feature."""
    SUPPRESS = "suppress"
    RECOVER = "recover"
    """Switched off (or the other policy in use): what the strategy set is undone."""
    EVICT = "evict"
    FAILED = "failed"
    """Evictions were needed and every one failed."""
    RECONCILE = "reconcile"
    SCALE = "scale"
    BURST = "burst"
    APPLY = "apply"
    CLEAR = "clear"


QUIET_ACTIONS = frozenset({Action.NONE, Action.SKIP})
"""Rounds that did nothing: kept as a strategy's last decision, never in the history of the ones that acted."""


@dataclass(frozen=True)
class Decision:
    """What a strategy decided in one round and the numbers behind it (for ``koordctl qos``).

    ``summary`` is one sentence an operator can read ("BE limited to 3 CPUs: LS usage 62% of 65%
    threshold"); ``numbers`` holds every input and output of the computation by name."""

    strategy: str
    at: float
    action: Action
    """What it did; a plain word naming an :class:`Action` is accepted and converted."""
    summary: str
    numbers: Mapping[str, Any] = field(default_factory=dict)
    shadow: bool = False
    """Decided in shadow mode: nothing was written or evicted."""
    intended: tuple[str, ...] = ()
    """In shadow mode, what the round would have done ("would set ... because ...")."""
    woken_by: str = ""
    """Why the round ran before its interval ("psi kubepods-memory-some"); empty for a regular round."""

    def __post_init__(self) -> None:
        # Action(member) is the member itself; Action("none") converts (and refuses a word not in the enum).
        object.__setattr__(self, "action", Action(self.action))

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "at": self.at, "action": self.action.value, "summary": self.summary,
                "numbers": dict(self.numbers), "shadow": self.shadow, "intended": list(self.intended),
                "woken_by": self.woken_by}


class Decider:
    """Builds one strategy's decisions and marks the edges of its streaks in its log: a skipped round is
    logged once per streak of the same ``reason`` (a BE cgroup gone or a collector down would otherwise
    log the same skip every second; the decision log and ``koordctl qos`` keep every round, with its
    numbers), a round whose evictions all failed once per streak (the strategy retries every round), and
    every round that evicted.

    ``reason`` is a stable name for why the round was skipped (``no_node_sample``), not the summary: a
    summary carries the round's numbers and would start a new streak every round."""

    def __init__(self, strategy: str, logger: logging.Logger, clock: Callable[[], float]) -> None:
        self.strategy = strategy
        self._log = logger
        self._clock = clock
        self._skips = Streak(logger, clock)
        self._failed = Streak(logger, clock)

    def __call__(self, action: Action, summary: str, numbers: Mapping[str, Any] | None = None, *,
                 reason: str | None = None, at: float | None = None) -> Decision:
        """The round's decision (at ``at``, the clock's now by default); ``reason`` is required for a skip."""
        self._log_edges(action, summary, reason)
        return Decision(self.strategy, self._clock() if at is None else at, action, summary,
                        {} if numbers is None else numbers)

    def _log_edges(self, action: Action, summary: str, reason: str | None) -> None:
        fields = {"strategy": self.strategy, "action": str(action)}
        if action == Action.EVICT:
            self._log.warning("QoS strategy evicted pods", extra={**fields, "summary": summary})
        if action == Action.FAILED:
            self._failed.fail("eviction_failed", "QoS strategy evictions failed", extra={**fields, "summary": summary})
        else:
            self._failed.ok("QoS strategy evictions no longer failing", extra=fields)
        if action != Action.SKIP:
            self._skips.ok("QoS strategy resumed", extra=fields)
            return
        if not reason:
            raise ValueError(f"{self.strategy}: a skipped round needs a stable reason (summary: {summary})")
        self._skips.fail(reason, "QoS strategy skipped a round", level=logging.INFO,
                         extra={**fields, "detail": summary})


class DecisionLog:
    """The last decision of each strategy, plus a short history of the ones that acted."""

    def __init__(self, history: int = 256) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, Decision] = {}
        self._acted: collections.deque[Decision] = collections.deque(maxlen=history)

    def record(self, decision: Decision) -> None:
        with self._lock:
            self._last[decision.strategy] = decision
            if decision.action not in QUIET_ACTIONS:
                self._acted.append(decision)

    def last(self, strategy: str) -> Decision | None:
        with self._lock:
            return self._last.get(strategy)

    def latest(self) -> dict[str, Decision]:
        with self._lock:
            return dict(self._last)

    def history(self) -> list[Decision]:
        with self._lock:
            return list(self._acted)


class QoSMetricsSink(Protocol):
    """The Prometheus facade strategies report through (see :mod:`koordlet.metrics.qos`)."""

    def be_suppress_cores(self, policy: str, cores: float) -> None: ...
    def be_suppress_ls_used_cores(self, cores: float) -> None: ...
    def pod_eviction(self, reason: str, pod_namespace: str, pod_name: str) -> None: ...
    def scaled_cfs_quota(self, pod_namespace: str, pod_name: str, container: str, quota_us: float) -> None: ...
    def forget_container(self, pod_namespace: str, pod_name: str, container: str) -> None: ...
    def strategy_run(self, strategy: str, seconds: float, ok: bool) -> None: ...
    def woken_round(self, strategy: str, acted: bool) -> None: ...


class NullMetrics(QoSMetricsSink):
    """A sink that drops everything (unit tests, or metrics disabled): the protocol's empty methods."""


@dataclass(frozen=True)
class Options:
    """Dependencies handed to every strategy: injected, never imported singletons, so tests hand fakes and
    no module keeps mutable state of its own."""

    layout: CgroupLayout
    driver: CgroupDriver
    informer: StatesInformer
    cache: MetricCache
    executor: Executor
    evictor: Evictor
    reader: Reader
    config: QoSManagerConfig
    collector: CollectorConfig
    gates: Mapping[str, bool]
    clock: Callable[[], float]
    """Wall clock (seconds since the epoch): metric-cache samples carry wall-clock times."""
    decisions: DecisionLog
    metrics: QoSMetricsSink = field(default_factory=NullMetrics)
    kube_parent: str = ""
    """Where kubepods sits below the hierarchy roots (kubelet --cgroup-root)."""
    probes: Mapping[str, bool] = field(default_factory=dict)
    """Host capabilities by probe name (``koordlet.system.probes``), for strategies that need a kernel feature."""
    resctrl: ResctrlGroups | None = None
    """The resctrl writer; None when the host has no resctrl mount."""
    coresched: CookieCalls | None = None
    """The ``prctl(PR_SCHED_CORE)`` caller (it remembers a kernel without core scheduling itself)."""
    cookies: Cookies | None = None
    """The core-scheduling cookies koordlet made, shared with the coresched runtime hook; None: the
    strategy keeps a book of its own."""
    netqos: Callable[[str], NetQoS] | None = None
    """Network QoS backend by NodeSLO ``netQOSPolicy`` (``tc``, ``terway-qos``); None: network QoS off."""
    closid_reserve: int = 1
    """resctrl CLOSIDs kept free beyond the class groups not made yet: no per-pod group eats into them
    (``tenant.podResctrlClosidReserve``)."""
    sysctl: KernelKnobs | None = None
    """The writer of node-wide kernel knobs (``/proc/sys/vm``...); None: the sysreconcile strategy skips."""
    kubelet_root_dir: str = "/var/lib/kubelet"
    """kubelet's root directory as koordlet sees it (its pod volume mounts: blkio ``podvolume`` blocks)."""


class Strategy(Protocol):
    """One QoS strategy; the manager owns time and calls :meth:`run_once` every :meth:`interval` seconds."""

    name: str

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """Whether the strategy runs this round (feature gate and NodeSLO switch).  A strategy that was
        enabled and no longer is gets :meth:`run_once` called once more with ``enabled=False`` so it can
        undo what it did (recover BE's cpuset, quota...)."""
        ...

    def interval(self) -> float:
        """Seconds between rounds."""
        ...

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        """One round against the effective NodeSLO (merged over Koordinator's defaults).  Must not raise
        for an expected race (a cgroup that vanished, a sample not yet collected): it returns a ``skip``
        decision saying why instead."""
        ...


@runtime_checkable
class Wakeable(Protocol):
    """A strategy whose woken rounds differ from its regular ones (memoryevict reads usage fresh from the
    cgroups instead of the metric cache's last sample: a wake comes because usage just changed)."""

    def run_woken(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        ...


def pods_by_uid(informer: StatesInformer) -> dict[str, Any]:
    return {meta.uid: meta for meta in informer.pods()}


def fresh_latest(cache: MetricCache, name: str, labels: Sequence[tuple[str, str]], max_age_seconds: float
                 ) -> float | None:
    """The newest value of a series if it is no older than ``max_age_seconds``."""
    latest = cache.latest(name, tuple(labels), max_age_seconds)
    return None if latest is None else latest[1]
