"""A collector failing tick after tick is logged once per streak and once when it works again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.test_advisor import Recorder, advisor_with

LOGGER = "koordlet.metricsadvisor.advisor"
TICKS = 30


def test_a_collector_failing_every_tick_is_logged_once_per_streak(fake_host: FakeHost, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    bad = Recorder("bad", 1.0, fail_with=OSError(2, "No such file or directory"))
    advisor, clock = advisor_with(fake_host, tmp_path, [bad])

    def ticks(n: int) -> None:
        for _ in range(n):
            advisor.run_once()
            clock.advance(1.0)

    ticks(TICKS)
    bad.fail_with = None
    ticks(5)
    bad.fail_with = ValueError("garbage in the file")
    ticks(TICKS)
    assert len(bad.collected) == 2 * TICKS + 5
    assert [(r.levelno, r.getMessage(), r.__dict__["reason"], r.__dict__.get("rounds"))
            for r in caplog.records if r.name == LOGGER] == [
        (logging.ERROR, "collector failed", "FileNotFoundError", None),
        (logging.INFO, "collector works again", "FileNotFoundError", TICKS),
        (logging.ERROR, "collector failed", "ValueError", None)]
    first = caplog.records[0]
    assert first.__dict__["collector"] == "bad" and first.__dict__["call"] == "collect" and first.exc_info
    assert advisor.errors == {("bad", "FileNotFoundError"): TICKS, ("bad", "ValueError"): TICKS}
