"""Abuse suite, robustness: each test performs one attack against the real code path and shows it now fails.

Attack -> before (0d0de7c) -> now:

* a cgroup write that blocks, under an NRI event -> the event loop blocked: no answer within containerd's
  2 s, every other NRI request and executor caller stuck behind it -> answered by the 1.5 s deadline,
  other callers write meanwhile;
* a hook answer out of range over NRI -> sent to the runtime (oom_score_adj -5000, cpu.shares 1) ->
  refused: Fail fails the container, Ignore creates it unadjusted;
* an error outside the hook runner under Ignore -> the container failed (status 13) -> created unadjusted;
* one garbage pod in kubelet's /pods -> the whole list refused (a raw ValueError for "1e999999"), every
  pod's state frozen -> that pod skipped, logged once by namespace/name/uid;
* the quantity "1e999999" -> a million-digit Decimal, then decimal.Overflow (milli_value) or int()'s
  ValueError (int_value) -> ParseError;
* random CRI method names to the proxy -> one cached callable per name, without bound -> the CRI methods
  plus a 32-entry LRU;
* a symlink planted at the Terway temp path -> followed: koordlet (root) truncated and wrote the link's
  target -> never followed (unpredictable name, O_EXCL, O_NOFOLLOW).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.apis.quantity import int_value, milli_value, parse_quantity
from koordlet.errors import ParseError
from koordlet.resourceexecutor import CgroupUpdate, Outcome, ResourceExecutor, terway
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.resourceexecutor.writer import FileWriter
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import FailurePolicy, Hook, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource
from koordlet.runtimehooks.nri.plugin import ANSWER_DEADLINE, NriPlugin
from koordlet.statesinformer.kubelet import KubeletClient
from koordlet.system import atomicfile
from koordlet.system import resources as r
from runtimeproxy.backend import KNOWN_METHODS, UNKNOWN_METHODS_CACHED, Backend, PassthroughHandler, serve
from tests.fixtures.fakehost import FakeHost
from tests.fixtures.fakekubelet import FakeKubelet, make_pod
from tests.fixtures.fakenri import FakeNriRuntime
from tests.fixtures.waiting import wait_until

BE_SPEC = json.dumps({"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                                "limits": {"kubernetes.io/batch-cpu": "1000",
                                                           "kubernetes.io/batch-memory": "256Mi"}}}})
POD_DIR = "kubepods/besteffort/podu1"
CONTAINERD_TIMEOUT = 2.0  # containerd's default plugin_request_timeout


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="krob-") as tmp:  # unix socket paths max 108 bytes
        yield Path(tmp)


def sandbox() -> Any:
    pod = api_pb2.PodSandbox(id="sb-u1", name="p-u1", uid="u1", namespace="default",
                             labels={"koordinator.sh/qosClass": "BE"},
                             annotations={"node.koordinator.sh/extended-resource-spec": BE_SPEC})
    pod.linux.cgroup_parent = "/" + POD_DIR
    return pod


def container() -> Any:
    c = api_pb2.Container(id="c1", pod_sandbox_id="sb-u1", name="main")
    c.linux.cgroups_path = f"/{POD_DIR}/c1"
    return c


def serve_nri(socket_path: str, runner: HookRunner, applier: Applier, scenario: Any) -> None:
    async def main() -> None:
        runtime = FakeNriRuntime(socket_path)
        await runtime.start()
        plugin = NriPlugin(runner, applier, socket_path, backoff_start=0.05, backoff_max=0.2)
        task = asyncio.create_task(plugin.run())
        try:
            await scenario(runtime, await runtime.wait_ready(), plugin)
        finally:
            plugin.stop()
            await asyncio.wait_for(task, 5)
            await runtime.stop()
    asyncio.run(main())


# --- 1. a cgroup write that blocks, under an NRI event ------------------------------------------------------


class KernelHeldWriter(FileWriter):
    """The real file writer, except that a write to ``held`` blocks until ``release`` (the kernel reclaiming
    under a cgroup v1 memory.limit_in_bytes lowered below the usage)."""

    def __init__(self, held: str) -> None:
        self.held = held
        self.entered, self.release = threading.Event(), threading.Event()

    def write(self, path: str, text: str) -> None:
        if path == self.held:
            self.entered.set()
            assert self.release.wait(30)
        super().write(path, text)


def test_a_blocking_cgroup_write_does_not_hold_the_nri_answer(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(POD_DIR)
    fake_host.mkdir_cgroup("kubepods/burstable")
    held = str(fake_host.cgroup_path(POD_DIR, r.MEMORY_LIMIT))
    writer = KernelHeldWriter(held)
    executor = ResourceExecutor(fake_host.layout(), lambda: 0.0, None, writer=writer)
    runner = HookRunner([batchresource.new(HookDeps())])

    async def attack(runtime: FakeNriRuntime, conn: Any, plugin: NriPlugin) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        # RunPodSandbox of a BE pod: batchresource's memory limit goes to the pod cgroup through the executor.
        await runtime.call(conn, "StateChange", api_pb2.StateChangeEvent(event=api_pb2.RUN_POD_SANDBOX,
                                                                         pod=sandbox()), api_pb2.Empty,
                           timeout=CONTAINERD_TIMEOUT)
        assert loop.time() - began < CONTAINERD_TIMEOUT
        assert writer.entered.is_set() and plugin.stats.late_writes == 1
        # Still held: the next container is adjusted within the runtime's timeout, and another executor
        # caller (a QoS strategy on another cgroup) writes meanwhile.
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse, timeout=CONTAINERD_TIMEOUT)
        assert answer.adjust.linux.resources.memory.limit.value == 256 << 20
        other = await asyncio.to_thread(executor.apply, [CgroupUpdate(r.CPU_SHARES, "kubepods/burstable", 1024,
                                                                      "attack-test")])
        assert other[0].outcome is Outcome.WRITTEN
        assert not writer.release.is_set()
        writer.release.set()
        await asyncio.to_thread(wait_until, "the held write", lambda: executor.last_written(held) is not None)

    try:
        with tempfile.TemporaryDirectory(prefix="krob-") as tmp:
            serve_nri(str(Path(tmp) / "nri.sock"), runner, Applier(executor.apply), attack)
    finally:
        writer.release.set()
    assert fake_host.read_cgroup(POD_DIR, r.MEMORY_LIMIT).strip() == str(256 << 20)
    assert ANSWER_DEADLINE < CONTAINERD_TIMEOUT


# --- 2 and 3. an out-of-range answer; an error outside the runner --------------------------------------------


def setting(key: str, value: object) -> Hook:
    def fn(ctx: HookContext) -> None:
        ctx.set(key, value)
    return Hook("tenant-controlled", "a hook answering from pod input", frozenset({Stage.PRE_CREATE_CONTAINER}), fn)


def create(socket_dir: Path, hook: Hook, policy: FailurePolicy) -> tuple[Any, str]:
    """The runtime's CreateContainer answer (None when refused) and the refusal."""
    outcome: dict[str, Any] = {"answer": None, "error": ""}

    async def call(runtime: FakeNriRuntime, conn: Any, plugin: NriPlugin) -> None:
        try:
            outcome["answer"] = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
                pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        except RuntimeError as exc:
            outcome["error"] = str(exc)

    serve_nri(str(socket_dir / "nri.sock"), HookRunner([hook], policy=policy), Applier(lambda u: []), call)
    return outcome["answer"], outcome["error"]


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("oom_score_adj", -5000, "oom_score_adj -5000 outside -1000..1000"),
    ("cpu_shares", 1, "cpu.shares 1 outside 2..262144"),
    ("cpu_quota", 1, "cpu.quota 1: must be -1 or >= 1000"),
    ("cpu_period", 10**9, "cpu.period 1000000000 outside 1000..1000000"),
    ("cpuset_cpus", "0-3 && reboot", "not a CPU list"),
    ("memory_limit", -7, "memory.limit -7"),
])
def test_an_out_of_range_nri_answer_never_reaches_the_runtime(socket_dir: Path, key: str, value: object,
                                                              problem: str) -> None:
    answer, error = create(socket_dir, setting(key, value), FailurePolicy.FAIL)
    assert answer is None and "status 13" in error and problem in error
    answer, error = create(socket_dir, setting(key, value), FailurePolicy.IGNORE)
    assert error == "" and answer.adjust == api_pb2.ContainerAdjustment()


