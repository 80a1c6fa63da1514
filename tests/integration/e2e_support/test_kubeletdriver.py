"""The test kubelet (tests/fixtures/kubeletdriver.py): kubelet's arithmetic (tests/fixtures/kubeletrules.py)
on worked examples, then real pods on containerd 1.7 (and through koord-runtime-proxy on containerd 1.6) whose
cgroups, restarts and ``/pods`` are checked in the kernel and through koordlet's own kubelet client, pod
source and parser.

Worked example used below (values as kubelet computes them, pkg/kubelet/cm/helper_linux.go):
a Burstable pod with containers ``app`` (cpu 250m/500m, memory 64Mi/128Mi) and ``side`` (cpu 100m/200m,
memory limit 32Mi, request defaulted to it) gets pod shares (250+100)*1024/1000 = 358, a quota of
(500+200)*100000/1000 = 70000 us and a memory limit of 160Mi (every container has both limits); ``app``
gets shares 256 and quota 50000, ``side`` shares 102 and quota 20000.  A BestEffort pod gets shares 2 and
nothing else, whatever extended resources (kubernetes.io/batch-cpu) it asks for.
"""

from __future__ import annotations

import os
import signal
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import QoSClass
from koordlet.apis.pod import Pod
from koordlet.statesinformer.informer import kubelet_pod_meta
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError
from koordlet.statesinformer.podsource import KubeletPodSource
from koordlet.system import HostPaths, detect_layout
from koordlet.system.kubepaths import CgroupDriver, KubeQoS, detect_driver
from runtimeproxy import server as server_module
from tests.fixtures.containerd import (
    Containerd,
    CriClient,
    cgroup_dir,
    container_cgroup_files,
    read_container_cgroup_files,
)
from tests.fixtures.fakekubelet import TlsFiles
from tests.fixtures.kubeletdriver import KubeletDriver
from tests.fixtures.kubeletrules import (
    ContainerSpec,
    PodSpec,
    PodSpecError,
    container_resources,
    memory_capacity_bytes,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    oom_score_adj,
    parse_quantity,
    pod_cgroup_values,
    pod_phase,
)
from tests.fixtures.waiting import wait_until

MI = 1 << 20
SLEEP = ["/bin/sh", "-c", "exec sleep 3600"]
# A busy 2-core host with other suites running: restarts and CRI calls get generous bounds.
RESTART_TIMEOUT = 90.0


def manifest(name: str, *containers: dict[str, Any], labels: dict[str, str] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"containers": list(containers), **spec}}


def ctr(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        command: list[str] | None = None) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": name, "command": command or SLEEP, "resources": resources}


BE_POD = manifest("be", ctr("main", {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
                            {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}),
                  labels={"koordinator.sh/qosClass": "BE"}, priority=5000, priorityClassName="koord-batch")
BURSTABLE_POD = manifest("ls", ctr("app", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m", "memory": "128Mi"}),
                         ctr("side", {"cpu": "100m"}, {"cpu": "200m", "memory": "32Mi"}),
                         labels={"koordinator.sh/qosClass": "LS"})


def spec_of(m: dict[str, Any]) -> PodSpec:
    return PodSpec.from_manifest(m)


# --- kubelet's arithmetic ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", Decimal("0.5")), ("1.5", Decimal("1.5")), ("128Mi", Decimal(128 * MI)), ("1k", Decimal(1000)),
    ("1e3", Decimal(1000)), (2, Decimal(2)), ("0", Decimal(0)),
])
def test_quantities(text: Any, expected: Decimal) -> None:
    assert parse_quantity(text, "q") == expected


@pytest.mark.parametrize("bad", ["", "1x", "-1", "abc", None, True, "1.2.3"])
def test_bad_quantities_name_the_field(bad: Any) -> None:
    with pytest.raises(PodSpecError, match=r"limits\.cpu"):
        parse_quantity(bad, "limits.cpu")


def test_shares_and_quota_formulas() -> None:
    assert [milli_cpu_to_shares(m) for m in (0, 1, 250, 350, 1000, 300_000)] == [2, 2, 256, 358, 1024, 262144]
    assert [milli_cpu_to_quota(m) for m in (0, 1, 500, 700, 2000)] == [0, 1000, 50_000, 70_000, 200_000]


