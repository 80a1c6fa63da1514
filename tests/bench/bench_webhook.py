"""Latency of the pod admission webhook: an AdmissionReview round trip over HTTPS against its floor.

One kept-alive HTTPS connection (as kube-apiserver holds one to a webhook) sends ``/mutate-pod`` reviews of a pod
that a BE ClusterColocationProfile mutates (labels, priority, batch resources, the extended-resource-spec
annotation); the server is the companion's (:class:`WebhookHTTPServer`: limited HTTP server, TLS, metrics, the
decision log).  The floor is the same server stack - same TLS, same bounded reads, same connection - with a trivial
handler that reads the request body and writes back a canned answer of the same size, so the ratio is what the
review itself costs (JSON decoding, the profile, the patch, encoding) on top of moving the bytes.  It also prints
the in-process cost of ``mutate()`` alone.  Figures and ratios only, never a timed assert:

    python -m tests.bench.bench_webhook [--requests 2000]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import http.client
import json
import logging
import math
import ssl
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from prometheus_client import CollectorRegistry

from koordlet.companion.certs import issue
from koordlet.companion.colocation.admission import PriorityClassInfo, mutate
from koordlet.companion.colocation.profile import Profile
from koordlet.companion.colocation.webhook import MUTATE_PATH, AdmissionMetrics, WebhookHTTPServer, _Handler

PROFILE = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "batch-workload-profile"},
           "spec": {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                    "selector": {"matchLabels": {"app-type": "batch"}}, "qosClass": "BE",
                    "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler",
                    "labels": {"koordinator.sh/mutated": "true"}}}
OTHER_PROFILES = 20
"""Profiles that do not select the pod (other namespaces), as a cluster has several."""


class View:
    def __init__(self) -> None:
        others = [{**PROFILE, "metadata": {"name": f"team-{i:02d}"},
                   "spec": {**PROFILE["spec"], "namespaceSelector": {"matchLabels": {"team": f"t{i}"}}}}
                  for i in range(OTHER_PROFILES)]
        self._profiles = [Profile.from_object(p) for p in [PROFILE, *others]]

    def profiles(self) -> Sequence[Profile]:
        return self._profiles

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return {"koordinator.sh/enable-colocation": "true", "kubernetes.io/metadata.name": name}

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return PriorityClassInfo(5500, "PreemptLowerPriority")


def review(i: int) -> dict[str, Any]:
    """A Deployment-made pod of realistic size: two containers, env, probes, volumes, owner references."""
    def container(name: str) -> dict[str, Any]:
        return {"name": name, "image": f"registry.example.com/batch/{name}:1.2.3", "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/run", "--config", "/etc/app/config.yaml"],
                "env": [{"name": f"ENV_{k}", "value": f"value-{k}"} for k in range(8)],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                                 {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/"
                                                                         "serviceaccount", "readOnly": True}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "spark-job-7d9f8-", "namespace": "batch-jobs",
                        "labels": {"app-type": "batch", "app": "spark-job", "pod-template-hash": "7d9f8"},
                        "annotations": {"example.com/owner": "data-team"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "spark-job-7d9f8",
                                             "uid": "5d1f0c1e-0000-4000-8000-000000000001", "controller": True,
                                             "blockOwnerDeletion": True}]},
           "spec": {"containers": [container("driver"), container("sidecar")], "restartPolicy": "Always",
                    "serviceAccountName": "default", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}],
                    "volumes": [{"name": "config", "configMap": {"name": "spark-job-config"}},
                                {"name": "kube-api-access", "projected": {"sources": [
                                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": f"00000000-0000-4000-8000-{i:012d}", "kind": {"group": "", "version": "v1",
                                                                          "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "batch-jobs", "operation": "CREATE",
                        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                                     "groups": ["system:serviceaccounts", "system:authenticated"]},
                        "object": pod, "oldObject": None, "dryRun": False,
                        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def floor_handler(canned: bytes) -> type[_Handler]:
    class Floor(_Handler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's method names)
            with self.request_slot():
                self.read_body()
            self._send(HTTPStatus.OK, canned)

    return Floor


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def round_trips(port: int, ca_pem: bytes, bodies: list[bytes], path: str) -> list[float]:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    times: list[float] = []
    try:
        for body in bodies:
            start = time.perf_counter()
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            data = answer.read()
            times.append((time.perf_counter() - start) * 1000)
            if answer.status != 200 or not data:
                raise SystemExit(f"{path}: answer {answer.status}")
    finally:
        connection.close()
    return times


def serve(canned: bytes | None) -> tuple[WebhookHTTPServer, bytes, threading.Thread]:
    server = WebhookHTTPServer(("127.0.0.1", 0), View(), AdmissionMetrics(CollectorRegistry()))
    if canned is not None:
        server.RequestHandlerClass = floor_handler(canned)
    pair = issue(["127.0.0.1"], datetime.datetime.now(datetime.UTC))
    server.set_tls(pair.cert_pem, pair.key_pem)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, pair.ca_pem, thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    opts = parser.parse_args(argv)
    # The "pod mutated" INFO line is written per pod in production; keep it on, to a sink, so its cost counts.
    logging.basicConfig(level=logging.INFO, handlers=[logging.NullHandler()])

    view = View()
    bodies = [json.dumps(review(i)).encode() for i in range(opts.warmup + opts.requests)]
    sample, decision = mutate(review(0), view, rand=lambda n: 0)
    assert decision.mutated and decision.profiles == ("batch-workload-profile",), decision
    canned = json.dumps(sample, separators=(",", ":")).encode()
    print(f"request {len(bodies[0])} bytes, answer {len(canned)} bytes, {1 + OTHER_PROFILES} profiles; "
          f"{opts.requests} requests after {opts.warmup} warm-up, one kept-alive HTTPS connection")

    results: dict[str, list[float]] = {}
    for label, canned_body, path in (("floor", canned, "/floor"), ("mutate", None, MUTATE_PATH)):
        server, ca_pem, thread = serve(canned_body)
        try:
            round_trips(server.port, ca_pem, bodies[:opts.warmup], path)
            gc.collect()
            results[label] = round_trips(server.port, ca_pem, bodies[opts.warmup:], path)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)

    in_process: list[float] = []
    decoded = [json.loads(b) for b in bodies[:opts.requests]]
    for item in decoded:
        start = time.perf_counter()
        mutate(item, view, rand=lambda n: 0)
        in_process.append((time.perf_counter() - start) * 1000)

    for label, samples in (("HTTPS round trip, trivial handler (floor)", results["floor"]),
                           ("HTTPS round trip, /mutate-pod", results["mutate"]),
                           ("mutate() in process, decoded review", in_process)):
        print(f"{label:<44} p50 {statistics.median(samples):8.3f} ms  p99 {percentile(samples, 0.99):8.3f} ms")
    ratio = percentile(results["mutate"], 0.99) / percentile(results["floor"], 0.99)
    print(f"  ratio p99 mutate / p99 floor = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
