"""NodeMetric ingest of one companion, this tree against the base commit (issue 22 target: CPU per report ratio
<= 0.5, twice as cheap).

This process runs :class:`~koordlet.companion.api.CompanionServer` on 127.0.0.1 with the bearer token on and an
``on_metric`` that only counts, so the figure is the API's own cost: gRPC, authentication and decoding the status
(:func:`~koordlet.apis.nodemetric.decode_status`, as the API does).  A child process (``multiprocessing``
spawn, so the two sides share no GIL, as koordlets on other hosts do not) runs several client threads, each with
its own channel like a node of its own, sending ``ReportNodeMetric`` back to back.  Every report is a realistic
status: node usage and the 5m/10m/30m aggregates, and ~100 ``podsMetric`` entries (mixed priority and QoS, real
looking names and quantities: memory in pages, some pods idle), serialised once per client as the koordlet's sink
does (about 17 KB of JSON).

It prints reports/s over the timed window, the companion's CPU per report, and the in-process cost of decoding
one status (the floor of the server's per-report CPU), for scale.  Last, the A/B (:mod:`tests.bench.ab`): the
same server and clients over the base commit's code and this tree's, batches interleaved, and the ratio of the
median server CPU per accepted report.  Runs without root:

    python -m tests.bench.bench_companion_ingest [--clients 8] [--seconds 5] [--pods 100] [--batches 10] [--check]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    AggregatedUsage,
    AggregationType,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from tests.bench import ab
from tests.bench.ratio import Ratio, report

TARGET_REPORTS_PER_SECOND = 1000.0
"""The earlier issue's absolute target, printed for scale only."""
TARGET_RATIO = 0.5
"""Issue 22: ingest at half the base commit's CPU per report."""
TOKEN = "bench-token"
START_TIMEOUT = 30.0
_POD_KINDS = ((PriorityClass.PROD, QoSClass.LS), (PriorityClass.PROD, QoSClass.LSR),
              (PriorityClass.MID, QoSClass.LS), (PriorityClass.BATCH, QoSClass.BE),
              (PriorityClass.FREE, QoSClass.BE), (PriorityClass.NONE, QoSClass.NONE))


def realistic_status(pods: int, seed: int) -> NodeMetricStatus:
    """A 64-core node's status with ``pods`` pods, as the koordlet's builder makes it."""
    rng = random.Random(seed)

    def usage(cores: float, gib: float) -> ResourceMap:
        # Memory in whole pages, as cgroups count it (so mostly "...Ki" on the wire); every tenth pod idle ("0").
        pages = int(gib * (1 << 30) * rng.uniform(0.5, 1.0)) // 4096
        return ResourceMap.from_usage(cores * rng.uniform(0.5, 1.0) if rng.random() > 0.1 else 0.0, pages * 4096)

    def windows() -> tuple[AggregatedUsage, ...]:
        return tuple(AggregatedUsage(seconds, {kind: usage(40, 180) for kind in AggregationType})
                     for seconds in (300.0, 600.0, 1800.0))

    pod_metrics = []
    for i in range(pods):
        priority, qos = _POD_KINDS[i % len(_POD_KINDS)]
        suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        pod_metrics.append(PodMetricInfo(name=f"svc-{i // 3:03d}-7d9f8c6b5-{suffix}", namespace=f"team-{i % 7}",
                                         pod_usage=usage(2.0, 4.0), priority=priority, qos=qos))
    return NodeMetricStatus(update_time=time.time(),
                            node_metric=NodeMetricInfo(usage(40, 180), windows(), usage(2, 8), windows()),
                            pods_metric=tuple(pod_metrics))


def decode_seconds(payload: bytes, rounds: int = 200) -> float:
    """Median seconds of :func:`decode_status` on one payload, in process."""
    # Imported here: the A/B's base worker imports this module over the base tree, which has no decode_status.
    from koordlet.companion.metricdecode import decode_status

    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        decode_status(payload)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc (clock ticks, so only meaningful over many requests)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- clients (child process) ------------------------------------------------------------------------------


