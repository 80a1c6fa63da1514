"""Builds the daemon's components from the configuration, in Koordinator's start order:
metriccache -> statesinformer (+ kubelet pods) -> metricsadvisor -> nodemetric -> qosmanager -> metrics server,
then the debug API (started last, stopped first: it reads every other part)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koordlet import native, prediction
from koordlet.apis.extension import QoSClass
from koordlet.apis.nodemetric import MemoryCollectPolicy, NodeMetricCollectPolicy
from koordlet.apis.nodeslo import HostApplicationSpec
from koordlet.component import Component
from koordlet.config import gates
from koordlet.config.types import Config, QoSManagerConfig, RuntimeHooksConfig, split_list
from koordlet.debugapi import contract
from koordlet.debugapi.server import DebugServer, DebugSources, HostCgroups
from koordlet.errors import ConfigError, KoordletError
from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.isolation.netqos.policy import POLICY_TC, POLICY_TERWAY
from koordlet.isolation.resctrl.host import AMD_VENDOR_ID, read_vendor
from koordlet.metriccache import CacheSettings, MetricCache, names
from koordlet.metriccache.component import MetricCacheComponent
from koordlet.metrics import KoordletMetrics
from koordlet.metrics.kubelet import KubeletFailure
from koordlet.metrics.registry import MaxAges
from koordlet.metrics.server import MetricsServer
from koordlet.metricsadvisor.advisor import MetricsAdvisor
from koordlet.metricsadvisor.framework import Options
from koordlet.metricsadvisor.registry import build_collectors
from koordlet.qosmanager import framework as qos_framework
from koordlet.qosmanager.evictor import CompanionEvictionAPI, Evictions, build_backend
from koordlet.qosmanager.manager import QoSManager
from koordlet.qosmanager.pressure import PressureWatcher, has_cap_sys_resource, parse_triggers, pressure_path
from koordlet.qosmanager.reader import CgroupReader
from koordlet.qosmanager.registry import build_strategies, registry
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import AuditLog, ResourceExecutor, oomscore
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.resourceexecutor.netqos import NetQoS
from koordlet.resourceexecutor.resctrl import MB_MAX_AMD, MB_MAX_PERCENT, ResctrlExecutor
from koordlet.resourceexecutor.sysctl import ORIGINALS_FILE, SysctlExecutor
from koordlet.resourceexecutor.tc import TcNetQoS
from koordlet.resourceexecutor.terway import TerwayNetQoS
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.component import RuntimeHooks
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookCallRecorder, HookRunner, Stage, failure_policy
from koordlet.runtimehooks.hooks import build_hooks, hook_names
from koordlet.runtimehooks.reconciler import HostAppTarget
from koordlet.runtimehooks.tenant import TenantGate
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer import hostapps
from koordlet.statesinformer.cpubasicinfo import NormalizationRatio, read_cpu_basic_info
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.kubelet import KubeletClient, KubeletOptions
from koordlet.statesinformer.kubeletconfig import KubeletConfigSync
from koordlet.statesinformer.nodemetric import LocalNodeMetricSink, NodeMetricRunner
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder
from koordlet.statesinformer.pleg import Pleg
from koordlet.statesinformer.podsource import KubeletPodSource
from koordlet.statesinformer.topology import HostTopology, TopologySource
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver, DriverGuess, KubeQoS, detect_driver, qos_dir, under_parent
from koordlet.system.layout import CgroupLayout, detect_layout
from koordlet.system.node import NodeInfo, read_node_info
from koordlet.system.numamemory import read_numa_memory
from koordlet.system.probes import ProbeResult
from koordlet.version import __version__

if TYPE_CHECKING:
    from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
    from koordlet.statesinformer.companionslo import CompanionNodeSLOSource

log = logging.getLogger("koordlet")
PODS_PATH = "/pods/"
_DECODE_OUTCOMES = {"bad_json", "bad_podlist", "truncated", "too_large"}


def host_paths(config: Config) -> HostPaths:
    host = config.host
    return HostPaths(cgroup_root=host.cgroup_root_dir, proc_root=host.proc_root_dir, sys_root=host.sys_root_dir,
                     var_run_root=host.var_run_root_dir)


def cache_settings(config: Config, state_dir: Path) -> CacheSettings:
    mc, collector = config.metric_cache, config.collector
    node_window = max(mc.node_window_seconds, config.node_metric.aggregate_duration_seconds)
    pod_window = max(mc.pod_window_seconds, config.node_metric.aggregate_duration_seconds)
    return CacheSettings(
        path=Path(mc.path) if mc.path else state_dir / "metrics.db",
        interval_seconds=collector.res_used_interval_seconds,
        default_window_seconds=pod_window,
        windows={**dict.fromkeys(names.NODE_SERIES, node_window),
                 # Throttling and pressure matter for what happens now, not for the 5-minute reports.
                 **dict.fromkeys(names.VOLATILE_SERIES, mc.volatile_window_seconds)},
        intervals={names.POD_MEMORY_USAGE: collector.memory_interval_seconds,
                   names.CONTAINER_MEMORY_USAGE: collector.memory_interval_seconds,
                   names.POD_MEMORY_WITH_PAGE_CACHE: collector.memory_interval_seconds,  # usageWithPageCache
                   names.CONTAINER_MEMORY_WITH_PAGE_CACHE: collector.memory_interval_seconds,
                   names.NODE_PSI: collector.psi_interval_seconds, names.POD_PSI: collector.psi_interval_seconds,
                   names.CONTAINER_PSI: collector.psi_interval_seconds,
                   names.CONTAINER_CPI: collector.cpi_interval_seconds},
        retention_seconds=mc.retention_seconds,
        max_disk_bytes=mc.max_disk_bytes,
        volatile=names.VOLATILE_SERIES,
    )


def kubelet_observer(metrics: KoordletMetrics) -> Any:
    """Turns the kubelet client's (outcome, seconds) into the request histogram and failure counter."""

    def observe(outcome: str, seconds: float) -> None:
        if outcome == "ok":
            metrics.kubelet.observe(PODS_PATH, 200, seconds)
        elif outcome.startswith("http_") and outcome[5:].isdigit():
            metrics.kubelet.observe(PODS_PATH, int(outcome[5:]), seconds)
            metrics.kubelet.count_failure(PODS_PATH, KubeletFailure.STATUS)
        elif outcome in _DECODE_OUTCOMES:
            metrics.kubelet.observe(PODS_PATH, 200, seconds)
            metrics.kubelet.count_failure(PODS_PATH, KubeletFailure.DECODE)
        else:
            metrics.kubelet.count_failure(PODS_PATH, KubeletFailure.TRANSPORT)

    return observe


