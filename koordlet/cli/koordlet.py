"""``koordlet``: the node agent's command line.

``koordlet run --standalone`` starts the agent on a plain host: it reports what the host supports (kernel
feature probes, node information, the C core's capabilities), then runs its components until SIGTERM or
SIGINT and exits 0 after a clean stop.  Kubernetes (DaemonSet) mode is not available in this release and
says so instead of pretending.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from koordlet.cli.common import add_host_root_flags, add_version_flag
from koordlet.cli.daemon import Component, ComponentFailed, Daemon
from koordlet.cli.options import CONFIG_KEYS, RunOptions, resolve_run_options
from koordlet.errors import ConfigError, KoordletError, NativeBuildMismatch
from koordlet.log import FORMATS, LEVELS, setup_logging
from koordlet.system.validators import format_cpulist
from koordlet.version import __version__

if TYPE_CHECKING:
    from koordlet.system.node import NodeInfo

log = logging.getLogger("koordlet")

# Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration (argparse's own code).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koordlet",
        description="Koordinator-compatible node agent: co-locates latency-sensitive services and best-effort "
        "batch work on one host.",
    )
    add_version_flag(parser, "koordlet")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run",
        help="run the agent",
        description="Run the agent until SIGTERM or SIGINT. Flags override the --config file.",
        epilog=f"--config keys (YAML mapping): {', '.join(sorted(CONFIG_KEYS))}.",
    )
    run.add_argument(
        "--standalone",
        action="store_true",
        help="run without Kubernetes (plain host); the only mode available in this release",
    )
    run.add_argument("--config", metavar="FILE", default=None, help="YAML file with options (see below)")
    run.add_argument("--log-format", choices=FORMATS, default=None, help="log line format (default: text)")
    run.add_argument(
        "--log-level", choices=LEVELS, default=None, type=str.lower, help="lowest level logged (default: info)"
    )
    run.add_argument(
        "--state-dir",
        metavar="DIR",
        default=None,
        help="state kept across restarts (default: /var/lib/koordlet as root, else $XDG_STATE_HOME/koordlet "
        "or ~/.local/state/koordlet)",
    )
    add_host_root_flags(run)
    return parser


def node_info_fields(info: NodeInfo) -> dict[str, Any]:
    """The start-up log's summary of the node: counts and CPU lists, not one entry per CPU."""
    return {
        "kernel_release": info.kernel_release,
        "online_cpus": format_cpulist(info.online_cpus),
        "cpu_count": info.cpu_count,
        "core_count": info.core_count,
        "socket_count": info.socket_count,
        "numa_nodes": {str(n.node): format_cpulist(n.cpus) for n in info.numa_nodes},
        "memory_total_bytes": info.memory_total_bytes,
        "cgroup_mode": info.cgroup_mode.value,
        "cgroup_driver": info.cgroup_driver.value,
    }


def report_host(opts: RunOptions) -> Sequence[Component]:
    """Log what this host offers, read through the C core; return the components to run.

    Raises NativeBuildMismatch when the C core is missing or stale, KoordletError/OSError when the host
    trees cannot be read.
    """
    # Imported here so that --help/--version work even where the C core is not built.
    from koordlet import native
    from koordlet.system.hostpaths import HostPaths
    from koordlet.system.node import read_node_info
    from koordlet.system.probes import probe_all

    paths = HostPaths(**opts.host_roots)
    log.info(
        "host roots",
        extra={
            "cgroup_root": paths.cgroup_root,
            "proc_root": paths.proc_root,
            "sys_root": paths.sys_root,
            "var_run_root": paths.var_run_root,
        },
    )
    log.info(
        "native core",
        extra={
            "abi_version": native.ABI_VERSION,
            "build": native.BUILD_INFO,
            "has_perf": native.HAS_PERF,
            "has_sched_core": native.HAS_SCHED_CORE,
            "has_psi_trigger": native.HAS_PSI_TRIGGER,
        },
    )
    log.info("node info", extra=node_info_fields(read_node_info(paths)))
    probes = probe_all(paths)
    for probe in probes:
        log.info(
            "host capability",
            extra={"probe": probe.name, "supported": bool(probe.supported), "reason": probe.reason},
        )
    supported = sum(1 for p in probes if p.supported)
    log.info("host capabilities probed", extra={"supported": supported, "unsupported": len(probes) - supported})
    # The collectors, QoS strategies and hook servers join here as their issues land; until then the agent
    # runs no background work and only holds its place as a service.
    return ()


def run(opts: RunOptions) -> int:
    """``koordlet run`` once logging is set up; returns the exit code."""
    began = time.monotonic()
    if not opts.standalone:
        log.error(
            "only standalone mode is available in this release",
            extra={"hint": "koordlet run --standalone"},
        )
        return EXIT_USAGE
    log.info(
        "koordlet starting",
        extra={
            "version": __version__,
            "pid": os.getpid(),
            "mode": "standalone",
            "config": str(opts.config_file) if opts.config_file else None,
            "state_dir": str(opts.state_dir),
            "logs": "stderr",
        },
    )
    try:
        opts.state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        log.error("cannot create the state directory", extra={"state_dir": str(opts.state_dir), "error": str(exc)})
        return EXIT_FAILURE
    try:
        components = report_host(opts)
    except NativeBuildMismatch as exc:
        log.error("C core unavailable", extra={"error": str(exc)})
        return EXIT_FAILURE
    except ConfigError as exc:
        log.error("invalid configuration", extra={"error": str(exc)})
        return EXIT_USAGE
    except (KoordletError, OSError) as exc:
        log.error("cannot read the host", extra={"error": str(exc)})
        return EXIT_FAILURE

    daemon = Daemon(components)
    try:
        daemon.run(threading.Event())
    except ComponentFailed as exc:
        log.error("koordlet stopped", extra={"reason": daemon.stop_reason, "error": str(exc)})
        return EXIT_FAILURE
    log.info(
        "koordlet stopped",
        extra={"reason": daemon.stop_reason, "uptime_seconds": round(time.monotonic() - began, 3)},
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        opts = resolve_run_options(args)
    except ConfigError as exc:
        print(f"koordlet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(opts.log_level, opts.log_format)
    try:
        return run(opts)
    except KeyboardInterrupt:
        # SIGINT before the daemon's own handlers are installed (during the host report).
        log.info("koordlet stopped", extra={"reason": "interrupted during start-up"})
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
