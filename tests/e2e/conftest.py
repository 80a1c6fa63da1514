"""Fixtures of the node scenarios: the run's report and one node per runtime variant (module scope: the
scenarios of a variant run in order on one node, as a node lives through them in a cluster)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Report
from tests.fixtures.containerd import unavailable_reason
from tests.fixtures.fakekubelet import TlsFiles

VARIANTS = ("nri", "proxy")
"""``nri``: containerd 1.7 calls koordlet's NRI plugin; ``proxy``: kubelet -> koord-runtime-proxy -> containerd 1.6."""

_REPORT = pytest.StashKey[Report]()


@pytest.fixture(scope="session")
def e2e_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The run's machine-readable report: ``$KOORDLET_E2E_REPORT`` or ``e2e-report.json`` in the run's temp
    dir; its path is printed at the end of the run."""
    path = Path(os.environ.get("KOORDLET_E2E_REPORT") or tmp_path_factory.getbasetemp() / "e2e-report.json")
    report = Report(path)
    request.config.stash[_REPORT] = report
    report.write()
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    report = config.stash.get(_REPORT, None)
    if report is not None:
        report.data["finished_at"] = time.time()
        report.data["runtime_seconds"] = round(report.data["finished_at"] - report.data["started_at"], 1)
        report.write()
        terminalreporter.write_line(f"e2e report ({report.data['runtime_seconds']} s of scenarios): {report.path}")


@pytest.fixture(scope="module", params=VARIANTS)
def node(request: pytest.FixtureRequest, apiserver_tls: TlsFiles, e2e_report: Report) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("node scenarios need root: real containerd, cgroups and processes")
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from tests.e2e.node import kube_node

    started = time.monotonic()
    with kube_node(request.param, apiserver_tls) as instance:
        e2e_report.record("setup", request.param, node_start_seconds=round(time.monotonic() - started, 1))
        yield instance
