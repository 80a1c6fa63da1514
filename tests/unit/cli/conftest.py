"""Fixtures for the command-line tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    # The CLIs install a stderr handler on the root logger (koordlet.log.setup_logging); under capsys
    # that stream is a per-test capture, so leave the root logger as the test found it.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    logging.captureWarnings(False)
