"""The NRI plugin against real containerd 1.7.24 (NRI v0.6.1): pods created over CRI get their containers'
cgroups from koordlet's answers, read back from the real cgroup files (v1 on the host, v2 in the guest of
``python -m tests.vm``); a BE pod's cgroup gets the sums of its containers' batch resources from the NRI
RunPodSandbox event (a notification: the plugin writes them through the executor); the koordlet process
restarted ten times while pods come and go registers exactly once per start and adjusts every pod created
while it is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.config import gates
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.update import CgroupUpdate, Result
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import Hook, HookCallRecorder, HookContext, HookRunner, Stage
from koordlet.runtimehooks.hooks import build_hooks
from koordlet.runtimehooks.nri.plugin import NriPlugin
from koordlet.shadowmodes import ShadowModes
from koordlet.system.hostpaths import HostPaths
from koordlet.system.layout import detect_layout
from tests.fixtures.containerd import (
    Containerd,
    CriClient,
    cgroup_dir,
    container_cgroup_files,
    read_container_cgroup_files,
    unique_pod_uid,
)
from tests.fixtures.isolation import koordlet_run_args, private_settings, write_config
from tests.fixtures.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
BE_SPEC = json.dumps({"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                                "limits": {"kubernetes.io/batch-cpu": "1000",
                                                           "kubernetes.io/batch-memory": "256Mi"}}}})
BE_LABELS = {"koordinator.sh/qosClass": "BE"}
BE_ANNOTATIONS = {"node.koordinator.sh/extended-resource-spec": BE_SPEC}
SLEEP = ["/bin/sleep", "3600"]




def be_pod(client: CriClient, containerd: Containerd, name: str) -> tuple[str, str, str]:
    """A BE pod with batch resources and its running container: (pod id, cgroup parent, container id)."""
    uid = unique_pod_uid()
    parent = containerd.pod_parent("besteffort", uid)
    pod_id = client.run_pod(name, uid, "default", parent, labels=BE_LABELS, annotations=BE_ANNOTATIONS)
    container_id = client.create_container(pod_id, None, "main", SLEEP)
    client.start(container_id)
    return pod_id, parent, container_id


def assert_be_adjusted(parent: str, container_id: str, cgroup_version: int = 1) -> None:
    # 500m batch-cpu request, 1000m batch-cpu limit, 256Mi batch-memory limit.
    expected = container_cgroup_files(cgroup_version, shares=512, quota_us=100_000, memory_bytes=256 << 20)
    assert read_container_cgroup_files(parent, container_id, expected) == expected


def remove_pod(client: CriClient, pod_id: str) -> None:
    client.stop_pod(pod_id)
    client.remove_pod(pod_id)


# --- in-process plugin with the daemon's hooks ---------------------------------------------------------------


class Recorded:
    def __init__(self) -> None:
        self.updates: list[CgroupUpdate] = []

    def __call__(self, updates: list[CgroupUpdate]) -> list[Result]:
        self.updates += updates
        return []


def many_env(count: int) -> Hook:
    def fn(ctx: HookContext) -> None:
        if ctx.request.pod.labels.get("koordlet.test/many-env"):
            for i in range(count):
                ctx.set_entry("env", f"KOORDLET_TEST_{i:03d}", "v" * 48)
    return Hook("zz-many-env", "test: an adjustment larger than 4 KiB", frozenset({Stage.PRE_CREATE_CONTAINER}), fn)


@contextlib.contextmanager
def serving(nri: NriPlugin) -> Iterator[NriPlugin]:
    """``nri`` running on its own loop in a thread, configured by the runtime."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(nri.run(),), daemon=True)
    thread.start()
    try:
        wait_until("the plugin to be configured", lambda: nri.stats.configured)
        yield nri
    finally:
        loop.call_soon_threadsafe(nri.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def plugin(containerd17: Containerd) -> Iterator[NriPlugin]:
    hooks = [*build_hooks(HookDeps(gates=gates.resolve({}))), many_env(120)]
    with serving(NriPlugin(HookRunner(hooks), Applier(Recorded()), str(containerd17.nri_socket))) as nri:
        yield nri


def test_be_and_ls_containers_get_koordlets_resources(containerd17: Containerd, plugin: NriPlugin,
                                                      cgroup_version: int) -> None:
    client = containerd17.client()
    _, be_parent, be_container = be_pod(client, containerd17, "be")
    assert_be_adjusted(be_parent, be_container, cgroup_version)

    # An LSR pod bound to CPU 1 by the scheduler: cpuset from resource-status, CFS quota lifted.
    uid = unique_pod_uid()
    ls_parent = containerd17.pod_parent("", uid)
    ls_pod = client.run_pod("lsr", uid, "default", ls_parent, labels={"koordinator.sh/qosClass": "LSR"},
                            annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset": "1"}'})
    ls_container = client.create_container(
        ls_pod, None, "main", SLEEP, resources=client_resources(cpu_quota=200_000, cpu_shares=2048))
    client.start(ls_container)
    # cpuset from the annotation, quota lifted, shares the CRI's (untouched).
    expected = container_cgroup_files(cgroup_version, cpus="1", quota_us=-1, shares=2048)
    assert read_container_cgroup_files(ls_parent, ls_container, expected) == expected
    assert plugin.stats.errors == 0


def test_in_shadow_mode_the_container_gets_the_runtimes_values_and_the_call_says_what_koordlet_would_set(
        containerd17: Containerd, cgroup_version: int) -> None:
    """Every hook in shadow mode: the same BE pod as above starts with what containerd alone gives a BestEffort
    container (no batch resources), and the recorded CreateContainer call holds what the hooks would have set."""
    recorder = HookCallRecorder(size=32)
    deps = HookDeps(gates=gates.resolve({}), shadow=ShadowModes(default=True, kind="hook"))
    runner = HookRunner(build_hooks(deps), recorder=recorder, shadow=deps.shadow)
    applied = Recorded()
    with serving(NriPlugin(runner, Applier(applied), str(containerd17.nri_socket))) as nri:
        client = containerd17.client()
        pod_id, parent, container = be_pod(client, containerd17, "be-shadow")
        active = container_cgroup_files(cgroup_version, shares=512, quota_us=100_000, memory_bytes=256 << 20)
        untouched = read_container_cgroup_files(parent, container, active)
        # None of koordlet's values reached the container: the runtime's defaults (no quota, no limit) are there.
        assert all(untouched[name] != value for name, value in active.items()), untouched
        unlimited = container_cgroup_files(cgroup_version, quota_us=-1)
        assert {name: untouched[name] for name in unlimited} == unlimited, untouched
        create = [c for c in recorder.recent(32) if c.stage == Stage.PRE_CREATE_CONTAINER.value]
        assert create and create[-1].ok and create[-1].adjustment == {}, create
        assert {k: create[-1].intended.get(k) for k in ("cpu_shares", "cpu_quota", "memory_limit")} == {
            "cpu_shares": 512, "cpu_quota": 100_000, "memory_limit": 256 << 20}, create[-1].intended
        assert applied.updates == [] and nri.stats.errors == 0
        remove_pod(client, pod_id)


def test_an_adjustment_over_4k_reaches_the_container(containerd17: Containerd, plugin: NriPlugin) -> None:
    client = containerd17.client()
    uid = unique_pod_uid()
    parent = containerd17.pod_parent("besteffort", uid)
    pod_id = client.run_pod("env", uid, "default", parent, labels={**BE_LABELS, "koordlet.test/many-env": "1"},
                            annotations=BE_ANNOTATIONS)
    container_id = client.create_container(pod_id, None, "main", SLEEP)
    client.start(container_id)
    assert_be_adjusted(parent, container_id)
    pid = wait_until("the container's process", lambda: (cgroup_dir(parent, container_id) / "cgroup.procs")
                     .read_text().split())[0]
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode()
                   .split("\0") if "=" in item)
    ours = {k: v for k, v in environ.items() if k.startswith("KOORDLET_TEST_")}
    assert len(ours) == 120 and set(ours.values()) == {"v" * 48}
    assert sum(len(k) + len(v) for k, v in ours.items()) > 4096 + 2048  # well past one 4096-byte frame


TWO_CONTAINERS = json.dumps({"containers": {
    "main": {"requests": {"kubernetes.io/batch-cpu": "500"},
             "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "256Mi"}},
    "side": {"requests": {"kubernetes.io/batch-cpu": "300"},
             "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "128Mi"}}}})


def test_be_pod_cgroup_converges_from_the_run_pod_sandbox_event(containerd17: Containerd,
                                                                 cgroup_version: int) -> None:
    """No reconciler runs here: the pod cgroup gets its values from the plugin's answer to NRI's
    RunPodSandbox event alone, written through the daemon's executor on the real cgroups."""
    executor = ResourceExecutor(detect_layout(HostPaths()), time.monotonic, None)
    hooks = build_hooks(HookDeps(gates=gates.resolve({})))
    with serving(NriPlugin(HookRunner(hooks), Applier(executor.apply), str(containerd17.nri_socket))) as nri:
        client = containerd17.client()
        uid = unique_pod_uid()
        parent = containerd17.pod_parent("besteffort", uid)
        containerd17.make_pod_cgroup(parent, cgroup_version)
        pod_id = client.run_pod("be-sums", uid, "default", parent, labels=BE_LABELS,
                                annotations={"node.koordinator.sh/extended-resource-spec": TWO_CONTAINERS})
        # 500m + 300m requested -> 800 x 1024 / 1000 = 819 shares; 1000m + 500m limits -> 150 ms per
        # 100 ms; 256Mi + 128Mi.
        pod_files = container_cgroup_files(cgroup_version, shares=819, quota_us=150_000, memory_bytes=384 << 20)
        with contextlib.suppress(AssertionError):  # the assert below shows what the files hold instead
            wait_until("the pod cgroup to get the batch sums",
                       lambda: read_container_cgroup_files(parent, "", pod_files) == pod_files)
        assert read_container_cgroup_files(parent, "", pod_files) == pod_files
        for name, shares, quota_us, memory in (("main", 512, 100_000, 256 << 20),
                                               ("side", 307, 50_000, 128 << 20)):
            container_id = client.create_container(pod_id, None, name, SLEEP)
            client.start(container_id)
            expected = container_cgroup_files(cgroup_version, shares=shares, quota_us=quota_us, memory_bytes=memory)
            assert read_container_cgroup_files(parent, container_id, expected) == expected
        assert read_container_cgroup_files(parent, "", pod_files) == pod_files
        remove_pod(client, pod_id)
        assert nri.stats.errors == 0


def client_resources(**fields: int) -> Any:
    from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
    return cri.LinuxContainerResources(cpu_period=100_000, **fields)


# --- the koordlet process, restarted during pod churn ----------------------------------------------------------


class Koordlet:
    """``koordlet run --standalone`` registered with this containerd's NRI socket, on its pods' kube parent."""

    def __init__(self, tmp: Path, containerd: Containerd) -> None:
        self.config = write_config(tmp / "koordlet.yaml", private_settings(
            tmp, containerd.cgroup_prefix, logFormat="json", discoverKubepods=False, qos={"evictor": "dry-run"},
            runtimeHooks={"enableServer": False, "nriSocketPath": str(containerd.nri_socket)}))
        self.args = koordlet_run_args(["--standalone", "--config", str(self.config)])
        self.log = tmp / "koordlet.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "koordlet.cli.koordlet", "run", *self.args],
                                         stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)

    def stop(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(30)
        self.proc = None


def registrations(containerd: Containerd) -> list[str]:
    return re.findall(r'plugin \\?"00-koordlet_nri\\?" connected|connection to plugin \\?"00-koordlet_nri\\?" '
                      r'closed', containerd.log_path.read_text())


def test_ten_restarts_during_pod_churn(containerd17: Containerd, tmp_path: Path) -> None:
    koordlet = Koordlet(tmp_path, containerd17)
    client = containerd17.client()
    stop_churn = threading.Event()
    churned: list[int] = []
    failures: list[BaseException] = []

    def churn() -> None:
        # Pods come and go the whole time, also while koordlet is down (then NRI creates them unadjusted).
        churn_client = containerd17.client()
        while not stop_churn.is_set():
            try:
                pod_id, _, _ = be_pod(churn_client, containerd17, f"churn-{len(churned)}")
                remove_pod(churn_client, pod_id)
                churned.append(1)
            except BaseException as exc:  # reported after the loop, with the restart it happened in
                failures.append(exc)
                return

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        for restart in range(1, 11):
            koordlet.start()
            wait_until(f"registration #{restart}",
                       lambda n=restart: sum("connected" in e for e in registrations(containerd17)) >= n, 30)
            pod_id, parent, container_id = be_pod(client, containerd17, f"after-{restart}")
            assert_be_adjusted(parent, container_id)
            remove_pod(client, pod_id)
            koordlet.stop(signal.SIGKILL if restart % 2 else signal.SIGTERM)  # crashes and clean stops
            wait_until(f"containerd to drop connection #{restart}",
                       lambda n=restart: sum("closed" in e for e in registrations(containerd17)) >= n, 15)
    finally:
        stop_churn.set()
        churner.join(60)
        if koordlet.proc is not None:
            koordlet.stop(signal.SIGKILL)
    assert not failures, failures
    assert len(churned) >= 10, "pods were created and removed throughout"
    events = registrations(containerd17)
    assert sum("connected" in e for e in events) == 10, events
    live = peak = 0
    for event in events:
        live += 1 if "connected" in event else -1
        peak = max(peak, live)
    assert peak == 1, f"two koordlet registrations were live at once: {events}"
    assert "#2:" not in containerd17.log_path.read_text()
