"""The test kubelet's pod fields (issue 37): the manifests' pod templates parse, an unimplemented field is refused
by name, and real pods on containerd 1.7 see their volumes, env, securityContext, host PID namespace and probes as
kubelet would give them (read from inside the container through CRI ExecSync)."""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from tests.fixtures.containerd import Containerd
from tests.fixtures.fakeapiserver import FakeApiServer, make_configmap
from tests.fixtures.fakekubelet import TlsFiles
from tests.fixtures.kubeletdriver import KubeletDriver
from tests.fixtures.kubeletenv import expand
from tests.fixtures.kubeletrules import PodSpec, PodSpecError
from tests.fixtures.kubeletvolumedata import write_atomically
from tests.fixtures.kubeletvolumes import MountFailed, check_host_path
from tests.fixtures.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
SLEEP = ["/bin/sh", "-c", "exec sleep 3600"]
TIMEOUT = 90.0


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": list(containers), **spec}}


def ctr(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": SLEEP, **fields}


# --- parsing -----------------------------------------------------------------------------------------------


def rendered_pods() -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "manifests")], capture_output=True, text=True,
                         check=True).stdout
    pods = []
    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"] in ("DaemonSet", "Deployment"):
            template = doc["spec"]["template"]
            meta = {**template["metadata"], "name": f"{doc['metadata']['name']}-0",
                    "namespace": doc["metadata"]["namespace"]}
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
    return pods


def test_the_manifests_pod_templates_are_implemented() -> None:
    pods = {p["metadata"]["name"]: PodSpec.from_manifest(p, "node-1", service_account_admission=True)
            for p in rendered_pods()}
    koordlet, companion = pods["koordlet-0"], pods["koord-companion-0"]
    assert koordlet.host_pid and koordlet.containers[0].security.privileged
    mounts = {m.mount_path: m for m in koordlet.containers[0].mounts}
    assert mounts["/host-sys"].propagation == "HostToContainer" and mounts["/host-sys"].read_only
    assert mounts["/host-var-lib-kubelet"].recursive_read_only == "IfPossible"
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    assert [p.kind for p in koordlet.containers[0].probes] == ["livenessProbe", "readinessProbe"]
    c = companion.containers[0]
    assert companion.security.run_as_user == 65532 and companion.security.run_as_non_root
    assert c.security.read_only_root and c.security.drop_capabilities == ("ALL",)
    assert {p.kind: (p.handler, p.port) for p in c.probes} == {"livenessProbe": ("tcpSocket", 9320),
                                                               "readinessProbe": ("httpGet", 9321)}


@pytest.mark.parametrize(("change", "path"), [
    (lambda p: p["spec"]["containers"][0].update(lifecycle={"preStop": {}}), r"spec\.containers\[0\]\.lifecycle"),
    (lambda p: p["spec"].update(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
     r"spec\.volumes\[0\]\.nfs"),
    (lambda p: p["spec"]["containers"][0].update(securityContext={"seLinuxOptions": {}}),
     r"spec\.containers\[0\]\.securityContext\.seLinuxOptions"),
    (lambda p: p["spec"].update(securityContext={"fsGroup": 1}), r"spec\.securityContext\.fsGroup"),
    (lambda p: p["spec"].update(shareProcessNamespace=True), r"spec\.shareProcessNamespace"),
    (lambda p: p["spec"]["containers"][0].update(envFrom=[]), r"spec\.containers\[0\]\.envFrom"),
    (lambda p: p["spec"]["containers"][0].update(env=[{"name": "A", "valueFrom": {"secretKeyRef": {}}}]),
     r"spec\.containers\[0\]\.env\[0\]\.valueFrom\.secretKeyRef"),
    (lambda p: p["spec"]["containers"][0].update(volumeMounts=[{"name": "nope", "mountPath": "/x"}]),
     r'spec\.containers\[0\]\.volumeMounts\[0\]\.name: Not found: "nope"'),
    (lambda p: (p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]),
                p["spec"]["containers"][0].update(volumeMounts=[{"name": "v", "mountPath": "/x", "subPath": "a"}])),
     r"spec\.containers\[0\]\.volumeMounts\[0\]\.subPath"),
    (lambda p: (p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]),
                p["spec"]["containers"][0].update(volumeMounts=[{"name": "v", "mountPath": "/x",
                                                                 "mountPropagation": "Bidirectional"}])),
     "Bidirectional mount propagation is available only to privileged containers"),
    (lambda p: (p["spec"].update(volumes=[{"name": "v", "emptyDir": {}}]),
                p["spec"]["containers"][0].update(volumeMounts=[{"name": "v", "mountPath": "/x",
                                                                 "recursiveReadOnly": "Enabled"}])),
     "may only be specified when readOnly is true"),
    (lambda p: p["spec"]["containers"][0].update(securityContext={"privileged": True,
                                                                  "allowPrivilegeEscalation": False}),
     "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
    (lambda p: p["spec"]["containers"][0].update(livenessProbe={"grpc": {"port": 1}}),
     r"spec\.containers\[0\]\.livenessProbe\.grpc"),
])
def test_an_unimplemented_or_invalid_field_is_refused_by_name(change: Any, path: str) -> None:
    manifest = pod("p", ctr("a"))
    change(manifest)
    with pytest.raises(PodSpecError, match=path):
        PodSpec.from_manifest(manifest)


