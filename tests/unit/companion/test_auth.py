"""The companion's authenticators: TokenReview through the real ``kubernetes`` client against the fake
kube-apiserver (which speaks the TokenReview protocol), the review cache, and the exposure rules."""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import pytest

from koordlet.companion.auth import (
    DEFAULT_SERVICE_ACCOUNT,
    AuthUnavailable,
    Forbidden,
    KubeReviewAPI,
    StaticTokenAuthenticator,
    TokenReviewAuthenticator,
    Unauthenticated,
    is_loopback,
    parse_service_account,
    token_expiry,
)
from koordlet.companion.kube import KubeApiError, make_api_client
from koordlet.errors import ConfigError
from tests.fixtures.fakeapiserver import API_AUDIENCE, FakeApiServer, Fault, make_node, make_pod

NS = "koordinator-system"
AUDIENCE = "koord-companion"


@pytest.fixture
def cluster(fake_apiserver: FakeApiServer) -> FakeApiServer:
    fake_apiserver.seed(make_node("node-1"))
    fake_apiserver.seed(make_pod("koordlet-a", NS, "node-1", service_account="koordlet"))
    return fake_apiserver


def reviewer(cluster: FakeApiServer, **kwargs: Any) -> TokenReviewAuthenticator:
    api = make_api_client(cluster.host, cluster.token_file, cluster.ca_file)
    return TokenReviewAuthenticator(KubeReviewAPI(api), **kwargs)


def reviews(cluster: FakeApiServer) -> int:
    return sum(1 for r in cluster.requests if r.path == "/apis/authentication.k8s.io/v1/tokenreviews")


def test_a_koordlet_token_is_bound_to_the_node_of_its_pod(cluster: FakeApiServer) -> None:
    authenticator = reviewer(cluster)
    identity = authenticator.authenticate(cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE]))
    assert identity.node == "node-1"
    assert DEFAULT_SERVICE_ACCOUNT in identity.name and "koordlet-a" in identity.name
    review = next(r for r in cluster.requests if r.path.endswith("/tokenreviews"))
    assert review.body["spec"]["audiences"] == [AUDIENCE]
    assert review.authorization == f"Bearer {cluster.token}"  # the companion's own credential


def test_reviews_are_cached_and_refusals_briefly_too(cluster: FakeApiServer) -> None:
    now = [1000.0]
    authenticator = reviewer(cluster, ttl_seconds=60, negative_ttl_seconds=5, clock=lambda: now[0])
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE])
    assert authenticator.cached(token) is None
    authenticator.authenticate(token)
    assert authenticator.cached(token) is not None
    authenticator.authenticate(token)
    assert reviews(cluster) == 1
    now[0] += 61
    assert authenticator.cached(token) is None
    authenticator.authenticate(token)
    assert reviews(cluster) == 2
    with pytest.raises(Unauthenticated):
        authenticator.authenticate("bogus")
    with pytest.raises(Unauthenticated):
        authenticator.cached("bogus")  # the refusal is remembered ...
    assert reviews(cluster) == 3
    now[0] += 6
    assert authenticator.cached("bogus") is None  # ... for a while


def test_a_cached_review_never_outlives_the_token(cluster: FakeApiServer) -> None:
    authenticator = reviewer(cluster, ttl_seconds=3600)
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE], expires_in_seconds=2)
    assert token_expiry(token) == pytest.approx(time.time() + 2, abs=2)
    authenticator.authenticate(token)
    entry = next(iter(authenticator._cache.values()))
    assert entry.until <= time.time() + 2


def test_concurrent_calls_with_one_token_make_one_review(cluster: FakeApiServer) -> None:
    authenticator = reviewer(cluster)
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE])
    cluster.fail_next(1, Fault.DELAY, delay_seconds=0.3)  # the first review is slow: the others queue behind it
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(authenticator.authenticate(token))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert [r.node for r in results] == ["node-1"] * 8
    assert reviews(cluster) == 1


def test_an_apiserver_that_cannot_answer_is_unavailable_and_not_cached(cluster: FakeApiServer) -> None:
    authenticator = reviewer(cluster)
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE])
    cluster.fail_next(1, Fault.HTTP_500)
    with pytest.raises(AuthUnavailable):
        authenticator.authenticate(token)
    cluster.fail_next(1, Fault.STATUS, status=403)  # no RBAC for tokenreviews
    with pytest.raises(AuthUnavailable):
        authenticator.authenticate(token)
    assert authenticator.authenticate(token).node == "node-1"


def test_a_node_name_claim_must_agree_with_the_pod(cluster: FakeApiServer) -> None:
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE])
    cluster.modify("pods", "koordlet-a", lambda pod: pod["spec"].update(nodeName="node-9"), namespace=NS)
    with pytest.raises(Forbidden, match="node-name claim"):
        reviewer(cluster).authenticate(token)
    # Without the claim (kube-apiserver before 1.30) the pod decides.
    older = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE], node_claim=False)
    assert reviewer(cluster).authenticate(older).node == "node-9"


class StubReviews:
    """A reviewer answering what a test scripts: for answers the fake apiserver never gives."""

    def __init__(self, status: dict[str, Any], pod: dict[str, Any] | None = None) -> None:
        self.status = status
        self.pod = pod

    def create_token_review(self, body: Any, timeout_seconds: float) -> Any:
        return {"kind": "TokenReview", "status": self.status}

    def read_pod(self, namespace: str, name: str, timeout_seconds: float) -> Any:
        if self.pod is None:
            raise KubeApiError(404, "NotFound", f'pods "{name}" not found')
        return self.pod


