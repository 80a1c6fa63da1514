"""The pod admission webhook over HTTPS: ``POST /mutate-pod`` and ``POST /validate-pod`` take an
``admission.k8s.io/v1`` AdmissionReview and answer one (Koordinator's ``pkg/webhook`` paths), ``GET /healthz``
answers while serving and ``GET /readyz`` once the cluster view has synced.

The decisions are :mod:`koordlet.companion.colocation.admission`'s; this module is transport, TLS and
bookkeeping:

- requests are bounded like the companion's other servers (:class:`~koordlet.system.httpserver.LimitedHTTPServer`:
  connections, header/body/write deadlines, body size, requests in progress); a request that cannot be decoded
  gets an AdmissionReview refusing it with code 400, as controller-runtime answers, so kube-apiserver logs why;
- until the cluster view has synced, reviews are answered with HTTP 503 rather than mutated from an empty view,
  and an unexpected exception with HTTP 500: kube-apiserver takes either as a failed call, which the webhook's
  ``failurePolicy: Ignore`` turns into an admitted, unchanged pod (an AdmissionReview with ``allowed: false``
  would refuse the pod whatever the policy);
- the certificate comes from a mounted directory (``tls.crt``/``tls.key``, re-read when they change) or from
  the bootstrap Secret of :func:`~koordlet.companion.certs.ensure_serving_secret`;
  :class:`~koordlet.companion.colocation.servingcert.CertificateKeeper` checks it every
  ``check_interval_seconds``, renews it before expiry, swaps the server's SSL context without dropping a
  request, and writes the CA into ``caBundle`` of every webhook of the Mutating- and
  ValidatingWebhookConfiguration it owns;
- ``koord_companion_admission_decisions_total{webhook,decision,profile}`` counts decisions and
  ``koord_companion_admission_duration_seconds{webhook}`` times them; every mutated pod gets one INFO line
  naming the profiles applied and the ones skipped by their probability.
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from koordlet.companion.colocation.admission import ClusterView, Decision, mutate, validate
from koordlet.companion.colocation.servingcert import (
    CertificateKeeper,
    ServingPair,
    read_cert_dir,
    secret_source,
    server_context,
    service_dns_names,
)
from koordlet.errors import ConfigError
from koordlet.metrics.buckets import exponential_buckets
from koordlet.system.httpserver import LimitedHTTPServer, LimitedRequestHandler, RequestRefused, ServerLimits

log = logging.getLogger(__name__)

MUTATE_PATH: Final = "/mutate-pod"
VALIDATE_PATH: Final = "/validate-pod"
REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
MAX_BODY_BYTES: Final = 6 * 1024 * 1024
"""An AdmissionReview of an UPDATE carries the object and the old object, each up to etcd's 1.5 MiB request
limit, plus the request's own fields; JSON of that is below 6 MiB."""
MAX_ACTIVE_REQUESTS: Final = 4
"""Reviews decoded and answered at once: the work holds the GIL, and this bounds the memory of bodies in flight."""
SLOT_WAIT_SECONDS: Final = 1.0
"""Below the webhook's ``timeoutSeconds`` (3 in the manifests): a review that cannot start soon is answered 503,
which ``failurePolicy: Ignore`` turns into an admitted pod, before kube-apiserver gives up on the call."""
DEFAULT_LIMITS: Final = ServerLimits(max_connections=64, idle_timeout_seconds=90.0, header_timeout_seconds=10.0,
                                     body_timeout_seconds=10.0, write_timeout_seconds=10.0,
                                     max_body_bytes=MAX_BODY_BYTES, max_active_requests=MAX_ACTIVE_REQUESTS,
                                     slot_wait_seconds=SLOT_WAIT_SECONDS)
"""kube-apiserver keeps connections to a webhook open and sends one review per request; 10 s is its default
``timeoutSeconds`` (the longest a review is waited for)."""

DECISIONS: Final = "koord_companion_admission_decisions"
"""Exposed as ``koord_companion_admission_decisions_total``."""
DURATION: Final = "koord_companion_admission_duration_seconds"
DURATION_BUCKETS: Final = exponential_buckets(0.0005, 2, 14)
"""0.5 ms .. 4 s: a review takes about a millisecond; kube-apiserver waits ``timeoutSeconds`` at most."""

Review = Callable[[Mapping[str, Any]], tuple[dict[str, Any], Decision]]