def run_clients(port: int, clients: int, pods: int, warmup: float, seconds: float, control: Connection) -> None:
    """Child entry: ``clients`` threads, one channel each, reporting back to back; sends (ok, errors) per
    thread for the timed window."""
    import grpc

    from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc
    from koordlet.statesinformer.companion import CHANNEL_OPTIONS

    metadata = (("authorization", f"Bearer {TOKEN}"),)
    start_at = time.monotonic() + 0.2
    timed_from, timed_to = start_at + warmup, start_at + warmup + seconds
    results: list[tuple[int, int]] = [(0, 0)] * clients

    def client(index: int) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
        stub = companion_pb2_grpc.CompanionStub(channel)  # type: ignore[no-untyped-call]
        status = realistic_status(pods, seed=index)
        request = companion_pb2.ReportNodeMetricRequest(
            node_name=f"node-{index:04d}", status_json=json.dumps(status.to_json(), separators=(",", ":")).encode(),
            sent_at_unix_ms=int(time.time() * 1000))
        ok = errors = 0
        while time.monotonic() < start_at:
            time.sleep(0.01)
        while (now := time.monotonic()) < timed_to:
            try:
                accepted = stub.ReportNodeMetric(request, timeout=10, metadata=metadata).accepted
            except grpc.RpcError:
                accepted = False
            if now >= timed_from and time.monotonic() <= timed_to:
                ok, errors = (ok + 1, errors) if accepted else (ok, errors + 1)
        results[index] = (ok, errors)
        channel.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    control.send(("started", start_at))
    for thread in threads:
        thread.join()
    control.send(("done", results))


# --- A/B --------------------------------------------------------------------------------------------------


def serve_clients_on_demand(port: int, clients: int, pods: int, control: Connection) -> None:
    """Child entry of :class:`IngestRig`: on each ``seconds`` received, ``clients`` threads report back to back for
    that long; answers the number of reports accepted.  ``None`` ends it."""
    import grpc

    from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc

    metadata = (("authorization", f"Bearer {TOKEN}"),)
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(clients)]
    stubs = [companion_pb2_grpc.CompanionStub(c) for c in channels]  # type: ignore[no-untyped-call]
    requests = [companion_pb2.ReportNodeMetricRequest(
        node_name=f"node-{i:04d}", sent_at_unix_ms=int(time.time() * 1000),
        status_json=json.dumps(realistic_status(pods, seed=i).to_json(), separators=(",", ":")).encode())
        for i in range(clients)]
    control.send("ready")
    while (seconds := control.recv()) is not None:
        counts = [0] * clients
        until = time.monotonic() + seconds

        def client(index: int, until: float = until, counts: list[int] = counts) -> None:
            while time.monotonic() < until:
                try:
                    if stubs[index].ReportNodeMetric(requests[index], timeout=10, metadata=metadata).accepted:
                        counts[index] += 1
                except grpc.RpcError:
                    pass

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        control.send(sum(counts))
    for channel in channels:
        channel.close()


class IngestRig:
    """One side of the A/B run: a companion API server in this process and a client process; each
    :meth:`measure` lets the clients report for ``seconds`` and returns the server process's CPU seconds per
    accepted report (gRPC, authentication, decoding: what ingest costs the companion)."""

    def __init__(self, clients: int, pods: int, seconds: float) -> None:
        from koordlet.companion.api import CompanionServer

        self.seconds = seconds
        self.server = CompanionServer("127.0.0.1:0", TOKEN, lambda node: None, lambda node, status: None)
        self.server.start()
        context = multiprocessing.get_context("spawn")
        self.control, child_end = context.Pipe()
        self.child = context.Process(target=serve_clients_on_demand,
                                     args=(self.server.port, clients, pods, child_end), daemon=True)
        self.child.start()
        if not self.control.poll(START_TIMEOUT) or self.control.recv() != "ready":
            raise RuntimeError("ingest clients did not start")
        self.measure()  # warm up: channels connected, code paths hot

    def measure(self) -> list[float]:
        before = time.process_time()
        self.control.send(self.seconds)
        if not self.control.poll(self.seconds + START_TIMEOUT):
            raise RuntimeError("ingest clients did not finish")
        accepted = self.control.recv()
        return [(time.process_time() - before) / max(1, accepted)]

    def close(self) -> None:
        try:
            self.control.send(None)
            self.child.join(START_TIMEOUT)
        finally:
            if self.child.is_alive():
                self.child.terminate()
            self.server.stop(1.0)


