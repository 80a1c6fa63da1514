"""The debug API server over fakes: every endpoint's shape, errors as JSON (400 naming the parameter,
404 naming the pod), the socket's mode and path handling, the log-level action, and two clients at once."""

from __future__ import annotations

import logging
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.debugapi import contract
from koordlet.debugapi.server import DebugServer, DebugSources, HostCgroups, decode_written
from koordlet.errors import KoordletError
from koordlet.metriccache import names
from koordlet.metriccache.cache import Labels, pod_labels
from koordlet.qosmanager.evictor import DryRunBackend, EvictionFailed, Evictions
from koordlet.qosmanager.framework import Decision, DecisionLog
from koordlet.resourceexecutor import CgroupUpdate, ResourceExecutor
from koordlet.runtimehooks.framework import Hook, HookCallRecorder, HookContext, HookRequest, HookRunner, Stage
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from koordlet.system.probes import ProbeResult
from koordlet.system.resources import CPU_CFS_PERIOD, CPU_CFS_QUOTA, CPU_IDLE, CPU_SHARES, CPUSET_CPUS, MEMORY_LIMIT
from tests.fixtures.debugclient import get, post
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import make_pod
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

WEB = make_pod("web", "LS", uid="uid-web", priority=9000)
BATCH = make_pod("batch", "BE", uid="uid-batch", containers=("a", "b"))


@dataclass
class FakeCgroups:
    current_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    desired_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    file_map: dict[str, dict[str, str]] = field(default_factory=dict)
    intended_values: dict[str, dict[str, Any]] = field(default_factory=dict)

    def intended(self, rel_dir: str) -> dict[str, Any]:
        return dict(self.intended_values.get(rel_dir, {}))

    def current(self, rel_dir: str) -> dict[str, Any]:
        return dict(self.current_values.get(rel_dir, {}))

    def desired(self, rel_dir: str) -> dict[str, Any]:
        return dict(self.desired_values.get(rel_dir, {}))

    def files(self, rel_dir: str) -> dict[str, str]:
        return dict(self.file_map.get(rel_dir, {}))


@dataclass
class FakeStrategy:
    name: str
    on: bool = True
    every: float = 1.0

    def enabled(self, slo: NodeSLOSpec) -> bool:
        return self.on

    def interval(self) -> float:
        return self.every


def _add_cpu(ctx: HookContext) -> None:
    ctx.set("cpu_shares", 512)
    ctx.write(CPU_IDLE, 1)


def _nothing(ctx: HookContext) -> None:
    pass


def _broken(ctx: HookContext) -> None:
    raise KoordletError("no luck")


@dataclass
class World:
    pods: list[PodMeta]
    cgroups: FakeCgroups
    means: dict[tuple[str, Labels], float]
    windows: list[float]
    holder: NodeSLOHolder
    decisions: DecisionLog
    recorder: HookCallRecorder
    runner: HookRunner
    evictions: Evictions
    logger: logging.Logger

    def mean(self, name: str, labels: Labels, seconds: float) -> float | None:
        self.windows.append(seconds)
        return self.means.get((name, labels))


@pytest.fixture
def world() -> World:
    recorder = HookCallRecorder(size=8, clock=lambda: 1234.5)
    runner = HookRunner([Hook("cpu", "adds cpu", frozenset({Stage.PRE_CREATE_CONTAINER}), _add_cpu),
                         Hook("noop", "nothing", frozenset({Stage.PRE_RUN_POD_SANDBOX}), _nothing)],
                        recorder=recorder)
    logger = logging.getLogger("koordlet-test-debugapi-root")
    logger.setLevel(logging.INFO)
    return World(pods=[WEB, BATCH], cgroups=FakeCgroups(), means={}, windows=[], holder=NodeSLOHolder(),
                 decisions=DecisionLog(), recorder=recorder, runner=runner,
                 evictions=Evictions(DryRunBackend(), lambda: 99.0), logger=logger)


