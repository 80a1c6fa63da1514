"""koord-companion holding a big cluster (issue 22 item 2): 5,000 nodes and 150,000 pods in the fake kube-apiserver.

The companion runs as its own process (``koord-companion``, leader, shared-token auth) against the fake
kube-apiserver of this process (:mod:`tests.fixtures.fakeapiserver`, its lists paged with ``limit``/``continue``).
Every pod carries what real ones carry and the companion does not need (env, a kubectl last-applied copy,
managed fields: about 3 KB each), so keeping whole Pods would show.  Measured:

- start: from the process start until its pod list is done (every page asked) and its pod watch is open;
- then for ``--minutes``: one NodeMetric report per node per minute from a client process (5,000 a minute, each
  with 30 pod entries), and a kube-scheduler extender request (NodeNames form, every node) every 2 s;
- the companion's CPU per minute and its peak RSS, which must stay under the memory limit of its manifest
  (``manifests/companion/deployment.yaml``): that is the ratio this bench prints.

    python -m tests.bench.bench_companion_cluster [--nodes 5000] [--pods 150000] [--minutes 2] [--check]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil
import yaml

from koordlet.apis.quantity import int_value
from tests.bench.bench_companion_ingest import realistic_status
from tests.bench.ratio import Ratio, report
from tests.fixtures.fakeapiserver import FakeApiServer, make_configmap, make_node, make_pod
from tests.fixtures.fakekubelet import make_tls_files

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "bench-cluster-token"
PAGE = 500
START_TIMEOUT = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_limit_bytes() -> int:
    """The companion container's memory limit in the manifest."""
    for document in yaml.safe_load_all((REPO_ROOT / "manifests/companion/deployment.yaml").read_text()):
        if isinstance(document, dict) and document.get("kind") == "Deployment":
            for container in document["spec"]["template"]["spec"]["containers"]:
                return int_value(container["resources"]["limits"]["memory"])
    raise RuntimeError("no Deployment with a memory limit in manifests/companion/deployment.yaml")


def heavy_pod(i: int, node: str) -> dict[str, Any]:
    pod = make_pod(f"app-{i:06d}", f"team-{i % 40}", node)
    pod["metadata"]["labels"] = {"app": f"app-{i // 10}", "koordinator.sh/qosClass": "LS" if i % 3 else "BE"}
    pod["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1200}
    pod["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update",
                                         "fieldsV1": {"f:spec": {"f:containers": {"k": "v" * 300}}}}]
    pod["spec"]["containers"][0].update(
        env=[{"name": f"VAR_{k}", "value": "v" * 40} for k in range(12)],
        resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}})
    pod["status"] = {"phase": "Running", "qosClass": "Burstable",
                     "conditions": [{"type": "PodScheduled", "status": "True",
                                     "lastTransitionTime": "2026-11-26T10:00:00Z"}]}
    return pod