@pytest.mark.parametrize(("key", "value"), [
    ("cpu_shares", "not a number"),  # conversion
    ("memory_limit", 1 << 80),  # encoding: no int64
    ("cpu_quota", float("nan")),
])
def test_an_error_outside_the_runner_does_not_fail_the_container_under_ignore(socket_dir: Path, key: str,
                                                                              value: object) -> None:
    answer, error = create(socket_dir, setting(key, value), FailurePolicy.IGNORE)
    assert error == "" and answer.adjust == api_pb2.ContainerAdjustment()
    answer, error = create(socket_dir, setting(key, value), FailurePolicy.FAIL)
    assert answer is None and "status 13" in error


# --- 4 and 5. one garbage pod in kubelet's list; "1e999999" ----------------------------------------------------


@pytest.mark.parametrize("garbage", ["1e999999", ["a", "list"], None])
def test_one_garbage_pod_does_not_freeze_the_list(fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture,
                                                  garbage: object) -> None:
    caplog.set_level(logging.INFO, logger="koordlet.statesinformer.kubelet")
    bad = make_pod("tenant", "team-x", uid="uid-x")
    bad["spec"]["containers"][0]["resources"] = {"limits": {"memory": garbage}}
    if garbage is None:
        bad["spec"]["containers"] = "not a list"
    fake_kubelet.set_pods([make_pod("web"), bad, make_pod("api")])
    client = KubeletClient(fake_kubelet.options())
    for _ in range(3):
        assert [p.name for p in client.get_pods()] == ["web", "api"]
    logged = [rec for rec in caplog.records if rec.getMessage() == "kubelet pod skipped: it does not parse"]
    assert [rec.pod for rec in logged] == ["team-x/tenant/uid-x"]  # type: ignore[attr-defined]


