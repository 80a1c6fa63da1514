"""The reconciler with the daemon's real hooks and a real resource executor writing into a fake cgroup v1
tree, fed pods built as the states informer builds them (kubelet JSON -> ``kubelet_pod_meta``)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS
from koordlet.apis.pod import pod_from_json
from koordlet.daemon.agent import cgroup_incarnation
from koordlet.resourceexecutor.executor import ResourceExecutor
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import FailurePolicy, HookRunner
from koordlet.runtimehooks.hooks import build_hooks
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.statesinformer.framework import PodMeta, PodsCallback
from koordlet.statesinformer.informer import kubelet_pod_meta
from koordlet.system.kubepaths import CgroupDriver
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

GATES = {"BatchResource": True, "CPUSetAllocator": True, "OOMScoreAdj": True}
FORCE_UPDATE_SECONDS = 60.0
MI = 1 << 20
LOGGER = "koordlet.runtimehooks.reconciler"

BE_POD_DIR = "kubepods/besteffort/podbe-1"
BE_DIR = f"{BE_POD_DIR}/be0c1"
HALF_POD_DIR = "kubepods/besteffort/podhalf-1"
LS_POD_DIR = "kubepods/burstable/podls-1"
LS_DIR = f"{LS_POD_DIR}/ls0c1"
V1_UNLIMITED = "9223372036854771712"


# --- pods as the states informer builds them ------------------------------------------------------------


def kubelet_pod(uid: str, name: str, *, labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None, containers: Sequence[dict[str, Any]] = (),
                ids: dict[str, str] | None = None, phase: str = "Running") -> dict[str, Any]:
    """A v1.Pod as kubelet's ``/pods`` lists it; ``ids`` maps container names to their status ids."""
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "default", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"containers": list(containers)},
        "status": {"phase": phase,
                   "containerStatuses": [{"name": n, "containerID": i} for n, i in (ids or {}).items()]},
    }


def meta(obj: dict[str, Any]) -> PodMeta:
    return kubelet_pod_meta(pod_from_json(obj), CgroupDriver.CGROUPFS)


def be_pod(uid: str = "be-1", name: str = "be", annotations: dict[str, str] | None = None,
           phase: str = "Running", cid: str = "be0c1") -> PodMeta:
    """BestEffort, batch resources in the container's requests/limits (the kubelet's full spec)."""
    resources = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "128Mi"},
                 "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "256Mi"}}
    return meta(kubelet_pod(uid, name, labels={LABEL_QOS: "BE"}, annotations=annotations, phase=phase,
                            containers=[{"name": "main", "resources": resources}],
                            ids={"main": f"containerd://{cid}"}))


def ls_pod(cpuset: str = "2-3", uid: str = "ls-1", name: str = "ls") -> PodMeta:
    """Burstable LS pod bound by the scheduler through the resource-status annotation."""
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    return meta(kubelet_pod(uid, name, labels={LABEL_QOS: "LS"},
                            annotations={ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": cpuset})},
                            containers=[{"name": "main", "resources": resources}],
                            ids={"main": "containerd://ls0c1"}))


def partly_started_pod() -> PodMeta:
    """Two containers, one not started yet (no id in its status)."""
    resources = {"requests": {"kubernetes.io/batch-cpu": "200"}, "limits": {"kubernetes.io/batch-cpu": "400"}}
    return meta(kubelet_pod("half-1", "half", labels={LABEL_QOS: "BE"},
                            containers=[{"name": "up", "resources": resources},
                                        {"name": "pending", "resources": resources}],
                            ids={"up": "containerd://half0up"}))


def dirless_pod() -> PodMeta:
    """A uid no cgroup directory can be named after: the informer leaves its cgroup_dir empty."""
    resources = {"requests": {"kubernetes.io/batch-cpu": "200"}, "limits": {"kubernetes.io/batch-cpu": "400"}}
    found = meta(kubelet_pod("no/dir", "nodir", labels={LABEL_QOS: "BE"},
                             containers=[{"name": "main", "resources": resources}],
                             ids={"main": "containerd://nodir0c1"}))
    assert found.cgroup_dir == "" and found.containers[0].cgroup_dir == ""
    return found


# --- the real executor on a fake tree -------------------------------------------------------------------


@dataclass
class Recorder:
    """The executor's ``apply`` with every result kept; waiters are woken after each batch."""

    executor: ResourceExecutor
    results: list[Result] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, updates: list[CgroupUpdate]) -> list[Result]:
        results = self.executor.apply(updates)
        with self.cond:
            self.results += results
            self.cond.notify_all()
        return results

    def mark(self) -> int:
        with self.cond:
            return len(self.results)

    def since(self, mark: int) -> list[Result]:
        with self.cond:
            return self.results[mark:]

    def wait_for(self, predicate: Callable[[list[Result]], bool], timeout: float = 5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.results), timeout)


