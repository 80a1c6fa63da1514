"""Fixtures of the node scenarios: the run's report and one node per runtime variant (module scope: the
scenarios of a variant run in order on one node, as a node lives through them in a cluster)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.deployednode import DeployedImage
from tests.e2e.faults import Matrix, kills_per_component, run_seed
from tests.e2e.harness import Report
from tests.fixtures.containerd import unavailable_reason
from tests.fixtures.fakekubelet import TlsFiles

VARIANTS = ("nri", "proxy")
"""``nri``: containerd 1.7 calls koordlet's NRI plugin; ``proxy``: kubelet -> koord-runtime-proxy -> containerd 1.6."""

_REPORT = pytest.StashKey[Report]()
_MATRIX = pytest.StashKey[tuple[Matrix, str]]()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # The deployment's own tests need the image: without --deployed there is nothing of theirs to run (and under
    # CI=true a skip would fail the run).  The fault matrix is the process supervisor's (a restart after 1 s); with
    # --deployed, test_deployed.py kills the containers instead and the kubelet restarts them with its back-off.
    deployed = config.getoption("deployed")
    if collection_path.name == ("test_faults.py" if deployed else "test_deployed.py"):
        return True
    return None


@pytest.fixture(scope="session")
def e2e_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The run's machine-readable report: ``$KOORDLET_E2E_REPORT`` or ``e2e-report.json`` in the run's temp
    dir; its path is printed at the end of the run."""
    path = Path(os.environ.get("KOORDLET_E2E_REPORT") or tmp_path_factory.getbasetemp() / "e2e-report.json")
    report = Report(path)
    request.config.stash[_REPORT] = report
    report.write()
    return report


@pytest.fixture(scope="session")
def fault_seed() -> str:
    """The fault plan's seed: ``KOORDLET_FAULT_SEED`` (a replay) or a fresh one, printed with the matrix."""
    return run_seed()


@pytest.fixture(scope="session")
def fault_matrix(request: pytest.FixtureRequest, fault_seed: str) -> Matrix:
    """The run's fault matrix, both variants merged; printed at the end of the run."""
    matrix = Matrix()
    request.config.stash[_MATRIX] = (matrix, fault_seed)
    return matrix


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    faults = config.stash.get(_MATRIX, None)
    if faults is not None:
        matrix, seed = faults
        terminalreporter.write_sep("=", f"fault matrix (seed {seed}, {kills_per_component()} kills per component; "
                                        f"replay: KOORDLET_FAULT_SEED={seed})")
        terminalreporter.write_line(matrix.table())
    report = config.stash.get(_REPORT, None)
    if report is not None:
        report.data["finished_at"] = time.time()
        report.data["runtime_seconds"] = round(report.data["finished_at"] - report.data["started_at"], 1)
        report.write()
        terminalreporter.write_line(f"e2e report ({report.data['runtime_seconds']} s of scenarios): {report.path}; "
                                    f"component logs: {report.path.parent}/e2e-logs-*")


@pytest.fixture(scope="module", params=VARIANTS)
def node(request: pytest.FixtureRequest, apiserver_tls: TlsFiles, e2e_report: Report,
         deployed_image: DeployedImage | None) -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("node scenarios need root: real containerd, cgroups and processes")
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from tests.e2e.node import kube_node

    started = time.monotonic()
    logs = e2e_report.path.parent / f"e2e-logs-{request.module.__name__.rsplit('.', 1)[-1]}-{request.param}"
    # A module that sets WEBHOOK = True gets the companion's admission webhook wired into the apiserver.
    with kube_node(request.param, apiserver_tls, keep_logs=logs,
                   webhook=getattr(request.module, "WEBHOOK", False), image=deployed_image) as instance:
        e2e_report.record("setup", request.param, node_start_seconds=round(time.monotonic() - started, 1))
        yield instance
