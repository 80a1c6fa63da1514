"""koordlet's configuration: nested frozen dataclasses, one group per subsystem.

Each leaf field carries its help text, its command-line flag (Koordinator's name where one exists) and a
check; :mod:`koordlet.config.load` builds the flags, reads the YAML (keys are the field names in camelCase,
groups nest) and validates both from these declarations, so flags, file and code cannot drift apart.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from koordlet.config.flags import DEFAULT_DEBUG_SOCKET

Check = Callable[[Any], str | None]


def opt(default: Any, help: str, *, flag: str | None = None, check: Check | None = None,
        duration: bool = False) -> Any:
    """A leaf option. ``duration``: the flag/YAML also take Go-style durations ("10s", "12h")."""
    meta = {"help": help, "flag": flag, "check": check, "duration": duration}
    if isinstance(default, dict):
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=meta)
    return field(default=default, metadata=meta)


def positive(value: Any) -> str | None:
    return None if value > 0 else f"must be > 0, got {value!r}"


def at_least(low: float) -> Check:
    def check(value: Any) -> str | None:
        return None if value >= low else f"must be >= {low}, got {value!r}"
    return check


def port(value: Any) -> str | None:
    return None if 0 < value < 65536 else f"must be 1..65535, got {value!r}"


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"
    return check


def unix_socket(value: Any) -> str | None:
    text = str(value)
    if not text:
        return None
    if not text.startswith("/"):
        return f"must be an absolute path (or empty: off), got {text!r}"
    # sockaddr_un.sun_path holds 108 bytes, the terminating NUL included (unix(7)).
    if len(os.fsencode(text)) > 107:
        return f"must be at most 107 bytes long (unix(7) sun_path), got {len(os.fsencode(text))}"
    return None


def listen_addr(value: Any) -> str | None:
    _host, sep, port_text = str(value).rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        return f"must be [host]:port, got {value!r}"
    return None


def _default_node_name() -> str:
    # Koordinator's koordlet requires NODE_NAME (the DaemonSet sets it from spec.nodeName).
    return os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class HostConfig:
    cgroup_root_dir: str = opt("/sys/fs/cgroup", "mount point of the cgroup hierarchies", flag="--cgroup-root-dir")
    proc_root_dir: str = opt("/proc", "the host's procfs", flag="--proc-root-dir")
    sys_root_dir: str = opt("/sys", "the host's sysfs", flag="--sys-root-dir")
    var_run_root_dir: str = opt("/var/run", "the host's /var/run (runtime sockets)", flag="--var-run-root-dir")
    var_lib_kubelet_root_dir: str = opt("/var/lib/kubelet", "kubelet's root directory (kubelet --root-dir) as "
                                                            "koordlet sees it: its CPU manager's cpu_manager_state "
                                                            "names the CPUs the static policy pinned",
                                        flag="--var-lib-kubelet-dir")
    cgroup_kube_parent: str = opt("", "cgroup directory holding kubepods (kubelet --cgroup-root); empty: the "
                                      "hierarchy root", flag="--cgroup-kube-parent", check=lambda v: (
                                          f"must be relative without '..', got {v!r}"
                                          if v.startswith("/") or ".." in v.split("/") else None))


def quantity_or_empty(value: Any) -> str | None:
    from koordlet.apis.quantity import parse_quantity
    from koordlet.errors import ParseError

    if value == "":
        return None
    try:
        parse_quantity(value)
    except ParseError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class NodeConfig:
    reserved_cpu: str = opt("", "CPU kept back from pods on a plain host (kubelet's kube+system reserved comes "
                                "from /configz)", check=quantity_or_empty)
    reserved_memory: str = opt("", "memory kept back from pods on a plain host", check=quantity_or_empty)


@dataclass(frozen=True)
class ServerConfig:
    addr: str = opt(":9316", "listen address of the Prometheus endpoint (/metrics)", flag="--addr",
                    check=listen_addr)
    debug_socket: str = opt(DEFAULT_DEBUG_SOCKET, "unix socket of the local debug API koordctl reads (mode 0600, "
                                                  "root only); empty: off", flag="--debug-socket", check=unix_socket)


@dataclass(frozen=True)
class KubeletConfig:
    address: str = opt("127.0.0.1", "kubelet's address", flag="--kubelet-addr")
    port: int = opt(10250, "kubelet's HTTPS port", flag="--kubelet-port", check=port)
    scheme: str = opt("https", "http only for a kubelet read-only port", flag="--kubelet-scheme",
                      check=one_of("https", "http"))
    token_file: str = opt("/var/run/secrets/kubernetes.io/serviceaccount/token", "bearer token sent to kubelet",
                          flag="--kubelet-token-file")
    ca_file: str = opt("", "CA bundle that signed kubelet's serving certificate (empty: system trust)",
                       flag="--kubelet-ca-file")
    insecure_tls: bool = opt(False, "skip verifying kubelet's certificate (testing only)",
                             flag="--kubelet-insecure-tls")
    sync_interval_seconds: float = opt(10.0, "how often the pod list is fetched", flag="--kubelet-sync-interval",
                                       check=positive, duration=True)
    sync_timeout_seconds: float = opt(3.0, "timeout of one request to kubelet", flag="--kubelet-sync-timeout",
                                      check=positive, duration=True)


@dataclass(frozen=True)
class CollectorConfig:
    res_used_interval_seconds: float = opt(1.0, "node/pod/container usage collection interval",
                                           flag="--collect-res-used-interval-seconds", check=positive, duration=True)
    memory_interval_seconds: float = opt(5.0, "pod/container memory.stat collection interval: on cgroup v1 a "
                                              "memory.stat read costs ~17 us in the kernel, 1.7% of a core per "
                                              "second for 1,000 containers, so it is read less often than CPU",
                                         flag="--collect-memory-interval-seconds", check=positive, duration=True)
    sys_metric_outdated_seconds: float = opt(10.0, "inputs older than this are ignored by derived series",
                                             flag="--collect-sys-metric-outdated-interval", check=positive,
                                             duration=True)
    node_cpu_info_interval_seconds: float = opt(60.0, "node CPU topology refresh interval",
                                                flag="--collect-node-cpu-info-interval-seconds", check=positive,
                                                duration=True)
    psi_interval_seconds: float = opt(10.0, "PSI collection interval (gate PSICollector)",
                                      flag="--psi-collector-interval-seconds", check=positive, duration=True)
    cpi_interval_seconds: float = opt(60.0, "CPI collection interval (gate CPICollector)",
                                      flag="--cpi-collector-interval-seconds", check=positive, duration=True)
    cpi_time_window_seconds: float = opt(10.0, "how long CPI counters run per collection",
                                         flag="--collect-cpi-timewindow-seconds", check=positive, duration=True)


@dataclass(frozen=True)
class PredictionFlags:
    """Peak prediction (upstream ``prediction.Config`` and its ``--prediction-*`` flags, same defaults)."""

    checkpoint_filepath: str = opt("", "directory of the prediction checkpoints (empty: "
                                       "<stateDir>/prediction-checkpoints)", flag="--prediction-checkpoint-filepath")
    cold_start_seconds: float = opt(24 * 3600.0, "a pod younger than this has no prediction (its request is its "
                                                 "peak)", flag="--prediction-cold-start-duration", check=positive,
                                    duration=True)
    safety_margin_percent: int = opt(10, "headroom above the predicted peak", check=at_least(0),
                                     flag="--prediction-safety-margin-percent")
    memory_half_life_seconds: float = opt(24 * 3600.0, "memory histogram decay half-life",
                                          flag="--prediction-memory-histogram-decay-halflife", check=positive,
                                          duration=True)
    cpu_half_life_seconds: float = opt(12 * 3600.0, "CPU histogram decay half-life",
                                       flag="--prediction-cpu-histogram-decay-halflife", check=positive,
                                       duration=True)
    training_interval_seconds: float = opt(60.0, "period of the model update", check=positive, duration=True,
                                           flag="--prediction-training-interval")
    model_expiration_seconds: float = opt(30 * 60.0, "a model not updated for this long is dropped", check=positive,
                                          flag="--prediction-model-expiration-duration", duration=True)
    checkpoint_interval_seconds: float = opt(10 * 60.0, "interval between checkpoints of a model", check=positive,
                                             flag="--prediction-model-checkpoint-interval", duration=True)
    checkpoint_max_per_step: int = opt(12, "most models checkpointed per training round", check=positive,
                                       flag="--prediction-model-checkpoint-max-per-step")


@dataclass(frozen=True)
class MetricCacheConfig:
    path: str = opt("", "SQLite file for history and KV (empty: <stateDir>/metrics.db)", flag="--tsdb-path")
    retention_seconds: float = opt(12 * 3600.0, "history kept on disk", flag="--tsdb-retention-duration",
                                   check=positive, duration=True)
    max_disk_bytes: int = opt(100 * 1024 * 1024, "disk cap of the history; oldest goes first",
                              check=at_least(1024 * 1024))
    flush_interval_seconds: float = opt(30.0, "how often new samples are written to disk", check=positive,
                                        duration=True)
    pod_window_seconds: float = opt(330.0, "seconds of pod/container usage kept in memory (at least the "
                                           "NodeMetric aggregate duration; older windows read from disk)",
                                    check=at_least(60), duration=True)
    volatile_window_seconds: float = opt(120.0, "seconds of per-pod throttling, PSI and CPI kept (memory only)",
                                         check=at_least(30), duration=True)
    node_window_seconds: float = opt(1860.0, "seconds of node samples kept in memory (30-minute aggregates)",
                                     check=at_least(60), duration=True)


@dataclass(frozen=True)
class NodeMetricConfig:
    aggregate_duration_seconds: float = opt(300.0, "window of the reported averages (metricAggregateDurationSeconds)",
                                            check=at_least(60), duration=True)
    report_interval_seconds: float = opt(60.0, "how often NodeMetric is built and reported",
                                         check=at_least(30), duration=True)


@dataclass(frozen=True)
class WorkloadConfig:
    """A workload of a plain host, treated like a pod (namespace ``standalone``)."""

    name: str = opt("", "unique name")
    cgroup_path: str = opt("", "cgroup directory relative to the hierarchy roots (or use systemdUnit)")
    systemd_unit: str = opt("", "a systemd unit; its cgroup is system.slice/<unit>")
    qos_class: str = opt("LS", "LSE, LSR, LS, BE or SYSTEM", check=one_of("LSE", "LSR", "LS", "BE", "SYSTEM"))
    priority: int = opt(9000, "priority (koord-prod 9000-9999, koord-batch 5000-5999, ...)")


@dataclass(frozen=True)
class QoSManagerConfig:
    """The QoS manager's strategies, the resource executor and eviction (Koordinator's qosmanager flags)."""

    nodeslo_file: str = opt("", "NodeSLO for this node when there is no companion: a NodeSLO object or spec, or a "
                                "slo-controller-config ConfigMap (YAML or JSON); re-read when it changes; empty: "
                                "Koordinator's defaults (suppress and eviction off)", flag="--nodeslo-file")
    reconcile_interval_seconds: float = opt(1.0, "interval of cpuburst, cgreconcile and sysreconcile",
                                            flag="--reconcile-interval-seconds", check=positive, duration=True)
    cpu_suppress_interval_seconds: float = opt(1.0, "interval of cpusuppress", flag="--cpu-suppress-interval-seconds",
                                               check=positive, duration=True)
    cpu_evict_interval_seconds: float = opt(1.0, "interval of cpuevict", flag="--cpu-evict-interval-seconds",
                                            check=positive, duration=True)
    memory_evict_interval_seconds: float = opt(1.0, "interval of memoryevict", flag="--memory-evict-interval-seconds",
                                               check=positive, duration=True)
    cpu_evict_cool_time_seconds: float = opt(20.0, "no CPU eviction sooner than this after the last one",
                                             flag="--cpu-evict-cool-time-seconds", check=at_least(0), duration=True)
    memory_evict_cool_time_seconds: float = opt(4.0, "no memory eviction sooner than this after the last one",
                                                flag="--memory-evict-cool-time-seconds", check=at_least(0),
                                                duration=True)
    be_min_cpuset_cpus: int = opt(2, "fewest CPUs the cpuset suppress policy leaves BE (Koordinator's constant is 2; "
                                     "1 lets a 2-CPU host suppress at all)", flag="--be-min-cpuset-cpus",
                                  check=at_least(1))
    memory_evict_base: str = opt("node", "what memory eviction compares with its threshold: node (MemTotal and the "
                                         "node's usage) or kubepods (the kubepods cgroup's limit and usage, for hosts "
                                         "whose pods live under a memory-limited parent)", flag="--memory-evict-base",
                                 check=one_of("node", "kubepods"))
    evictor: str = opt("cri", "how pods are evicted: cri (StopContainer on the runtime socket), kill (SIGKILL to "
                              "the pod cgroup's processes, for plain hosts), api (the companion's Eviction API) or "
                              "dry-run (every eviction as in shadow mode: recorded, not launched)", flag="--evictor",
                        check=one_of("cri", "kill", "api", "dry-run"))
    only_evict_by_api: bool = opt(False, "evict only through the Kubernetes Eviction API (same as --evictor=api)",
                                  flag="--only-evict-by-api")
    runtime_endpoint: str = opt("unix:///var/run/containerd/containerd.sock",
                                "CRI runtime endpoint used by the cri evictor", flag="--runtime-endpoint")
    cri_timeout_seconds: float = opt(5.0, "deadline of one CRI StopContainer call", check=positive, duration=True)
    resource_force_update_seconds: float = opt(60.0, "after this long an unchanged cgroup value is read back and "
                                                     "rewritten when it was changed behind koordlet's back (0: "
                                                     "every round writes)",
                                               flag="--resource-force-update-seconds", check=at_least(0),
                                               duration=True)
    net_interface: str = opt("", "interface the tc network QoS shapes (empty: the one holding the default route)",
                             flag="--net-interface")
    terway_qos_dir: str = opt("/var/lib/terway/qos", "directory of the node and pod bandwidth files the Terway QoS "
                                                      "agent reads (netQOSPolicy terway-qos)",
                              flag="--terway-qos-dir")
    shadow: bool = opt(False, "shadow mode for every strategy: each decides as it would, and nothing is written "
                              "or evicted; the intended writes and evictions go to the audit log, to "
                              "koordlet_shadow_intended_total and to koordctl qos (koordctl shadow switches a "
                              "strategy at run time)", flag="--shadow")
    shadow_strategies: str = opt("", "strategies in shadow mode besides --shadow's (comma-separated names: "
                                     "cpuevict,memoryevict)", flag="--shadow-strategies")
    pressure_triggers: str = opt(
        # Memory: lmkd's partial-stall threshold (ro.lmk.psi_partial_stall_ms: 70 ms in 1 s) on the node and on
        # kubepods.  CPU: BE tasks waiting for a CPU 60% of a second (systemd-oomd's DefaultMemoryPressureLimit,
        # 60%, applied to the tier cpuevict protects).
        "node memory some 70000 1000000; kubepods memory some 70000 1000000; besteffort cpu some 600000 1000000",
        "PSI triggers that wake memoryevict (memory) or cpuevict (cpu) for a round at once, ';'-separated "
        "'<node|kubepods|besteffort> <memory|cpu> <some|full> <stall_us> <window_us>'; empty: the strategies only "
        "poll.  Without CAP_SYS_RESOURCE a window is widened to a multiple of 2 s", flag="--pressure-triggers")
    pressure_wake_debounce_seconds: float = opt(0.5, "shortest time between two rounds of a strategy that pressure "
                                                     "triggers woke (a storm of firings is one round)",
                                                flag="--pressure-wake-debounce-seconds", check=at_least(0),
                                                duration=True)
    audit_dir: str = opt("", "directory of the write and eviction audit log (empty: <stateDir>/audit)",
                         flag="--audit-log-dir")
    audit_max_bytes: int = opt(10 * 1024 * 1024, "size at which the audit log rotates", check=positive)
    audit_max_files: int = opt(3, "rotated audit files kept", check=at_least(1))


_HOOK_STAGES = ("PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PostStartContainer",
                "PostStopContainer", "PostStopPodSandbox", "PreUpdateContainerResources", "PreRemovePodSandbox")


def _stages(value: Any) -> str | None:
    unknown = [s for s in split_list(value) if s not in _HOOK_STAGES]
    return f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(_HOOK_STAGES)}" if unknown else None


def split_list(value: str) -> list[str]:
    """A comma-separated option as its non-empty, stripped items."""
    return [item.strip() for item in str(value).split(",") if item.strip()]


@dataclass(frozen=True)
class RuntimeHooksConfig:
    """Runtime hooks: the NRI plugin, the RuntimeHookService server and the reconciler (Koordinator's
    ``--runtime-hooks-*`` and ``--enable-nri-runtime-hook`` flags)."""

    enable_nri: bool = opt(True, "register as an NRI plugin when the runtime's NRI socket exists",
                           flag="--enable-nri-runtime-hook")
    nri_socket_path: str = opt("/var/run/nri/nri.sock", "the runtime's NRI socket",
                               flag="--runtime-hooks-nri-socket-path")
    nri_plugin_idx: str = opt("00", "NRI plugin index (two digits: the order among plugins)",
                              flag="--runtime-hooks-nri-plugin-index",
                              check=lambda v: None if len(str(v)) == 2 and str(v).isdigit()
                              else f"must be two digits, got {v!r}")
    enable_server: bool = opt(True, "serve RuntimeHookService for koord-runtime-proxy",
                              flag="--enable-runtime-hook-server")
    server_socket: str = opt("/var/run/koordlet/koordlet.sock", "unix socket of the RuntimeHookService server "
                                                               "(mode 0600)", flag="--runtime-hooks-addr")
    host_endpoint: str = opt("", "the server socket as the runtime proxy sees it, written to the registration "
                                 "file (empty: the socket path)", flag="--runtime-hooks-host-endpoint")
    registration_dir: str = opt("/etc/runtime/hookserver.d", "directory of hook-server registration files read "
                                                             "by koord-runtime-proxy (empty: do not register)",
                                flag="--runtime-hooks-registration-dir")
    failure_policy: str = opt("Ignore", "what the runtime proxy does when the server fails: Ignore or Fail",
                              flag="--runtime-hooks-failure-policy", check=one_of("Ignore", "Fail"))
    plugin_failure_policy: str = opt("Ignore", "a failing hook: Ignore (log, run the next) or Fail (abort the "
                                               "stage, the runtime sees the error)",
                                     flag="--runtime-hooks-plugin-failure-policy", check=one_of("Ignore", "Fail"))
    disable_stages: str = opt("", "comma-separated stages whose hooks do not run (e.g. "
                                  "PreUpdateContainerResources)", flag="--runtime-hooks-disable-stages",
                              check=_stages)
    reconcile_interval_seconds: float = opt(10.0, "re-apply the hooks to existing pods and containers this often "
                                                  "(and on every pod change)",
                                            flag="--runtime-hooks-reconcile-interval", check=positive,
                                            duration=True)
    shadow: bool = opt(False, "shadow mode for every hook: each decides as it would, and the runtime gets no "
                              "adjustment from it and nothing is written; what it would have set is recorded "
                              "(koordctl hooks, the audit log, koordlet_shadow_intended_total)",
                       flag="--runtime-hooks-shadow")
    shadow_hooks: str = opt("", "hooks in shadow mode besides --runtime-hooks-shadow's (comma-separated names)",
                            flag="--runtime-hooks-shadow-hooks")


@dataclass(frozen=True)
class CompanionConfig:
    """The link to koord-companion (NodeMetric up, NodeSLO down); empty address: no companion (standalone,
    or a node that takes its NodeSLO from ``qos.nodesloFile``)."""

    address: str = opt("", "koord-companion's gRPC address (host:port, or unix:/path); empty: none",
                       flag="--companion-address")
    token_file: str = opt("", "file holding the bearer token presented to the companion: in a cluster the "
                              "koordlet's projected service-account token of audience koord-companion "
                              "(/var/run/secrets/koordinator.sh/companion/token), which binds this koordlet to "
                              "its node; re-read when it changes (kubelet rotates it); empty: none",
                          flag="--companion-token-file")
    ca_file: str = opt("", "CA bundle to verify the companion's TLS certificate; empty: plaintext",
                       flag="--companion-ca-file")
    nodeslo_cache: str = opt("", "where the last good NodeSLO from the companion is kept for restarts while "
                                 "it is away (empty: <stateDir>/nodeslo-companion.json)",
                             flag="--companion-nodeslo-cache")


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespaces(value: Any) -> str | None:
    """A comma-separated list of namespace names (or ``*``: every namespace)."""
    bad = [n for n in split_list(value) if n != "*" and not (len(n) <= 63 and _NAMESPACE.fullmatch(n))]
    return f"not namespace names (DNS-1123 labels) or '*': {', '.join(map(repr, bad))}" if bad else None


def namespaces_override(value: Any) -> str | None:
    """Empty (inherit), ``-`` (no namespace) or a namespace list."""
    return None if str(value).strip() in ("", "-") else namespaces(value)


@dataclass(frozen=True)
class TenantConfig:
    """Which namespaces may use the pod labels and annotations that grant privileges (pods name their own
    labels and annotations, so a tenant could otherwise grant itself anything koordlet honours).  A refused
    key is ignored (the pod is handled as if it did not carry it), logged once per pod and listed by
    ``koordctl pods``.  Per-key lists: empty takes ``privilegedNamespaces``, ``-`` allows no namespace,
    ``*`` every namespace (Koordinator's behaviour); a list replaces ``privilegedNamespaces`` for that key.
    Independent of the NodeSLO: the node's operator decides it, not whoever writes the cluster's config."""

    privileged_namespaces: str = opt("kube-system", "comma-separated namespaces whose pods may use every "
                                                    "privileged key ('*': every namespace)",
                                     flag="--tenant-privileged-namespaces", check=namespaces)
    qos_system_namespaces: str = opt("", "namespaces whose pods may label themselves koordinator.sh/qosClass="
                                         "SYSTEM (empty: privilegedNamespaces, '-': none)",
                                     flag="--tenant-qos-system-namespaces", check=namespaces_override)
    qos_lse_namespaces: str = opt("", "namespaces whose pods may label themselves koordinator.sh/qosClass=LSE "
                                      "(empty: privilegedNamespaces, '-': none)", flag="--tenant-qos-lse-namespaces",
                                  check=namespaces_override)
    oom_score_adj_namespaces: str = opt("", "namespaces whose pods' koordinator.sh/oom-score-adj(-spec) may go "
                                            "below the value kubelet gives their QoS class (empty: "
                                            "privilegedNamespaces, '-': none)",
                                        flag="--tenant-oom-score-adj-namespaces", check=namespaces_override)
    eviction_opt_out_namespaces: str = opt("", "namespaces whose pods' koordinator.sh/eviction-policy may keep "
                                               "koordlet's evictions off them and whose positive "
                                               "koordinator.sh/eviction-priority may put them behind other "
                                               "pods (empty: privilegedNamespaces, '-': none)",
                                           flag="--tenant-eviction-opt-out-namespaces", check=namespaces_override)
    skip_hook_server_namespaces: str = opt("", "namespaces whose pods may carry runtimeproxy.koordinator.sh/"
                                               "skip-hookserver (empty: privilegedNamespaces, '-': none)",
                                           flag="--tenant-skip-hook-server-namespaces", check=namespaces_override)
    pod_resctrl_closid_reserve: int = opt(1, "resctrl CLOSIDs kept free beyond the class groups (LSR, LS, BE) "
                                             "not yet made: no per-pod group (node.koordinator.sh/resctrl, LSR "
                                             "and LSE pods only) is made when it would eat into them",
                                          flag="--tenant-pod-resctrl-closid-reserve", check=at_least(0))


@dataclass(frozen=True)
class Config:
    """Everything ``koordlet run`` needs."""

    node_name: str = field(default_factory=_default_node_name,
                           metadata={"help": "this node's name (env NODE_NAME)", "flag": "--node-name"})
    standalone: bool = opt(False, "run without Kubernetes: workloads from config and the host", flag="--standalone")
    state_dir: str = opt("", "state kept across restarts (empty: /var/lib/koordlet as root, else "
                             "$XDG_STATE_HOME/koordlet)", flag="--state-dir")
    log_format: str = opt("text", "text or json", flag="--log-format", check=one_of("text", "json"))
    log_level: str = opt("info", "debug, info, warning, error or critical", flag="--log-level",
                         check=one_of("debug", "info", "warning", "error", "critical"))
    feature_gates: Mapping[str, bool] = opt({}, "Name=true|false overrides (AllAlpha, AllBeta too); a gate this "
                                            "project does not implement (koordctl status) refuses the start",
                                            flag="--feature-gates")
    host: HostConfig = field(default_factory=HostConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    kubelet: KubeletConfig = field(default_factory=KubeletConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    metric_cache: MetricCacheConfig = field(default_factory=MetricCacheConfig)
    node_metric: NodeMetricConfig = field(default_factory=NodeMetricConfig)
    prediction: PredictionFlags = field(default_factory=PredictionFlags)
    qos: QoSManagerConfig = field(default_factory=QoSManagerConfig)
    runtime_hooks: RuntimeHooksConfig = field(default_factory=RuntimeHooksConfig)
    tenant: TenantConfig = field(default_factory=TenantConfig)
    companion: CompanionConfig = field(default_factory=CompanionConfig)
    workloads: tuple[WorkloadConfig, ...] = opt((), "standalone: workloads of this host (name, "
                                                    "cgroupPath or systemdUnit, qosClass, priority)")
    discover_kubepods: bool = opt(True, "standalone: also take pods from a kubepods tree found on the host",
                                  flag="--discover-kubepods")