@pytest.mark.parametrize(("containers", "qos"), [
    ([ctr("a")], "BestEffort"),
    ([ctr("a", {"kubernetes.io/batch-cpu": "500"}, {"kubernetes.io/batch-cpu": "1000"})], "BestEffort"),
    ([ctr("a", {"cpu": "0"})], "BestEffort"),  # zero counts as unset
    ([ctr("a", {"cpu": "100m"})], "Burstable"),
    ([ctr("a", None, {"cpu": "1", "memory": "64Mi"})], "Guaranteed"),  # requests default to limits
    ([ctr("a", None, {"cpu": "1", "memory": "64Mi"}), ctr("b")], "Burstable"),
    ([ctr("a", None, {"cpu": "1"})], "Burstable"),
    ([ctr("a", {"cpu": "500m", "memory": "64Mi"}, {"cpu": "1", "memory": "64Mi"})], "Burstable"),
    ([ctr("a", None, {"cpu": "1", "memory": "64Mi", "kubernetes.io/batch-cpu": "5"})], "Guaranteed"),
])
def test_qos_class(containers: list[dict[str, Any]], qos: str) -> None:
    assert spec_of(manifest("p", *containers)).qos_class == qos


def test_pod_and_container_values_of_the_worked_example() -> None:
    pod = spec_of(BURSTABLE_POD)
    values = pod_cgroup_values(pod)
    assert (values.cpu_shares, values.cpu_quota_us, values.memory_limit_bytes) == (358, 70_000, 160 * MI)
    capacity = 8 << 30
    app, side = (container_resources(pod, c, capacity) for c in pod.containers)
    assert (app.cpu_shares, app.cpu_quota, app.cpu_period) == (256, 50_000, 100_000)
    assert app.memory_limit_in_bytes == 128 * MI
    assert (side.cpu_shares, side.cpu_quota, side.memory_limit_in_bytes) == (102, 20_000, 32 * MI)
    # 1000 - 1000 * 64Mi // 8Gi = 993; the side car requests 32Mi (defaulted from its limit): 997.
    assert (app.oom_score_adj, side.oom_score_adj) == (993, 997)

    be = spec_of(BE_POD)
    assert pod_cgroup_values(be) == type(values)(2, None, None)
    main = container_resources(be, be.containers[0], capacity)
    assert (main.cpu_shares, main.cpu_quota, main.memory_limit_in_bytes, main.oom_score_adj) == (2, 0, 0, 1000)

    # One container without a cpu limit: no pod quota; without a memory limit: no pod memory limit.
    partial = spec_of(manifest("p", ctr("a", {"cpu": "1"}, {"cpu": "2"}), ctr("b", {"memory": "1Mi"})))
    assert pod_cgroup_values(partial) == type(values)(1024, None, None)
    guaranteed = spec_of(manifest("g", ctr("a", None, {"cpu": "1500m", "memory": "1Gi"})))
    assert pod_cgroup_values(guaranteed) == type(values)(1536, 150_000, 1 << 30)


def test_oom_score_adj() -> None:
    capacity = 8 << 30

    def adj(m: dict[str, Any]) -> int:
        pod = spec_of(m)
        return oom_score_adj(pod, pod.containers[0], capacity)

    assert adj(manifest("g", ctr("a", None, {"cpu": "1", "memory": "1Gi"}))) == -997
    assert adj(manifest("b", ctr("a"))) == 1000
    assert adj(manifest("c", ctr("a"), priority=2_000_000_000)) == -997  # critical pod
    assert adj(manifest("s", ctr("a", {"cpu": "1"}))) == 999  # no memory request: just below BestEffort
    assert adj(manifest("h", ctr("a", {"memory": "8Gi"}))) == 3  # the whole machine: just above Guaranteed
    assert adj(manifest("q", ctr("a", {"memory": "2Gi"}))) == 750


@pytest.mark.parametrize(("policy", "states", "phase"), [
    ("Always", [("waiting", None, False)], "Pending"),
    ("Always", [("running", None, False), ("waiting", None, False)], "Pending"),
    ("Always", [("running", None, False), ("terminated", 1, False)], "Running"),
    ("Always", [("terminated", 0, False)], "Running"),
    ("Never", [("terminated", 0, False), ("terminated", 0, False)], "Succeeded"),
    ("Never", [("terminated", 0, False), ("terminated", 3, False)], "Failed"),
    ("OnFailure", [("terminated", 0, False)], "Succeeded"),
    ("OnFailure", [("terminated", 1, False)], "Running"),
    ("OnFailure", [("waiting", None, True)], "Running"),
])
def test_pod_phase(policy: str, states: list[tuple[str, int | None, bool]], phase: str) -> None:
    assert pod_phase(policy, states) == phase


