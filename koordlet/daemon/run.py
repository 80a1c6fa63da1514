"""``koordlet run`` once the configuration is loaded and logging set up: report the host, build the agent,
run it until asked to stop, and say why it stopped (the exit code)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from koordlet.config.flags import default_state_dir
from koordlet.config.types import Config
from koordlet.daemon.lifecycle import ComponentFailed, Daemon
from koordlet.errors import ConfigError, KoordletError, NativeBuildMismatch
from koordlet.system.validators import format_cpulist
from koordlet.version import __version__

if TYPE_CHECKING:
    from koordlet.system.node import NodeInfo
    from koordlet.system.probes import ProbeResult

log = logging.getLogger("koordlet")

# Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration (argparse's own code).
EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


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


def report_host(config: Config) -> tuple[NodeInfo, list[ProbeResult]]:
    """Logs what this host offers, read through the C core, and returns the node's facts and which
    capabilities the probes found (probe name -> supported).

    Raises NativeBuildMismatch when the C core is missing or stale, KoordletError/OSError when the host
    trees cannot be read.
    """
    # Imported here so that --help/--version work even where the C core is not built.
    from koordlet import native
    from koordlet.daemon.agent import host_paths
    from koordlet.system.node import read_node_info
    from koordlet.system.probes import REQUIRED_PROBES, probe_all

    paths = host_paths(config)
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
    node = read_node_info(paths, native)
    log.info("node info", extra=node_info_fields(node))
    probes = probe_all(paths, native)
    for probe in probes:
        required = probe.name in REQUIRED_PROBES and not probe.supported
        (log.error if required else log.info)(
            "host requirement not met" if required else "host capability",
            extra={"probe": probe.name, "supported": bool(probe.supported), "reason": probe.reason},
        )
    supported = sum(1 for p in probes if p.supported)
    log.info("host capabilities probed", extra={"supported": supported, "unsupported": len(probes) - supported})
    return node, probes


def run(config: Config, config_file: Path | None) -> int:
    """``koordlet run`` once logging is set up; returns the exit code."""
    began = time.monotonic()
    state_dir = Path(os.path.abspath(config.state_dir)) if config.state_dir else default_state_dir()
    log.info(
        "koordlet starting",
        extra={
            "version": __version__,
            "pid": os.getpid(),
            "mode": "standalone" if config.standalone else "kubernetes",
            "node": config.node_name,
            "config": str(config_file) if config_file else None,
            "state_dir": str(state_dir),
            "logs": "stderr",
        },
    )
    try:
        state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        log.error("cannot create the state directory", extra={"state_dir": str(state_dir), "error": str(exc)})
        return EXIT_FAILURE
    try:
        node, probes = report_host(config)
        from koordlet.daemon.agent import build_agent

        agent = build_agent(config, state_dir, node, {p.name: bool(p.supported) for p in probes}, probes)
    except NativeBuildMismatch as exc:
        log.error("C core unavailable", extra={"error": str(exc)})
        return EXIT_FAILURE
    except ConfigError as exc:
        log.error("invalid configuration", extra={"error": str(exc)})
        return EXIT_USAGE
    except (KoordletError, OSError) as exc:
        log.error("cannot read the host", extra={"error": str(exc)})
        return EXIT_FAILURE
    log.info("where things are", extra={
        "metrics_addr": config.server.addr,
        "metric_store": str(agent.cache.settings.path),
        "node_metric": str(state_dir / "nodemetric.json"),
        "logs": "stderr",
        "cgroup_driver": agent.driver.driver.value,
        "collectors": agent.advisor.collectors,
    })

    daemon = Daemon(agent.components)
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