class AdmissionMetrics:
    """The webhook's counter and histogram, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._decisions = Counter(DECISIONS, "admission reviews answered by koord-companion's pod webhook, by "
                                  "decision (allowed, mutated, skipped, denied, error) and profile",
                                  ["webhook", "decision", "profile"], registry=registry)
        self._duration = Histogram(DURATION, "time to answer one admission review", ["webhook"],
                                   registry=registry, buckets=DURATION_BUCKETS)

    def count(self, webhook: str, decision: str, profile: str = "") -> None:
        self._decisions.labels(webhook, decision, profile).inc()

    def observe(self, webhook: str, seconds: float) -> None:
        self._duration.labels(webhook).observe(seconds)


def errored(uid: str, code: int, message: str) -> dict[str, Any]:
    """An AdmissionReview refusing the request with ``code`` (controller-runtime's ``admission.Errored``)."""
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": False, "status": {"code": code, "message": message}}}


def _uid(review: Any) -> str:
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


def _pod_name(review: Mapping[str, Any]) -> str:
    request = review.get("request") or {}
    obj = request.get("object") if isinstance(request, dict) else None
    meta = (obj.get("metadata") if isinstance(obj, dict) else None) or {}
    name = request.get("name") or meta.get("name") or f"{meta.get('generateName') or ''}*"
    return f"{request.get('namespace') or meta.get('namespace') or ''}/{name}"


# ------------------------------------------------------------------------------------- serving


class _Handler(LimitedRequestHandler):
    server: WebhookHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook request", extra={"client": self.client_address[0], "line": format % args})

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        self.send_body(status, body, content_type)

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(HTTPStatus.OK, b"ok", "text/plain; charset=utf-8")
        elif path == "/readyz":
            ready = self.server.ready()
            self._send(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE,
                       b"ok" if ready else b"cluster view not synced", "text/plain; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain; charset=utf-8")

    def do_POST(self) -> None:  # noqa: N802
        # kube-apiserver appends ?timeout=<n>s to the configured path.
        path = self.path.split("?", 1)[0]
        webhook = self.server.webhooks.get(path)
        if webhook is None:
            self.close_connection = True  # the body stays unread
            self._send(HTTPStatus.NOT_FOUND, b"no such webhook", "text/plain; charset=utf-8")
            return
        try:
            with self.request_slot():
                started = time.perf_counter()
                answer = self.server.answer(path.lstrip("/"), webhook, self.read_body(),
                                            self.headers.get("Content-Type", ""))
                self.server.metrics.observe(path.lstrip("/"), time.perf_counter() - started)
        except RequestRefused as exc:
            self._send(exc.status, exc.message.encode(), "text/plain; charset=utf-8")
            return
        self._send(HTTPStatus.OK, answer)


class WebhookHTTPServer(LimitedHTTPServer):
    """The HTTPS server; :meth:`set_tls` swaps the certificate for the connections that come next."""

    def __init__(self, address: tuple[str, int], view: ClusterView, metrics: AdmissionMetrics, *,
                 ready: Callable[[], bool] = lambda: True, limits: ServerLimits = DEFAULT_LIMITS,
                 rand: Callable[[int], int] = random.randrange) -> None:
        self.view = view
        self.metrics = metrics
        self.ready = ready
        self.context: ssl.SSLContext | None = None
        self.webhooks: dict[str, Review] = {
            MUTATE_PATH: lambda review: mutate(review, self.view, rand=rand),
            VALIDATE_PATH: validate,
        }
        super().__init__(address, _Handler, limits)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def set_tls(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serves ``cert_pem`` from the next connection on; connections already open keep theirs."""
        self.context = server_context(cert_pem, key_pem)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()  # TCP_NODELAY set there
        context = self.context
        if context is None:
            sock.close()
            raise OSError("no serving certificate yet")
        # The handshake runs on the connection's thread at its first read, under the header deadline, so a
        # client that connects and never speaks TLS holds its own thread only, never the accept loop.
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def answer(self, webhook: str, review_fn: Review, raw: bytes | bytearray, content_type: str) -> bytes:
        """The AdmissionReview answering ``raw``, encoded; every outcome counted and, when mutated, logged."""
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            response = errored("", 400, f"contentType={content_type!r}, expected application/json")
        elif not raw:
            response = errored("", 400, "request body is empty")
        else:
            try:
                review = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
                response = errored("", 400, f"request body is not JSON: {exc}")
            else:
                return json.dumps(self._review(webhook, review_fn, review), separators=(",", ":")).encode()
        self.metrics.count(webhook, "denied")
        return json.dumps(response, separators=(",", ":")).encode()

    def _review(self, webhook: str, review_fn: Review, review: Any) -> dict[str, Any]:
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview" \
                or review.get("apiVersion") != REVIEW_API_VERSION or not isinstance(review.get("request"), dict):
            self.metrics.count(webhook, "denied")
            return errored(_uid(review), 400, f"expected an {REVIEW_API_VERSION} AdmissionReview with a request")
        # Not an AdmissionReview refusal but an HTTP error: kube-apiserver refuses the pod on any `allowed: false`
        # whatever the webhook's failurePolicy, while a failed call is what failurePolicy decides (Ignore: the
        # pod is admitted unchanged).  A view still syncing or a bug here must not block pods.
        if not self.ready():
            self.metrics.count(webhook, "error")
            raise RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE, "the webhook's cluster view (profiles, namespaces, "
                                                                 "priority classes) has not synced yet")
        try:
            response, decision = review_fn(review)
        except Exception as exc:  # kube-apiserver gets an answer, the log the traceback
            log.exception("admission review failed", extra={"webhook": webhook, "pod": _pod_name(review)})
            self.metrics.count(webhook, "error")
            raise RequestRefused(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {exc}") from None
        self._account(webhook, review, response, decision)
        return response

    def _account(self, webhook: str, review: Mapping[str, Any], response: Mapping[str, Any],
                 decision: Decision) -> None:
        for name in decision.profiles:
            self.metrics.count(webhook, "mutated", name)
        for name in decision.skipped:
            self.metrics.count(webhook, "skipped", name)
        if not decision.allowed:
            code = int(((response.get("response") or {}).get("status") or {}).get("code") or 403)
            self.metrics.count(webhook, "error" if code >= 500 else "denied")
            log.info("pod refused", extra={"webhook": webhook, "pod": _pod_name(review), "code": code,
                                           "reason": decision.reason})
        elif not decision.profiles and not decision.skipped:
            self.metrics.count(webhook, "mutated" if decision.mutated else "allowed")
        if decision.mutated or decision.skipped:
            fields = {"webhook": webhook, "pod": _pod_name(review), "profiles": ",".join(decision.profiles) or "none",
                      "skipped": ",".join(f"{name} (probability)" for name in decision.skipped) or "none",
                      **({"remark": decision.reason} if decision.reason else {})}
            if decision.mutated:
                log.info("pod mutated", extra=fields)
            else:
                log.info("pod admitted unchanged", extra=fields)


# ------------------------------------------------------------------------------------- assembled


@dataclass(frozen=True)
class WebhookOptions:
    addr: str
    """``host:port`` to serve on (``:9443``: every address)."""
    cert_dir: str = ""
    """A mounted ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``, optional ``ca.crt``); empty: the bootstrap
    Secret."""
    namespace: str = "koordinator-system"
    """The companion's namespace: the bootstrap Secret's and the Service's."""
    secret_name: str = "koord-companion-webhook-certs"
    service_name: str = "koord-companion"
    configuration_name: str = "koord-companion"
    """The Mutating- and ValidatingWebhookConfiguration whose ``caBundle`` is kept."""
    check_interval_seconds: float = 60.0
    """How often the certificate is checked (renewed before expiry, re-read from the mount) and the
    ``caBundle`` re-published (a re-applied configuration loses it)."""
    limits: ServerLimits = DEFAULT_LIMITS


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"webhook address: expected host:port or :port, got {addr!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class WebhookService:
    """Server, certificate keeper and serving thread together: :meth:`start` loads the certificate (failing
    loudly when it cannot), binds and serves; :meth:`stop` undoes it."""

    def __init__(self, options: WebhookOptions, view: ClusterView, *, api_client: Any = None,
                 registry: CollectorRegistry, ready: Callable[[], bool] = lambda: True,
                 rand: Callable[[int], int] = random.randrange) -> None:
        self.options = options
        self.server = WebhookHTTPServer(parse_addr(options.addr), view, AdmissionMetrics(registry), ready=ready,
                                        limits=options.limits, rand=rand)
        if options.cert_dir:
            source: Callable[[], ServingPair] = lambda: read_cert_dir(options.cert_dir)  # noqa: E731
        elif api_client is not None:
            source = secret_source(api_client, options.namespace, options.secret_name,
                                   service_dns_names(options.service_name, options.namespace))
        else:
            self.server.server_close()
            raise ConfigError("the webhook needs --webhook-cert-dir or Kubernetes (for its bootstrap Secret)")
        self.keeper = CertificateKeeper(self.server.set_tls, source, api_client=api_client,
                                        configuration_name=options.configuration_name,
                                        check_interval_seconds=options.check_interval_seconds)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        try:
            self.keeper.check()
        except BaseException:
            self.server.server_close()
            raise
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-https", daemon=True)
        self._thread.start()
        self.keeper.start()
        log.info("admission webhook serving", extra={"addr": self.options.addr, "port": self.port})

    def stop(self) -> None:
        self.keeper.stop()
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(5.0)
        self.server.server_close()
