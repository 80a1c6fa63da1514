"""The companion's admission webhook in a cluster (the fake kube-apiserver calling it as kube-apiserver does): a
pod created in a profiled namespace is stored mutated, profile edits and bad profiles reach the webhook through
its watch cache, and with the companion gone the webhook's ``failurePolicy: Ignore`` admits pods unmutated."""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from koordlet.companion import cli
from koordlet.companion.app import Companion
from koordlet.companion.colocation.cache import ClusterCache
from koordlet.companion.kube.client import KubeApiError, call_json, make_api_client
from koordlet.errors import ConfigError
from tests.fixtures.fakeapiserver import FakeApiServer, make_node
from tests.fixtures.waiting import wait_until

NS = "koordinator-system"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

EXTENDED_SPEC = "node.koordinator.sh/extended-resource-spec"


def profile(name: str = "batch", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                     "selector": {"matchLabels": {"app-type": "batch"}}, "qosClass": "BE",
                     "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler",
                     "labels": {"koordinator.sh/mutated": "true"}, **spec}}


def webhook_configurations(failure_policy: str = "Ignore") -> list[dict[str, Any]]:
    """manifests/companion/webhook.yaml's shape: service koord-companion, no caBundle (the companion writes it)."""
    def hook(name: str, path: str, operations: list[str]) -> dict[str, Any]:
        return {"name": name, "clientConfig": {"service": {"namespace": NS, "name": "koord-companion",
                                                           "path": path, "port": 443}},
                "rules": [{"operations": operations, "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}],
                "failurePolicy": failure_policy, "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 3,
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                            "values": ["kube-system", NS]}]}}

    meta = {"name": "koord-companion"}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
         "webhooks": [hook("mpod-create.koordinator.sh", "/mutate-pod", ["CREATE"])]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": meta, "webhooks": [hook("vpod.koordinator.sh", "/validate-pod", ["CREATE", "UPDATE"])]},
    ]


def batch_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app-type": "batch"} if labels is None else labels},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}}]}}


def seed_cluster(fake: FakeApiServer) -> None:
    for name, labels in (("batch-jobs", {"koordinator.sh/enable-colocation": "true"}), ("web", {}), (NS, {})):
        fake.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    fake.seed({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
               "value": 5500, "preemptionPolicy": "PreemptLowerPriority"})
    fake.seed(profile())
    for configuration in webhook_configurations():
        fake.seed(configuration)


@pytest.fixture
def companion(fake_apiserver: FakeApiServer, tmp_path: Path) -> Iterator[Companion]:
    seed_cluster(fake_apiserver)
    port = free_port()
    fake_apiserver.route_webhook_service(NS, "koord-companion", ("127.0.0.1", port))
    args = cli.build_parser().parse_args([
        "--grpc-addr", f"127.0.0.1:{free_port()}", "--extender-addr", "127.0.0.1:0", "--metrics-addr", "",
        "--leader-elect", "false", "--kube-api-server", fake_apiserver.host,
        "--kube-token-file", str(fake_apiserver.token_file), "--kube-ca-file", fake_apiserver.ca_file,
        "--leader-elect-namespace", NS, "--webhook-addr", f"127.0.0.1:{port}"])
    built = cli._build(args)
    instance = Companion(built.options, built._api, registry=CollectorRegistry())
    instance.start()
    try:
        assert instance.cluster_cache.wait_synced(10)
        yield instance
    finally:
        instance.stop()


