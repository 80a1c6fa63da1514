"""The fault matrix: on each runtime variant's node, koordlet, koord-companion, koord-runtime-proxy and containerd
are SIGKILLed one at a time at seeded random moments of pod churn, scenario b (an LS load step) and scenario c
(memory pressure), restarted by their supervisor, and the node is checked after each restart
(tests/e2e/faultrun.py says what each check counts).

``KOORDLET_FAULT_KILLS`` kills per component over the run (``tox -e faults``: 20; ``tox -e tests``: 4);
``KOORDLET_FAULT_SEED`` replays a run's plan.  The matrix is printed at the end and written to the e2e report.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.e2e.faultchecks import RECOVER_SECONDS
from tests.e2e.faultpods import be_pod, ls_pod
from tests.e2e.faultrun import FaultRun, Round
from tests.e2e.faults import CheckResult, Kill, Matrix, kill_plan, kills_of_variant, kills_per_component, per_component
from tests.e2e.harness import Report, cfs_quota, wait_for
from tests.e2e.node import BUSY, KubeNode, MiB, hold_memory

CHURN_PODS = 3
"""Churn pods alive at once: each new one beyond this deletes the oldest."""
LS_LOAD_CORES = 0.4


def churn(run: FaultRun, kill: Kill) -> Round:
    """Pods created and deleted back to back (BE and LS in turn) while the component dies."""
    stop, names, progress, failure = threading.Event(), [], [0], []

    def loop() -> None:
        n = 0
        try:
            while not stop.is_set():
                n += 1
                kind = "be" if n % 2 else "ls"
                name = f"churn-{kind}-{kill.index}-{n}"
                run.create(be_pod(name) if kind == "be" else ls_pod(name))
                names.append(name)
                progress[0] += 1
                if len(names) > CHURN_PODS:
                    run.delete(names.pop(0))
                    progress[0] += 1
        except BaseException as exc:  # reported by the phase, which joins this thread
            failure.append(exc)

    worker = threading.Thread(target=loop, name=f"churn-{kill.index}", daemon=True)
    worker.start()
    time.sleep(kill.delay)  # the kill's random moment
    current = run.crash(kill)
    done = progress[0]
    wait_for("pod churn going on after the restart", lambda: progress[0] > done or failure, RECOVER_SECONDS,
             run.node.procs)
    stop.set()
    worker.join(2 * RECOVER_SECONDS)
    if failure:
        raise AssertionError(f"pod churn failed after the kill of {kill.component}: {failure[0]}") from failure[0]
    assert not worker.is_alive(), "pod churn did not stop"
    run.check(current)
    for name in names:
        run.delete(name)
    return current


def _suppress_cut(run: FaultRun, since: float) -> dict[str, Any] | None:
    for decision in run.node.view.decisions("cpusuppress"):
        numbers = decision["numbers"]
        if (decision["at"] > since and decision["action"] == "suppress" and "quota_us" in numbers
                and numbers.get("ls_used_cores", 0) >= LS_LOAD_CORES):
            return decision
    return None


def _kernel_holds_a_loaded_round(run: FaultRun, since: float) -> bool:
    quota = cfs_quota(run.node.be_dir)[0]
    return quota > 0 and any(
        d["at"] >= since and d["numbers"].get("quota_us") == quota and d["numbers"].get("ls_used_cores", 0)
        >= LS_LOAD_CORES for d in run.node.view.decisions("cpusuppress"))


def load_step(run: FaultRun, kill: Kill) -> Round:
    """Scenario b: an LS pod starts burning a core; the component dies during the step; once it is back, a
    suppress round that sees the LS load must cut BE and the kernel must hold BE to that quota."""
    node, name = run.node, f"ls-load-{kill.index}"
    began = time.time()
    run.create(ls_pod(name, BUSY))
    time.sleep(kill.delay)  # the kill's random moment
    current = run.crash(kill)
    since = current.restarted_wall if kill.component == "koordlet" else began
    cut = wait_for("a suppress round that sees the LS load", lambda: _suppress_cut(run, since), RECOVER_SECONDS,
                   node.procs)
    # Later rounds may move the quota with the system's usage (a shared host), so the kernel must hold what
    # one of the rounds since the cut decided, not the cut's figure for ever.
    wait_for(f"BE's quota in the kernel set by a round that sees the LS load (the first cut "
             f"{cut['numbers']['quota_us']} us)", lambda: _kernel_holds_a_loaded_round(run, cut["at"]),
             RECOVER_SECONDS, node.procs)
    current.ls_recovered_seconds = time.monotonic() - current.restarted_at
    run.check(current)
    run.delete(name)
    return current


def _memory(run: FaultRun) -> dict[str, Any] | None:
    decision = run.node.view.last_decision("memoryevict")
    return decision if decision is not None and "usage_percent" in decision["numbers"] else None


def memory_pressure(run: FaultRun, kill: Kill) -> Round:
    """Scenario c: a BE pod holds a fifth of kubepods' memory, the threshold drops under the usage koordlet
    measures, and the component dies before or after the eviction; one eviction, of that pod, must follow."""
    node, name = run.node, f"be-mem-{kill.index}"
    big = node.kubepods_memory_limit // 5 // MiB * MiB
    phase_began = time.time()
    before = wait_for("a memoryevict round", lambda: (d := _memory(run)) and d["at"] > phase_began and d,
                      RECOVER_SECONDS, node.procs)
    run.create(be_pod(name, hold_memory(big), memory_limit_bytes=big + 128 * MiB, priority=4000))
    # What the pod holds on top of what koordlet measured before it (page cache and the shell aside).
    want = before["numbers"]["used_bytes"] + big * 0.95
    try:
        measured = wait_for("koordlet measuring the BE pod's memory",
                            lambda: (d := _memory(run)) and d["at"] > before["at"] and d["numbers"]["used_bytes"]
                            >= want and d, RECOVER_SECONDS, node.procs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlast memoryevict decision: {node.view.last_decision('memoryevict')}; "
                             f"{name} holds {big} bytes") from None
    requests_before, evictions_before = len(node.apiserver.requests), len(node.apiserver.evictions)
    run.set_thresholds(memoryEvictThresholdPercent=max(int(measured["numbers"]["usage_percent"]) - 4, 3))
    time.sleep(kill.delay)  # the kill's random moment
    current = run.crash(kill)
    wait_for(f"{name} evicted through the API", lambda: node.apiserver.get("pods", name, "default") is None,
             RECOVER_SECONDS, node.procs)
    evicted_at = time.time()
    with run.lock:
        run.tracked.pop(name, None)
    wait_for(f"{name} removed by the kubelet", lambda: name in node.deleted_at, RECOVER_SECONDS, node.procs)
    run.reset_thresholds("memoryEvictThresholdPercent")
    # The pod's last sample may be counted until the kubelet's pod list drops it: the episode ends when
    # koordlet no longer counts it, so the next one's baseline does not either.
    released = measured["numbers"]["used_bytes"] - big * 0.9
    wait_for(f"a memoryevict round below the threshold that no longer counts {name}'s memory",
             lambda: (d := _memory(run)) and d["at"] > evicted_at and d["action"] == "none"
             and d["numbers"]["used_bytes"] <= released, RECOVER_SECONDS, node.procs)
    asked = [r.name for r in node.apiserver.requests[requests_before:] if r.verb == "evict"]
    granted = [e["name"] for e in node.apiserver.evictions[evictions_before:] if not e["blocked"]]
    problems = []
    if granted != [name]:
        problems.append(f"evictions granted in the episode: {granted}, expected [{name}]")
    if asked.count(name) > 1:
        problems.append(f"eviction asked {asked.count(name) - 1} more time(s) for {name}, already being evicted")
    problems += [f"eviction asked for {other}" for other in asked if other != name]
    current.extra.append(CheckResult("eviction_storm", len(problems), None, tuple(problems)))
    run.check(current)
    return current


PHASES = {"churn": churn, "b": load_step, "c": memory_pressure}


def test_components_die_one_at_a_time(node: KubeNode, e2e_report: Report, fault_matrix: Matrix,
                                      fault_seed: str) -> None:
    plan = kill_plan(fault_seed, node.variant, kills_of_variant(kills_per_component(), node.variant))
    run = FaultRun(node)
    run.create(ls_pod("ls-web"))
    run.create(be_pod("be-burn", BUSY, cpu_limit=1000, memory_limit_bytes=256 * MiB))
    run.start()
    started = time.monotonic()
    try:
        for kill in plan:
            began = time.monotonic()
            PHASES[kill.phase](run, kill)
            run.timeline[-1]["phase_seconds"] = round(time.monotonic() - began, 1)
            for proc in node.procs:
                proc.check_alive()
    finally:
        run.stop()
        fault_matrix.merge(run.matrix)
        e2e_report.record("faults", node.variant, seed=fault_seed, kills=per_component(plan),
                          run_seconds=round(time.monotonic() - started, 1), matrix=run.matrix.as_dict(),
                          timeline=run.timeline, retried_operations=len(run.errors),
                          retried_samples=run.errors[:20], evicted_pod_teardowns_retried=len(node.teardown_errors))
    print(f"\nfault matrix of the {node.variant} node (seed {fault_seed}):\n{run.matrix.table()}")
    assert run.matrix.violations == 0, "\n".join(run.matrix.problems())
    assert len(run.timeline) == len(plan)


@pytest.fixture(autouse=True)
def _components_alive(node: KubeNode) -> Any:
    yield
    node.check_alive()
