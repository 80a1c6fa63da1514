"""Wiring shared by every test: fixtures plugins, markers, and the rules for skipping.

- ``integration``: the test needs root and the real host (cgroups, namespaces, containerd).  Every test
  under ``tests/integration/`` and ``tests/e2e/`` gets the marker automatically.  Outside CI such a test skips when not
  root; under ``CI=true`` any skip of an integration test - at collection, setup or call - is turned
  into a failure that names the reason, because CI must exercise the real host.
- ``bench``: a benchmark (``tests/bench/``); run by ``tox -e bench``, never by the default suite.
- ``failures`` (``tests/fixtures/failures.py``): the failure callbacks of the components a test starts; a
  component thread that dies fails the test.
- ``shared_dir``: the project's shared reference material beside the repository (``../shared``),
  required under CI, optional elsewhere.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Generator, Mapping
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.fakehost", "tests.fixtures.realcgroup", "tests.fixtures.fakekubelet", "tests.fixtures.containerd",
    "tests.fixtures.fakeapiserver", "tests.fixtures.kubeletdriver", "tests.fixtures.cpuhog", "tests.fixtures.failures",
    "tests.fixtures.isolation", "tests.fixtures.deployedimage",
    # pytester runs a test session inside a test (tests/unit/test_failures_fixture.py); loading it only adds
    # its fixture and two options nobody passes.
    "pytester",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
INTEGRATION_DIR = TESTS_DIR / "integration"
E2E_DIR = TESTS_DIR / "e2e"
HOST_DIRS = (INTEGRATION_DIR, E2E_DIR)
"""Tests of the real host: the node scenarios of ``tests/e2e`` count as integration tests."""
BENCH_DIR = TESTS_DIR / "bench"

CI_SKIP_MESSAGE = "integration test skipped under CI=true, which counts as a failure; skip reason: {reason}"


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True when the ``CI`` environment variable says so (``true``, ``1`` or ``yes``, any case)."""
    env = os.environ if environ is None else environ
    return env.get("CI", "").strip().lower() in {"true", "1", "yes"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "integration: needs root and the real host (cgroups, network namespaces, containerd); "
        "skips when not root, and under CI=true any skip of it fails the run",
    )
    config.addinivalue_line("markers", "bench: a benchmark (tests/bench); run by `tox -e bench`")
    config.addinivalue_line(
        "markers",
        "cgroupv1: runs on a host whose cgroup controllers are v1 (this project's hosts boot hybrid); "
        "deselected on a pure cgroup v2 host",
    )
    config.addinivalue_line(
        "markers",
        "cgroupv2: needs a pure cgroup v2 kernel; deselected elsewhere and run in the v2 guest "
        "(python -m tests.vm, tox -e v2)",
    )
    _check_tree_under_test()


def _check_tree_under_test() -> None:
    # The suite tests the tree it lives in.  A koordlet imported from elsewhere (a stale non-editable
    # install shadowing this checkout) would make every result meaningless, so stop before collecting.
    spec = importlib.util.find_spec("koordlet")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    expected = REPO_ROOT / "koordlet" / "__init__.py"
    if origin != expected:
        raise pytest.UsageError(
            f"tests must run against this checkout's koordlet ({expected}), but Python imports {origin}; "
            "run pytest from the repository root (pyproject.toml sets pythonpath) after `pip install -e .`"
        )
    # `pip install -e .` builds koordlet/_native.abi3.so; a build made another way (cffi's compile(),
    # setup.py build_ext under another interpreter) is named _native.cpython-3XX-*.so, and with both
    # present Python loads the cpython-3XX one whatever their age: a stale core would be under test.
    builds = native_builds(REPO_ROOT / "koordlet")
    if len(builds) > 1:
        raise pytest.UsageError(
            f"several builds of the C core in the tree: {', '.join(b.name for b in builds)}; Python loads "
            f"{builds[0].name}. Remove the stale one(s) and rebuild with `pip install -e .`"
        )


def native_builds(package_dir: Path) -> list[Path]:
    """The compiled cores present in ``package_dir``, in the order Python's import tries them."""
    candidates = (package_dir / f"_native{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    return [path for path in candidates if path.exists()]


def _is_under(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _on_host(path: Path) -> bool:
    return any(_is_under(path, d) for d in HOST_DIRS)


def host_cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> int:
    """2 when the cgroup root is a pure v2 hierarchy, 1 for v1 and hybrid hosts."""
    return 2 if (root / "cgroup.controllers").is_file() else 1


_DESELECTED_FOR_VERSION = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        if _on_host(path):
            item.add_marker(pytest.mark.integration)
        if _is_under(path, BENCH_DIR):
            item.add_marker(pytest.mark.bench)
    # A test of the other cgroup version cannot run on this kernel at all: it is deselected, not skipped, and
    # runs where that version is (v2 in the guest that `python -m tests.vm` boots, v1 on the hybrid hosts).
    other = "cgroupv1" if host_cgroup_version() == 2 else "cgroupv2"
    deselected = [item for item in items if item.get_closest_marker(other) is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker(other) is None]
    config.stash[_DESELECTED_FOR_VERSION] = len(deselected)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    count = config.stash.get(_DESELECTED_FOR_VERSION, 0)
    if count and host_cgroup_version() == 1:
        terminalreporter.write_line(
            f"{count} cgroup v2 tests deselected on this v1/hybrid host: they run in the v2 guest "
            "(python -m tests.vm, tox -e v2)"
        )
    elif count:
        terminalreporter.write_line(f"{count} cgroup v1 tests deselected on this pure cgroup v2 host")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration") is not None and os.geteuid() != 0:
        pytest.skip("integration test needs root: it creates real cgroups, namespaces and processes")


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    # A skip's longrepr is (path, lineno, "Skipped: <reason>").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")  # an expected failure is reported as skipped too
        and item.get_closest_marker("integration") is not None
        and in_ci()
    ):
        report.outcome = "failed"
        report.longrepr = CI_SKIP_MESSAGE.format(reason=_skip_reason(report))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    # A module-level skip (pytest.skip(allow_module_level=True), importorskip) skips a whole file at
    # collection, before any item exists to carry the marker: judge it by where the file is.
    report = yield
    if report.skipped and in_ci() and _on_host(Path(collector.path)):
        report.outcome = "failed"
        report.longrepr = CI_SKIP_MESSAGE.format(reason=_skip_reason(report))
    return report


def shared_path() -> Path:
    """Where the shared reference material is expected, whether or not it is there.

    For collection only (a parametrize list read from a shared file, which must cope with its absence);
    a test reaches the material through ``shared_dir``, which skips or fails when it is missing.
    """
    return (REPO_ROOT / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared reference material, ``../shared`` beside the repository.

    Compatibility tests read Koordinator samples from it.  Outside CI a checkout may lack it and the
    test skips; under ``CI=true`` it must be there and its absence fails the test.
    """
    path = shared_path()
    if not path.is_dir():
        message = f"shared reference material not found at {path} (../shared beside the repository)"
        if in_ci():
            pytest.fail(f"{message}; it is required under CI=true")
        pytest.skip(message)
    return path
