"""Re-applies the hooks to pods and containers that already run (Koordinator ``runtimehooks/reconciler``),
every ``interval`` seconds and whenever the pod list changes, so a node without NRI or the runtime proxy
still converges, and values changed behind koordlet's back are repaired.

Each round, for every pod that is not terminated: the ``PreRunPodSandbox`` hooks into the pod's cgroup,
and for every container with a cgroup directory the ``PreCreateContainer`` hooks into the container's,
fields and cgroup writes alike, through the resource executor (which skips values it wrote recently, so
a round that changes nothing costs no writes).  The pods come from the states informer, whose requests
and limits are the kubelet's full spec (batch resources included), not the CRI's reduced view.

The pods are the informer's, reviewed by the tenant policy, and the runner reviews each request again (the
agent gives it the tenant gate): a key a tenant may not use is never applied to running processes either,
``oom_score_adj`` included.

A pod whose hooks fail is logged once per failure streak, not every round; under the Fail policy its
cgroups are left as they are for that round.

Before the pods, each round runs the hooks' node-level part (upstream's ``KubeQOSLevel`` reconcilers, e.g.
group identity's ``cpu.bvt_warp_ns`` of ``kubepods``/``burstable``/``besteffort``) into the kube-QoS
directories ``qos_dirs`` names; without ``qos_dirs`` (tests of the pod levels) that part is skipped.

Then each NodeSLO host application (``host_apps``: name, QoS class, cgroup directory) gets the hooks'
host-application part (upstream ``RegisterHostAppReconciler``: group identity's ``cpu.bvt_warp_ns`` by its
class, an LS application's cpuset from the shared pools) written into its cgroup; an application whose
cgroup does not exist yet is skipped quietly (the write meets a vanished cgroup) until it does.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from koordlet.apis.extension import QoSClass
from koordlet.component import Worker
from koordlet.resourceexecutor.sysctl import SysctlExecutor, SysctlUpdate
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import HookRequest, HookRunner, HostAppContext, NodeContext, Stage
from koordlet.statesinformer.framework import PodMeta, StatesInformer
from koordlet.system.kubepaths import KubeQoS
from koordlet.system.resources import REGISTRY

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 10.0
_FAILED = frozenset({Outcome.INVALID, Outcome.FAILED})


OomScoreApply = Callable[[str, int, str], list[str]]


@dataclass(frozen=True)
class HostAppTarget:
    """A host application as the reconciler needs it."""

    name: str
    qos: QoSClass
    rel_dir: str
    """Its cgroup directory relative to a hierarchy root."""


class ReconcileMetricsSink(Protocol):
    def observe_reconciler(self, level: str, resource_type: str, ok: bool, seconds: float) -> None: ...


class NullReconcileMetrics:
    def observe_reconciler(self, level: str, resource_type: str, ok: bool, seconds: float) -> None: ...


class Reconciler:
    name = "runtimehooks-reconciler"

    def __init__(self, runner: HookRunner, applier: Applier, informer: StatesInformer, *,
                 interval_seconds: float = DEFAULT_INTERVAL_SECONDS, metrics: ReconcileMetricsSink | None = None,
                 oom_score: OomScoreApply | None = None, clock: Callable[[], float] = time.perf_counter,
                 incarnation: Callable[[str], int | None] | None = None,
                 forget: Callable[[str], None] | None = None,
                 qos_dirs: Mapping[KubeQoS, str] | None = None,
                 host_apps: Callable[[], Sequence[HostAppTarget]] | None = None,
                 sysctl: SysctlExecutor | None = None) -> None:
        """``oom_score(container rel_dir, value, owner) -> problems`` sets ``oom_score_adj`` of the running
        processes of a container (the runtimes set it only at creation); None: not applied.
        ``incarnation(pod rel_dir)`` identifies the pod's cgroup directory (its inode; None when missing) and
        ``forget(rel_dir)`` drops what the executor remembers of it: a pod cgroup removed and made again under the
        same name (kubelet retrying a pod whose sandbox failed, a runtime restart) holds the runtime's values,
        which the executor would otherwise take for the ones it wrote and skip for its force-update window."""
        self._runner = runner
        self._applier = applier
        self._sysctl = sysctl
        """Where the node-level parts' kernel knobs go (None: they are not set)."""
        self._informer = informer
        self._interval = interval_seconds
        self._metrics: ReconcileMetricsSink = metrics or NullReconcileMetrics()
        self._oom_score = oom_score
        self._clock = clock
        self._incarnation = incarnation
        self._forget = forget
        self._incarnations: dict[str, int] = {}
        """pod cgroup dir -> the directory's identity when the last round applied to it."""
        self._wake = threading.Event()
        self._worker = Worker(self.name)
        self._failing: dict[str, str] = {}
        """pod key (or ``hook:<name>`` for a node-level part) -> the error logged for its current failure streak."""
        self._qos_dirs = qos_dirs
        self._host_apps = host_apps
        self.rounds = 0

    # --- lifecycle --------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self._informer.subscribe(lambda _pods: self._wake.set())
        self._worker.start(lambda: self._loop(on_failure))

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stopping.set()
        self._wake.set()
        self._worker.stop(timeout_seconds)

    def _loop(self, on_failure: Callable[[BaseException], None]) -> None:
        try:
            while not self._worker.stopping.is_set():
                self.reconcile(self._informer.pods())
                self._wake.wait(self._interval)
                self._wake.clear()
        except BaseException as exc:  # a bug here must stop the daemon loudly, not leave cgroups unmanaged
            on_failure(exc)

    # --- one round --------------------------------------------------------------------------------------

    def reconcile(self, pods: Sequence[PodMeta]) -> None:
        seen: set[str] = self._node_level()
        seen |= self._host_app_level()
        dirs: set[str] = set()
        for meta in pods:
            if meta.pod.terminated or not meta.cgroup_dir:
                continue
            seen.add(meta.pod.key)
            dirs.add(meta.cgroup_dir)
            self._check_incarnation(meta.cgroup_dir)
            self._pod(meta)
        for key in set(self._failing) - seen:
            del self._failing[key]
        for rel_dir in set(self._incarnations) - dirs:
            del self._incarnations[rel_dir]
        self.rounds += 1

    def _node_level(self) -> set[str]:
        """Runs every hook's node-level part and writes its kube-QoS values; returns the streak keys used."""
        keys: set[str] = set()
        if self._qos_dirs is None:
            return keys
        for hook in self._runner.node_hooks:
            key = f"hook:{hook.name}"
            keys.add(key)
            ctx = NodeContext(hook.name)
            try:
                assert hook.node_fn is not None
                hook.node_fn(ctx)
                updates = [CgroupUpdate(REGISTRY[res], self._qos_dirs[qos], value, f"runtimehooks/{hook.name}")
                           for qos, values in ctx.writes.items() for res, value in values.items()]
                problems = [f"{r.update.key} in {r.update.rel_dir}: {r.outcome.value}"
                            + (f" ({r.error})" if r.error else "")
                            for r in self._write(hook.name, updates) if r.outcome in _FAILED]
                problems += self._set_sysctls(hook.name, ctx.sysctls)
            except Exception as exc:  # one hook's bug must not stop the pods' round
                problems = [f"{hook.name}: {exc}"]
            self._streak(key, problems)
        return keys

    def _host_app_level(self) -> set[str]:
        """Runs the hooks' host-application part for each application; returns the streak keys used."""
        keys: set[str] = set()
        if self._host_apps is None or not self._runner.host_app_hooks:
            return keys
        for app in self._host_apps():
            key = f"hostapp:{app.name}"
            keys.add(key)
            problems: list[str] = []
            updates: list[CgroupUpdate] = []
            results: list[Result] = []
            for hook in self._runner.host_app_hooks:
                ctx = HostAppContext(hook.name, app.name, app.qos)
                try:
                    assert hook.host_app_fn is not None
                    hook.host_app_fn(ctx)
                except Exception as exc:  # one hook's bug must not stop the others or the pods' round
                    problems.append(f"{hook.name}: {exc}")
                    continue
                mine = [CgroupUpdate(REGISTRY[res], app.rel_dir, value, f"runtimehooks/{hook.name}")
                        for res, value in ctx.writes.items()]
                if self._runner.in_shadow(hook.name):
                    results += self._applier.intend(mine, hook.name)
                else:
                    updates += mine  # one batch for the application's active hooks
            problems += [f"{r.update.key} in {r.update.rel_dir}: {r.outcome.value}"
                         + (f" ({r.error})" if r.error else "")
                         for r in results + self._applier.apply(updates) if r.outcome in _FAILED]
            self._streak(key, problems)
        return keys

    def _set_sysctls(self, hook: str, updates: Sequence[SysctlUpdate]) -> list[str]:
        """A node-level part's kernel knobs; in shadow mode only said (to the audit log), not written.  Returns
        the problems (a value refused or a write failed)."""
        sysctl = self._sysctl
        if sysctl is None or not updates:
            return []
        shadow = self._runner.in_shadow(hook)
        # Only where the kernel has the knob (upstream checks the file too): most kernels lack Anolis' ones.
        results = [sysctl.intend(u, hook) if shadow else sysctl.apply(u) for u in updates
                   if os.path.exists(sysctl.path(u.file))]
        return [f"{r.path}: {r.outcome.value}" + (f" ({r.error})" if r.error else "")
                for r in results if r.outcome in (Outcome.INVALID, Outcome.FAILED)]

    def _write(self, hook: str, updates: list[CgroupUpdate]) -> list[Result]:
        """A node-level part's writes; in shadow mode only said (to the audit log), not written."""
        if self._runner.in_shadow(hook):
            return self._applier.intend(updates, hook)
        return self._applier.apply(updates)

    def _streak(self, key: str, errors: list[str]) -> None:
        if errors:
            text = "; ".join(errors)
            if self._failing.get(key) != text:
                log.warning("runtime hooks reconcile failed", extra={"pod": key, "error": text})
            self._failing[key] = text
        elif self._failing.pop(key, None) is not None:
            log.info("runtime hooks reconcile recovered", extra={"pod": key})

    def _check_incarnation(self, rel_dir: str) -> None:
        if self._incarnation is None:
            return
        now = self._incarnation(rel_dir)
        before = self._incarnations.get(rel_dir)
        if now is None:
            self._incarnations.pop(rel_dir, None)
            return
        if before != now and self._forget is not None:
            # First sight too: the hooks may have written to an earlier directory of that name before this
            # loop ever saw it (NRI at sandbox creation, then kubelet retried the pod).
            if before is not None:
                log.info("pod cgroup made again; its values are written anew", extra={"cgroup": rel_dir})
            self._forget(rel_dir)
        self._incarnations[rel_dir] = now

    def _pod(self, meta: PodMeta) -> None:
        pod = meta.pod
        errors: list[str] = []
        request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, pod, meta.cgroup_dir)
        errors += self._run(request, meta.cgroup_dir, "pod")
        specs = {c.name: c for c in pod.containers}
        for container in meta.containers:
            spec = specs.get(container.name)
            if spec is None or not container.container_id or not container.cgroup_dir:
                continue
            request = HookRequest(Stage.PRE_CREATE_CONTAINER, pod, meta.cgroup_dir, spec, spec.container_id)
            errors += self._run(request, container.cgroup_dir, "container")
        self._streak(pod.key, errors)

    def _run(self, request: HookRequest, rel_dir: str, level: str) -> list[str]:
        if not self._runner.hooks(request.stage):
            return []
        result = self._runner.run(request, log_errors=False, transport="reconciler")
        if result.failed:
            return result.errors
        started = self._clock()
        results = self._applier.write(request, result.adjustment, with_fields=True, rel_dir=rel_dir)
        seconds = self._clock() - started
        problems = list(result.errors)
        oom = result.adjustment.values.get("oom_score_adj")
        if self._oom_score is not None and request.container is not None and isinstance(oom, int):
            owner = f"runtimehooks/{result.adjustment.owners.get('oom_score_adj', '?')}"
            problems += self._oom_score(rel_dir, oom, owner)
        for outcome in results:
            ok = outcome.outcome not in _FAILED
            self._metrics.observe_reconciler(level, outcome.update.key, ok, seconds / max(1, len(results)))
            if not ok:
                problems.append(f"{outcome.update.key} in {rel_dir}: {outcome.outcome.value}"
                                + (f" ({outcome.error})" if outcome.error else ""))
        return problems
