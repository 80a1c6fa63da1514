"""KubeletClient against the in-process HTTPS kubelet: parsing, credentials, TLS and every failure class."""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet.errors import ConfigError, KoordletError
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError, KubeletOptions
from koordlet.system.kubepaths import KubeQoS
from tests.fixtures.fakekubelet import FakeKubelet, Fault, TlsFiles, container, container_id, make_pod

LOGGER = "koordlet.statesinformer.kubelet"


class Observations:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __call__(self, outcome: str, seconds: float) -> None:
        self.calls.append((outcome, seconds))

    @property
    def outcomes(self) -> list[str]:
        return [outcome for outcome, _ in self.calls]


# ------------------------------------------------------------------------------------------- options


def test_defaults_match_koordinator() -> None:
    opts = KubeletOptions()
    assert (opts.address, opts.port, opts.scheme) == ("127.0.0.1", 10250, "https")
    assert opts.token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert opts.ca_file == "" and opts.insecure_skip_verify is False
    assert opts.sync_interval_seconds == 10.0 and opts.timeout_seconds == 5.0
    opts.validate()
    assert opts.url == "https://127.0.0.1:10250/pods/"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": 0}, "kubelet.port: must be 1..65535, got 0"),
        ({"port": 65536}, "kubelet.port: must be 1..65535, got 65536"),
        ({"port": True}, "kubelet.port: must be 1..65535, got True"),
        ({"address": ""}, "kubelet.address: must be a host name or IP address, got ''"),
        ({"address": "http://x"}, "kubelet.address: must be a host name or IP address, got 'http://x'"),
        ({"scheme": "ftp"}, "kubelet.scheme: must be one of https, http, got 'ftp'"),
        ({"timeout_seconds": 0}, "kubelet.timeout_seconds: must be a number of seconds > 0, got 0"),
        ({"timeout_seconds": float("nan")}, "kubelet.timeout_seconds: must be a number of seconds > 0, got nan"),
        ({"sync_interval_seconds": -1.0}, "kubelet.sync_interval_seconds: must be a number of seconds > 0, got -1.0"),
        ({"insecure_skip_verify": True, "ca_file": "/ca.pem"},
         "kubelet.ca_file: must be empty when insecure_skip_verify is set, got '/ca.pem'"),
    ],
)
def test_validate_names_the_field(changes: dict[str, object], message: str) -> None:
    opts = KubeletOptions(**changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        opts.validate()
    assert str(info.value) == message
    with pytest.raises(ConfigError):
        KubeletClient(opts)


def test_validate_uses_the_given_path() -> None:
    with pytest.raises(ConfigError, match=r"^statesInformer\.kubelet\.port: "):
        KubeletOptions(port=-1).validate("statesInformer.kubelet")


def test_url_brackets_ipv6() -> None:
    assert KubeletOptions(address="::1", port=10255, scheme="http").url == "http://[::1]:10255/pods/"
    assert KubeletOptions(address="[fd00::1]").url == "https://[fd00::1]:10250/pods/"


# ------------------------------------------------------------------------------------------- success


def test_get_pods_parses_kubelet_podlist(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods([
        make_pod("web", "shop", uid="uid-web", labels={"koordinator.sh/qosClass": "LS"}, priority=9500),
        make_pod("batch", "jobs", uid="uid-batch", qos_class="BestEffort",
                 containers=[container("worker", requests={"kubernetes.io/batch-cpu": "2000"})]),
    ])
    observed = Observations()
    pods = KubeletClient(fake_kubelet.options(), observe=observed).get_pods()

    assert [(p.namespace, p.name, p.uid) for p in pods] == [("shop", "web", "uid-web"), ("jobs", "batch", "uid-batch")]
    web, batch = pods
    assert web.kube_qos is KubeQoS.BURSTABLE and web.labels["koordinator.sh/qosClass"] == "LS"
    assert web.priority == 9500
    assert web.containers[0].container_id == container_id("uid-web", "main")
    assert web.containers[0].container_id.startswith("containerd://") and len(web.containers[0].container_id) == 77
    assert (web.containers[0].requests.cpu_milli, web.containers[0].limits.memory_bytes) == (500, 512 * 1024**2)
    assert batch.kube_qos is KubeQoS.BESTEFFORT and batch.containers[0].requests.batch_cpu_milli == 2000
    assert observed.outcomes == ["ok"] and observed.calls[0][1] >= 0


def test_sends_get_pods_with_bearer_token(fake_kubelet: FakeKubelet) -> None:
    KubeletClient(fake_kubelet.options()).get_pods()
    (request,) = fake_kubelet.requests
    assert (request.method, request.path) == ("GET", "/pods/")
    assert request.authorization == "Bearer token-1"
    assert request.headers["accept"] == "application/json"


def test_token_file_is_reread_on_every_request(fake_kubelet: FakeKubelet) -> None:
    client = KubeletClient(fake_kubelet.options())
    client.get_pods()
    fake_kubelet.rotate_token("token-2")
    client.get_pods()
    assert [r.authorization for r in fake_kubelet.requests] == ["Bearer token-1", "Bearer token-2"]


def test_stale_token_is_rejected_with_401(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_expected_token("token-new")  # the server rotated, the file did not
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options()).get_pods()
    assert info.value.outcome == "http_401"
    assert "HTTP 401 Unauthorized" in str(info.value)


def test_missing_token_file_sends_no_header_and_logs_once(
    fake_kubelet: FakeKubelet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_kubelet.set_expected_token(None)  # an anonymous-auth kubelet
    token_file = tmp_path / "later" / "token"
    client = KubeletClient(fake_kubelet.options(token_file=str(token_file)))
    client.get_pods()
    client.get_pods()
    assert [r.authorization for r in fake_kubelet.requests] == [None, None]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(token_file) in str(warnings[0].__dict__["token_file"])
    assert "No such file" in warnings[0].__dict__["reason"]

    token_file.parent.mkdir()
    token_file.write_text("late-token\n")
    client.get_pods()
    assert fake_kubelet.requests[-1].authorization == "Bearer late-token"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "kubelet token file readable again"
    ]


def test_empty_token_file_counts_as_missing(fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_kubelet.set_expected_token(None)
    fake_kubelet.write_token_file("")
    KubeletClient(fake_kubelet.options()).get_pods()
    assert fake_kubelet.requests[0].authorization is None
    assert [r.__dict__.get("reason") for r in caplog.records] == ["it is empty"]


def test_plain_http_never_sends_the_token(kubelet_tls: TlsFiles, tmp_path: Path) -> None:
    server = FakeKubelet(kubelet_tls, tmp_path / "token", token=None, use_tls=False)
    try:
        server.write_token_file("secret")
        server.set_pods([make_pod("web")])
        pods = KubeletClient(server.options()).get_pods()
        assert [p.name for p in pods] == ["web"]
        assert server.requests[0].authorization is None
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------- TLS


def test_verification_fails_against_the_system_trust_store(fake_kubelet: FakeKubelet) -> None:
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(ca_file="")).get_pods()
    assert info.value.outcome == "tls"
    assert "TLS verification failed" in str(info.value) and "issuer" in str(info.value)


def test_verification_fails_with_an_unrelated_ca(fake_kubelet: FakeKubelet) -> None:
    observed = Observations()
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(ca_file=str(fake_kubelet.tls.other_ca_cert)), observe=observed).get_pods()
    assert info.value.outcome == "tls"
    assert observed.outcomes == ["tls"]
    assert fake_kubelet.requests == []  # no request was sent over the untrusted connection


def test_insecure_mode_accepts_any_certificate(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods([make_pod("web")])
    pods = KubeletClient(fake_kubelet.options(ca_file="", insecure_skip_verify=True)).get_pods()
    assert [p.name for p in pods] == ["web"]


def test_hostname_is_checked(kubelet_tls: TlsFiles, tmp_path: Path) -> None:
    server = FakeKubelet(kubelet_tls, tmp_path / "token", misnamed=True)  # trusted CA, wrong name
    try:
        with pytest.raises(KubeletError) as info:
            KubeletClient(server.options()).get_pods()
        assert info.value.outcome == "tls"
        assert "IP address mismatch" in str(info.value)
        assert KubeletClient(server.options(ca_file="", insecure_skip_verify=True)).get_pods() == []
    finally:
        server.stop()


def test_missing_ca_file_is_a_clear_error(fake_kubelet: FakeKubelet, tmp_path: Path) -> None:
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(ca_file=str(tmp_path / "nope.pem"))).get_pods()
    assert info.value.outcome == "ca_file"
    assert "nope.pem" in str(info.value) and "No such file" in str(info.value)


def test_ca_file_is_reloaded_when_it_changes(fake_kubelet: FakeKubelet, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    shutil.copy(fake_kubelet.tls.other_ca_cert, ca)
    client = KubeletClient(fake_kubelet.options(ca_file=str(ca)))
    with pytest.raises(KubeletError, match="TLS verification failed"):
        client.get_pods()
    shutil.copy(fake_kubelet.tls.ca_cert, ca)
    assert client.get_pods() == []


# ------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("fault", "outcome", "fragment"),
    [
        (Fault.GARBAGE, "bad_json", "body is not JSON"),
        (Fault.HTML, "bad_json", "text/html"),
        (Fault.HTTP_500, "http_500", "HTTP 500 Internal Server Error: internal error: xxx"),
        (Fault.TRUNCATED, "truncated", "response truncated after"),
        (Fault.WRONG_CONTENT, "bad_podlist", "expected a PodList object"),
        (Fault.HANG_UP, "disconnected", "closed the connection without answering"),
    ],
)
def test_failure_classes(fake_kubelet: FakeKubelet, fault: Fault, outcome: str, fragment: str) -> None:
    fake_kubelet.set_pods([make_pod("web")])
    observed = Observations()
    client = KubeletClient(fake_kubelet.options(), observe=observed)
    fake_kubelet.fail_next(1, fault)
    with pytest.raises(KubeletError) as info:
        client.get_pods()
    error = info.value
    assert isinstance(error, KoordletError)
    assert error.outcome == outcome
    assert fragment in str(error)
    assert "\n" not in str(error) and str(error).startswith(f"GET https://127.0.0.1:{fake_kubelet.port}/pods/: ")
    # The fault was one-shot: the next request succeeds.
    assert [p.name for p in client.get_pods()] == ["web"]
    assert observed.outcomes == [outcome, "ok"]


def test_a_pod_that_does_not_parse_is_skipped_not_the_list(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    bad = make_pod("bad", "team-a", uid="uid-bad")
    bad["spec"]["containers"] = [{"image": "no-name"}]
    fake_kubelet.set_pods([make_pod("web"), bad, make_pod("api")])
    observed = Observations()
    client = KubeletClient(fake_kubelet.options(), observe=observed)
    for _ in range(3):
        assert [p.name for p in client.get_pods()] == ["web", "api"]
    assert client.skipped_pods == 1 and observed.outcomes == ["ok"] * 3
    skipped = [r for r in caplog.records if r.getMessage() == "kubelet pod skipped: it does not parse"]
    assert len(skipped) == 1  # once per streak, not per poll
    assert skipped[0].pod == "team-a/bad/uid-bad"  # type: ignore[attr-defined]
    assert "spec.containers[0] has no name" in skipped[0].error  # type: ignore[attr-defined]
    # Fixed by its owner: parsed again, the streak's end logged once.
    fake_kubelet.set_pods([make_pod("web"), make_pod("bad", "team-a", uid="uid-bad"), make_pod("api")])
    assert [p.name for p in client.get_pods()] == ["web", "bad", "api"]
    assert client.skipped_pods == 0
    assert [r.pod for r in caplog.records  # type: ignore[attr-defined]
            if r.getMessage() == "kubelet pod no longer skipped"] == ["team-a/bad/uid-bad"]


@pytest.mark.parametrize(
    ("item", "identity"),
    [
        ({"metadata": {"name": "no-uid"}}, "default/no-uid/?"),
        ({"metadata": {"namespace": "n", "name": "p", "uid": "u"}, "spec": []}, "n/p/u"),
        ({"metadata": {"namespace": "n", "name": "p", "uid": "u"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"memory": "1e999999"}}}]}}, "n/p/u"),
        ({"metadata": "garbage"}, "items[1]"),
        ({}, "items[1]"),
        ({"metadata": {"name": 7, "uid": ["x"]}}, "default/?/?"),
    ],
)
def test_garbage_pods_are_skipped(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture, item: object, identity: str
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_kubelet.set_pods([make_pod("web"), item])  # type: ignore[list-item]
    client = KubeletClient(fake_kubelet.options())
    assert [p.name for p in client.get_pods()] == ["web"]
    assert [r.pod for r in caplog.records if hasattr(r, "pod")] == [identity]  # type: ignore[attr-defined]


def test_http_error_body_quote_is_capped(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.fail_next(1, Fault.HTTP_500)  # 1016 bytes of body
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options()).get_pods()
    quoted = str(info.value).split("Internal Server Error: ", 1)[1]
    assert quoted.endswith("...") and len(quoted) == 200 + 3


@pytest.mark.parametrize("status", [403, 503])
def test_other_statuses_are_their_own_class(fake_kubelet: FakeKubelet, status: int) -> None:
    fake_kubelet.fail_next(1, Fault.STATUS, status=status)
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options()).get_pods()
    assert info.value.outcome == f"http_{status}"
    assert f"scripted {status}" in str(info.value)


