"""The fake apiserver's admission webhooks behave as kube-apiserver's: which webhooks are called, over verified
TLS, and what their answers do to the request (a scripted webhook on a local HTTPS port answers)."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from koordlet.companion.certs import issue
from koordlet.companion.kube.client import KubeApiError, call_json, make_api_client
from tests.fixtures.fakeadmission import apply_json_patch
from tests.fixtures.fakeapiserver import FakeApiServer

Answer = Callable[[dict[str, Any]], tuple[int, Any]]


class ScriptedWebhook:
    """An HTTPS webhook whose answer a test sets; records the reviews and paths it got."""

    def __init__(self, names: list[str]) -> None:
        made = issue(names, datetime.datetime.now(datetime.UTC))
        self.ca_pem = made.ca_pem
        self.reviews: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.answer: Answer = lambda review: (200, allow(review))
        self.block = threading.Event()
        """Set: requests get no answer until the webhook stops (the caller times out)."""
        self._stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.reviews.append(review)
                owner.paths.append(self.path)
                if owner.block.is_set():
                    owner._stopping.wait(30)
                    self.close_connection = True
                    return
                status, body = owner.answer(review)
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as directory:
            (Path(directory) / "tls.crt").write_bytes(made.cert_pem)
            (Path(directory) / "tls.key").write_bytes(made.key_pem)
            context.load_cert_chain(Path(directory) / "tls.crt", Path(directory) / "tls.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()


def allow(review: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
    if patch is not None:
        response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@pytest.fixture
def hook() -> Iterator[ScriptedWebhook]:
    webhook = ScriptedWebhook(["hook.system.svc", "127.0.0.1"])
    yield webhook
    webhook.stop()


def configuration(kind: str, name: str, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": webhooks}


def webhook(name: str, hook: ScriptedWebhook, *, path: str = "/mutate", operations: tuple[str, ...] = ("CREATE",),
            **extra: Any) -> dict[str, Any]:
    return {"name": name, "clientConfig": {"service": {"namespace": "system", "name": "hook", "path": path},
                                           "caBundle": hook.ca_bundle},
            "rules": [{"operations": list(operations), "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"], **extra}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


@pytest.fixture
def core(fake_apiserver: FakeApiServer, hook: ScriptedWebhook) -> client.CoreV1Api:
    fake_apiserver.route_webhook_service("system", "hook", ("127.0.0.1", hook.port))
    fake_apiserver.seed(namespace("batch", {"colocation": "be"}))
    fake_apiserver.seed(namespace("web"))
    return client.CoreV1Api(make_api_client(fake_apiserver.host, fake_apiserver.token_file, fake_apiserver.ca_file))


def test_a_patch_is_stored_and_validation_sees_the_patched_object(
        fake_apiserver: FakeApiServer, hook: ScriptedWebhook, core: client.CoreV1Api) -> None:
    def answer(review: dict[str, Any]) -> tuple[int, Any]:
        if review["request"]["object"]["metadata"].get("uid"):  # validating: after the server filled uid in
            return 200, allow(review)
        return 200, allow(review, [{"op": "add", "path": "/metadata/labels/koordinator.sh~1qosClass", "value": "BE"}])

    hook.answer = answer
    fake_apiserver.seed(configuration("MutatingWebhookConfiguration", "m", [webhook("m.test", hook)]))
    fake_apiserver.seed(configuration("ValidatingWebhookConfiguration", "v", [
        webhook("v.test", hook, path="/validate", operations=("CREATE", "UPDATE"))]))
    stored = call_json(core.create_namespaced_pod, "batch", pod("p1"))
    assert stored["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}
    assert [(c.webhook, c.outcome) for c in fake_apiserver.admission_calls] == [("m.test", "patched"),
                                                                              ("v.test", "allowed")]
    mutating, validating = hook.reviews
    assert mutating["request"]["operation"] == "CREATE" and mutating["request"]["namespace"] == "batch"
    assert mutating["request"]["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "uid" not in mutating["request"]["object"]["metadata"]
    assert validating["request"]["object"]["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}
    assert hook.paths == ["/mutate?timeout=10s", "/validate?timeout=10s"]
    # UPDATE reaches the validating webhook only (the mutating one is for CREATE), with the old object.
    call_json(core.patch_namespaced_pod, "p1", "batch", {"metadata": {"labels": {"x": "y"}}})
    assert hook.reviews[-1]["request"]["operation"] == "UPDATE"
    assert hook.reviews[-1]["request"]["oldObject"]["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}
    assert len(hook.reviews) == 3


def test_namespace_and_object_selectors_choose_the_webhooks(
        fake_apiserver: FakeApiServer, hook: ScriptedWebhook, core: client.CoreV1Api) -> None:
    fake_apiserver.seed(configuration("MutatingWebhookConfiguration", "m", [
        webhook("ns.test", hook, namespaceSelector={"matchLabels": {"colocation": "be"}}),
        webhook("name.test", hook, namespaceSelector={"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["batch"]}]}),
        webhook("obj.test", hook, objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}),
    ]))
    call_json(core.create_namespaced_pod, "batch", pod("a"))
    call_json(core.create_namespaced_pod, "web", pod("b"))
    call_json(core.create_namespaced_pod, "web", pod("c", {"skip": "1"}))
    called = [(c.name, c.webhook) for c in fake_apiserver.admission_calls]
    assert called == [("a", "ns.test"), ("a", "obj.test"), ("b", "name.test"), ("b", "obj.test"),
                      ("c", "name.test")]


def test_a_refusal_fails_the_request_with_the_webhooks_status(
        fake_apiserver: FakeApiServer, hook: ScriptedWebhook, core: client.CoreV1Api) -> None:
    hook.answer = lambda review: (200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                        "response": {"uid": review["request"]["uid"], "allowed": False,
                                                     "status": {"code": 403, "message": "not on my watch"}}})
    fake_apiserver.seed(configuration("ValidatingWebhookConfiguration", "v", [webhook("v.test", hook)]))
    with pytest.raises(KubeApiError) as refused:
        call_json(core.create_namespaced_pod, "web", pod("p"))
    assert refused.value.status == 403
    assert refused.value.message == 'admission webhook "v.test" denied the request: not on my watch'
    assert fake_apiserver.get("pods", "p", "web") is None


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
@pytest.mark.parametrize("fault", ["timeout", "untrusted", "wrong-uid", "http-500", "bad-patch", "no-route"])
def test_a_failed_call_follows_the_failure_policy(
        fake_apiserver: FakeApiServer, hook: ScriptedWebhook, core: client.CoreV1Api, policy: str,
        fault: str) -> None:
    extra: dict[str, Any] = {"failurePolicy": policy, "timeoutSeconds": 1}
    spec = webhook("m.test", hook, **extra)
    if fault == "timeout":
        hook.block.set()
    elif fault == "untrusted":
        spec["clientConfig"]["caBundle"] = base64.b64encode(issue(["x"], datetime.datetime.now(datetime.UTC))
                                                            .ca_pem).decode()
    elif fault == "wrong-uid":
        hook.answer = lambda review: (200, allow({"request": {"uid": "someone-else"}}))
    elif fault == "http-500":
        hook.answer = lambda review: (500, b"boom")
    elif fault == "bad-patch":
        hook.answer = lambda review: (200, allow(review, [{"op": "remove", "path": "/spec/nothing"}]))
    else:
        spec["clientConfig"]["service"]["name"] = "elsewhere"
    fake_apiserver.seed(configuration("MutatingWebhookConfiguration", "m", [spec]))
    if policy == "Ignore":
        stored = call_json(core.create_namespaced_pod, "web", pod("p"))
        assert stored["metadata"]["labels"] == {}
        assert [c.outcome for c in fake_apiserver.admission_calls] == ["ignored"]
    else:
        with pytest.raises(KubeApiError) as failed:
            call_json(core.create_namespaced_pod, "web", pod("p"))
        assert failed.value.status == 500
        assert 'failed calling webhook "m.test"' in failed.value.message
        assert [c.outcome for c in fake_apiserver.admission_calls] == ["failed"]
        assert fake_apiserver.get("pods", "p", "web") is None
    if fault == "timeout":
        assert "context deadline exceeded" in fake_apiserver.admission_calls[0].detail


def test_a_namespace_the_selector_needs_must_exist(fake_apiserver: FakeApiServer, hook: ScriptedWebhook,
                                                   core: client.CoreV1Api) -> None:
    fake_apiserver.seed(configuration("MutatingWebhookConfiguration", "m", [webhook("m.test", hook)]))
    with pytest.raises(KubeApiError) as missing:
        call_json(core.create_namespaced_pod, "nowhere", pod("p"))
    assert missing.value.status == 404 and missing.value.message == 'namespaces "nowhere" not found'
    assert hook.reviews == []


def test_namespaces_carry_their_name_label(fake_apiserver: FakeApiServer, core: client.CoreV1Api) -> None:
    created = call_json(core.create_namespace, namespace("fresh", {"a": "b"}))
    assert created["metadata"]["labels"] == {"a": "b", "kubernetes.io/metadata.name": "fresh"}
    assert call_json(core.read_namespace, "fresh")["metadata"]["name"] == "fresh"


@pytest.mark.parametrize(("document", "patch", "expected"), [
    ({"a": [1, 2]}, [{"op": "add", "path": "/a/1", "value": 9}], {"a": [1, 9, 2]}),
    ({"a": [1, 2]}, [{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3]}),
    ({"a": {"b~c/d": 1}}, [{"op": "replace", "path": "/a/b~0c~1d", "value": 2}], {"a": {"b~c/d": 2}}),
    ({"a": 1}, [{"op": "move", "from": "/a", "path": "/b"}], {"b": 1}),
    ({"a": {"x": 1}}, [{"op": "copy", "from": "/a", "path": "/b"}, {"op": "test", "path": "/b/x", "value": 1}],
     {"a": {"x": 1}, "b": {"x": 1}}),
])
def test_json_patch(document: Any, patch: list[dict[str, Any]], expected: Any) -> None:
    assert apply_json_patch(document, patch) == expected


@pytest.mark.parametrize("patch", [
    [{"op": "replace", "path": "/missing", "value": 1}],
    [{"op": "add", "path": "/a/5", "value": 1}],
    [{"op": "test", "path": "/a/0", "value": 2}],
    [{"op": "add", "path": "a", "value": 1}],
    [{"op": "frobnicate", "path": "/a"}],
])
def test_json_patch_refuses(patch: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError):
        apply_json_patch({"a": [1]}, patch)



def test_an_update_whose_object_changes_during_admission_starts_over(
        fake_apiserver: FakeApiServer, hook: ScriptedWebhook, core: client.CoreV1Api) -> None:
    call_json(core.create_namespaced_pod, "web", pod("p"))
    fake_apiserver.seed(configuration("ValidatingWebhookConfiguration", "v", [
        webhook("v.test", hook, path="/validate", operations=("UPDATE",))]))
    raced: list[int] = []

    def answer(review: dict[str, Any]) -> tuple[int, Any]:
        if not raced:  # another writer gets in while the first review is out
            raced.append(1)
            fake_apiserver.modify("pods", "p", lambda obj: obj["metadata"]["labels"].update(other="writer"), "web")
        return 200, allow(review)

    hook.answer = answer
    patched = call_json(core.patch_namespaced_pod, "p", "web", {"metadata": {"labels": {"mine": "1"}}})
    assert patched["metadata"]["labels"] == {"other": "writer", "mine": "1"}
    assert len(hook.reviews) == 2  # reviewed again against the newer object
    assert hook.reviews[1]["request"]["oldObject"]["metadata"]["labels"] == {"other": "writer"}
    # A PUT that names the version it read gets the conflict instead.
    stale = call_json(core.read_namespaced_pod, "p", "web")
    raced.clear()
    with pytest.raises(KubeApiError) as conflict:
        call_json(core.replace_namespaced_pod, "p", "web", stale)
    assert conflict.value.status == 409
