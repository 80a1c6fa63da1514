"""Cost of reading container cgroup stats: the C batch read against its floors and plain Python.

Builds a real cgroup v1 tree of N container directories (200 pods x 5 containers by default) and reads
four files of each (cpuacct.usage, cpu.stat, memory.stat, memory.usage_in_bytes), as the collectors do
every tick, four ways, interleaved in the same run so machine noise hits all of them alike:

  a  FileSet.read(): kept-open fds, one C call, parsing included (what collectors call every tick)
  a+ the same plus turning every result into Python values (the whole per-tick cost)
  b  the pure-Python reference: open, read, parse in Python
  c  a raw C loop: open, read, close each file, no parsing (what a naive C reader costs)
  d  a raw C loop: pread(fd, buf, n, 0) on fds kept open, no parsing (the floor)

Targets (issue 2): a/d <= 1.5, a/c <= 0.6, b/a >= 6.  Run as root:
    python -m tests.bench.bench_cgroup_read [--containers 1000] [--rounds 15] [--check]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from koordlet import native
from koordlet import native_ref as ref
from tests.bench.ratio import Ratio, report

ROOT = Path("/sys/fs/cgroup")
FILES = [
    ("cpuacct", "cpuacct.usage", native.Kind.INT, None),
    ("cpu", "cpu.stat", native.Kind.KV, ["nr_periods", "nr_throttled", "throttled_time"]),
    ("memory", "memory.stat", native.Kind.KV, ["total_inactive_anon", "total_active_anon", "total_unevictable"]),
    ("memory", "memory.usage_in_bytes", native.Kind.INT, None),
]

TARGETS = {"a/d": (1.5, "<="), "a/c": (0.6, "<="), "b/a": (6.0, ">=")}
HOW = {"a/d": "C batch read / raw pread on kept fds (the floor)", "a/c": "C batch read / raw open+read+close",
       "b/a": "pure Python reader / C batch read"}


def build_tree(prefix: str, containers: int) -> tuple[list[Path], list[Path]]:
    """Creates prefix/pod<p>/c<i> in cpu, cpuacct and memory; returns (dirs created, files to read)."""
    created: list[Path] = []
    files: list[Path] = []
    for subsystem in ("cpu", "cpuacct", "memory"):
        base = ROOT / subsystem / prefix
        base.mkdir()
        created.append(base)
    for i in range(containers):
        relative = f"pod{i // 5}/c{i}"
        for subsystem in ("cpu", "cpuacct", "memory"):
            pod = ROOT / subsystem / prefix / f"pod{i // 5}"
            if not pod.exists():
                pod.mkdir()
                created.append(pod)
            target = ROOT / subsystem / prefix / relative
            target.mkdir()
            created.append(target)
        for subsystem, name, _, _ in FILES:
            files.append(ROOT / subsystem / prefix / relative / name)
    return created, files


def remove_tree(created: list[Path]) -> None:
    for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
        if path.exists():
            path.rmdir()


def measure(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each variant, interleaving variants within every round."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            started = time.perf_counter()
            variants[name]()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_cgroup_read: needs root to create cgroups", file=sys.stderr)
        return 2

    native.configure_fd_budget()
    prefix = f"koordlet-bench-{os.getpid()}-{secrets.token_hex(3)}"
    created, paths = build_tree(prefix, args.containers)
    raw_paths = [os.fsencode(p) for p in paths]
    kinds = [(int(kind), keys) for _ in range(args.containers) for _, _, kind, keys in FILES]
    fileset = native.FileSet()
    for path, (_, _, kind, keys) in zip(paths, FILES * args.containers, strict=True):
        fileset.add(path, kind, keys)
    kept = native.RawOpenFiles(raw_paths)
    try:
        first = fileset.read()
        errors = sum(1 for slot in first.slots() if first.error(slot))
        if errors or kept.opened != len(paths):
            print(f"setup failed: {errors} read errors, {kept.opened}/{len(paths)} opened", file=sys.stderr)
            return 2

        def batch_and_decode() -> None:
            result = fileset.read()
            for slot in result.slots():
                result.get(slot)

        def python_reference() -> None:
            for path, (kind, keys) in zip(paths, kinds, strict=True):
                ref.read_file(path, kind, keys)

        timings = measure(
            {
                "a": fileset.read,
                "a+": batch_and_decode,
                "b": python_reference,
                "c": lambda: native.raw_open_read_close(raw_paths),
                "d": kept.pread_all,
            },
            args.rounds,
        )
    finally:
        kept.close()
        fileset.close()
        remove_tree(created)

    n = len(paths)
    per_file = {name: seconds / n * 1e6 for name, seconds in timings.items()}
    labels = {
        "a": "C batch read, kept fds, parsed",
        "a+": "  ... plus values into Python",
        "b": "pure Python open/read/parse",
        "c": "raw C open/read/close",
        "d": "raw C pread on kept fds (floor)",
    }
    print(f"{args.containers} container cgroups, {n} files, median of {args.rounds} interleaved rounds")
    for name in ("a", "a+", "b", "c", "d"):
        print(f"  ({name:2}) {labels[name]:34} {per_file[name]:7.2f} us/file  {timings[name] * 1e3:8.2f} ms/tick")
    ratios = {
        "a/d": per_file["a"] / per_file["d"],
        "a/c": per_file["a"] / per_file["c"],
        "b/a": per_file["b"] / per_file["a"],
        "a+/d": per_file["a+"] / per_file["d"],
    }
    for name, value in ratios.items():
        if name not in TARGETS:
            print(f"  {name:5} = {value:5.2f}   (informational)")
    return report([Ratio(f"cgroup batch read {name}", ratios[name], limit, f"{HOW[name]}, per file, same run",
                         higher_is_better=op == ">=") for name, (limit, op) in TARGETS.items()], args.check)


if __name__ == "__main__":
    sys.exit(main())
