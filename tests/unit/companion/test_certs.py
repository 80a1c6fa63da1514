"""The companion's serving Secret (koordlet/companion/certs.py) against the fake apiserver, through the real client:
made when absent, reused while good, renewed when expiring, a race settled on one certificate, another manager's
Secret never overwritten, and the result good for a real TLS handshake under the Service's name."""

from __future__ import annotations

import base64
import datetime
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from koordlet.companion.certs import (
    MANAGED_BY,
    MANAGER,
    CertificateError,
    ensure_serving_secret,
    issue,
    serving_certificate,
)
from tests.fixtures.fakeapiserver import FakeApiServer, Fault

NS = "koordinator-system"
NAME = "koord-companion-tls"
NAMES = ["koord-companion", f"koord-companion.{NS}", f"koord-companion.{NS}.svc",
         f"koord-companion.{NS}.svc.cluster.local"]


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def secret_of(made: Any, *, managed: bool = True, data: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME, "namespace": NS}
    if managed:
        meta["annotations"] = {MANAGED_BY: MANAGER}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
            "data": data if data is not None else {
                "tls.crt": base64.b64encode(made.cert_pem).decode(), "tls.key": base64.b64encode(made.key_pem).decode(),
                "ca.crt": base64.b64encode(made.ca_pem).decode()}}


def writes(fake_apiserver: FakeApiServer) -> int:
    return sum(fake_apiserver.count(verb, "secrets") for verb in ("create", "update", "patch"))


