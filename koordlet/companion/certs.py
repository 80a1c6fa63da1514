"""The companion's serving certificate, bootstrapped into a Secret: TLS for the koordlets' gRPC link without
cert-manager or an operator's hands.

:func:`ensure_serving_secret` reads ``kubernetes.io/tls`` Secret ``<namespace>/<name>`` (``tls.crt``, ``tls.key``,
``ca.crt``).  When it is absent, or one that this code made is unusable (unparsable, key and certificate apart, not
signed by ``ca.crt``, names missing, expired or expiring within :data:`RENEW_BEFORE`), it makes a fresh self-signed
CA and a serving certificate signed by it and writes the Secret; the CA's private key is never stored, so nobody
can take it to sign another certificate koordlets would trust.  Every replica calls it at start: the first one
creates the Secret, a replica that loses the race (409) reads the winner's, and all serve one certificate.
Koordlets mount only ``ca.crt`` (``companion.caFile``).

A Secret this code did not make (no :data:`MANAGED_BY` annotation: cert-manager's, an operator's) is used when it is
valid and never overwritten; when it is not, start-up fails naming what is wrong with it.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from koordlet.companion.kube.client import REQUEST_TIMEOUT_SECONDS, KubeApiError, call_json
from koordlet.errors import KoordletError

log = logging.getLogger(__name__)

TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"
CA_CERT_KEY = "ca.crt"
SECRET_TYPE = "kubernetes.io/tls"
MANAGED_BY = "koordinator.sh/managed-by"
"""Annotation (value :data:`MANAGER`) on a Secret this module made: only such a Secret is ever replaced."""
MANAGER = "koord-companion"
VALIDITY = datetime.timedelta(days=365)
"""Lifetime of the CA and of the serving certificate (renewed together)."""
RENEW_BEFORE = datetime.timedelta(days=30)
"""A certificate expiring within this is replaced at the next start of a replica."""
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Backdating of ``notBefore``, so a node whose clock is a little behind already accepts a new certificate."""
_ATTEMPTS = 3


class CertificateError(KoordletError, ValueError):
    """The serving Secret is unusable and not ours to replace, or it could not be written."""


