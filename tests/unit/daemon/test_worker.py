"""The worker thread components share (koordlet.component.Worker): loop, stop, failure, restart."""

from __future__ import annotations

import threading

import pytest

from koordlet.component import Worker, alive

WAIT = 10.0  # seconds; every wait below is on an event, this is only the give-up deadline


def test_loop_runs_the_step_until_stopped() -> None:
    worker = Worker("test-loop")
    calls: list[int] = []
    twice = threading.Event()

    def step() -> float:
        calls.append(1)
        if len(calls) >= 2:
            twice.set()
        return 0.0

    failures: list[BaseException] = []  # the callback runs in the worker thread, where pytest.fail fails nothing
    assert not worker.running
    worker.loop(step, failures.append)
    assert twice.wait(WAIT)
    assert worker.running
    assert worker.stop(WAIT)
    assert not worker.running
    assert failures == []


def test_first_wait_delays_the_first_step_and_a_stop_during_it_skips_it() -> None:
    worker = Worker("test-first-wait")
    calls: list[int] = []

    def step() -> float:
        calls.append(1)
        return 1.0

    failures: list[BaseException] = []
    worker.loop(step, failures.append, first_wait=WAIT)
    assert worker.stop(WAIT)
    assert calls == [] and failures == []


def test_an_exception_out_of_the_step_ends_the_loop_and_is_reported() -> None:
    worker = Worker("test-failure")
    reported: list[BaseException] = []
    done = threading.Event()

    def on_failure(exc: BaseException) -> None:
        reported.append(exc)
        done.set()

    def step() -> float:
        raise RuntimeError("broken loop")

    worker.loop(step, on_failure)
    assert done.wait(WAIT)
    assert worker.stop(WAIT)
    assert [str(e) for e in reported] == ["broken loop"]


def test_stop_reports_a_thread_still_running_and_start_refuses_a_second_one() -> None:
    worker = Worker("test-stuck")
    release = threading.Event()

    def stuck() -> None:
        release.wait(WAIT)

    worker.start(stuck)
    assert worker.stop(0.01) is False, "the thread ignores stopping until released"
    with pytest.raises(RuntimeError, match="test-stuck already started"):
        worker.start(lambda: None)
    release.set()
    assert worker.stop(WAIT)


def test_a_stopped_worker_starts_again() -> None:
    worker = Worker("test-restart")
    rounds: list[int] = []
    ran = threading.Event()

    def run() -> None:
        rounds.append(1)
        ran.set()
        worker.stopping.wait(WAIT)

    for _ in range(2):
        ran.clear()
        worker.start(run)
        assert ran.wait(WAIT)
        assert not worker.stopping.is_set(), "start clears an earlier stop"
        assert worker.stop(WAIT)
    assert rounds == [1, 1]


def test_alive() -> None:
    assert not alive(None)
    thread = threading.Thread(target=lambda: None)
    assert not alive(thread)
    thread.start()
    thread.join(WAIT)
    assert not alive(thread)
