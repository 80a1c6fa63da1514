"""Who is calling the companion API: every call authenticates to an :class:`Identity`, and a koordlet's identity
is bound to one node, so a node speaks only for itself.

Three modes (``koord-companion --auth``):

* ``tokenreview`` (:class:`TokenReviewAuthenticator`): the koordlet presents its projected service-account token
  (audience ``koord-companion``); kube-apiserver checks it (``POST
  /apis/authentication.k8s.io/v1/tokenreviews``), the user must be the koordlet's service account, and the token
  must be bound to a pod (``authentication.kubernetes.io/pod-name`` and ``pod-uid`` in ``status.user.extra``,
  which kube-apiserver sets for tokens it issued through the TokenRequest API).  That pod, read from the API with
  its uid checked, gives the node: ``spec.nodeName``.  A ``node-name`` claim (kube-apiserver 1.30+), when present,
  must agree.  Reviews are cached (bounded, briefly) so thousands of koordlets do not each cost two API requests
  per call.
* ``token`` (:class:`StaticTokenAuthenticator`): one shared bearer token; not bound to a node.
* ``none`` (:class:`AnonymousAuthenticator`): every call is let in; not bound to a node.

The two unbound modes are only for a loopback address or a unix socket unless the operator says ``--insecure``:
:func:`check_exposure`.

:meth:`Authenticator.authenticate` may block on kube-apiserver: the gRPC server calls it on a thread, and calls
the non-blocking :meth:`Authenticator.cached` first on its event loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from koordlet.errors import ConfigError, KoordletError

log = logging.getLogger(__name__)

DEFAULT_AUDIENCE: Final = "koord-companion"
DEFAULT_SERVICE_ACCOUNT: Final = "system:serviceaccount:koordinator-system:koordlet"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
POD_NAME_CLAIM: Final = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM: Final = "authentication.kubernetes.io/pod-uid"
NODE_NAME_CLAIM: Final = "authentication.kubernetes.io/node-name"

CACHE_TTL_SECONDS: Final = 120.0
"""How long an accepted review is reused (kube-apiserver's own webhook token cache keeps 2 minutes); never past
the token's ``exp``.  A deleted koordlet pod's token is thus honoured for at most this long."""
NEGATIVE_TTL_SECONDS: Final = 10.0
"""How long a refused token stays refused without asking again (a koordlet with a bad token retries every 30 s)."""
CACHE_ENTRIES: Final = 10_000
"""Reviews kept: above the largest cluster's node count (one token per koordlet, two during a rotation)."""
REQUEST_TIMEOUT_SECONDS: Final = 5.0
MAX_TOKEN_BYTES: Final = 16 << 10
"""A projected token is about 1 KiB; anything far larger is refused without asking kube-apiserver."""

AUTH_MODES: Final = ("tokenreview", "token", "none")


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: ``name`` for logs, ``node`` the one node it may speak for (None: any, the
    unbound modes)."""

    name: str
    node: str | None


class AuthError(KoordletError):
    """A call could not be authenticated or is not permitted."""


class Unauthenticated(AuthError, PermissionError):
    """No token, or one kube-apiserver (or the static comparison) does not accept: gRPC UNAUTHENTICATED."""


class Forbidden(AuthError, PermissionError):
    """A valid token of someone who may not use the API, or not bound to a node: gRPC PERMISSION_DENIED."""


class AuthUnavailable(AuthError, ConnectionError):
    """kube-apiserver could not be asked (down, throttling, no RBAC): gRPC UNAVAILABLE; the koordlet retries."""


class Authenticator(Protocol):
    @property
    def mode(self) -> str:
        """``tokenreview``, ``token`` or ``none``."""
        ...

    @property
    def bound(self) -> bool:
        """Whether identities are bound to a node (only ``tokenreview``)."""
        ...

    def cached(self, token: str | None) -> Identity | None:
        """The identity for ``token`` when known without I/O; None when :meth:`authenticate` must be called.
        Raises :class:`AuthError` for a token known to be refused."""
        ...

    def authenticate(self, token: str | None) -> Identity:
        """The identity of ``token`` (None: no token presented); may block.  Raises :class:`AuthError`."""
        ...


class AnonymousAuthenticator:
    mode: Final = "none"
    bound: Final = False
    _identity: Final = Identity("anonymous", None)

    def cached(self, token: str | None) -> Identity | None:
        return self._identity

    def authenticate(self, token: str | None) -> Identity:
        return self._identity


class StaticTokenAuthenticator:
    """One shared bearer token, compared in constant time."""

    mode: Final = "token"
    bound: Final = False

    def __init__(self, token: str) -> None:
        if not token:
            raise ConfigError("companion API: the static token is empty")
        self._expected = token.encode()
        self._identity = Identity("static-token holder", None)

    def cached(self, token: str | None) -> Identity | None:
        return self.authenticate(token)

    def authenticate(self, token: str | None) -> Identity:
        if token is None or not hmac.compare_digest(token.encode(), self._expected):
            raise Unauthenticated("missing or invalid bearer token")
        return self._identity


# ---------------------------------------------------------------------------------------------- TokenReview


def parse_service_account(username: str) -> tuple[str, str]:
    """(namespace, name) of ``system:serviceaccount:<namespace>:<name>``; ConfigError otherwise."""
    rest = username[len(SERVICE_ACCOUNT_PREFIX):] if username.startswith(SERVICE_ACCOUNT_PREFIX) else ""
    namespace, _, name = rest.partition(":")
    if not namespace or not name or ":" in name:
        raise ConfigError(f"koordlet service account: expected {SERVICE_ACCOUNT_PREFIX}<namespace>:<name>, "
                          f"got {username!r}")
    return namespace, name


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim (Unix seconds) of a JWT, read without verifying it (it only shortens a cache entry; the
    signature is kube-apiserver's business); None when the token is no JWT or has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error, RecursionError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        return None
    # JSON integers are unbounded and Python's decoder takes NaN and Infinity: a claim no finite float holds
    # says nothing usable, so the cache's own TTL applies.
    try:
        seconds = float(exp)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _first(extra: Mapping[str, Any], key: str) -> str:
    """The single value of a ``user.extra`` claim ("" when absent or not one string)."""
    values = extra.get(key)
    if isinstance(values, str):
        return values
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return ""


@dataclass
class _Entry:
    until: float
    identity: Identity | None
    error: AuthError | None


class ReviewAPI(Protocol):
    """The two kube-apiserver requests a review takes; both raise ``KubeApiError``."""

    def create_token_review(self, body: Mapping[str, Any], timeout_seconds: float) -> Any:
        """``POST /apis/authentication.k8s.io/v1/tokenreviews``; the answer as decoded JSON."""
        ...

    def read_pod(self, namespace: str, name: str, timeout_seconds: float) -> Any:
        """``GET /api/v1/namespaces/<namespace>/pods/<name>``; the answer as decoded JSON."""
        ...


class KubeReviewAPI:
    """:class:`ReviewAPI` through the companion's ``kubernetes`` ApiClient (its host, TLS and token refresh)."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    def create_token_review(self, body: Mapping[str, Any], timeout_seconds: float) -> Any:
        from kubernetes import client

        from koordlet.companion.kube import call_json

        review = client.V1TokenReview.from_dict(dict(body))
        return call_json(client.AuthenticationV1Api(self._api).create_token_review, review, timeout=timeout_seconds)

    def read_pod(self, namespace: str, name: str, timeout_seconds: float) -> Any:
        from kubernetes import client

        from koordlet.companion.kube import call_json

        return call_json(client.CoreV1Api(self._api).read_namespaced_pod, name, namespace, timeout=timeout_seconds)


class TokenReviewAuthenticator:
    """Koordlets by their projected service-account tokens, each bound to the node of its pod."""

    mode: Final = "tokenreview"
    bound: Final = True

    def __init__(self, api: ReviewAPI, *, audiences: Sequence[str] = (DEFAULT_AUDIENCE,),
                 service_account: str = DEFAULT_SERVICE_ACCOUNT, ttl_seconds: float = CACHE_TTL_SECONDS,
                 negative_ttl_seconds: float = NEGATIVE_TTL_SECONDS, max_entries: int = CACHE_ENTRIES,
                 timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        """``api`` reaches kube-apiserver (:class:`KubeReviewAPI`).  ``clock`` is wall time: a token's
        ``exp`` is one."""
        if not audiences or not all(audiences):
            raise ConfigError("companion API: token audiences must be non-empty")
        self._namespace, _ = parse_service_account(service_account)
        self._api = api
        self.audiences = tuple(audiences)
        self.service_account = service_account
        self._ttl = ttl_seconds
        self._negative_ttl = negative_ttl_seconds
        self._max_entries = max_entries
        self._timeout = timeout_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, _Entry] = OrderedDict()
        self._inflight: dict[bytes, threading.Event] = {}
        self.reviews = 0
        """TokenReviews sent (for tests and logs)."""

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()  # the cache never holds a token itself

    def cached(self, token: str | None) -> Identity | None:
        if not token:
            raise Unauthenticated("missing bearer token (the koordlet's projected service-account token)")
        return self._lookup(self._key(token))

    def _lookup(self, key: bytes) -> Identity | None:
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if entry.until <= self._clock():
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
        if entry.error is not None:
            raise entry.error
        return entry.identity

    def authenticate(self, token: str | None) -> Identity:
        if not token:
            raise Unauthenticated("missing bearer token (the koordlet's projected service-account token)")
        if len(token) > MAX_TOKEN_BYTES:
            raise Unauthenticated("bearer token too long")
        key = self._key(token)
        while True:
            known = self._lookup(key)
            if known is not None:
                return known
            with self._lock:
                # One review per token at a time: a companion restart brings every koordlet back at once,
                # each with a watch and a report.
                waiting = self._inflight.get(key)
                if waiting is None:
                    done = self._inflight[key] = threading.Event()
                    break
            if not waiting.wait(self._timeout * 2 + 1):
                raise AuthUnavailable("token review still in progress; retry")
            # The winner's result is in the cache now, unless its review could not be made: try ourselves.
        try:
            identity, error = self._review(token)
            now = self._clock()
            if error is None:
                expiry = token_expiry(token)
                until = now + self._ttl if expiry is None else min(now + self._ttl, expiry)
                self._store(key, _Entry(until, identity, None))
            elif not isinstance(error, AuthUnavailable):
                self._store(key, _Entry(now + self._negative_ttl, None, error))
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            done.set()
        if error is not None:
            raise error
        assert identity is not None
        return identity

    def _store(self, key: bytes, entry: _Entry) -> None:
        with self._lock:
            self._cache[key] = entry
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)

    def _review(self, token: str) -> tuple[Identity | None, AuthError | None]:
        """Asks kube-apiserver; (identity, None) or (None, the error to raise)."""
        from koordlet.companion.kube import KubeApiError

        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": list(self.audiences)}}
        self.reviews += 1
        try:
            review = self._api.create_token_review(body, self._timeout)
        except KubeApiError as exc:
            log.warning("TokenReview failed", extra={"error": str(exc)})
            return None, AuthUnavailable(f"cannot review the token now ({exc.status or exc.reason}); retry")
        status = review.get("status") if isinstance(review, Mapping) else None
        if not isinstance(status, Mapping):
            return None, AuthUnavailable("TokenReview answer without status; retry")
        if status.get("authenticated") is not True:
            # status.error is kube-apiserver's reason (expired, wrong audience, unknown signer): the caller's own.
            reason = status.get("error")
            return None, Unauthenticated(f"token not accepted{': ' + reason if isinstance(reason, str) else ''}")
        # An audience-aware reviewer answers with the requested audiences the token is valid for; none of ours
        # there means the token was issued for something else (or the reviewer ignores audiences).
        granted = status.get("audiences")
        if not isinstance(granted, list) or not {a for a in granted if isinstance(a, str)} & set(self.audiences):
            return None, Unauthenticated(f"token not valid for audience {', '.join(self.audiences)}")
        user = status.get("user")
        user = user if isinstance(user, Mapping) else {}
        username = user.get("username") if isinstance(user.get("username"), str) else ""
        if username != self.service_account:
            log.warning("companion API call by another identity refused", extra={"user": username})
            return None, Forbidden(f"user {username!r} may not use the companion API")
        extra = user.get("extra")
        extra = extra if isinstance(extra, Mapping) else {}
        pod_name, pod_uid = _first(extra, POD_NAME_CLAIM), _first(extra, POD_UID_CLAIM)
        if not pod_name or not pod_uid:
            return None, Forbidden("token is not bound to a pod: use a projected service-account token")
        return self._bind(username, pod_name, pod_uid, _first(extra, NODE_NAME_CLAIM))

    def _bind(self, username: str, pod_name: str, pod_uid: str,
              node_claim: str) -> tuple[Identity | None, AuthError | None]:
        from koordlet.companion.kube import KubeApiError

        namespace = self._namespace
        try:
            pod = self._api.read_pod(namespace, pod_name, self._timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                return None, Forbidden(f"the token's pod {namespace}/{pod_name} no longer exists")
            log.warning("cannot read the pod of a token", extra={"pod": f"{namespace}/{pod_name}",
                                                                  "error": str(exc)})
            return None, AuthUnavailable(f"cannot read the token's pod now ({exc.status or exc.reason}); retry")
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        spec = pod.get("spec") if isinstance(pod, Mapping) else None
        if not isinstance(meta, Mapping) or meta.get("uid") != pod_uid:
            return None, Forbidden(f"the token's pod {namespace}/{pod_name} no longer exists (uid differs)")
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        if not isinstance(node, str) or not node:
            return None, Forbidden(f"the token's pod {namespace}/{pod_name} is not bound to a node")
        if node_claim and node_claim != node:
            return None, Forbidden("the token's node-name claim disagrees with its pod's node")
        return Identity(f"{username} (pod {namespace}/{pod_name})", node), None


# ---------------------------------------------------------------------------------------------- exposure


def is_loopback(bind: str) -> bool:
    """Whether ``bind`` (``host:port``, ``[v6]:port`` or ``unix:/path``) is reachable only from this host."""
    if bind.startswith(("unix:", "unix-abstract:")):
        return True
    host = bind.rpartition(":")[0] if ":" in bind else bind
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost, or "" (every address)


def check_exposure(bind: str, authenticator: Authenticator, insecure: bool) -> None:
    """Raises ConfigError when ``bind`` is reachable from other hosts while calls are not bound to a node (a
    shared token or none), unless ``insecure``."""
    if authenticator.bound or insecure or is_loopback(bind):
        return
    what = "without authentication" if authenticator.mode == "none" else "with a shared token (no per-node identity)"
    raise ConfigError(f"companion API: refusing to listen on {bind} {what}: any pod could evict pods and report "
                      "metrics for any node; use --auth=tokenreview, a loopback address or a unix socket, or "
                      "--insecure to accept the risk")