def test_dollar_expansion_as_kubelet() -> None:
    variables = {"A": "x", "B": "$(A)"}
    assert expand("$(A)-$$(A)-$(NOPE)-$A-$(B)-$(A", variables) == "x-$(A)-$(NOPE)-$A-$(A)-$(A"


def test_host_path_types(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    check_host_path("v", str(tmp_path / "a" / "b"), "DirectoryOrCreate")
    assert (tmp_path / "a" / "b").is_dir() and (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o755
    with pytest.raises(MountFailed, match=f"hostPath type check failed: {tmp_path}/file is not a directory, "
                                          "it's a File"):
        check_host_path("v", str(tmp_path / "file"), "Directory")
    with pytest.raises(MountFailed, match=f'volume "v" : hostPath {tmp_path}/none doesn\'t exist'):
        check_host_path("v", str(tmp_path / "none"), "Socket")


def test_atomic_writes_swap_the_data_link(tmp_path: Path) -> None:
    assert write_atomically(tmp_path, {"a/b": (b"1", 0o644), "c": (b"2", 0o600)})
    first = (tmp_path / "..data").resolve()
    assert (tmp_path / "a" / "b").read_bytes() == b"1" and (tmp_path / "c").stat().st_mode & 0o777 == 0o600
    assert not write_atomically(tmp_path, {"a/b": (b"1", 0o644), "c": (b"2", 0o600)})
    assert write_atomically(tmp_path, {"c": (b"3", 0o644)})
    assert (tmp_path / "..data").resolve() != first and not first.exists()
    assert (tmp_path / "c").read_bytes() == b"3" and not (tmp_path / "a").exists()


# --- real pods ---------------------------------------------------------------------------------------------


@pytest.fixture
def driver(containerd17: Containerd, kubelet_tls: TlsFiles, fake_apiserver: FakeApiServer) -> Iterator[KubeletDriver]:
    with KubeletDriver(containerd17.socket, kubelet_tls, apiserver=fake_apiserver, node_name="node-1",
                       restart_backoff_seconds=1.0) as kubelet:
        yield kubelet
        assert kubelet.errors == []


def run_in(driver: KubeletDriver, name: str, container: str, *command: str) -> tuple[int, str]:
    cid = driver.pod("default", name).container(container).container_id
    response = driver._cri.runtime.ExecSync(cri.ExecSyncRequest(container_id=cid, cmd=list(command), timeout=10),
                                            timeout=30)
    return response.exit_code, (response.stdout + response.stderr).decode(errors="replace")


def create(driver: KubeletDriver, api: FakeApiServer, manifest: dict[str, Any]) -> Any:
    api.seed({**manifest, "spec": {**manifest["spec"], "nodeName": "node-1"}})  # tokens are bound to the stored pod
    return driver.create_pod(manifest)


def test_volumes_env_and_mounts_inside_the_container(driver: KubeletDriver, fake_apiserver: FakeApiServer,
                                                     tmp_path: Path) -> None:
    fake_apiserver.seed(make_configmap("conf", "default", {"k": "from-configmap"}))
    manifest = pod("vols", ctr(
        "a", command=["/bin/sh", "-c", 'echo "$1 $2 $3" > /tmp/args; exec sleep 3600', "sh", "$(POD_NAME)",
                      "$$(POD_NAME)", "$(NOPE)"],
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
             {"name": "BOTH", "value": "$(POD_NAME)@$(HOST_IP)"}],
        volumeMounts=[{"name": "host", "mountPath": "/host", "readOnly": True},
                      {"name": "conf", "mountPath": "/conf", "readOnly": True},
                      {"name": "sec", "mountPath": "/sec"}, {"name": "tok", "mountPath": "/tok"},
                      {"name": "scratch", "mountPath": "/scratch"}]),
        volumes=[{"name": "host", "hostPath": {"path": str(tmp_path / "made"), "type": "DirectoryOrCreate"}},
                 {"name": "conf", "configMap": {"name": "conf", "items": [{"key": "k", "path": "sub/file"}]}},
                 {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
                 {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {
                     "audience": "koord-companion", "expirationSeconds": 3600, "path": "token"}}]}},
                 {"name": "scratch", "emptyDir": {}}])
    waiting = create(driver, fake_apiserver, manifest)
    # No Secret yet: ContainerCreating, retried; the Secret appears and the pod starts.
    assert waiting.phase == "Pending" and waiting.mount_error == 'MountVolume.SetUp failed for volume "sec" : ' \
                                                                 'secret "sec" not found'
    fake_apiserver.seed({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec", "namespace": "default"},
                         "data": {"password": base64.b64encode(b"s3cret").decode()}})
    wait_until("the pod to start once its Secret exists",
               lambda: driver.pod("default", "vols").container("a").state == "running", timeout=TIMEOUT)
    assert (tmp_path / "made").is_dir()
    assert run_in(driver, "vols", "a", "cat", "/conf/sub/file") == (0, "from-configmap")
    assert run_in(driver, "vols", "a", "cat", "/sec/password") == (0, "s3cret")
    token = run_in(driver, "vols", "a", "cat", "/tok/token")[1]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["aud"] == ["koord-companion"] and claims["sub"] == "system:serviceaccount:default:default"
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert run_in(driver, "vols", "a", "cat", f"{account}/namespace") == (0, "default")
    assert run_in(driver, "vols", "a", "cat", f"{account}/ca.crt")[1] == Path(fake_apiserver.ca_file).read_text()
    assert run_in(driver, "vols", "a", "sh", "-c", "echo x > /host/f")[0] != 0  # readOnly
    assert run_in(driver, "vols", "a", "sh", "-c", "echo x > /scratch/f && cat /scratch/f") == (0, "x\n")
    assert run_in(driver, "vols", "a", "cat", "/tmp/args") == (0, "vols $(POD_NAME) $(NOPE)\n")
    environ = run_in(driver, "vols", "a", "cat", "/proc/1/environ")[1].split("\0")
    assert {"POD_NAME=vols", f"HOST_IP={driver.host_ip}", f"BOTH=vols@{driver.host_ip}"} <= set(environ)
    assert any(e.startswith("KUBERNETES_SERVICE_HOST=") for e in environ)
    driver.delete_pod("default", "vols", 0)


