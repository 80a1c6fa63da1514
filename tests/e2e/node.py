"""One Kubernetes node, every component a real process: containerd (1.7 with NRI, or 1.6 behind
koord-runtime-proxy), koordlet in DaemonSet shape, koord-companion against the fake kube-apiserver, and the
kubelet driver creating pods over CRI and serving ``/pods`` and ``/configz``.

The pods a scenario creates go to both sides as in a cluster: the kubelet driver runs them, and the apiserver
holds them bound to the node (Running, Ready) so the companion counts them.  With ``webhook=True`` the companion
also serves its pod admission webhook, registered in the apiserver with the repository's
``manifests/companion/webhook.yaml``: :meth:`KubeNode.admit_pod` creates a pod through the API (admission
included) and runs what the apiserver stored.  An eviction the apiserver grants
makes the kubelet driver kill the pod, as kubelet does when its pod is deleted.
"""

from __future__ import annotations

import contextlib
import copy
import json
import queue
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.deployednode import DeployedImage, PodComponent, Ports, deploy, deployed_kubelet_options
from tests.e2e.harness import KoordletView, Proc, console_script, free_port, wait_for
from tests.fixtures.containerd import Containerd, containerd17_binary_dir
from tests.fixtures.fakeapiserver import FakeApiServer, make_configmap, make_node, make_pod
from tests.fixtures.fakekubelet import TlsFiles
from tests.fixtures.isolation import merge, private_settings
from tests.fixtures.kubeletdriver import KubeletDriver

NODE_NAME = "e2e-node"
CONFIG_NAMESPACE = "koordinator-system"
CONFIG_NAME = "slo-controller-config"
KOORDLET_NAMESPACE = "koordinator-system"
KOORDLET_POD = "koordlet-e2e-node"
"""The koordlet's pod in the apiserver: the companion binds the koordlet's token to its node."""
REPORT_INTERVAL_SECONDS = 30
"""NodeMetric report interval set through colocation-config: Koordinator's floor (its default is 60 s)."""
AGGREGATE_SECONDS = 60
"""The NodeMetric average window: Koordinator's floor (its default is 300 s)."""
START_SECONDS = 90.0
RETRY_SECONDS = 0.5
"""How soon a pod operation the runtime refused is tried again (kubelet's pod workers retry)."""
GiB = 1 << 30
MiB = 1 << 20

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
LABEL_QOS = "koordinator.sh/qosClass"
EXTENDED_SPEC = "node.koordinator.sh/extended-resource-spec"
RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"


def threshold_config(**overrides: Any) -> dict[str, Any]:
    """``resource-threshold-config``: suppress by CFS quota (a 2-CPU host cannot shrink a cpuset below
    Koordinator's 2-CPU floor) and memory eviction, all on."""
    strategy = {"enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota",
                "memoryEvictThresholdPercent": 99, **overrides}
    return {"clusterStrategy": strategy}


def colocation_config() -> dict[str, Any]:
    return {"enable": True, "metricAggregateDurationSeconds": AGGREGATE_SECONDS,
            "metricReportIntervalSeconds": REPORT_INTERVAL_SECONDS, "cpuReclaimThresholdPercent": 60,
            "memoryReclaimThresholdPercent": 65, "resourceDiffThreshold": 0.05}


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------------- pods

BUSY = "while :; do :; done"
GRACE_SECONDS = 2


HOLD_CHUNK = 256 * MiB


