"""The admission webhook's HTTPS server: reviews in and out, refusals of what is not a review, readiness, metrics
and logs; its certificate: hot swap, bootstrap Secret, mounted files, and the caBundle it keeps published."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from koordlet.companion.certs import issue
from koordlet.companion.colocation.admission import PriorityClassInfo, mutate
from koordlet.companion.colocation.profile import Profile
from koordlet.companion.colocation.servingcert import CertificateKeeper, ServingPair, merged_bundle, read_cert_dir
from koordlet.companion.colocation.webhook import (
    MUTATE_PATH,
    VALIDATE_PATH,
    AdmissionMetrics,
    WebhookHTTPServer,
    WebhookOptions,
    WebhookService,
)
from koordlet.companion.kube.client import make_api_client
from koordlet.errors import ConfigError
from tests.fixtures.fakeapiserver import FakeApiServer

NOW = datetime.datetime.now(datetime.UTC)
BE_PROFILE = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
              "metadata": {"name": "batch"},
              "spec": {"namespaceSelector": {"matchLabels": {"colocation": "be"}}, "qosClass": "BE",
                       "priorityClassName": "koord-batch"}}


class DictView:
    """A ClusterView over plain dicts."""

    def __init__(self, profiles: Sequence[Mapping[str, Any]] = (BE_PROFILE,)) -> None:
        self._profiles = [Profile.from_object(p) for p in profiles]
        self.namespaces: dict[str, Mapping[str, str]] = {"batch": {"colocation": "be"}, "web": {}}
        self.priorities = {"koord-batch": PriorityClassInfo(5500, None)}

    def profiles(self) -> Sequence[Profile]:
        return self._profiles

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return self.priorities.get(name)


def pod(namespace: str, name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}}]}}


def review(obj: Mapping[str, Any], operation: str = "CREATE", uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": operation,
                        "namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"], "object": obj}}


class Running:
    """A WebhookHTTPServer serving on a thread with a fresh self-signed certificate."""

    def __init__(self, view: DictView, ready: bool = True) -> None:
        self.registry = CollectorRegistry()
        self.ready = ready
        self.server = WebhookHTTPServer(("127.0.0.1", 0), view, AdmissionMetrics(self.registry),
                                        ready=lambda: self.ready, rand=lambda n: 0)
        self.pair = issue(["127.0.0.1"], NOW)
        self.server.set_tls(self.pair.cert_pem, self.pair.key_pem)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def post(self, path: str, body: bytes, content_type: str = "application/json",
             ca_pem: bytes | None = None) -> tuple[int, bytes]:
        context = ssl.create_default_context(cadata=(ca_pem or self.pair.ca_pem).decode())
        connection = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=context, timeout=10)
        try:
            connection.request("POST", path, body, {"Content-Type": content_type})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def get(self, path: str) -> int:
        context = ssl.create_default_context(cadata=self.pair.ca_pem.decode())
        connection = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=context, timeout=10)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            return answer.status
        finally:
            connection.close()

    def counted(self, **labels: str) -> float:
        return self.registry.get_sample_value("koord_companion_admission_decisions_total", labels) or 0.0

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def running() -> Iterator[Running]:
    server = Running(DictView())
    yield server
    server.stop()


def test_a_pod_in_a_profiled_namespace_is_patched_counted_and_logged(
        running: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="koordlet.companion.colocation.webhook")
    status, body = running.post(MUTATE_PATH + "?timeout=3s", json.dumps(review(pod("batch"))).encode())
    answer = json.loads(body)
    assert status == 200 and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "uid-1" and answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/priority", "value": 5500} in patch
    assert running.counted(webhook="mutate-pod", decision="mutated", profile="batch") == 1
    lines = [r for r in caplog.records if r.getMessage() == "pod mutated"]
    assert len(lines) == 1 and lines[0].__dict__["profiles"] == "batch" and lines[0].__dict__["pod"] == "batch/p"
    # Outside the profiled namespace: allowed as is, no log line.
    status, body = running.post(MUTATE_PATH, json.dumps(review(pod("web"))).encode())
    assert json.loads(body)["response"].get("patch") is None
    assert running.counted(webhook="mutate-pod", decision="allowed", profile="") == 1
    assert len([r for r in caplog.records if r.getMessage() == "pod mutated"]) == 1
    latency = running.registry.get_sample_value("koord_companion_admission_duration_seconds_count",
                                                {"webhook": "mutate-pod"})
    assert latency == 2


def test_a_profile_lost_by_probability_is_counted_and_logged_as_skipped(caplog: pytest.LogCaptureFixture) -> None:
    profile = {**BE_PROFILE, "spec": {**BE_PROFILE["spec"], "probability": "10%"}}
    server = Running(DictView([profile]))
    view = server.server.view
    server.server.webhooks[MUTATE_PATH] = lambda r: mutate(r, view, rand=lambda n: 99)
    caplog.set_level(logging.INFO, logger="koordlet.companion.colocation.webhook")
    try:
        server.post(MUTATE_PATH, json.dumps(review(pod("batch"))).encode())
    finally:
        server.stop()
    assert server.counted(webhook="mutate-pod", decision="skipped", profile="batch") == 1
    line = next(r for r in caplog.records if r.getMessage() == "pod admitted unchanged")
    assert line.__dict__["skipped"] == "batch (probability)"


@pytest.mark.parametrize(("body", "content_type", "message"), [
    (b"{", "application/json", "request body is not JSON"),
    (b"", "application/json", "request body is empty"),
    (b"{}", "text/plain", "expected application/json"),
    (b'{"kind": "Pod"}', "application/json", "AdmissionReview"),
    (b"[1]", "application/json", "AdmissionReview"),
])
def test_what_is_not_a_review_is_refused_with_400(running: Running, body: bytes, content_type: str,
                                                   message: str) -> None:
    status, raw = running.post(VALIDATE_PATH, body, content_type)
    answer = json.loads(raw)["response"]
    assert status == 200 and answer["allowed"] is False and answer["status"]["code"] == 400
    assert message in answer["status"]["message"]
    assert running.counted(webhook="validate-pod", decision="denied", profile="") == 1


def test_http_limits_and_routes(running: Running) -> None:
    assert running.post("/elsewhere", b"{}")[0] == 404
    # A body announced over the limit is refused before it is sent (kube-apiserver sends Content-Length).
    context = ssl.create_default_context(cadata=running.pair.ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", running.server.port, context=context, timeout=10)
    try:
        connection.putrequest("POST", MUTATE_PATH)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(7 * 1024 * 1024))
        connection.endheaders()
        assert connection.getresponse().status == 413
    finally:
        connection.close()
    assert running.get("/healthz") == 200
    assert running.get("/readyz") == 200


def test_until_the_view_has_synced_reviews_fail_with_503(running: Running) -> None:
    running.ready = False
    assert running.get("/readyz") == 503
    # An HTTP error, not a refusal: kube-apiserver applies the webhook's failurePolicy (Ignore: admitted as is).
    status, raw = running.post(MUTATE_PATH, json.dumps(review(pod("batch"))).encode())
    assert status == 503 and b"not synced" in raw
    assert running.counted(webhook="mutate-pod", decision="error", profile="") == 1


def test_a_failing_review_is_an_http_500(running: Running, caplog: pytest.LogCaptureFixture) -> None:
    def broken(review: Mapping[str, Any]) -> Any:
        raise RuntimeError("bug")

    running.server.webhooks[VALIDATE_PATH] = broken
    status, raw = running.post(VALIDATE_PATH, json.dumps(review(pod("web"))).encode())
    assert status == 500 and b"internal error: bug" in raw
    assert running.counted(webhook="validate-pod", decision="error", profile="") == 1
    assert any(r.getMessage() == "admission review failed" and r.exc_info for r in caplog.records)


def test_a_new_certificate_serves_the_next_connections(running: Running) -> None:
    body = json.dumps(review(pod("web"))).encode()
    renewed = issue(["127.0.0.1"], NOW)
    running.server.set_tls(renewed.cert_pem, renewed.key_pem)
    assert running.post(VALIDATE_PATH, body, ca_pem=renewed.ca_pem)[0] == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        running.post(VALIDATE_PATH, body)  # the old CA no longer verifies


# ------------------------------------------------------------------------------------- certificates


def configuration(kind: str, names: Sequence[str], bundle: bytes = b"") -> dict[str, Any]:
    webhooks = [{"name": name, "clientConfig": {"service": {"namespace": "koordinator-system",
                                                            "name": "koord-companion", "path": "/mutate-pod"}},
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]} for name in names]
    if bundle:
        for webhook in webhooks:
            webhook["clientConfig"]["caBundle"] = base64.b64encode(bundle).decode()
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "koord-companion"}, "webhooks": webhooks}


def bundle_of(fake: FakeApiServer, plural: str) -> list[list[x509.Certificate]]:
    stored = fake.get(plural, "koord-companion") or {}
    return [x509.load_pem_x509_certificates(base64.b64decode(w["clientConfig"]["caBundle"]))
            for w in stored["webhooks"]]


def test_the_bootstrap_secret_serves_and_its_ca_is_published(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.seed(configuration("MutatingWebhookConfiguration", ["m1.koordinator.sh", "m2.koordinator.sh"]))
    fake_apiserver.seed(configuration("ValidatingWebhookConfiguration", ["v.koordinator.sh"]))
    api = make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file)
    options = WebhookOptions(addr="127.0.0.1:0", check_interval_seconds=3600)
    service = WebhookService(options, DictView(), api_client=api, registry=CollectorRegistry())
    service.start()
    try:
        secret = fake_apiserver.get("secrets", "koord-companion-webhook-certs", "koordinator-system")
        assert secret is not None
        ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
        for plural, count in (("mutatingwebhookconfigurations", 2), ("validatingwebhookconfigurations", 1)):
            bundles = bundle_of(fake_apiserver, plural)
            assert len(bundles) == count and all(b == [ca] for b in bundles)
        # The server verifies as the Service's name with that CA, as kube-apiserver does.
        context = ssl.create_default_context(cadata=base64.b64decode(secret["data"]["ca.crt"]).decode())
        with context.wrap_socket(socket.create_connection(("127.0.0.1", service.port)),
                                 server_hostname="koord-companion.koordinator-system.svc") as tls:
            assert tls.version() is not None
        # Nothing changed: a check writes nothing.
        updates = fake_apiserver.count("update")
        service.keeper.check()
        assert fake_apiserver.count("update") == updates
        # A re-applied configuration (no caBundle) gets it back at the next check.
        fake_apiserver.seed(configuration("ValidatingWebhookConfiguration", ["v.koordinator.sh"]))
        service.keeper.check()
        assert bundle_of(fake_apiserver, "validatingwebhookconfigurations") == [[ca]]
        # The Secret renewed (here: replaced by hand): the next check swaps the certificate and trusts both CAs
        # until the old one expires.
        fake_apiserver.delete("secrets", "koord-companion-webhook-certs", "koordinator-system")
        service.keeper.check()
        renewed = fake_apiserver.get("secrets", "koord-companion-webhook-certs", "koordinator-system")
        assert renewed is not None
        new_ca = x509.load_pem_x509_certificate(base64.b64decode(renewed["data"]["ca.crt"]))
        assert service.keeper.swaps == 1
        assert bundle_of(fake_apiserver, "mutatingwebhookconfigurations") == [[new_ca, ca], [new_ca, ca]]
    finally:
        service.stop()


def test_a_missing_configuration_is_not_an_error(fake_apiserver: FakeApiServer) -> None:
    api = make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file)
    service = WebhookService(WebhookOptions(addr="127.0.0.1:0"), DictView(), api_client=api,
                             registry=CollectorRegistry())
    service.start()
    service.stop()
    assert fake_apiserver.get("mutatingwebhookconfigurations", "koord-companion") is None


def test_mounted_files_are_reread_when_they_change(tmp_path: Path) -> None:
    first, second = issue(["127.0.0.1"], NOW), issue(["127.0.0.1"], NOW)
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(first.key_pem)
    service = WebhookService(WebhookOptions(addr="127.0.0.1:0", cert_dir=str(tmp_path)), DictView(),
                             registry=CollectorRegistry())
    service.start()
    try:
        (tmp_path / "tls.crt").write_bytes(second.cert_pem)
        (tmp_path / "tls.key").write_bytes(second.key_pem)
        service.keeper.check()
        assert service.keeper.swaps == 1
        assert read_cert_dir(str(tmp_path)).ca_pem is None
    finally:
        service.stop()


def test_a_cert_dir_without_files_fails_start(tmp_path: Path) -> None:
    service = WebhookService(WebhookOptions(addr="127.0.0.1:0", cert_dir=str(tmp_path)), DictView(),
                             registry=CollectorRegistry())
    with pytest.raises(ConfigError, match=r"no tls\.crt"):
        service.start()


def test_without_kubernetes_or_files_there_is_no_certificate() -> None:
    with pytest.raises(ConfigError, match="webhook-cert-dir"):
        WebhookService(WebhookOptions(addr="127.0.0.1:0"), DictView(), registry=CollectorRegistry())


def test_the_bundle_keeps_one_previous_valid_ca() -> None:
    old, older, ours = (issue(["x"], NOW - datetime.timedelta(days=d)) for d in (30, 60, 0))
    expired = issue(["x"], NOW - datetime.timedelta(days=400))
    merged = merged_bundle(ours.ca_pem, old.ca_pem + older.ca_pem + expired.ca_pem, NOW)
    certs = x509.load_pem_x509_certificates(merged)
    assert certs == [x509.load_pem_x509_certificate(p) for p in (ours.ca_pem, old.ca_pem)]
    assert x509.load_pem_x509_certificates(merged_bundle(ours.ca_pem, b"garbage", NOW)) == certs[:1]


def test_a_keeper_check_failure_keeps_the_certificate() -> None:
    calls: list[int] = []
    pair = issue(["127.0.0.1"], NOW)

    def source() -> ServingPair:
        calls.append(1)
        if len(calls) > 1:
            raise ConfigError("Secret unreadable")
        return ServingPair(pair.cert_pem, pair.key_pem, None)

    server = WebhookHTTPServer(("127.0.0.1", 0), DictView(), AdmissionMetrics(CollectorRegistry()))
    keeper = CertificateKeeper(server.set_tls, source)
    try:
        keeper.check()
        context = server.context
        with pytest.raises(ConfigError):
            keeper.check()
        assert server.context is context
    finally:
        server.server_close()
