"""A strategy that skips round after round for the same reason logs it once, and again when the reason
changes or after it acted in between."""

from __future__ import annotations

import logging

import pytest

from koordlet.qosmanager.helpers import SkipLog


def test_skips_are_logged_once_per_reason(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.skiplog")
    caplog.set_level(logging.INFO, logger="test.skiplog")
    skips = SkipLog("cpusuppress", logger)
    for action, summary in [("skip", "no pods known yet")] * 5 + [
            ("skip", "no fresh node CPU sample"), ("suppress", "BE limited"), ("skip", "no fresh node CPU sample"),
            ("skip", "no fresh node CPU sample")]:
        skips.note(action, summary)
    assert [(r.getMessage(), r.__dict__["reason"]) for r in caplog.records] == [
        ("cpusuppress skipped", "no pods known yet"), ("cpusuppress skipped", "no fresh node CPU sample"),
        ("cpusuppress skipped", "no fresh node CPU sample")]
