"""The debug API's contract, shared by the server (:mod:`koordlet.debugapi.server`) and ``koordctl``.

Transport: HTTP/1.1 on the unix socket :data:`DEFAULT_SOCKET` (``--debug-socket``; mode 0600, root only).
Every answer is a JSON object; errors are ``{"error": "<what was wrong>"}`` with status 400 (bad query), 404
(unknown path, pod or container) or 500.  Times are Unix seconds (floats); CPU in cores, memory in bytes.

Read-only endpoints (GET):

``/v1/status``
    ``{"version", "pid", "node", "mode": "standalone"|"kubernetes", "started_at", "uptime_seconds",
    "components": [{"name", "running": bool}], "feature_gates": {name: bool},
    "feature_gates_not_implemented": [name, ...] (gates this koordlet has no code for: always off, and
    naming one ``=true`` fails the start),
    "probes": [{"name", "supported": bool, "reason"}],
    "companion": {"address", "nodeslo_connected": bool, "reports_failing": bool} | null,
    "shadow": <the /v1/shadow document> | null}``
``/v1/pods``
    ``{"pods": [{"namespace", "name", "uid", "qos", "kube_qos", "priority_class", "priority", "phase",
    "source", "cgroup_dir", "containers": [{"name", "id", "cgroup_dir",
    "current": {resource: value}, "desired": {resource: value}}],
    "current": {resource: value}, "desired": {resource: value}}]}``
    ``current``: read now from the cgroup files (``cpu_shares``, ``cpu_cfs_quota``, ``cpu_cfs_period``,
    ``memory_limit``, ``cpuset_cpus``; a file that cannot be read is left out); ``desired``: the last value
    koordlet's resource executor wrote to that file (left out when it never wrote it).
``/v1/metrics?window=<seconds>`` (default 60)
    ``{"window_seconds", "node": {"cpu_cores", "memory_bytes"} | null,
    "pods": [{"namespace", "name", "qos", "cpu_cores", "memory_bytes"}]}`` - averages over the window from the
    metric cache; a series without samples in the window is null.
``/v1/slo``
    ``{"origin", "generation", "rejected": str | null, "spec": <NodeSLO spec JSON>}``
``/v1/qos``
    ``{"strategies": [{"name", "enabled": bool, "interval_seconds", "shadow": bool,
    "last": <Decision.to_json()> | null}], "history": [<Decision.to_json()>, ...]}`` (history: the decisions that
    acted, oldest first).  A decision holds ``"shadow": bool`` and ``"intended": [str]``: in shadow mode, what
    the round would have done ("would set <file> to <value> because <owner>", "would evict <pod> because ...").
``/v1/shadow``
    ``{"default": bool, "strategies": {name: bool} (the strategies' own settings), "effective": {name: bool},
    "hooks": {"default": bool, "hooks": {name: bool}, "effective": {...}} | null}``;
    404 without a QoS manager.  A hook call of ``/v1/hooks`` holds ``"intended"``: what hooks in shadow mode
    would have set, which the runtime's answer did not carry.
``/v1/hooks?limit=<n>`` (default 100)
    ``{"hooks": [<hook names in order>], "calls": [{"at", "stage", "pod", "container", "transport",
    "duration_ms", "ok": bool, "errors": [str], "adjustment": {field: value}}]}`` (newest last)
``/v1/evictions?limit=<n>`` (default 100)
    ``{"evictions": [{"at", "pod", "reason", "message", "outcome", "backend"}]}`` (newest last)
``/v1/cgroup?pod=<namespace>/<name>[&container=<name>]``
    ``{"pod", "container": str | null, "dir", "files": {"<subsystem>/<file>": "<content>"}}`` - every readable
    regular file of the cgroup directory in each hierarchy (content capped at 64 KiB per file).
``/v1/probes``
    ``{"probes": [{"name", "supported": bool, "reason"}]}``
``/v1/profile?seconds=<s>[&interval_ms=<ms>]`` (default 10 s every 10 ms; at most 120 s)
    Answers after ``seconds``: ``{"seconds", "interval_seconds", "samples", "cpu_seconds",
    "collapsed": {"thread;outer;...;inner": <CPU microseconds>}, "top_self": [{"function", "cpu_seconds"}],
    "top_total": [...]}`` - where the daemon's CPU went, per Python stack (:mod:`koordlet.debugapi.profiler`).
    409 while another profile runs.

Admin endpoints (POST, explicit actions only):

``/v1/admin/log-level`` with body ``{"level": "debug"|"info"|"warning"|"error"}`` -> ``{"level"}``
``/v1/admin/shadow`` with body ``{"strategy": <name> | null, "shadow": true | false | null}`` -> the
    ``/v1/shadow`` document: puts one strategy (null: the default of every strategy without a setting of its own)
    in shadow or active mode, from its next round on; ``"shadow": null`` drops the strategy's own setting.
    ``{"hook": <name> | null, "shadow": ...}`` does the same for runtime hooks, from their next call on.
"""

from __future__ import annotations

from typing import Final

from koordlet.config.flags import DEFAULT_DEBUG_SOCKET

DEFAULT_SOCKET: Final = DEFAULT_DEBUG_SOCKET

SOCKET_PATH_MAX: Final = 107
"""``sun_path`` holds 108 bytes, the terminating NUL included."""


def default_socket(euid: int, state_dir: str) -> str:
    """Where the socket is when nothing says otherwise: :data:`DEFAULT_SOCKET` for root; for another user (who
    cannot write ``/var/run``) ``<state dir>/debug.sock``, or "" (no socket) when that path is too long."""
    if euid == 0:
        return DEFAULT_SOCKET
    path = f"{state_dir.rstrip('/')}/debug.sock"
    return path if len(path.encode()) <= SOCKET_PATH_MAX else ""


SOCKET_MODE: Final = 0o600

STATUS: Final = "/v1/status"
PODS: Final = "/v1/pods"
METRICS: Final = "/v1/metrics"
SLO: Final = "/v1/slo"
QOS: Final = "/v1/qos"
HOOKS: Final = "/v1/hooks"
EVICTIONS: Final = "/v1/evictions"
CGROUP: Final = "/v1/cgroup"
PROBES: Final = "/v1/probes"
PROFILE: Final = "/v1/profile"
SHADOW: Final = "/v1/shadow"
ADMIN_LOG_LEVEL: Final = "/v1/admin/log-level"
ADMIN_SHADOW: Final = "/v1/admin/shadow"

DEFAULT_METRICS_WINDOW_SECONDS: Final = 60
DEFAULT_LIMIT: Final = 100
CGROUP_FILE_CAP_BYTES: Final = 64 * 1024
