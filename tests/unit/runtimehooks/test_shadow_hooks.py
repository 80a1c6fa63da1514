"""Runtime hooks in shadow mode at the reconciler: a hook's host-application (and node-level) values are said
to the audit log as intended and written nowhere, and a hook with writers of its own never runs in shadow mode."""

from __future__ import annotations

import re
from pathlib import Path

from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.runtimehooks import hooks as hooks_package
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.hooks import NO_SHADOW_PATH, PLUGINS, build_hooks
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.shadowmodes import ShadowModes
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit
from tests.unit.runtimehooks.test_hostapps import NGINX, POOLS, Pools
from tests.unit.runtimehooks.test_reconciler import FakeInformer


def test_a_host_application_hook_in_shadow_mode_is_audited_and_not_written(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(NGINX.rel_dir)
    fake_host.write_cgroup(NGINX.rel_dir, "cpuset.cpus", "0-15\n")
    modes = ShadowModes(default=True, kind="hook")
    runner = HookRunner(build_hooks(HookDeps(gates={"CPUSetAllocator": True}, shared_pools=Pools(POOLS))),
                        shadow=modes)
    audit = MemoryAudit()
    executor = ResourceExecutor(fake_host.layout(), FakeClock(), audit)
    reconciler = Reconciler(runner, Applier(executor.apply, intend=executor.intend), FakeInformer([]),
                            host_apps=lambda: [NGINX])
    reconciler.reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-15"
    (entry,) = audit.entries
    assert (entry.old, entry.new, entry.owner, entry.outcome) == ("0-15", "0-3,8-11", "runtimehooks/cpuset",
                                                                  "intended")
    modes.set("cpuset", False)  # active from the next round on
    reconciler.reconcile([])
    assert fake_host.read_cgroup(NGINX.rel_dir, "cpuset.cpus").strip() == "0-3,8-11"


def test_every_hook_with_writers_of_its_own_is_kept_out_of_shadow_mode() -> None:
    """A hook reaching for a writer shadow mode does not wrap would write in shadow mode: it must be listed."""
    hooks_dir = Path(hooks_package.__file__).parent
    others = re.compile(r"deps\.(coresched|cookies|resctrl|sysctl)\b")
    for plugin in PLUGINS:
        assert (hooks_dir / plugin.name).is_dir(), plugin.name
        sources = "".join(p.read_text() for p in (hooks_dir / plugin.name).rglob("*.py"))
        assert bool(others.search(sources)) == (plugin.name in NO_SHADOW_PATH), plugin.name
