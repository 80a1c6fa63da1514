"""``koordctl``: the operator's command line on a node.

``koordctl doctor`` runs koordlet's kernel feature probes against this host and prints each one with
supported/unsupported and the reason, as a table or (``--json``) as one JSON document.  It answers
"what will koordlet be able to do here?" without a running agent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO

from koordlet.cli.common import add_host_root_flags, add_version_flag, host_root_overrides
from koordlet.errors import KoordletError
from koordlet.version import __version__

EXIT_OK = 0
EXIT_FAILURE = 1


class Probe(Protocol):
    """What doctor needs of a probe result (:class:`koordlet.system.probes.ProbeResult`)."""

    @property
    def name(self) -> str: ...
    @property
    def supported(self) -> bool: ...
    @property
    def reason(self) -> str: ...


ProbeAll = Callable[[Any], Sequence[Probe]]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="koordctl", description="Inspect koordlet and the host it runs on.")
    add_version_flag(parser, "koordctl")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    doctor = commands.add_parser(
        "doctor",
        help="probe which kernel features koordlet can use on this host",
        description="Run every kernel feature probe and print supported/unsupported with the reason.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    add_host_root_flags(doctor)
    return parser


def doctor_document(probes: Sequence[Probe]) -> dict[str, Any]:
    """The ``--json`` output: ``{"version", "probes": [{"name", "supported", "reason"}], "summary"}``."""
    rows = [{"name": p.name, "supported": bool(p.supported), "reason": p.reason} for p in probes]
    supported = sum(1 for row in rows if row["supported"])
    return {
        "version": __version__,
        "probes": rows,
        "summary": {"supported": supported, "unsupported": len(rows) - supported},
    }


def format_table(probes: Sequence[Probe]) -> str:
    """Aligned columns PROBE, STATUS, REASON, one probe per line, in probe order."""
    header = ("PROBE", "STATUS", "REASON")
    rows = [(p.name, "supported" if p.supported else "unsupported", p.reason) for p in probes]
    name_width = max(len(header[0]), *(len(r[0]) for r in rows)) if rows else len(header[0])
    status_width = len("unsupported")
    lines = [f"{a:<{name_width}}  {b:<{status_width}}  {c}".rstrip() for a, b, c in (header, *rows)]
    return "\n".join(lines) + "\n"


def doctor(args: argparse.Namespace, out: TextIO, probe_all: ProbeAll | None = None) -> int:
    """Run the probes and print them; ``probe_all`` defaults to koordlet's own."""
    from koordlet.system.hostpaths import HostPaths

    if probe_all is None:
        from koordlet.system.probes import probe_all as system_probe_all

        probe_all = system_probe_all
    paths = HostPaths(**host_root_overrides(args))
    probes = probe_all(paths)
    if args.json:
        json.dump(doctor_document(probes), out, indent=2)
        out.write("\n")
    else:
        out.write(format_table(probes))
        doc = doctor_document(probes)["summary"]
        out.write(f"\n{doc['supported']} supported, {doc['unsupported']} unsupported\n")
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    probe_all: ProbeAll | None = None,
) -> int:
    args = build_parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        return doctor(args, stream, probe_all)
    except (KoordletError, OSError) as exc:
        print(f"koordctl: error: {exc}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
