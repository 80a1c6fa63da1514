"""The assembled agent hands the runtime hooks' reconciler the kube-QoS directories under the configured
kube parent, and group identity's node-level part and the sysctl executor reach it: the wiring of issue 21's
kube-QoS group identity (the behaviour itself: tests/unit/runtimehooks/hooks/test_groupidentity_kubeqos.py)."""

from __future__ import annotations

import os
from pathlib import Path

from koordlet.system.kubepaths import KubeQoS, qos_dir
from tests.integration.daemon.test_agent import build


def test_agent_wires_kube_qos_dirs_and_group_identity_node_level(tmp_path: Path) -> None:
    agent = build(tmp_path)
    hooks = agent.hooks
    reconciler = hooks.reconciler
    driver = agent.driver.driver
    parent = f"koordlet-test-{os.getpid()}-absent"
    assert reconciler._qos_dirs == {q: f"{parent}/{qos_dir(driver, q)}" for q in KubeQoS}
    assert [h.name for h in hooks.runner.node_hooks] == ["groupidentity"]
