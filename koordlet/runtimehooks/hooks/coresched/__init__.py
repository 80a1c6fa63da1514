"""``coresched`` (Koordinator ``runtimehooks/hooks/coresched``, gate ``CoreSched``, off by default): a
started container's tasks join their pod's core-scheduling group right away instead of at the next
round of the ``coresched`` QoS strategy.

Runs while the gate is on and ``resourceQOSStrategy.policies.cpuPolicy`` is ``coreSched``, with the
groups of :mod:`koordlet.isolation.coresched.rules` (group id label, ``core-sched-policy``
label, ``-expeller`` suffix, SYSTEM keeps cookie 0) and the cookie bookkeeping of
:class:`~koordlet.isolation.coresched.cookies.CookieBook`, so the hook and the strategy name
the same groups:

* PostStartContainer: the tasks in the container cgroup's ``cgroup.procs`` get the group's cookie
  (a sibling's, or a new one for the group's first tasks).  A pod whose class is off or whose policy is
  ``none`` is left alone: a new container starts with the default cookie 0.
* PreRunPodSandbox: ``cpu.idle = 1`` on the pod cgroup when the pod's class has ``cpuQOS.schedIdle=1``,
  or — on a kernel without core scheduling, as the executor remembers — when the pod is BE (the
  strategy's fallback, Koordinator #3188).  Only when the host has ``cpu.idle`` (probe ``cpu_idle``).

Upstream registers no runtime hook for this plugin (``Register`` says "TODO: hook NRI events
RunPodSandbox, PostStartContainer") and sets cookies from its container and sandbox reconcilers only;
both stages here are that TODO, with the strategy as the reconciler.

An unsupported kernel (``prctl`` EINVAL on the test host, ENODEV without SMT) is no error: nothing is
done and the executor, which remembers the verdict, is not asked again before its retry interval.  A
container cgroup that is already gone (a container that exited at once) is no error either.  Calls that
failed otherwise raise :class:`KoordletError` naming the pod and container; the cookies already given
stay (prctl cannot be undone atomically) and the strategy's next round puts the rest right.
"""

from __future__ import annotations

import os

from koordlet.apis.extension import QoSClass
from koordlet.config import gates
from koordlet.errors import GONE_ERRNOS, KoordletError
from koordlet.isolation.coresched import rules
from koordlet.isolation.coresched.cookies import CookieBook, Cookies, Tally
from koordlet.plugins import Plugin
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookContext, HookRequest, Stage
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.kubepaths import (
    CgroupDriver,
    cgroup_parent_dir,
    parse_container_dir_name,
    parse_container_id,
)
from koordlet.system.layout import CgroupLayout
from koordlet.system.resources import CPU_IDLE

NAME = "coresched"
GATE = gates.CORE_SCHED
STAGES = frozenset({Stage.PRE_RUN_POD_SANDBOX, Stage.POST_START_CONTAINER})
PROCS_FILE = "cgroup.procs"

__all__ = ["GATE", "NAME", "PLUGIN", "STAGES", "CoreSchedHook", "container_dir", "new", "read_pids"]


def container_dir(layout: CgroupLayout, pod_dir: str, container_id: str) -> str | None:
    """The container's cgroup directory (relative to the hierarchy roots) below ``pod_dir``: the child of
    the pod's cpu cgroup named by the container id under either driver (bare id, or
    ``cri-containerd-<id>.scope`` and the other runtimes' scopes); None when there is none (yet)."""
    wanted = parse_container_id(container_id).id if "://" in container_id else container_id
    try:
        names = sorted(os.listdir(layout.controller_dir("cpu", pod_dir)))
    except FileNotFoundError:
        return None
    for name in names:
        for driver in CgroupDriver:
            try:
                ref = parse_container_dir_name(driver, name)
            except KoordletError:
                continue
            if ref.id == wanted:
                return f"{pod_dir}/{name}" if pod_dir else name
    return None