@dataclass
class Env:
    host: FakeHost
    clock: FakeClock
    audit: MemoryAudit
    recorder: Recorder

    def reconciler(self, policy: FailurePolicy = FailurePolicy.IGNORE, informer: Any = None,
                   interval_seconds: float = 10.0, *, incarnations: bool = False) -> Reconciler:
        runner = HookRunner(build_hooks(HookDeps(gates=GATES)), policy=policy)
        layout = self.host.layout()
        return Reconciler(runner, Applier(self.recorder), informer or FakeInformer([]),
                          interval_seconds=interval_seconds,
                          incarnation=(lambda rel: cgroup_incarnation(layout, rel)) if incarnations else None,
                          forget=self.recorder.executor.forget_cgroup if incarnations else None)

    def make_dirs(self, pods: Iterable[PodMeta]) -> None:
        for pod in pods:
            if pod.cgroup_dir:
                self.host.mkdir_cgroup(pod.cgroup_dir)
            for container in pod.containers:
                if container.cgroup_dir:
                    self.host.mkdir_cgroup(container.cgroup_dir)

    def read(self, rel_dir: str, file: str) -> str:
        return self.host.read_cgroup(rel_dir, file).strip()

    def mtimes(self) -> dict[str, int]:
        root = self.host.cgroup_root
        return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def env(fake_host: FakeHost) -> Env:
    clock, audit = FakeClock(), MemoryAudit()
    executor = ResourceExecutor(fake_host.layout(), clock, audit, force_update_seconds=FORCE_UPDATE_SECONDS)
    return Env(fake_host, clock, audit, Recorder(executor))


class FakeInformer:
    """The slice of the states informer the reconciler uses: ``pods`` and ``subscribe``."""

    def __init__(self, pods: Sequence[PodMeta]) -> None:
        self._pods = tuple(pods)
        self._callbacks: list[PodsCallback] = []

    def pods(self) -> Sequence[PodMeta]:
        return self._pods

    def subscribe(self, callback: PodsCallback) -> None:
        self._callbacks.append(callback)

    def set_pods(self, pods: Sequence[PodMeta]) -> None:
        self._pods = tuple(pods)
        for callback in self._callbacks:
            callback(self._pods)

    def node(self) -> Any:
        raise NotImplementedError

    def reservation(self) -> Any:
        raise NotImplementedError


def written(results: Iterable[Result]) -> list[tuple[str, str, str | None]]:
    return [(r.update.rel_dir, r.update.key, r.text) for r in results if r.outcome is Outcome.WRITTEN]


def reconcile_records(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == message]


# --- one round ------------------------------------------------------------------------------------------


