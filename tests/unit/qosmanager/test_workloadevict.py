"""Eviction of a standalone host's workloads: a systemd unit is stopped with ``systemctl stop --no-block``
(through an injected runner, never the host's systemctl), a cgroupPath workload's processes get SIGKILL
(an injected kill), other pods go to the configured backend; and memoryevict / cpuevict pick the BE
workloads (class from their ``koordinator.sh/qosClass`` label), never an LS one, and evict a workload
once while it is pending."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.types import WorkloadConfig
from koordlet.errors import ConfigError
from koordlet.metriccache import names
from koordlet.qosmanager.evictor import DryRunBackend, EvictionFailed, build_backend
from koordlet.qosmanager.plugins.cpuevict.strategy import CPUEvict
from koordlet.qosmanager.plugins.memoryevict.strategy import MemoryEvict
from koordlet.qosmanager.workloadevict import SYSTEMCTL_TIMEOUT_SECONDS, WorkloadBackend
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import workload_pods
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import (
    FakeClock,
    FakeInformer,
    RecordingBackend,
    make_node,
    make_options,
    make_pod,
    put_usage,
)

GIB = 1 << 30
WORKLOADS = (WorkloadConfig(name="spark", systemd_unit="spark.service", qos_class="BE", priority=5000),
             WorkloadConfig(name="crunch", cgroup_path="batch/crunch", qos_class="BE", priority=5500),
             WorkloadConfig(name="web", cgroup_path="web", qos_class="LS", priority=9000))


@dataclass
class FakeRunner:
    """``subprocess.run`` stand-in: records argv and timeout, answers with ``returncode``/``stderr`` or raises."""

    returncode: int = 0
    stderr: str = ""
    error: BaseException | None = None
    calls: list[tuple[list[str], float]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], timeout_seconds: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), timeout_seconds))
        if self.error is not None:
            raise self.error
        return subprocess.CompletedProcess(list(argv), self.returncode, "", self.stderr)


@dataclass
class FakeKill:
    killed: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, pid: int, sig: int) -> None:
        self.killed.append((pid, sig))


def pods() -> dict[str, PodMeta]:
    return {p.pod.name: p for p in workload_pods(WORKLOADS)}


def backend(host: FakeHost, runner: FakeRunner, kill: FakeKill, fallback: RecordingBackend | None = None
            ) -> WorkloadBackend:
    return WorkloadBackend(WORKLOADS, host.layout(), fallback or RecordingBackend(), run=runner, kill=kill)


def crunch_tree(host: FakeHost) -> None:
    host.mkdir_cgroup("batch/crunch/worker")
    host.write_cgroup("batch/crunch", "cgroup.procs", "41\n", subsystem="cpu")
    host.write_cgroup("batch/crunch/worker", "cgroup.procs", "42\n43\n", subsystem="cpu")


# ------------------------------------------------------------------------------------------ the backend


def test_a_unit_workload_is_stopped_through_systemd(fake_cgroup_host: FakeHost) -> None:
    runner, kill = FakeRunner(), FakeKill()
    backend(fake_cgroup_host, runner, kill).evict(pods()["spark"], "EvictPodByNodeMemoryUsage", "m")
    assert runner.calls == [(["systemctl", "stop", "--no-block", "--", "spark.service"], SYSTEMCTL_TIMEOUT_SECONDS)]
    assert kill.killed == []


def test_a_cgroup_workload_has_its_processes_killed(fake_cgroup_host: FakeHost) -> None:
    crunch_tree(fake_cgroup_host)
    runner, kill = FakeRunner(), FakeKill()
    backend(fake_cgroup_host, runner, kill).evict(pods()["crunch"], "r", "m")
    assert sorted(kill.killed) == [(41, signal.SIGKILL), (42, signal.SIGKILL), (43, signal.SIGKILL)]
    assert runner.calls == []


def test_an_empty_cgroup_workload_is_not_an_eviction(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup("batch/crunch")
    with pytest.raises(EvictionFailed, match="workload standalone/crunch: no process in its cgroup batch/crunch"):
        backend(fake_cgroup_host, FakeRunner(), FakeKill()).evict(pods()["crunch"], "r", "m")


def test_other_pods_go_to_the_configured_backend(fake_cgroup_host: FakeHost) -> None:
    fallback = RecordingBackend()
    runner, kill = FakeRunner(), FakeKill()
    backend(fake_cgroup_host, runner, kill, fallback).evict(make_pod("be", "BE"), "r", "m")
    assert fallback.evicted == [("default/be", "r")] and runner.calls == [] and kill.killed == []


@pytest.mark.parametrize(
    ("runner", "message"),
    [
        (FakeRunner(error=FileNotFoundError(2, "No such file or directory")),
         r"cannot stop unit spark.service of workload standalone/spark: systemctl not found \(a systemdUnit "
         r"workload needs a host run by systemd\)"),
        (FakeRunner(error=subprocess.TimeoutExpired(["systemctl"], 10.0)),
         r"systemctl stop spark.service of workload standalone/spark: no answer within 10 s"),
        (FakeRunner(returncode=5, stderr="Failed to stop spark.service: Unit spark.service not loaded.\n"),
         r"systemctl stop spark.service of workload standalone/spark exited 5: Failed to stop spark.service: Unit "
         r"spark.service not loaded.$"),
        (FakeRunner(error=PermissionError(13, "Permission denied")),
         r"cannot run systemctl to stop unit spark.service of workload standalone/spark: .*Permission denied"),
    ],
)
def test_systemctl_failures_are_named(fake_cgroup_host: FakeHost, runner: FakeRunner, message: str) -> None:
    with pytest.raises(EvictionFailed, match=message):
        backend(fake_cgroup_host, runner, FakeKill()).evict(pods()["spark"], "r", "m")


def test_a_pod_of_the_standalone_source_not_configured_fails(fake_cgroup_host: FakeHost) -> None:
    stray = workload_pods((WorkloadConfig(name="ghost", cgroup_path="ghost", qos_class="BE"),))[0]
    with pytest.raises(EvictionFailed, match=r"pod standalone/ghost is no configured workload"):
        backend(fake_cgroup_host, FakeRunner(), FakeKill()).evict(stray, "r", "m")


@pytest.mark.parametrize(
    ("workloads", "message"),
    [
        ((WorkloadConfig(name="batch", cgroup_path="batch", qos_class="BE"),
          WorkloadConfig(name="api", cgroup_path="/batch/api/", qos_class="LS")),
         r"workloads\[0\]: BE workload 'batch' \(cgroup batch\) holds the cgroup of LS workload 'api' \(batch/api\)"),
        ((WorkloadConfig(name="web", cgroup_path="system.slice/web.service", qos_class="LSR"),
          WorkloadConfig(name="all", cgroup_path="system.slice", qos_class="BE")),
         r"workloads\[1\]: BE workload 'all' \(cgroup system.slice\) holds the cgroup of LSR workload 'web'"),
        ((WorkloadConfig(name="same", cgroup_path="x", qos_class="BE"),
          WorkloadConfig(name="twin", cgroup_path="x", qos_class="LS")),
         r"workloads\[0\]: BE workload 'same' \(cgroup x\) holds the cgroup of LS workload 'twin' \(x\)"),
        ((WorkloadConfig(name="root", cgroup_path="/", qos_class="BE"),),
         r"workloads\[0\].cgroupPath: BE workload 'root' is the hierarchy root"),
    ],
)
def test_a_be_workload_holding_another_class_is_refused(fake_cgroup_host: FakeHost,
                                                         workloads: tuple[WorkloadConfig, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkloadBackend(workloads, fake_cgroup_host.layout(), RecordingBackend())


def test_nested_be_workloads_and_ls_around_be_are_accepted(fake_cgroup_host: FakeHost) -> None:
    WorkloadBackend((WorkloadConfig(name="outer", cgroup_path="batch", qos_class="BE"),
                     WorkloadConfig(name="inner", cgroup_path="batch/a", qos_class="BE"),
                     WorkloadConfig(name="svc", cgroup_path="svc", qos_class="LS"),
                     WorkloadConfig(name="svc-batch", cgroup_path="svc/batch", qos_class="BE")),
                    fake_cgroup_host.layout(), RecordingBackend())


def test_build_backend_wraps_standalone_workloads_except_for_dry_run(fake_cgroup_host: FakeHost) -> None:
    layout = fake_cgroup_host.layout()
    assert isinstance(build_backend("kill", layout, "", 1.0, workloads=WORKLOADS), WorkloadBackend)
    assert isinstance(build_backend("dry-run", layout, "", 1.0, workloads=WORKLOADS), DryRunBackend)
    assert not isinstance(build_backend("kill", layout, "", 1.0), WorkloadBackend)  # a Kubernetes node
    with pytest.raises(ConfigError, match="workloads"):
        build_backend("kill", layout, "", 1.0, workloads=(
            WorkloadConfig(name="b", cgroup_path="b", qos_class="BE"),
            WorkloadConfig(name="l", cgroup_path="b/l", qos_class="LS")))


# ------------------------------------------------------------------------------------------ strategies


def slo(**threshold: int) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"enable": True,
                                                                                       **threshold}}))


def test_memoryevict_stops_be_workloads_once_and_never_ls(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """16 GiB node at 12.5 GiB = 78% (threshold 70, lower 68): release 1.6 GiB.  ``web`` (LS) uses the most
    but is no candidate; spark (priority 5000, 1 GiB) goes first, then crunch (5500, 2 GiB)."""
    crunch_tree(fake_cgroup_host)
    runner, kill = FakeRunner(), FakeKill()
    clock = FakeClock(1_700_000_000.0)
    informer = FakeInformer(list(pods().values()), make_node(memory_bytes=16 * GIB))
    options = make_options(fake_cgroup_host, tmp_path, informer, clock=clock, gates={"BEMemoryEvict": True},
                           backend=backend(fake_cgroup_host, runner, kill))
    usage = {"standalone-spark": 1 * GIB, "standalone-crunch": 2 * GIB, "standalone-web": 8 * GIB}
    strategy = MemoryEvict(options)
    put_usage(options, node_memory=12.5 * GIB, pod_memory=usage)
    first = strategy.run_once(slo())
    assert first.action == "evict", first.summary
    assert [e["pod"] for e in first.numbers["evicted"]] == ["standalone/spark", "standalone/crunch"]
    assert [argv[-1] for argv, _ in runner.calls] == ["spark.service"]
    assert sorted(pid for pid, _ in kill.killed) == [41, 42, 43]
    # Past the cooldown, still over the threshold (the samples lag): both are pending, nothing is evicted again.
    clock.advance(options.config.memory_evict_cool_time_seconds + 1)
    put_usage(options, node_memory=12.5 * GIB, pod_memory=usage)
    again = strategy.run_once(slo())
    assert again.action == "none" and "covered by 2 pending" in again.summary, again.summary
    assert sorted(again.numbers["pending_pods"]) == ["standalone/crunch", "standalone/spark"]
    assert len(runner.calls) == 1 and len(kill.killed) == 3
    assert all(a.pod != "standalone/web" for a in options.evictor.recent(10))


def test_cpuevict_takes_be_workloads_as_victims(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """BECPUEvict fed BE samples of a starved BE (satisfaction 2/8 = 25% <= 30%, using 95% of its limit):
    the victims are the BE workloads, lowest priority first; workloads request no batch-cpu, so each
    releases nothing of the 2000m and the walk goes through every BE workload, never to ``web``."""
    runner, kill = FakeRunner(), FakeKill()
    crunch_tree(fake_cgroup_host)
    clock = FakeClock(1_700_000_000.0)
    informer = FakeInformer(list(pods().values()), make_node(8))
    options = make_options(fake_cgroup_host, tmp_path, informer, clock=clock, gates={"BECPUEvict": True},
                           backend=backend(fake_cgroup_host, runner, kill))
    strategy = CPUEvict(options)
    clock.advance(options.config.cpu_evict_cool_time_seconds)
    for name, value in ((names.BE_CPU_USAGE, 1.9), (names.BE_CPU_REQUEST, 8.0), (names.BE_CPU_LIMIT, 2.0)):
        options.cache.append(name, (), clock(), value)
    put_usage(options, pod_cpu={"standalone-spark": 0.9, "standalone-crunch": 1.0, "standalone-web": 3.0})
    decision = strategy.run_once(slo(cpuEvictBESatisfactionLowerPercent=30, cpuEvictBESatisfactionUpperPercent=50))
    assert decision.action == "evict", decision.summary
    assert [e["pod"] for e in decision.numbers["evicted"]] == ["standalone/spark", "standalone/crunch"]
    assert [argv[-1] for argv, _ in runner.calls] == ["spark.service"] and len(kill.killed) == 3

