"""KubeletPodSource: last good list, change detection, one log line per failure streak, rate-limited triggers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.pod import Pod, pods_from_podlist
from koordlet.errors import NativeError
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError
from koordlet.statesinformer.pleg import Pleg
from koordlet.statesinformer.podsource import KubeletPodSource
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.fakekubelet import FakeKubelet, Fault, make_pod, pod_list

LOGGER = "koordlet.statesinformer.podsource"
LONG = 3600.0  # an interval that never elapses during a test: syncs happen only when triggered


class Delivered:
    """``on_pods``: records each list and lets the test wait for the n-th."""

    def __init__(self, fail: bool = False) -> None:
        self.lists: list[list[Pod]] = []
        self._fail = fail
        self._cond = threading.Condition()

    def __call__(self, pods: list[Pod]) -> None:
        with self._cond:
            self.lists.append(pods)
            self._cond.notify_all()
        if self._fail:
            raise RuntimeError("consumer bug")

    def wait(self, count: int, timeout_seconds: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.lists) >= count, timeout_seconds)

    def names(self, index: int = -1) -> list[str]:
        return [p.name for p in self.lists[index]]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ListClient:
    """A PodLister returning a fixed list (scheduling tests need no HTTP)."""

    def __init__(self, pods: Sequence[dict[str, Any]] = ()) -> None:
        self.pods = pods_from_podlist(pod_list(pods))
        self.calls = 0
        self.error: Exception | None = None

    def get_pods(self) -> list[Pod]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return list(self.pods)

    def abort(self) -> None:
        pass


@pytest.fixture
def sources(failures: ComponentFailures) -> Iterator[Callable[..., KubeletPodSource]]:
    # Requests ``failures`` so that it outlives the sources: a failure while one stops still fails the test.
    made: list[KubeletPodSource] = []

    def make(*args: Any, **kwargs: Any) -> KubeletPodSource:
        source = KubeletPodSource(*args, **kwargs)
        made.append(source)
        return source

    yield make
    for source in made:
        source.stop(5)


def sync(source: KubeletPodSource, attempts: int) -> None:
    """Triggers one more sync and waits for it (min_trigger_interval 0 in these tests)."""
    source.trigger()
    assert source.wait_for_attempts(attempts, 5), f"sync {attempts} did not happen"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


# ------------------------------------------------------------------------------------------- delivery


def test_first_sync_delivers_sorted_pods(fake_kubelet: FakeKubelet, sources: Callable[..., KubeletPodSource],
                                         failures: ComponentFailures) -> None:
    fake_kubelet.set_pods([make_pod("web", "shop"), make_pod("api", "shop"), make_pod("job", "batch")])
    delivered = Delivered()
    source = sources(KubeletClient(fake_kubelet.options()), LONG, delivered, min_trigger_interval_seconds=0)
    assert source.pods() == []
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_synced(5)
    assert delivered.wait(1)
    assert delivered.names() == ["job", "api", "web"]
    assert [p.name for p in source.pods()] == ["job", "api", "web"]
    assert (source.sync_ok, source.sync_errors, source.last_error, source.failure_streak) == (1, 0, None, 0)
    assert source.last_success_at is not None


def test_an_empty_first_list_is_delivered(sources: Callable[..., KubeletPodSource],
                                          failures: ComponentFailures) -> None:
    delivered = Delivered()
    sources(ListClient(), LONG, delivered).start(failures.callback("kubelet-pods"))
    assert delivered.wait(1)
    assert delivered.lists == [[]]


def test_only_changes_are_delivered(fake_kubelet: FakeKubelet, sources: Callable[..., KubeletPodSource],
                                    failures: ComponentFailures) -> None:
    web, api = make_pod("web"), make_pod("api")
    fake_kubelet.set_pods([web, api])
    delivered = Delivered()
    source = sources(KubeletClient(fake_kubelet.options()), LONG, delivered, min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(1, 5)

    # Same pods in another order, with status churn koordlet does not parse: not a change.
    churned = make_pod("web", resource_version="99")
    churned["status"]["conditions"][0]["lastProbeTime"] = "2026-01-02T03:05:00Z"
    fake_kubelet.set_pods([api, churned])
    sync(source, 2)
    assert len(delivered.lists) == 1

    # A label koordlet reads changed: delivered.
    fake_kubelet.set_pods([api, make_pod("web", labels={"koordinator.sh/qosClass": "BE"})])
    sync(source, 3)
    assert delivered.wait(2)
    assert source.pods()[1].labels == {"koordinator.sh/qosClass": "BE"}

    # A pod gone: delivered.
    fake_kubelet.set_pods([api])
    sync(source, 4)
    assert delivered.wait(3)
    assert delivered.names() == ["api"]
    assert source.sync_ok == 4


def test_consumer_error_is_logged_and_the_source_goes_on(
    sources: Callable[..., KubeletPodSource], caplog: pytest.LogCaptureFixture, failures: ComponentFailures
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = ListClient([make_pod("web")])
    delivered = Delivered(fail=True)
    source = sources(client, LONG, delivered, min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert delivered.wait(1)
    client.pods = pods_from_podlist(pod_list([make_pod("api")]))
    sync(source, 2)  # returns once the attempt, its delivery included, is over
    assert len(delivered.lists) == 2
    assert [r.getMessage() for r in records(caplog, logging.ERROR)] == ["pod list consumer failed"] * 2
    assert source.sync_ok == 2 and source.sync_errors == 0


# ------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (Fault.GARBAGE, "bad_json"),
        (Fault.HTTP_500, "http_500"),
        (Fault.DELAY, "timeout"),
        (Fault.TRUNCATED, "truncated"),
        (Fault.WRONG_CONTENT, "bad_podlist"),
        (Fault.HTML, "bad_json"),
    ],
)
def test_failures_keep_the_last_good_list(
    fake_kubelet: FakeKubelet,
    sources: Callable[..., KubeletPodSource],
    caplog: pytest.LogCaptureFixture,
    fault: Fault,
    outcome: str, failures: ComponentFailures
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_kubelet.set_pods([make_pod("web"), make_pod("api")])
    observed: list[str] = []
    client = KubeletClient(fake_kubelet.options(timeout_seconds=0.3), observe=lambda o, _s: observed.append(o))
    delivered = Delivered()
    source = sources(client, LONG, delivered, min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert delivered.wait(1)
    good = source.pods()

    fake_kubelet.fail_next(3, fault, delay_seconds=30)
    for attempt in (2, 3, 4):
        sync(source, attempt)
        assert source.pods() == good
    assert (source.sync_ok, source.sync_errors, source.failure_streak) == (1, 3, 3)
    assert source.last_error is not None and source.last_error.startswith("GET https://127.0.0.1:")
    assert observed == ["ok", outcome, outcome, outcome]

    (warning,) = records(caplog, logging.WARNING)  # one line for the whole streak
    assert warning.getMessage() == "kubelet pod sync failing, keeping the last good pod list"
    assert warning.__dict__["outcome"] == outcome and warning.__dict__["pods_kept"] == 2
    assert warning.__dict__["reason"] == source.last_error

    sync(source, 5)  # kubelet answers again
    recovered = [r for r in records(caplog, logging.INFO) if r.getMessage() == "kubelet pod sync recovered"]
    assert len(recovered) == 1 and recovered[0].__dict__["failed_attempts"] == 3
    assert (source.sync_ok, source.sync_errors, source.failure_streak) == (2, 3, 0)
    assert source.last_error is not None  # kept for koordctl after recovery
    assert len(delivered.lists) == 1  # the recovered list is the same: nothing to deliver
    assert len(records(caplog, logging.WARNING)) == 1


def test_each_streak_logs_once(fake_kubelet: FakeKubelet, sources: Callable[..., KubeletPodSource],
                               caplog: pytest.LogCaptureFixture, failures: ComponentFailures) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    source = sources(KubeletClient(fake_kubelet.options()), LONG, Delivered(), min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(1, 5)
    fake_kubelet.fail_next(2, Fault.HTTP_500)
    sync(source, 2)
    sync(source, 3)
    sync(source, 4)
    fake_kubelet.fail_next(1, Fault.GARBAGE)
    sync(source, 5)
    sync(source, 6)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages == [
        "kubelet pod list received",
        "kubelet pod sync failing, keeping the last good pod list",
        "kubelet pod sync recovered",
        "kubelet pod sync failing, keeping the last good pod list",
        "kubelet pod sync recovered",
    ]


def test_failure_before_any_success(sources: Callable[..., KubeletPodSource],
                                    caplog: pytest.LogCaptureFixture, failures: ComponentFailures) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = ListClient([make_pod("web")])
    client.error = KubeletError("refused", "GET https://127.0.0.1:10250/pods/: connection refused")
    delivered = Delivered()
    source = sources(client, LONG, delivered, min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(1, 5)
    assert not source.wait_synced(0)
    assert source.pods() == [] and delivered.lists == []
    assert source.last_error == "GET https://127.0.0.1:10250/pods/: connection refused"
    (warning,) = records(caplog, logging.WARNING)
    assert warning.__dict__["pods_kept"] == 0 and warning.exc_info is None

    client.error = None
    sync(source, 2)
    assert delivered.wait(1)
    assert delivered.names() == ["web"]


def test_unexpected_client_error_is_a_failure_with_traceback(
    sources: Callable[..., KubeletPodSource], caplog: pytest.LogCaptureFixture, failures: ComponentFailures
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = ListClient()
    client.error = ZeroDivisionError("bug")
    source = sources(client, LONG, Delivered(), min_trigger_interval_seconds=0)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(1, 5)
    sync(source, 2)
    assert source.sync_errors == 2 and source.last_error == "ZeroDivisionError: bug"
    (warning,) = records(caplog, logging.WARNING)
    assert warning.__dict__["outcome"] == "internal" and warning.exc_info is not None


# ------------------------------------------------------------------------------------------- schedule


def test_periodic_sync(sources: Callable[..., KubeletPodSource], failures: ComponentFailures) -> None:
    client = ListClient()
    source = sources(client, 0.02, Delivered())
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(3, 5)


def test_triggers_are_rate_limited_and_merged(sources: Callable[..., KubeletPodSource],
                                              failures: ComponentFailures) -> None:
    clock = FakeClock()
    client = ListClient()
    source = sources(client, 10.0, Delivered(), clock, min_trigger_interval_seconds=0.2)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_for_attempts(1, 5)

    # The clock stands still: triggers right after a sync wait until the clock reaches +0.2 s.
    for _ in range(10):
        source.trigger()
    assert not source.wait_for_attempts(2, 0.3)
    clock.now += 0.1
    source.trigger()
    assert not source.wait_for_attempts(2, 0.3)
    clock.now += 0.1
    source.trigger()
    assert source.wait_for_attempts(2, 5)
    # All those triggers were merged into that one sync.
    assert not source.wait_for_attempts(3, 0.3)
    assert client.calls == 2


def test_sync_once_runs_without_the_thread() -> None:
    client = ListClient([make_pod("web")])
    delivered = Delivered()
    source = KubeletPodSource(client, LONG, delivered)
    assert source.sync_once() is True
    assert delivered.names() == ["web"]
    client.error = KubeletError("timeout", "GET x: no answer within 5s")
    assert source.sync_once() is False
    assert [p.name for p in source.pods()] == ["web"]
    assert (source.sync_ok, source.sync_errors) == (1, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"interval_seconds": 0}, "interval_seconds"), ({"min_trigger_interval_seconds": -1}, "min_trigger")],
)
def test_rejects_bad_intervals(kwargs: dict[str, float], message: str) -> None:
    args: dict[str, Any] = {"client": ListClient(), "interval_seconds": 1.0, "on_pods": Delivered()}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        KubeletPodSource(**args)


# ------------------------------------------------------------------------------------------- PLEG, stop


def test_pod_directory_event_triggers_a_sync(
    fake_kubelet: FakeKubelet, sources: Callable[..., KubeletPodSource], tmp_path: Path, failures: ComponentFailures
) -> None:
    besteffort = tmp_path / "kubepods" / "besteffort"
    besteffort.mkdir(parents=True)
    fake_kubelet.set_pods([make_pod("web")])
    delivered = Delivered()
    source = sources(KubeletClient(fake_kubelet.options()), LONG, delivered, pleg_paths=[besteffort])
    source.start(failures.callback("kubelet-pods"))
    assert delivered.wait(1)
    assert source.pleg is not None and source.pleg.watched == (str(besteffort),)

    new = make_pod("job", uid="0f3e2c1a-0000-4000-8000-000000000001", qos_class="BestEffort")
    fake_kubelet.set_pods([make_pod("web"), new])
    (besteffort / f"pod{new['metadata']['uid']}").mkdir()
    assert delivered.wait(2)
    assert delivered.names() == ["job", "web"]


def test_pleg_failure_falls_back_to_periodic_sync(
    sources: Callable[..., KubeletPodSource], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    failures: ComponentFailures,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    def broken_pleg(paths: Sequence[str | Path], on_event: Callable[[], None]) -> Pleg:
        def no_inotify() -> Any:
            raise NativeError(24, "inotify_init1: Too many open files")

        return Pleg(paths, on_event, inotify_factory=no_inotify)

    source = sources(ListClient(), LONG, Delivered(), pleg_paths=[tmp_path], pleg_factory=broken_pleg)
    source.start(failures.callback("kubelet-pods"))
    assert source.wait_synced(5)
    assert source.pleg is None
    (warning,) = records(caplog, logging.WARNING)
    assert warning.getMessage() == "pod lifecycle events unavailable, relying on the periodic sync"
    assert "Too many open files" in warning.__dict__["reason"]


def test_stop_aborts_a_request_in_flight(
    fake_kubelet: FakeKubelet, tmp_path: Path, caplog: pytest.LogCaptureFixture, failures: ComponentFailures
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_kubelet.fail_next(1, Fault.DELAY, delay_seconds=60)
    delivered = Delivered()
    source = KubeletPodSource(KubeletClient(fake_kubelet.options(timeout_seconds=30)), LONG, delivered,
                              pleg_paths=[tmp_path])
    source.start(failures.callback("kubelet-pods"))
    assert fake_kubelet.wait_for_requests(1)
    began = time.monotonic()
    source.stop(10)
    assert time.monotonic() - began < 5  # not the 30 s client timeout nor the 60 s delay
    assert source.pleg is not None and source.pleg.watched == (str(tmp_path),)
    # The shutdown's own abort is neither a failure nor a log line, and nothing is delivered after stop.
    assert (source.sync_ok, source.sync_errors) == (0, 0)
    assert records(caplog, logging.WARNING) == [] and delivered.lists == []
    source.stop(1)  # idempotent


def test_stop_before_start() -> None:
    KubeletPodSource(ListClient(), LONG, Delivered()).stop(1)