@dataclass
class Agent:
    """The assembled daemon: its components in start order, plus handles tests and koordctl read."""

    components: list[Component]
    cache: MetricCache
    informer: StatesInformer
    advisor: MetricsAdvisor
    metrics: KoordletMetrics
    server: MetricsServer
    driver: DriverGuess
    executor: ResourceExecutor
    qos: QoSManager
    hooks: RuntimeHooks
    debug: DebugServer | None = None
    """The debug API (None when ``server.debugSocket`` is empty)."""


def build_agent(config: Config, state_dir: Path, node: NodeInfo, probes: Mapping[str, bool] | None = None,
                probe_results: Sequence[ProbeResult] = ()) -> Agent:
    """``probes``: host capabilities by probe name (``koordlet.system.probes``); None: treat every optional
    kernel feature as absent.  ``probe_results``: the same probes with their reasons, for the debug API
    (without them it lists ``probes`` with empty reasons)."""
    started_at = time.time()
    paths = host_paths(config)
    layout = detect_layout(paths)
    driver = detect_driver(layout, config.host.cgroup_kube_parent)
    effective_gates = gates.resolve(config.feature_gates)
    native.configure_fd_budget()

    cache = MetricCache(cache_settings(config, state_dir), time.time)
    informer = StatesInformer(config, layout, driver.driver, node,
                              pleg_factory=lambda dirs, on_event: Pleg(dirs, on_event))
    collector = config.collector
    # The NodeSLO's host applications (for their collector, metrics and NodeMetric) come from the holder build_qos
    # makes further down (none until then); the memory policy in force from the NodeMetric runner.
    slo_holders: list[NodeSLOHolder] = []
    reporters: list[NodeMetricRunner] = []

    def host_apps() -> Sequence[HostApplicationSpec]:
        return (slo_holders[0].current().spec.host_applications or ()) if slo_holders else ()

    metrics = KoordletMetrics(
        node_name=config.node_name, cache=cache, pods=informer, host_apps=host_apps,
        max_ages=MaxAges.from_intervals(collector.res_used_interval_seconds, collector.psi_interval_seconds,
                                        collector.cpi_interval_seconds + collector.cpi_time_window_seconds),
    )
    metrics.lifecycle.record_start(time.time())

    def memory_with_page_cache() -> bool:
        return bool(reporters) and (reporters[0].policy.node_memory_collect_policy
                                    is MemoryCollectPolicy.WITH_PAGE_CACHE)

    options = Options(paths=paths, layout=layout, driver=driver.driver, cache=cache, informer=informer,
                      config=collector, gates=effective_gates, clock=time.time,
                      kube_parent=config.host.cgroup_kube_parent,
                      host_apps=host_apps, memory_with_page_cache=memory_with_page_cache)
    advisor = MetricsAdvisor(options, build_collectors())
    policy = NodeMetricCollectPolicy(aggregate_duration_seconds=config.node_metric.aggregate_duration_seconds,
                                     report_interval_seconds=config.node_metric.report_interval_seconds)
    client = companion_client(config)
    sinks: list[Any] = [LocalNodeMetricSink(cache, state_dir, config.node_name)]
    companion_sink: CompanionNodeMetricSink | None = None
    if client is not None:
        from koordlet.statesinformer.companion import CompanionNodeMetricSink

        companion_sink = CompanionNodeMetricSink(client)
    if companion_sink is not None:
        sinks.append(companion_sink)
    reporter = NodeMetricRunner(
        cache, informer, sinks, policy,
        recorder=metrics.node_metric if gates.enabled(effective_gates, gates.NODE_METRIC_PROM_METRICS) else None,
    )
    reporter.host_apps = host_apps
    reporters.append(reporter)
    if companion_sink is not None:
        companion_sink.on_policy = reporter.set_policy  # the companion's colocation-config decides the policy
    server = MetricsServer(metrics.routes, config.server.addr)
    writers = build_writers(config, state_dir, layout, metrics)
    qos = build_qos(config, layout, driver, informer, cache, metrics, effective_gates, writers, companion=client)
    slo_holders.append(qos.holder)
    watcher, pressure_status = build_pressure(config, layout, driver.driver, qos, probes or {}, metrics)
    hooks = build_runtime_hooks(config, layout, informer, qos.holder, writers, metrics, effective_gates,
                                probes or {}, driver=driver.driver)
    executor = writers.executor
    slo_source: CompanionNodeSLOSource | None = None
    if client is not None:
        cache_path = config.companion.nodeslo_cache or str(state_dir / "nodeslo-companion.json")
        from koordlet.statesinformer.companionslo import CompanionNodeSLOSource

        slo_source = CompanionNodeSLOSource(
            client, qos.holder, cache_path,
            on_policy=companion_sink.offer_policy if companion_sink is not None else None,
            on_reconnect=_reconnected(companion_sink, reporter.report_now),
            on_node=informer.set_kube_node)  # the Node's facts (batch allocatable ...) ride on the watch

    components: list[Component] = [MetricCacheComponent(cache, config.metric_cache.flush_interval_seconds), informer]
    if not config.standalone:
        kubelet = config.kubelet
        options_k = KubeletOptions(address=kubelet.address, port=kubelet.port, scheme=kubelet.scheme,
                                   token_file=kubelet.token_file, ca_file=kubelet.ca_file,
                                   insecure_skip_verify=kubelet.insecure_tls,
                                   timeout_seconds=kubelet.sync_timeout_seconds,
                                   sync_interval_seconds=kubelet.sync_interval_seconds)
        options_k.validate()
        source = KubeletPodSource(KubeletClient(options_k, observe=kubelet_observer(metrics)),
                                  kubelet.sync_interval_seconds, informer.set_kubelet_pods,
                                  pleg_paths=informer.pleg_dirs())
        config_sync = KubeletConfigSync(KubeletClient(options_k), kubelet.sync_interval_seconds,
                                        informer.set_reservation)
        components += [source, config_sync]
    # The NodeSLO source starts before the QoS manager so its first round already has the persisted spec.
    components += [advisor, reporter, *([slo_source] if slo_source is not None else []), qos,
                   *([watcher] if watcher is not None else []), hooks, server]
    # The CPU topology, re-read every nodeCPUInfoIntervalSeconds, and the report the companion writes as the
    # node's NodeResourceTopology (gate NodeTopologyReport).
    topology = TopologySource(informer, lambda: read_node_info(paths, native),
                              lambda: HostTopology(read_numa_memory(paths), read_cpu_basic_info(paths)),
                              config.collector.node_cpu_info_interval_seconds,
                              enabled=gates.enabled(effective_gates, gates.NODE_TOPOLOGY_REPORT),
                              query_kubelet=not config.standalone)
    components.insert(components.index(informer) + 1, topology)  # before the collectors and the first report
    if companion_sink is not None:
        companion_sink.topology = topology.current
    # Peak prediction: trained from the cache, read by NodeMetric's prodReclaimableMetric.
    flags = config.prediction
    predict_server, reporter.predictor_factory = prediction.build(
        cache, informer, node, Path(flags.checkpoint_filepath or state_dir / prediction.CHECKPOINT_DIR),
        prediction.PredictionConfig(
            cold_start_seconds=flags.cold_start_seconds, safety_margin_percent=flags.safety_margin_percent,
            memory_half_life_seconds=flags.memory_half_life_seconds, cpu_half_life_seconds=flags.cpu_half_life_seconds,
            training_interval_seconds=flags.training_interval_seconds,
            model_expiration_seconds=flags.model_expiration_seconds,
            checkpoint_interval_seconds=flags.checkpoint_interval_seconds,
            checkpoint_max_per_step=flags.checkpoint_max_per_step))
    components.insert(components.index(reporter), predict_server)
    debug: DebugServer | None = None
    debug_socket = config.server.debug_socket
    if debug_socket == contract.DEFAULT_SOCKET:  # not chosen: a user other than root cannot write /var/run
        debug_socket = contract.default_socket(os.geteuid(), str(state_dir))
    if debug_socket:
        results = list(probe_results) or [ProbeResult(name, supported, "")
                                          for name, supported in sorted((probes or {}).items())]
        companion_status = None
        if slo_source is not None and companion_sink is not None:
            companion_status = companion_status_of(config.companion.address, slo_source, companion_sink)
        sources = DebugSources(
            version=__version__, node=config.node_name, mode="standalone" if config.standalone else "kubernetes",
            started_at=started_at, components=lambda: [(c.name, c.running) for c in components],
            feature_gates=dict(effective_gates), probes=lambda: results,
            companion=companion_status or (lambda: None), pods=informer.pods,
            cgroups=HostCgroups(layout, executor.last_written, intended=executor.last_intended), mean=cache.mean,
            slo=qos.holder.current,
            strategies=lambda: qos.strategy_objects, decisions=qos.options.decisions, hook_names=hooks.runner.names,
            hook_calls=hooks.runner.recorder.recent if hooks.runner.recorder is not None else (lambda _n: []),
            evictions=evictor.recent if isinstance(evictor := qos.options.evictor, Evictions) else (lambda _n: []),
            pid=os.getpid(),
            refused=lambda uid: [r.text() for r in informer.tenant.refused(uid)],
            shadow=qos.shadow.modes if qos.shadow is not None else None,
            hook_shadow=hooks.runner.shadow,
            pressure=pressure_status)
        debug = DebugServer(debug_socket, sources)
        components.append(debug)
    return Agent(components, cache, informer, advisor, metrics, server, driver, executor, qos, hooks, debug)


