"""What koord-runtime-proxy adds to CreateContainer: latency, and CPU against a bare server's (issue 22 target: the
proxy's CPU per relayed call <= 2x the CPU a bare Python gRPC server spends answering it).

Every party is its own process, so each call crosses real unix sockets between processes as under kubelet:

  containerd  a private containerd 1.6 (:class:`tests.fixtures.containerd.Containerd`) with one host-network
              BE pod (``koordinator.sh/qosClass=BE``, batch resources in the extended-resource-spec);
  fast        a trivial CRI backend (``multiprocessing`` spawn child) answering ``CreateContainer`` at once
              with a fixed id per resources, every other call with an empty message: it takes containerd's
              own noise out of the figures and leaves the proxy's cost alone;
  proxies     ``python -m runtimeproxy.cli`` per backend twice: "proxy" with an empty hook-server directory,
              "proxy+hooks" with a directory koordlet's registration is written into once its
              RuntimeHookService runs (the proxy's 1 s watcher picks it up; the bench waits until a
              CreateContainer through that proxy comes back with the hooked cpu shares, never a fixed sleep);
  hooks       koordlet's :class:`~koordlet.runtimehooks.hookserver.server.HookServer` with the daemon's hooks
              under the default gates, in a spawn child.

Two proxies per backend rather than one proxy whose registration is toggled: the three modes (direct,
proxy, proxy+hooks) are then interleaved round-robin request by request, in an order rotated every round,
so drift in containerd or the host (page cache, cgroup tree growth, a noisy neighbour) reaches all three
alike.  The pod is made before the proxies start, so each proxy learns it from its checkpoint rebuild as
after a restart, and the CreateContainer path looks the pod up in its store as in production.

Only CreateContainer is timed, from send to parsed answer; each container is removed right after through
the same endpoint (untimed) so names do not pile up and the proxy's checkpoint stays one container small.
Besides p50/p90/p99 per mode it prints the added latency as the difference of the percentiles (proxy minus
direct) and, because containerd's own CreateContainer varies by milliseconds, a paired estimate: median
and p99 of ``proxy_i - direct_i`` over the interleaved rounds.  The verdict is a CPU ratio on the fast backend:
the "proxy" process's CPU per relayed create+remove over the fast backend's CPU per pair it answered (a relay
does a server's work and a client's, so twice a bare server is the mark).  Needs root (containerd):

    python -m tests.bench.bench_runtimeproxy [--requests 300] [--fast-requests 2000] [--checkpoint-containers N]
                                             [--check]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from tests.bench.ratio import Ratio
from tests.bench.ratio import report as ratio_report

REPO_ROOT = Path(__file__).resolve().parents[2]

TARGET_ADDED_P99_MS = 2.0
"""The earlier issue's absolute target, printed for scale only."""
TARGET_CPU_RATIO = 2.0
"""Issue 22: a relay does a server's and a client's work, so at most twice a bare server's CPU per call."""
"""The issue's target: p99 latency the proxy adds to a CRI call when no hook server is registered."""
START_TIMEOUT = 60.0
"""Seconds for a child (spawned Python importing grpc and koordlet) to serve, on a loaded 2-core VM."""
PICKUP_TIMEOUT = 20.0
"""Seconds for a proxy's registry watcher (1 s poll) to pick up or drop koordlet's registration."""
CALL_TIMEOUT = 30.0
BE_SPEC = json.dumps({"containers": {"main": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                                "limits": {"kubernetes.io/batch-cpu": "1000",
                                                           "kubernetes.io/batch-memory": "256Mi"}}}})
BE_LABELS = {"koordinator.sh/qosClass": "BE"}
BE_ANNOTATIONS = {"node.koordinator.sh/extended-resource-spec": BE_SPEC}
ORIGINAL_SHARES = 2
HOOKED_SHARES = 512
"""cpu.shares the BE hooks give 500 milli batch-cpu (what shows a hooked call went through)."""
SLEEP = ["/bin/sleep", "3600"]
IMAGE = "koordlet.test/busybox:1"
CREATE = "/runtime.v1.RuntimeService/CreateContainer"


# --- child processes --------------------------------------------------------------------------------------