# --- main -----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="client threads (one channel each)")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed window")
    parser.add_argument("--warmup", type=float, default=1.0, help="untimed reporting before the window")
    parser.add_argument("--pods", type=int, default=100, help="podsMetric entries per status")
    parser.add_argument("--batches", type=int, default=10,
                        help="A/B batches per side, interleaved (the machine's noise is about a tenth per batch)")
    parser.add_argument("--ab-seconds", type=float, default=2.0, dest="ab_seconds", help="A/B batch length")
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio misses its target")
    args = parser.parse_args(argv)

    from koordlet.companion.api import CompanionServer

    received = [0]
    lock = threading.Lock()

    def on_metric(node: str, status: NodeMetricStatus) -> None:
        with lock:
            received[0] += 1

    payload = json.dumps(realistic_status(args.pods, seed=0).to_json(), separators=(",", ":")).encode()
    decode = decode_seconds(payload)

    server = CompanionServer("127.0.0.1:0", TOKEN, lambda node: None, on_metric)
    server.start()
    parent, child_end = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=run_clients, args=(server.port, args.clients, args.pods, args.warmup, args.seconds, child_end))
    try:
        child.start()
        if not parent.poll(START_TIMEOUT):
            print("bench_companion_ingest: clients did not start", file=sys.stderr)
            return 2
        _, start_at = parent.recv()
        # Sample the server side over the same window (monotonic clocks are system-wide on Linux).
        time.sleep(max(0.0, start_at + args.warmup - time.monotonic()))
        with lock:
            before = received[0]
        cpu_before, wall_before = cpu_seconds(os.getpid()), time.monotonic()
        time.sleep(args.seconds)
        with lock:
            after = received[0]
        cpu_after, wall_after = cpu_seconds(os.getpid()), time.monotonic()
        if not parent.poll(args.seconds + START_TIMEOUT):
            print("bench_companion_ingest: clients did not finish", file=sys.stderr)
            return 2
        _, results = parent.recv()
        child.join(START_TIMEOUT)
    finally:
        if child.is_alive():
            child.terminate()
        server.stop(1.0)

    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    server_rate = (after - before) / (wall_after - wall_before)
    client_rate = ok / args.seconds
    per_report_cpu = (cpu_after - cpu_before) / max(1, after - before)
    print(f"companion NodeMetric ingest: {args.clients} client threads (own channel each) in a child process, "
          f"{args.pods} podsMetric per status ({len(payload) / 1024:.1f} KiB JSON), {args.seconds:g} s timed "
          f"after {args.warmup:g} s warm-up, bearer token on, TLS off")
    print(f"  accepted reports/s (server side)      {server_rate:9.0f}")
    print(f"  accepted reports/s (client side)      {client_rate:9.0f}   errors: {errors}")
    print(f"  companion CPU per report              {per_report_cpu * 1e3:9.3f} ms "
          f"(process, includes gRPC and the event loop)")
    print(f"  decode alone per report (median)      {decode * 1e3:9.3f} ms "
          f"(decode_status, in process: the floor of the figure above)")
    print(f"  one core's ceiling at that decode     {1 / decode:9.0f} reports/s")
    result = ab.interleave("tests.bench.bench_companion_ingest:IngestRig",
                           {"clients": args.clients, "pods": args.pods, "seconds": args.ab_seconds}, args.batches)
    for label, samples in (("base", result.base), ("this tree", result.current)):
        print(f"  A/B {label}: companion CPU per report, median {statistics.median(samples) * 1e3:.3f} ms "
              f"over {len(samples)} batches of {args.ab_seconds:g} s")
    return report([Ratio("companion NodeMetric ingest", result.ratio, TARGET_RATIO,
                         f"server CPU per accepted report, this tree / base {ab.BASE_COMMIT[:7]}")], args.check)


if __name__ == "__main__":
    sys.exit(main())
