"""``koordctl``: the operator's command line on a node.

``koordctl doctor`` runs koordlet's kernel feature probes against this host and prints each one with
supported/unsupported and the reason, as a table or (``--json``) as one JSON document.  It answers
"what will koordlet be able to do here?" without a running agent.

``status``, ``pods``, ``metrics``, ``slo``, ``qos``, ``hooks``, ``evictions`` and ``cgroup`` ask the running
koordlet over its debug socket (:mod:`koordlet.debugapi.contract`) and print the answer as a table, or with
``-o json|yaml`` as the daemon's document as is.  ``completion bash|zsh`` prints a shell completion script.

Exit codes: 0 ok; 1 the daemon (or the host, for doctor) answered an error; 2 usage; 3 koordlet is not running
or its socket cannot be opened.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, Protocol, TextIO

from koordlet.cli.debugclient import ApiError, DaemonDown, DaemonTimeout, DebugClient, PermissionDenied
from koordlet.cli.koordctl_cmds import completion, render
from koordlet.cli.koordctl_cmds.commands import COMMANDS, Command
from koordlet.cli.koordctl_cmds.flags import add_daemon_flags, add_output_flag, resolve_socket
from koordlet.config.flags import add_host_root_flags, host_root_overrides, new_parser
from koordlet.errors import KoordletError
from koordlet.version import __version__

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
"""The daemon answered an error (or doctor's probes failed)."""
EXIT_USAGE: Final = 2
"""argparse's own exit status for a bad command line."""
EXIT_DAEMON_UNREACHABLE: Final = 3
"""koordlet is not running, or its debug socket cannot be opened by this user."""

DAEMON_DOWN_MESSAGE: Final = ("koordlet is not running (no debug socket at {path}): "
                              "start it with `systemctl start koordlet` or `koordlet run --standalone`")
PERMISSION_DENIED_MESSAGE: Final = ("cannot open {path}: permission denied "
                                    "(the debug socket is root only: run koordctl as root)")

# ---- hook for `koordctl top` --------------------------------------------------------------------------
# `top` lives in koordlet/cli/koordctl_top.py, written and registered on its own: when that module exists,
# its add_top_parser(subparsers) adds the "top" command and run_top(args) -> int runs it.  args.socket is
# already resolved (--socket, $KOORDCTL_SOCKET, default) and the daemon errors it raises (DaemonDown,
# PermissionDenied, ApiError from koordlet.cli.debugclient) get the same messages and exit codes as here.
TOP_MODULE: Final = "koordlet.cli.koordctl_top"
TOP_COMMAND: Final = "top"


def top_module() -> ModuleType | None:
    """:data:`TOP_MODULE` if it is installed, else None (no ``top`` command)."""
    if importlib.util.find_spec(TOP_MODULE) is None:
        return None
    return importlib.import_module(TOP_MODULE)
# ---- end of the hook for `koordctl top` ---------------------------------------------------------------


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
    parser = new_parser("koordctl", "Inspect koordlet and the host it runs on.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    doctor = commands.add_parser(
        "doctor",
        help="probe which kernel features koordlet can use on this host",
        description="Run every kernel feature probe and print supported/unsupported with the reason.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON document instead of a table "
                        "(same as -o json)")
    add_output_flag(doctor)
    add_host_root_flags(doctor)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help[:1].upper()
                                  + command.help[1:] + ", from the running koordlet.")
        command.add_arguments(sub)
        add_daemon_flags(sub)
    top = top_module()
    if top is not None:
        top.add_top_parser(commands)
    shell = commands.add_parser("completion", help="print a shell completion script",
                                description="Print a completion script: source <(koordctl completion bash)")
    shell.add_argument("shell", choices=completion.SHELLS, help="the shell to complete for")
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


def _host_probe_all() -> ProbeAll:
    """koordlet's probes over the C core, or without it where it cannot be loaded (the probes that need it
    then say why)."""
    from koordlet.system.probes import probe_all

    try:
        from koordlet import native
    except ImportError as exc:  # NativeBuildMismatch is an ImportError too
        reason = str(exc)
        return lambda paths: probe_all(paths, None, native_error=reason)
    return lambda paths: probe_all(paths, native)


def doctor(args: argparse.Namespace, out: TextIO, probe_all: ProbeAll | None = None) -> int:
    """Run the probes and print them; ``probe_all`` defaults to koordlet's own."""
    from koordlet.system.hostpaths import HostPaths

    if probe_all is None:
        probe_all = _host_probe_all()
    paths = HostPaths(**host_root_overrides(args))
    probes = probe_all(paths)
    fmt = "json" if args.json else args.output
    if fmt == "json":
        json.dump(doctor_document(probes), out, indent=2)
        out.write("\n")
    elif fmt == "yaml":
        out.write(render.dump(doctor_document(probes), "yaml"))
    else:
        out.write(format_table(probes))
        doc = doctor_document(probes)["summary"]
        out.write(f"\n{doc['supported']} supported, {doc['unsupported']} unsupported\n")
    return EXIT_OK


def run_command(command: Command, args: argparse.Namespace, out: TextIO, now: Callable[[], float]) -> int:
    """Fetch the command's document from the daemon and print it in the ``-o`` format."""
    document = command.fetch(DebugClient(args.socket), args)
    if args.output == "table":
        out.write(command.table(document, now()))
    else:
        out.write(render.dump(document, args.output))
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    probe_all: ProbeAll | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Run one command; argparse exits with :data:`EXIT_USAGE` itself on a bad command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    if hasattr(args, "socket"):
        args.socket = resolve_socket(args.socket, os.environ if environ is None else environ)
    by_name = {command.name: command for command in COMMANDS}
    try:
        if args.command == "doctor":
            return doctor(args, stream, probe_all)
        if args.command == "completion":
            stream.write(completion.script(parser, args.shell))
            return EXIT_OK
        if args.command in by_name:
            return run_command(by_name[args.command], args, stream, clock)
        top = top_module()
        if args.command == TOP_COMMAND and top is not None:
            return int(top.run_top(args))
        parser.error(f"unknown command {args.command!r}")
    except DaemonDown as exc:
        print(DAEMON_DOWN_MESSAGE.format(path=exc.socket_path), file=sys.stderr)
        return EXIT_DAEMON_UNREACHABLE
    except PermissionDenied as exc:
        print(PERMISSION_DENIED_MESSAGE.format(path=exc.socket_path), file=sys.stderr)
        return EXIT_DAEMON_UNREACHABLE
    except DaemonTimeout as exc:
        print(f"koordctl: {exc}", file=sys.stderr)
        return EXIT_DAEMON_UNREACHABLE
    except ApiError as exc:
        print(f"koordctl: error: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    except (KoordletError, OSError) as exc:
        print(f"koordctl: error: {exc}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
