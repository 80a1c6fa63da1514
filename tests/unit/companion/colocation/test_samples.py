"""Koordinator's published samples (../shared/reference/koordinator-samples, see its INDEX.md) through the
webhooks: the profiles of the colocation-profile and batch quick-start docs must mutate their pods into what the
docs show, and the sample pods must pass validation.

Two adjustments stand in for kube-apiserver, which runs before any webhook: a pod takes its namespace from the
request, and ``spec.priority`` is resolved from ``priorityClassName`` (the Priority admission plugin).  Where the
docs print ``kubernetes.io/batch-cpu: "1000"``, Koordinator's patch carries ``1k``, the canonical form of
``resource.NewQuantity(1000, DecimalSI)``; they are compared as quantities, and the exact text checked apart.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.quantity import parse_quantity
from koordlet.companion.colocation import Profile, mutate, validate
from tests.unit.companion.colocation.support import DictView, apply_patch, patch_ops, review

PRIORITIES = {"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000, "koord-free": 3000}
ENABLED = {"koordinator.sh/enable-colocation": "true"}
ANNOTATION = "node.koordinator.sh/extended-resource-spec"


def sample(shared_dir: Path, name: str) -> Any:
    return yaml.safe_load((shared_dir / "reference" / "koordinator-samples" / name).read_text())


def bad_sample(shared_dir: Path, name: str, *, image: str = "busybox") -> Any:
    """A sample INDEX.md lists as bad input as YAML: it must fail to load as written; the test then reads it
    with the doc's elisions (``...`` lines) dropped and a template placeholder filled in."""
    text = (shared_dir / "reference" / "koordinator-samples" / name).read_text()
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)
    kept = [line for line in text.splitlines() if line.strip() not in ("...", "# ...")]
    return yaml.safe_load("\n".join(kept).replace("{{.BusyBoxImage}}", image))


def as_apiserver_admits(pod: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    if namespace:
        pod.setdefault("metadata", {})["namespace"] = namespace
    spec = pod["spec"]
    if spec.get("priorityClassName") in PRIORITIES and "priority" not in spec:
        spec["priority"] = PRIORITIES[spec["priorityClassName"]]
    return pod


def pod_of_template(workload: dict[str, Any]) -> dict[str, Any]:
    template = workload["spec"]["template"]
    return {"metadata": dict(template.get("metadata") or {}), "spec": template["spec"]}


def strings(values: dict[str, Any]) -> dict[str, str]:
    """Label/annotation values as the doc meant them (its unquoted ``true`` and ``1000`` are not YAML strings)."""
    return {key: json.dumps(value) if not isinstance(value, str) else value for key, value in values.items()}


def assert_resources_equal(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for part in ("limits", "requests"):
        assert {k: parse_quantity(v) for k, v in actual[part].items()} == \
            {k: parse_quantity(v) for k, v in expected[part].items()}, part


def view_with(*profiles: Profile, namespaces: dict[str, dict[str, str]]) -> DictView:
    view = DictView(profiles, namespaces)
    return view


def test_profile_samples_parse(shared_dir: Path) -> None:
    example = Profile.from_object(sample(shared_dir, "crs/clustercolocationprofile-example.yaml"))
    assert (example.name, example.spec.qos_class, example.spec.koordinator_priority) == \
        ("colocation-profile-example", "BE", 1000)
    assert dict(example.spec.patch or {}) == {"spec": {"terminationGracePeriodSeconds": 30}}
    quickstart = Profile.from_object(sample(shared_dir, "crs/clustercolocationprofile-batch-quickstart.yaml"))
    assert quickstart.spec.selector is not None and dict(quickstart.spec.selector.match_labels or {}) == \
        {"app-type": "batch"}


def test_colocation_profile_doc_sample(shared_dir: Path) -> None:
    """docs/user-manuals/colocation-profile.md: test-pod in a namespace labelled for colocation."""
    profile = Profile.from_object(sample(shared_dir, "crs/clustercolocationprofile-example.yaml"))
    pod = as_apiserver_admits(sample(shared_dir, "pods/colocation-profile-test-pod-input.yaml"))
    response, decision = mutate(review(pod, namespace="default"), view_with(profile, namespaces={"default": ENABLED}))
    assert decision.profiles == ("colocation-profile-example",)
    mutated = apply_patch(pod, patch_ops(response))
    expected = bad_sample(shared_dir, "pods/colocation-profile-test-pod-mutated.yaml")
    assert strings(expected["metadata"]["labels"]).items() <= mutated["metadata"]["labels"].items()
    assert strings(expected["metadata"]["annotations"]).items() <= mutated["metadata"]["annotations"].items()
    for key in ("terminationGracePeriodSeconds", "priority", "priorityClassName", "schedulerName"):
        assert mutated["spec"][key] == expected["spec"][key], key
    resources = mutated["spec"]["containers"][0]["resources"]
    assert_resources_equal(resources, expected["spec"]["containers"][0]["resources"])
    assert resources["limits"]["kubernetes.io/batch-cpu"] == "1k"
    assert json.loads(mutated["metadata"]["annotations"][ANNOTATION]) == {"containers": {"app": {
        "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"},
        "requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"}}}}
    assert validate(review(mutated))[1].allowed