def test_a_missing_host_directory_keeps_the_pod_waiting(driver: KubeletDriver, fake_apiserver: FakeApiServer,
                                                        tmp_path: Path) -> None:
    missing = tmp_path / "later"
    snapshot = create(driver, fake_apiserver, pod(
        "hp", ctr("a", volumeMounts=[{"name": "d", "mountPath": "/d"}]),
        volumes=[{"name": "d", "hostPath": {"path": str(missing), "type": "Directory"}}],
        automountServiceAccountToken=False))
    assert snapshot.mount_error == f'MountVolume.SetUp failed for volume "d" : hostPath {missing} doesn\'t exist'
    assert driver.pod_list()["items"][0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
        "ContainerCreating"
    missing.mkdir()
    wait_until("the pod to start", lambda: driver.pod("default", "hp").container("a").state == "running",
               timeout=TIMEOUT)


def test_security_context_and_host_pid(driver: KubeletDriver, fake_apiserver: FakeApiServer) -> None:
    create(driver, fake_apiserver, pod(
        "sec", ctr("locked", securityContext={"readOnlyRootFilesystem": True, "runAsUser": 1234,
                                              "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}),
        ctr("priv", securityContext={"privileged": True}), hostPID=True))
    assert run_in(driver, "sec", "locked", "sh", "-c", "echo x > /f")[0] != 0
    status = dict(line.split(":\t", 1) for line in run_in(driver, "sec", "locked", "cat", "/proc/self/status")[1]
                  .splitlines() if ":\t" in line)
    assert status["Uid"].split()[0] == "1234" and status["CapEff"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1"
    priv = dict(line.split(":\t", 1) for line in run_in(driver, "sec", "priv", "cat", "/proc/self/status")[1]
                .splitlines() if ":\t" in line)
    assert int(priv["CapEff"], 16) == int(Path("/proc/self/status").read_text().split("CapEff:\t")[1].split()[0], 16)
    sys_options = [line.split()[5] for line in run_in(driver, "sec", "priv", "cat", "/proc/self/mountinfo")[1]
                   .splitlines() if line.split()[4] == "/sys"]
    assert sys_options and sys_options[0].startswith("rw")
    host_init = Path("/proc/1/cmdline").read_bytes().decode(errors="replace")
    assert run_in(driver, "sec", "locked", "cat", "/proc/1/cmdline")[1] == host_init  # the host's PID 1


def test_run_as_non_root_with_a_root_image_is_a_config_error(driver: KubeletDriver,
                                                               fake_apiserver: FakeApiServer) -> None:
    snapshot = create(driver, fake_apiserver, pod("nonroot", ctr("a"), securityContext={"runAsNonRoot": True}))
    container = snapshot.container("a")
    assert (snapshot.phase, container.reason) == ("Pending", "CreateContainerConfigError")
    uid = snapshot.uid
    assert container.message == ('container has runAsNonRoot and image will run as root (pod: '
                                 f'"nonroot_default({uid})", container: a)')


class _Status500(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_liveness_restarts_and_readiness_gates_ready(driver: KubeletDriver, fake_apiserver: FakeApiServer) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        create(driver, fake_apiserver, pod(
            "probes",
            ctr("live", livenessProbe={"exec": {"command": ["cat", "/nonexistent"]}, "periodSeconds": 1,
                                       "failureThreshold": 2, "terminationGracePeriodSeconds": 1}),
            ctr("unready", readinessProbe={"httpGet": {"path": "/", "port": server.server_address[1]},
                                           "periodSeconds": 1}),
            ctr("ready", ports=[{"name": "svc", "containerPort": listener.getsockname()[1]}],
                readinessProbe={"tcpSocket": {"port": "svc"}, "periodSeconds": 1})))
        wait_until("the liveness failures to restart the container twice",
                   lambda: driver.pod("default", "probes").container("live").restart_count >= 2, timeout=TIMEOUT)
        statuses = {s["name"]: s for s in driver.pod_list()["items"][0]["status"]["containerStatuses"]}
        assert statuses["live"]["lastState"]["terminated"]["exitCode"] == 137
        wait_until("the tcp readiness probe to pass",
                   lambda: driver.pod("default", "probes").container("ready").ready, timeout=TIMEOUT)
        item = driver.pod_list()["items"][0]
        conditions = {c["type"]: c["status"] for c in item["status"]["conditions"]}
        assert conditions["Ready"] == conditions["ContainersReady"] == "False"
        assert not {s["name"]: s for s in item["status"]["containerStatuses"]}["unready"]["ready"]
    finally:
        server.shutdown()
        listener.close()