def core_api(fake: FakeApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(make_api_client(fake.host, fake.token_file, fake.ca_file))


def test_a_pod_in_a_profiled_namespace_is_stored_mutated(fake_apiserver: FakeApiServer,
                                                          companion: Companion) -> None:
    stored = call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs", batch_pod("job-1"))
    assert stored["metadata"]["labels"] == {"app-type": "batch", "koordinator.sh/mutated": "true",
                                            "koordinator.sh/qosClass": "BE"}
    assert stored["spec"]["priorityClassName"] == "koord-batch" and stored["spec"]["priority"] == 5500
    assert stored["spec"]["schedulerName"] == "koord-scheduler"
    resources = stored["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "128Mi"},
                         "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "256Mi"}}
    assert json.loads(stored["metadata"]["annotations"][EXTENDED_SPEC]) == {"containers": {"main": resources}}
    assert [(c.webhook, c.outcome) for c in fake_apiserver.admission_calls] == [
        ("mpod-create.koordinator.sh", "patched"), ("vpod.koordinator.sh", "allowed")]
    # Elsewhere, or without the pod label: stored as sent.
    plain = call_json(core_api(fake_apiserver).create_namespaced_pod, "web", batch_pod("web-1"))
    assert plain["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "128Mi"}
    assert call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs",
                     batch_pod("other", {}))["metadata"]["labels"] == {}


def test_profile_edits_and_bad_profiles_reach_the_webhook(fake_apiserver: FakeApiServer,
                                                          companion: Companion) -> None:
    cache = companion.cluster_cache
    fake_apiserver.modify("clustercolocationprofiles", "batch",
                          lambda obj: obj["spec"].update(labels={"generation": "two"}))
    wait_until("the edit seen", lambda: any(p.spec.labels == {"generation": "two"} for p in cache.profiles()), 10)
    # A bad edit: refused, named, and the last good version stays in force.
    fake_apiserver.modify("clustercolocationprofiles", "batch", lambda obj: obj["spec"].update(qosClass="FAST"))
    wait_until("the bad edit refused", lambda: "batch" in cache.rejected_profiles, 10)
    assert "qosClass" in cache.rejected_profiles["batch"]
    stored = call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs", batch_pod("job-2"))
    assert stored["metadata"]["labels"]["generation"] == "two"
    assert stored["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    fake_apiserver.delete("clustercolocationprofiles", "batch")
    wait_until("the profile gone", lambda: not cache.profiles(), 10)
    stored = call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs", batch_pod("job-3"))
    assert "koordinator.sh/qosClass" not in stored["metadata"]["labels"]


def test_the_companion_keeps_the_ca_bundle(fake_apiserver: FakeApiServer, companion: Companion) -> None:
    secret = fake_apiserver.get("secrets", "koord-companion-webhook-certs", NS)
    assert secret is not None
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        stored = fake_apiserver.get(plural, "koord-companion") or {}
        assert [w["clientConfig"]["caBundle"] for w in stored["webhooks"]] == [secret["data"]["ca.crt"]]


def test_with_the_companion_down_pods_are_admitted_unmutated(fake_apiserver: FakeApiServer) -> None:
    seed_cluster(fake_apiserver)
    fake_apiserver.route_webhook_service(NS, "koord-companion", ("127.0.0.1", free_port()))  # nobody listens
    stored = call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs", batch_pod("job-1"))
    assert "koordinator.sh/qosClass" not in stored["metadata"]["labels"]
    assert {c.outcome for c in fake_apiserver.admission_calls} == {"ignored"}
    # failurePolicy Fail: refused instead.
    for configuration in webhook_configurations("Fail"):
        fake_apiserver.seed(configuration)
    with pytest.raises(KubeApiError) as refused:
        call_json(core_api(fake_apiserver).create_namespaced_pod, "batch-jobs", batch_pod("job-2"))
    assert refused.value.status == 500


def test_cache_reads_namespaces_and_priority_classes(fake_apiserver: FakeApiServer) -> None:
    seed_cluster(fake_apiserver)
    bad = copy.deepcopy(profile("broken"))
    bad["spec"]["qosClass"] = "FAST"
    fake_apiserver.seed(bad)
    cache = ClusterCache(make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file))
    cache.start()
    try:
        assert cache.wait_synced(10)
        assert [p.name for p in cache.profiles()] == ["batch"]
        assert "broken" in cache.rejected_profiles
        assert cache.namespace_labels("batch-jobs") == {"koordinator.sh/enable-colocation": "true",
                                                        "kubernetes.io/metadata.name": "batch-jobs"}
        assert cache.namespace_labels("nowhere") is None
        info = cache.priority_class("koord-batch")
        assert info is not None and (info.value, info.preemption_policy) == (5500, "PreemptLowerPriority")
        fake_apiserver.delete("namespaces", "web")
        wait_until("the namespace gone", lambda: cache.namespace_labels("web") is None, 10)
    finally:
        cache.stop()


def test_a_namespace_the_watch_has_not_delivered_is_read_live(fake_apiserver: FakeApiServer) -> None:
    # Upstream counts an unknown namespace as matching every namespaceSelector: a pod created a moment after its
    # namespace would turn BE.  The cache is not started here, so every namespace is a miss.
    seed_cluster(fake_apiserver)
    cache = ClusterCache(make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file))
    assert cache.namespace_labels("web") == {"kubernetes.io/metadata.name": "web"}
    assert cache.namespace_labels("batch-jobs")["koordinator.sh/enable-colocation"] == "true"
    assert cache.namespace_labels("nowhere") is None
    assert fake_apiserver.count("get", "namespaces", name="web") == 1


def test_webhook_flags() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["--kube-api-server", "https://x", "--webhook-addr", ":9443"])
    assert (args.webhook_cert_dir, args.webhook_secret_name, args.webhook_service_name,
            args.webhook_configuration_name) == ("", "koord-companion-webhook-certs", "koord-companion",
                                                 "koord-companion")
    assert args.descheduler_config == "" and args.descheduler_dry_run is None
    for bad in (["--webhook-addr", "9443"], ["--config-file", "x.yaml", "--webhook-addr", ":9443"],
                ["--descheduler-dry-run"]):
        with pytest.raises(SystemExit):
            cli._check(parser, parser.parse_args(bad))


