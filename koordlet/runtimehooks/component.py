"""The daemon component of the runtime hooks: one hook runner shared by its three transports.

* the reconciler (always): existing pods and containers, every interval and on pod changes;
* the RuntimeHookService server for koord-runtime-proxy (``enable_server``), with its registration file;
* the NRI plugin (``enable_nri``) on its own asyncio loop in one thread, started once the runtime's NRI
  socket exists (checked every few seconds; until then neither asyncio nor the NRI messages are loaded,
  ~6 MiB a host without NRI does not pay); it reconnects whenever the runtime drops it.

Started last and stopped first of the daemon's parts (Koordinator's order), so hooks never run against a
stopped executor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from koordlet.component import Worker
from koordlet.config.types import RuntimeHooksConfig
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.reconciler import HostAppTarget, OomScoreApply, ReconcileMetricsSink, Reconciler
from koordlet.statesinformer.framework import StatesInformer
from koordlet.system.kubepaths import KubeQoS

if TYPE_CHECKING:
    from koordlet.runtimehooks.hookserver.server import HookServer
    from koordlet.runtimehooks.nri.plugin import NriPlugin

NRI_SOCKET_POLL_SECONDS = 5.0

log = logging.getLogger(__name__)


class RuntimeHooks:
    name = "runtimehooks"

    def __init__(self, config: RuntimeHooksConfig, runner: HookRunner, applier: Applier,
                 informer: StatesInformer, metrics: ReconcileMetricsSink | None = None,
                 oom_score: OomScoreApply | None = None, incarnation: Callable[[str], int | None] | None = None,
                 forget: Callable[[str], None] | None = None,
                 qos_dirs: Mapping[KubeQoS, str] | None = None,
                 host_apps: Callable[[], Sequence[HostAppTarget]] | None = None,
                 sysctl: SysctlExecutor | None = None) -> None:
        """``qos_dirs``: the kube-QoS directories the hooks' node-level parts write (None: not written).
        ``host_apps``: the NodeSLO's host applications the hooks' host-application parts write (None: none).
        ``sysctl``: where the node-level parts' kernel knobs go (None: not set)."""
        self.config = config
        self.runner = runner
        self.reconciler = Reconciler(runner, applier, informer, interval_seconds=config.reconcile_interval_seconds,
                                     metrics=metrics, oom_score=oom_score, incarnation=incarnation, forget=forget,
                                     qos_dirs=qos_dirs, host_apps=host_apps, sysctl=sysctl)
        self.server: HookServer | None = None
        if config.enable_server:
            # gRPC is loaded only for the server: a node on NRI alone keeps ~15 MiB of RSS.
            from koordlet.runtimehooks.hookserver.server import HookServer

            self.server = HookServer(runner, config.server_socket, config.registration_dir or None,
                                     config.failure_policy, applier, endpoint=config.host_endpoint)
        self._applier = applier
        self.nri: NriPlugin | None = None
        self._loop: Any = None
        self._nri_worker = Worker("runtimehooks-nri")
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """The reconciler runs, and so does the NRI thread when NRI is on (waiting for the runtime's socket
        counts: it connects once the socket appears)."""
        return self.reconciler.running and (self._nri_worker.running or not self.config.enable_nri)

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self.reconciler.start(on_failure)
        if self.server is not None:
            self.server.start()
        if self.config.enable_nri:
            self._nri_worker.start(lambda: self._run_nri(on_failure))
        log.info("runtime hooks started", extra={
            "hooks": list(self.runner.names),
            "server": self.server.socket_path if self.server else None,
            "nri": self.config.nri_socket_path if self.config.enable_nri else None})

    def _run_nri(self, on_failure: Callable[[BaseException], None]) -> None:
        path = self.config.nri_socket_path
        while not os.path.exists(path):
            if self._nri_worker.stopping.wait(NRI_SOCKET_POLL_SECONDS):
                return
        import asyncio

        from koordlet.runtimehooks.nri.plugin import NriPlugin

        loop = asyncio.new_event_loop()
        plugin = NriPlugin(self.runner, self._applier, path, idx=self.config.nri_plugin_idx)
        with self._lock:
            if self._nri_worker.stopping.is_set():
                loop.close()
                return
            self.nri, self._loop = plugin, loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(plugin.run())
        except BaseException as exc:  # run() handles every connection error; anything else is a bug
            on_failure(exc)
        finally:
            loop.close()

    def stop(self, timeout_seconds: float) -> None:
        with self._lock:
            self._nri_worker.stopping.set()
            plugin, loop = self.nri, self._loop
        if plugin is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(plugin.stop)
        self._nri_worker.stop(timeout_seconds)
        if self.server is not None:
            self.server.stop()
        self.reconciler.stop(timeout_seconds)
