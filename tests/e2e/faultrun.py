"""The fault run on one node: pods churn, scenario b's LS load step and scenario c's memory pressure run while
one component at a time is SIGKILLed and restarted (:meth:`FaultRun.crash`); after each restart the checks of
:mod:`tests.e2e.faultchecks` are measured against the kernel, the API objects and koordlet's own records, and a
monitor thread samples the BE pods' limits and the NRI connections between them."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.faultchecks import (
    BE_LIMIT_BUDGET_SECONDS,
    RECOVER_SECONDS,
    companion_converged,
    dumps,
    missing_pods,
    run_checks,
    wait_until_true,
)
from tests.e2e.faultpods import BatchLimits, Tracked, live_unix_connections
from tests.e2e.faults import RESTART_DELAY_SECONDS, CheckResult, Kill, Matrix, Supervised
from tests.e2e.harness import wait_for
from tests.e2e.node import RETRY_SECONDS, KubeNode
from tests.fixtures.containerd import CriClient

MONITOR_SECONDS = 0.2


@dataclass
class Round:
    """What one kill's round saw, for its checks."""

    kill: Kill
    killed_at: float = 0.0
    restarted_at: float = 0.0
    restarted_wall: float = 0.0
    ready_at: float = 0.0
    registrations_before: int = 0
    two_live_samples: int = 0
    slo_before: str = ""
    slo_while_away: str = ""
    edited_threshold: int | None = None
    pods_recovered_seconds: float | None = None
    """From the restart until every tracked pod ran again (measured at once, whatever the phase does next)."""
    nri_recovered_seconds: float | None = None
    ls_recovered_seconds: float | None = None
    """Scenario b: from the restart to the first suppress round that cut BE for the LS load."""
    extra: list[CheckResult] = field(default_factory=list)