def test_timeout(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.fail_next(1, Fault.DELAY, delay_seconds=30)
    observed = Observations()
    began = time.monotonic()
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(timeout_seconds=0.3), observe=observed).get_pods()
    elapsed = time.monotonic() - began
    assert info.value.outcome == "timeout"
    assert "no answer within 0.3s" in str(info.value)
    assert elapsed < 10  # far below the server's 30 s delay: the client gave up on its own
    assert observed.outcomes == ["timeout"] and observed.calls[0][1] >= 0.3


def test_connection_refused() -> None:
    # A bound socket that does not listen refuses connections for as long as it is held.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        observed = Observations()
        with pytest.raises(KubeletError) as info:
            # No token file: the default is the host's service account token (tests/fixtures/isolation.py).
            KubeletClient(KubeletOptions(port=port, timeout_seconds=1.0, token_file=""), observe=observed).get_pods()
    assert info.value.outcome == "refused"
    assert f"GET https://127.0.0.1:{port}/pods/: connection refused" in str(info.value)
    assert observed.outcomes == ["refused"]


def test_https_to_a_plain_http_port_is_a_tls_error(kubelet_tls: TlsFiles, tmp_path: Path) -> None:
    server = FakeKubelet(kubelet_tls, tmp_path / "token", use_tls=False)
    try:
        with pytest.raises(KubeletError) as info:
            KubeletClient(server.options(scheme="https", ca_file=server.ca_file)).get_pods()
        assert info.value.outcome == "tls"
    finally:
        server.stop()