def report_nodes(port: int, nodes: int, per_minute: int, seconds: float, control: Connection) -> None:
    """Child entry: reports ``per_minute`` NodeMetrics a minute, round-robin over the nodes, for ``seconds``."""
    import grpc

    from koordlet.apis.proto.companion.v1 import companion_pb2, companion_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = companion_pb2_grpc.CompanionStub(channel)  # type: ignore[no-untyped-call]
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    body = json.dumps(realistic_status(30, seed=1).to_json(), separators=(",", ":")).encode()
    control.send("ready")
    interval = 60.0 / per_minute
    sent = failed = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        request = companion_pb2.ReportNodeMetricRequest(node_name=f"node-{sent % nodes:05d}", status_json=body,
                                                        sent_at_unix_ms=int(time.time() * 1000))
        try:
            stub.ReportNodeMetric(request, timeout=10, metadata=metadata)
        except grpc.RpcError:
            failed += 1
        sent += 1
        time.sleep(max(0.0, start + sent * interval - time.monotonic()))
    channel.close()
    control.send((sent, failed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio misses its target")
    args = parser.parse_args(argv)
    companion_script = shutil.which("koord-companion") or str(Path(sys.executable).parent / "koord-companion")
    tmp = Path(tempfile.mkdtemp(prefix="kbcc-"))
    (tmp / "tls").mkdir()
    apiserver = FakeApiServer(make_tls_files(tmp / "tls"), tmp / "apiserver-token")
    companion: subprocess.Popen[bytes] | None = None
    try:
        seeded = time.monotonic()
        apiserver.seed(make_configmap("slo-controller-config", "koordinator-system", {
            "colocation-config": json.dumps({"enable": True})}))
        for n in range(args.nodes):
            apiserver.seed(make_node(f"node-{n:05d}", capacity={"cpu": "64", "memory": "256Gi", "pods": "110"}))
        for i in range(args.pods):
            apiserver.seed(heavy_pod(i, f"node-{i % args.nodes:05d}"))
        seeded = time.monotonic() - seeded
        token_file = tmp / "token"
        token_file.write_text(TOKEN)
        grpc_port, extender_port = free_port(), free_port()
        log = open(tmp / "companion.log", "wb")  # noqa: SIM115 - closed with the process below
        started = time.monotonic()
        companion = subprocess.Popen([
            companion_script, "--grpc-addr", f"127.0.0.1:{grpc_port}", "--extender-addr", f"127.0.0.1:{extender_port}",
            "--metrics-addr", "", "--leader-elect", "false", "--auth", "token", "--token-file", str(token_file),
            "--kube-api-server", apiserver.host, "--kube-token-file", str(apiserver.token_file),
            "--kube-ca-file", apiserver.ca_file], stdout=log, stderr=log)
        process = psutil.Process(companion.pid)
        pages = -(-args.pods // PAGE)
        while not any(r.resource == "pods" and r.verb == "watch" for r in apiserver.requests):
            if companion.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                print((tmp / "companion.log").read_text()[-3000:], file=sys.stderr)
                return 2
            time.sleep(0.2)
        start_seconds = time.monotonic() - started
        pod_lists = sum(1 for r in apiserver.requests if r.resource == "pods" and r.verb == "list")
        rss_after_start = process.memory_info().rss

        context = multiprocessing.get_context("spawn")
        control, child_end = context.Pipe()
        seconds = args.minutes * 60
        child = context.Process(target=report_nodes, args=(grpc_port, args.nodes, args.nodes, seconds, child_end),
                                daemon=True)
        child.start()
        control.recv()
        cpu_before = process.cpu_times()
        window = time.monotonic()
        rss_max = rss_after_start
        names = [f"node-{n:05d}" for n in range(args.nodes)]
        extender_ms: list[float] = []
        stop = threading.Event()

        def schedule() -> None:
            body = json.dumps({"Pod": heavy_pod(10**7, ""), "Nodes": None, "NodeNames": names}).encode()
            while not stop.wait(2.0):
                began = time.perf_counter()
                request = urllib.request.Request(f"http://127.0.0.1:{extender_port}/filter", body,
                                                 {"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=30).read()
                extender_ms.append((time.perf_counter() - began) * 1000)

        scheduler = threading.Thread(target=schedule, daemon=True)
        scheduler.start()
        while time.monotonic() - window < seconds:
            rss_max = max(rss_max, process.memory_info().rss)
            time.sleep(1.0)
        stop.set()
        scheduler.join(30)
        cpu_after = process.cpu_times()
        minutes = (time.monotonic() - window) / 60
        sent, failed = control.recv()
        child.join(30)
    finally:
        if companion is not None and companion.poll() is None:
            companion.terminate()
            companion.wait(30)
        apiserver.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    limit = memory_limit_bytes()
    print(f"companion over {args.nodes} nodes and {args.pods} pods (seeded in {seeded:.0f} s, ~3 KB each)")
    print(f"  start: {start_seconds:.1f} s until its pod watch opened ({pod_lists} pod list pages, {pages} expected)")
    print(f"  RSS: {rss_after_start / 2**20:.0f} MiB after start, {rss_max / 2**20:.0f} MiB peak "
          f"(manifest limit {limit / 2**20:.0f} MiB)")
    print(f"  {sent} NodeMetric reports in {minutes:.1f} min ({failed} failed): CPU {cpu / minutes:.1f} s per minute "
          f"({cpu / minutes / 60:.1%} of one core)")
    if extender_ms:
        extender_ms.sort()
        print(f"  extender /filter over {args.nodes} nodes: median {extender_ms[len(extender_ms) // 2]:.1f} ms, "
              f"max {extender_ms[-1]:.1f} ms ({len(extender_ms)} requests)")
    return report([Ratio("companion RSS / manifest limit (big cluster)", rss_max / limit, 1.0,
                         f"peak RSS with {args.nodes} nodes and {args.pods} pods, ingesting and serving")],
                  args.check)


if __name__ == "__main__":
    sys.exit(main())
