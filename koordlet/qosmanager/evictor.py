"""Eviction: one interface, several backends, and the bookkeeping that prevents eviction storms.

Strategies ask :class:`Evictions` to evict a pod.  It hands the pod to the configured backend (CRI
``StopContainer``, SIGKILL to a pod cgroup's processes, the Kubernetes Eviction API, or a dry run; a
standalone host's configured workloads are stopped themselves, :mod:`.workloadevict`),
audits and counts the eviction, and remembers the pod until it is gone: a pod evicted but still present
is *pending*, and strategies count its usage as already released so the next round does not evict
another pod for the same shortage (Koordinator PR #3137).
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from koordlet.config.types import WorkloadConfig
from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.statesinformer.framework import PodMeta
from koordlet.streaklog import Streak
from koordlet.system.layout import CgroupLayout

log = logging.getLogger(__name__)

FAILING_PODS_KEPT = 1024
"""Failure streaks remembered at most (one per pod whose eviction keeps failing)."""

EVICTION_HISTORY = 256
"""Eviction attempts kept in memory for the debug API (``/v1/evictions``)."""

PENDING_TIMEOUT_SECONDS = 300.0
"""A pod still listed this long after its eviction was launched no longer counts as pending (its
backend failed silently, or the pod was re-created with the same UID); it may be evicted again."""


class EvictionFailed(KoordletError, RuntimeError):
    """The backend could not launch the eviction; the message says why.

    ``unreachable``: the way to evict is down (the companion or the runtime did not answer, or could not act
    now), so any other pod would fail the same; a strategy stops its walk instead of trying the next victim,
    which would otherwise be evicted in this one's place the moment the way comes back."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class EvictionUnreachable(EvictionFailed):
    """Raised by :meth:`Evictions.evict` for an :class:`EvictionFailed` with ``unreachable`` set, after it
    was logged and audited."""


class Backend(Protocol):
    """Launches one eviction; raises :class:`EvictionFailed` when it could not."""

    name: str

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        ...


class DryRunBackend:
    """``qos.evictor: dry-run``: every strategy's evictions in shadow mode (:meth:`Evictions.evict` records them
    as intended and never calls this backend)."""

    name = "dry-run"

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        raise EvictionFailed("the dry-run evictor launches nothing")


class KillBackend:
    """SIGKILL to every process of the pod's cgroup: eviction for a plain host's workloads, which no
    runtime would restart.  Reads ``cgroup.procs`` of the pod directory and every directory below it."""

    name = "kill"

    def __init__(self, layout: CgroupLayout, kill: Callable[[int, int], None] = os.kill) -> None:
        self._layout = layout
        self._kill = kill

    def _procs_root(self, rel_dir: str) -> str:
        # Every v1 hierarchy holds the same processes; cpu is mounted wherever pods are tracked.
        if self._layout.controller_version == 2:
            return self._layout.unified_dir(rel_dir)
        return self._layout.controller_dir("cpu", rel_dir)

    def pids(self, pod: PodMeta) -> list[int]:
        root = self._procs_root(pod.cgroup_dir)
        pids: list[int] = []
        for directory, _dirs, files in os.walk(root):
            if "cgroup.procs" not in files:
                continue
            try:
                with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as f:
                    pids.extend(int(line) for line in f if line.strip())
            except (OSError, ValueError):
                continue  # the cgroup went while we walked
        return pids

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        if not pod.cgroup_dir:
            raise EvictionFailed(f"pod {pod.pod.key} has no cgroup directory to kill")
        # A missing directory would otherwise count as an eviction of 0 processes and then sit as pending,
        # blocking real evictions until it times out.
        root = self._procs_root(pod.cgroup_dir)
        if not os.path.isdir(root):
            raise EvictionFailed(f"pod {pod.pod.key}: no cgroup directory {root} to kill")
        pids = self.pids(pod)
        killed = 0
        for pid in pids:
            try:
                self._kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                continue
            except OSError as exc:
                raise EvictionFailed(f"kill {pid} of pod {pod.pod.key}: {os.strerror(exc.errno or errno.EIO)}"
                                     ) from exc
        log.warning("pod evicted: its processes killed",
                    extra={"pod": pod.pod.key, "reason": reason, "killed": killed, "detail": message})


class EvictionAPI(Protocol):
    """The Kubernetes Eviction API as the companion exposes it to the koordlet."""

    def evict(self, namespace: str, name: str, reason: str, message: str) -> None:
        ...


class EvictClient(Protocol):
    """The companion client's eviction call (``koordlet.statesinformer.companion.CompanionClient``)."""

    def evict(self, namespace: str, name: str, reason: str, message: str) -> str:
        ...


