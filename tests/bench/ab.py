"""A/B in one run: the same measurement over the ``koordlet`` package of the base commit (:data:`BASE_COMMIT`, the
code as it was when the performance work of issue 22 started) and over the working tree's, interleaved batch by
batch so that whatever the machine does meanwhile falls on both alike.

The base code is a git worktree of :data:`BASE_COMMIT` under ``/tmp`` (made once, kept for later runs), with its C
core built there, or copied when ``csrc/`` did not change since.  Each side runs in a worker process
(:mod:`tests.bench.abworker`) whose ``koordlet`` is that side's while the harness (``tests``) is always the working
tree's, so both sides are measured by the same code.  A rig (``module:Class``, built from keyword arguments) has
``measure() -> list[float]`` (one batch of samples, lower is better) and ``close()``; it must use only what both
codes offer.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BASE_COMMIT: Final = "133f1718f30d7983d8eb9f85fb37786d465e5d01"
"""main when issue 22 began (issue 21 landed)."""
BASE_ENV: Final = "KOORDLET_BENCH_BASE"
"""A directory holding another ``koordlet`` package to compare against instead (a checkout of any commit)."""


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def base_tree() -> Path:
    """The root of the base code: ``$KOORDLET_BENCH_BASE``, else a worktree of :data:`BASE_COMMIT`."""
    if os.environ.get(BASE_ENV):
        return Path(os.environ[BASE_ENV])
    tree = Path(tempfile.gettempdir()) / f"koordlet-bench-base-{BASE_COMMIT[:12]}"
    if not (tree / "koordlet").is_dir():
        shutil.rmtree(tree, ignore_errors=True)
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", str(tree), BASE_COMMIT)
    if not list((tree / "koordlet").glob("_native*.so")):
        _build_core(tree)
    return tree


def _build_core(tree: Path) -> None:
    same_core = subprocess.run(["git", "diff", "--quiet", BASE_COMMIT, "--", "csrc"], cwd=REPO_ROOT).returncode == 0
    built = list((REPO_ROOT / "koordlet").glob("_native*.so"))
    if same_core and built:
        shutil.copy2(built[0], tree / "koordlet" / built[0].name)
        return
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, check=True,
                   capture_output=True)


def worker_env(code_root: Path) -> dict[str, str]:
    """An environment whose ``koordlet`` is ``code_root``'s and whose ``tests`` is the working tree's."""
    shim = Path(tempfile.mkdtemp(prefix="koordlet-ab-"))
    (shim / "koordlet").symlink_to(code_root / "koordlet")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(REPO_ROOT)])
    return env


class Worker:
    """One side: a process holding a rig, measuring a batch whenever asked."""

    def __init__(self, label: str, code_root: Path, rig: str, kwargs: Mapping[str, Any]) -> None:
        self.label = label
        env = worker_env(code_root)
        # Run from the shim: ``python -m`` puts the working directory first on sys.path, so from REPO_ROOT the
        # working tree's koordlet would shadow the shim's and both sides would measure the same code.
        shim = env["PYTHONPATH"].split(os.pathsep)[0]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.abworker", rig, json.dumps(dict(kwargs))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=shim)
        self._expect("ready")

    def _expect(self, what: str) -> Any:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label} worker exited before {what} (exit {self._proc.wait()})")
        return json.loads(line)

    def measure(self) -> list[float]:
        assert self._proc.stdin is not None
        self._proc.stdin.write("measure\n")
        self._proc.stdin.flush()
        return [float(v) for v in self._expect("a batch")]

    def close(self) -> None:
        if self._proc.stdin is not None and self._proc.poll() is None:
            self._proc.stdin.write("close\n")
            self._proc.stdin.flush()
        self._proc.wait(60)


@dataclass
class Result:
    base: list[float]
    current: list[float]

    @property
    def ratio(self) -> float:
        """Median of the current code's samples over the base code's."""
        return statistics.median(self.current) / statistics.median(self.base)


def interleave(rig: str, kwargs: Mapping[str, Any], batches: int) -> Result:
    """``batches`` batches of each side, alternating which goes first, both workers alive throughout."""
    base = Worker("base", base_tree(), rig, kwargs)
    try:
        current = Worker("current", REPO_ROOT, rig, kwargs)
        try:
            result = Result([], [])
            for n in range(batches):
                order = [(base, result.base), (current, result.current)]
                for worker, samples in order if n % 2 == 0 else reversed(order):
                    samples.extend(worker.measure())
            return result
        finally:
            current.close()
    finally:
        base.close()
