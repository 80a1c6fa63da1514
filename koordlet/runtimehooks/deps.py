"""What hooks may read and call besides the request: injected rather than imported, so a test hands a hook
a fake executor, NodeSLO or cgroup tree.

Every hook package exposes ``NAME``, ``new(deps: HookDeps) -> Hook`` and ``PLUGIN``; the daemon builds one
:class:`HookDeps` and the hook list from :data:`koordlet.runtimehooks.hooks.PLUGINS`.  Sources are
callables, read at each request, so a hook always sees the NodeSLO and node annotations in force now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.apis.tenantpolicy import TenantPolicy
from koordlet.isolation.coresched.cookies import CookieBook, CookieCalls, Cookies
from koordlet.isolation.coresched.shadow import ShadowCookies, ShadowCoreSched
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor, ResctrlGroups
from koordlet.resourceexecutor.shadowviews import HookShadow, IntentRecorder, NoIntents, ShadowResctrl
from koordlet.shadowmodes import ShadowModes
from koordlet.system.layout import CgroupLayout


def _no_slo() -> NodeSLOSpec | None:
    return None


def _no_annotation() -> str | None:
    return None


def _no_ratio() -> float | None:
    return None


@dataclass(frozen=True)
class HookDeps:
    layout: CgroupLayout | None = None
    """The host's cgroup hierarchy (container task lists for coresched and resctrl); None in pure unit tests."""
    gates: Mapping[str, bool] = field(default_factory=dict)
    """Feature gates in force (``koordlet.config.gates``)."""
    probes: Mapping[str, bool] = field(default_factory=dict)
    """Host capabilities by probe name (``koordlet.system.probes``): ``bvt``, ``cpu_idle``, ``core_sched``..."""
    nodeslo: Callable[[], NodeSLOSpec | None] = _no_slo
    """The effective NodeSLO (merged over Koordinator's defaults), None until one is known."""
    shared_pools: Callable[[], str | None] = _no_annotation
    """The node annotation ``node.koordinator.sh/cpu-shared-pools``, None while unknown; the daemon's is
    computed by the states informer (:mod:`koordlet.statesinformer.cpupools`)."""
    cpu_normalization_ratio: Callable[[], float | None] = _no_ratio
    """The node's CPU normalization ratio (annotation ``node.koordinator.sh/cpu-normalization-ratio`` the
    companion sends with the node), None while the node has none; the batchresource and cpunormalization hooks
    divide CFS quotas by it."""
    coresched: CookieCalls | None = None
    cookies: Cookies | None = None
    """The core-scheduling cookie book shared with the QoS manager's coresched strategy."""
    resctrl: ResctrlGroups | None = None
    tenant: TenantPolicy = field(default_factory=TenantPolicy)
    """The tenant policy (its CLOSID reserve for per-pod resctrl groups); the pods the hooks see are reviewed
    by the runner already."""
    shadow: ShadowModes = field(default_factory=lambda: ShadowModes(kind="hook"))
    """The hooks' shadow modes (the runner's): :meth:`for_hook` makes each hook's writers follow its mode."""
    intents: IntentRecorder = field(default_factory=NoIntents)
    """Where a hook in shadow mode audits and counts what it would have done through its writers (the cgroup
    executor's :meth:`~koordlet.resourceexecutor.executor.ResourceExecutor.record_intended`)."""

    def for_hook(self, hook: str) -> HookDeps:
        """These deps as ``hook`` gets them: the writers it holds besides its answer and the cgroup executor
        (core-scheduling calls and cookies, resctrl groups) are shadow-mode views following the hook's mode call by
        call (:mod:`koordlet.resourceexecutor.shadowviews`), so a hook in shadow mode cannot write through them.
        A writer that is a view already (a test's stand-in) is kept."""
        round_ = HookShadow(hook, self.shadow, self.intents)
        resctrl, coresched, cookies = self.resctrl, self.coresched, self.cookies
        if isinstance(resctrl, ResctrlExecutor):
            resctrl = round_.own(ShadowResctrl(round_, resctrl))
        if isinstance(coresched, CoreSchedExecutor):
            book = cookies if isinstance(cookies, CookieBook) else CookieBook(coresched)
            coresched = round_.own(ShadowCoreSched(round_, coresched))
            cookies = round_.own(ShadowCookies(round_, book, coresched))
        return replace(self, resctrl=resctrl, coresched=coresched, cookies=cookies)