def _reconnected(sink: CompanionNodeMetricSink | None, report_now: Callable[[], None]) -> Callable[[], None]:
    """After the watch reconnects (a restarted or other companion replica): the topology is sent again and a
    report goes out now, since that companion holds no figures of this node."""

    def reconnected() -> None:
        if sink is not None:
            sink.topology_reconnected()
        report_now()

    return reconnected


def companion_status_of(address: str, source: CompanionNodeSLOSource, sink: CompanionNodeMetricSink
                        ) -> Callable[[], dict[str, object]]:
    def status() -> dict[str, object]:
        return {"address": address, "nodeslo_connected": source.connected,
                "reports_failing": bool(sink.failing)}

    return status


@dataclass(frozen=True)
class Writers:
    """The host writers the QoS strategies and the runtime hooks share, built once: both then go through one
    write ledger per file, one core-scheduling cookie book and one resctrl writer, so neither undoes or
    repeats what the other did."""

    audit: AuditLog
    """Where every writer reports what it changed."""
    executor: ResourceExecutor
    """The only cgroup writer."""
    reader: CgroupReader
    coresched: CoreSchedExecutor
    cookies: CookieBook
    resctrl: ResctrlExecutor
    sysctl: SysctlExecutor
    """The writer of node-wide kernel knobs; it keeps the values found before its first write in the state dir."""


