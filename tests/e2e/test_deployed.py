"""The deployment itself (``--deployed`` only: koordlet and koord-companion as containers of the image, from the
pods the rendered manifests make): a SIGKILLed container is restarted by the kubelet and the loop holds afterwards,
and a deployment that lacks what the code needs fails with an error that names it.

Collected only with ``--deployed`` (tests/e2e/conftest.py): without the image there is nothing here to run.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from tests.e2e.deployednode import DeployedImage
from tests.e2e.harness import Report, cfs_quota, wait_for
from tests.e2e.node import BATCH_CPU, BATCH_MEMORY, BUSY, KubeNode, container, kube_node, pod_manifest
from tests.fixtures.fakekubelet import TlsFiles

RESTART_SECONDS = 120.0
"""kubelet's first restart back-off (10 s) plus a container start (the image's Python, the companion's client)."""


def _be_pod(name: str) -> dict[str, object]:
    return pod_manifest(name, [container("burn", BUSY, requests={BATCH_CPU: "500", BATCH_MEMORY: "128Mi"},
                                         limits={BATCH_CPU: "1000", BATCH_MEMORY: "256Mi"})],
                        qos="BE", priority_class="koord-batch", priority=5900)


def _threshold(node: KubeNode) -> object:
    return (node.view.slo()["spec"].get("resourceUsedThresholdWithBE") or {}).get("cpuSuppressThresholdPercent")


def test_killed_containers_are_restarted_and_the_loop_holds(node: KubeNode, e2e_report: Report) -> None:
    figures = {}
    for component in (node.koordlet, node.companion):
        before = node.kubelet.pod(component.namespace, component.pod).container(component.container)
        began = time.monotonic()
        pid = component.kill()
        wait_for(f"{component.name} restarted by the kubelet", lambda c=component, b=before: c.alive() and (
            node.kubelet.pod(c.namespace, c.pod).container(c.container).restart_count > b.restart_count),
            RESTART_SECONDS)
        wait_for("koordlet's components running", node.view.ready, RESTART_SECONDS, node.procs)
        figures[component.name] = {"killed_pid": pid, "running_again_seconds": round(time.monotonic() - began, 1)}
        if component is node.koordlet and node.variant == "nri":
            wait_for("koordlet registered again as an NRI plugin",
                     lambda: "NRI plugin registered" in node.koordlet.log_path.read_text(errors="replace"),
                     RESTART_SECONDS, node.procs)
    # After both restarts: the companion's NodeSLO reaches the restarted koordlet (a ConfigMap edit), and a new BE
    # pod gets its batch CFS quota from koordlet's hooks (NRI, or the proxy calling the hook server).
    node.set_thresholds(cpuSuppressThresholdPercent=61)
    wait_for("the edited NodeSLO on the restarted koordlet", lambda: _threshold(node) == 61, RESTART_SECONDS,
             node.procs)
    node.set_thresholds()
    node.create_pod(_be_pod("be-after-restarts"))
    rel = node.container_dir("be-after-restarts", "burn")
    wait_for("the BE container's batch CFS quota (1000 milli-cores)", lambda: cfs_quota(rel)[0] == 100_000,
             60, node.procs)
    node.delete_pod("be-after-restarts")
    e2e_report.record("deployed_restarts", node.variant, **figures)


def test_a_missing_rbac_grant_fails_the_loop_naming_it(deployed_image: DeployedImage, apiserver_tls: TlsFiles,
                                                      tmp_path: object) -> None:
    # The companion may no longer create TokenReviews: it cannot tell which node a koordlet is, so no koordlet
    # gets its NodeSLO; the error says why (the companion's 403 in its log).
    from tests.fixtures.rbac import default_policy

    policy = default_policy()
    [role] = [o for o in policy if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "koord-companion"]
    role["rules"] = [r for r in role["rules"] if "tokenreviews" not in r.get("resources", [])]
    broken = dataclasses.replace(deployed_image, rbac=tuple(policy))
    with pytest.raises(AssertionError) as failed, kube_node("nri", apiserver_tls, image=broken):
        pass
    text = str(failed.value)
    assert "NodeSLO" in text, text
    assert 'cannot create resource \\"tokenreviews\\"' in text or 'cannot create resource "tokenreviews"' in text, text


def test_a_read_only_cgroup_mount_fails_the_loop_naming_it(deployed_image: DeployedImage,
                                                          apiserver_tls: TlsFiles) -> None:
    # The DaemonSet's host-cgroup mount read-only (recursively: deployednode.recursive_read_only): koordlet says at
    # start that the requirement is not met, and a BE pod's batch limits fail to reach the kernel with the kernel's
    # own reason.
    broken = dataclasses.replace(deployed_image, read_only_cgroup=True)
    with kube_node("nri", apiserver_tls, image=broken) as node:
        start = node.koordlet.log_path.read_text(errors="replace")
        [requirement] = [json.loads(line.split(" ", 3)[3]) for line in start.splitlines()
                         if "host requirement not met" in line]
        assert requirement["probe"] == "cgroup_writable" and requirement["level"] == "error", requirement
        assert requirement["reason"].startswith("mounted read-only: /host-cgroup/"), requirement
        node.create_pod(_be_pod("be-read-only"))
        wait_for("koordlet's failed write of the BE pod's limits", lambda: "Read-only file system" in
                 node.koordlet.log_path.read_text(errors="replace"), 60, node.procs)
        failures = [line for line in node.koordlet.log_path.read_text(errors="replace").splitlines()
                    if "Read-only file system" in line]
        assert any("/host-cgroup/" in line for line in failures), failures[:3]
