"""The runtime-hooks component starts the NRI plugin once the runtime's NRI socket appears."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from koordlet.config.types import RuntimeHooksConfig
from koordlet.runtimehooks import component
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.hooks import batchresource
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakenri import FakeNriRuntime


class NoPods:
    def pods(self) -> list[Any]:
        return []

    def subscribe(self, callback: Any) -> None:
        pass


def test_nri_starts_when_the_socket_appears_and_stops_cleanly(monkeypatch: pytest.MonkeyPatch,
                                                              failures: ComponentFailures) -> None:
    monkeypatch.setattr(component, "NRI_SOCKET_POLL_SECONDS", 0.05)
    with tempfile.TemporaryDirectory(prefix="kcmp-") as tmp:
        socket = str(Path(tmp) / "nri.sock")
        config = RuntimeHooksConfig(enable_server=False, nri_socket_path=socket)
        runner = HookRunner([batchresource.new(HookDeps())])
        hooks = component.RuntimeHooks(config, runner, Applier(lambda u: []), NoPods())
        hooks.start(failures.callback("runtimehooks"))
        time.sleep(0.2)
        assert hooks.nri is None, "no socket: no plugin yet"

        registered = threading.Event()

        def runtime() -> None:
            async def main() -> None:
                fake = FakeNriRuntime(socket)
                await fake.start()
                await fake.wait_ready()
                registered.set()
                while hooks.nri is not None and hooks.nri.stats.connected:
                    await asyncio.sleep(0.05)
                await fake.stop()
            asyncio.run(main())

        thread = threading.Thread(target=runtime, daemon=True)
        thread.start()
        assert registered.wait(10), "the plugin registered once the socket existed"
        assert hooks.nri is not None and hooks.nri.stats.registrations == 1
        started = time.monotonic()
        hooks.stop(5)
        assert time.monotonic() - started < 5
        thread.join(10)


def test_stop_before_any_socket_is_prompt(monkeypatch: pytest.MonkeyPatch, failures: ComponentFailures) -> None:
    monkeypatch.setattr(component, "NRI_SOCKET_POLL_SECONDS", 30.0)
    config = RuntimeHooksConfig(enable_server=False, nri_socket_path="/nonexistent/koordlet-test/nri.sock")
    hooks = component.RuntimeHooks(config, HookRunner([]), Applier(lambda u: []), NoPods())
    hooks.start(failures.callback("runtimehooks"))
    started = time.monotonic()
    hooks.stop(5)
    assert time.monotonic() - started < 2
