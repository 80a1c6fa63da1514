"""The checks measured after each restart of the fault run (:mod:`tests.e2e.faultrun`); each counts violations
(which must stay 0) and gives the seconds from the restart until it held.

- ``pods_lost``: every pod the kubelet driver created (and the run did not delete) is listed with its
  containers running, and its object is in the apiserver;
- ``ls_protected``: no LS pod throttled (``nr_throttled`` of every LS pod, none of which has a CPU limit it
  could reach) and none asked to be evicted;
- ``be_limits``: no BE pod without its batch limits (CFS quota, memory limit) longer than
  :data:`BE_LIMIT_BUDGET_SECONDS` while koordlet runs (the run's monitor measures it); the worst such time is
  the recovery figure;
- ``half_adjusted``: once koordlet is back, no BE container holds some of its hook results (shares, quota,
  memory) but not all;
- ``nri_registrations`` (NRI node): one live connection on containerd's NRI socket, never two; a new
  registration after koordlet's or containerd's restart, none after the others';
- ``companion_converged`` (companion kills): koordlet keeps its NodeSLO while the companion is away; a
  ConfigMap edit made meanwhile reaches the NodeSLO object and koordlet, and a new NodeMetric and the batch
  resources reach the apiserver, once it is back.

``eviction_storm`` is counted by scenario c itself (tests/e2e/test_faults.py), which knows the episode.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.e2e.faultpods import live_unix_connections, nr_throttled
from tests.e2e.faults import CheckResult
from tests.e2e.node import BATCH_CPU, BATCH_MEMORY, NODE_NAME, KubeNode

if TYPE_CHECKING:
    from tests.e2e.faultrun import FaultRun, Round

RECOVER_SECONDS = 90.0
"""Bound for anything owed after a restart; the figure itself is measured and reported."""
RECONCILE_SECONDS = 2.0
"""koordlet's ``runtimeHooks.reconcileIntervalSeconds`` on the node (tests/e2e/node.py)."""
KUBELET_SYNC_SECONDS = 1.0
"""koordlet's ``kubelet.syncIntervalSeconds``: a pod is known to koordlet at most this long after it runs."""
BE_LIMIT_BUDGET_SECONDS = RECONCILE_SECONDS + KUBELET_SYNC_SECONDS
"""One reconcile interval after koordlet can know the pod."""


def run_checks(run: FaultRun, current: Round) -> list[CheckResult]:
    results = [pods_lost(run, current), ls_protected(run, current), be_limits(run, current), half_adjusted(run)]
    if run.node.variant == "nri":
        results.append(nri_registrations(run, current))
    return results


def missing_pods(run: FaultRun) -> list[str]:
    """Tracked pods not listed with every container running, or whose API object is gone; a pod whose eviction
    the apiserver granted is no longer expected (scenario c counts its evictions)."""
    evicted = {e["name"] for e in run.node.apiserver.evictions if not e["blocked"]}
    with run.lock:
        expected = [name for name, e in run.tracked.items() if not e.deleting and name not in evicted]
    running = {p.name for p in run.node.kubelet.pods()
               if p.containers and all(c.state == "running" for c in p.containers)}
    return sorted(name for name in expected
                  if name not in running or run.node.apiserver.get("pods", name, "default") is None)

def pods_lost(run: FaultRun, current: Round) -> CheckResult:
    try:
        wait_until_true(lambda: not missing_pods(run), RECOVER_SECONDS)
    except TimeoutError:
        gone = missing_pods(run)
        return CheckResult("pods_lost", len(gone), None, tuple(f"pod {n} not running" for n in gone))
    return CheckResult("pods_lost", 0, current.pods_recovered_seconds)

def ls_protected(run: FaultRun, current: Round) -> CheckResult:
    with run.lock:
        ls = [e for e in run.tracked.values() if e.qos in ("LS", "LSR") and not e.deleting]
    problems = []
    for entry in ls:
        for rel in (entry.pod_dir, *entry.container_dirs):
            with contextlib.suppress(OSError):
                if (count := nr_throttled(rel)) > 0:
                    problems.append(f"LS {entry.name}: {rel} throttled {count} times")
    asked = [r.name for r in run.node.apiserver.requests
             if r.verb == "evict" and (r.name.startswith("ls-") or r.name.startswith("churn-ls"))]
    problems += [f"eviction asked for LS pod {name}" for name in asked]
    return CheckResult("ls_protected", len(problems), current.ls_recovered_seconds, tuple(problems))

