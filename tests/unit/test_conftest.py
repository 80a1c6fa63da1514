"""The suite's own rules (tests/conftest.py), checked by running pytest on synthetic test files.

Each case runs a separate pytest process with ``-p tests.conftest`` on a file in ``tmp_path`` and reads
the outcomes from its JUnit XML report, so the hooks are exercised exactly as in a real run.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import native_builds

REPO_ROOT = Path(__file__).resolve().parents[2]

SYNTHETIC = """
import os
import pytest

if {as_user}:
    os.geteuid = lambda: 1000  # pretend not to be root
if {missing_shared}:
    import tests.conftest
    tests.conftest.REPO_ROOT = tests.conftest.REPO_ROOT / "nowhere" / "repo"  # no ../shared beside it

@pytest.mark.integration
def test_integration_skips():
    pytest.skip("no containerd here")

@pytest.mark.integration
@pytest.mark.skipif(True, reason="kernel too old")
def test_integration_skipif():
    pass

@pytest.mark.integration
@pytest.mark.xfail(reason="known kernel bug", strict=True)
def test_integration_xfail():
    assert False

@pytest.mark.integration
def test_integration_passes():
    pass

def test_unit_skips():
    pytest.skip("not relevant")

def test_shared_dir(shared_dir):
    assert shared_dir.name == "shared"
"""


def run_synthetic(
    tmp_path: Path, *, ci: bool, as_user: bool = False, missing_shared: bool = False
) -> dict[str, tuple[str, str]]:
    """Outcome (passed/failed/error/skipped) and message of each synthetic test."""
    test_file = tmp_path / "test_synthetic.py"
    test_file.write_text(textwrap.dedent(SYNTHETIC.format(as_user=as_user, missing_shared=missing_shared)))
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if ci:
        env["CI"] = "true"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            f"--junitxml={report}",
            str(test_file),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), proc.stdout + proc.stderr
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in {"failure", "error", "skipped"}:
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message", "")
        outcomes[case.get("name", "")] = (outcome, message)
    return outcomes


def test_under_ci_a_skipped_integration_test_fails_with_the_reason(tmp_path: Path) -> None:
    outcomes = run_synthetic(tmp_path, ci=True)
    assert outcomes["test_integration_skips"][0] == "failed"
    assert "skipped under CI=true" in outcomes["test_integration_skips"][1]
    assert "no containerd here" in outcomes["test_integration_skips"][1]
    # A skipif is evaluated at setup: it becomes a setup error, still a failed run.
    assert outcomes["test_integration_skipif"][0] == "error"
    assert "kernel too old" in outcomes["test_integration_skipif"][1]
    # An expected failure is not a skip; unit tests may skip; passing tests pass.
    assert outcomes["test_integration_xfail"][0] == "skipped"
    assert outcomes["test_unit_skips"][0] == "skipped"
    assert outcomes["test_integration_passes"][0] == "passed"


def test_outside_ci_integration_tests_may_skip(tmp_path: Path) -> None:
    outcomes = run_synthetic(tmp_path, ci=False)
    assert outcomes["test_integration_skips"] == ("skipped", "no containerd here")
    assert outcomes["test_integration_skipif"] == ("skipped", "kernel too old")
    assert outcomes["test_unit_skips"] == ("skipped", "not relevant")
    assert outcomes["test_integration_passes"][0] == "passed"


def test_integration_tests_need_root(tmp_path: Path) -> None:
    outcomes = run_synthetic(tmp_path, ci=False, as_user=True)
    assert outcomes["test_integration_passes"][0] == "skipped"
    assert "needs root" in outcomes["test_integration_passes"][1]
    assert outcomes["test_unit_skips"][0] == "skipped"
    outcomes = run_synthetic(tmp_path, ci=True, as_user=True)
    assert outcomes["test_integration_passes"][0] == "error"
    assert "needs root" in outcomes["test_integration_passes"][1]


def test_shared_dir_absent_skips_outside_ci_and_fails_under_ci(tmp_path: Path) -> None:
    outcome, message = run_synthetic(tmp_path, ci=False, missing_shared=True)["test_shared_dir"]
    assert outcome == "skipped"
    assert "shared reference material not found" in message
    outcome, message = run_synthetic(tmp_path, ci=True, missing_shared=True)["test_shared_dir"]
    assert outcome == "error"
    assert "required under CI=true" in message


@pytest.mark.skipif(not (REPO_ROOT.parent / "shared").is_dir(), reason="checks the present case of ../shared")
def test_shared_dir_is_found_beside_the_repository(tmp_path: Path) -> None:
    assert run_synthetic(tmp_path, ci=True)["test_shared_dir"][0] == "passed"


def test_native_builds_lists_what_python_would_load_first(tmp_path: Path) -> None:
    assert native_builds(tmp_path) == []
    abi3 = tmp_path / "_native.abi3.so"
    abi3.write_bytes(b"")
    assert native_builds(tmp_path) == [abi3]
    specific = tmp_path / f"_native{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    specific.write_bytes(b"")
    assert native_builds(tmp_path) == [specific, abi3]
