"""The hook registry: every hook package in the one plugin shape, registration gates decide which exist."""

from __future__ import annotations

import pytest

from koordlet.config import gates
from koordlet.errors import ConfigError
from koordlet.runtimehooks import hooks
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.hooks import build_hooks


def test_every_hook_package_exports_name_new_and_plugin() -> None:
    for plugin in hooks.PLUGINS:
        assert plugin.new(HookDeps()).name == plugin.name
        assert plugin.gate is None or plugin.gate in gates.GATES


def test_default_gates_register_every_hook_but_oomscoreadj() -> None:
    names = [hook.name for hook in build_hooks(HookDeps(gates=gates.resolve({})))]
    assert names == ["batchresource", "coresched", "cpuset", "groupidentity", "resctrl", "tc"]


def test_a_hook_whose_registration_gate_is_off_is_not_registered() -> None:
    table = gates.resolve({gates.OOM_SCORE_ADJ: True, gates.BATCH_RESOURCE: False, gates.CPU_SET_ALLOCATOR: False})
    names = [hook.name for hook in build_hooks(HookDeps(gates=table))]
    assert names == ["coresched", "groupidentity", "oomscoreadj", "resctrl", "tc"]


def test_hooks_gated_per_request_are_registered_whatever_their_gate() -> None:
    per_request = (gates.CORE_SCHED, gates.GROUP_IDENTITY, gates.RDT_RESCTRL, gates.RESCTRL, gates.TC_NETWORK_QOS)
    off = dict.fromkeys(per_request, False)
    names = {hook.name for hook in build_hooks(HookDeps(gates=gates.resolve(off)))}
    assert {"coresched", "groupidentity", "resctrl", "tc"} <= names


def test_a_duplicate_hook_name_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "PLUGINS", (*hooks.PLUGINS, hooks.PLUGINS[0]))
    with pytest.raises(ConfigError, match="duplicate runtime hook name 'batchresource'"):
        build_hooks(HookDeps())