@dataclass(frozen=True)
class ServingCertificate:
    """The PEM blobs of a serving Secret."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes


def ensure_serving_secret(
    api: client.ApiClient,
    namespace: str,
    name: str,
    dns_names: Sequence[str],
    *,
    now: datetime.datetime | None = None,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> tuple[bytes, bytes, bytes]:
    """``(cert PEM, key PEM, CA PEM)`` of Secret ``namespace/name``, created or renewed as the module says.

    ``dns_names`` (the Service's names) must all be in the certificate's subjectAltName; an IP address among
    them goes in as an IP SAN.  Raises :class:`CertificateError` for an unusable Secret that is not ours and
    :class:`KubeApiError` when kube-apiserver fails.
    """
    names = [n.strip() for n in dns_names if n.strip()]
    if not names:
        raise CertificateError("the serving certificate needs at least one DNS name")
    core = client.CoreV1Api(api)
    for _ in range(_ATTEMPTS):
        moment = now or datetime.datetime.now(datetime.UTC)
        current = _read(core, namespace, name, timeout_seconds)
        if current is not None:
            try:
                found = serving_certificate(current, names, moment)
            except CertificateError as problem:
                if not _managed(current):
                    raise CertificateError(
                        f"Secret {namespace}/{name} is not managed by koord-companion (no {MANAGED_BY} annotation) "
                        f"and cannot serve: {problem}; fix it, or delete it to have one made") from None
                log.warning("serving Secret is replaced",
                            extra={"namespace": namespace, "secret": name, "reason": str(problem)})
            else:
                return found.cert_pem, found.key_pem, found.ca_pem
        made = issue(names, moment)
        body = _secret_body(namespace, name, made, current)
        try:
            if current is None:
                call_json(core.create_namespaced_secret, namespace, body, timeout=timeout_seconds)
                log.info("serving Secret created with a self-signed CA",
                         extra={"namespace": namespace, "secret": name, "names": ", ".join(names)})
            else:
                call_json(core.replace_namespaced_secret, name, namespace, body, timeout=timeout_seconds)
                log.info("serving Secret renewed", extra={"namespace": namespace, "secret": name,
                                                          "names": ", ".join(names)})
        except KubeApiError as err:
            if err.status == 409:  # another replica wrote first: use (or check) the winner's
                continue
            raise
        return made.cert_pem, made.key_pem, made.ca_pem
    raise CertificateError(f"Secret {namespace}/{name} kept changing during {_ATTEMPTS} attempts")


# ------------------------------------------------------------------------------------- checking


def serving_certificate(secret: Mapping[str, Any], dns_names: Sequence[str],
                        now: datetime.datetime) -> ServingCertificate:
    """The Secret's certificate when it can serve ``dns_names`` from ``now`` until at least ``RENEW_BEFORE``
    later; :class:`CertificateError` naming the first problem otherwise."""
    data = secret.get("data") or {}
    blobs: dict[str, bytes] = {}
    for field in (TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY, CA_CERT_KEY):
        value = data.get(field)
        if not isinstance(value, str) or not value:
            raise CertificateError(f"{field} is missing")
        try:
            blobs[field] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise CertificateError(f"{field} is not base64") from None
    try:
        cert = x509.load_pem_x509_certificate(blobs[TLS_CERT_KEY])
        key = serialization.load_pem_private_key(blobs[TLS_PRIVATE_KEY_KEY], password=None)
        authorities = x509.load_pem_x509_certificates(blobs[CA_CERT_KEY])
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not PEM: {exc}") from None
    if key.public_key() != cert.public_key():
        raise CertificateError(f"{TLS_PRIVATE_KEY_KEY} is not the key of {TLS_CERT_KEY}")
    if not any(_issued_by(cert, ca) for ca in authorities):
        raise CertificateError(f"{TLS_CERT_KEY} is not signed by a certificate of {CA_CERT_KEY}")
    if cert.not_valid_before_utc > now + CLOCK_SKEW:
        raise CertificateError(f"{TLS_CERT_KEY} is not valid before {cert.not_valid_before_utc.isoformat()}")
    expiry = min([cert.not_valid_after_utc, *(ca.not_valid_after_utc for ca in authorities if _issued_by(cert, ca))])
    if expiry - now < RENEW_BEFORE:
        raise CertificateError(f"the certificate expires {expiry.isoformat()}, within {RENEW_BEFORE.days} days")
    try:
        alt_names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise CertificateError(f"{TLS_CERT_KEY} has no subjectAltName") from None
    covered = {n.lower() for n in alt_names.get_values_for_type(x509.DNSName)}
    covered |= {str(ip) for ip in alt_names.get_values_for_type(x509.IPAddress)}
    missing = [n for n in dns_names if _san_text(n) not in covered]
    if missing:
        raise CertificateError(f"{TLS_CERT_KEY} does not name {', '.join(missing)}")
    return ServingCertificate(blobs[TLS_CERT_KEY], blobs[TLS_PRIVATE_KEY_KEY], blobs[CA_CERT_KEY])


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _managed(secret: Mapping[str, Any]) -> bool:
    return bool(((secret.get("metadata") or {}).get("annotations") or {}).get(MANAGED_BY) == MANAGER)


def _san_text(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name.lower()


# ------------------------------------------------------------------------------------- issuing


def issue(dns_names: Sequence[str], now: datetime.datetime) -> ServingCertificate:
    """A fresh CA (its key dropped once it has signed) and a serving certificate for ``dns_names`` (ECDSA
    P-256, SHA-256, :data:`VALIDITY`)."""
    start, end = now - CLOCK_SKEW, now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"koord-companion-ca@{int(now.timestamp())}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        # Signs this one serving certificate and nothing below it.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for name in dns_names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
    )


# ------------------------------------------------------------------------------------- the Secret


def _read(core: client.CoreV1Api, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
    try:
        secret: dict[str, Any] = call_json(core.read_namespaced_secret, name, namespace, timeout=timeout)
    except KubeApiError as err:
        if err.status == 404:
            return None
        raise
    return secret


def _secret_body(namespace: str, name: str, made: ServingCertificate,
                 current: Mapping[str, Any] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name, "namespace": namespace,
        "labels": {"app.kubernetes.io/name": MANAGER, "app.kubernetes.io/part-of": "koordinator"},
        "annotations": {MANAGED_BY: MANAGER},
    }
    if current is not None:  # a replace carries the version it read: a concurrent renewal answers 409
        metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    return {
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE, "metadata": metadata,
        "data": {key: base64.b64encode(value).decode("ascii") for key, value in (
            (TLS_CERT_KEY, made.cert_pem), (TLS_PRIVATE_KEY_KEY, made.key_pem), (CA_CERT_KEY, made.ca_pem))},
    }
