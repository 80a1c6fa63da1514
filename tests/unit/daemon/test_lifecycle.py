"""Daemon lifecycle: ordered start, reverse stop, failure handling, bounded shutdown, signal handlers."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import pytest

from koordlet.daemon.lifecycle import ComponentFailed, Daemon

WAIT = 10.0  # seconds; every wait below is on an event, this is only the give-up deadline


class Recorder:
    """A component that records calls into a shared journal and can be told to fail."""

    def __init__(
        self,
        name: str,
        journal: list[str],
        *,
        fail_start: bool = False,
        fail_stop: bool = False,
        on_start: Callable[[], None] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.journal = journal
        self.fail_start = fail_start
        self.fail_stop = fail_stop
        self.on_start = on_start
        self.on_stop = on_stop
        self.on_failure: Callable[[BaseException], None] | None = None
        self.started = threading.Event()
        self.stop_timeouts: list[float] = []

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self.journal.append(f"start {self.name}")
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")
        self.on_failure = on_failure
        if self.on_start is not None:
            self.on_start()
        self.started.set()

    def stop(self, timeout_seconds: float) -> None:
        self.journal.append(f"stop {self.name}")
        self.stop_timeouts.append(timeout_seconds)
        if self.on_stop is not None:
            self.on_stop()
        if self.fail_stop:
            raise RuntimeError(f"{self.name} cannot stop")


def run_in_thread(daemon: Daemon, stop: threading.Event) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            daemon.run(stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, errors


def stop_and_join(daemon: Daemon, stop: threading.Event, thread: threading.Thread) -> None:
    daemon.request_stop("test done", stop)
    thread.join(WAIT)
    assert not thread.is_alive()


def test_starts_in_order_and_stops_in_reverse() -> None:
    journal: list[str] = []
    components = [Recorder(n, journal) for n in ("executor", "metriccache", "qosmanager")]
    stop = threading.Event()
    daemon = Daemon(components)
    thread, errors = run_in_thread(daemon, stop)
    assert components[-1].started.wait(WAIT)
    assert journal == ["start executor", "start metriccache", "start qosmanager"]
    stop_and_join(daemon, stop, thread)
    assert errors == []
    assert journal[3:] == ["stop qosmanager", "stop metriccache", "stop executor"]
    assert daemon.stop_reason == "test done"


def test_failed_start_stops_what_started_and_raises() -> None:
    journal: list[str] = []
    components = [Recorder("a", journal), Recorder("b", journal, fail_start=True), Recorder("c", journal)]
    daemon = Daemon(components)
    with pytest.raises(ComponentFailed, match="component b failed: b cannot start") as caught:
        daemon.run(threading.Event())
    assert isinstance(caught.value.__cause__, OSError)
    assert journal == ["start a", "start b", "stop a"]
    assert daemon.stop_reason == "component b failed to start"


def test_component_dying_stops_everything() -> None:
    journal: list[str] = []
    a, b = Recorder("a", journal), Recorder("b", journal)
    stop = threading.Event()
    daemon = Daemon([a, b])
    thread, errors = run_in_thread(daemon, stop)
    assert b.started.wait(WAIT)
    assert b.on_failure is not None
    # The component reports its root task's death from its own thread.
    threading.Thread(target=b.on_failure, args=(ValueError("collector loop crashed"),)).start()
    thread.join(WAIT)
    assert not thread.is_alive()
    (error,) = errors
    assert isinstance(error, ComponentFailed)
    assert "component b failed: collector loop crashed" in str(error)
    assert journal[2:] == ["stop b", "stop a"]
    assert daemon.stop_reason == "component b failed"


def test_nothing_starts_when_stop_was_already_requested() -> None:
    journal: list[str] = []
    stop = threading.Event()
    stop.set()
    Daemon([Recorder("a", journal)]).run(stop)
    assert journal == []


def test_stop_failures_do_not_keep_others_running() -> None:
    journal: list[str] = []
    components = [Recorder("a", journal), Recorder("b", journal, fail_stop=True)]
    stop = threading.Event()
    daemon = Daemon(components)
    thread, errors = run_in_thread(daemon, stop)
    assert components[-1].started.wait(WAIT)
    stop_and_join(daemon, stop, thread)
    assert errors == []
    assert journal == ["start a", "start b", "stop b", "stop a"]


def test_shutdown_budget_is_shared_and_bounded() -> None:
    now = [100.0]
    journal: list[str] = []

    def slow() -> None:
        now[0] += 7.0  # this component takes 7 s of the budget

    components = [Recorder("a", journal), Recorder("b", journal, on_stop=slow), Recorder("c", journal, on_stop=slow)]
    stop = threading.Event()
    daemon = Daemon(components, shutdown_timeout_seconds=10.0, clock=lambda: now[0])
    thread, errors = run_in_thread(daemon, stop)
    assert components[-1].started.wait(WAIT)
    stop_and_join(daemon, stop, thread)
    assert errors == []
    # c gets the whole budget, b what c left, a nothing (it is still asked to stop, without waiting).
    assert [c.stop_timeouts for c in components] == [[0.0], [3.0], [10.0]]


def test_duplicate_names_and_negative_budget_are_rejected() -> None:
    journal: list[str] = []
    with pytest.raises(ValueError, match="duplicate component names: a"):
        Daemon([Recorder("a", journal), Recorder("a", journal)])
    with pytest.raises(ValueError, match="shutdown_timeout_seconds"):
        Daemon([], shutdown_timeout_seconds=-1)


def test_first_stop_reason_wins() -> None:
    stop = threading.Event()
    daemon = Daemon([])
    daemon.request_stop("signal SIGTERM", stop)
    daemon.request_stop("signal SIGINT", stop)
    assert stop.is_set()
    assert daemon.stop_reason == "signal SIGTERM"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_the_daemon_in_the_main_thread_and_handlers_are_restored(sig: signal.Signals) -> None:
    assert threading.current_thread() is threading.main_thread()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    during: dict[signal.Signals, object] = {}

    def raise_signal() -> None:
        during.update({s: signal.getsignal(s) for s in before})
        signal.raise_signal(sig)

    journal: list[str] = []
    daemon = Daemon([Recorder("a", journal, on_start=raise_signal)])
    daemon.run(threading.Event())
    assert daemon.stop_reason == f"signal {sig.name}"
    assert journal == ["start a", "stop a"]
    assert all(during[s] is not before[s] for s in before)
    assert {s: signal.getsignal(s) for s in before} == before


def test_no_signal_handlers_outside_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    during: list[object] = []
    journal: list[str] = []
    component = Recorder("a", journal, on_start=lambda: during.append(signal.getsignal(signal.SIGTERM)))
    stop = threading.Event()
    daemon = Daemon([component])
    thread, errors = run_in_thread(daemon, stop)
    assert component.started.wait(WAIT)
    stop_and_join(daemon, stop, thread)
    assert errors == []
    assert during == [before]