DESCHEDULER_MANIFEST = Path(__file__).resolve().parents[3] / "manifests" / "companion" / "descheduler-config.yaml"


def test_the_descheduler_runs_on_the_leader_only(fake_apiserver: FakeApiServer) -> None:
    """The shipped ConfigMap, --descheduler-dry-run on top of its dryRun: false; a round runs while this replica
    leads and is skipped once it stops leading."""
    for name in ("node-1", "node-2"):
        fake_apiserver.seed(make_node(name))
    args = cli.build_parser().parse_args([
        "--grpc-addr", f"127.0.0.1:{free_port()}", "--extender-addr", "127.0.0.1:0", "--metrics-addr", "",
        "--leader-elect", "false", "--kube-api-server", fake_apiserver.host,
        "--kube-token-file", str(fake_apiserver.token_file), "--kube-ca-file", fake_apiserver.ca_file,
        "--descheduler-config", str(DESCHEDULER_MANIFEST), "--descheduler-dry-run"])
    built = cli._build(args)
    instance = Companion(built.options, built._api, registry=CollectorRegistry())
    assert instance.descheduler is not None and instance.descheduler.dry_run is True
    instance.start()
    try:
        assert instance.descheduler.running
        first = wait_until("the first round", lambda: instance.descheduler.last_report, 10)
        assert first.skipped == "" and first.dry_run is True
        instance._stopped_leading()
        assert instance.descheduler.run_once().skipped == "not the leader"
        instance._became_leader()
        assert instance.descheduler.run_once().skipped == ""
    finally:
        instance.stop()
    assert not instance.descheduler.running


def test_a_bad_descheduler_config_fails_the_build(tmp_path: Path) -> None:
    bad = tmp_path / "descheduler.yaml"
    bad.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nprofiles:\n"
                   "- name: p\n  plugins:\n    balance:\n      enabled:\n      - name: NoSuchPlugin\n")
    args = cli.build_parser().parse_args(["--kube-api-server", "https://127.0.0.1:1", "--descheduler-config",
                                          str(bad)])
    with pytest.raises(ConfigError, match="NoSuchPlugin"):
        cli._build(args)


def test_a_watcher_is_synced_only_once_its_first_list_reached_the_callback(fake_apiserver: FakeApiServer) -> None:
    """The webhook serves once its view has synced: the view must then hold every listed profile."""
    from koordlet.companion.kube.watch import ResourceWatcher, WatchEvent

    fake_apiserver.seed(make_node("node-1"))
    release = threading.Event()
    seen: list[str] = []

    def slow(event: WatchEvent) -> None:
        release.wait(10)
        seen.append(event.object["metadata"]["name"])

    api = make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file)
    watcher = ResourceWatcher(client.CoreV1Api(api).list_node, slow, name="nodes")
    watcher.start()
    try:
        # The list is in (the fake saw it) but its event is held in the callback: not synced yet.
        wait_until("the list request", lambda: fake_apiserver.count("list", "nodes") >= 1, 10)
        assert not watcher.wait_synced(0.2)
        release.set()
        assert watcher.wait_synced(10) and seen == ["node-1"]
    finally:
        release.set()
        watcher.stop()
