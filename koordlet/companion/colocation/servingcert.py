"""The admission webhook's serving certificate: where it comes from, how it is swapped in, and the ``caBundle``
kube-apiserver verifies it with.

The pair comes from a mounted ``kubernetes.io/tls`` Secret (:func:`read_cert_dir`) or from the bootstrap Secret of
:func:`~koordlet.companion.certs.ensure_serving_secret` (:func:`secret_source`, renewed before expiry).
:class:`CertificateKeeper` checks it every interval, hands a changed pair to the server (connections already
open keep theirs) and writes the CA into ``clientConfig.caBundle`` of every webhook of the Mutating- and
ValidatingWebhookConfiguration it owns, keeping the previous CA trusted while replicas catch up.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import logging
import os
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from koordlet.errors import ConfigError, KoordletError

log = logging.getLogger(__name__)


def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS 1.2+ server context for the PEM pair (ConfigError when they do not load)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # load_cert_chain reads files only. The pair goes through anonymous memory files: the shipped Deployment runs
    # with readOnlyRootFilesystem (no writable /tmp), and the key never touches a filesystem.
    with _memory_file("tls.crt", cert_pem) as cert_path, _memory_file("tls.key", key_pem) as key_path:
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise ConfigError(f"webhook certificate and key do not load: {exc}") from None
    return context


@contextlib.contextmanager
def _memory_file(name: str, data: bytes) -> Iterator[str]:
    """A path to an in-memory file holding ``data`` (memfd), closed on exit."""
    fd = os.memfd_create(f"koord-webhook-{name}", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class ServingPair:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes | None
    """The CA to publish in ``caBundle``; None: somebody else publishes it (a mounted cert without ``ca.crt``)."""


def read_cert_dir(directory: str) -> ServingPair:
    """``tls.crt``, ``tls.key`` and, when present, ``ca.crt`` of a mounted Secret (ConfigError when unreadable)."""
    blobs: dict[str, bytes | None] = {}
    for name, required in (("tls.crt", True), ("tls.key", True), ("ca.crt", False)):
        try:
            with open(os.path.join(directory, name), "rb") as f:
                blobs[name] = f.read()
        except FileNotFoundError:
            if required:
                raise ConfigError(f"--webhook-cert-dir {directory}: no {name}") from None
            blobs[name] = None
        except OSError as exc:
            raise ConfigError(f"--webhook-cert-dir {directory}: cannot read {name}: {exc.strerror}") from None
    cert, key = blobs["tls.crt"], blobs["tls.key"]
    assert cert is not None and key is not None
    return ServingPair(cert, key, blobs["ca.crt"])


def merged_bundle(ours: bytes, current: bytes, now: datetime.datetime) -> bytes:
    """``caBundle`` with our CA first, keeping one other still valid CA of ``current``: a replica that has not
    yet picked up a renewed Secret serves the previous certificate for up to one check interval, and
    kube-apiserver must still trust it.  The previous CA's key was dropped when it signed (see certs), so
    keeping it trusted lets nobody sign anything new."""
    mine = x509.load_pem_x509_certificates(ours)
    keep: list[x509.Certificate] = []
    try:
        others = x509.load_pem_x509_certificates(current) if current.strip() else []
    except ValueError:
        others = []  # a broken bundle is replaced whole
    for cert in sorted(others, key=lambda c: c.not_valid_after_utc, reverse=True):
        if cert not in mine and cert.not_valid_after_utc > now:
            keep.append(cert)
            break
    return ours.rstrip(b"\n") + b"\n" + b"".join(c.public_bytes(Encoding.PEM) for c in keep)


class CertificateKeeper:
    """Keeps the webhook's certificate current and published.

    ``source()`` gives the pair to serve: the bootstrap Secret (created or renewed on the way) or the mounted
    files.  :meth:`check` hands it to ``set_tls`` (the server's context swap) when the pair changed and writes
    the CA into every webhook of the owned configurations whose ``caBundle`` lacks it; :meth:`start` runs it
    every ``check_interval_seconds`` on a thread.  A failed check is logged and retried at the next one: the
    certificate in force stays."""

    def __init__(self, set_tls: Callable[[bytes, bytes], None], source: Callable[[], ServingPair], *,
                 api_client: Any = None, configuration_name: str = "", check_interval_seconds: float = 60.0,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        self._set_tls = set_tls
        self._source = source
        self._api = api_client
        self._configuration = configuration_name
        self._interval = check_interval_seconds
        self._now = now
        self._serving: ServingPair | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._missing_reported: set[str] = set()
        self.swaps = 0
        """How many times the served certificate changed after the first."""

    def check(self) -> None:
        """One round: load the pair, swap when it changed, publish the CA."""
        pair = self._source()
        if self._serving is None or (pair.cert_pem, pair.key_pem) != (self._serving.cert_pem, self._serving.key_pem):
            self._set_tls(pair.cert_pem, pair.key_pem)
            if self._serving is not None:
                self.swaps += 1
                log.info("webhook serving certificate swapped", extra={"expires": _expiry(pair.cert_pem)})
            self._serving = pair
        if pair.ca_pem is not None and self._api is not None and self._configuration:
            self.publish_ca(pair.ca_pem)

    def publish_ca(self, ca_pem: bytes) -> None:
        """Writes ``ca_pem`` into ``clientConfig.caBundle`` of every webhook of both owned configurations."""
        from kubernetes import client

        from koordlet.companion.kube.client import KubeApiError, call_json

        api = client.AdmissionregistrationV1Api(self._api)
        for kind, read, replace in (
                ("MutatingWebhookConfiguration", api.read_mutating_webhook_configuration,
                 api.replace_mutating_webhook_configuration),
                ("ValidatingWebhookConfiguration", api.read_validating_webhook_configuration,
                 api.replace_validating_webhook_configuration)):
            for _attempt in range(3):
                try:
                    current = call_json(read, self._configuration)
                except KubeApiError as err:
                    if err.status != 404:
                        raise
                    if kind not in self._missing_reported:
                        self._missing_reported.add(kind)
                        log.warning("webhook configuration not found: its caBundle is not kept",
                                    extra={"kind": kind, "configuration": self._configuration})
                    break
                self._missing_reported.discard(kind)
                if not self._patch_bundles(current, ca_pem):
                    break
                try:
                    call_json(replace, self._configuration, current)
                except KubeApiError as err:
                    if err.status == 409:  # changed since the read: read again
                        continue
                    raise
                log.info("webhook caBundle written", extra={"kind": kind, "configuration": self._configuration})
                break

    def _patch_bundles(self, configuration: dict[str, Any], ca_pem: bytes) -> bool:
        """Sets the bundles in place; False when every webhook already trusts ``ca_pem``."""
        changed = False
        for webhook in configuration.get("webhooks") or []:
            client_config = webhook.setdefault("clientConfig", {})
            try:
                current = base64.b64decode(client_config.get("caBundle") or "", validate=True)
            except (binascii.Error, ValueError):
                current = b""
            if _trusts(current, ca_pem):
                continue
            bundle = merged_bundle(ca_pem, current, self._now())
            client_config["caBundle"] = base64.b64encode(bundle).decode("ascii")
            changed = True
        return changed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="webhook-certificates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check()
            except (KoordletError, OSError, ValueError) as exc:
                log.warning("webhook certificate check failed, the current one stays",
                            extra={"error": str(exc), "retry_in_seconds": self._interval})


def _trusts(bundle: bytes, ca_pem: bytes) -> bool:
    if not bundle.strip():
        return False
    try:
        have = x509.load_pem_x509_certificates(bundle)
        wanted = x509.load_pem_x509_certificates(ca_pem)
    except ValueError:
        return False
    return all(cert in have for cert in wanted)


def _expiry(cert_pem: bytes) -> str:
    with contextlib.suppress(ValueError):
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.isoformat()
    return "unknown"


def secret_source(api_client: Any, namespace: str, name: str, dns_names: Sequence[str]) -> Callable[[], ServingPair]:
    """The bootstrap Secret as a source: each call re-ensures it (renewing it before expiry)."""
    from koordlet.companion.certs import ensure_serving_secret

    def load() -> ServingPair:
        cert, key, ca = ensure_serving_secret(api_client, namespace, name, dns_names)
        return ServingPair(cert, key, ca)

    return load


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names kube-apiserver verifies a webhook Service's certificate against (``<svc>.<ns>.svc``), and the
    usual others."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