def build_writers(config: Config, state_dir: Path, layout: CgroupLayout, metrics: KoordletMetrics) -> Writers:
    qos = config.qos
    audit = AuditLog(qos.audit_dir or state_dir / "audit", max_bytes=qos.audit_max_bytes,
                     max_files=qos.audit_max_files)
    executor = ResourceExecutor(layout, time.monotonic, audit, metrics.executor, qos.resource_force_update_seconds)
    coresched = CoreSchedExecutor(native, audit, time.monotonic, metrics.executor)
    return Writers(audit=audit, executor=executor, reader=CgroupReader(layout), coresched=coresched,
                   cookies=CookieBook(coresched),
                   resctrl=resctrl_executor(layout.paths, audit, metrics, qos.resource_force_update_seconds),
                   sysctl=SysctlExecutor(layout.paths, time.monotonic, audit, metrics.executor,
                                         originals_path=str(state_dir / ORIGINALS_FILE),
                                         intend_again_seconds=qos.resource_force_update_seconds))


def build_runtime_hooks(config: Config, layout: CgroupLayout, informer: StatesInformer, holder: NodeSLOHolder,
                        writers: Writers, metrics: KoordletMetrics, effective_gates: Mapping[str, bool],
                        probes: Mapping[str, bool], *, driver: CgroupDriver | None = None) -> RuntimeHooks:
    """The hooks (those whose gate is on) over the shared writers and the NodeSLO in force, and their
    transports.  ``driver``: where the kube-QoS directories are, for the hooks' node-level parts (group
    identity of kubepods/burstable/besteffort); None: those parts are not run."""
    hooks_config = config.runtime_hooks
    modes = hook_shadow_modes(hooks_config, hook_names(effective_gates))
    deps = HookDeps(layout=layout, gates=effective_gates, probes=probes,
                    nodeslo=lambda: holder.current().spec, coresched=writers.coresched, cookies=writers.cookies,
                    resctrl=writers.resctrl, shared_pools=informer.shared_pools, tenant=informer.tenant,
                    cpu_normalization_ratio=NormalizationRatio(
                        lambda: (node.annotations if (node := informer.kube_node()) is not None else None)),
                    shadow=modes, intents=writers.executor)
    runner = HookRunner(build_hooks(deps), failure_policy(hooks_config.plugin_failure_policy),
                        metrics.runtime_hooks, disabled=[Stage(s) for s in split_list(hooks_config.disable_stages)],
                        recorder=HookCallRecorder(),
                        tenant=TenantGate(informer.tenant, informer.pods, informer.node),
                        shadow=modes, shadow_sink=metrics.executor)
    executor = writers.executor
    applier = Applier(executor.apply, executor.quota_limited_above, defer_be_quota=not config.standalone,
                      intend=executor.intend)
    oom_score = oomscore.for_cgroups(lambda rel_dir: writers.reader.read("cgroup_procs", rel_dir),
                                     oomscore.OomScoreWriter(layout.paths.proc_root, writers.audit))
    return RuntimeHooks(hooks_config, runner, applier, informer, metrics.runtime_hooks, oom_score,
                        incarnation=lambda rel_dir: cgroup_incarnation(layout, rel_dir),
                        forget=executor.forget_cgroup,
                        qos_dirs=None if driver is None else {  # the kube-QoS level of the hooks
                            q: under_parent(config.host.cgroup_kube_parent, qos_dir(driver, q)) for q in KubeQoS},
                        host_apps=None if driver is None else host_app_targets(
                            holder, driver, config.host.cgroup_kube_parent),
                        sysctl=writers.sysctl)  # kernel.sched_group_identity_enabled