def bound_status(**changes: Any) -> dict[str, Any]:
    status = {"authenticated": True, "audiences": [AUDIENCE],
              "user": {"username": DEFAULT_SERVICE_ACCOUNT,
                       "extra": {"authentication.kubernetes.io/pod-name": ["koordlet-a"],
                                 "authentication.kubernetes.io/pod-uid": ["uid-a"]}}}
    status.update(changes)
    return status


def test_answers_that_bind_no_node_are_refused() -> None:
    pod = make_pod("koordlet-a", NS, "node-1", uid="uid-a")
    assert TokenReviewAuthenticator(StubReviews(bound_status(), pod)).authenticate("t").node == "node-1"
    cases: list[tuple[dict[str, Any], dict[str, Any] | None, type[Exception], str]] = [
        (bound_status(audiences=[]), pod, Unauthenticated, "audience"),  # a reviewer that ignores audiences
        (bound_status(audiences=None), pod, Unauthenticated, "audience"),
        (bound_status(), make_pod("koordlet-a", NS, "node-1", uid="uid-b"), Forbidden, "uid differs"),
        (bound_status(), None, Forbidden, "no longer exists"),
        (bound_status(), make_pod("koordlet-a", NS, "", uid="uid-a"), Forbidden, "not bound to a node"),
        (bound_status(user={"username": DEFAULT_SERVICE_ACCOUNT, "extra": {}}), pod, Forbidden, "not bound to a pod"),
        (bound_status(user={"username": "system:node:node-1"}), pod, Forbidden, "may not use"),
        ({"authenticated": False, "error": "token expired"}, pod, Unauthenticated, "token expired"),
    ]
    for status, stored, error, text in cases:
        with pytest.raises(error, match=text):
            TokenReviewAuthenticator(StubReviews(status, stored)).authenticate("t")
    with pytest.raises(Unauthenticated, match="too long"):
        TokenReviewAuthenticator(StubReviews(bound_status(), pod)).authenticate("x" * 20_000)


def test_the_fake_apiserver_speaks_tokenreview(cluster: FakeApiServer) -> None:
    api = KubeReviewAPI(make_api_client(cluster.host, cluster.token_file, cluster.ca_file))
    token = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE, "other"])
    answer = api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": token, "audiences": [AUDIENCE, "third"]}}, 5)
    assert answer["status"]["audiences"] == [AUDIENCE]
    assert answer["status"]["user"]["extra"]["authentication.kubernetes.io/node-name"] == ["node-1"]
    # No audiences asked: the API server's own, which this token is not for.
    answer = api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": token}}, 5)
    assert "authenticated" not in answer["status"] and "audiences" in answer["status"]["error"]
    plain = cluster.mint_token(NS, "koordlet-a")
    answer = api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": plain}}, 5)
    assert answer["status"]["authenticated"] is True and answer["status"]["audiences"] == [API_AUDIENCE]
    expired = cluster.mint_token(NS, "koordlet-a", audiences=[AUDIENCE], expires_in_seconds=-1)
    answer = api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": expired, "audiences": [AUDIENCE]}}, 5)
    assert "expired" in answer["status"]["error"]
    with pytest.raises(KeyError):
        cluster.mint_token(NS, "no-such-pod")


def test_the_static_token_is_compared_whole() -> None:
    authenticator = StaticTokenAuthenticator("s3cret")
    assert authenticator.authenticate("s3cret").node is None
    for wrong in (None, "", "s3cre", "s3cret2"):
        with pytest.raises(Unauthenticated):
            authenticator.authenticate(wrong)
    with pytest.raises(ConfigError):
        StaticTokenAuthenticator("")


@pytest.mark.parametrize(("bind", "loopback"), [
    ("127.0.0.1:9320", True), ("127.8.9.1:1", True), ("[::1]:9320", True), ("localhost:9320", True),
    ("unix:/run/koordlet/companion.sock", True), ("0.0.0.0:9320", False), ("[::]:9320", False),
    (":9320", False), ("10.0.0.1:9320", False), ("koord-companion:9320", False),
])
def test_loopback_addresses(bind: str, loopback: bool) -> None:
    assert is_loopback(bind) is loopback


def test_the_service_account_is_named_in_full() -> None:
    assert parse_service_account("system:serviceaccount:kube-system:koordlet") == ("kube-system", "koordlet")
    for bad in ("koordlet", "system:serviceaccount:ns", "system:serviceaccount::x", "system:serviceaccount:a:b:c"):
        with pytest.raises(ConfigError):
            parse_service_account(bad)
    assert token_expiry("not-a-jwt") is None and token_expiry("a.!!!.c") is None


def test_an_expiry_no_finite_float_holds_is_no_expiry() -> None:
    # Found by the decoder fuzzing: an exp of 400 digits made float() raise OverflowError.
    for exp in ("1" + "0" * 400, "1e999", "NaN", "Infinity", "-Infinity"):
        payload = base64.urlsafe_b64encode(f'{{"exp": {exp}}}'.encode()).decode().rstrip("=")
        assert token_expiry(f"e30.{payload}.c2ln") is None, exp
    payload = base64.urlsafe_b64encode(b'{"exp": 1700000000}').decode().rstrip("=")
    assert token_expiry(f"e30.{payload}.c2ln") == 1700000000.0
