"""One package per runtime hook; each exports ``NAME``, ``new(deps)`` and ``PLUGIN``.  :func:`build_hooks`
makes the daemon's list: a hook whose registration gate is off is not registered at all (Koordinator
registers such a hook only when its gate is on), the rest get the shared
:class:`~koordlet.runtimehooks.deps.HookDeps` with writers of their own that follow their shadow mode.  Gates
that also depend on the NodeSLO or the host are checked by the hooks themselves, per request."""

from __future__ import annotations

from collections.abc import Mapping

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


def build_hooks(deps: HookDeps) -> list[Hook]:
    """The hooks whose registration gate is on, each with its own writers (:meth:`HookDeps.for_hook`)."""
    return [plugin.new(deps.for_hook(plugin.name)) for plugin in plugins.enabled(KIND, PLUGINS, deps.gates)]


def hook_names(gates: Mapping[str, bool]) -> list[str]:
    """The names of the hooks :func:`build_hooks` makes under ``gates``."""
    return [plugin.name for plugin in plugins.enabled(KIND, PLUGINS, gates)]
