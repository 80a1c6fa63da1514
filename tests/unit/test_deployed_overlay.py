"""The e2e node's overlay over the rendered manifests (tests/e2e/deployed.py): the image comes from the
``images:`` entry, every change is checked against what the manifests ship and recorded, and nothing else moves."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.deployed import NodeOverlay, OverlayError, find, pod_of, render

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the manifests")


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render("localhost/koordlet:9.9.9", tmp_path_factory.mktemp("render"))


def _koordlet_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return pod_of(find(objects, "DaemonSet", "koordlet"), "node-a", "node-a")


def test_the_images_entry_sets_both_workloads_image(objects: list[dict[str, Any]]) -> None:
    for kind, name in (("DaemonSet", "koordlet"), ("Deployment", "koord-companion")):
        [container] = find(objects, kind, name)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "localhost/koordlet:9.9.9", (kind, name)


def test_the_pod_is_the_template_bound_to_the_node(objects: list[dict[str, Any]]) -> None:
    daemonset = find(objects, "DaemonSet", "koordlet")
    pod = _koordlet_pod(objects)
    assert pod["spec"] == {**daemonset["spec"]["template"]["spec"], "nodeName": "node-a"}
    assert pod["metadata"]["labels"] == daemonset["spec"]["template"]["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


def test_changes_are_checked_recorded_and_nothing_else_moves(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    pod = _koordlet_pod(objects)
    overlay = NodeOverlay(host_paths={"/var/lib/koordlet": str(tmp_path / "state")},
                          args={"--kubelet-port": "12345"}, extra_args=["--cgroup-kube-parent=/p/kubepods"],
                          ports={9316: 23456})
    changed = overlay.apply(pod)
    assert pod == _koordlet_pod(objects)  # the input is left as it was
    [container] = changed["spec"]["containers"]
    assert "--kubelet-port=12345" in container["args"] and "--kubelet-port=10250" not in container["args"]
    assert container["args"][-1] == "--cgroup-kube-parent=/p/kubepods"
    assert container["livenessProbe"]["httpGet"]["port"] == 23456
    assert [p["containerPort"] for p in container["ports"]] == [23456]
    assert len(overlay.made) == 4, overlay.made
    # Undo the four changes: what is left is the shipped pod.
    undone = copy.deepcopy(changed)
    [c] = undone["spec"]["containers"]
    c["args"] = [a for a in c["args"] if not a.startswith("--cgroup-kube-parent")]
    c["args"][c["args"].index("--kubelet-port=12345")] = "--kubelet-port=10250"
    c["livenessProbe"]["httpGet"]["port"] = c["readinessProbe"]["httpGet"]["port"] = 9316
    c["ports"][0]["containerPort"] = 9316
    [state] = [v for v in undone["spec"]["volumes"] if v["name"] == "state"]
    state["hostPath"]["path"] = "/var/lib/koordlet"
    assert undone == pod


@pytest.mark.parametrize(("overlay", "message"), [
    (NodeOverlay(host_paths={"/nowhere": "/tmp/x"}), "no hostPath volume with path /nowhere"),
    (NodeOverlay(args={"--no-such-flag": "1"}), "expected --no-such-flag once"),
    (NodeOverlay(extra_args=["--kubelet-port=1"]), "--kubelet-port is shipped already"),
    (NodeOverlay(ports={1234: 1}), "no containerPort or probe port [1234]"),
])
def test_a_change_that_does_not_fit_the_manifests_fails(objects: list[dict[str, Any]], overlay: NodeOverlay,
                                                        message: str) -> None:
    with pytest.raises(OverlayError, match=message.replace("[", r"\[").replace("]", r"\]")):
        overlay.apply(_koordlet_pod(objects))
