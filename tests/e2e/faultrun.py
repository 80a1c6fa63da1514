"""The fault run on one node: pods churn, scenario b's LS load step and scenario c's memory pressure run
while one component at a time is SIGKILLed and restarted; after each restart the checks of
:mod:`tests.e2e.faults` are measured against the kernel, the API objects and koordlet's own records.

What is checked after a kill (violations are counted, each must stay 0):

- ``pods_lost``: every pod the kubelet driver created (and the run did not delete) is listed with its
  containers running, and its object is in the apiserver;
- ``ls_protected``: no LS pod throttled (``nr_throttled`` of every LS pod, none of which has a CPU limit it
  could reach) and none asked to be evicted;
- ``be_limits``: no BE pod without its batch limits (CFS quota, memory limit) longer than
  :data:`BE_LIMIT_BUDGET_SECONDS` while koordlet runs; the worst such time is the recovery figure;
- ``half_adjusted``: once koordlet is back, no BE container holds some of its hook results (shares, quota,
  memory) but not all;
- ``nri_registrations`` (NRI node): one live connection on containerd's NRI socket, never two; a new
  registration after koordlet's or containerd's restart, none after the others';
- ``eviction_storm`` (phase c): exactly one eviction granted per pressure episode, of the pod the strategy chose,
  and no eviction asked for a pod already being evicted;
- ``companion_converged`` (companion kills): koordlet keeps its NodeSLO while the companion is away; a
  ConfigMap edit made meanwhile reaches the NodeSLO object and koordlet, and a new NodeMetric and the batch
  resources reach the apiserver, once it is back.
"""

from __future__ import annotations

import calendar
import contextlib
import copy
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.faults import RESTART_DELAY_SECONDS, CheckResult, Kill, Matrix, Supervised
from tests.e2e.harness import cfs_quota, cpu_shares, memory_limit, wait_for
from tests.e2e.node import (
    BATCH_CPU,
    BATCH_MEMORY,
    BUSY,
    NODE_NAME,
    RETRY_SECONDS,
    KubeNode,
    MiB,
    container,
    hold_memory,
    pod_manifest,
)
from tests.fixtures.containerd import CGROUP_ROOT, CriClient, unified_cgroups
from tests.fixtures.realcgroup import kubelet_cpu_weight

RECOVER_SECONDS = 90.0
"""Bound for anything owed after a restart; the figure itself is measured and reported."""
RECONCILE_SECONDS = 2.0
"""koordlet's ``runtimeHooks.reconcileIntervalSeconds`` on the node (tests/e2e/node.py)."""
KUBELET_SYNC_SECONDS = 1.0
"""koordlet's ``kubelet.syncIntervalSeconds``: a pod is known to koordlet at most this long after it runs."""
BE_LIMIT_BUDGET_SECONDS = RECONCILE_SECONDS + KUBELET_SYNC_SECONDS
"""One reconcile interval after koordlet can know the pod."""
MONITOR_SECONDS = 0.2
CHURN_PODS = 3


# ------------------------------------------------------------------------------------------------- pods


def be_pod(name: str, script: str = "sleep 1000000", *, cpu_limit: int = 500, memory_limit_bytes: int = 96 * MiB,
           priority: int = 5000) -> dict[str, Any]:
    return pod_manifest(name, [container("main", script, requests={BATCH_CPU: "100", BATCH_MEMORY: "32Mi"},
                                         limits={BATCH_CPU: str(cpu_limit),
                                                 BATCH_MEMORY: str(memory_limit_bytes)})],
                        qos="BE", priority_class="koord-batch", priority=priority)


def ls_pod(name: str, script: str = "sleep 1000000") -> dict[str, Any]:
    """An LS pod without a CPU limit: any throttling of it is koordlet's doing."""
    return pod_manifest(name, [container("main", script, requests={"cpu": "100m", "memory": "32Mi"},
                                         limits={"memory": "256Mi"})],
                        qos="LS", priority_class="koord-prod", priority=9000)


@dataclass(frozen=True)
class BatchLimits:
    """What koordlet's hooks put in a BE container's and pod's cgroups (batchresource)."""

    shares: int
    quota_us: int
    memory_bytes: int

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> BatchLimits:
        resources = manifest["spec"]["containers"][0]["resources"]
        request_milli = int(resources["requests"][BATCH_CPU])
        return cls(shares=request_milli * 1024 // 1000, quota_us=int(resources["limits"][BATCH_CPU]) * 100,
                   memory_bytes=int(resources["limits"][BATCH_MEMORY]))

    def applied(self, rel_dir: str) -> tuple[bool, bool, bool]:
        """Which of (shares, quota, memory) the cgroup holds; the quota may be lower (suppression caps it)."""
        shares = cpu_shares(rel_dir)
        want_shares = kubelet_cpu_weight(self.shares) if unified_cgroups() else self.shares
        quota = cfs_quota(rel_dir)[0]
        return shares == want_shares, 0 < quota <= self.quota_us, memory_limit(rel_dir) == self.memory_bytes