def test_round_writes_the_hooks_values_into_the_cgroups(env: Env) -> None:
    terminated = be_pod(uid="gone-1", name="gone", phase="Succeeded", cid="gone0c1")
    half = partly_started_pod()
    pods = [be_pod(), ls_pod(), terminated, dirless_pod(), half]
    env.make_dirs(pods)
    env.host.mkdir_cgroup("kubepods/besteffort/podhalf-1/pending0c")  # a directory nobody may touch

    env.reconciler().reconcile(pods)

    assert env.read(BE_DIR, "cpu.shares") == "512"  # 500m batch-cpu request x 1024 / 1000
    assert env.read(BE_DIR, "cpu.cfs_quota_us") == "100000"  # 1000m batch-cpu limit at the 100 ms period
    assert env.read(BE_DIR, "memory.limit_in_bytes") == str(256 * MI)
    assert env.read(BE_DIR, "cpuset.cpus") == ""  # BE inherits its parent's cpuset: left alone
    assert env.read(LS_DIR, "cpuset.cpus") == "2-3"
    assert env.read(LS_DIR, "cpu.cfs_quota_us") == "-1"  # a bound pod must not be throttled
    assert env.read(LS_DIR, "cpu.shares") == "1024"  # kubelet's business, untouched
    assert env.read(LS_DIR, "memory.limit_in_bytes") == V1_UNLIMITED
    assert env.read(LS_POD_DIR, "cpu.cfs_quota_us") == "-1"  # and neither must its pod cgroup
    half_dir = half.containers[0].cgroup_dir
    assert env.read(half_dir, "cpu.shares") == str(200 * 1024 // 1000)
    assert env.read(half_dir, "cpu.cfs_quota_us") == "40000"
    # The BE pods' own cgroups: the sums over their containers (the pending one counts: it is in the spec).
    assert env.read(BE_POD_DIR, "cpu.shares") == "512"
    assert env.read(BE_POD_DIR, "cpu.cfs_quota_us") == "100000"
    assert env.read(BE_POD_DIR, "memory.limit_in_bytes") == str(256 * MI)
    assert env.read(HALF_POD_DIR, "cpu.shares") == str(400 * 1024 // 1000)
    assert env.read(HALF_POD_DIR, "cpu.cfs_quota_us") == "80000"

    # Only the pods and containers running with known cgroups were written, and every write is audited.
    assert {d for d, _, _ in written(env.recorder.results)} == {BE_POD_DIR, BE_DIR, LS_POD_DIR, LS_DIR, HALF_POD_DIR,
                                                                half_dir}
    assert sorted(written(env.recorder.results)) == sorted([
        (BE_POD_DIR, "cpu_shares", "512"), (BE_POD_DIR, "cpu_cfs_quota", "100000"),
        (BE_POD_DIR, "memory_limit", str(256 * MI)),
        (BE_DIR, "cpu_shares", "512"), (BE_DIR, "cpu_cfs_quota", "100000"),
        (BE_DIR, "memory_limit", str(256 * MI)),
        (LS_POD_DIR, "cpu_cfs_quota", "-1"), (LS_DIR, "cpu_cfs_quota", "-1"), (LS_DIR, "cpuset_cpus", "2-3"),
        # No batch-memory limit on its containers: the pod's memory is unlimited (-1), as upstream.
        (HALF_POD_DIR, "cpu_shares", "409"), (HALF_POD_DIR, "cpu_cfs_quota", "80000"),
        (HALF_POD_DIR, "memory_limit", "-1"),
        (half_dir, "cpu_shares", "204"), (half_dir, "cpu_cfs_quota", "40000")])
    assert len(env.audit.entries) == 14
    assert {e.owner for e in env.audit.entries} == {"runtimehooks/batchresource", "runtimehooks/cpuset"}
    assert env.read(terminated.containers[0].cgroup_dir, "cpu.shares") == "1024"
    assert env.read("kubepods/besteffort/podhalf-1/pending0c", "cpu.shares") == "1024"


def test_second_round_writes_nothing(env: Env) -> None:
    pods = [be_pod(), ls_pod()]
    env.make_dirs(pods)
    reconciler = env.reconciler()
    reconciler.reconcile(pods)
    audited, mtimes = len(env.audit.entries), env.mtimes()
    mark = env.recorder.mark()

    env.clock.advance(FORCE_UPDATE_SECONDS / 2)
    reconciler.reconcile(pods)

    again = env.recorder.since(mark)
    assert len(again) == 9  # BE pod: 3 values; its container: 3; LS pod: 1; LS container: 2
    assert {r.outcome for r in again} == {Outcome.SKIPPED_UNCHANGED}
    assert len(env.audit.entries) == audited
    assert env.mtimes() == mtimes
    assert reconciler.rounds == 2


def test_value_changed_behind_our_back_is_repaired_after_force_update(env: Env) -> None:
    pods = [be_pod()]
    env.make_dirs(pods)
    reconciler = env.reconciler()
    reconciler.reconcile(pods)
    env.host.write_cgroup(BE_DIR, "cpu.shares", "999\n")  # someone else (an operator, a runtime update)

    env.clock.advance(FORCE_UPDATE_SECONDS - 1)
    reconciler.reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "999"  # still inside the skip window: trusted

    env.clock.advance(2)
    mark = env.recorder.mark()
    reconciler.reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "512"
    repaired = [e for e in env.audit.entries if e.path.endswith(f"{BE_DIR}/cpu.shares")]
    assert [(e.old, e.new) for e in repaired] == [("1024", "512"), ("999", "512")]
    # Everything else was read back, still as written: verified, not written again.
    since = env.recorder.since(mark)
    assert {r.outcome for r in since if r.path.endswith(f"{BE_DIR}/cpu.shares")} == {Outcome.WRITTEN}
    assert {r.outcome for r in since if not r.path.endswith(f"{BE_DIR}/cpu.shares")} <= {Outcome.SKIPPED_UNCHANGED}


def test_a_changed_pod_gets_its_new_values(env: Env) -> None:
    env.make_dirs([ls_pod()])
    reconciler = env.reconciler()
    reconciler.reconcile([ls_pod("2-3")])
    reconciler.reconcile([ls_pod("0-1")])  # the scheduler rebound it
    assert env.read(LS_DIR, "cpuset.cpus") == "0-1"


def remake(env: Env, pod: PodMeta) -> None:
    """The pod's cgroups removed and made again under the same names, with the runtime's defaults."""
    for container in pod.containers:
        env.host.rmdir_cgroup(container.cgroup_dir)
    env.host.rmdir_cgroup(pod.cgroup_dir)
    env.make_dirs([pod])
    assert env.read(BE_DIR, "cpu.shares") == "1024"


def test_a_pod_cgroup_made_again_gets_its_values_within_the_force_update_window(env: Env) -> None:
    pods = [be_pod()]
    env.make_dirs(pods)
    reconciler = env.reconciler(incarnations=True)
    reconciler.reconcile(pods)
    remake(env, pods[0])
    env.clock.advance(1)  # far inside the executor's force-update window
    reconciler.reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "512"
    assert env.read(BE_POD_DIR, "memory.limit_in_bytes") == str(256 * MI)


def test_values_written_before_the_reconciler_saw_the_pod_are_not_trusted(env: Env) -> None:
    # NRI wrote the pod's values at sandbox creation, then kubelet retried the pod: same directory names,
    # new directories.  The reconciler's first sight of the pod must not skip them as already written.
    pods = [be_pod()]
    env.make_dirs(pods)
    env.reconciler().reconcile(pods)  # the writes of another transport, through the same executor
    remake(env, pods[0])
    env.reconciler(incarnations=True).reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "512"


def test_without_incarnations_a_remade_cgroup_waits_for_the_force_update(env: Env) -> None:
    # The behaviour the incarnation check exists for: the executor trusts its cache for its window.
    pods = [be_pod()]
    env.make_dirs(pods)
    reconciler = env.reconciler()
    reconciler.reconcile(pods)
    remake(env, pods[0])
    env.clock.advance(1)
    reconciler.reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "1024"


# --- failures -------------------------------------------------------------------------------------------


def broken_be_pod() -> PodMeta:
    """Batch resources fine (batchresource succeeds), resource-status garbage (cpuset, after it, fails)."""
    return be_pod(annotations={ANNOTATION_RESOURCE_STATUS: "{not json"})


def test_hook_error_is_logged_once_per_streak_and_recovery_is_logged(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    env.make_dirs([be_pod()])
    reconciler = env.reconciler()
    for _ in range(3):
        reconciler.reconcile([broken_be_pod()])
        env.clock.advance(1)
    failed = reconcile_records(caplog, "runtime hooks reconcile failed")
    assert len(failed) == 1
    assert failed[0].levelno == logging.WARNING
    assert failed[0].pod == "default/be"  # type: ignore[attr-defined]
    assert "cpuset" in failed[0].error and ANNOTATION_RESOURCE_STATUS in failed[0].error  # type: ignore[attr-defined]
    # Policy Ignore: the hooks that worked were applied all the same.
    assert env.read(BE_DIR, "cpu.shares") == "512"

    reconciler.reconcile([be_pod()])
    reconciler.reconcile([be_pod()])
    recovered = reconcile_records(caplog, "runtime hooks reconcile recovered")
    assert len(recovered) == 1 and recovered[0].levelno == logging.INFO

    reconciler.reconcile([broken_be_pod()])  # a new streak is logged again
    assert len(reconcile_records(caplog, "runtime hooks reconcile failed")) == 2


def test_a_failure_streak_logs_one_warning_in_all(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="koordlet")
    env.make_dirs([be_pod()])
    reconciler = env.reconciler()
    for _ in range(3):
        reconciler.reconcile([broken_be_pod()])
    warnings = [r for r in caplog.records if r.name.startswith("koordlet") and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == ["runtime hooks reconcile failed"]


def test_a_pod_that_went_away_ends_its_streak(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    env.make_dirs([be_pod()])
    reconciler = env.reconciler()
    reconciler.reconcile([broken_be_pod()])
    reconciler.reconcile([])
    reconciler.reconcile([broken_be_pod()])  # back, failing: a new streak
    assert len(reconcile_records(caplog, "runtime hooks reconcile failed")) == 2
    assert not reconcile_records(caplog, "runtime hooks reconcile recovered")


def test_fail_policy_writes_nothing_for_the_failing_stage(env: Env) -> None:
    pods = [broken_be_pod(), ls_pod()]
    env.make_dirs(pods)
    env.reconciler(FailurePolicy.FAIL).reconcile(pods)
    assert env.read(BE_DIR, "cpu.shares") == "1024"
    assert env.read(BE_DIR, "cpu.cfs_quota_us") == "-1"
    assert env.read(BE_DIR, "memory.limit_in_bytes") == V1_UNLIMITED
    assert not [r for r in env.recorder.results if r.update.rel_dir == BE_DIR]
    # The pod stage fails too: cpuset reads the same garbage annotation there.
    assert not [r for r in env.recorder.results if r.update.rel_dir == BE_POD_DIR]
    # The other pods are not held hostage by it.
    assert env.read(LS_DIR, "cpuset.cpus") == "2-3"


def test_a_vanished_cgroup_is_a_race_not_a_failure(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    pods = [be_pod()]
    env.host.mkdir_cgroup(pods[0].cgroup_dir)  # the container's directory is already gone (or not yet there)
    env.reconciler().reconcile(pods)
    assert {r.outcome for r in env.recorder.results if r.update.rel_dir == BE_DIR} == {Outcome.GONE}
    assert {r.outcome for r in env.recorder.results if r.update.rel_dir == BE_POD_DIR} == {Outcome.WRITTEN}
    assert not reconcile_records(caplog, "runtime hooks reconcile failed")


# --- the loop -------------------------------------------------------------------------------------------


def reconciler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == Reconciler.name]


def test_pod_changes_wake_the_loop_and_stop_is_prompt(env: Env, failures: ComponentFailures) -> None:
    first, second = be_pod(), ls_pod()
    env.make_dirs([first, second])
    informer = FakeInformer([first])
    reconciler = env.reconciler(informer=informer, interval_seconds=3600)
    reconciler.start(failures.callback("runtimehooks-reconciler"))
    try:
        assert env.recorder.wait_for(lambda rs: (BE_DIR, "cpu_shares", "512") in written(rs))
        assert reconciler.rounds >= 1

        informer.set_pods([first, second])  # the states informer's callback, from its thread
        assert env.recorder.wait_for(lambda rs: (LS_DIR, "cpuset_cpus", "2-3") in written(rs))
        assert env.read(LS_DIR, "cpuset.cpus") == "2-3"
    finally:
        started = time.monotonic()
        reconciler.stop(5.0)
        elapsed = time.monotonic() - started
    assert elapsed < 1.0  # woken out of its hour-long wait, not joined on timeout
    assert not reconciler_threads()


def test_a_bug_in_a_round_reaches_on_failure(env: Env, failures: ComponentFailures) -> None:
    class Broken(FakeInformer):
        def pods(self) -> Sequence[PodMeta]:
            return [None]  # type: ignore[list-item]  # a bug: the loop must report it, not die silently

    reconciler = env.reconciler(informer=Broken([]), interval_seconds=3600)
    reconciler.start(failures.callback("runtimehooks-reconciler"))
    try:
        error = failures.wait_for("runtimehooks-reconciler")
    finally:
        reconciler.stop(5.0)
    assert isinstance(error, AttributeError)  # and nothing else reported: the fixture fails on any other
    assert not reconciler_threads()


def test_running_containers_get_their_oom_score_adj(env: Env) -> None:
    pod = be_pod(annotations={"koordinator.sh/oom-score-adj": "-300"})
    env.make_dirs([pod])
    calls: list[tuple[str, int, str]] = []

    def oom_score(rel_dir: str, value: int, owner: str) -> list[str]:
        calls.append((rel_dir, value, owner))
        return ["pid 42: Permission denied"]

    runner = HookRunner(build_hooks(HookDeps(gates=GATES)))
    reconciler = Reconciler(runner, Applier(env.recorder), FakeInformer([pod]), oom_score=oom_score)
    reconciler.reconcile([pod])
    assert calls == [(BE_DIR, -300, "runtimehooks/oomscoreadj")]
    reconciler.reconcile([be_pod()])  # annotation removed: nothing more to set
    assert len(calls) == 1
