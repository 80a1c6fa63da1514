"""The NRI plugin against a runtime that speaks NRI v0.6.1's wire on a real unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.apis.proto.ttrpc import request_pb2
from koordlet.resourceexecutor.update import CgroupUpdate, Outcome, Result
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import FailurePolicy, Hook, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hooks import batchresource
from koordlet.runtimehooks.nri import frames, ttrpc
from koordlet.runtimehooks.nri.plugin import ANSWER_DEADLINE, INLINE_AFTER, INLINE_BUDGET, NriPlugin, event_mask
from koordlet.system.resources import CPU_IDLE
from tests.fixtures.fakenri import FakeNriRuntime
from tests.fixtures.waiting import wait_until

BE_SPEC = json.dumps({"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                                "limits": {"kubernetes.io/batch-cpu": "1000",
                                                           "kubernetes.io/batch-memory": "256Mi"}}}})


@pytest.fixture
def socket_path() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="knri-") as tmp:  # short: unix socket paths max 108 bytes
        yield str(Path(tmp) / "nri.sock")


class Writes:
    def __init__(self) -> None:
        self.updates: list[CgroupUpdate] = []

    def __call__(self, updates: list[CgroupUpdate]) -> list[Result]:
        self.updates += updates
        return [Result(u, Outcome.WRITTEN, None, None) for u in updates]


def sandbox(uid: str = "u1", qos: str = "BE", parent: str = "/kubepods/besteffort/podu1",
            annotations: dict[str, str] | None = None) -> Any:
    pod = api_pb2.PodSandbox(id="sb-" + uid, name="p-" + uid, uid=uid, namespace="default",
                             labels={"koordinator.sh/qosClass": qos},
                             annotations={"node.koordinator.sh/extended-resource-spec": BE_SPEC,
                                          **(annotations or {})})
    pod.linux.cgroup_parent = parent
    return pod


def container(cid: str = "c1") -> Any:
    c = api_pb2.Container(id=cid, pod_sandbox_id="sb-u1", name="main")
    c.linux.cgroups_path = f"/kubepods/besteffort/podu1/{cid}"
    return c


def env_hook(entries: int) -> Hook:
    def fn(ctx: HookContext) -> None:
        for i in range(entries):
            ctx.set_entry("env", f"KOORD_TEST_{i:04d}", "x" * 40)
    return Hook("zz-env", "many env entries", frozenset({Stage.PRE_CREATE_CONTAINER}), fn)


def idle_hook() -> Hook:
    def fn(ctx: HookContext) -> None:
        ctx.write(CPU_IDLE, 1)
    return Hook("idle", "cpu.idle for the pod", frozenset({Stage.PRE_RUN_POD_SANDBOX}), fn)


Scenario = Callable[[FakeNriRuntime, NriPlugin], Awaitable[None]]


def run(socket_path: str, scenario: Scenario, hooks: list[Hook] | None = None, *,
        policy: FailurePolicy = FailurePolicy.IGNORE,
        writes: Callable[[list[CgroupUpdate]], list[Result]] | None = None,
        answer_deadline: float = ANSWER_DEADLINE, clock: Callable[[], float] | None = None, **fake: Any) -> None:
    async def main() -> None:
        runtime = FakeNriRuntime(socket_path, **fake)
        await runtime.start()
        runner = HookRunner(hooks if hooks is not None else [batchresource.new(HookDeps())], policy=policy)
        plugin = NriPlugin(runner, Applier(writes or Writes()), socket_path, backoff_start=0.05, backoff_max=0.2,
                           answer_deadline=answer_deadline, clock=clock or time.monotonic)
        task = asyncio.create_task(plugin.run())
        try:
            await scenario(runtime, plugin)
        finally:
            plugin.stop()
            await asyncio.wait_for(task, 5)
            await runtime.stop()
    asyncio.run(main())


def test_registers_once_and_adjusts_a_be_container(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        assert (conn.name, conn.idx) == ("koordlet_nri", "00")
        assert conn.events == (1 << (api_pb2.RUN_POD_SANDBOX - 1) | 1 << (api_pb2.CREATE_CONTAINER - 1)
                               | 1 << (api_pb2.UPDATE_CONTAINER - 1))
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        resources = answer.adjust.linux.resources
        assert resources.cpu.shares.value == 512
        assert resources.cpu.quota.value == 100_000
        assert resources.memory.limit.value == 256 << 20
        assert runtime.registrations == 1 and plugin.stats.registrations == 1
    run(socket_path, scenario)


def test_ls_container_is_left_alone(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(qos="LS", parent="/kubepods/burstable/podu1"), container=container()),
            api_pb2.CreateContainerResponse)
        assert answer.adjust == api_pb2.ContainerAdjustment()
    run(socket_path, scenario)


def test_update_container_answers_a_container_update(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        request = api_pb2.UpdateContainerRequest(pod=sandbox(), container=container("c9"))
        answer = await runtime.call(conn, "UpdateContainer", request, api_pb2.UpdateContainerResponse)
        assert [u.container_id for u in answer.update] == ["c9"]
        assert answer.update[0].linux.resources.cpu.shares.value == 512
    run(socket_path, scenario)


def test_adjustment_over_4k_is_sent_in_4096_byte_frames(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert len(answer.adjust.env) == 200
        assert answer.ByteSize() > 10_000
        assert conn.max_frame_seen == frames.MUX_SEND_FRAME_MAX  # split, never above the runtime's buffer
    run(socket_path, scenario, [batchresource.new(HookDeps()), env_hook(200)])


def test_pod_event_writes_through_the_executor(socket_path: str) -> None:
    writes = Writes()

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        assert conn.events & 1 << (api_pb2.RUN_POD_SANDBOX - 1)
        event = api_pb2.StateChangeEvent(event=api_pb2.RUN_POD_SANDBOX, pod=sandbox())
        await runtime.call(conn, "StateChange", event, api_pb2.Empty)
    run(socket_path, scenario, [idle_hook()], writes=writes)
    assert [(u.key, u.rel_dir, u.value, u.owner) for u in writes.updates] == [
        ("cpu_idle", "kubepods/besteffort/podu1", 1, "runtimehooks/idle")]


def test_be_pod_event_writes_the_pod_cgroup_from_the_batch_resources(socket_path: str) -> None:
    """RunPodSandbox under NRI is a notification: batchresource's pod values (500m request -> 512 shares,
    1000m limit -> 100 ms quota, 256Mi) go into the pod cgroup through the executor."""
    writes = Writes()

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        event = api_pb2.StateChangeEvent(event=api_pb2.RUN_POD_SANDBOX, pod=sandbox())
        await runtime.call(conn, "StateChange", event, api_pb2.Empty)
        ls = api_pb2.StateChangeEvent(event=api_pb2.RUN_POD_SANDBOX,
                                      pod=sandbox("u2", qos="LS", parent="/kubepods/burstable/podu2"))
        await runtime.call(conn, "StateChange", ls, api_pb2.Empty)
    run(socket_path, scenario, writes=writes)
    assert sorted((u.key, u.rel_dir, u.value, u.owner) for u in writes.updates) == [
        ("cpu_cfs_quota", "kubepods/besteffort/podu1", 100_000, "runtimehooks/batchresource"),
        ("cpu_shares", "kubepods/besteffort/podu1", 512, "runtimehooks/batchresource"),
        ("memory_limit", "kubepods/besteffort/podu1", 256 << 20, "runtimehooks/batchresource")]


def test_reconnects_with_one_registration_per_connection(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        for round_ in range(1, 6):
            conn = await runtime.wait_ready(round_)
            assert len(runtime.live) == 1
            conn.writer.close()  # the runtime drops the plugin (containerd restart, late reply...)
            await conn.closed.wait()
        conn = await runtime.wait_ready(6)
        await asyncio.sleep(0.3)  # several backoff periods: no extra dial may register again
        assert runtime.registrations == 6 == plugin.stats.registrations
        assert len(runtime.live) == 1
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
    run(socket_path, scenario)


def test_configure_before_the_registration_reply(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        assert conn.events and runtime.registrations == 1
    run(socket_path, scenario, configure_first=True)


def test_waits_for_a_socket_that_appears_later(socket_path: str) -> None:
    async def main() -> None:
        plugin = NriPlugin(HookRunner([batchresource.new(HookDeps())]), Applier(Writes()), socket_path,
                           backoff_start=0.05, backoff_max=0.1)
        task = asyncio.create_task(plugin.run())
        await asyncio.sleep(0.3)
        assert plugin.stats.registrations == 0
        runtime = FakeNriRuntime(socket_path)
        await runtime.start()
        await runtime.wait_ready()
        plugin.stop()
        await asyncio.wait_for(task, 5)
        await runtime.stop()
        assert runtime.registrations == 1
    asyncio.run(main())


def test_dials_at_the_first_backoff_while_nobody_listens(socket_path: str) -> None:
    # A runtime restarting leaves its socket refusing connections: the dial cadence must not double (with a
    # 30 s cap, hooks would be away up to half a minute after containerd is back).
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(socket_path)  # the file of a killed runtime: present, nobody accepting
    stale.close()

    async def main() -> None:
        plugin = NriPlugin(HookRunner([batchresource.new(HookDeps())]), Applier(Writes()), socket_path,
                           backoff_start=0.05, backoff_max=10.0)
        task = asyncio.create_task(plugin.run())
        try:
            deadline = asyncio.get_running_loop().time() + 5
            while plugin.stats.dials < 12:  # doubling from 50 ms would need 100 s for twelve dials
                assert asyncio.get_running_loop().time() < deadline, f"{plugin.stats.dials} dials in 5 s"
                await asyncio.sleep(0.05)
        finally:
            plugin.stop()
            await asyncio.wait_for(task, 5)
        assert plugin.stats.registrations == 0

    asyncio.run(main())


def test_fail_policy_reports_the_hook_error(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        bad = sandbox(annotations={"node.koordinator.sh/extended-resource-spec": "{not json"})
        with pytest.raises(RuntimeError, match=r"status 13: .*extended-resource-spec: not JSON"):
            await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
                pod=bad, container=container()), api_pb2.CreateContainerResponse)
        assert len(runtime.live) == 1  # still registered
    run(socket_path, scenario, policy=FailurePolicy.FAIL)


def test_ignore_policy_creates_unadjusted(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        bad = sandbox(annotations={"node.koordinator.sh/extended-resource-spec": "{not json"})
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=bad, container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust == api_pb2.ContainerAdjustment()
    run(socket_path, scenario)


# --- bad input ----------------------------------------------------------------------------------------------


def request_bytes(method: str, payload: bytes, service: str = "nri.pkg.api.v1alpha1.Plugin") -> bytes:
    return request_pb2.Request(service=service, method=method, payload=payload).SerializeToString()


@pytest.mark.parametrize(("body", "code", "text"), [
    (request_bytes("Frobnicate", b""), ttrpc.UNIMPLEMENTED, "Frobnicate not implemented"),
    (request_bytes("Configure", b"", service="nri.Other"), ttrpc.UNIMPLEMENTED, "nri.Other"),
    (request_bytes("Configure", b"\x0a\xff\xff"), ttrpc.INVALID_ARGUMENT, "bad ConfigureRequest"),
    (request_bytes("CreateContainer", b"\x0a\xff\xff"), ttrpc.OK, ""),  # Ignore: created unadjusted
    (b"\xff\xff\xff\xff", ttrpc.INVALID_ARGUMENT, "not a ttrpc request"),
])
def test_bad_requests_get_ttrpc_statuses_and_the_plugin_stays(socket_path: str, body: bytes, code: int,
                                                             text: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        response = await runtime.raw_call(conn, body)
        assert response.status.code == code and text in response.status.message
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
        assert runtime.registrations == 1
    run(socket_path, scenario)


def test_oversize_request_is_refused_and_skipped(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        response = await runtime.raw_call(conn, b"\0" * (frames.MESSAGE_LENGTH_MAX + 1), timeout=10)
        assert response.status.code == ttrpc.RESOURCE_EXHAUSTED
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
    run(socket_path, scenario)


def test_synchronize_over_4mib_is_answered_and_the_plugin_stays(socket_path: str) -> None:
    # containerd 1.7.24 sent a 5.3 MB Synchronize; refusing it would fail every registration (Koordinator #2678).
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
        assert runtime.registrations == 1 and len(runtime.live) == 1
    run(socket_path, scenario, huge_sync_bytes=5_300_000)


def test_unknown_message_types_and_stray_answers_are_dropped(socket_path: str) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        junk = frames.TTRPC_HEADER.pack(3, 7, 9, 0) + b"abc"  # type 9
        junk += frames.encode_message(9, frames.MessageType.RESPONSE, b"\x01")  # an answer nobody asked for
        await runtime.raw(conn, frames.encode_mux_frame(frames.PLUGIN_SERVICE_CONN, junk))
        await runtime.raw(conn, frames.encode_mux_frame(frames.RUNTIME_SERVICE_CONN,
                                                        frames.encode_message(99, frames.MessageType.RESPONSE,
                                                                              b"\xff")))
        await runtime.raw(conn, frames.encode_mux_frame(7, b"conn nobody opened"))
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
        assert runtime.registrations == 1
    run(socket_path, scenario)


@pytest.mark.parametrize("garbage", [
    frames.MUX_HEADER.pack(1, frames.MUX_RECEIVE_MAX + 1) + b"x",  # a corrupt trunk
    frames.MUX_HEADER.pack(1, 100) + b"truncated",  # then the runtime hangs up
])
def test_broken_trunk_reconnects_cleanly(socket_path: str, garbage: bytes) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        await runtime.raw(conn, garbage)
        if b"truncated" in garbage:
            conn.writer.close()
        await asyncio.wait_for(conn.closed.wait(), 5)
        conn = await runtime.wait_ready(2)
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
        assert runtime.registrations == 2 and len(runtime.live) == 1
    run(socket_path, scenario)


def test_event_mask_never_zero_nor_beyond_nri_0_6() -> None:
    assert event_mask(HookRunner([])) == 1 << (api_pb2.RUN_POD_SANDBOX - 1)
    every = Hook("all", "", frozenset(Stage), lambda ctx: None)
    assert event_mask(HookRunner([every])) <= 0x7FF


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.binary(max_size=64),  # raw garbage on the trunk
    st.builds(lambda conn, body: frames.encode_mux_frame(conn, body), st.sampled_from([1, 2, 3]),
              st.binary(max_size=64)),  # well-framed garbage
    st.builds(lambda sid, kind, body: frames.encode_mux_frame(
        1, frames.TTRPC_HEADER.pack(len(body), sid, kind, 0) + body),
        st.integers(0, 2**32 - 1), st.integers(0, 255), st.binary(max_size=64)),  # garbage ttrpc messages
), min_size=1, max_size=6))
def test_fuzzed_input_leaves_a_working_plugin(socket_path: str, chunks: list[bytes]) -> None:
    # Whatever arrives, the plugin either keeps serving or drops the connection and registers again.
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        with contextlib.suppress(ConnectionError):
            for chunk in chunks:
                await runtime.raw(conn, chunk)
        await asyncio.sleep(0.01)  # let the plugin chew on it
        # A runtime whose trunk got garbled times out and hangs up: the plugin must come back, once.
        conn.writer.close()
        conn = await runtime.wait_ready(2)
        answer = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert answer.adjust.linux.resources.cpu.shares.value == 512
        assert len(runtime.live) == 1
    run(socket_path, scenario)


# --- off the loop, within containerd's deadline; the failure policy for every error ----------------------


class BlockedWrites(Writes):
    """The executor stuck in a write (cgroup v1 memory.limit_in_bytes reclaiming) until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, updates: list[CgroupUpdate]) -> list[Result]:
        self.entered.set()
        assert self.release.wait(10)
        return super().__call__(updates)


