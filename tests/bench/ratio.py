"""A benchmark's verdict as a ratio measured side by side in one run, never an absolute time: the machines drift
2-3x from day to day, a ratio of two things measured in the same minutes does not.

Each benchmark prints its :class:`Ratio` lines last and, with ``--check``, exits 1 when one misses.  When
``KOORDLET_BENCH_SUMMARY`` names a file, each ratio is also appended there as a JSON line, and
``python -m tests.bench.summary`` prints the table of every ratio of the run (``tox -e bench`` does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Final

SUMMARY_ENV: Final = "KOORDLET_BENCH_SUMMARY"


@dataclass(frozen=True)
class Ratio:
    measure: str
    value: float
    target: float
    """Met when ``value <= target`` (or ``>=`` with ``higher_is_better``)."""
    how: str = ""
    """What was divided by what, in a few words."""
    higher_is_better: bool = False

    @property
    def met(self) -> bool:
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def line(self) -> str:
        sign = ">=" if self.higher_is_better else "<="
        verdict = "met" if self.met else "MISSED"
        return f"RATIO {self.measure}: {self.value:.3f} (target {sign} {self.target:g}) {verdict}  [{self.how}]"


def report(ratios: Sequence[Ratio], check: bool) -> int:
    """Prints the ratios, appends them to the run's summary file; 1 when ``check`` and one missed."""
    path = os.environ.get(SUMMARY_ENV)
    for ratio in ratios:
        print(ratio.line())
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(ratio)) + "\n")
    return 1 if check and not all(r.met for r in ratios) else 0