def host_app_targets(holder: NodeSLOHolder, driver: CgroupDriver, kube_parent: str
                     ) -> Callable[[], list[HostAppTarget]]:
    """The NodeSLO's host applications where the hooks' host-application parts write."""
    by_value = {q.value: q for q in QoSClass}

    def targets() -> list[HostAppTarget]:
        return [HostAppTarget(app.name or "", by_value.get(app.qos or "", QoSClass.NONE),
                              hostapps.cgroup_dir(app, driver, kube_parent))
                for app in hostapps.unique(holder.current().spec.host_applications)]

    return targets


def cgroup_incarnation(layout: CgroupLayout, rel_dir: str) -> int | None:
    """Identity of cgroup ``rel_dir``'s directory in the cpu hierarchy (inode and creation time: kernfs may
    reuse an inode number); None when it does not exist."""
    try:
        st = os.stat(layout.controller_dir("cpu", rel_dir))
    except (OSError, KoordletError):
        return None
    return (st.st_ino << 64) | st.st_ctime_ns


def resctrl_executor(paths: HostPaths, audit: AuditLog, metrics: KoordletMetrics, force_update_seconds: float
                     ) -> ResctrlExecutor:
    """The resctrl writer; MB values are percentages on Intel and absolute units (2048 = unlimited) on AMD."""
    amd = read_vendor(paths.proc("cpuinfo")) == AMD_VENDOR_ID
    return ResctrlExecutor(paths.resctrl_root, time.monotonic, audit, metrics.executor, force_update_seconds,
                           mb_max=MB_MAX_AMD if amd else MB_MAX_PERCENT)