def stage_hook(name: str, stage: Stage, fn: Callable[[HookContext], None]) -> Hook:
    return Hook(name, name, frozenset({stage}), fn)


def update_request(cid: str = "c9") -> Any:
    return api_pb2.UpdateContainerRequest(pod=sandbox(), container=container(cid))


def test_a_stuck_write_does_not_hold_the_answer_past_the_deadline(socket_path: str) -> None:
    writes = BlockedWrites()
    hooks = [batchresource.new(HookDeps()), stage_hook("idle", Stage.PRE_UPDATE_CONTAINER_RESOURCES,
                                             lambda ctx: ctx.write(CPU_IDLE, 1))]

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        loop = asyncio.get_running_loop()
        began = loop.time()
        answer = await runtime.call(conn, "UpdateContainer", update_request(), api_pb2.UpdateContainerResponse)
        assert loop.time() - began < 1.0  # the 0.3 s deadline, not the stuck write
        assert writes.entered.is_set() and not writes.updates  # the write was under way, still stuck
        assert answer.update[0].linux.resources.cpu.shares.value == 512
        assert plugin.stats.late_writes == 1
        # The loop stayed free meanwhile: a second request is answered too, while the write is still stuck.
        again = await runtime.call(conn, "CreateContainer", api_pb2.CreateContainerRequest(
            pod=sandbox(), container=container()), api_pb2.CreateContainerResponse)
        assert again.adjust.linux.resources.cpu.shares.value == 512
        writes.release.set()
        await asyncio.to_thread(wait_until, "the late write", lambda: writes.updates)

    try:
        run(socket_path, scenario, hooks, writes=writes, answer_deadline=0.3)
    finally:
        writes.release.set()
    assert [(u.key, u.value) for u in writes.updates] == [("cpu_idle", 1)]