def serve_fast_backend(socket_path: str, control: Connection) -> None:
    """Child entry: a CRI runtime that answers at once.  CreateContainer gets ``fast-<cpu shares>`` (fixed
    for given resources, so a hooked call is visible); any other unary call an empty message."""
    from concurrent.futures import ThreadPoolExecutor

    def create(raw: bytes, context: Any) -> bytes:
        request = cri.CreateContainerRequest.FromString(raw)
        shares = request.config.linux.resources.cpu_shares
        return cri.CreateContainerResponse(container_id=f"fast-{shares}").SerializeToString()

    def empty(raw: bytes, context: Any) -> bytes:
        return b""

    class Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
        def service(self, details: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(create if details.method == CREATE else empty)

    server = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=[Handler()])
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    gc.freeze()
    control.send("ready")
    with contextlib.suppress(EOFError):
        control.recv()
    server.stop(None)


def serve_hooks(socket_path: str, control: Connection) -> None:
    """Child entry: koordlet's RuntimeHookService with the daemon's hooks; registration is the parent's job."""
    from koordlet.config import gates
    from koordlet.runtimehooks.deps import HookDeps
    from koordlet.runtimehooks.framework import HookRunner
    from koordlet.runtimehooks.hooks import build_hooks
    from koordlet.runtimehooks.hookserver.server import HookServer

    server = HookServer(HookRunner(build_hooks(HookDeps(gates=gates.resolve({})))), socket_path, None)
    server.start()
    gc.freeze()
    control.send("ready")
    with contextlib.suppress(EOFError):
        control.recv()
    server.stop()


class Child:
    """A spawn child that says "ready" on a pipe and stops when the pipe closes."""

    def __init__(self, ctx: Any, target: Callable[[str, Connection], None], socket_path: str, name: str) -> None:
        self.control, child_end = ctx.Pipe()
        self.process = ctx.Process(target=target, args=(socket_path, child_end), name=name, daemon=True)
        self.process.start()
        child_end.close()
        try:
            ready = self.control.poll(START_TIMEOUT) and self.control.recv() == "ready"
        except EOFError:  # the child died first
            ready = False
        if not ready:
            self.stop()
            raise RuntimeError(f"{name} child did not start")

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def stop(self) -> None:
        self.control.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


class ProxyProcess:
    """``python -m runtimeproxy.cli`` in front of ``backend``, its socket/config dir/checkpoint under ``tmp``."""

    def __init__(self, tmp: Path, name: str, backend: str, config_dir: Path) -> None:
        self.name = name
        self.socket = tmp / f"proxy-{name}.sock"
        self.log = tmp / f"proxy-{name}.log"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                         os.environ.get("PYTHONPATH")])))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([
                sys.executable, "-m", "runtimeproxy.cli",
                f"--koord-runtimeproxy-endpoint={self.socket}",
                f"--remote-runtime-service-endpoint={backend}",
                f"--remote-image-service-endpoint={backend}",
                f"--runtime-hook-config-dir={config_dir}",
                f"--checkpoint-path={tmp / (name + '.checkpoint.json')}",
                "--runtime-hook-timeout=2s",
            ], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        with grpc.insecure_channel(f"unix:{self.socket}") as channel:
            stub = cri_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"proxy {self.name} exited {self.proc.returncode}: {self.log.read_text()}")
                try:
                    stub.Version(cri.VersionRequest(version="v1"), timeout=1)
                    return
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"proxy {self.name} did not serve: {self.log.read_text()}") from None
                    time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# --- measuring --------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc (clock ticks, so only meaningful over many requests)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


@dataclass
class Endpoint:
    """One mode of one backend: a CRI stub on a socket, the process behind it (for CPU), and its samples."""

    mode: str
    socket: str
    pid: int | None
    channel: Any = None
    stub: Any = None
    latencies: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.stub = cri_grpc.RuntimeServiceStub(self.channel)  # type: ignore[no-untyped-call]