class FaultRun:
    """The pods the run created (``tracked``), its components under their supervisor, the monitor, and the
    matrix the checks fill."""

    def __init__(self, node: KubeNode) -> None:
        self.node = node
        self.matrix = Matrix()
        self.tracked: dict[str, Tracked] = {}
        self.lock = threading.Lock()
        self.koordlet_up_since: float | None = time.monotonic()
        self.round: Round | None = None
        self.thresholds: dict[str, Any] = {}
        self.errors: list[str] = []
        self.be_violations: list[str] = []
        """BE pods the monitor saw without their limits beyond the budget since the last check."""
        self.be_worst = 0.0
        """The longest such time since the last check."""
        self.timeline: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="fault-monitor", daemon=True)
        self.supervised = self._supervised()

    # --- components -------------------------------------------------------------------------------------

    def _supervised(self) -> dict[str, Supervised]:
        node = self.node
        runtime = node.containerd

        def kill_containerd() -> int:
            proc = runtime._proc
            assert proc is not None and proc.poll() is None, "containerd is not running"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(15)
            return proc.pid

        def start_containerd() -> None:
            runtime.import_busybox = False  # the image is in its content store already
            runtime.start()  # returns once CRI answers

        def cri_answers(socket: Path) -> bool:
            client = CriClient(socket, timeout_seconds=2.0)
            try:
                client.version()
                return True
            except Exception:
                return False
            finally:
                client.close()

        def koordlet_ready() -> bool:
            if not node.view.ready():
                return False
            if node.variant == "nri":
                return live_unix_connections(runtime.nri_socket) == 1
            return True

        components = {
            "koordlet": Supervised("koordlet", node.koordlet.kill, node.koordlet.start, koordlet_ready),
            "koord-companion": Supervised("koord-companion", node.companion.kill, node.companion.start,
                                          node.companion_listening),
            "containerd": Supervised("containerd", kill_containerd, start_containerd,
                                     lambda: cri_answers(runtime.socket)),
        }
        if node.proxy is not None:
            proxy = node.proxy
            components["koord-runtime-proxy"] = Supervised("koord-runtime-proxy", proxy.kill, proxy.start,
                                                           lambda: cri_answers(node.cri_socket))
        return components

    # --- pods ---------------------------------------------------------------------------------------------

    def create(self, manifest: dict[str, Any]) -> Tracked:
        """Creates the pod as kubelet does, retrying while a component is down; a failed attempt's sandbox is
        removed first (kubelet's GC), so the retry does not collide with it."""
        name, uid = manifest["metadata"]["name"], manifest["metadata"]["uid"]
        deadline = time.monotonic() + RECOVER_SECONDS
        while True:
            try:
                self.node.create_pod(copy.deepcopy(manifest))
                break
            except Exception as exc:
                self.errors.append(f"create {name}: {exc}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"pod {name} not created within {RECOVER_SECONDS} s: {exc}") from None
                self._collect_sandboxes(uid)
                time.sleep(RETRY_SECONDS)  # kubelet's pod worker backoff, not a wait for an outcome
        snapshot = self.node.kubelet.pod("default", name)
        qos = manifest["metadata"]["labels"]["koordinator.sh/qosClass"]
        entry = Tracked(name=name, manifest=manifest, qos=qos, pod_dir=snapshot.cgroup_parent.strip("/"),
                        container_dirs=[f"{snapshot.cgroup_parent.strip('/')}/{c.container_id}"
                                        for c in snapshot.containers],
                        limits=BatchLimits.of(manifest) if qos == "BE" else None)
        with self.lock:
            self.tracked[name] = entry
        return entry

    def delete(self, name: str) -> None:
        with self.lock:
            entry = self.tracked.get(name)
            if entry is not None:
                entry.deleting = True
        deadline = time.monotonic() + RECOVER_SECONDS
        while self.node.has_pod(name):
            try:
                self.node.delete_pod(name)
            except Exception as exc:
                self.errors.append(f"delete {name}: {exc}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"pod {name} not deleted within {RECOVER_SECONDS} s: {exc}") from None
                time.sleep(RETRY_SECONDS)
        self.node.apiserver.delete("pods", name, "default")
        with self.lock:
            self.tracked.pop(name, None)

    def _collect_sandboxes(self, uid: str) -> None:
        client = CriClient(self.node.containerd.socket, timeout_seconds=5.0)
        try:
            for sandbox in client.list_pods():
                if sandbox.metadata.uid == uid:
                    client.stop_pod(sandbox.id)
                    client.remove_pod(sandbox.id)
        except Exception as exc:  # the runtime is still down: the next attempt tries again
            self.errors.append(f"collect sandboxes of {uid}: {exc}")
        finally:
            client.close()

    def set_thresholds(self, **changes: Any) -> None:
        self.thresholds.update(changes)
        self.node.set_thresholds(**self.thresholds)

    def reset_thresholds(self, *keys: str) -> None:
        for key in keys:
            self.thresholds.pop(key, None)
        self.node.set_thresholds(**self.thresholds)

    # --- monitor --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._monitor.start()

    def stop(self) -> None:
        self._stop.set()
        self._monitor.join(30)

    def _watch(self) -> None:
        """Samples the BE pods' limits and the NRI connections every :data:`MONITOR_SECONDS`."""
        while not self._stop.wait(MONITOR_SECONDS):
            try:
                self._sample()
            except Exception as exc:  # a sample must never end the monitor: record it and go on
                self.errors.append(f"monitor: {exc!r}")

    def _sample(self) -> None:
        now = time.monotonic()
        up_since = self.koordlet_up_since
        with self.lock:
            entries = [e for e in self.tracked.values() if e.limits is not None and not e.deleting]
        for entry in entries:
            assert entry.limits is not None
            try:
                limited = all(all(entry.limits.applied(rel)[1:]) for rel in (entry.pod_dir, *entry.container_dirs))
            except (OSError, ValueError):
                continue  # the pod is going away, or a container restarted: its next sample decides
            if limited:
                entry.unlimited_since = None
                entry.reported = False
                continue
            if entry.unlimited_since is None:
                entry.unlimited_since = now
            if up_since is None:
                continue  # nobody can set limits while koordlet is dead
            waited = now - max(entry.unlimited_since, up_since)
            with self.lock:
                self.be_worst = max(self.be_worst, waited)
                if waited > BE_LIMIT_BUDGET_SECONDS and not entry.reported:
                    entry.reported = True
                    self.be_violations.append(f"{entry.name}: without its batch limits for over {waited:.1f} s "
                                              "while koordlet ran")
        current = self.round
        if (self.node.variant == "nri" and current is not None
                and live_unix_connections(self.node.containerd.nri_socket) > 1):
            current.two_live_samples += 1

    # --- one kill -------------------------------------------------------------------------------------------

    def crash(self, kill: Kill) -> Round:
        """SIGKILLs the component, restarts it after the supervisor's delay, waits until it serves again and
        measures how long the pods (and NRI) took to recover."""
        current = Round(kill, registrations_before=self.registrations())
        self.round = current
        component = self.supervised[kill.component]
        if kill.component == "koordlet":
            self.koordlet_up_since = None
        if kill.component == "koord-companion":
            current.slo_before = dumps(self.node.view.slo()["spec"])
        pid = component.kill()
        current.killed_at = time.monotonic()
        if kill.component == "koord-companion":
            # An edit while the companion is away must reach the node once it is back.
            now = self.thresholds.get("cpuSuppressThresholdPercent", 65)
            current.edited_threshold = 64 if now == 65 else 65
            self.set_thresholds(cpuSuppressThresholdPercent=current.edited_threshold)
        remaining = current.killed_at + RESTART_DELAY_SECONDS - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)  # the supervisor's restart delay
        if kill.component == "koord-companion":
            current.slo_while_away = dumps(self.node.view.slo()["spec"])
        component.start()
        current.restarted_at, current.restarted_wall = time.monotonic(), time.time()
        wait_for(f"{kill.component} serving again after SIGKILL of pid {pid}", component.ready, RECOVER_SECONDS,
                 self._others(kill.component))
        current.ready_at = time.monotonic()
        if kill.component == "koordlet":
            self.koordlet_up_since = current.ready_at
        with contextlib.suppress(TimeoutError):  # not recovering is what the checks then count
            wait_until_true(lambda: not missing_pods(self), RECOVER_SECONDS)
            current.pods_recovered_seconds = time.monotonic() - current.restarted_at
        if self.node.variant == "nri":
            with contextlib.suppress(TimeoutError):
                wait_until_true(lambda: live_unix_connections(self.node.containerd.nri_socket) == 1, RECOVER_SECONDS)
                current.nri_recovered_seconds = time.monotonic() - current.restarted_at
        if kill.component == "koord-companion":
            current.extra.append(companion_converged(self, current))
        self.timeline.append({"kill": kill.index, "component": kill.component, "phase": kill.phase,
                              "delay": kill.delay, "pid": pid,
                              "ready_seconds": round(current.ready_at - current.restarted_at, 2)})
        return current

    def _others(self, component: str) -> list[Any]:
        return [p for p in self.node.procs if p.name != component]

    # --- checks ---------------------------------------------------------------------------------------------

    def check(self, current: Round) -> list[CheckResult]:
        """Measures every check after ``current``'s restart and records them in the matrix."""
        results = [*run_checks(self, current), *current.extra]
        self.matrix.record(current.kill.component, results)
        return results

    def registrations(self) -> int:
        """NRI registrations koordlet has logged so far (its log is appended across restarts)."""
        try:
            return self.node.koordlet.log_path.read_text(errors="replace").count("NRI plugin registered")
        except OSError:
            return 0