def be_limits(run: FaultRun, current: Round) -> CheckResult:
    """Every BE pod limited again, and none was without its limits longer than the budget while koordlet
    ran (the monitor's figures)."""
    def unlimited() -> list[str]:
        with run.lock:
            be = [e for e in run.tracked.values() if e.limits is not None and not e.deleting]
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
    with run.lock:
        problems = run.be_violations + problems
        worst, run.be_violations, run.be_worst = run.be_worst, [], 0.0
    return CheckResult("be_limits", len(problems), worst, tuple(problems))

def half_adjusted(run: FaultRun) -> CheckResult:
    with run.lock:
        be = [e for e in run.tracked.values() if e.limits is not None and not e.deleting]
    problems = []
    for entry in be:
        assert entry.limits is not None
        for rel in entry.container_dirs:
            with contextlib.suppress(OSError):
                applied = entry.limits.applied(rel)
                if any(applied) and not all(applied):
                    problems.append(f"{entry.name}: {rel} half-adjusted (shares, quota, memory) = {applied}")
    return CheckResult("half_adjusted", len(problems), None, tuple(problems))

def nri_registrations(run: FaultRun, current: Round) -> CheckResult:
    socket = run.node.containerd.nri_socket
    problems = []
    try:
        wait_until_true(lambda: live_unix_connections(socket) == 1, RECOVER_SECONDS)
    except TimeoutError:
        problems.append(f"{live_unix_connections(socket)} live NRI connections, not 1")
    recovered = current.nri_recovered_seconds
    if current.two_live_samples > 1:
        problems.append(f"two live NRI connections in {current.two_live_samples} samples")
    registered = run.registrations() - current.registrations_before
    expected = 1 if current.kill.component in ("koordlet", "containerd") else 0
    if registered != expected:
        problems.append(f"{registered} NRI registrations after the restart of {current.kill.component}, "
                        f"expected {expected}")
    return CheckResult("nri_registrations", len(problems), recovered, tuple(problems))


def companion_converged(run: FaultRun, current: Round) -> CheckResult:
    """Measured as soon as the companion serves again (:meth:`FaultRun.crash`), whatever the phase does next."""
    problems = []
    if current.slo_while_away != current.slo_before:
        problems.append(f"koordlet's NodeSLO changed while the companion was away: {current.slo_before} -> "
                        f"{current.slo_while_away}")
    key, want = "cpuSuppressThresholdPercent", current.edited_threshold
    since = int(current.restarted_wall)  # updateTime has whole seconds

    def converged() -> bool:
        metric = run.node.apiserver.get("nodemetrics", NODE_NAME) or {}
        stamp = str((metric.get("status") or {}).get("updateTime", ""))
        allocatable = run.node.node_allocatable()
        return (nodeslo_object_threshold(run.node, key) == want
                and slo_threshold(run.node.view.slo(), key) == want
                and bool(stamp) and rfc3339_seconds(stamp) >= since
                and BATCH_CPU in allocatable and BATCH_MEMORY in allocatable)

    try:
        wait_until_true(converged, RECOVER_SECONDS)
        recovered: float | None = time.monotonic() - current.restarted_at
    except TimeoutError:
        recovered = None
        metric = run.node.apiserver.get("nodemetrics", NODE_NAME) or {}
        problems.append(f"the companion's writes did not converge within {RECOVER_SECONDS} s: NodeSLO object "
                        f"{key}={nodeslo_object_threshold(run.node, key)}, koordlet "
                        f"{slo_threshold(run.node.view.slo(), key)}, want {want}; NodeMetric updateTime "
                        f"{(metric.get('status') or {}).get('updateTime')}, want >= {since}; batch resources on "
                        f"the Node: {sorted(k for k in run.node.node_allocatable() if 'batch' in k)}")
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