def test_made_when_absent_then_reused(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    cert_pem, key_pem, ca_pem = ensure_serving_secret(api, NS, NAME, NAMES)
    stored = fake_apiserver.get("secrets", NAME, NS)
    assert stored is not None and stored["type"] == "kubernetes.io/tls"
    assert stored["metadata"]["annotations"] == {MANAGED_BY: MANAGER}
    # Only the serving pair and the CA's certificate: the CA's key is gone once it has signed.
    assert set(stored["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert base64.b64decode(stored["data"]["ca.crt"]) == ca_pem
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == NAMES
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    lifetime = cert.not_valid_after_utc - now()
    assert datetime.timedelta(days=364) < lifetime <= datetime.timedelta(days=365)
    # A second replica (or a restart) reads the same certificate, writing nothing.
    assert ensure_serving_secret(api, NS, NAME, NAMES) == (cert_pem, key_pem, ca_pem)
    assert writes(fake_apiserver) == 1


def test_a_race_settles_on_one_certificate(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    # Our create loses (409 AlreadyExists): read again and go on.
    fake_apiserver.fail_next(1, Fault.STATUS, status=409, when=lambda r: r.verb == "create")
    first = ensure_serving_secret(api, NS, NAME, NAMES)
    assert fake_apiserver.count("create", "secrets") == 2
    fake_apiserver.delete("secrets", NAME, NS)
    # Replicas starting together: whoever creates first wins, the others serve the winner's certificate.
    results: list[tuple[bytes, bytes, bytes]] = []
    errors: list[Exception] = []

    def replica() -> None:
        try:
            results.append(ensure_serving_secret(api, NS, NAME, NAMES))
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and len(results) == 4
    stored = fake_apiserver.get("secrets", NAME, NS)
    assert stored is not None
    assert {r[0] for r in results} == {base64.b64decode(stored["data"]["tls.crt"])}
    assert results[0] != first


def test_renewed_when_expiring_or_missing_a_name(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    old = issue(NAMES, now() - datetime.timedelta(days=340))  # 25 days left: inside the 30-day window
    fake_apiserver.seed(secret_of(old))
    cert_pem, _key, _ca = ensure_serving_secret(api, NS, NAME, NAMES)
    assert cert_pem != old.cert_pem and fake_apiserver.count("update", "secrets") == 1
    assert x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc - now() > datetime.timedelta(days=364)
    # The Service got another name: the certificate is made again with it.
    renamed = ensure_serving_secret(api, NS, NAME, [*NAMES, "10.96.0.20"])
    alt = x509.load_pem_x509_certificate(renamed[0]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert [str(ip) for ip in alt.get_values_for_type(x509.IPAddress)] == ["10.96.0.20"]
    assert fake_apiserver.count("update", "secrets") == 2


def test_another_managers_secret_is_used_but_never_overwritten(
    fake_apiserver: FakeApiServer, api: client.ApiClient
) -> None:
    theirs = issue(NAMES, now())
    fake_apiserver.seed(secret_of(theirs, managed=False))
    assert ensure_serving_secret(api, NS, NAME, NAMES) == (theirs.cert_pem, theirs.key_pem, theirs.ca_pem)
    expiring = issue(NAMES, now() - datetime.timedelta(days=360))
    fake_apiserver.seed(secret_of(expiring, managed=False))
    with pytest.raises(CertificateError, match=r"not managed by koord-companion.*expires"):
        ensure_serving_secret(api, NS, NAME, NAMES)
    assert writes(fake_apiserver) == 0


def _b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


@pytest.mark.parametrize(("change", "problem"), [
    (lambda m, o: {"tls.crt": _b64(m.cert_pem), "ca.crt": _b64(m.ca_pem)}, "tls.key is missing"),
    (lambda m, o: {"tls.crt": "%%%", "tls.key": _b64(m.key_pem), "ca.crt": _b64(m.ca_pem)}, "not base64"),
    (lambda m, o: {"tls.crt": _b64(b"junk"), "tls.key": _b64(m.key_pem), "ca.crt": _b64(m.ca_pem)}, "not PEM"),
    (lambda m, o: {"tls.crt": _b64(m.cert_pem), "tls.key": _b64(o.key_pem), "ca.crt": _b64(m.ca_pem)},
     "not the key of"),
    (lambda m, o: {"tls.crt": _b64(m.cert_pem), "tls.key": _b64(m.key_pem), "ca.crt": _b64(o.ca_pem)},
     "not signed by"),
])
def test_unusable_secrets_are_named(change: Any, problem: str) -> None:
    made, other = issue(NAMES, now()), issue(NAMES, now())
    with pytest.raises(CertificateError, match=problem):
        serving_certificate(secret_of(made, data=change(made, other)), NAMES, now())
    with pytest.raises(CertificateError, match=r"does not name other\.example"):
        serving_certificate(secret_of(made), [*NAMES, "other.example"], now())
    with pytest.raises(CertificateError, match="not valid before"):
        serving_certificate(secret_of(issue(NAMES, now() + datetime.timedelta(days=1))), NAMES, now())


def test_the_certificate_serves_tls_under_the_service_name(tmp_path: Path) -> None:
    made = issue(NAMES, now())
    for name, blob in (("tls.crt", made.cert_pem), ("tls.key", made.key_pem), ("ca.crt", made.ca_pem)):
        (tmp_path / name).write_bytes(blob)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    def handshake(server_name: str) -> None:
        left, right = socket.socketpair()
        with left, right:
            done: list[BaseException | None] = []

            def serve() -> None:
                try:
                    with server_context.wrap_socket(left, server_side=True):
                        pass
                    done.append(None)
                except (ssl.SSLError, OSError) as exc:
                    done.append(exc)

            thread = threading.Thread(target=serve)
            thread.start()
            try:
                with client_context.wrap_socket(right, server_hostname=server_name):
                    pass
            finally:
                right.close()
                thread.join(10)

    handshake(f"koord-companion.{NS}.svc")  # what koordlets dial (manifests/koordlet/daemonset.yaml)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake("kubernetes.default.svc")


def test_the_webhook_context_loads_its_pair_without_a_writable_filesystem(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shipped Deployment runs with readOnlyRootFilesystem: no temporary file or directory may be made.
    import tempfile

    from koordlet.companion.colocation.servingcert import server_context

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(30, "Read-only file system")

    for name in ("mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile", "TemporaryFile"):
        monkeypatch.setattr(tempfile, name, refused)
    made = issue(NAMES, now())
    context = server_context(made.cert_pem, made.key_pem)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(Exception, match="do not load"):
        server_context(made.cert_pem, b"not a key")
