"""The pytest side of ``tests/gate_mutation.py``: loaded with ``-p tests.gate_mutation_plugin``.

With ``KOORDLET_GATE_MUTATION=<gate>`` set, :func:`koordlet.config.gates.enabled` answers False for that gate
(and as before for every other one) for the whole session: every read of the gate in koordlet goes through
it, so this is the gate's code removed.  ``KOORDLET_GATE_MUTATION_REPORT=<file>`` receives, as JSON, the
tests that ran and the ones that failed, which the driver counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from koordlet.config import gates

GATE_ENV = "KOORDLET_GATE_MUTATION"
REPORT_ENV = "KOORDLET_GATE_MUTATION_REPORT"

_ran: set[str] = set()
_failed: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    gate = os.environ.get(GATE_ENV, "")
    if not gate:
        return  # the unmutated run of the same subset
    if gate not in gates.GATES:
        raise pytest.UsageError(f"{GATE_ENV}={gate!r} is not a feature gate")
    original = gates.enabled

    def enabled(table: Mapping[str, bool], name: str) -> bool:
        return False if name == gate else original(table, name)

    # Patched on the module: callers look it up as gates.enabled(...) at call time, so no import sees the
    # original (plugins.py imports the module as feature_gates, same object).
    gates.enabled = enabled  # type: ignore[assignment]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A test counts as run when its call phase ran or a phase failed; one skipped at setup did not run.
    if (report.when == "call" and not report.skipped) or report.failed:
        _ran.add(report.nodeid)
    if report.failed and report.nodeid not in _failed:
        _failed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        Path(path).write_text(json.dumps({"ran": sorted(_ran), "failed": _failed}), encoding="utf-8")
