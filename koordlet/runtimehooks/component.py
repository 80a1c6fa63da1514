"""The daemon component of the runtime hooks: one hook runner shared by its three transports.

* the reconciler (always): existing pods and containers, every interval and on pod changes;
* the RuntimeHookService server for koord-runtime-proxy (``enable_server``), with its registration file;
* the NRI plugin (``enable_nri``) on its own asyncio loop in one thread; it waits for the runtime's NRI
  socket when there is none yet and reconnects whenever the runtime drops it.

Started last and stopped first of the daemon's parts (Koordinator's order), so hooks never run against a
stopped executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from koordlet.config.types import RuntimeHooksConfig
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.hookserver.server import HookServer
from koordlet.runtimehooks.nri.plugin import NriPlugin
from koordlet.runtimehooks.reconciler import OomScoreApply, ReconcileMetricsSink, Reconciler
from koordlet.statesinformer.framework import StatesInformer

log = logging.getLogger(__name__)


class RuntimeHooks:
    name = "runtimehooks"

    def __init__(self, config: RuntimeHooksConfig, runner: HookRunner, applier: Applier,
                 informer: StatesInformer, metrics: ReconcileMetricsSink | None = None,
                 oom_score: OomScoreApply | None = None) -> None:
        self.config = config
        self.runner = runner
        self.reconciler = Reconciler(runner, applier, informer, interval_seconds=config.reconcile_interval_seconds,
                                     metrics=metrics, oom_score=oom_score)
        self.server: HookServer | None = None
        if config.enable_server:
            self.server = HookServer(runner, config.server_socket, config.registration_dir or None,
                                     config.failure_policy, applier, endpoint=config.host_endpoint)
        self.nri: NriPlugin | None = None
        if config.enable_nri:
            self.nri = NriPlugin(runner, applier, config.nri_socket_path, idx=config.nri_plugin_idx)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self.reconciler.start(on_failure)
        if self.server is not None:
            self.server.start()
        if self.nri is not None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._thread = threading.Thread(target=self._run_nri, args=(loop, self.nri, on_failure),
                                            name="runtimehooks-nri", daemon=True)
            self._thread.start()
        log.info("runtime hooks started", extra={
            "hooks": list(self.runner.names),
            "server": self.server.socket_path if self.server else None,
            "nri": self.nri.socket_path if self.nri else None})

    @staticmethod
    def _run_nri(loop: asyncio.AbstractEventLoop, plugin: NriPlugin,
                 on_failure: Callable[[BaseException], None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(plugin.run())
        except BaseException as exc:  # run() handles every connection error; anything else is a bug
            on_failure(exc)
        finally:
            loop.close()

    def stop(self, timeout_seconds: float) -> None:
        if self.nri is not None and self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self.nri.stop)
            self._thread.join(timeout_seconds)
        if self.server is not None:
            self.server.stop()
        self.reconciler.stop(timeout_seconds)