def read_pids(layout: CgroupLayout, rel_dir: str) -> list[int]:
    """The processes in ``cgroup.procs`` of a cgroup of the cpu hierarchy; [] when the cgroup is gone.
    Raises :class:`KoordletError` for content that is not a pid list."""
    path = os.path.join(layout.controller_dir("cpu", rel_dir), PROCS_FILE)
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError as exc:
        if exc.errno in GONE_ERRNOS:
            return []
        raise KoordletError(f"{path}: cannot read: {exc}") from None
    pids: list[int] = []
    for token in text.split():
        if not token.isdigit() or int(token) <= 0:
            raise KoordletError(f"{path}: holds {token!r}, not a pid")
        pids.append(int(token))
    return pids


class CoreSchedHook:
    """The hook's state: the cookie book (one per hook; see the module docstring for sharing it)."""

    def __init__(self, deps: HookDeps, book: Cookies | None = None) -> None:
        self.deps = deps
        if book is None and deps.coresched is not None:
            book = CookieBook(deps.coresched)
        self.book = book

    def _rule(self) -> rules.Rule | None:
        if not gates.enabled(self.deps.gates, GATE):
            return None
        slo = self.deps.nodeslo()
        if slo is None or rules.cpu_policy(slo) != rules.CPU_POLICY_CORE_SCHED:
            return None
        return rules.rule_of(slo)

    def __call__(self, ctx: HookContext) -> None:
        rule = self._rule()
        if rule is None:
            return
        if ctx.request.stage is Stage.PRE_RUN_POD_SANDBOX:
            self._pod_idle(rule, ctx)
        elif ctx.request.stage is Stage.POST_START_CONTAINER:
            self._container_cookie(rule, ctx.request)

    def _unsupported(self) -> str | None:
        executor = self.deps.coresched
        if executor is None:
            return "no core scheduling executor"
        return executor.unsupported_reason

    def _pod_idle(self, rule: rules.Rule, ctx: HookContext) -> None:
        if not self.deps.probes.get(CPU_IDLE.key, False):
            return
        pod = ctx.request.pod_with_kube_qos()
        qos = pod.qos
        if qos in (QoSClass.SYSTEM, QoSClass.NONE):
            return
        if rule.param(qos).idle or (qos is QoSClass.BE and self._unsupported() is not None):
            ctx.write(CPU_IDLE, 1)

    def _container_cookie(self, rule: rules.Rule, request: HookRequest) -> None:
        executor, book, layout = self.deps.coresched, self.book, self.deps.layout
        if executor is None or book is None or executor.unsupported_reason is not None:
            return
        container = request.container
        if container is None or not request.container_id:
            return
        pod = request.pod_with_kube_qos()
        where = f"pod {pod.key} container {container.name}"
        verdict = rules.pod_group(rule, PodMeta(pod, "", ()))
        if not verdict.enabled:
            return
        if layout is None:
            raise KoordletError(f"{where}: no cgroup layout to find the container's tasks in")
        try:
            pod_dir = cgroup_parent_dir(request.pod_cgroup_parent)
            found = container_dir(layout, pod_dir, request.container_id)
            pids = read_pids(layout, found) if found is not None else []
        except KoordletError as exc:
            raise KoordletError(f"{where}: {exc}") from None
        if not pids:
            return
        tally = Tally()
        owner = f"{NAME}: group {verdict.group!r} for {pod.key}/{container.name}"
        book.enable((pod.uid, request.container_id), verdict.group, pids, owner, tally)
        if tally.unsupported is not None:
            return
        if tally.failures:
            raise KoordletError(f"{where}: core sched group {verdict.group!r}: {'; '.join(tally.failures)}")


def new(deps: HookDeps) -> Hook:
    """The hook with ``deps.cookies``, ideally the ``coresched`` strategy's book, so both hand out one
    cookie per group; a book of its own otherwise."""
    return Hook(NAME, "core sched cookie of the pod's group for a started container; pod cpu.idle", STAGES,
                CoreSchedHook(deps, deps.cookies))


# No registration gate: the hook checks its gate itself, per request, with the NodeSLO's CPU policy.
PLUGIN: Plugin[HookDeps, Hook] = Plugin(NAME, new)