def netqos_backends(qos: QoSManagerConfig, informer: StatesInformer) -> Callable[[str], NetQoS]:
    """NodeSLO ``netQOSPolicy`` -> its backend; the strategy asks once per policy and keeps the backend."""

    def backend(policy: str) -> NetQoS:
        if policy == POLICY_TERWAY:
            return TerwayNetQoS(qos.terway_qos_dir, pods=informer.pods)
        if policy == POLICY_TC:
            return TcNetQoS(qos.net_interface)
        raise ConfigError(f"netQOSPolicy: unknown policy {policy!r} (tc or terway-qos)")

    return backend


def companion_client(config: Config) -> CompanionClient | None:
    """The client of koord-companion when ``companion.address`` is set; it and ``qos.nodesloFile`` are two
    NodeSLO sources for one holder, so setting both is a configuration error."""
    companion = config.companion
    if not companion.address:
        return None
    from koordlet.statesinformer.companion import CompanionClient, token_from_file  # gRPC only when linked
    if config.qos.nodeslo_file:
        raise ConfigError("companion.address and qos.nodesloFile both set: the NodeSLO comes from one of them")
    token = token_from_file(companion.token_file) if companion.token_file else None
    return CompanionClient(companion.address, token, config.node_name, ca_file=companion.ca_file or None)


def build_qos(config: Config, layout: CgroupLayout, driver: DriverGuess, informer: StatesInformer,
              cache: MetricCache, metrics: KoordletMetrics, effective_gates: Mapping[str, bool], writers: Writers,
              companion: CompanionClient | None = None) -> QoSManager:
    """The QoS manager with its strategies over the shared writers, and its NodeSLO holder (fed by
    ``qos.nodesloFile`` here, or by the companion source the caller builds)."""
    qos = config.qos
    evictor_kind = "api" if qos.only_evict_by_api else qos.evictor
    backend = build_backend(evictor_kind, layout, qos.runtime_endpoint, qos.cri_timeout_seconds,
                            api=CompanionEvictionAPI(companion) if companion is not None else None,
                            workloads=config.workloads if config.standalone else None)
    # Strategies count their evictions in metrics.qos (pod_eviction) with their own reason; intended ones (shadow
    # mode) are counted with the intended writes.
    evictions = Evictions(backend, time.time, writers.audit, metrics=metrics.executor)
    shadow = Shadow(shadow_modes(qos), writers.executor, evictions, sysctl=writers.sysctl, resctrl=writers.resctrl)
    if shadowed := [name for name in registry() if shadow.modes.shadow(name)]:
        log.warning("QoS strategies in shadow mode: they decide, and write and evict nothing",
                    extra={"strategies": shadowed})
    options = qos_framework.Options(
        layout=layout, driver=driver.driver, informer=informer, cache=cache, executor=writers.executor,
        evictor=evictions, reader=writers.reader, config=qos, collector=config.collector, gates=effective_gates,
        clock=time.time, decisions=qos_framework.DecisionLog(), metrics=metrics.qos,
        kube_parent=config.host.cgroup_kube_parent,
        coresched=writers.coresched,
        cookies=writers.cookies,
        resctrl=writers.resctrl,
        sysctl=writers.sysctl,
        kubelet_root_dir=config.host.var_lib_kubelet_root_dir,  # blkio podvolume
        netqos=netqos_backends(qos, informer),
        closid_reserve=informer.tenant.closid_reserve,
    )
    holder = NodeSLOHolder()
    source = FileNodeSLOSource(qos.nodeslo_file, holder) if qos.nodeslo_file and companion is None else None
    return QoSManager(options, build_strategies(options, shadow=shadow), holder, source, shadow=shadow)


