"""The summary table of one ``tox -e bench`` run: every ratio the benchmarks appended to
``$KOORDLET_BENCH_SUMMARY`` (measure, ratio, target, met/missed).  Exits 1 when one missed or none was recorded.

    KOORDLET_BENCH_SUMMARY=/tmp/ratios.jsonl python -m tests.bench.summary
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.bench.ratio import SUMMARY_ENV, Ratio


def main() -> int:
    path = os.environ.get(SUMMARY_ENV)
    if not path or not Path(path).exists():
        print(f"no ratios recorded ({SUMMARY_ENV} unset or missing)", file=sys.stderr)
        return 1
    ratios = [Ratio(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]
    width = max(len(r.measure) for r in ratios)
    print(f"{'measure':{width}}  {'ratio':>8}  {'target':>9}  verdict  how")
    for r in ratios:
        sign = ">=" if r.higher_is_better else "<="
        print(f"{r.measure:{width}}  {r.value:8.3f}  {sign}{r.target:7g}  {'met' if r.met else 'MISSED':7}  {r.how}")
    missed = [r.measure for r in ratios if not r.met]
    print(f"{len(ratios) - len(missed)} of {len(ratios)} met" + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