def hold_memory(nbytes: int) -> str:
    """A shell snippet that keeps about ``nbytes`` resident: each dd fills its one block from /dev/zero
    (touching every page), then blocks writing it into a pipe nobody reads; blocks of at most 256 MiB."""
    chunks = max(1, -(-nbytes // HOLD_CHUNK))
    block_mib = max(1, nbytes // chunks // MiB)
    one = f"(dd if=/dev/zero bs={block_mib}M count=1 2>/dev/null | sleep 1000000)"
    return f"for i in $(seq {chunks}); do {one} & done; wait"


def container(name: str, script: str, requests: Mapping[str, str] | None = None,
              limits: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "koordlet.test/busybox:1", "command": ["/bin/sh", "-c", script],
            "resources": {"requests": dict(requests or {}), "limits": dict(limits or {})}}


def _batch_only(resources: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in resources.items() if k.startswith("kubernetes.io/batch-")}


def pod_manifest(name: str, containers: list[dict[str, Any]], *, qos: str, priority_class: str, priority: int,
                 labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
                 ) -> dict[str, Any]:
    """A v1 Pod as it reaches the node after Koordinator's webhook: BE pods carry their batch resources in
    ``node.koordinator.sh/extended-resource-spec`` too (CRI requests drop extended resources)."""
    uid = f"e2e{secrets.token_hex(12)}"
    meta_annotations = dict(annotations or {})
    batch = {c["name"]: {kind: _batch_only(c["resources"][kind]) for kind in ("requests", "limits")}
             for c in containers}
    if any(v["requests"] or v["limits"] for v in batch.values()):
        meta_annotations[EXTENDED_SPEC] = json.dumps({"containers": batch})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "labels": {LABEL_QOS: qos, **dict(labels or {})}, "annotations": meta_annotations},
        # busybox's shell as PID 1 ignores SIGTERM: a short grace keeps deletions from waiting 30 s for SIGKILL.
        "spec": {"nodeName": NODE_NAME, "priorityClassName": priority_class, "priority": priority,
                 "restartPolicy": "Always", "terminationGracePeriodSeconds": GRACE_SECONDS,
                 "containers": containers},
    }


# ------------------------------------------------------------------------------------------------- node


@dataclass
class KubeNode:
    variant: str
    tmp: Path
    prefix: str
    containerd: Containerd
    apiserver: FakeApiServer
    kubelet: KubeletDriver
    koordlet: Proc | PodComponent
    companion: Proc | PodComponent
    proxy: Proc | None
    view: KoordletView
    cri_socket: Path
    kubepods_memory_limit: int
    companion_port: int
    webhook_port: int = 0
    """The companion's admission webhook port (0: not served)."""
    procs: list[Proc | PodComponent] = field(default_factory=list)
    _deletions: queue.Queue[tuple[str, str] | None] = field(default_factory=queue.Queue)
    deleted_at: dict[str, float] = field(default_factory=dict)
    """pod name -> when the kubelet driver finished removing it after an eviction."""
    teardown_errors: list[str] = field(default_factory=list)
    """Teardowns of evicted pods that failed and were retried (a runtime restarting)."""

    # --- pods -------------------------------------------------------------------------------------------

    def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Binds the pod in the apiserver, runs it through the kubelet driver, and marks it Running and Ready
        in the apiserver once its containers run (what kubelet's status manager does)."""
        stored = self.apiserver.seed(manifest | {"status": {"phase": "Pending"}})
        snapshot = self.kubelet.create_pod(copy.deepcopy(manifest))
        self.apiserver.seed(manifest | {"status": {"phase": "Running", "qosClass": snapshot.qos_class,
                                                   "conditions": [{"type": "Ready", "status": "True"}]}})
        return stored

    def admit_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Creates the pod through the apiserver's API, so the admission webhooks run, then runs the pod the
        apiserver stored (mutated) through the kubelet driver and marks it Running and Ready; returns the stored
        pod."""
        from kubernetes import client

        from koordlet.companion.kube.client import call_json, make_api_client

        api = make_api_client(self.apiserver.host, self.apiserver.token_file, self.apiserver.ca_file)
        namespace = manifest["metadata"].get("namespace", "default")
        stored: dict[str, Any] = call_json(client.CoreV1Api(api).create_namespaced_pod, namespace,
                                           manifest | {"status": {"phase": "Pending"}})
        runnable = {k: v for k, v in stored.items() if k != "status"}
        snapshot = self.kubelet.create_pod(copy.deepcopy(runnable))
        self.apiserver.seed(runnable | {"status": {"phase": "Running", "qosClass": snapshot.qos_class,
                                                   "conditions": [{"type": "Ready", "status": "True"}]}})
        return stored

    def delete_pod(self, name: str) -> None:
        self.apiserver.delete("pods", name, "default")
        self.kubelet.delete_pod("default", name)

    def has_pod(self, name: str) -> bool:
        return any(p.name == name for p in self.kubelet.pods())

    def pod_dir(self, name: str) -> str:
        """The pod's cgroup directory relative to the hierarchy roots."""
        return self.kubelet.pod("default", name).cgroup_parent.strip("/")

    def container_dir(self, pod: str, container: str) -> str:
        """The container's cgroup: its id below the pod's (runc's cgroupfs layout)."""
        snapshot = self.kubelet.pod("default", pod)
        return f"{snapshot.cgroup_parent.strip('/')}/{snapshot.container(container).container_id}"

    @property
    def be_dir(self) -> str:
        return f"{self.prefix}/kubepods/besteffort"

    # --- cluster config ---------------------------------------------------------------------------------

    def set_thresholds(self, **overrides: Any) -> None:
        self.apiserver.seed(make_configmap(CONFIG_NAME, CONFIG_NAMESPACE, {
            "resource-threshold-config": json.dumps(threshold_config(**overrides)),
            "colocation-config": json.dumps(colocation_config())}))

    def node_allocatable(self) -> dict[str, str]:
        node = self.apiserver.get("nodes", NODE_NAME) or {}
        return dict((node.get("status") or {}).get("allocatable") or {})

    def companion_listening(self) -> bool:
        return _listening(self.companion_port)

    def check_alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()

    # --- evictions --------------------------------------------------------------------------------------

    def _on_eviction(self, namespace: str, name: str) -> None:
        self._deletions.put((namespace, name))  # called under the apiserver's lock: the work is elsewhere

    def _kill_evicted(self) -> None:
        while (item := self._deletions.get()) is not None:
            namespace, name = item
            # kubelet retries a pod's teardown until the runtime answers (it may be restarting).
            while True:
                try:
                    self.kubelet.delete_pod(namespace, name)
                    break
                except Exception as exc:
                    self.teardown_errors.append(f"{namespace}/{name}: {exc}")
                    if not self.has_pod(name):
                        break
                    time.sleep(RETRY_SECONDS)  # kubelet's pod worker backoff, not a wait for an outcome
            # The containers are gone: kubelet's status manager deletes the terminating pod with grace 0.
            self.apiserver.finish_deletion("pods", name, namespace)
            self.deleted_at[name] = time.time()


def _koordlet_token(apiserver: FakeApiServer, tmp: Path) -> Path:
    """The koordlet's projected service-account token (audience koord-companion) in a file, as the DaemonSet's
    projected volume holds it: the koordlet's pod is seeded in the apiserver on the node, so the companion's
    TokenReview binds the koordlet to NODE_NAME.  Valid for longer than any run (kubelet would rotate it)."""
    apiserver.seed(make_pod(KOORDLET_POD, KOORDLET_NAMESPACE, NODE_NAME, service_account="koordlet"))
    path = tmp / "companion-token"
    path.write_text(apiserver.mint_token(KOORDLET_NAMESPACE, KOORDLET_POD, audiences=["koord-companion"],
                                         expires_in_seconds=7 * 24 * 3600))
    return path


KOORDLET_NODE_ARGS = ("--feature-gates=BEMemoryEvict=true", "--memory-evict-base=kubepods",
                      "--kubelet-sync-interval=1", "--collect-memory-interval-seconds=1")
"""What the scenarios set on the deployed koordlet beyond the DaemonSet (as :func:`_koordlet_config` does for the
process): memory eviction on, against kubepods' limit, and the pod list and memory read every second so the
scenarios' windows stay short."""


def _koordlet_config(*, tmp: Path, kubelet: KubeletDriver, companion_port: int, metrics_port: int, variant: str,
                     containerd: Containerd, companion_token: Path) -> dict[str, Any]:
    """koordlet in DaemonSet shape: pods from the kubelet, NodeSLO and evictions through the companion."""
    hooks: dict[str, Any] = {"reconcileIntervalSeconds": 2}
    if variant == "nri":
        hooks |= {"enableNri": True, "nriSocketPath": str(containerd.nri_socket), "enableServer": False}
    else:
        hooks |= {"enableNri": False, "enableServer": True, "serverSocket": str(tmp / "koordlet.sock"),
                  "registrationDir": str(tmp / "hookserver.d")}
    pointers = kubelet.koordlet_config()
    # private_settings: whatever the node does not set (the CRI endpoint the evictor would dial, terway's
    # directory...) points into the node's directory, never at the host's own agent.
    return merge(private_settings(tmp, kubelet.prefix), {
        "nodeName": NODE_NAME, "stateDir": str(tmp / "koordlet-state"), "logLevel": "info",
        "featureGates": {"BEMemoryEvict": True},
        "host": pointers["host"],
        "server": {"addr": f"127.0.0.1:{metrics_port}", "debugSocket": str(tmp / "koordlet-debug.sock")},
        "kubelet": {**pointers["kubelet"], "syncIntervalSeconds": 1},
        "collector": {"memoryIntervalSeconds": 1},
        "qos": {"evictor": "api", "memoryEvictBase": "kubepods"},
        "runtimeHooks": hooks,
        "companion": {"address": f"127.0.0.1:{companion_port}", "tokenFile": str(companion_token)},
    })


def _copy_logs(logs: Path, containerd_log: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in [*logs.iterdir(), containerd_log]:
        with contextlib.suppress(OSError):
            shutil.copy2(path, dest / path.name)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


WEBHOOK_MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "companion" / "webhook.yaml"
WEBHOOK_CONFIGURATION = "koord-companion"


def _register_webhooks(apiserver: FakeApiServer, port: int) -> None:
    """The repository's webhook configurations (caBundle left for the companion to write), their Service routed
    to the companion's webhook port, and the namespaces they select on."""
    documents = [d for d in yaml.safe_load_all(WEBHOOK_MANIFEST.read_text()) if d]
    for document in documents:
        apiserver.seed(document)
    for name in (CONFIG_NAMESPACE, "kube-system", "default"):
        apiserver.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    service = documents[0]["webhooks"][0]["clientConfig"]["service"]
    apiserver.route_webhook_service(service["namespace"], service["name"], ("127.0.0.1", port),
                                    port=int(service.get("port", 443)))


def _ca_bundles_written(apiserver: FakeApiServer) -> bool:
    return all(all((w.get("clientConfig") or {}).get("caBundle") for w in (obj or {}).get("webhooks") or [None])
               for obj in (apiserver.get(plural, WEBHOOK_CONFIGURATION) for plural in
                           ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")))


@contextlib.contextmanager
def kube_node(variant: str, tls: TlsFiles, keep_logs: Path | None = None, *,
              webhook: bool = False, image: DeployedImage | None = None) -> Iterator[KubeNode]:
    """The node of ``variant`` (``nri``: containerd 1.7 with NRI; ``proxy``: kubelet -> koord-runtime-proxy ->
    containerd 1.6), started in dependency order and stopped in reverse, each process by its PID.  ``keep_logs``:
    a directory that receives every component's log when the node is torn down.  ``webhook``: the companion serves
    its admission webhook too, registered in the apiserver (see the module docstring).  ``image``: koordlet and
    koord-companion run as containers of that image, from the pods the rendered manifests make
    (tests/e2e/deployednode.py; the webhook is then on, as shipped), instead of as processes."""
    stack = contextlib.ExitStack()
    with stack:
        # Short: the NRI and CRI sockets live below it (sun_path is 108 bytes).
        tmp = Path(tempfile.mkdtemp(prefix=f"ke2e-{variant}-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)  # a failure shows the logs' tails
        logs = tmp / "logs"
        logs.mkdir()
        prefix = f"koord-e2e-{secrets.token_hex(4)}"
        containerd = Containerd(binary_dir=containerd17_binary_dir(), nri=True) if variant == "nri" else Containerd()
        stack.enter_context(containerd)
        if keep_logs is not None:  # after the processes stop, before containerd's directory goes
            stack.callback(_copy_logs, logs, containerd.log_path, keep_logs)

        apiserver = FakeApiServer(tls, tmp / "apiserver-token")
        stack.callback(apiserver.stop)
        cpus, memory = cpu_count(), mem_total_bytes()
        procs: list[Proc | PodComponent] = []

        def started(proc: Any) -> Any:
            procs.append(proc.start())
            stack.callback(proc.stop)
            return proc

        companion_port = free_port()
        webhook = webhook or image is not None
        webhook_port = free_port() if webhook else 0
        webhook_flags: list[str] = []
        if webhook:
            _register_webhooks(apiserver, webhook_port)
            webhook_flags = ["--webhook-addr", f"127.0.0.1:{webhook_port}",
                             "--leader-elect-namespace", CONFIG_NAMESPACE,
                             "--webhook-configuration-name", WEBHOOK_CONFIGURATION]
        if image is None:
            companion: Proc | PodComponent = started(Proc("koord-companion", [
                *console_script("koord-companion"), "--grpc-addr", f"127.0.0.1:{companion_port}",
                "--extender-addr", f"127.0.0.1:{free_port()}", "--metrics-addr", "", "--leader-elect", "false",
                "--kube-api-server", apiserver.host, "--kube-token-file", str(apiserver.token_file),
                "--kube-ca-file", apiserver.ca_file, *webhook_flags], logs))
        cri_socket = containerd.socket
        proxy: Proc | None = None
        if variant == "proxy":
            (tmp / "hookserver.d").mkdir()
            cri_socket = tmp / "proxy.sock"
            proxy = started(Proc("koord-runtime-proxy", [
                *console_script("koord-runtime-proxy"), "--koord-runtimeproxy-endpoint", str(cri_socket),
                "--remote-runtime-service-endpoint", str(containerd.socket),
                "--remote-image-service-endpoint", str(containerd.socket),
                "--runtime-hook-config-dir", str(tmp / "hookserver.d"),
                "--checkpoint-path", str(tmp / "proxy-checkpoint.json")], logs))
            wait_for("koord-runtime-proxy's socket", cri_socket.exists, 30, [proxy])

        # kubelet sizes kubepods to the node's allocatable memory (capacity - reserved).  Reserving 40% keeps
        # batch-memory positive (65% reclaimable minus the reservation) and lets the memory-eviction scenario
        # work on amounts this host has (memory_evict_base kubepods).
        kubepods_limit = min(memory * 6 // 10, mem_available_bytes() * 3 // 4) // MiB * MiB
        kubelet = KubeletDriver(cri_socket, tls, cgroup_root_prefix=prefix, node_name=NODE_NAME,
                                kubelet_config={"systemReserved": {"memory": str(memory - kubepods_limit)}},
                                **({} if image is None else deployed_kubelet_options(apiserver)))
        stack.callback(kubelet.close)
        apiserver.seed(make_node(NODE_NAME, capacity={"cpu": str(cpus), "memory": str(memory), "pods": "110"},
                                 allocatable={"cpu": str(cpus), "memory": str(kubepods_limit), "pods": "110"}))

        metrics_port = free_port()
        if image is None:
            config = _koordlet_config(tmp=tmp, kubelet=kubelet, companion_port=companion_port,
                                      metrics_port=metrics_port, variant=variant, containerd=containerd,
                                      companion_token=_koordlet_token(apiserver, tmp))
            (tmp / "koordlet.yaml").write_text(yaml.safe_dump(config))
            koordlet: Proc | PodComponent = started(Proc("koordlet", [
                *console_script("koordlet"), "run", "--config", str(tmp / "koordlet.yaml")], logs))
            debug_socket = tmp / "koordlet-debug.sock"
        else:
            deployed = deploy(image, tmp=tmp, stack=stack, apiserver=apiserver, kubelet=kubelet,
                              containerd=containerd, variant=variant, node_name=NODE_NAME, keep_logs=keep_logs,
                              ports=Ports(companion_grpc=companion_port, companion_extender=free_port(),
                                          companion_metrics=free_port(), companion_webhook=webhook_port,
                                          koordlet_metrics=metrics_port),
                              koordlet_args=KOORDLET_NODE_ARGS, started=started)
            companion, koordlet, debug_socket = deployed.companion, deployed.koordlet, deployed.debug_socket
        view = KoordletView(debug_socket, metrics_port)
        node = KubeNode(variant=variant, tmp=tmp, prefix=prefix, containerd=containerd, apiserver=apiserver,
                        kubelet=kubelet, koordlet=koordlet, companion=companion, proxy=proxy, view=view,
                        cri_socket=cri_socket, kubepods_memory_limit=kubepods_limit, companion_port=companion_port,
                        webhook_port=webhook_port, procs=procs)
        node.set_thresholds()
        wait_for("the companion's gRPC port", lambda: _listening(companion_port), START_SECONDS, procs)
        if webhook:
            wait_for("the companion's CA in the webhook configurations", lambda: _ca_bundles_written(apiserver),
                     START_SECONDS, procs)
        wait_for("koordlet's components running", view.ready, START_SECONDS, procs)
        wait_for("the companion's NodeSLO on the node",
                 lambda: (view.slo()["spec"].get("resourceUsedThresholdWithBE") or {}).get("enable") is True,
                 START_SECONDS, procs)
        if variant == "nri":
            wait_for("koordlet registered as an NRI plugin",
                     lambda: "NRI plugin registered" in koordlet.log_path.read_text(errors="replace"),
                     START_SECONDS, procs)
        else:
            wait_for("koordlet's hook-server registration",
                     lambda: any((tmp / "hookserver.d").iterdir()), START_SECONDS, procs)

        worker = threading.Thread(target=node._kill_evicted, name="e2e-evicted-pods", daemon=True)
        worker.start()
        apiserver.on_eviction(node._on_eviction)

        def stop_worker() -> None:
            node._deletions.put(None)
            worker.join(30)

        stack.callback(stop_worker)
        yield node
        for proc in procs:  # a component that died during the scenarios fails the run even if they passed
            proc.check_alive()
