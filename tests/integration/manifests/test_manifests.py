"""manifests/: rendered with ``kubectl kustomize`` and validated offline.

Every rendered object is checked against the published Kubernetes schemas (kubernetes-validate, strict: unknown
fields fail) for a fixed Kubernetes version; Koordinator's sample NodeSLO/NodeMetric/ClusterColocationProfile
objects are checked against our CRDs' openAPIV3Schema; then the invariants that no schema knows: RBAC references
and least privilege, the DaemonSet's mounts against koordlet's host-path defaults, probes against koordlet's
routes, the ConfigMaps against koordlet's and the descheduler's own parsers, the admission webhooks against the
Service and the companion's flags.  Integration, because kubectl comes from tests/host-deps.sh.
"""

from __future__ import annotations

import copy
import importlib
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo.defaults import (
    default_cpu_burst_strategy,
    default_resource_qos_strategy,
    default_system_strategy,
)
from koordlet.apis.sloconfig import LabelSelector, render_colocation, render_nodeslo
from koordlet.cli.koordlet import build_parser
from koordlet.companion.colocation.profile import Profile
from koordlet.companion.colocation.webhook import MUTATE_PATH, VALIDATE_PATH, service_dns_names
from koordlet.companion.descheduler import lownodeload_args
from koordlet.companion.descheduler.config import load_config
from koordlet.config.load import flags_from_args, load
from koordlet.config.types import HostConfig
from koordlet.metrics.server import PATH_HEALTHZ
from runtimeproxy.intercept import DEFAULT_SKIP

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install 'kubernetes-validate>=1.30'")
jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
KUBE_VERSION = "1.30.0"
NAMESPACE = "koordinator-system"
SLO_GROUP = "slo.koordinator.sh"
CONFIG_GROUP = "config.koordinator.sh"
# Koordinator's samples: (file, expected kind). All of them are valid objects once null fields are pruned.
CR_SAMPLES = [
    ("clustercolocationprofile-example.yaml", "ClusterColocationProfile"),
    ("clustercolocationprofile-batch-quickstart.yaml", "ClusterColocationProfile"),
    ("nodeslo-after-quickstart-edit.yaml", "NodeSLO"),
    ("nodeslo-crd-reference-sample.yaml", "NodeSLO"),
    ("nodeslo-template-resource-threshold.yaml", "NodeSLO"),
    ("nodemetric-crd-reference-sample.yaml", "NodeMetric"),
    ("nodemetric-kubebuilder-sample.yaml", "NodeMetric"),
    ("nodemetric-v0.1-status-sample.yaml", "NodeMetric"),
]


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not found (tests/host-deps.sh installs Debian's kubernetes-client as root)")
    result = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, f"kubectl kustomize failed: {result.stderr}"
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    assert docs, "kubectl kustomize rendered nothing"
    return docs


@pytest.fixture(scope="module")
def objects(rendered: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    for obj in rendered:
        assert _key(obj) not in by_key, f"duplicate object {_key(obj)}"
        by_key[_key(obj)] = obj
    return by_key


def _one(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str, name: str,
         namespace: str = "") -> dict[str, Any]:
    obj = objects.get((kind, namespace, name))
    assert obj is not None, f"{kind} {namespace}/{name} not rendered"
    return obj


def _of_kind(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for (k, _ns, _n), obj in objects.items() if k == kind]


# ------------------------------------------------------------------------------------------ schemas


def test_every_object_validates_against_the_kubernetes_schemas(rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        # strict: additionalProperties false everywhere, so a misspelt field fails instead of being dropped.
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_namespaced_objects_land_in_koordinator_system(rendered: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for obj in rendered:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, f"{_key(obj)} is cluster-scoped"
        else:
            assert namespace == NAMESPACE, f"{_key(obj)} in {namespace!r}"


def _crd(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    for crd in _of_kind(objects, "CustomResourceDefinition"):
        if crd["spec"]["names"]["kind"] == kind:
            return crd
    raise AssertionError(f"no CRD for {kind}")


def _schema_nodes(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _schema_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _schema_nodes(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from _schema_nodes(schema["items"], f"{path}[]")


def _cluster_scoped_v1alpha1(crd: Mapping[str, Any], group: str) -> Mapping[str, Any]:
    """The CRD's only version, after checking what every CRD here shares: cluster scope, the name
    ``<plural>.<group>``, v1alpha1 served and stored, a status subresource."""
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == (group, "Cluster")
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{group}"
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    return version


@pytest.mark.parametrize("kind", ["NodeSLO", "NodeMetric"])
def test_crd_shape(objects: dict[tuple[str, str, str], dict[str, Any]], kind: str) -> None:
    crd = _crd(objects, kind)
    version = _cluster_scoped_v1alpha1(crd, SLO_GROUP)
    schema = version["schema"]["openAPIV3Schema"]
    preserved = []
    for path, node in _schema_nodes(schema):
        # Structural schema: every node has a type, except int-or-string (anyOf of integer and string).
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{kind}{path}: no type"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.append(path)
    # Only where upstream has a free-form map (NodeSLO.spec.extensions).
    assert preserved == ([".spec.extensions"] if kind == "NodeSLO" else [])
    # Printer columns must name fields the schema has.
    assert version["additionalPrinterColumns"]
    for column in version["additionalPrinterColumns"]:
        node: Mapping[str, Any] = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            if part in node.get("properties", {}):
                node = node["properties"][part]
            elif isinstance(node.get("additionalProperties"), Mapping):  # a map key such as resources.cpu
                node = node["additionalProperties"]
            else:
                # metadata is `type: object` in every CRD; the apiserver knows its fields.
                assert node.get("type") == "object" and column["jsonPath"].startswith(".metadata."), (
                    f"{kind} column {column['name']}: {column['jsonPath']}")
                break


def test_cluster_colocation_profile_crd_shape(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    crd = _crd(objects, "ClusterColocationProfile")
    schema = _cluster_scoped_v1alpha1(crd, CONFIG_GROUP)["schema"]["openAPIV3Schema"]
    assert crd["metadata"]["name"] == "clustercolocationprofiles.config.koordinator.sh"
    preserved = []
    for path, node in _schema_nodes(schema):
        # Structural: a type everywhere but on int-or-string and on the free-form patch.
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"), f"{path}: no type"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.append(path)
    assert preserved == [".spec.patch"]
    fields = schema["properties"]["spec"]["properties"]
    assert set(fields) == {"namespaceSelector", "selector", "probability", "qosClass", "priorityClassName",
                           "koordinatorPriority", "labels", "annotations", "labelKeysMapping",
                           "annotationKeysMapping", "labelSuffixes", "schedulerName", "patch"}
    # The classes koordlet knows, in Koordinator's order.
    assert fields["qosClass"]["enum"] == ["LSE", "LSR", "LS", "BE", "SYSTEM"]
    assert set(fields["qosClass"]["enum"]) == {c.value for c in QoSClass if c is not QoSClass.NONE}
    assert fields["probability"]["x-kubernetes-int-or-string"] is True
    assert fields["probability"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert (fields["koordinatorPriority"]["type"], fields["koordinatorPriority"]["format"]) == ("integer", "int32")
    for selector in ("namespaceSelector", "selector"):
        assert fields[selector]["x-kubernetes-map-type"] == "atomic"
        assert fields[selector]["properties"]["matchExpressions"]["items"]["required"] == ["key", "operator"]


def _prune_nulls(value: Any) -> Any:
    # kube-apiserver drops null values of fields that are not nullable before validating (the kubebuilder
    # sample's `spec:` with only a comment is `spec: null`).
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


def _closed(schema: Any) -> Any:
    """The CRD schema as a JSON schema that rejects unknown fields (kube-apiserver would prune them silently;
    for our samples an unknown field means a typo in the schema or the sample)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields") and out["properties"]):
        out["additionalProperties"] = False
    return out


def _validator(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str) -> Any:
    schema = _closed(_crd(objects, kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    validator_cls = jsonschema.Draft4Validator
    validator_cls.check_schema(schema)
    return validator_cls(schema)


@pytest.mark.parametrize(("sample", "kind"), CR_SAMPLES)
def test_koordinator_samples_validate_against_our_crds(
        objects: dict[tuple[str, str, str], dict[str, Any]], sample: str, kind: str, shared_dir: Path) -> None:
    path = shared_dir / "reference" / "koordinator-samples" / "crs" / sample
    [doc] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert doc["kind"] == kind
    _assert_valid(objects, kind, doc)


def _assert_valid(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str, doc: Mapping[str, Any]) -> None:
    crd = _crd(objects, kind)
    assert doc["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    errors = sorted(_validator(objects, kind).iter_errors(_prune_nulls(doc)), key=str)
    assert not errors, "\n".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


@pytest.mark.parametrize(("kind", "bad"), [
    ("NodeSLO", {"spec": {"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 101}}}),
    ("NodeSLO", {"spec": {"resourceUsedThresholdWithBE": {"enable": "true"}}}),
    ("NodeSLO", {"spec": {"resourceQOSStrategy": {"beClass": {"memoryQOS": {"wmarkMinAdj": 51}}}}}),
    ("NodeSLO", {"spec": {"cpuBurstStrategy": {"cpuBurstPercnt": 1000}}}),
    ("NodeMetric", {"spec": {"metricCollectPolicy": {"nodeMemoryCollectPolicy": "usage"}}}),
    ("NodeMetric", {"status": {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "1 core"}}}}}),
    ("ClusterColocationProfile", {"spec": {"qosClass": "be"}}),
    ("ClusterColocationProfile", {"spec": {"koordinatorPriority": "1000"}}),
    ("ClusterColocationProfile", {"spec": {"probability": 0.5}}),
    ("ClusterColocationProfile", {"spec": {"labels": {"koordinator.sh/mutated": True}}}),
    ("ClusterColocationProfile", {"spec": {"selector": {"matchExpressions": [{"key": "app"}]}}}),
    ("ClusterColocationProfile", {"spec": {"namespaceSelector": {"matchLabel": {"team": "batch"}}}}),
])
def test_crd_schemas_reject_bad_objects(objects: dict[tuple[str, str, str], dict[str, Any]], kind: str,
                                        bad: dict[str, Any]) -> None:
    group = _crd(objects, kind)["spec"]["group"]
    doc = {"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": "node-1"}, **bad}
    assert list(_validator(objects, kind).iter_errors(doc))


@pytest.mark.parametrize("probability", [0, 100, "30%"])
def test_profile_probability_is_an_int_or_a_string(objects: dict[tuple[str, str, str], dict[str, Any]],
                                                   probability: int | str) -> None:
    doc = {"apiVersion": f"{CONFIG_GROUP}/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "p"}, "spec": {"probability": probability}}
    _assert_valid(objects, "ClusterColocationProfile", doc)


# ------------------------------------------------------------------------------------------ RBAC


def test_rbac_references_resolve_and_have_no_wildcards(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    service_accounts = {(o["metadata"]["namespace"], o["metadata"]["name"])
                        for o in _of_kind(objects, "ServiceAccount")}
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for binding in _of_kind(objects, kind):
            ref = binding["roleRef"]
            namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            assert ref["kind"] == role_kind or ref["kind"] == "ClusterRole"
            _one(objects, ref["kind"], ref["name"], namespace)
            for subject in binding["subjects"]:
                assert subject["kind"] == "ServiceAccount"
                assert (subject["namespace"], subject["name"]) in service_accounts, subject
    for role in _of_kind(objects, "ClusterRole") + _of_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), f"{_key(role)}: '*' in {field}"
            assert "resourceNames" not in rule or rule["verbs"] != ["list"]


def test_every_pod_runs_as_an_existing_service_account(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    workloads = _of_kind(objects, "DaemonSet") + _of_kind(objects, "Deployment")
    assert len(workloads) == 2
    for workload in workloads:
        name = workload["spec"]["template"]["spec"].get("serviceAccountName")
        assert name, f"{_key(workload)} runs as the default ServiceAccount"
        _one(objects, "ServiceAccount", name, workload["metadata"]["namespace"])


def _grants(objects: Mapping[tuple[str, str, str], dict[str, Any]], service_account: str
            ) -> set[tuple[str, str, str, str]]:
    """(namespace or '', apiGroup, resource, verb) the ServiceAccount holds."""
    out = set()
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in _of_kind(objects, kind):
            if not any(s["name"] == service_account for s in binding["subjects"]):
                continue
            ref = binding["roleRef"]
            namespace = binding["metadata"].get("namespace", "")
            role = _one(objects, ref["kind"], ref["name"], namespace if ref["kind"] == "Role" else "")
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            out.add((namespace, group, resource, verb))
    return out


def test_koordlet_only_reaches_kubelet(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    # koordlet never calls kube-apiserver; kubelet (KubeletFineGrainedAuthz, 1.33+) authorizes GET /pods/ as
    # `get nodes/pods` and GET /configz as `get nodes/configz`. Never nodes/proxy: it also opens exec on every node.
    assert _grants(objects, "koordlet") == {("", "", "nodes/pods", "get"), ("", "", "nodes/configz", "get")}


def test_kubelet_proxy_fallback_is_documented_not_installed() -> None:
    path = MANIFESTS / "rbac" / "koordlet-kubelet-proxy-fallback.yaml"
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    assert "rbac/koordlet-kubelet-proxy-fallback.yaml" not in kustomization["resources"]
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    [role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    [binding] = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "koordlet", "namespace": NAMESPACE}]
    # The default install says where the fallback is and when it is needed.
    assert "koordlet-kubelet-proxy-fallback.yaml" in (MANIFESTS / "rbac" / "koordlet.yaml").read_text(encoding="utf-8")


def test_companion_grants(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    grants = _grants(objects, "koord-companion")
    needed = {
        ("", "", "nodes", "watch"), ("", "", "nodes", "get"), ("", "", "nodes/status", "patch"),
        ("", "", "pods/eviction", "create"), ("", "", "pods", "get"),
        ("", "authentication.k8s.io", "tokenreviews", "create"),
        ("", SLO_GROUP, "nodeslos", "create"), ("", SLO_GROUP, "nodeslos", "update"),
        ("", SLO_GROUP, "nodemetrics", "create"), ("", SLO_GROUP, "nodemetrics/status", "update"),
        ("", SLO_GROUP, "nodemetrics", "watch"),  # every replica: the other replicas' nodes' usage
        (NAMESPACE, "", "configmaps", "watch"), (NAMESPACE, "coordination.k8s.io", "leases", "update"),
        (NAMESPACE, "", "secrets", "create"), (NAMESPACE, "", "secrets", "get"),
        # pod webhooks: the profiles, the namespaces' labels, the priority classes' values, its own caBundle
        ("", CONFIG_GROUP, "clustercolocationprofiles", "list"),
        ("", CONFIG_GROUP, "clustercolocationprofiles", "watch"),
        ("", "", "namespaces", "get"), ("", "", "namespaces", "list"), ("", "", "namespaces", "watch"),
        ("", "scheduling.k8s.io", "priorityclasses", "list"), ("", "scheduling.k8s.io", "priorityclasses", "watch"),
        ("", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
        ("", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update"),
        ("", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
        ("", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "update"),
        # descheduler: each round's snapshot, priorityThreshold by name, evictions, autoCordon
        ("", "", "nodes", "list"), ("", "", "pods", "list"), ("", SLO_GROUP, "nodemetrics", "list"),
        ("", "scheduling.k8s.io", "priorityclasses", "get"), ("", "", "nodes", "patch"),
    }
    assert needed <= grants
    # Profiles and namespaces are read, never written.
    assert {g[3] for g in grants if g[2] == "clustercolocationprofiles"} == {"list", "watch"}
    assert {g[3] for g in grants if g[2] == "namespaces"} == {"get", "list", "watch"}
    # ConfigMaps, Leases and Secrets only in its own namespace; nothing may delete.
    assert not {g for g in grants if g[2] in ("configmaps", "leases", "secrets") and g[0] != NAMESPACE}
    assert not {g for g in grants if g[3] in ("delete", "deletecollection", "escalate", "bind", "impersonate")}
    assert not {g for g in grants if g[2] == "nodes/proxy"}
    # The Secrets and the Lease it reads and rewrites are named; only create cannot be.
    role = _one(objects, "Role", "koord-companion", NAMESPACE)
    for rule in role["rules"]:
        if rule["resources"] in (["secrets"], ["leases"]) and rule["verbs"] != ["create"]:
            assert rule["resourceNames"] in (["koord-companion-tls", "koord-companion-webhook-certs"],
                                             ["koord-companion"]), rule
    # Webhook configurations: only its own two, by name, and never created or deleted by it (the install does).
    cluster_role = _one(objects, "ClusterRole", "koord-companion")
    for rule in cluster_role["rules"]:
        if rule["apiGroups"] == ["admissionregistration.k8s.io"]:
            assert rule["resourceNames"] == ["koord-companion"], rule
            assert not {"create", "delete"} & set(rule["verbs"]), rule


# ------------------------------------------------------------------------------------------ koordlet DaemonSet


@pytest.fixture(scope="module")
def daemonset(objects: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, Any]:
    return _one(objects, "DaemonSet", "koordlet", NAMESPACE)


def _container(workload: Mapping[str, Any], name: str) -> dict[str, Any]:
    [container] = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return container


def _expand(arg: str, env: Mapping[str, str]) -> str:
    for name, value in env.items():
        arg = arg.replace(f"$({name})", value)
    return arg


@pytest.fixture(scope="module")
def koordlet_config(daemonset: dict[str, Any]) -> Any:
    """The Config koordlet builds from the DaemonSet's command line (flag names, values and checks)."""
    container = _container(daemonset, "koordlet")
    assert container["command"][0] == "koordlet"
    env = {"NODE_NAME": "node-1", "HOST_IP": "192.0.2.10"}
    argv = [_expand(a, env) for a in container["command"][1:] + container.get("args", [])]
    args = build_parser().parse_args(argv)
    assert args.command == "run"
    return load(None, flags_from_args(args))


def _host_path(daemonset: Mapping[str, Any], container_path: str) -> str | None:
    """The host path a container path resolves to through the hostPath mounts (longest mount wins)."""
    pod = daemonset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    best: tuple[int, str] | None = None
    path = PurePosixPath(container_path)
    for mount in _container(daemonset, "koordlet")["volumeMounts"]:
        mount_path = PurePosixPath(mount["mountPath"])
        source = volumes[mount["name"]].get("hostPath")
        if source is None or not (path == mount_path or mount_path in path.parents):
            continue
        host = PurePosixPath(source["path"]) / path.relative_to(mount_path)
        if best is None or len(mount_path.parts) > best[0]:
            best = (len(mount_path.parts), str(host))
    return best[1] if best else None


def test_host_trees_resolve_to_the_host_paths_koordlet_defaults_name(
        daemonset: dict[str, Any], koordlet_config: Any) -> None:
    defaults = HostConfig()
    host = koordlet_config.host
    for field in ("cgroup_root_dir", "sys_root_dir"):
        assert _host_path(daemonset, getattr(host, field)) == getattr(defaults, field), field
    # The host's /var/run is not mounted: koordlet opens nothing there but the sockets mounted one by one below.
    assert _host_path(daemonset, "/var/run") is None and _host_path(daemonset, "/host-var-run") is None
    # /proc is the host's through hostPID, not through a mount.
    assert daemonset["spec"]["template"]["spec"]["hostPID"] is True
    assert host.proc_root_dir == defaults.proc_root_dir == "/proc"
    assert _host_path(daemonset, host.proc_root_dir) is None


def test_fixed_host_paths_are_mounted_at_the_same_place(daemonset: dict[str, Any], koordlet_config: Any) -> None:
    hooks = koordlet_config.runtime_hooks
    # koord-runtime-proxy, containerd and the next koordlet see these paths on the host, so inside == outside.
    same = {
        "hook server socket": hooks.server_socket,
        "hook server registration dir": hooks.registration_dir,
        "NRI socket": hooks.nri_socket_path,
        "state dir": koordlet_config.state_dir,
    }
    for what, path in same.items():
        assert _host_path(daemonset, path) == path, what
    assert hooks.host_endpoint in ("", hooks.server_socket)
    assert koordlet_config.node_name == "node-1"
    assert koordlet_config.kubelet.address == "192.0.2.10"
    # Koordinator's runtime-hook defaults.
    assert (hooks.enable_nri, hooks.enable_server, hooks.failure_policy) == (True, True, "Ignore")
    assert hooks.reconcile_interval_seconds == 10.0


def test_koordlet_pod_spec(daemonset: dict[str, Any], koordlet_config: Any) -> None:
    template = daemonset["spec"]["template"]
    pod = template["spec"]
    container = _container(daemonset, "koordlet")
    skip_key, skip_value = DEFAULT_SKIP
    assert template["metadata"]["labels"][skip_key] == skip_value
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    assert container["securityContext"]["privileged"] is True
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    [node_name] = [e for e in container["env"] if e["name"] == "NODE_NAME"]
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert container["resources"] == {"requests": {"cpu": "0", "memory": "0"},
                                      "limits": {"cpu": "500m", "memory": "256Mi"}}
    assert container["image"].split(":")[0].rsplit("/", 1)[-1] == "koordlet"
    metrics_port = int(koordlet_config.server.addr.rpartition(":")[2])
    for probe in ("livenessProbe", "readinessProbe"):
        http = container[probe]["httpGet"]
        assert http["path"] == PATH_HEALTHZ
        assert http["port"] == metrics_port
    assert {"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"} in container["ports"]


# ------------------------------------------------------------------------------------------ companion


def test_companion_deployment_service_and_pdb(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    deployment = _one(objects, "Deployment", "koord-companion", NAMESPACE)
    service = _one(objects, "Service", "koord-companion", NAMESPACE)
    pdb = _one(objects, "PodDisruptionBudget", "koord-companion", NAMESPACE)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    container = _container(deployment, "koord-companion")
    assert "--leader-elect=true" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports) == {"grpc", "extender", "metrics", "webhook"}
    for selector in (service["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"],
                     deployment["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports
        # kube-apiserver calls a webhook service on 443 unless told otherwise; the rest keep their numbers.
        assert port["port"] == (443 if port["name"] == "webhook" else ports[port["targetPort"]])
    assert pdb["spec"]["minAvailable"] == 1


def _companion_args(objects: Mapping[tuple[str, str, str], dict[str, Any]]) -> Any:
    """The companion Deployment's command line as koord-companion parses it (flag names and values checked)."""
    from koordlet.companion.cli import build_parser as companion_parser

    container = _container(_one(objects, "Deployment", "koord-companion", NAMESPACE), "koord-companion")
    assert container["command"] == ["koord-companion"]
    env = {"POD_NAMESPACE": NAMESPACE, "POD_NAME": "koord-companion-0"}
    return companion_parser().parse_args([_expand(a, env) for a in container["args"]])


def test_companion_authenticates_koordlets_by_default(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    args = _companion_args(objects)
    # Per-node identity: TokenReview of each koordlet's projected token, bound to its pod's node.
    assert args.auth == "tokenreview"
    assert args.insecure is False and args.token_file == ""
    assert args.koordlet_service_account == f"system:serviceaccount:{NAMESPACE}:koordlet"
    # TLS from the bootstrapped Secret the koordlets take their CA from.
    assert args.tls_secret == f"{NAMESPACE}/koord-companion-tls"
    assert not args.tls_cert_file and not args.tls_key_file


def test_koordlet_presents_a_projected_token_and_checks_the_companion_ca(
        objects: dict[tuple[str, str, str], dict[str, Any]], daemonset: dict[str, Any], koordlet_config: Any) -> None:
    args = _companion_args(objects)
    pod = daemonset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in _container(daemonset, "koordlet")["volumeMounts"]}
    companion = koordlet_config.companion
    # The token: audience the companion expects (so kube-apiserver and kubelet refuse it), short-lived, rotated.
    [source] = volumes["companion-token"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] in args.token_audience.split(",")
    assert token["audience"] == "koord-companion"
    assert token["expirationSeconds"] == 3600
    assert mounts["companion-token"]["readOnly"] is True
    assert companion.token_file == f"{mounts['companion-token']['mountPath']}/{token['path']}"
    assert companion.token_file == "/var/run/secrets/koordinator.sh/companion/token"
    # The CA: only ca.crt of the companion's serving Secret, never its key.
    secret = volumes["companion-ca"]["secret"]
    assert secret["secretName"] == args.tls_secret.partition("/")[2]
    assert secret["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert mounts["companion-ca"]["readOnly"] is True
    assert companion.ca_file == f"{mounts['companion-ca']['mountPath']}/ca.crt"
    # The address koordlets dial is a name the bootstrapped certificate carries (--tls-dns-names' default).
    host = companion.address.rpartition(":")[0]
    assert host in ("koord-companion", f"koord-companion.{NAMESPACE}", f"koord-companion.{NAMESPACE}.svc",
                    f"koord-companion.{NAMESPACE}.svc.cluster.local")


def test_network_policy_admits_only_the_scheduler_to_the_extender(
        objects: dict[tuple[str, str, str], dict[str, Any]], daemonset: dict[str, Any]) -> None:
    policy = _one(objects, "NetworkPolicy", "koord-companion", NAMESPACE)
    deployment = _one(objects, "Deployment", "koord-companion", NAMESPACE)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    by_port: dict[str, list[Any]] = {}
    for rule in spec["ingress"]:
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            by_port.setdefault(port["port"], []).append(rule.get("from"))
    ports = {p["name"] for p in _container(deployment, "koord-companion")["ports"]}
    assert set(by_port) == ports  # every port has its rule; no rule opens a port the pod does not have
    # gRPC is open at the network layer: koordlet is a host-network pod, whose traffic most network plugins
    # attribute to its node, which no podSelector matches; per-node tokens over TLS guard the port instead.
    assert daemonset["spec"]["template"]["spec"]["hostNetwork"] is True
    assert by_port["grpc"] == [None]
    [extender] = by_port["extender"]
    assert extender == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                         "podSelector": {"matchLabels": {"component": "kube-scheduler"}}}]
    # kube-apiserver calls the webhooks from the control-plane nodes' addresses, which no selector matches; with
    # failurePolicy Ignore a closed port would let every pod through unprofiled without a word.
    assert by_port["webhook"] == [None]


# ------------------------------------------------------------------------------------------ admission webhooks

# (configuration kind, webhook name) -> (path the companion serves, operations), as Koordinator's mpod-create /
# vpod webhooks (its config/webhook/manifests.yaml).
WEBHOOKS = {
    ("MutatingWebhookConfiguration", "mpod-create.koordinator.sh"): (MUTATE_PATH, ["CREATE"]),
    ("ValidatingWebhookConfiguration", "vpod.koordinator.sh"): (VALIDATE_PATH, ["CREATE", "UPDATE"]),
}


def _webhook(objects: Mapping[tuple[str, str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    [webhook] = _one(objects, kind, "koord-companion")["webhooks"]
    return webhook


@pytest.mark.parametrize(("kind", "name"), list(WEBHOOKS))
def test_pod_webhook(objects: dict[tuple[str, str, str], dict[str, Any]], kind: str, name: str) -> None:
    path, operations = WEBHOOKS[(kind, name)]
    webhook = _webhook(objects, kind)
    assert webhook["name"] == name
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                                 "resources": ["pods"], "scope": "Namespaced"}]
    # Ignore: a companion that is down or slow must never stop pods from being created.
    assert (webhook["failurePolicy"], webhook["sideEffects"], webhook["admissionReviewVersions"],
            webhook["timeoutSeconds"]) == ("Ignore", "None", ["v1"], 3)
    # The companion writes caBundle (its bootstrapped CA); one in the manifest would be stale after rotation.
    assert "caBundle" not in webhook["clientConfig"] and "url" not in webhook["clientConfig"]
    assert "objectSelector" not in webhook  # profiles select pods themselves
    service_ref = webhook["clientConfig"]["service"]
    assert (service_ref["namespace"], service_ref["path"]) == (NAMESPACE, path)
    # The Service port kube-apiserver dials leads to the container port the companion's webhook listens on.
    service = _one(objects, "Service", service_ref["name"], NAMESPACE)
    [port] = [p for p in service["spec"]["ports"] if p["port"] == service_ref.get("port", 443)]
    container = _container(_one(objects, "Deployment", "koord-companion", NAMESPACE), "koord-companion")
    [container_port] = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert (container_port["name"], container_port["containerPort"]) == ("webhook", 9443)


@pytest.mark.parametrize("kind", sorted({kind for kind, _name in WEBHOOKS}))
@pytest.mark.parametrize(("namespace", "called"), [
    ("default", True), ("batch-jobs", True), ("kube-system", False), (NAMESPACE, False)])
def test_pod_webhooks_skip_system_namespaces(objects: dict[tuple[str, str, str], dict[str, Any]], kind: str,
                                             namespace: str, called: bool) -> None:
    # kube-apiserver labels every namespace kubernetes.io/metadata.name=<name>: the selector is a name list.
    # koordinator-system too, so the companion's own pods start while no replica can answer.
    selector = LabelSelector.from_json(_webhook(objects, kind)["namespaceSelector"], "namespaceSelector")
    assert selector.matches({"kubernetes.io/metadata.name": namespace}) is called


def test_webhook_flags_name_the_installed_objects(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    args = _companion_args(objects)
    container = _container(_one(objects, "Deployment", "koord-companion", NAMESPACE), "koord-companion")
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == "webhook"]
    assert args.webhook_addr == f":{port}"
    assert args.webhook_cert_dir == ""  # bootstrapped Secret, whose name RBAC grants by name
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        _one(objects, kind, args.webhook_configuration_name)
        assert _webhook(objects, kind)["clientConfig"]["service"]["name"] == args.webhook_service_name
    role = _one(objects, "Role", "koord-companion", NAMESPACE)
    assert any(rule["resources"] == ["secrets"] and args.webhook_secret_name in rule.get("resourceNames", ())
               and set(rule["verbs"]) == {"get", "update"} for rule in role["rules"])
    cluster_role = _one(objects, "ClusterRole", "koord-companion")
    assert any(args.webhook_configuration_name in rule.get("resourceNames", ()) and "update" in rule["verbs"]
               for rule in cluster_role["rules"] if rule["apiGroups"] == ["admissionregistration.k8s.io"])
    # kube-apiserver checks the serving certificate against <service>.<namespace>.svc; the companion issues it for
    # its --webhook-service-name in its own namespace.
    service_ref = _webhook(objects, "MutatingWebhookConfiguration")["clientConfig"]["service"]
    assert f"{service_ref['name']}.{service_ref['namespace']}.svc" in service_dns_names(
        args.webhook_service_name, args.leader_elect_namespace)


# ------------------------------------------------------------------------------------------ config objects


def test_priority_classes(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    values = {pc["metadata"]["name"]: pc["value"] for pc in _of_kind(objects, "PriorityClass")}
    assert values == {"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000, "koord-free": 3000}
    for pc in _of_kind(objects, "PriorityClass"):
        assert pc["globalDefault"] is False
        assert pc["description"]


def test_slo_controller_config_parses_with_koordlet(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    data = _one(objects, "ConfigMap", "slo-controller-config", NAMESPACE)["data"]
    assert {"colocation-config", "resource-threshold-config", "resource-qos-config", "cpu-burst-config",
            "system-config"} <= set(data)
    node_labels = {"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux"}
    spec, errors = render_nodeslo(data, node_labels)
    assert errors == ()
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert (threshold.enable, threshold.cpu_suppress_threshold_percent, threshold.cpu_suppress_policy,
            threshold.memory_evict_threshold_percent) == (True, 65, "cpuset", 70)
    # The keys spelled out for operators render exactly Koordinator's built-in defaults.
    assert spec.resource_qos_strategy == default_resource_qos_strategy()
    assert spec.cpu_burst_strategy == default_cpu_burst_strategy()
    assert spec.system_strategy == default_system_strategy()
    colocation, errors = render_colocation(data, node_labels)
    assert errors == ()
    assert colocation.enable is True


# ------------------------------------------------------------------------------------------ descheduler

DESCHEDULER_CONFIGMAP = "koord-descheduler-config"


def _descheduler_config_text(objects: Mapping[tuple[str, str, str], dict[str, Any]]) -> str:
    data = _one(objects, "ConfigMap", DESCHEDULER_CONFIGMAP, NAMESPACE)["data"]
    assert set(data) == {DESCHEDULER_CONFIGMAP}  # the key koord-descheduler's own ConfigMap uses
    text: str = data[DESCHEDULER_CONFIGMAP]
    return text


def test_descheduler_config_is_mounted_where_the_flag_points(
        objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    args = _companion_args(objects)
    deployment = _one(objects, "Deployment", "koord-companion", NAMESPACE)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    found = []
    for mount in _container(deployment, "koord-companion")["volumeMounts"]:
        source = volumes[mount["name"]].get("configMap")
        if source is None or source["name"] != DESCHEDULER_CONFIGMAP:
            continue
        assert mount["readOnly"] is True
        assert "subPath" not in mount  # a subPath mount never sees the ConfigMap's later edits
        for item in source["items"]:
            found.append((f"{mount['mountPath']}/{item['path']}", item["key"]))
    assert found == [(args.descheduler_config, DESCHEDULER_CONFIGMAP)]
    assert args.descheduler_dry_run is None  # the ConfigMap's dryRun decides


def test_descheduler_config_runs_low_node_load(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    doc = yaml.safe_load(_descheduler_config_text(objects))
    assert (doc["apiVersion"], doc["kind"]) == ("descheduler/v1alpha2", "DeschedulerConfiguration")
    assert doc["dryRun"] is False
    for limit in ("maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal"):
        assert isinstance(doc[limit], int) and doc[limit] > 0, limit
    assert doc["maxNoOfPodsToEvictPerNode"] <= doc["maxNoOfPodsToEvictTotal"]
    [profile] = doc["profiles"]
    assert profile["plugins"]["balance"]["enabled"] == [{"name": "LowNodeLoad"}]
    args = {c["name"]: c.get("args") or {} for c in profile["pluginConfig"]}
    low_node_load = args["LowNodeLoad"]
    assert set(low_node_load["lowThresholds"]) == set(low_node_load["highThresholds"]) == {"cpu", "memory"}
    for resource, low in low_node_load["lowThresholds"].items():
        assert 0 < low < low_node_load["highThresholds"][resource] <= 100, resource
    # Never evict the control plane's or our own pods.
    assert {"kube-system", NAMESPACE} <= set(low_node_load["evictableNamespaces"]["exclude"])
    # The evictor's safety filters stay on: no local-storage, no system-critical pods.
    evictor = args["DefaultEvictor"]
    assert evictor["evictLocalStoragePods"] is False and evictor["evictSystemCriticalPods"] is False


def test_descheduler_config_loads_with_the_descheduler(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    config = load_config(_descheduler_config_text(objects), DESCHEDULER_CONFIGMAP)
    assert (config.interval_seconds, config.dry_run) == (60.0, False)
    assert (config.limits.per_node, config.limits.per_namespace, config.limits.total) == (2, 5, 10)
    [profile] = config.profiles
    # DefaultEvictor replaces upstream's default MigrationController (PodMigrationJobs need koord-scheduler).
    assert profile.plugins["evict"] == profile.plugins["filter"] == ("DefaultEvictor",)
    assert profile.balance == ("LowNodeLoad",)
    filters = profile.evictor_args
    assert not (filters.evict_local_storage_pods or filters.evict_system_critical_pods or filters.evict_all_bare_pods)
    low_node_load = lownodeload_args.parse_args(profile.plugin_args["LowNodeLoad"], "LowNodeLoad")
    [pool] = low_node_load.node_pools
    assert (dict(pool.low_thresholds), dict(pool.high_thresholds)) == ({"cpu": 20, "memory": 30},
                                                                       {"cpu": 50, "memory": 60})
    assert low_node_load.evictable_namespaces is not None
    assert [low_node_load.evictable_namespaces.allows(ns) for ns in ("default", "kube-system", NAMESPACE)] == [
        True, False, False]


# ------------------------------------------------------------------------------------------ scheduler example


def _scheduler_config() -> dict[str, Any]:
    doc = yaml.safe_load((MANIFESTS / "examples" / "kube-scheduler-config.yaml").read_text(encoding="utf-8"))
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["kind"] == "KubeSchedulerConfiguration"
    return doc


def test_examples_are_not_installed() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    assert not [r for r in kustomization["resources"] if r.startswith("examples")]


def test_example_profile_validates_and_names_installed_objects(
        objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    path = MANIFESTS / "examples" / "clustercolocationprofile-batch.yaml"
    [doc] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    _assert_valid(objects, doc["kind"], doc)
    assert Profile.from_object(doc).name == "batch-workload"  # the webhook's own parser takes it
    spec = doc["spec"]
    # koord-batch (5000-5999) is the band Koordinator pairs with BE; its PriorityClass is installed.
    assert (spec["qosClass"], spec["priorityClassName"]) == ("BE", "koord-batch")
    assert _one(objects, "PriorityClass", spec["priorityClassName"])["value"] == 5000
    # Only namespaces that opt in.
    namespaces = LabelSelector.from_json(spec["namespaceSelector"], "namespaceSelector")
    assert not namespaces.matches({"kubernetes.io/metadata.name": "default"})
    assert namespaces.matches({"kubernetes.io/metadata.name": "jobs", "koordinator.sh/enable-colocation": "true"})


def test_scheduler_extender_points_at_the_companion(objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    [extender] = _scheduler_config()["extenders"]
    url = urlsplit(extender["urlPrefix"])
    service = _one(objects, "Service", "koord-companion", NAMESPACE)
    assert url.hostname in (f"koord-companion.{NAMESPACE}.svc", f"koord-companion.{NAMESPACE}.svc.cluster.local")
    [port] = [p for p in service["spec"]["ports"] if p["name"] == "extender"]
    assert url.port == port["port"]
    assert url.scheme == "http" and extender.get("enableHTTPS", False) is False
    assert extender["ignorable"] is True
    assert extender["nodeCacheCapable"] is True  # the companion's NodeStore follows the Node watch
    assert extender["weight"] > 0


class _RecordingExtender:
    """Stands in for LoadAwareExtender behind the real HTTP handler: records which verb was routed."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def filter(self, body: Any) -> Any:
        self.calls.append("filter")
        return {"NodeNames": [], "FailedNodes": {}, "Error": ""}

    def prioritize(self, body: Any) -> Any:
        self.calls.append("prioritize")
        return []


def test_scheduler_extender_verbs_match_the_companion_routes(
        objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    [extender] = _scheduler_config()["extenders"]
    verbs = (extender["filterVerb"], extender["prioritizeVerb"])
    assert verbs == ("filter", "prioritize")
    if not (REPO / "koordlet" / "companion" / "extender.py").exists():
        return
    # kube-scheduler POSTs to <urlPrefix>/<verb>: drive the companion's real HTTP server with those requests,
    # and GET the companion Deployment's readiness path from it.
    extender_module = importlib.import_module("koordlet.companion.extender")
    fake = _RecordingExtender()
    server = extender_module.make_server(fake, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}{urlsplit(extender['urlPrefix']).path.rstrip('/')}"
        for verb in verbs:
            request = urllib.request.Request(f"{base}/{verb}", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200, verb
        assert fake.calls == list(verbs)
        container = _container(_one(objects, "Deployment", "koord-companion", NAMESPACE), "koord-companion")
        probe = container["readinessProbe"]["httpGet"]
        assert probe["port"] == "extender"
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}{probe['path']}",
                                    timeout=10) as response:
            assert response.status == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_kube_validate_has_no_schema_for_scheduler_config() -> None:
    # KubeSchedulerConfiguration is a component config, not an API object: the published schemas lack it,
    # so the extender entry is checked field by field above instead.
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(copy.deepcopy(_scheduler_config()), KUBE_VERSION, strict=True)