@pytest.mark.parametrize(("pod", "error"), [
    ({"spec": {"containers": [ctr("a")]}}, "metadata.name is required"),
    (manifest("p"), "spec.containers must be a non-empty array"),
    (manifest("p", ctr("a"), ctr("a")), "duplicate names"),
    (manifest("p", {**ctr("a"), "imagePullPolicy": "Sometimes"}), r"spec.containers\[0\].imagePullPolicy"),
    (manifest("p", ctr("a", {"cpu": "lots"})), r"spec.containers\[0\] \(a\): resources.requests.cpu"),
    (manifest("p", ctr("a", {"cpu": "2"}, {"cpu": "1"})), "exceeds the limit"),
    (manifest("p", ctr("a"), restartPolicy="Sometimes"), "spec.restartPolicy"),
    (manifest("p", ctr("a"), hostNetwork=False), "hostNetwork"),
    (manifest("p", ctr("a"), initContainers=[ctr("i")]), "initContainers"),
    ({"metadata": {"name": "p", "uid": "a/b"}, "spec": {"containers": [ctr("a")]}}, "metadata.uid"),
    ({"metadata": {"name": "p", "labels": {"a": 1}}, "spec": {"containers": [ctr("a")]}}, "metadata.labels"),
])
def test_bad_manifests_are_refused_naming_the_field(pod: dict[str, Any], error: str) -> None:
    with pytest.raises(PodSpecError, match=error):
        PodSpec.from_manifest(pod)