def sources_of(w: World, **overrides: Any) -> DebugSources:
    strategies = [FakeStrategy("cpusuppress"), FakeStrategy("memoryevict", on=False, every=5.0)]
    sources = DebugSources(
        version="1.2.3", node="node-a", mode="standalone", started_at=100.0,
        components=lambda: [("metriccache", True), ("qosmanager", False)],
        feature_gates={"BECPUSuppress": True, "CPIDetect": False},
        probes=lambda: [ProbeResult("psi", True, "/proc/pressure/cpu readable"), ProbeResult("perf", False, "EACCES")],
        companion=lambda: None, pods=lambda: list(w.pods), cgroups=w.cgroups, mean=w.mean, slo=w.holder.current,
        strategies=lambda: strategies, decisions=w.decisions, hook_names=w.runner.names,
        hook_calls=w.recorder.recent, evictions=w.evictions.recent, pid=4242, clock=lambda: 160.5,
        root_logger=w.logger)
    return replace(sources, **overrides)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than the 107 bytes a unix socket path may have.
    directory = Path(tempfile.mkdtemp(prefix="kdbg-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def serve(sock_dir: Path, failures: ComponentFailures) -> Iterator[Any]:
    servers: list[DebugServer] = []

    def start(sources: DebugSources, path: Path | None = None) -> str:
        server = DebugServer(str(path or sock_dir / "run" / "debug.sock"), sources)
        server.start(failures.callback("debugapi"))
        servers.append(server)
        return server.socket_path

    yield start
    for server in servers:
        server.stop(5)


# ------------------------------------------------------------------------------------------ endpoints


def test_status(world: World, serve: Any) -> None:
    code, doc = get(serve(sources_of(world)), contract.STATUS)
    assert code == 200
    assert doc == {
        "version": "1.2.3", "pid": 4242, "node": "node-a", "mode": "standalone", "started_at": 100.0,
        "uptime_seconds": 60.5,
        "components": [{"name": "metriccache", "running": True}, {"name": "qosmanager", "running": False}],
        "feature_gates": {"BECPUSuppress": True, "CPIDetect": False},
        "feature_gates_not_implemented": sorted(gates.NOT_IMPLEMENTED),
        "probes": [{"name": "psi", "supported": True, "reason": "/proc/pressure/cpu readable"},
                   {"name": "perf", "supported": False, "reason": "EACCES"}],
        "companion": None, "shadow": None, "pressure": None,
    }


def test_status_with_companion(world: World, serve: Any) -> None:
    companion = {"address": "10.0.0.1:9000", "nodeslo_connected": True, "reports_failing": False}
    _, doc = get(serve(sources_of(world, companion=lambda: companion)), contract.STATUS)
    assert doc["companion"] == companion


def test_pods_show_current_and_desired_per_cgroup(world: World, serve: Any) -> None:
    container = BATCH.containers[0]
    world.cgroups.current_values = {BATCH.cgroup_dir: {"cpu_shares": 2, "cpuset_cpus": "0-3"},
                                    container.cgroup_dir: {"memory_limit": -1}}
    world.cgroups.desired_values = {BATCH.cgroup_dir: {"cpu_shares": 2}}
    bare = PodMeta(pod=replace(WEB.pod, name="pending", uid="uid-pending"), cgroup_dir="", containers=())
    world.pods.append(bare)
    code, doc = get(serve(sources_of(world)), contract.PODS)
    assert code == 200
    by_name = {p["name"]: p for p in doc["pods"]}
    assert list(by_name) == ["web", "batch", "pending"]
    web = by_name["web"]
    assert (web["namespace"], web["uid"], web["qos"], web["kube_qos"], web["priority"], web["phase"],
            web["source"], web["cgroup_dir"], web["priority_class"]) == (
        "default", "uid-web", "LS", "Burstable", 9000, "Running", "kubelet", WEB.cgroup_dir, "koord-prod")
    batch = by_name["batch"]
    assert batch["current"] == {"cpu_shares": 2, "cpuset_cpus": "0-3"}
    assert batch["desired"] == {"cpu_shares": 2}
    assert batch["intended"] == {} and batch["intended_evictions"] == []  # no shadow mode: nothing asked
    assert [c["name"] for c in batch["containers"]] == ["a", "b"]
    first = batch["containers"][0]
    assert (first["id"], first["cgroup_dir"], first["current"], first["desired"]) == (
        container.container_id, container.cgroup_dir, {"memory_limit": -1}, {})
    # No directory: nothing read (the hierarchy roots are not the pod's).
    assert (by_name["pending"]["current"], by_name["pending"]["desired"]) == ({}, {})


def test_pods_say_what_shadow_mode_would_have_done_to_each(world: World, serve: Any) -> None:
    container = BATCH.containers[0]
    world.cgroups.intended_values = {
        BATCH.cgroup_dir: {"cpu_cfs_quota": {"value": 300000, "because": "cpusuppress: BE limited to 3 CPUs"}},
        container.cgroup_dir: {"cpuset_cpus": {"value": "0-2", "because": "cpusuppress"}}}
    world.evictions.evict(BATCH, "EvictPodByNodeMemoryUsage", "node memory 78% >= 70%")  # dry-run: shadow mode
    code, doc = get(serve(sources_of(world, shadow=ShadowModes(known=["cpusuppress"]))), contract.PODS)
    assert code == 200
    by_name = {p["name"]: p for p in doc["pods"]}
    batch = by_name["batch"]
    assert batch["intended"] == world.cgroups.intended_values[BATCH.cgroup_dir]
    assert batch["containers"][0]["intended"] == world.cgroups.intended_values[container.cgroup_dir]
    assert [(e["reason"], e["outcome"]) for e in batch["intended_evictions"]] == [
        ("EvictPodByNodeMemoryUsage", "intended")]
    assert by_name["web"]["intended"] == {} and by_name["web"]["intended_evictions"] == []


def test_metrics_averages_over_the_window(world: World, serve: Any) -> None:
    world.means = {(names.NODE_CPU_USAGE, ()): 1.5, (names.NODE_MEMORY_USAGE, ()): 2e9,
                   (names.POD_CPU_USAGE, pod_labels("uid-web")): 0.25}
    path = serve(sources_of(world))
    code, doc = get(path, contract.METRICS)
    assert code == 200
    assert doc["window_seconds"] == contract.DEFAULT_METRICS_WINDOW_SECONDS
    assert set(world.windows) == {60.0}
    assert doc["node"] == {"cpu_cores": 1.5, "memory_bytes": 2e9}
    assert doc["pods"] == [
        {"namespace": "default", "name": "web", "qos": "LS", "cpu_cores": 0.25, "memory_bytes": None},
        {"namespace": "default", "name": "batch", "qos": "BE", "cpu_cores": None, "memory_bytes": None}]
    _, doc = get(path, contract.METRICS + "?window=30")
    assert doc["window_seconds"] == 30 and world.windows[-1] == 30.0


def test_metrics_node_is_null_without_samples(world: World, serve: Any) -> None:
    _, doc = get(serve(sources_of(world)), contract.METRICS)
    assert doc["node"] is None


@pytest.mark.parametrize(("query", "named"), [
    ("window=abc", "window"), ("window=0", "window"), ("window=-5", "window"), ("window=1e9", "window"),
    ("window=10&window=20", "window"), ("limit=3", "limit"), ("bogus", "bogus"),
])
def test_metrics_bad_query_is_400_naming_the_parameter(world: World, serve: Any, query: str, named: str) -> None:
    code, doc = get(serve(sources_of(world)), f"{contract.METRICS}?{query}")
    assert code == 400
    assert doc["error"].startswith(f"{named}:") or named in doc["error"]


def test_slo(world: World, serve: Any) -> None:
    path = serve(sources_of(world))
    code, doc = get(path, contract.SLO)
    effective = world.holder.current()
    assert code == 200
    assert doc == {"origin": "defaults", "generation": 0, "rejected": None, "spec": effective.spec.to_json()}
    world.holder.reject("file:/x", "bad")
    _, doc = get(path, contract.SLO)
    assert doc["rejected"] == "file:/x: bad"


def test_qos_lists_strategies_their_last_decision_and_history(world: World, serve: Any) -> None:
    world.decisions.record(Decision("cpusuppress", 10.0, "suppress", "BE limited", {"cores": 3}))
    world.decisions.record(Decision("cpusuppress", 11.0, "none", "fine"))
    code, doc = get(serve(sources_of(world)), contract.QOS)
    assert code == 200
    assert doc["strategies"] == [
        {"name": "cpusuppress", "enabled": True, "interval_seconds": 1.0, "shadow": False,
         "last": {"strategy": "cpusuppress", "at": 11.0, "action": "none", "summary": "fine", "numbers": {},
                  "shadow": False, "intended": [], "woken_by": ""}},
        {"name": "memoryevict", "enabled": False, "interval_seconds": 5.0, "shadow": False, "last": None}]
    assert doc["history"] == [{"strategy": "cpusuppress", "at": 10.0, "action": "suppress",
                               "summary": "BE limited", "numbers": {"cores": 3}, "shadow": False, "intended": [],
                               "woken_by": ""}]


def test_hooks_recent_calls_newest_last(world: World, serve: Any) -> None:
    spec = WEB.pod.containers[0]
    container_request = HookRequest(Stage.PRE_CREATE_CONTAINER, WEB.pod, WEB.cgroup_dir, spec, "id1")
    pod_request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, WEB.pod, WEB.cgroup_dir)
    world.runner.run(container_request, transport="nri")
    world.runner.run(pod_request, transport="reconciler")  # nothing set, nothing failed: not recorded
    world.runner.run(container_request, transport="reconciler")
    world.runner.run(pod_request, transport="hookserver")
    path = serve(sources_of(world))
    code, doc = get(path, contract.HOOKS)
    assert code == 200
    assert doc["hooks"] == ["cpu", "noop"]
    assert [(c["transport"], c["stage"]) for c in doc["calls"]] == [
        ("nri", "PreCreateContainer"), ("reconciler", "PreCreateContainer"), ("hookserver", "PreRunPodSandbox")]
    first = doc["calls"][0]
    assert (first["at"], first["pod"], first["container"], first["ok"], first["errors"]) == (
        1234.5, "default/web", "main", True, [])
    assert first["adjustment"] == {"cpu_shares": 512, "cgroup.cpu_idle": 1}
    assert first["duration_ms"] >= 0
    assert doc["calls"][2]["container"] == ""
    _, doc = get(path, contract.HOOKS + "?limit=1")
    assert [c["transport"] for c in doc["calls"]] == ["hookserver"]
    code, doc = get(path, contract.HOOKS + "?limit=zero")
    assert code == 400 and doc["error"].startswith("limit:")


def test_hook_failures_are_recorded_even_from_the_reconciler() -> None:
    recorder = HookCallRecorder(size=2)
    runner = HookRunner([Hook("broken", "fails", frozenset({Stage.PRE_RUN_POD_SANDBOX}), _broken)],
                        recorder=recorder)
    request = HookRequest(Stage.PRE_RUN_POD_SANDBOX, WEB.pod, WEB.cgroup_dir)
    for _ in range(3):
        runner.run(request, log_errors=False, transport="reconciler")
    calls = recorder.recent(10)
    assert len(calls) == 2  # the ring is bounded
    assert not calls[-1].ok and calls[-1].errors == ("broken: no luck",)


class _FailingBackend:
    name = "cri"

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        raise EvictionFailed("runtime unreachable")


def test_evictions_recent_attempts(world: World, serve: Any) -> None:
    world.evictions.evict(BATCH, "BECPUEvict", "node CPU 95%")
    failing = Evictions(_FailingBackend(), lambda: 100.0)
    failing.evict(WEB, "BEMemoryEvict", "memory 90%")
    code, doc = get(serve(sources_of(world, evictions=lambda n: world.evictions.recent(n) + failing.recent(n))),
                    contract.EVICTIONS)
    assert code == 200
    assert doc["evictions"] == [
        {"at": 99.0, "pod": "default/batch", "reason": "BECPUEvict", "message": "node CPU 95%",
         "outcome": "intended", "backend": "dry-run"},
        {"at": 100.0, "pod": "default/web", "reason": "BEMemoryEvict",
         "message": "memory 90%; failed: runtime unreachable", "outcome": "failed", "backend": "cri"}]


def test_evictions_ring_is_bounded_and_limited() -> None:
    evictions = Evictions(DryRunBackend(), lambda: 1.0, history=3)
    for i in range(5):
        evictions.evict(make_pod(f"p{i}", "BE"), "r", "m")
    assert [a.pod for a in evictions.recent(100)] == ["default/p2", "default/p3", "default/p4"]
    assert [a.pod for a in evictions.recent(1)] == ["default/p4"]


def test_cgroup_files_of_a_pod_and_a_container(world: World, serve: Any) -> None:
    container = BATCH.containers[1]
    world.cgroups.file_map = {BATCH.cgroup_dir: {"cpu,cpuacct/cpu.shares": "2\n"},
                              container.cgroup_dir: {"memory/memory.limit_in_bytes": "1048576\n"}}
    path = serve(sources_of(world))
    code, doc = get(path, f"{contract.CGROUP}?pod=default/batch")
    assert code == 200
    assert doc == {"pod": "default/batch", "container": None, "dir": BATCH.cgroup_dir,
                   "files": {"cpu,cpuacct/cpu.shares": "2\n"}}
    code, doc = get(path, f"{contract.CGROUP}?pod=default/batch&container=b")
    assert code == 200
    assert (doc["container"], doc["dir"], doc["files"]) == (
        "b", container.cgroup_dir, {"memory/memory.limit_in_bytes": "1048576\n"})


@pytest.mark.parametrize(("query", "code", "text"), [
    ("pod=default/nope", 404, "default/nope"),
    ("pod=default/batch&container=zzz", 404, "zzz"),
    ("pod=nonamespace", 400, "pod:"),
    ("", 400, "pod:"),
    ("pod=default/web&colour=red", 400, "colour"),
])
def test_cgroup_errors(world: World, serve: Any, query: str, code: int, text: str) -> None:
    status_code, doc = get(serve(sources_of(world)), f"{contract.CGROUP}?{query}")
    assert status_code == code
    assert text in doc["error"]


def test_probes(world: World, serve: Any) -> None:
    code, doc = get(serve(sources_of(world)), contract.PROBES)
    assert code == 200
    assert doc["probes"][1] == {"name": "perf", "supported": False, "reason": "EACCES"}


def test_unknown_path_is_404_and_wrong_method_405(world: World, serve: Any) -> None:
    path = serve(sources_of(world))
    code, doc = get(path, "/v1/nothing")
    assert code == 404 and "/v1/nothing" in doc["error"]
    code, doc = post(path, contract.STATUS, {})
    assert code == 405 and "GET" in doc["error"]


def test_handler_exception_is_500_json(world: World, serve: Any) -> None:
    def boom() -> list[PodMeta]:
        raise RuntimeError("informer exploded")

    code, doc = get(serve(sources_of(world, pods=boom)), contract.PODS)
    assert code == 500 and "informer exploded" in doc["error"]


# ------------------------------------------------------------------------------------------ admin


def test_log_level_changes_the_root_logger(world: World, serve: Any) -> None:
    path = serve(sources_of(world))
    code, doc = post(path, contract.ADMIN_LOG_LEVEL, {"level": "debug"})
    assert (code, doc) == (200, {"level": "debug"})
    assert world.logger.level == logging.DEBUG
    code, doc = post(path, contract.ADMIN_LOG_LEVEL, {"level": "WARNING"})
    assert (code, doc) == (200, {"level": "warning"})
    assert world.logger.level == logging.WARNING


@pytest.mark.parametrize("body", [{"level": "verbose"}, {"lvl": "info"}, ["debug"], {"level": 10}])
def test_log_level_rejects_a_bad_level(world: World, serve: Any, body: Any) -> None:
    code, doc = post(serve(sources_of(world)), contract.ADMIN_LOG_LEVEL, body)
    assert code == 400 and doc["error"].startswith("level:")
    assert world.logger.level == logging.INFO


def test_shadow_mode_is_shown_and_switched_from_the_next_round(world: World, serve: Any) -> None:
    modes = ShadowModes(known=["cpusuppress", "memoryevict"])
    hooks = ShadowModes(known=["cpu", "noop"], kind="hook")
    path = serve(sources_of(world, shadow=modes, hook_shadow=hooks))
    code, doc = get(path, contract.SHADOW)
    assert (code, doc) == (200, {"default": False, "strategies": {}, "effective": {"cpusuppress": False,
                                                                                 "memoryevict": False},
                                 "hooks": {"default": False, "hooks": {}, "effective": {"cpu": False, "noop": False}}})
    code, doc = post(path, contract.ADMIN_SHADOW, {"hook": "cpu", "shadow": True})
    assert code == 200 and doc["hooks"]["hooks"] == {"cpu": True} and hooks.shadow("cpu")
    assert not modes.shadow("cpusuppress")
    assert post(path, contract.ADMIN_SHADOW, {"hook": "cpusuppress", "shadow": True})[0] == 400
    code, doc = post(path, contract.ADMIN_SHADOW, {"strategy": "cpusuppress", "shadow": True})
    assert code == 200 and doc["strategies"] == {"cpusuppress": True} and modes.shadow("cpusuppress")
    code, doc = post(path, contract.ADMIN_SHADOW, {"strategy": None, "shadow": True})
    assert code == 200 and doc["effective"] == {"cpusuppress": True, "memoryevict": True}
    _, qos = get(path, contract.QOS)
    assert [row["shadow"] for row in qos["strategies"]] == [True, True]
    _, status = get(path, contract.STATUS)
    assert status["shadow"]["effective"] == {"cpusuppress": True, "memoryevict": True}
    code, doc = post(path, contract.ADMIN_SHADOW, {"strategy": "cpusuppress", "shadow": None})
    assert code == 200 and doc["strategies"] == {}


@pytest.mark.parametrize(("body", "message"), [
    ({"strategy": "cpusupress", "shadow": True}, "unknown strategy 'cpusupress'"),
    ({"strategy": "cpusuppress"}, "expected"),
    ({"strategy": "cpusuppress", "shadow": "yes"}, "shadow: true, false or null"),
    ({"strategy": None, "shadow": None}, "cannot be dropped"),
    (["cpusuppress"], "expected"),
    ({"strategy": "cpusuppress", "shadow": True, "also": 1}, "expected"),
])
def test_a_bad_shadow_switch_changes_nothing(world: World, serve: Any, body: Any, message: str) -> None:
    modes = ShadowModes(known=["cpusuppress", "memoryevict"])
    code, doc = post(serve(sources_of(world, shadow=modes)), contract.ADMIN_SHADOW, body)
    assert code == 400 and message in doc["error"]
    assert modes.to_json() == {"default": False, "strategies": {}}


def test_without_a_qos_manager_there_is_no_shadow_mode(world: World, serve: Any) -> None:
    path = serve(sources_of(world))
    assert get(path, contract.SHADOW)[0] == 404
    assert post(path, contract.ADMIN_SHADOW, {"strategy": None, "shadow": True})[0] == 404


def test_log_level_default_is_the_real_root_logger(world: World, serve: Any) -> None:
    root = logging.getLogger()
    before = root.level
    try:
        sources = sources_of(world)
        sources = DebugSources(**{f: getattr(sources, f) for f in sources.__dataclass_fields__ if f != "root_logger"})
        code, _ = post(serve(sources), contract.ADMIN_LOG_LEVEL, {"level": "error"})
        assert code == 200 and root.level == logging.ERROR
    finally:
        root.setLevel(before)


# ------------------------------------------------------------------------------------ transport


def _raw(path: str, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_garbage_request_is_400_json(world: World, serve: Any) -> None:
    path = serve(sources_of(world))
    answer = _raw(path, b"\x00\x01 garbage garbage garbage\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert b"application/json" in head
    assert b'"error"' in body
    assert post(path, contract.ADMIN_LOG_LEVEL, None)[0] == 400
    answer = _raw(path, b"POST /v1/admin/log-level HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{bad}")
    assert answer.startswith(b"HTTP/1.1 400") and b"body: not JSON" in answer


def test_socket_is_0600_in_a_0700_directory(world: World, serve: Any, sock_dir: Path) -> None:
    path = Path(serve(sources_of(world), sock_dir / "new" / "debug.sock"))
    st = path.lstat()
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == contract.SOCKET_MODE
    assert stat.S_IMODE((sock_dir / "new").stat().st_mode) == 0o700


def test_stop_removes_the_socket(world: World, sock_dir: Path, failures: ComponentFailures) -> None:
    server = DebugServer(str(sock_dir / "debug.sock"), sources_of(world))
    server.start(failures.callback("debugapi"))
    running_before = server.running
    server.stop(5)
    assert (running_before, server.running) == (True, False)
    assert not (sock_dir / "debug.sock").exists()


def test_stale_socket_is_replaced(world: World, serve: Any, sock_dir: Path) -> None:
    stale = sock_dir / "debug.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(stale))
    leftover.close()  # bound, never listening: a dead koordlet's socket
    path = serve(sources_of(world), stale)
    assert get(path, contract.STATUS)[0] == 200


def test_non_socket_file_is_refused(world: World, sock_dir: Path, failures: ComponentFailures) -> None:
    target = sock_dir / "debug.sock"
    target.write_text("precious")
    server = DebugServer(str(target), sources_of(world))
    with pytest.raises(KoordletError, match="not a socket"):
        server.start(failures.callback("debugapi"))
    assert target.read_text() == "precious"
    server.stop(0)


def test_live_socket_is_refused(world: World, serve: Any, sock_dir: Path, failures: ComponentFailures) -> None:
    path = serve(sources_of(world))
    second = DebugServer(path, sources_of(world))
    with pytest.raises(KoordletError, match="another process serves it"):
        second.start(failures.callback("second debugapi"))
    second.stop(0)
    assert get(path, contract.STATUS)[0] == 200


def test_two_clients_at_once(world: World, serve: Any) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_pods() -> Sequence[PodMeta]:
        entered.set()
        assert release.wait(10)
        return [WEB]

    path = serve(sources_of(world, pods=slow_pods))
    results: list[tuple[int, Any]] = []
    slow = threading.Thread(target=lambda: results.append(get(path, contract.PODS)))
    slow.start()
    try:
        assert entered.wait(5)
        # The first client's request is still in its handler; the second is answered meanwhile.
        code, doc = get(path, contract.STATUS)
        assert code == 200 and doc["node"] == "node-a"
        assert not results
    finally:
        release.set()
        slow.join(10)
    assert results and results[0][0] == 200 and results[0][1]["pods"][0]["name"] == "web"


# ------------------------------------------------------------------------------ host cgroup reads


def test_host_cgroups_reads_current_desired_and_files(fake_cgroup_host: FakeHost) -> None:
    host = fake_cgroup_host
    rel = "kubepods/besteffort/podx"
    host.mkdir_cgroup(rel)
    layout = host.layout()
    executor = ResourceExecutor(layout, FakeClock(), MemoryAudit())
    view = HostCgroups(layout, executor.last_written, intended=executor.last_intended)
    assert view.desired(rel) == {}
    # Shadow mode: what a strategy would write, and who wanted it; a value the file holds is no intention.
    executor.intend([CgroupUpdate(CPU_SHARES, rel, 4096, "cpusuppress: be")], "cpusuppress")
    assert view.intended(rel) == {"cpu_shares": {"value": 4096 if layout.controller_version == 1 else 4091,
                                                 "because": "cpusuppress: be"}}
    executor.apply([CgroupUpdate(CPU_SHARES, rel, 4096, "test"), CgroupUpdate(MEMORY_LIMIT, rel, 1 << 30, "t"),
                    CgroupUpdate(CPUSET_CPUS, rel, "0-1", "test"), CgroupUpdate(CPU_CFS_QUOTA, rel, 50_000, "t")])
    if layout.controller_version == 2:
        host.write_cgroup(rel, "cpu.max", "50000 100000\n")  # the kernel keeps the period of a quota-only write
    current, desired = view.current(rel), view.desired(rel)
    # Desired is decoded from the text written as current is from the file, so the two agree (v2's
    # cpu.weight maps 4096 shares to a weight that reads back as 4091).
    expected = {"cpu_shares": 4096 if layout.controller_version == 1 else 4091, "memory_limit": 1 << 30,
                "cpuset_cpus": "0-1", "cpu_cfs_quota": 50_000}
    assert {k: current[k] for k in expected} == expected
    assert {k: desired[k] for k in expected} == expected
    files = view.files(rel)
    shares = "cpu.weight" if layout.controller_version == 2 else "cpu.shares"
    assert any(key.endswith("/" + shares) for key in files)
    assert all("/" in key for key in files)
    assert view.current("kubepods/gone") == {} and view.files("kubepods/gone") == {}


def test_decode_written_v2_cpu_max() -> None:
    assert decode_written(CPU_CFS_QUOTA, 2, "max 100000") == -1
    assert decode_written(CPU_CFS_PERIOD, 2, "50000 100000") == 100000
    assert decode_written(CPU_CFS_PERIOD, 2, "50000") is None
    assert decode_written(MEMORY_LIMIT, 2, "max") == -1
    assert decode_written(CPU_SHARES, 1, "1024\n") == 1024


def test_default_socket_for_root_and_for_other_users() -> None:
    from koordlet.debugapi import contract

    assert contract.default_socket(0, "/var/lib/koordlet") == contract.DEFAULT_SOCKET
    assert contract.default_socket(1000, "/home/u/.local/state/koordlet") == "/home/u/.local/state/koordlet/debug.sock"
    assert contract.default_socket(1000, "/" + "x" * 120) == "", "too long for sun_path: no socket"