class Pod:
    """The one BE pod, and the CreateContainer requests made for it."""

    def __init__(self, pod_id: str, config: Any) -> None:
        self.pod_id = pod_id
        self.config = config
        self.attempts = itertools.count()

    def request(self) -> Any:
        """A ``main`` container (the name BE_SPEC gives batch resources to), each with its own attempt, so a
        name containerd has not released yet can never clash."""
        return cri.CreateContainerRequest(
            pod_sandbox_id=self.pod_id, sandbox_config=self.config,
            config=cri.ContainerConfig(
                metadata=cri.ContainerMetadata(name="main", attempt=next(self.attempts)),
                image=cri.ImageSpec(image=IMAGE), command=SLEEP, envs=[cri.KeyValue(key="PATH", value="/bin")],
                labels={"io.kubernetes.container.name": "main"},
                linux=cri.LinuxContainerConfig(
                    resources=cri.LinuxContainerResources(cpu_shares=ORIGINAL_SHARES, cpu_period=100_000),
                    security_context=cri.LinuxContainerSecurityContext(namespace_options=cri.NamespaceOption(
                        network=cri.NODE, pid=cri.CONTAINER, ipc=cri.POD)))))



def create_remove(endpoint: Endpoint, pod: Pod) -> tuple[float, str]:
    """(ms of CreateContainer, the id); the container is removed again, untimed."""
    request = pod.request()
    started = time.perf_counter()
    reply = endpoint.stub.CreateContainer(request, timeout=CALL_TIMEOUT)
    elapsed = (time.perf_counter() - started) * 1000
    endpoint.stub.RemoveContainer(cri.RemoveContainerRequest(container_id=reply.container_id), timeout=CALL_TIMEOUT)
    return elapsed, str(reply.container_id)


def containerd_shares(direct: Endpoint) -> Callable[[str], int]:
    def shares(container_id: str) -> int:
        status = direct.stub.ContainerStatus(cri.ContainerStatusRequest(container_id=container_id, verbose=True),
                                             timeout=CALL_TIMEOUT)
        spec = json.loads(status.info["info"])["runtimeSpec"]
        return int(spec["linux"]["resources"]["cpu"]["shares"])
    return shares


def fast_shares(container_id: str) -> int:
    return int(container_id.removeprefix("fast-"))


def created_shares(endpoint: Endpoint, pod: Pod, shares_of: Callable[[str], int]) -> int:
    """cpu shares the backend got for a container created through ``endpoint`` (then removed)."""
    reply = endpoint.stub.CreateContainer(pod.request(), timeout=CALL_TIMEOUT)
    try:
        return shares_of(reply.container_id)
    finally:
        endpoint.stub.RemoveContainer(cri.RemoveContainerRequest(container_id=reply.container_id),
                                      timeout=CALL_TIMEOUT)


def wait_for_shares(endpoint: Endpoint, pod: Pod, shares_of: Callable[[str], int], wanted: int) -> float:
    """Seconds until a CreateContainer through ``endpoint`` reaches the backend with ``wanted`` shares."""
    started = time.monotonic()
    while (got := created_shares(endpoint, pod, shares_of)) != wanted:
        if time.monotonic() - started > PICKUP_TIMEOUT:
            raise RuntimeError(f"{endpoint.mode}: cpu shares {got}, wanted {wanted} after {PICKUP_TIMEOUT:g} s")
        time.sleep(0.05)
    return time.monotonic() - started


@dataclass
class Result:
    backend: str
    endpoints: list[Endpoint]
    cpu_ms: dict[str, float]
    """Mode -> CPU ms its proxy process spent per create+remove pair."""
    backend_cpu_ms: float | None = None
    """CPU ms the backend process spent per create+remove pair it answered (every mode's calls reach it)."""

    def by_mode(self, mode: str) -> list[float]:
        return next(e.latencies for e in self.endpoints if e.mode == mode)

    def paired(self, mode: str) -> list[float]:
        return [p - d for p, d in zip(self.by_mode(mode), self.by_mode("direct"), strict=True)]


def interleaved(backend: str, endpoints: list[Endpoint], pod: Pod, rounds: int, warmup: int,
                backend_pid: int | None = None) -> Result:
    """``rounds`` CreateContainer calls per mode, round-robin in an order rotated every round."""
    for _ in range(warmup):
        for endpoint in endpoints:
            create_remove(endpoint, pod)
    for endpoint in endpoints:
        endpoint.latencies.clear()
    pids = {e.mode: e.pid for e in endpoints if e.pid is not None}
    before = {mode: cpu_seconds(pid) for mode, pid in pids.items()}
    backend_before = cpu_seconds(backend_pid) if backend_pid is not None else 0.0
    gc.collect()
    gc.disable()
    try:
        for i in range(rounds):
            for k in range(len(endpoints)):
                endpoint = endpoints[(i + k) % len(endpoints)]
                endpoint.latencies.append(create_remove(endpoint, pod)[0])
    finally:
        gc.enable()
    cpu = {mode: (cpu_seconds(pid) - before[mode]) * 1000 / rounds for mode, pid in pids.items()}
    backend_cpu = None
    if backend_pid is not None:
        backend_cpu = (cpu_seconds(backend_pid) - backend_before) * 1000 / (rounds * len(endpoints))
    return Result(backend, endpoints, cpu, backend_cpu)


