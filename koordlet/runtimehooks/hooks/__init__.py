"""One package per runtime hook; each exports ``NAME``, ``new(deps)`` and ``PLUGIN``.  :func:`build_hooks`
makes the daemon's list: a hook whose registration gate is off is not registered at all (Koordinator
registers such a hook only when its gate is on), the rest get the shared
:class:`~koordlet.runtimehooks.deps.HookDeps`.  Gates that also depend on the NodeSLO or the host are
checked by the hooks themselves, per request."""

from __future__ import annotations

from koordlet import plugins
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook
from koordlet.runtimehooks.hooks import (
    batchresource,
    coresched,
    cpunormalization,
    cpuset,
    groupidentity,
    oomscoreadj,
    resctrl,
    tc,
)

KIND = "runtime hook"

PLUGINS: tuple[plugins.Plugin[HookDeps, Hook], ...] = (
    batchresource.PLUGIN, coresched.PLUGIN, cpunormalization.PLUGIN, cpuset.PLUGIN, groupidentity.PLUGIN,
    oomscoreadj.PLUGIN, resctrl.PLUGIN, tc.PLUGIN)


NO_SHADOW_PATH: frozenset[str] = frozenset({coresched.NAME, resctrl.NAME})
"""Hooks writing through more than their answer, the cgroup executor and the reconciler's kernel knobs
(core-scheduling cookies, resctrl groups), which shadow mode cannot yet record: in shadow mode they do not run."""


def build_hooks(deps: HookDeps) -> list[Hook]:
    return plugins.build(KIND, PLUGINS, deps, deps.gates)