@dataclass
class Tracked:
    name: str
    manifest: dict[str, Any]
    qos: str
    pod_dir: str
    container_dirs: list[str]
    limits: BatchLimits | None
    unlimited_since: float | None = None
    reported: bool = False
    deleting: bool = False


def nr_throttled(rel_dir: str) -> int:
    path = (CGROUP_ROOT / rel_dir.strip("/") / "cpu.stat" if unified_cgroups()
            else CGROUP_ROOT / "cpu" / rel_dir.strip("/") / "cpu.stat")
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled":
            return int(value)
    raise AssertionError(f"no nr_throttled in {path}")


def live_unix_connections(path: Path) -> int:
    """Connected sockets the listener at ``path`` accepted (each a client's connection), from /proc/net/unix."""
    wanted = str(path)
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == wanted and fields[5] == "03":  # SS_CONNECTED
            count += 1
    return count


# ------------------------------------------------------------------------------------------------- the run


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

    def crash(self, kill: Kill, during_downtime: Callable[[], None] | None = None) -> Round:
        """SIGKILLs the component, runs ``during_downtime``, restarts it after the supervisor's delay and waits
        until it serves again."""
        current = Round(kill, registrations_before=self._registrations())
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
        if during_downtime is not None:
            during_downtime()
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
            wait_until_true(lambda: not self._missing_pods(), RECOVER_SECONDS)
            current.pods_recovered_seconds = time.monotonic() - current.restarted_at
        if self.node.variant == "nri":
            with contextlib.suppress(TimeoutError):
                wait_until_true(lambda: live_unix_connections(self.node.containerd.nri_socket) == 1, RECOVER_SECONDS)
                current.nri_recovered_seconds = time.monotonic() - current.restarted_at
        self.timeline.append({"kill": kill.index, "component": kill.component, "phase": kill.phase,
                              "delay": kill.delay, "pid": pid,
                              "ready_seconds": round(current.ready_at - current.restarted_at, 2)})
        return current

    def _others(self, component: str) -> list[Any]:
        return [p for p in self.node.procs if p.name != component]

    def _registrations(self) -> int:
        try:
            return self.node.koordlet.log_path.read_text(errors="replace").count("NRI plugin registered")
        except OSError:
            return 0

    # --- checks ---------------------------------------------------------------------------------------------

    def check(self, current: Round) -> list[CheckResult]:
        results = [self._pods_lost(current), self._ls_protected(current), self._be_limits(current),
                   self._half_adjusted()]
        if self.node.variant == "nri":
            results.append(self._nri(current))
        if current.kill.component == "koord-companion":
            results.append(self._companion(current))
        results.extend(current.extra)
        self.matrix.record(current.kill.component, results)
        return results

    def _missing_pods(self) -> list[str]:
        """Tracked pods not listed with every container running, or whose API object is gone."""
        with self.lock:
            expected = [name for name, e in self.tracked.items() if not e.deleting]
        running = {p.name for p in self.node.kubelet.pods()
                   if p.containers and all(c.state == "running" for c in p.containers)}
        return sorted(name for name in expected
                      if name not in running or self.node.apiserver.get("pods", name, "default") is None)

    def _pods_lost(self, current: Round) -> CheckResult:
        try:
            wait_until_true(lambda: not self._missing_pods(), RECOVER_SECONDS)
        except TimeoutError:
            gone = self._missing_pods()
            return CheckResult("pods_lost", len(gone), None, tuple(f"pod {n} not running" for n in gone))
        return CheckResult("pods_lost", 0, current.pods_recovered_seconds)

    def _ls_protected(self, current: Round) -> CheckResult:
        with self.lock:
            ls = [e for e in self.tracked.values() if e.qos in ("LS", "LSR") and not e.deleting]
        problems = []
        for entry in ls:
            for rel in (entry.pod_dir, *entry.container_dirs):
                with contextlib.suppress(OSError):
                    if (count := nr_throttled(rel)) > 0:
                        problems.append(f"LS {entry.name}: {rel} throttled {count} times")
        asked = [r.name for r in self.node.apiserver.requests
                 if r.verb == "evict" and (r.name.startswith("ls-") or r.name.startswith("churn-ls"))]
        problems += [f"eviction asked for LS pod {name}" for name in asked]
        return CheckResult("ls_protected", len(problems), current.ls_recovered_seconds, tuple(problems))

    def _be_limits(self, current: Round) -> CheckResult:
        """Every BE pod limited again, and none was without its limits longer than the budget while koordlet
        ran (the monitor's figures)."""
        def unlimited() -> list[str]:
            with self.lock:
                be = [e for e in self.tracked.values() if e.limits is not None and not e.deleting]
            found = []
            for entry in be:
                assert entry.limits is not None
                with contextlib.suppress(OSError, ValueError):
                    if not all(all(entry.limits.applied(rel)[1:]) for rel in (entry.pod_dir, *entry.container_dirs)):
                        found.append(entry.name)
            return found

        problems = []
        try:
            wait_until_true(lambda: not unlimited(), RECOVER_SECONDS)
        except TimeoutError:
            problems += [f"{name}: still without its batch limits {RECOVER_SECONDS} s after the restart"
                         for name in unlimited()]
        with self.lock:
            problems = self.be_violations + problems
            worst, self.be_violations, self.be_worst = self.be_worst, [], 0.0
        return CheckResult("be_limits", len(problems), worst, tuple(problems))

    def _half_adjusted(self) -> CheckResult:
        with self.lock:
            be = [e for e in self.tracked.values() if e.limits is not None and not e.deleting]
        problems = []
        for entry in be:
            assert entry.limits is not None
            for rel in entry.container_dirs:
                with contextlib.suppress(OSError):
                    applied = entry.limits.applied(rel)
                    if any(applied) and not all(applied):
                        problems.append(f"{entry.name}: {rel} half-adjusted (shares, quota, memory) = {applied}")
        return CheckResult("half_adjusted", len(problems), None, tuple(problems))

    def _nri(self, current: Round) -> CheckResult:
        socket = self.node.containerd.nri_socket
        problems = []
        try:
            wait_until_true(lambda: live_unix_connections(socket) == 1, RECOVER_SECONDS)
        except TimeoutError:
            problems.append(f"{live_unix_connections(socket)} live NRI connections, not 1")
        recovered = current.nri_recovered_seconds
        if current.two_live_samples > 1:
            problems.append(f"two live NRI connections in {current.two_live_samples} samples")
        registered = self._registrations() - current.registrations_before
        expected = 1 if current.kill.component in ("koordlet", "containerd") else 0
        if registered != expected:
            problems.append(f"{registered} NRI registrations after the restart of {current.kill.component}, "
                            f"expected {expected}")
        return CheckResult("nri_registrations", len(problems), recovered, tuple(problems))


    def _companion(self, current: Round) -> CheckResult:
        problems = []
        if current.slo_while_away != current.slo_before:
            problems.append(f"koordlet's NodeSLO changed while the companion was away: {current.slo_before} -> "
                            f"{current.slo_while_away}")
        key, want = "cpuSuppressThresholdPercent", current.edited_threshold
        since = int(current.restarted_wall)  # updateTime has whole seconds

        def converged() -> bool:
            metric = self.node.apiserver.get("nodemetrics", NODE_NAME) or {}
            stamp = str((metric.get("status") or {}).get("updateTime", ""))
            allocatable = self.node.node_allocatable()
            return (nodeslo_object_threshold(self.node, key) == want
                    and slo_threshold(self.node.view.slo(), key) == want
                    and bool(stamp) and rfc3339_seconds(stamp) >= since
                    and BATCH_CPU in allocatable and BATCH_MEMORY in allocatable)

        try:
            wait_until_true(converged, RECOVER_SECONDS)
            recovered: float | None = time.monotonic() - current.restarted_at
        except TimeoutError:
            recovered = None
            metric = self.node.apiserver.get("nodemetrics", NODE_NAME) or {}
            problems.append(f"the companion's writes did not converge within {RECOVER_SECONDS} s: NodeSLO object "
                            f"{key}={nodeslo_object_threshold(self.node, key)}, koordlet "
                            f"{slo_threshold(self.node.view.slo(), key)}, want {want}; NodeMetric updateTime "
                            f"{(metric.get('status') or {}).get('updateTime')}, want >= {since}; batch resources on "
                            f"the Node: {sorted(k for k in self.node.node_allocatable() if 'batch' in k)}")
        return CheckResult("companion_converged", len(problems), recovered, tuple(problems))


def rfc3339_seconds(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def wait_until_true(check: Callable[[], bool], timeout: float, poll: float = 0.1) -> None:
    """Polls ``check`` until it holds; TimeoutError when it did not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(poll)


def slo_threshold(slo: dict[str, Any], key: str) -> Any:
    return ((slo.get("spec") or {}).get("resourceUsedThresholdWithBE") or {}).get(key)


def nodeslo_object_threshold(node: KubeNode, key: str) -> Any:
    obj = node.apiserver.get("nodeslos", NODE_NAME) or {}
    return slo_threshold(obj, key)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


__all__ = ["BE_LIMIT_BUDGET_SECONDS", "BUSY", "FaultRun", "Round", "be_pod", "hold_memory", "ls_pod"]
