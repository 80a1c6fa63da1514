"""``python -m tests.hog -- <command...>``: runs a command with the one-core CPU hog of ``--cpu-hog`` running
(for the v2 guest: ``python -m tests.hog -- python -m tests.vm``) and exits with the command's code.

A command killed by a signal exits 128 + its number, as a shell reports it; a hog that died during the
run or could not be stopped makes the exit code 1 when the command itself succeeded (the run was then not
what was asked for), and is reported on stderr either way."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

from tests.fixtures.cpuhog import CpuHog, HogError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hog",
                                     description="Run a command with a background busy loop using one core.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: python -m tests.hog -- <command...>")
    hog = CpuHog()
    print(f"CPU hog running: pid {hog.start()}, one busy loop in its own session", file=sys.stderr, flush=True)
    code = 1
    try:
        code = subprocess.call(command)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        code = 127
    finally:
        try:
            print(hog.stop(), file=sys.stderr, flush=True)
        except HogError as exc:
            print(f"CPU hog FAILED: {exc}", file=sys.stderr, flush=True)
            code = code or 1
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
