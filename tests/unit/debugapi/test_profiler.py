"""The daemon's CPU profile (``/v1/profile``, ``koordctl profile``): a thread that burns CPU is where the profile
says the CPU went, a thread that waits is not, and the folded output feeds flamegraph tools."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet.cli.koordctl import main
from koordlet.debugapi import contract, profiler
from tests.fixtures.debugclient import get
from tests.unit.debugapi.test_server import World, serve, sock_dir, sources_of, world  # noqa: F401


class Switch:
    """A plain attribute, so the spinning loop's CPU is its own frame's (no call per iteration)."""

    on = True


def spin(switch: Switch) -> None:
    x = 0
    while switch.on:
        x += 1


def wait_only(stop: threading.Event) -> None:
    while not stop.wait(0.02):
        pass


@pytest.fixture
def threads() -> Iterator[None]:
    stop, switch = threading.Event(), Switch()
    started = [threading.Thread(target=spin, args=(switch,), name="burner"),
               threading.Thread(target=wait_only, args=(stop,), name="waiter")]
    for thread in started:
        thread.start()
    yield
    switch.on = False
    stop.set()
    for thread in started:
        thread.join()


def test_cpu_goes_to_the_thread_that_burns_it(threads: None) -> None:
    doc = profiler.take(1.0).to_json()
    top = doc["top_self"][0]
    assert top["function"] == f"{__name__}.spin"
    # The burner holds the GIL most of the window: most of the profiled CPU is its.
    assert top["cpu_seconds"] > 0.5 * doc["cpu_seconds"]
    waiting = sum(f["cpu_seconds"] for f in doc["top_self"] if f["function"].endswith("wait_only"))
    assert waiting < 0.1 * top["cpu_seconds"]
    burner_stacks = [s for s in doc["collapsed"] if s.startswith("burner;")]
    assert burner_stacks and all(s.endswith(f"{__name__}.spin") for s in burner_stacks)
    assert any(f["function"] == "threading.Thread.run" for f in doc["top_total"])


def test_bad_windows_and_a_second_profile_are_refused() -> None:
    with pytest.raises(ValueError, match="seconds"):
        profiler.take(0)
    with pytest.raises(ValueError, match="seconds"):
        profiler.take(profiler.MAX_SECONDS + 1)
    with pytest.raises(ValueError, match="interval"):
        profiler.take(1.0, 0.0001)
    first = threading.Thread(target=profiler.take, args=(0.5,))
    first.start()
    time.sleep(0.1)
    try:
        with pytest.raises(profiler.ProfileBusy):
            profiler.take(0.1)
    finally:
        first.join()


def test_the_endpoint_and_koordctl(world: World, serve: Any, threads: None,  # noqa: F811 (fixtures)
                                   tmp_path: Path) -> None:
    socket_path = serve(sources_of(world))
    code, doc = get(socket_path, f"{contract.PROFILE}?seconds=abc")
    assert code == 400 and "seconds" in doc["error"]
    out = io.StringIO()
    folded = tmp_path / "cpu.folded"
    assert main(["profile", "--seconds", "1", "--folded", str(folded), "--socket", socket_path], out=out,
                environ={}) == 0
    text = out.getvalue()
    assert "SELF-CPU" in text and f"{__name__}.spin" in text
    lines = folded.read_text().splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    assert any(line.startswith("burner;") for line in lines)