@contextlib.contextmanager
def registered(directory: Path, endpoint: str) -> Iterator[None]:
    """koordlet's registration file in ``directory`` (written as koordlet writes it) for the block."""
    from koordlet.runtimehooks.hookserver.server import write_registration

    path = write_registration(str(directory), endpoint, "Ignore")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# --- report -----------------------------------------------------------------------------------------------


def report(result: Result, header: str) -> list[tuple[str, float]]:
    """Prints the table for one backend; returns (what, added p99 ms) for the no-hooks target."""
    direct = result.by_mode("direct")
    print(header)
    print(f"  {'mode':12s} {'p50':>8s} {'p90':>8s} {'p99':>8s} {'max':>8s} ms   "
          f"{'added p50':>9s} {'added p99':>9s}   {'paired med':>10s} {'paired p99':>10s}   {'proxy cpu/req':>13s}")
    checked = []
    for endpoint in result.endpoints:
        s = endpoint.latencies
        row = f"  {endpoint.mode:12s} {percentile(s, 50):8.3f} {percentile(s, 90):8.3f} {percentile(s, 99):8.3f} " \
              f"{max(s):8.3f}      "
        if endpoint.mode == "direct":
            print(row)
            continue
        added50 = percentile(s, 50) - percentile(direct, 50)
        added99 = percentile(s, 99) - percentile(direct, 99)
        pairs = result.paired(endpoint.mode)
        print(row + f"{added50:9.3f} {added99:9.3f}   {statistics.median(pairs):10.3f} {percentile(pairs, 99):10.3f}"
              f"   {result.cpu_ms[endpoint.mode]:10.3f} ms")
        if endpoint.mode == "proxy":
            checked.append((f"{result.backend}: added p99 without hooks (p99 proxy - p99 direct)", added99))
            checked.append((f"{result.backend}: paired p99 of (proxy_i - direct_i), without hooks",
                            percentile(pairs, 99)))
    return checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="timed CreateContainer per mode on containerd")
    parser.add_argument("--fast-requests", type=int, default=2000, help="timed CreateContainer per mode on the "
                        "fast backend")
    parser.add_argument("--warmup", type=int, default=10, help="untimed rounds first (x20 on the fast backend)")
    parser.add_argument("--checkpoint-containers", type=int, default=0, metavar="N",
                        help="containerd: N more containers (created, not started) in the pod before the proxies "
                        "start, so their checkpoints hold N containers as on a busy node (it is rewritten whole "
                        "on every change)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    if args.requests < 2 or args.fast_requests < 2:
        parser.error("--requests and --fast-requests must be at least 2")

    from tests.fixtures.containerd import Containerd, unavailable_reason, unique_pod_uid

    reason = unavailable_reason()
    if reason is not None:
        print(f"bench_runtimeproxy: skipped: {reason}")
        return 0
    ctx = multiprocessing.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kbrp-", dir="/tmp"))  # short: unix socket paths max 108 bytes
    children: list[Child] = []
    proxies: list[ProxyProcess] = []
    endpoints: list[Endpoint] = []
    try:
        with Containerd() as containerd:
            uid = unique_pod_uid()
            parent = f"/kubepods/besteffort/pod{uid}"
            client = containerd.client()
            pod_id = client.run_pod("bench", uid, "default", parent, labels=BE_LABELS, annotations=BE_ANNOTATIONS)
            pod = Pod(pod_id, client.pod_sandbox_config("bench", uid, "default", parent, BE_LABELS,
                                                        BE_ANNOTATIONS))
            for _ in range(args.checkpoint_containers):
                client.runtime.CreateContainer(pod.request(), timeout=CALL_TIMEOUT)
            fast_socket = str(tmp / "fast.sock")
            hook_socket = str(tmp / "koordlet.sock")
            children.append(Child(ctx, serve_fast_backend, fast_socket, "bench-fast-cri"))
            children.append(Child(ctx, serve_hooks, hook_socket, "bench-hookserver"))
            no_hooks, hooks_dir = tmp / "none.d", tmp / "hookserver.d"
            no_hooks.mkdir()
            hooks_dir.mkdir()
            for name, backend, directory in (("ctd", str(containerd.socket), no_hooks),
                                             ("ctdh", str(containerd.socket), hooks_dir),
                                             ("fast", fast_socket, no_hooks), ("fasth", fast_socket, hooks_dir)):
                proxies.append(ProxyProcess(tmp, name, backend, directory))
            for proxy in proxies:
                proxy.wait_ready()
            ctd = [Endpoint("direct", str(containerd.socket), None),
                   Endpoint("proxy", str(proxies[0].socket), proxies[0].proc.pid),
                   Endpoint("proxy+hooks", str(proxies[1].socket), proxies[1].proc.pid)]
            fast = [Endpoint("direct", fast_socket, None),
                    Endpoint("proxy", str(proxies[2].socket), proxies[2].proc.pid),
                    Endpoint("proxy+hooks", str(proxies[3].socket), proxies[3].proc.pid)]
            endpoints = ctd + fast
            shares_ctd = containerd_shares(ctd[0])
            with registered(hooks_dir, hook_socket):
                pickup = max(wait_for_shares(ctd[2], pod, shares_ctd, HOOKED_SHARES),
                             wait_for_shares(fast[2], pod, fast_shares, HOOKED_SHARES))
                for endpoint, shares_of in ((ctd[0], shares_ctd), (ctd[1], shares_ctd), (fast[0], fast_shares),
                                            (fast[1], fast_shares)):
                    got = created_shares(endpoint, pod, shares_of)
                    if got != ORIGINAL_SHARES:
                        raise RuntimeError(f"{endpoint.mode}: cpu shares {got}, wanted {ORIGINAL_SHARES}")
                gc.freeze()
                fast_result = interleaved("fast backend", fast, pod, args.fast_requests, args.warmup * 20,
                                          backend_pid=children[0].pid)
                ctd_result = interleaved("containerd 1.6", ctd, pod, args.requests, args.warmup)
            # Dropped again: the proxies stop calling the hook server before it stops.
            wait_for_shares(ctd[2], pod, shares_ctd, ORIGINAL_SHARES)
    except BaseException:
        for proxy in proxies:  # what the proxies said is the first clue
            with contextlib.suppress(OSError):
                tail = "\n".join(proxy.log.read_text(errors="replace").splitlines()[-15:])
                print(f"--- {proxy.log.name} (last lines) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        for endpoint in endpoints:
            endpoint.channel.close()
        for proxy in proxies:
            proxy.stop()
        for child in children:
            child.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"koord-runtime-proxy CreateContainer latency, modes interleaved round-robin, {os.cpu_count()} CPUs; "
          f"BE pod, hooks change cpu shares {ORIGINAL_SHARES} -> {HOOKED_SHARES} "
          f"(registration picked up in {pickup:.2f} s); proxy cpu/req covers CreateContainer + RemoveContainer")
    checked = report(ctd_result, f"containerd 1.6: {args.requests} calls per mode ({args.warmup} warm-up rounds, "
                                 f"{args.checkpoint_containers} other containers in the checkpoint)")
    checked += report(fast_result, f"fast backend (answers at once): {args.fast_requests} calls per mode "
                                   f"({args.warmup * 20} warm-up rounds)")
    for what, added in checked:
        print(f"  {what}: {added:.3f} ms (for scale: the earlier issue's target was {TARGET_ADDED_P99_MS:g} ms)")
    assert fast_result.backend_cpu_ms is not None
    print(f"  fast backend (a bare Python gRPC server): {fast_result.backend_cpu_ms:.3f} ms CPU per create+remove; "
          f"proxy without hooks: {fast_result.cpu_ms['proxy']:.3f} ms")
    return ratio_report([Ratio("koord-runtime-proxy passthrough", fast_result.cpu_ms["proxy"]
                               / fast_result.backend_cpu_ms, TARGET_CPU_RATIO,
                               "proxy CPU per relayed create+remove / the bare backend's CPU per answered pair, "
                               "interleaved")], args.check)


if __name__ == "__main__":
    sys.exit(main())