def test_manifest_gets_the_api_servers_defaults() -> None:
    pod = spec_of(manifest("p", ctr("a", None, {"cpu": "1", "memory": "64Mi"})))
    resources = pod.manifest["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "64Mi"}
    assert pod.manifest["spec"]["restartPolicy"] == "Always"
    assert pod.manifest["metadata"]["uid"] and pod.restart_policy == "Always"
    assert pod.containers[0] == ContainerSpec("a", tuple(SLEEP), (), (), 1000, 1000, 64 * MI, 64 * MI, True)


# --- real pods on containerd 1.7 --------------------------------------------------------------------------


def memory_unlimited(cgroup_parent: str, version: int) -> bool:
    if version == 2:
        return (cgroup_dir(cgroup_parent) / "memory.max").read_text().strip() == "max"
    return int((cgroup_dir(cgroup_parent, subsystem="memory") / "memory.limit_in_bytes").read_text()) >= 1 << 62


def containerd_oom_floor(containerd: Containerd) -> int:
    # restrict_oom_score_adj: containerd raises a container's oom_score_adj to its own if it is lower.
    return int(Path(f"/proc/{containerd.pid}/oom_score_adj").read_text())


def test_pods_reach_the_kernel_and_koordlets_parser(kubelet_driver: KubeletDriver, containerd17: Containerd,
                                                   cgroup_version: int) -> None:
    driver = kubelet_driver
    assert driver.cgroup_version == cgroup_version
    guess = detect_driver(detect_layout(HostPaths()), driver.prefix)
    assert (guess.driver, guess.guessed) == (CgroupDriver.CGROUPFS, False), guess.reason

    be = driver.create_pod(BE_POD)
    ls = driver.create_pod(BURSTABLE_POD)
    assert (be.qos_class, be.phase, ls.qos_class, ls.phase) == ("BestEffort", "Running", "Burstable", "Running")
    assert be.cgroup_parent == f"/{driver.prefix}/kubepods/besteffort/pod{be.uid}"
    assert ls.cgroup_parent == f"/{driver.prefix}/kubepods/burstable/pod{ls.uid}"

    # kubelet's levels, in the kernel: kubepods sized to the node, QoS levels, pods, containers.
    kubepods = f"/{driver.prefix}/kubepods"
    expected = {
        kubepods: container_cgroup_files(cgroup_version, shares=milli_cpu_to_shares((os.cpu_count() or 1) * 1000)),
        f"{kubepods}/besteffort": container_cgroup_files(cgroup_version, shares=2),
        f"{kubepods}/burstable": container_cgroup_files(cgroup_version, shares=358),
        be.cgroup_parent: container_cgroup_files(cgroup_version, shares=2, quota_us=-1),
        ls.cgroup_parent: container_cgroup_files(cgroup_version, shares=358, quota_us=70_000, memory_bytes=160 * MI),
    }
    for parent, files in expected.items():
        assert read_container_cgroup_files(parent, "", files) == files, parent
    assert memory_unlimited(be.cgroup_parent, cgroup_version)
    containers = {
        (be, "main"): container_cgroup_files(cgroup_version, shares=2, quota_us=-1),
        (ls, "app"): container_cgroup_files(cgroup_version, shares=256, quota_us=50_000, memory_bytes=128 * MI),
        (ls, "side"): container_cgroup_files(cgroup_version, shares=102, quota_us=20_000, memory_bytes=32 * MI),
    }
    for (pod, name), files in containers.items():
        cid = pod.container(name).container_id
        assert read_container_cgroup_files(pod.cgroup_parent, cid, files) == files, name
    assert memory_unlimited(f"{be.cgroup_parent}/{be.container('main').container_id}", cgroup_version)
    # A pod cgroup exists in every hierarchy (runc puts the container in each of them).
    assert all(d.is_dir() for d in driver.cgroup_dirs(ls.cgroup_parent))

    capacity, floor = memory_capacity_bytes(), containerd_oom_floor(containerd17)
    for pod, name, adj in ((be, "main", 1000), (ls, "app", 1000 - 1000 * 64 * MI // capacity),
                           (ls, "side", 1000 - 1000 * 32 * MI // capacity)):
        pid = driver.container_pid("default", pod.name, name)
        assert int(Path(f"/proc/{pid}/oom_score_adj").read_text()) == max(adj, floor), name

    # The sandbox config carries the pod's labels and annotations, as kubelet sends them.
    sandboxes = {s.id: s for s in CriClient(containerd17.socket).list_pods()}
    assert sandboxes[be.sandbox_id].labels["koordinator.sh/qosClass"] == "BE"
    assert sandboxes[be.sandbox_id].labels["io.kubernetes.pod.uid"] == be.uid

    # /pods over HTTPS with the bearer token, through koordlet's own client, pod source and parser.
    client = KubeletClient(driver.kubelet_options())
    delivered: list[list[Pod]] = []
    assert KubeletPodSource(client, 3600.0, delivered.append).sync_once()
    pods = {p.name: p for p in delivered[0]}
    assert set(pods) == {"be", "ls"}
    assert (pods["be"].kube_qos, pods["be"].qos, pods["be"].priority) == (KubeQoS.BESTEFFORT, QoSClass.BE, 5000)
    assert pods["be"].priority_class_name == "koord-batch"
    assert pods["be"].containers[0].limits.batch_cpu_milli == 1000
    assert (pods["ls"].kube_qos, pods["ls"].qos, pods["ls"].phase) == (KubeQoS.BURSTABLE, QoSClass.LS, "Running")
    for pod in (be, ls):
        meta = kubelet_pod_meta(pods[pod.name], CgroupDriver.CGROUPFS, driver.prefix)
        assert meta.cgroup_dir == pod.cgroup_parent.strip("/")
        assert [(c.name, c.container_id) for c in meta.containers] == [
            (c.name, c.container_id) for c in pod.containers]
        for c in meta.containers:
            assert cgroup_dir(c.cgroup_dir).is_dir(), c.cgroup_dir

    # kubelet's authenticating port: a wrong token is refused; /configz is settable.
    driver.token_file.write_text("wrong-token\n")
    with pytest.raises(KubeletError) as refused:
        client.get_pods()
    assert refused.value.outcome == "http_401"
    driver.token_file.write_text("kubelet-driver-token\n")
    driver.set_kubelet_config(kubeReserved={"cpu": "200m", "memory": "1Gi"}, systemReserved={"cpu": "100m"},
                              cpuManagerPolicy="static")
    reservation = client.get_reservation()
    assert (reservation.cpu_milli, reservation.memory_bytes) == (300, 1 << 30)
    driver.set_kubelet_config(reservedSystemCPUs="0")
    assert client.get_reservation().cpus == (0,)

    # Deletion: gone from /pods, from CRI and from every hierarchy; the Burstable level shrinks back.
    driver.delete_pod("default", "ls", grace_seconds=0)
    assert [p.name for p in client.get_pods()] == ["be"]
    assert ls.sandbox_id not in {s.id for s in CriClient(containerd17.socket).list_pods()}
    assert not any(d.exists() for d in driver.cgroup_dirs(ls.cgroup_parent))
    burstable = container_cgroup_files(cgroup_version, shares=2)
    assert read_container_cgroup_files(f"{kubepods}/burstable", "", burstable) == burstable
    with pytest.raises(KeyError, match="no pod default/ls"):
        driver.delete_pod("default", "ls", 0)


def test_killed_container_is_restarted_in_the_same_sandbox(kubelet_driver: KubeletDriver,
                                                           cgroup_version: int) -> None:
    driver = kubelet_driver
    pod = driver.create_pod(BURSTABLE_POD)
    old = pod.container("app").container_id
    pid = driver.container_pid("default", "ls", "app")
    assert str(pid) in (cgroup_dir(pod.cgroup_parent, old) / "cgroup.procs").read_text().split()
    os.kill(pid, signal.SIGKILL)

    restarted = wait_until(
        "the killed container to run again",
        lambda: (p := driver.pod("default", "ls")).container("app").state == "running"
        and p.container("app").restart_count == 1 and p,
        timeout=RESTART_TIMEOUT,
    )
    new = restarted.container("app").container_id
    assert new != old and restarted.sandbox_id == pod.sandbox_id
    assert restarted.container("side") == pod.container("side")
    files = container_cgroup_files(cgroup_version, shares=256, quota_us=50_000, memory_bytes=128 * MI)
    assert read_container_cgroup_files(pod.cgroup_parent, new, files) == files

    status = next(s for s in driver.pod_list()["items"][0]["status"]["containerStatuses"] if s["name"] == "app")
    assert status["restartCount"] == 1 and status["containerID"] == f"containerd://{new}"
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert status["lastState"]["terminated"]["containerID"] == f"containerd://{old}"
    parsed = KubeletClient(driver.kubelet_options()).get_pods()[0]
    meta = kubelet_pod_meta(parsed, CgroupDriver.CGROUPFS, driver.prefix)
    assert meta.containers[0].container_id == new and cgroup_dir(meta.containers[0].cgroup_dir).is_dir()


def test_restart_policies_and_terminal_pods(kubelet_driver: KubeletDriver) -> None:
    driver = kubelet_driver
    failed = driver.create_pod(manifest("never", ctr("a", command=["/bin/sh", "-c", "exit 3"]),
                                        restartPolicy="Never"))
    done = driver.create_pod(manifest("done", ctr("a", {"cpu": "100m"}, command=["/bin/true"]),
                                      restartPolicy="OnFailure"))
    retried = driver.create_pod(manifest("retry", ctr("a", command=["/bin/sh", "-c", "exit 1"]),
                                         restartPolicy="OnFailure"))

    final = wait_until("both run-once pods to finish",
                       lambda: (a := driver.pod("default", "never")).phase == "Failed"
                       and (b := driver.pod("default", "done")).phase == "Succeeded" and (a, b),
                       timeout=RESTART_TIMEOUT)
    assert [(p.container("a").restart_count, p.container("a").exit_code) for p in final] == [(0, 3), (0, 0)]
    # A finished pod keeps its place in /pods but loses its sandbox and cgroup (kubelet's SyncTerminatedPod).
    for pod in (failed, done):
        wait_until(f"{pod.name}'s cgroup to go", lambda p=pod: not any(d.exists() for d in driver.cgroup_dirs(
            p.cgroup_parent)), timeout=RESTART_TIMEOUT)
    served = {p.name: p for p in KubeletClient(driver.kubelet_options()).get_pods()}
    assert (served["never"].phase, served["done"].phase) == ("Failed", "Succeeded")
    assert served["never"].terminated and served["done"].terminated
    wait_until("the OnFailure pod to be restarted",
               lambda: driver.pod("default", "retry").container("a").restart_count >= 1, timeout=RESTART_TIMEOUT)
    assert driver.pod("default", "retry").phase == "Running"
    driver.delete_pod("default", "retry", 0)
    driver.delete_pod("default", "never", 0)
    assert {p.name for p in driver.pods()} == {"done"}
    assert not any(d.exists() for d in driver.cgroup_dirs(retried.cgroup_parent))


def test_crash_loop_back_off_waits_before_restarting(containerd17: Containerd, kubelet_tls: TlsFiles) -> None:
    # A back-off far beyond the test: the exited container must wait, reported as kubelet reports it.
    with KubeletDriver(containerd17.socket, kubelet_tls, restart_backoff_seconds=3600.0) as driver:
        driver.create_pod(manifest("crash", ctr("a", command=["/bin/sh", "-c", "exit 2"])))
        waiting = wait_until("the crashed container to back off",
                             lambda: (p := driver.pod("default", "crash")).container("a").state == "waiting"
                             and p.container("a").exit_code == 2 and p, timeout=RESTART_TIMEOUT)
        assert (waiting.phase, waiting.container("a").restart_count) == ("Running", 0)
        status = driver.pod_list()["items"][0]["status"]["containerStatuses"][0]
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff" and not status["ready"]
        assert status["lastState"]["terminated"]["exitCode"] == 2
        assert driver.errors == []


def test_close_removes_everything_it_made(containerd17: Containerd, kubelet_tls: TlsFiles) -> None:
    driver = KubeletDriver(containerd17.socket, kubelet_tls)
    driver.create_pod(BE_POD)
    driver.create_pod(manifest("g", ctr("a", None, {"cpu": "100m", "memory": "64Mi"})))
    assert driver.pod("default", "g").cgroup_parent == f"/{driver.prefix}/kubepods/pod{driver.pod('default', 'g').uid}"
    options, prefix_dirs = driver.kubelet_options(timeout_seconds=2.0), driver.cgroup_dirs(driver.prefix)
    assert all(d.is_dir() for d in prefix_dirs)
    driver.close()
    assert driver.errors == []
    assert not any(d.exists() for d in prefix_dirs)
    assert CriClient(containerd17.socket).list_pods() == []
    assert not driver.state_dir.exists()
    with pytest.raises(KubeletError) as gone:
        KubeletClient(options).get_pods()
    assert gone.value.outcome == "refused"
    with pytest.raises(RuntimeError, match="closed"):
        driver.create_pod(BE_POD)


def test_refuses_a_prefix_that_exists(containerd17: Containerd, kubelet_tls: TlsFiles) -> None:
    with KubeletDriver(containerd17.socket, kubelet_tls) as driver, pytest.raises(ValueError, match="already exists"):
        KubeletDriver(containerd17.socket, kubelet_tls, cgroup_root_prefix=driver.prefix)
    with pytest.raises(ValueError, match="systemd"):
        KubeletDriver(containerd17.socket, kubelet_tls, driver="systemd")


def test_through_koord_runtime_proxy_in_front_of_containerd16(containerd16: Containerd, kubelet_tls: TlsFiles,
                                                               cgroup_version: int) -> None:
    """The other node shape: kubelet -> koord-runtime-proxy (no hook server registered) -> containerd 1.6."""
    proxy = server_module.Proxy(server_module.ProxyOptions(
        endpoint=str(containerd16.tmp / "proxy.sock"), runtime_endpoint=str(containerd16.socket),
        hook_config_dir=str(containerd16.tmp / "hookserver.d"),
        checkpoint_path=str(containerd16.tmp / "checkpoint.json")))
    proxy.start()
    try:
        with KubeletDriver(containerd16.tmp / "proxy.sock", kubelet_tls) as driver:
            pod = driver.create_pod(BURSTABLE_POD)
            files = container_cgroup_files(cgroup_version, shares=358, quota_us=70_000, memory_bytes=160 * MI)
            assert read_container_cgroup_files(pod.cgroup_parent, "", files) == files
            os.kill(driver.container_pid("default", "ls", "side"), signal.SIGKILL)
            wait_until("the killed container to run again through the proxy",
                       lambda: (c := driver.pod("default", "ls").container("side")).restart_count == 1
                       and c.state == "running", timeout=RESTART_TIMEOUT)
            parsed = KubeletClient(driver.kubelet_options()).get_pods()[0]
            ids = [c.container_id for c in parsed.containers]
            assert ids == [f"containerd://{c.container_id}" for c in driver.pod("default", "ls").containers]
            driver.delete_pod("default", "ls", 0)
            assert not any(d.exists() for d in driver.cgroup_dirs(pod.cgroup_parent))
            assert driver.errors == []
    finally:
        proxy.stop()