def test_an_overflowing_quantity_is_a_parse_error() -> None:
    for text in ("1e999999", "1e1000000", "1e" + "9" * 5000, "9" * 5000 + "Ki"):
        for parse in (parse_quantity, milli_value, int_value):
            with pytest.raises(ParseError):
                parse(text)


# --- 6. random CRI method names to the proxy ----------------------------------------------------------------


class EchoRuntime(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A runtime answering any method, so every random name is relayed all the way."""

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        def echo(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            yield from requests

        return grpc.stream_stream_rpc_method_handler(echo)


def test_random_method_names_do_not_grow_the_proxy(socket_dir: Path) -> None:
    runtime = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[EchoRuntime()])
    runtime.add_insecure_port(f"unix:{socket_dir / 'runtime.sock'}")
    runtime.start()
    backend = Backend(str(socket_dir / "runtime.sock"))
    proxy = serve(str(socket_dir / "proxy.sock"), PassthroughHandler(backend), max_workers=4)
    channel = grpc.insecure_channel(f"unix:{socket_dir / 'proxy.sock'}")
    try:
        for _ in range(400):
            method = f"/{secrets.token_hex(4)}.Svc/{secrets.token_hex(6)}"
            assert channel.unary_unary(method)(b"ping", timeout=5) == b"ping"  # still relayed
        assert backend.cached_callables() <= UNKNOWN_METHODS_CACHED
        version = "/runtime.v1.RuntimeService/Version"
        assert version in KNOWN_METHODS
        assert channel.unary_unary(version)(b"", timeout=5) == b""
        assert backend.cached_callables() <= UNKNOWN_METHODS_CACHED + 1
    finally:
        channel.close()
        proxy.stop(None)
        backend.close()
        runtime.stop(None)


# --- 7. a symlink planted at the Terway temp path ---------------------------------------------------------------


def test_a_symlink_planted_at_the_terway_temp_path_is_not_followed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    qos, victim = tmp_path / "terway-qos", tmp_path / "etc-shadow"
    qos.mkdir()
    victim.write_text("root:secret\n")
    # The name the old code used (predictable from koordlet's pid) and the next "random" names.
    (qos / f".{terway.NODE_FILE}.koordlet-{os.getpid()}.tmp").symlink_to(victim)
    names = iter(["guessed", "fresh"])
    monkeypatch.setattr(atomicfile, "random_suffix", lambda: next(names))
    (qos / f".{terway.NODE_FILE}.koordlet-guessed.tmp").symlink_to(victim)
    plan = NetQoSPlan(interface="eth0", total_bps=10**9, system=ClassBandwidth(0, 10**9, 0, 10**9),
                      ls=ClassBandwidth(0, 10**9, 0, 10**9), be=ClassBandwidth(10**8, 5 * 10**8, 0, 10**9))
    terway.TerwayNetQoS(str(qos)).apply(plan)
    assert victim.read_text() == "root:secret\n"
    assert (qos / terway.NODE_FILE).read_text().startswith("hw_tx_bps_max 125000000\n")
    assert not (qos / terway.NODE_FILE).is_symlink()