class CompanionEvictionAPI:
    """The Eviction API as the companion carries it out for this node; ``blocked`` (a PodDisruptionBudget)
    is a failure the strategy retries on a later round, ``gone`` is done."""

    def __init__(self, client: EvictClient) -> None:
        self._client = client

    def evict(self, namespace: str, name: str, reason: str, message: str) -> None:
        try:
            result = self._client.evict(namespace, name, reason, message)
        except KoordletError as exc:
            # PERMISSION_DENIED is about this pod (not on this node); any other failure is the companion's or
            # kube-apiserver's and would refuse every pod alike.
            raise EvictionFailed(str(exc), unreachable=getattr(exc, "code", "") != "PERMISSION_DENIED") from None
        if result == "blocked":
            raise EvictionFailed(f"eviction of {namespace}/{name} blocked by a PodDisruptionBudget; retried later")


class ApiBackend:
    """Evicts through the Kubernetes Eviction API (PodDisruptionBudgets apply)."""

    name = "api"

    def __init__(self, api: EvictionAPI) -> None:
        self._api = api

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        self._api.evict(pod.pod.namespace, pod.pod.name, reason, message)


@dataclass(frozen=True)
class Pending:
    uid: str
    key: str
    reason: str
    at: float


@dataclass(frozen=True)
class EvictionAttempt:
    """One eviction launched or failed; ``outcome`` is ``evicted``, ``intended`` (shadow mode: decided, not
    launched) or ``failed`` (the error is then appended to ``message``)."""

    at: float
    pod: str
    reason: str
    message: str
    outcome: str
    backend: str

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "pod": self.pod, "reason": self.reason, "message": self.message,
                "outcome": self.outcome, "backend": self.backend}


class Evictions:
    """The eviction front strategies use: backend, audit, metrics and pending bookkeeping, and the
    recent attempts (:meth:`recent`)."""

    def __init__(self, backend: Backend, clock: Callable[[], float], audit: Auditor | None = None,
                 on_evicted: Callable[[str, PodMeta], None] | None = None,
                 pending_timeout_seconds: float = PENDING_TIMEOUT_SECONDS, history: int = EVICTION_HISTORY,
                 metrics: WriteSink = NULL_SINK) -> None:
        self.backend = backend
        self._clock = clock
        self._audit = audit
        self._metrics = metrics
        self._on_evicted = on_evicted
        self._timeout = pending_timeout_seconds
        self._lock = threading.Lock()
        self._pending: dict[str, Pending] = {}
        self._recent: collections.deque[EvictionAttempt] = collections.deque(maxlen=history)
        self._failing: dict[str, Streak] = {}
        """Pod UID -> its streak of failed evictions: a strategy retries a failed eviction every round (a
        PodDisruptionBudget may block it for minutes), logged when the streak starts and when it ends.
        Bounded by :data:`FAILING_PODS_KEPT`."""

    def evict(self, pod: PodMeta, reason: str, message: str, shadow: str | None = None) -> bool:
        """Launches the eviction of ``pod``; False (logged, audited) when the backend failed, and
        :class:`EvictionUnreachable` (logged, audited) when it failed because the way to evict is down.  A pod
        already pending is not evicted twice.

        ``shadow``: the strategy deciding it is in shadow mode (so is every strategy with the dry-run
        evictor).  Nothing is launched; the eviction is recorded, audited and counted as intended, and the pod
        is pending as if it had been evicted, so the strategy's next rounds decide as they would have after a
        real eviction (no second victim for the same shortage)."""
        with self._lock:
            if pod.uid in self._pending:
                return True
        if shadow is not None or isinstance(self.backend, DryRunBackend):
            self._intend(pod, reason, message, shadow or self.backend.name)
            return True
        try:
            self.backend.evict(pod, reason, message)
        except (EvictionFailed, OSError) as exc:
            self._failure_streak(pod.uid).fail(type(exc).__name__, "pod eviction failed", level=logging.ERROR,
                                               extra={"pod": pod.pod.key, "eviction": reason, "error": str(exc)})
            self._record(pod, reason, message, "failed", str(exc))
            if isinstance(exc, EvictionFailed) and exc.unreachable:
                raise EvictionUnreachable(str(exc), unreachable=True) from None
            return False
        streak = self._failing.pop(pod.uid, None)
        if streak is not None:
            streak.ok("pod eviction launched after failing", extra={"pod": pod.pod.key, "eviction": reason})
        with self._lock:
            self._pending[pod.uid] = Pending(pod.uid, pod.pod.key, reason, self._clock())
        self._record(pod, reason, message, "evicted", None)
        if self._on_evicted is not None:
            self._on_evicted(reason, pod)
        return True

    def _intend(self, pod: PodMeta, reason: str, message: str, strategy: str) -> None:
        log.info("shadow mode: pod not evicted", extra={"pod": pod.pod.key, "eviction": reason, "detail": message,
                                                        "strategy": strategy})
        with self._lock:
            self._pending[pod.uid] = Pending(pod.uid, pod.pod.key, reason, self._clock())
        dry_run = isinstance(self.backend, DryRunBackend)
        self._record(pod, reason, message, "intended", None, backend=self.backend.name if dry_run else "shadow")
        self._metrics.intended("evict", strategy)

    def _failure_streak(self, uid: str) -> Streak:
        streak = self._failing.get(uid)
        if streak is None:
            if len(self._failing) >= FAILING_PODS_KEPT:  # pods that went while failing: start afresh
                self._failing.clear()
            streak = self._failing[uid] = Streak(log, self._clock)
        return streak

    def _record(self, pod: PodMeta, reason: str, message: str, outcome: str, error: str | None,
                backend: str | None = None) -> None:
        shown = message if error is None else f"{message}; failed: {error}"
        backend = backend or self.backend.name
        attempt = EvictionAttempt(self._clock(), pod.pod.key, reason, shown, outcome, backend)
        with self._lock:
            self._recent.append(attempt)
        if self._audit is not None:
            self._audit.record(AuditEntry(path=pod.cgroup_dir, resource="eviction", old=None,
                                          new=f"{pod.pod.key} {reason}: {message}",
                                          owner=f"evictor:{backend}", outcome=outcome, error=error))

    def pending(self, pods: Iterable[PodMeta]) -> set[str]:
        """UIDs of pods whose eviction was launched and that are still present (and not terminated), and of
        pods kubelet is deleting (``deletionTimestamp``): a koordlet restarted in the middle of an eviction
        has forgotten it, and must not evict another pod for the memory the first is about to release.
        Forgets pods that are gone or whose eviction is older than the pending timeout."""
        now = self._clock()
        listed = [p for p in pods if not p.pod.terminated]
        present = {p.uid for p in listed}
        with self._lock:
            for uid in [u for u, p in self._pending.items() if u not in present or now - p.at > self._timeout]:
                del self._pending[uid]
            return set(self._pending) | {p.uid for p in listed if p.pod.deleting}

    def recent(self, limit: int) -> list[EvictionAttempt]:
        """The newest ``limit`` attempts, oldest first."""
        with self._lock:
            attempts = list(self._recent)
        return attempts[-limit:] if limit > 0 else []

    def pending_list(self) -> list[Pending]:
        with self._lock:
            return list(self._pending.values())