def test_body_size_is_limited(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods([make_pod(f"p{i}") for i in range(5)])
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(), max_body_bytes=1024).get_pods()
    assert info.value.outcome == "too_large"
    assert "exceeds the 1024-byte limit" in str(info.value)


def test_body_without_length_is_read_to_the_end_and_limited(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods([make_pod(f"p{i}") for i in range(5)])
    fake_kubelet.fail_next(2, Fault.NO_LENGTH)
    assert len(KubeletClient(fake_kubelet.options()).get_pods()) == 5
    with pytest.raises(KubeletError) as info:
        KubeletClient(fake_kubelet.options(), max_body_bytes=1024).get_pods()
    assert info.value.outcome == "too_large"
    assert str(info.value).endswith("body exceeds the 1024-byte limit")
    assert fake_kubelet.pending_faults == 0


def test_abort_ends_a_request_in_flight(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.fail_next(1, Fault.DELAY, delay_seconds=30)
    client = KubeletClient(fake_kubelet.options(timeout_seconds=20))
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            client.get_pods()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    assert fake_kubelet.wait_for_requests(1)
    client.abort()
    thread.join(5)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], KubeletError) and errors[0].outcome == "aborted"
    # Only the request in flight was aborted.
    assert client.get_pods() == []


@pytest.fixture
def failing_observer_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    yield caplog


def test_failing_observer_never_fails_the_request(
    fake_kubelet: FakeKubelet, failing_observer_logs: pytest.LogCaptureFixture
) -> None:
    def observe(outcome: str, seconds: float) -> None:
        raise RuntimeError("metrics broken")

    fake_kubelet.set_pods([make_pod("web")])
    client = KubeletClient(fake_kubelet.options(), observe=observe)
    assert len(client.get_pods()) == 1
    assert len(client.get_pods()) == 1
    errors = [r for r in failing_observer_logs.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