def build_pressure(config: Config, layout: CgroupLayout, driver: CgroupDriver, qos: QoSManager,
                   probes: Mapping[str, bool], metrics: KoordletMetrics
                   ) -> tuple[PressureWatcher | None, Callable[[], dict[str, Any]]]:
    """The PSI trigger watcher that wakes memoryevict and cpuevict (None when ``qos.pressureTriggers`` is empty
    or the kernel takes no triggers: the strategies then poll), and its status for the debug API."""
    specs = parse_triggers(config.qos.pressure_triggers)
    qos.wake_debounce = config.qos.pressure_wake_debounce_seconds
    reason = ""
    if not specs:
        reason = "qos.pressureTriggers is empty: the eviction strategies poll at their intervals"
    elif not probes.get("psi_trigger", False):
        reason = "the kernel takes no PSI triggers (probe psi_trigger): the eviction strategies poll at their intervals"
    watcher = None
    if not reason:
        if not has_cap_sys_resource():
            specs = [spec.widened() for spec in specs]
        paths: dict[str, str | Exception] = {}
        for spec in specs:
            try:
                paths[spec.name] = pressure_path(layout, driver, config.host.cgroup_kube_parent, spec)
            except KoordletError as exc:
                paths[spec.name] = exc
        watcher = PressureWatcher(specs, paths, qos, metrics.qos)
        log.info("pressure triggers wake the eviction strategies", extra={"triggers": [s.text for s in specs]})
    else:
        log.info("no pressure triggers", extra={"reason": reason})

    def status() -> dict[str, Any]:
        return {"enabled": watcher is not None, "reason": reason, "debounce_seconds": qos.wake_debounce,
                "triggers": watcher.status() if watcher is not None else [], "wakes": qos.wake_counts()}

    return watcher, status


def hook_shadow_modes(hooks_config: RuntimeHooksConfig, known: Sequence[str]) -> ShadowModes:
    """The hooks' shadow modes ``runtimeHooks.shadow`` and ``runtimeHooks.shadowHooks`` configure; ConfigError
    naming a hook this koordlet does not have (its gate off, or unknown)."""
    named = split_list(hooks_config.shadow_hooks)
    unknown = [name for name in named if name not in known]
    if unknown:
        raise ConfigError(f"runtimeHooks.shadowHooks: unknown or disabled hook {', '.join(unknown)} "
                          f"(these run: {', '.join(known)})")
    modes = ShadowModes(hooks_config.shadow, dict.fromkeys(named, True), known, kind="hook")
    if shadowed := [name for name in known if modes.shadow(name)]:
        log.warning("runtime hooks in shadow mode: they decide, and the runtime gets nothing from them",
                    extra={"hooks": shadowed})
    return modes


def shadow_modes(qos: QoSManagerConfig) -> ShadowModes:
    """The shadow modes ``qos.shadow`` and ``qos.shadowStrategies`` configure; ConfigError naming an unknown
    strategy."""
    known = registry().keys()
    named = split_list(qos.shadow_strategies)
    unknown = [name for name in named if name not in known]
    if unknown:
        raise ConfigError(f"qos.shadowStrategies: unknown strategy {', '.join(unknown)} "
                          f"(known: {', '.join(known)})")
    return ShadowModes(qos.shadow, dict.fromkeys(named, True), known)