def test_requests_are_answered_concurrently(socket_path: str) -> None:
    writes = BlockedWrites()
    hooks = [batchresource.new(HookDeps()), stage_hook("idle", Stage.PRE_UPDATE_CONTAINER_RESOURCES,
                                             lambda ctx: ctx.write(CPU_IDLE, 1))]

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        order: list[str] = []

        async def call(name: str, method: str, request: Any, answer: Any) -> None:
            await runtime.call(conn, method, request, answer)
            order.append(name)

        await asyncio.gather(
            call("update", "UpdateContainer", update_request(), api_pb2.UpdateContainerResponse),
            call("create", "CreateContainer", api_pb2.CreateContainerRequest(pod=sandbox(), container=container()),
                 api_pb2.CreateContainerResponse))
        # The create did not queue behind the update's stuck write.
        assert order == ["create", "update"]

    try:
        run(socket_path, scenario, hooks, writes=writes, answer_deadline=1.0)
    finally:
        writes.release.set()


@pytest.mark.parametrize("policy", [FailurePolicy.IGNORE, FailurePolicy.FAIL])
def test_hooks_over_the_deadline_follow_the_policy(socket_path: str, policy: FailurePolicy) -> None:
    release = threading.Event()

    def stuck(ctx: HookContext) -> None:
        assert release.wait(10)
        ctx.set("cpu_shares", 4)

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        request = api_pb2.CreateContainerRequest(pod=sandbox(), container=container())
        if policy is FailurePolicy.FAIL:
            with pytest.raises(RuntimeError, match=r"status 4: CreateContainer: hooks did not answer within 0.3 s"):
                await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
        else:
            answer = await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
            assert answer.adjust == api_pb2.ContainerAdjustment()
        release.set()

    try:
        run(socket_path, scenario, [stage_hook("stuck", Stage.PRE_CREATE_CONTAINER, stuck)], policy=policy,
            answer_deadline=0.3)
    finally:
        release.set()


