"""Koordinator's documented pods (../shared/reference/koordinator-samples/pods) read as Koordinator means."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.pod import Pod, pod_from_json
from koordlet.system.kubepaths import KubeQoS


def load_pod(shared_dir: Path, name: str) -> Pod:
    docs = list(yaml.safe_load_all((shared_dir / "reference/koordinator-samples/pods" / name).read_text()))
    pods = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Pod"]
    assert len(pods) == 1, name
    obj: dict[str, Any] = pods[0]
    obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    return pod_from_json(obj)


@pytest.mark.parametrize(("sample", "qos", "kube_qos", "band"), [
    ("be-pod-demo-batch-resources-4k.yaml", QoSClass.BE, KubeQoS.BESTEFFORT, PriorityClass.BATCH),
    ("be-pod-demo-no-resources.yaml", QoSClass.BE, KubeQoS.BESTEFFORT, None),
    ("ls-pod-demo-nginx.yaml", QoSClass.LS, None, None),
    # qosClass written as an annotation is not a QoS label: Kubernetes' Burstable -> LS applies.
    ("redis-demo-memory-qos-auto.yaml", QoSClass.LS, KubeQoS.BURSTABLE, None),
    ("stress-demo-memory-qos-auto-be.yaml", QoSClass.BE, KubeQoS.BESTEFFORT, None),
    ("priority-label-pod.yaml", QoSClass.BE, KubeQoS.BESTEFFORT, PriorityClass.BATCH),
])
def test_documented_pods(shared_dir: Path, sample: str, qos: QoSClass, kube_qos: KubeQoS | None,
                         band: PriorityClass | None) -> None:
    pod = load_pod(shared_dir, sample)
    assert pod.qos is qos
    if kube_qos is not None:
        assert pod.kube_qos is kube_qos
    if band is not None:
        assert pod.priority_class is band


def test_batch_resources_are_milli_cores_and_bytes(shared_dir: Path) -> None:
    (container,) = load_pod(shared_dir, "be-pod-demo-batch-resources-4k.yaml").containers
    assert container.requests.batch_cpu_milli == 4000  # "4k" batch-cpu = 4000 milli-cores = 4 cores
    assert container.limits.batch_memory_bytes == 4 * 2**30
