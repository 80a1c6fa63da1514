"""A condition that holds round after round is logged when a streak starts and when it ends, never in
between, whatever the per-round details."""

from __future__ import annotations

import logging

import pytest

from koordlet.streaklog import Streak
from tests.unit.resourceexecutor.fakes import FakeClock

LOGGER = "test.streaklog"


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, dict[str, object]]]:
    keys = ("reason", "rounds", "seconds", "detail")
    return [(r.levelname, r.getMessage(), {k: r.__dict__[k] for k in keys if k in r.__dict__})
            for r in caplog.records if r.name == LOGGER]


def test_one_line_per_streak_and_one_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    clock = FakeClock(100.0)
    streak = Streak(logging.getLogger(LOGGER), clock)
    assert not streak.ok("fine")  # nothing to end yet
    logged = []
    for n in range(30):
        logged.append(streak.fail("cgroup_gone", "skipped", extra={"detail": f"round {n}"}))
        clock.advance(1.0)
    assert logged == [True] + [False] * 29 and streak.kind == "cgroup_gone" and streak.rounds == 30
    assert streak.ok("works again") and not streak.ok("works again")
    assert streak.kind is None and streak.rounds == 0
    assert lines(caplog) == [
        ("WARNING", "skipped", {"reason": "cgroup_gone", "detail": "round 0"}),
        ("INFO", "works again", {"reason": "cgroup_gone", "rounds": 30, "seconds": 30.0}),
    ]


def test_another_kind_starts_another_streak(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    clock = FakeClock(0.0)
    streak = Streak(logging.getLogger(LOGGER), clock)
    for kind in ["a"] * 5 + ["b"] * 5 + ["a"] * 2:
        streak.fail(kind, "failing", level=logging.ERROR, extra={"detail": "x"})
        clock.advance(0.5)
    streak.ok("ok")
    assert [(level, message, fields.get("reason"), fields.get("rounds")) for level, message, fields in
            lines(caplog)] == [("ERROR", "failing", "a", None), ("ERROR", "failing", "b", None),
                               ("ERROR", "failing", "a", None), ("INFO", "ok", "a", 2)]
    assert [fields.get("detail") for _, _, fields in lines(caplog)] == ["x", "x", "x", None]