BAD_VALUES: list[tuple[str, object, str]] = [
    ("oom_score_adj", -5000, "oom_score_adj -5000 outside -1000..1000"),  # validation
    ("cpu_shares", 1, "cpu.shares 1 outside 2..262144"),
    ("cpu_quota", 17, "cpu.quota 17: must be -1 or >= 1000"),
    ("cpuset_cpus", "0-3; echo", "is not a CPU list"),
    ("cpu_shares", "lots", "invalid literal for int"),  # conversion
    ("memory_limit", 1 << 70, "out of range"),  # encoding: not an int64
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_an_error_outside_the_runner_fails_only_under_fail(socket_path: str, key: str, value: object,
                                                           message: str) -> None:
    hook = stage_hook("bad", Stage.PRE_CREATE_CONTAINER, lambda ctx: ctx.set(key, value))
    request = api_pb2.CreateContainerRequest(pod=sandbox(), container=container())

    async def ignore(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        answer = await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
        assert answer.adjust == api_pb2.ContainerAdjustment()  # the container is created as asked
        assert plugin.stats.errors == 1

    async def fail(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        with pytest.raises(RuntimeError, match="status 13: CreateContainer: .*" + re.escape(message)):
            await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)

    run(socket_path, ignore, [hook])
    run(socket_path, fail, [hook], policy=FailurePolicy.FAIL)


@pytest.mark.parametrize(("policy", "code"), [(FailurePolicy.IGNORE, ttrpc.OK),
                                              (FailurePolicy.FAIL, ttrpc.INVALID_ARGUMENT)])
def test_an_undecodable_event_follows_the_policy(socket_path: str, policy: FailurePolicy, code: int) -> None:
    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        response = await runtime.raw_call(conn, request_bytes("UpdateContainer", b"\x0a\xff\xff"))
        assert response.status.code == code
        if code == ttrpc.OK:
            assert api_pb2.UpdateContainerResponse.FromString(response.payload) == api_pb2.UpdateContainerResponse()
    run(socket_path, scenario, policy=policy)


class FakeClock:
    """Time that passes only when a hook says so: how long a run "took" is up to the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_fast_hooks_run_inline_after_a_streak_and_go_back_to_the_thread_once_slow(socket_path: str) -> None:
    clock = FakeClock()
    threads: list[str] = []
    slow = threading.Event()

    def hook(ctx: HookContext) -> None:
        threads.append(threading.current_thread().name)
        if slow.is_set():
            slow.clear()
            clock.now += INLINE_BUDGET * 2  # over the budget: the next run goes to the thread
        ctx.set("cpu_shares", 4)

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        request = api_pb2.CreateContainerRequest(pod=sandbox(), container=container())

        async def create() -> None:
            answer = await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
            assert answer.adjust.linux.resources.cpu.shares.value == 4

        for _ in range(INLINE_AFTER + 1):
            await create()
        loop_thread = threading.current_thread().name
        assert threads == ["nri-hooks"] * INLINE_AFTER + [loop_thread]
        slow.set()
        await create()  # inline, over the budget
        await create()
        assert threads[-2:] == [loop_thread, "nri-hooks"]

    run(socket_path, scenario, [stage_hook("fast", Stage.PRE_CREATE_CONTAINER, hook)], clock=clock)


@pytest.mark.parametrize("policy", [FailurePolicy.IGNORE, FailurePolicy.FAIL])
def test_an_inline_run_over_the_deadline_follows_the_policy(socket_path: str, policy: FailurePolicy) -> None:
    runs: list[int] = []

    def hook(ctx: HookContext) -> None:
        runs.append(1)
        if len(runs) > INLINE_AFTER:
            # Inline (the fake clock says the runs are fast), and past the answer deadline.  The deadline is long
            # enough that the first runs, on the hooks thread, meet it on a loaded machine too.
            time.sleep(1.2)
        ctx.set("cpu_shares", 4)

    async def scenario(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
        conn = await runtime.wait_ready()
        request = api_pb2.CreateContainerRequest(pod=sandbox(), container=container())
        for _ in range(INLINE_AFTER):
            await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
        if policy is FailurePolicy.FAIL:
            with pytest.raises(RuntimeError, match=r"status 4: CreateContainer: hooks did not answer within 1 s"):
                await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
        else:
            answer = await runtime.call(conn, "CreateContainer", request, api_pb2.CreateContainerResponse)
            assert answer.adjust == api_pb2.ContainerAdjustment()
        assert plugin.stats.errors == 1

    run(socket_path, scenario, [stage_hook("late", Stage.PRE_CREATE_CONTAINER, hook)], policy=policy,
        answer_deadline=1.0, clock=FakeClock())
