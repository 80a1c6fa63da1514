"""How gRPC core polls the proxy's sockets; imported by the command line before anything imports ``grpc``.

gRPC 1.6x+ runs its client and server endpoints on the EventEngine, whose own thread pool waits on the
sockets and hands each event to the thread that polls the completion queue.  A relay sits on two sockets per
call (kubelet's and the runtime's), so that hand-off happens twice over: measured on the proxy, 27 context
switches per relayed unary call against 17 with the endpoints polled by the completion-queue threads
themselves (gRPC's iomgr poller, still built in and selected by turning the EventEngine endpoint
experiments off), and ~15% less CPU per relayed call (tests/bench/bench_runtimeproxy.py).

Only the proxy's own process is configured: :func:`configure` sets the variable gRPC core reads once, when
``grpc`` is imported, and only when the operator has not set ``GRPC_EXPERIMENTS`` already (theirs wins).  A gRPC
release that no longer knows an experiment logs "Unknown experiment" once and keeps its default.
"""

from __future__ import annotations

import os
import sys

EXPERIMENTS_VARIABLE = "GRPC_EXPERIMENTS"
ENDPOINTS_POLLED_BY_CALLERS = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"
"""Client channels, listeners and other endpoints on the iomgr poller rather than EventEngine threads."""


def configure(environ: dict[str, str] | None = None) -> bool:
    """Select the caller-polled endpoints unless ``GRPC_EXPERIMENTS`` is set or ``grpc`` is imported already
    (gRPC core has read the variable then: a process that used gRPC before keeps what it has); True when
    this set it.  The command line calls it first thing."""
    env = os.environ if environ is None else environ
    if EXPERIMENTS_VARIABLE in env or "grpc" in sys.modules:
        return False
    env[EXPERIMENTS_VARIABLE] = ENDPOINTS_POLLED_BY_CALLERS
    return True