def build_backend(kind: str, layout: CgroupLayout, cri_endpoint: str, cri_timeout_seconds: float,
                  api: EvictionAPI | None = None, workloads: Sequence[WorkloadConfig] | None = None) -> Backend:
    """The backend for ``qos.evictor``; raises ConfigError naming the option when it cannot work.

    ``workloads``: a standalone host's configured workloads (None on a Kubernetes node).  They are then
    evicted themselves, whatever the evictor (a systemd unit stopped, a cgroup's processes killed: no
    runtime or API knows them), and ``kind`` serves the other pods; ``dry-run`` still evicts nothing."""
    backend = _backend(kind, layout, cri_endpoint, cri_timeout_seconds, api)
    if workloads is None or isinstance(backend, DryRunBackend):
        return backend
    from koordlet.qosmanager.workloadevict import WorkloadBackend

    return WorkloadBackend(workloads, layout, backend)


def _backend(kind: str, layout: CgroupLayout, cri_endpoint: str, cri_timeout_seconds: float,
             api: EvictionAPI | None) -> Backend:
    if kind == "dry-run":
        return DryRunBackend()
    if kind == "kill":
        return KillBackend(layout)
    if kind == "cri":
        from koordlet.qosmanager.cri import CRIBackend

        return CRIBackend(cri_endpoint, cri_timeout_seconds)
    if kind == "api":
        if api is None:
            raise ConfigError("qos.evictor: 'api' needs the companion's Eviction API, which this koordlet has no "
                              "connection to; use cri, kill or dry-run")
        return ApiBackend(api)
    raise ConfigError(f"qos.evictor: unknown evictor {kind!r} (cri, kill, api, dry-run)")


def containers_to_stop(pod: PodMeta) -> Sequence[str]:
    """Bare runtime ids of the pod's started containers."""
    return [c.container_id for c in pod.containers if c.container_id]
