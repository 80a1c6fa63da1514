"""One package per runtime hook; each exports ``NAME`` and a ``new`` factory.  :func:`build_hooks` makes the
daemon's list: hooks whose feature gate is off are not registered at all (Koordinator registers a hook
only when its gate is on), the rest get the shared :class:`~koordlet.runtimehooks.deps.HookDeps`.
Gates that also depend on the NodeSLO or the host are checked by the hooks themselves, per request."""

from __future__ import annotations

from collections.abc import Callable

from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook
from koordlet.runtimehooks.hooks import (
    batchresource,
    coresched,
    cpuset,
    groupidentity,
    oomscoreadj,
    resctrl,
    tc,
)

FACTORIES: tuple[tuple[str, str | None, Callable[[HookDeps], Hook]], ...] = (
    (batchresource.NAME, "BatchResource", lambda deps: batchresource.new()),
    (coresched.NAME, None, lambda deps: coresched.new(deps, deps.cookies)),
    (cpuset.NAME, "CPUSetAllocator", lambda deps: cpuset.new(deps.shared_pools)),
    (groupidentity.NAME, None, groupidentity.new),
    (oomscoreadj.NAME, "OOMScoreAdj", lambda deps: oomscoreadj.new()),
    (resctrl.NAME, None, resctrl.new),
    (tc.NAME, None, tc.new),
)
"""(hook name, feature gate checked at registration or None, factory)."""


def build_hooks(deps: HookDeps) -> list[Hook]:
    return [factory(deps) for _name, gate, factory in FACTORIES if gate is None or deps.gates.get(gate, False)]
