"""``koordlet``: the node agent's command line.

``koordlet run --standalone`` starts the agent on a plain host: it reports what the host supports (kernel
feature probes, node information, the C core's capabilities), then collects usage, keeps history, serves
Prometheus metrics and writes NodeMetric locally until SIGTERM or SIGINT, and exits 0 after a clean stop.
Without ``--standalone`` the pods come from kubelet's ``/pods`` instead of the host.  This module parses the
arguments and loads the configuration; :mod:`koordlet.daemon` does the rest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from koordlet.config import add_flags, flags_from_args, load
from koordlet.config.flags import new_parser
from koordlet.config.load import embedded_standalone_default
from koordlet.daemon.run import EXIT_INTERRUPTED, EXIT_USAGE, run
from koordlet.errors import ConfigError
from koordlet.log import setup_logging

log = logging.getLogger("koordlet")


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("koordlet", "Koordinator-compatible node agent: co-locates latency-sensitive services "
                        "and best-effort batch work on one host.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_command = commands.add_parser(
        "run",
        help="run the agent",
        description="Run the agent until SIGTERM or SIGINT. Flags override the --config file, which overrides "
        "the defaults (with --standalone: the embedded standalone default, koordlet/config/standalone.yaml). "
        "Without --standalone, pods come from kubelet.",
    )
    run_command.add_argument("--config", metavar="FILE", default=None,
                     help="YAML file: the options below in camelCase, grouped as in the docs (e.g. kubelet: "
                     "{syncIntervalSeconds: 10})")
    add_flags(run_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config_file = Path(args.config).resolve() if args.config is not None else None
    flags = flags_from_args(args)
    try:
        standalone = str(flags.get("standalone", "false")).lower() == "true"
        config = load(config_file, flags, embedded_standalone_default() if standalone else None)
    except ConfigError as exc:
        print(f"koordlet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_level, config.log_format)  # type: ignore[arg-type]
    try:
        return run(config, config_file)
    except KeyboardInterrupt:
        # SIGINT before the daemon's own handlers are installed (during the host report).
        log.info("koordlet stopped", extra={"reason": "interrupted during start-up"})
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
