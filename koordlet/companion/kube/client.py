"""The API client: errors of kube-apiserver, bounded calls returning plain JSON, and ``ApiClient``s from a
host, a token file and a CA (the token file is re-read when it changes, as kubelet rotates projected tokens)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from koordlet.apis.extension import RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY
from koordlet.apis.sloconfig import CONFIGMAP_NAME
from koordlet.errors import ConfigError, KoordletError

# Unannotated in the client (strict mypy refuses untyped calls): used through Any.
_InClusterConfigLoader: Any = InClusterConfigLoader


log = logging.getLogger(__name__)

SLO_GROUP = "slo.koordinator.sh"
SLO_VERSION = "v1alpha1"
NODESLO_PLURAL = "nodeslos"
NODEMETRIC_PLURAL = "nodemetrics"
SLO_CONFIGMAP_NAMESPACE = "koordinator-system"
SLO_CONFIGMAP_NAME = CONFIGMAP_NAME
BATCH_CPU = RESOURCE_BATCH_CPU
"""Node extended resource: batch CPU in integer milli-cores (quantity ``"15000"`` is 15 cores)."""
BATCH_MEMORY = RESOURCE_BATCH_MEMORY
"""Node extended resource: batch memory in bytes."""
MERGE_PATCH = "application/merge-patch+json"
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
REQUEST_TIMEOUT_SECONDS = 10.0
"""Default bound on one non-watch request (connect and read together)."""

# Status codes worth retrying: the request may succeed later unchanged (0: no HTTP answer at all).
_TEMPORARY = frozenset({0, 408, 429, 500, 502, 503, 504})


class KubeApiError(KoordletError, ConnectionError):
    """kube-apiserver refused or failed a request; ``status`` 0 when no HTTP answer came (network, TLS, timeout)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def temporary(self) -> bool:
        """True when retrying the same request later may succeed (timeouts, throttling, server errors)."""
        return self.status in _TEMPORARY

    @property
    def permanent(self) -> bool:
        """True when the same request will be refused again until something else changes: a 4xx about the
        request or its object (400, 403, 404, 413, 422...).  Not 401 (the credential, re-read from its file
        at the next request), 408, 409 (a write in between: re-read and retry) or 429."""
        return 400 <= self.status < 500 and self.status not in (401, 408, 409, 429)

    @classmethod
    def from_api_exception(cls, exc: ApiException) -> KubeApiError:
        status = int(exc.status or 0)
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body) if exc.body else {}
        except ValueError:
            body = {}
        if isinstance(body, dict) and body.get("kind") == "Status":
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        return cls(status, reason, message or str(exc.body or "")[:200])


def call_json(fn: Callable[..., Any], *args: Any, timeout: float = REQUEST_TIMEOUT_SECONDS, **kwargs: Any) -> Any:
    """Calls a generated API method and returns the answer as decoded JSON; errors as :class:`KubeApiError`."""
    try:
        response = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        raise KubeApiError.from_api_exception(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
    try:
        return json.loads(response.data)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
    except ValueError as exc:
        raise KubeApiError(0, "BadResponse", f"the answer is not JSON: {exc}") from exc
    finally:
        response.release_conn()


class _TokenFile:
    """``refresh_api_key_hook``: re-reads the bearer token when the file changes (kubelet rotates it)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def read(self) -> str:
        with self._lock:
            try:
                stat = self._path.stat()
                stamp = (stat.st_mtime_ns, stat.st_ino)
                if stamp != self._stamp:
                    self._token = self._path.read_text().strip()
                    self._stamp = stamp
            except OSError as exc:
                if not self._token:
                    raise ConfigError(f"kube token_file: cannot read {self._path}: {exc.strerror}") from exc
                if self._stamp is not None:  # warn once per loss, not at every request
                    log.warning("kube token file unreadable, keeping the last token",
                                extra={"path": str(self._path), "error": exc.strerror})
                    self._stamp = None
            return self._token

    def __call__(self, configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = self.read()
        configuration.api_key_prefix["BearerToken"] = "Bearer"


def make_api_client(
    host: str,
    token_file: str | Path | None = None,
    ca_file: str | Path | None = None,
    *,
    insecure: bool = False,
) -> client.ApiClient:
    """An ``ApiClient`` for ``host`` (``https://10.0.0.1:6443``).

    ``token_file`` holds the bearer token (re-read when it changes); ``ca_file`` is the CA that signed
    the server's certificate (None: the system trust store); ``insecure`` skips TLS verification
    entirely - for a lab only.
    """
    if insecure and ca_file is not None:
        raise ConfigError("kube: give ca_file or insecure, not both")
    configuration = client.Configuration(host=host.rstrip("/"))
    if insecure:
        configuration.verify_ssl = False
    elif ca_file is not None:
        if not Path(ca_file).is_file():
            raise ConfigError(f"kube ca_file: {ca_file} is not a file")
        configuration.ssl_ca_cert = str(ca_file)
    if token_file is not None:
        hook = _TokenFile(Path(token_file))
        hook(configuration)  # fails now, not at the first request, when the file is missing
        hooked: Any = configuration  # the client annotates the hook attribute as None
        hooked.refresh_api_key_hook = hook
    return client.ApiClient(configuration)


def make_in_cluster_client(
    environ: Mapping[str, str] | None = None,
    token_file: str | Path = SERVICE_TOKEN_FILE,
    ca_file: str | Path = SERVICE_CA_FILE,
) -> client.ApiClient:
    """An ``ApiClient`` from the pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT``, token, CA)."""
    configuration = client.Configuration()
    try:
        _InClusterConfigLoader(
            token_filename=str(token_file), cert_filename=str(ca_file),
            environ=dict(os.environ if environ is None else environ),
        ).load_and_set(configuration)
    except ConfigException as exc:
        raise ConfigError(f"kube in-cluster config: {exc}") from exc
    return client.ApiClient(configuration)


def resource_version_of(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion`` of an object, "" when it has none."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