def test_batch_quick_start_sample(shared_dir: Path) -> None:
    """docs/best-practices/batch-colocation-quick-start.md: the Job's pod in namespace batch-demo."""
    profile = Profile.from_object(sample(shared_dir, "crs/clustercolocationprofile-batch-quickstart.yaml"))
    job = sample(shared_dir, "pods/batch-job-profile-input.yaml")
    pod = as_apiserver_admits(pod_of_template(job), job["metadata"]["namespace"])
    view = view_with(profile, namespaces={"batch-demo": ENABLED})
    mutated = apply_patch(pod, patch_ops(mutate(review(pod, namespace="batch-demo"), view)[0]))
    expected = sample(shared_dir, "pods/batch-job-profile-mutated-fragment.yaml")
    assert expected["metadata"]["labels"].items() <= mutated["metadata"]["labels"].items()
    assert mutated["spec"]["priorityClassName"] == "koord-batch" and mutated["spec"]["priority"] == 5000
    assert mutated["spec"]["schedulerName"] == "koord-scheduler"
    assert_resources_equal(mutated["spec"]["containers"][0]["resources"],
                           expected["spec"]["containers"][0]["resources"])
    assert validate(review(mutated))[1].allowed
    # The same pod in a namespace without the label is left alone (the annotation aside: it has no batch
    # resources, so not even that).
    unlabelled = view_with(profile, namespaces={"batch-demo": {}})
    assert patch_ops(mutate(review(pod, namespace="batch-demo"), unlabelled)[0]) == []


def test_manual_batch_job_gets_only_the_annotation(shared_dir: Path) -> None:
    pod = as_apiserver_admits(pod_of_template(sample(shared_dir, "pods/manual-batch-job.yaml")), "batch-demo")
    ops = patch_ops(mutate(review(pod), DictView())[0])
    assert ops == [{"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: json.dumps(
        {"containers": {"worker": {"limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "2Gi"},
                                   "requests": {"kubernetes.io/batch-cpu": "1k",
                                                "kubernetes.io/batch-memory": "2Gi"}}}},
        separators=(",", ":"))}}]
    assert validate(review(pod))[1].allowed


@pytest.mark.parametrize("name", ["be-pod-demo-batch-resources-4k.yaml", "be-pod-demo-no-resources.yaml",
                                  "priority-label-pod.yaml", "ls-pod-demo-nginx.yaml"])
def test_sample_pods_pass_validation(shared_dir: Path, name: str) -> None:
    pod = as_apiserver_admits(sample(shared_dir, f"pods/{name}"), "default")
    response, decision = validate(review(pod))
    assert decision.allowed, decision.reason
    assert response["response"]["status"]["code"] == 200


def test_lsr_deployment_sample_passes_validation(shared_dir: Path) -> None:
    pod = as_apiserver_admits(pod_of_template(sample(shared_dir, "pods/lsr-deployment-spread-by-pcpus.yaml")))
    assert validate(review(pod))[1].allowed
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
    assert validate(review(pod))[1].reason == \
        'pod.spec.containers[*].resources.requests: Invalid value: "1500m": the requested CPUs of LSR Pod must be ' \
        "integer"


def test_bad_yaml_pod_samples(shared_dir: Path) -> None:
    """e2e-be-demo (a Go template) and mid-tier-pod (doc elisions) as the docs meant them."""
    e2e = as_apiserver_admits(bad_sample(shared_dir, "pods/e2e-be-demo.yaml"), "default")
    assert validate(review(e2e))[1].allowed
    assert json.loads(apply_patch(e2e, patch_ops(mutate(review(e2e), DictView())[0]))["metadata"]["annotations"][
        ANNOTATION]) == {"containers": {"pause": {
            "limits": {"kubernetes.io/batch-cpu": "50", "kubernetes.io/batch-memory": "128Mi"},
            "requests": {"kubernetes.io/batch-cpu": "25", "kubernetes.io/batch-memory": "64Mi"}}}}
    mid = as_apiserver_admits(bad_sample(shared_dir, "pods/mid-tier-pod.yaml"), "default")
    assert validate(review(mid))[1].allowed
    assert patch_ops(mutate(review(mid), DictView())[0]) == []  # mid resources have no annotation
