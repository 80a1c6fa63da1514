"""koord-companion assembled: the SLO controller, the batch-resource calculator and the load-aware extender
around the gRPC API the koordlets talk to; with Kubernetes, optionally the pod admission webhook
(ClusterColocationProfiles, :mod:`koordlet.companion.colocation`) and the descheduler
(:mod:`koordlet.companion.descheduler`, on the elected leader only).

Where the cluster state comes from:

* Kubernetes (``api_client`` given): Nodes, Pods, NodeMetrics and the ``slo-controller-config`` ConfigMap are
  watched.  The elected leader writes NodeSLOs and the nodes' batch, mid and CPU normalization resources.  A
  node's NodeMetric and NodeResourceTopology are written by the replica its koordlet reports to, leader or not,
  while its reports there are fresh (:mod:`koordlet.companion.reports`): each koordlet holds one connection to
  one replica, so that replica alone has the node's reports.  Every replica learns the other nodes' metrics from
  the NodeMetric watch (upstream's koord-manager reads them the same way), so the leader's batch resources and
  every replica's extender cover all nodes, and a standby answers at once when it takes over.
* a ConfigMap file (``config_file``, no Kubernetes): nodes are the koordlets that connect; batch
  resources are computed and logged (there is no Node object to write them to).

Writes to kube-apiserver never run on the paths that serve koordlets or kube-scheduler: a change queues
the node on a writer thread, which coalesces repeated changes of one node into one write.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from koordlet.apis.nodemetric import (
    DEFAULT_REPORT_INTERVAL_SECONDS,
    NodeMetricCollectPolicy,
    NodeMetricStatus,
    parse_time,
)
from koordlet.apis.pod import pod_from_json
from koordlet.apis.quantity import int_value, milli_value
from koordlet.apis.sloconfig import configmap_data_from_yaml
from koordlet.companion.api import DEFAULT_MAX_CONCURRENT_RPCS, CompanionServer, EvictionRefused, node_json_of
from koordlet.companion.auth import (
    AUTH_MODES,
    CACHE_TTL_SECONDS,
    DEFAULT_AUDIENCE,
    DEFAULT_SERVICE_ACCOUNT,
    Authenticator,
    KubeReviewAPI,
    TokenReviewAuthenticator,
)
from koordlet.companion.batchresource import BatchResult, CPUMemory, NodeInput, PodInput
from koordlet.companion.colocation.cache import ClusterCache
from koordlet.companion.colocation.webhook import WebhookOptions, WebhookService
from koordlet.companion.descheduler.config import DeschedulerConfig
from koordlet.companion.descheduler.runner import Descheduler
from koordlet.companion.extender import LoadAwareArgs, LoadAwareExtender, NodeStore, make_server
from koordlet.companion.metricdecode import decode_status
from koordlet.companion.midresource import MidResult
from koordlet.companion.noderesources import NodeInputs, NodeResources
from koordlet.companion.podfields import pod_fields, pod_identity
from koordlet.companion.ratelimit import (
    DEFAULT_BURST,
    DEFAULT_NODE_BURST,
    DEFAULT_NODE_RATE,
    DEFAULT_RATE,
    EvictionLimiter,
    RateLimit,
)
from koordlet.companion.reports import ReportedNodes
from koordlet.companion.slocontroller import SLOController
from koordlet.companion.topology import TopologyReports
from koordlet.errors import ConfigError, KoordletError
from koordlet.metrics.server import DEFAULT_LIMITS as METRICS_LIMITS
from koordlet.metrics.server import MetricsServer, serve
from koordlet.system.httpserver import ServerLimits

log = logging.getLogger(__name__)

CONFIG_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class CompanionOptions:
    grpc_addr: str = "0.0.0.0:9320"
    extender_addr: str = "0.0.0.0:9321"
    metrics_addr: str = ""
    """Prometheus ``/metrics`` of the process (``host:port``, ``:9322`` for every address); empty: not served."""
    metrics_limits: ServerLimits = METRICS_LIMITS
    """What the metrics server lets its clients take (koordlet's :9316 limits)."""
    max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS
    """gRPC calls admitted at once; each koordlet holds one watch, so above the node count."""
    auth: str = ""
    """``tokenreview`` (per-node identities, needs Kubernetes), ``token`` (the shared ``token``) or ``none``;
    empty: ``token`` when one is given, else ``tokenreview`` with Kubernetes, else ``none``."""
    token: str | None = None
    token_audiences: tuple[str, ...] = (DEFAULT_AUDIENCE,)
    koordlet_service_account: str = DEFAULT_SERVICE_ACCOUNT
    auth_cache_seconds: float = CACHE_TTL_SECONDS
    insecure: bool = False
    """Serve a non-loopback address with a shared token or no authentication (no per-node identity)."""
    cert_file: str | None = None
    key_file: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    eviction_limit: RateLimit = field(default_factory=lambda: RateLimit(DEFAULT_RATE, DEFAULT_BURST))
    """Evictions per second (and burst) across the cluster; rate 0: no limit."""
    node_eviction_limit: RateLimit = field(default_factory=lambda: RateLimit(DEFAULT_NODE_RATE, DEFAULT_NODE_BURST))
    """Evictions per second (and burst) of one node; rate 0: no limit."""
    config_file: str = ""
    """A ``slo-controller-config`` ConfigMap as YAML, for running without Kubernetes."""
    scheduler_args: LoadAwareArgs | None = None
    leader_elect: bool = True
    lease_namespace: str = "koordinator-system"
    lease_name: str = "koord-companion"
    identity: str = ""
    config_namespace: str = "koordinator-system"
    config_name: str = "slo-controller-config"
    webhook: WebhookOptions | None = None
    """The pod admission webhook (needs Kubernetes); None: not served."""
    descheduler: DeschedulerConfig | None = None
    """The descheduler's configuration (needs Kubernetes; runs on the leader only); None: off."""


@dataclass
class _NodeState:
    node: NodeInput | None = None
    pods: dict[str, PodInput] | None = None
    metric: NodeMetricStatus | None = None
    """The node's latest metric: its own report to this replica, or a newer one from its NodeMetric object."""
    reported: NodeMetricStatus | None = None
    """Its last own report (what this replica writes; never one read from the cluster).  Kept decoded, and encoded
    when written: a report's JSON tree is several times its decoded size, times every node of the cluster."""
    node_json: tuple[bytes, str] | None = None
    """The Node's facts sent to its koordlet (``node_json``, ``node_version``)."""


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


def node_input(obj: Mapping[str, Any]) -> NodeInput:
    """The batch calculation's view of a v1.Node object."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}

    def pair(resources: Mapping[str, Any] | None) -> CPUMemory:
        resources = resources or {}
        return CPUMemory(milli_value(resources.get("cpu", "0")), int_value(resources.get("memory", "0")))

    return NodeInput(name=str(meta.get("name", "")), capacity=pair(status.get("capacity")),
                     allocatable=pair(status.get("allocatable")), labels=dict(meta.get("labels") or {}),
                     annotations=dict(meta.get("annotations") or {}))


class Companion:
    def __init__(self, options: CompanionOptions, api_client: Any = None, *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 registry: CollectorRegistry = REGISTRY) -> None:
        if api_client is None and not options.config_file:
            raise KoordletError("koord-companion needs Kubernetes (a kubeconfig or in-cluster) or --config-file")
        if api_client is None and (options.webhook is not None or options.descheduler is not None):
            raise ConfigError("the admission webhook and the descheduler need Kubernetes, not --config-file")
        self.options = options
        self._registry = registry
        self._api = api_client
        self._clock = clock
        self.controller = SLOController()
        self.store = NodeStore(options.scheduler_args)
        self.extender = LoadAwareExtender(self.store)
        self.limiter = EvictionLimiter(options.eviction_limit, options.node_eviction_limit)
        authenticator = self._authenticator(options, api_client)
        self.server = CompanionServer(options.grpc_addr, options.token if authenticator is None else None,
                                      self._slo_for_node, self._on_metric,
                                      collect_policy=self._collect_policy, node_for_node=self._node_for_node,
                                      on_topology=self._on_topology, cert_file=options.cert_file,
                                      key_file=options.key_file, cert_pem=options.cert_pem, key_pem=options.key_pem,
                                      evict=self._evict if api_client is not None else None,
                                      authenticator=authenticator, insecure=options.insecure,
                                      max_concurrent_rpcs=options.max_concurrent_rpcs)
        self.resources = NodeResources(self.controller, self._node_inputs,
                                       lambda node: self._queue(node, "batch"),
                                       is_leader=lambda: self._leading, clock=clock)
        """Batch and mid resources and the CPU normalization ratio of every node."""
        self.reported = ReportedNodes(self._report_interval, monotonic)
        """When each node last reported here: this replica writes its NodeMetric and NodeResourceTopology while
        that is fresh."""
        self.topology = TopologyReports(may_write=self.reported.fresh)
        """Reports -> NodeResourceTopology, written on change by the replica receiving the node's reports."""
        self.topology_listeners: list[Callable[[str, dict[str, Any]], None]] = [
            self.topology.on_topology, self.resources.on_topology]
        """Each receives every node's topology report (NodeTopologyReport), in order."""
        self._lock = threading.Lock()
        self._nodes: dict[str, _NodeState] = {}
        self._pod_nodes: dict[tuple[str, str], str] = {}
        """(namespace, name) -> the node the pod is bound to (from the pod watch)."""
        self._pending: dict[str, set[str]] = {}
        """node -> the kinds of writes it waits for ("slo", "batch", "metric")."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._http: Any = None
        self._metrics: MetricsServer | None = None
        self._watchers: list[Any] = []
        self._elector: Any = None
        self._slo_writer: Any = None
        self._metric_writer: Any = None
        self._leading = api_client is not None and not options.leader_elect
        self.controller.subscribe(self._slo_changed)
        self.webhook: WebhookService | None = None
        """The admission webhook service."""
        self.cluster_cache: ClusterCache | None = None
        """The webhook's cluster view."""
        self.descheduler: Descheduler | None = None
        """Runs its rounds only while this replica leads.  Built here so a configuration its plugins refuse fails
        start-up."""
        if options.descheduler is not None:
            self.descheduler = Descheduler(api_client, options.descheduler, is_leader=lambda: self._leading,
                                           metrics_registry=registry)

    @staticmethod
    def _authenticator(options: CompanionOptions, api_client: Any) -> Authenticator | None:
        """The per-node authenticator, or None for the shared token / no authentication."""
        mode = options.auth or ("token" if options.token is not None else
                                "tokenreview" if api_client is not None else "none")
        if mode not in AUTH_MODES:
            raise ConfigError(f"auth: expected one of {', '.join(AUTH_MODES)}, got {mode!r}")
        if mode == "token" and options.token is None:
            raise ConfigError("auth=token needs the shared token (--token-file)")
        if mode != "token" and options.token is not None:
            raise ConfigError(f"auth={mode} takes no shared token (--token-file is for auth=token)")
        if mode != "tokenreview":
            return None
        if api_client is None:
            raise ConfigError("auth=tokenreview needs Kubernetes (TokenReview); without it use auth=token or none")
        return TokenReviewAuthenticator(KubeReviewAPI(api_client), audiences=options.token_audiences,
                                        service_account=options.koordlet_service_account,
                                        ttl_seconds=options.auth_cache_seconds)

    # --- koordlet-facing -------------------------------------------------------------------------------

    def _slo_for_node(self, node: str) -> tuple[int, dict[str, Any], str] | None:
        rendered = self.controller.spec_for(node)
        if rendered is None and self._api is None:
            # Without Kubernetes a node becomes known when its koordlet asks for its NodeSLO.
            self.controller.set_node(node, {})
            rendered = self.controller.spec_for(node)
        return None if rendered is None else (rendered.generation, rendered.spec, rendered.origin)

    def _collect_policy(self, node: str) -> NodeMetricCollectPolicy | None:
        strategy = self.controller.colocation_for(node)
        aggregate, report = strategy.metric_aggregate_duration_seconds, strategy.metric_report_interval_seconds
        if aggregate is None and report is None:
            return None
        return NodeMetricCollectPolicy.from_spec({"metricCollectPolicy": {
            **({"aggregateDurationSeconds": aggregate} if aggregate is not None else {}),
            **({"reportIntervalSeconds": report} if report is not None else {})}})

    def _report_interval(self, node: str) -> float:
        policy = self._collect_policy(node)
        return policy.report_interval_seconds if policy is not None else float(DEFAULT_REPORT_INTERVAL_SECONDS)

    def _reported(self, node: str) -> None:
        """A report of the node arrived here: this replica writes its objects (again)."""
        if self.reported.seen(node):
            self.topology.rewrite(node)  # another replica may have written its NRT meanwhile

    def _node_for_node(self, node: str) -> tuple[bytes, str] | None:
        state = self._nodes.get(node)  # a dict read, atomic: this runs on the API's event loop
        return state.node_json if state is not None else None

    def _on_topology(self, node: str, topology: dict[str, Any]) -> None:
        """Hands a report to every listener; one that refuses it (or fails) does not keep it from the others,
        nor the node's NodeMetric from being stored: the listener keeps its last good report."""
        self._reported(node)  # before the listeners: the topology writer asks whether this replica writes it
        for listener in list(self.topology_listeners):
            try:
                listener(node, topology)
            except Exception as exc:
                log.warning("topology report refused by a listener, its last good one kept",
                            extra={"node": node, "listener": getattr(listener, "__qualname__", repr(listener)),
                                   "error": str(exc)})

    def _on_metric(self, node: str, status: NodeMetricStatus) -> None:
        """Called on the API's ingest pool: in-memory work only; writes are queued."""
        self._reported(node)
        with self._lock:  # the store is updated under the lock too: a watched metric must not overtake it
            self.store.update_node_metric(node, status)
            state = self._nodes.setdefault(node, _NodeState())
            state.metric = state.reported = status
        if self._api is None and self.controller.spec_for(node) is None:
            self.controller.set_node(node, {})
        self._queue(node, "batch", "metric")

    def on_cluster_metric(self, obj: Mapping[str, Any]) -> None:
        """A NodeMetric object as the cluster holds it (the watch), mostly written by the replica its koordlet
        reports to: feeds the batch/mid calculation and the extender.  Never written back, and never in place of a
        newer report (``updateTime``) this replica holds; a status that does not decode is skipped."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        if name and not self._newer_than_held(name, obj.get("status")):
            return  # most events are the echo of this replica's own write: not decoded at all
        try:
            status = decode_status(obj.get("status"), "status")
        except KoordletError as exc:
            log.warning("NodeMetric status not decoded, the node's last good metric kept",
                        extra={"node": name, "error": str(exc)})
            return
        if not name or status.update_time is None:
            return  # created, its first status not written yet: nothing to learn
        with self._lock:
            state = self._nodes.setdefault(name, _NodeState())
            known = state.metric.update_time if state.metric is not None else None
            # The report times are the node's own clock, so they order its reports wherever they went: an object
            # not newer is this replica's own write echoed, or older than its report; a newer one is the node's
            # report to another replica (during a move, before this one's reports go stale).
            if known is not None and known >= status.update_time:
                return
            state.metric = status
            self.store.update_node_metric(name, status)
        self._queue(name, "batch")

    def _newer_than_held(self, name: str, status: Any) -> bool:
        """Whether a watched status may be newer than the node's metric held here, read from its ``updateTime``
        text alone (as the decoder reads it); True when that text does not say (absent, not a time): decoding
        then decides, and reports what is wrong."""
        text = status.get("updateTime") if isinstance(status, Mapping) else None
        if not isinstance(text, str) or not text:
            return True
        try:
            update_time = parse_time(text)
        except ValueError:
            return True
        with self._lock:
            state = self._nodes.get(name)
            known = state.metric.update_time if state is not None and state.metric is not None else None
        return known is None or known < update_time

    def _slo_changed(self, nodes: list[str]) -> None:
        for node in nodes:
            self.server.notify(node)
            self._queue(node, "slo")

    # --- cluster state ---------------------------------------------------------------------------------

    def set_configmap(self, data: Mapping[str, Any] | None, origin: str) -> dict[str, str]:
        errors = self.controller.set_configmap(dict(data or {}), origin)
        for node in self.controller.nodes:
            self._queue(node, "batch")  # colocation-config may have changed
        return errors

    def set_node(self, obj: Mapping[str, Any]) -> None:
        node = node_input(obj)
        self.store.update_node_json(obj)
        node_json = node_json_of(obj)
        with self._lock:
            state = self._nodes.setdefault(node.name, _NodeState())
            state.node = node
            changed, state.node_json = state.node_json != node_json, node_json
        if changed:  # the koordlet's allocatable, labels or annotations moved: push them on its watch
            self.server.notify(node.name)
        self.controller.set_node(node.name, node.labels)
        self._queue(node.name, "batch")

    def remove_node(self, name: str) -> None:
        self.store.remove_node(name)
        self.reported.forget(name)
        for writer in (self._slo_writer, self._metric_writer):
            if writer is not None:
                writer.forget(name)
        self.resources.forget(name)
        self.topology.forget(name)
        self.controller.remove_node(name)
        with self._lock:
            self._nodes.pop(name, None)

    def set_pod(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        try:
            pod = pod_from_json(obj)
        except KoordletError as exc:
            log.warning("pod skipped", extra={"reason": str(exc)})
            return
        if not pod.node_name:
            return
        # The extender estimates pods placed since the node's last report (upstream's assign cache).
        try:
            if deleted:
                self.store.unassign_pod(pod.uid)
            else:
                self.store.assign_pod(pod.node_name, obj)
        except KoordletError as exc:
            log.warning("pod not estimated", extra={"pod": pod.key, "reason": str(exc)})
        with self._lock:
            state = self._nodes.setdefault(pod.node_name, _NodeState())
            pods = state.pods if state.pods is not None else {}
            if deleted:
                pods.pop(pod.uid, None)
                self._pod_nodes.pop((pod.namespace, pod.name), None)
            else:
                pods[pod.uid] = PodInput.from_pod(pod)
                self._pod_nodes[(pod.namespace, pod.name)] = pod.node_name
            state.pods = pods

    def _evict(self, node: str, namespace: str, name: str, reason: str, message: str) -> str:
        """A koordlet's eviction, through the Eviction API; only for pods bound to that koordlet's node (a
        compromised node must not evict the cluster's pods), within the eviction rate limits (raises
        EvictionRateLimited)."""
        from koordlet.companion import kube

        with self._lock:
            bound = self._pod_nodes.get((namespace, name))
        if bound != node:
            # The pod watch may not hold the pod yet (a companion that just started is still listing; a pod the
            # kubelet already runs may not have reached the watch): kube-apiserver decides.  Refusing here would
            # make the koordlet walk on and evict its next candidate in this one's place.
            bound = self._pod_node_from_api(namespace, name)
        if bound != node:
            # One answer for a pod elsewhere and for no such pod: the caller learns nothing about other nodes.
            log.warning("eviction refused: pod not on the asking node",
                        extra={"pod": f"{namespace}/{name}", "node": node, "bound_to": bound or "no node"})
            raise EvictionRefused(f"pod {namespace}/{name} is not on node {node}")
        self.limiter.acquire(node)
        evicted = False
        try:
            log.info("evicting pod", extra={"pod": f"{namespace}/{name}", "node": node, "reason": reason,
                                            "detail": message})
            result = kube.evict_pod(self._api, namespace, name)
            evicted = result is kube.EvictionResult.EVICTED
        finally:
            if not evicted:  # refused by a budget, gone, or failed: nothing was disrupted
                self.limiter.refund(node)
        return {kube.EvictionResult.EVICTED: "evicted", kube.EvictionResult.BLOCKED_BY_PDB: "blocked",
                kube.EvictionResult.GONE: "gone"}[result]

    def _pod_node_from_api(self, namespace: str, name: str) -> str | None:
        """The node ``namespace/name`` is bound to, as kube-apiserver has it (None: no such pod); raises
        KubeApiError when it cannot be asked."""
        from kubernetes import client

        from koordlet.companion.kube.client import REQUEST_TIMEOUT_SECONDS, KubeApiError, call_json

        try:
            pod = call_json(client.CoreV1Api(self._api).read_namespaced_pod, name, namespace,
                            timeout=REQUEST_TIMEOUT_SECONDS)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return str((pod.get("spec") or {}).get("nodeName") or "") or None

    # --- node resources --------------------------------------------------------------------------------

    def _node_inputs(self, node: str) -> NodeInputs | None:
        with self._lock:
            state = self._nodes.get(node)
            if state is None or state.node is None:
                return None
            return NodeInputs(state.node, list((state.pods or {}).values()), state.metric)

    def compute_batch(self, node: str) -> BatchResult | None:
        return self.resources.compute_batch(node)

    def compute_mid(self, node: str) -> MidResult | None:
        return self.resources.compute_mid(node)

    # --- the writer ------------------------------------------------------------------------------------

    def _queue(self, node: str, *kinds: str) -> None:
        with self._lock:
            self._pending.setdefault(node, set()).update(kinds)
        self._wake.set()

    def _writer(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                pending, self._pending = self._pending, {}
            for node, kinds in sorted(pending.items()):
                if self._stop.is_set():
                    return
                try:
                    self._write(node, kinds)
                except Exception as exc:  # one node's failed write must not stop the others; retried later
                    log.warning("write for node failed, retried", extra={"node": node, "kinds": ",".join(sorted(kinds)),
                                                                         "error": str(exc)})
                    with self._lock:
                        self._pending.setdefault(node, set()).update(kinds)
                    self._stop.wait(1.0)
                    self._wake.set()

    def _write(self, node: str, kinds: set[str]) -> None:
        if "batch" in kinds:
            self.resources.write(node)  # written by the leader only
        if "slo" in kinds and self._leading and (rendered := self.controller.spec_for(node)) is not None:
            self._slo_writer.apply(node, rendered.spec)
        # The node's NodeMetric: by the replica its koordlet reports to, leader or not, while that is so.
        if "metric" in kinds and self._metric_writer is not None and self.reported.fresh(node):
            with self._lock:
                status = self._nodes[node].reported if node in self._nodes else None
            if status is not None:
                policy = self._collect_policy(node)
                self._metric_writer.apply(node, status.to_json(), policy.to_json() if policy else None)

    # --- lifecycle -------------------------------------------------------------------------------------

    def _became_leader(self) -> None:
        self._leading = True
        log.info("leading: writing NodeSLOs and node resources",
                 extra={"descheduling": self.descheduler is not None})
        # NodeMetrics and NodeResourceTopologies are not the leader's: their writer does not change with it.
        for node in self.controller.nodes:
            self._queue(node, "slo", "batch")

    def _stopped_leading(self) -> None:
        self._leading = False
        log.warning("no longer leading: the leader's writes stop, serving goes on")

    def start(self) -> None:
        """Serves the API, the extender and the metrics and starts the controllers; on a failure (a port taken)
        what was started is stopped again before the error is raised."""
        try:
            self.server.start()
            host, port = _split(self.options.extender_addr)
            http = make_server(self.extender, host, port)
            self._spawn("extender-http", http.serve_forever)
            self._http = http  # only once serving: stop()'s shutdown() waits for the serving loop
            if self.options.metrics_addr:
                # Bounded connections, header and write deadlines: prometheus_client's own server has none.
                self._metrics = serve(self._registry, self.options.metrics_addr, limits=self.options.metrics_limits)
            if self.options.webhook is not None:
                self._start_webhook(self.options.webhook)
        except BaseException:
            self.stop()
            raise
        self._spawn("writer", self._writer)
        if self._api is None:
            self._spawn("config-file", self._poll_config_file)
        else:
            self._start_kube()

    def _start_webhook(self, options: WebhookOptions) -> None:
        """The cluster view's watchers, then the HTTPS server; it answers reviews with a refusal (the webhook's
        failurePolicy admits the pod unmutated) until the view has synced."""
        cache = ClusterCache(self._api)
        self.cluster_cache = cache
        cache.start()
        service = WebhookService(options, cache, api_client=self._api, registry=self._registry, ready=cache.synced)
        service.start()
        self.webhook = service

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"companion-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_kube(self) -> None:
        from kubernetes import client

        from koordlet.companion import kube

        def on_node(event: Any) -> None:
            if event.type == "DELETED":
                self.remove_node(event.object["metadata"]["name"])
            else:
                self.set_node(event.object)

        def on_pod(event: Any) -> None:
            self.set_pod(event.object, deleted=event.type == "DELETED")

        def on_nodemetric(event: Any) -> None:
            # A deleted NodeMetric needs nothing: the node's next report recreates it, and a node that is gone
            # is dropped with its Node (the garbage collector deletes its NodeMetric).
            if event.type != "DELETED":
                self.on_cluster_metric(event.object)

        def on_configmap(obj: Mapping[str, Any] | None) -> None:
            rv = (obj or {}).get("metadata", {}).get("resourceVersion", "")
            self.set_configmap((obj or {}).get("data"), f"configmap@{rv}" if obj else "defaults (no configmap)")

        # One writer each, kept: they remember what they last wrote, so a server-normalised object is not
        # rewritten on every change.
        # A write refused for good backs off for its object only; when the pause ends the node is queued again.
        self._slo_writer = kube.NodeSLOWriter(self._api, on_retry=lambda node: self._queue(node, "slo"))
        self._metric_writer = kube.NodeMetricWriter(self._api, on_retry=lambda node: self._queue(node, "metric"))
        self.resources.start(self._api)
        self._watchers = [
            kube.ConfigMapWatcher(self._api, on_configmap, namespace=self.options.config_namespace,
                                  name=self.options.config_name),
            kube.NodeWatcher(self._api, on_node),
            # Only the fields the companion reads are kept of each pod (a big cluster's pods would fill its memory).
            kube.ResourceWatcher(client.CoreV1Api(self._api).list_pod_for_all_namespaces, on_pod, name="pods",
                                 trim=pod_fields, keep=pod_identity),
            # The metrics the callback keeps are its own (decoded, smaller): the cache keeps who is who.
            kube.NodeMetricWatcher(self._api, on_nodemetric, keep=kube.object_identity),
        ]
        self.topology.start(self._api)  # its writer thread (writes the nodes reporting here)
        for watcher in self._watchers:
            watcher.start()
        if self.descheduler is not None:
            self.descheduler.start()
        if self.options.leader_elect:
            identity = self.options.identity or f"{os.uname().nodename}-{os.getpid()}"
            self._elector = kube.LeaderElector(self._api, self.options.lease_name, self.options.lease_namespace,
                                               identity, on_started_leading=self._became_leader,
                                               on_stopped_leading=self._stopped_leading)
            self._elector.start()
        else:
            self._became_leader()

    def _poll_config_file(self) -> None:
        seen: tuple[float, int, int] | None = None
        path = self.options.config_file
        while not self._stop.is_set():
            try:
                st = os.stat(path)
                stamp = (st.st_mtime, st.st_size, st.st_ino)
                if stamp != seen:
                    seen = stamp
                    with open(path, encoding="utf-8") as f:
                        data = configmap_data_from_yaml(f.read())
                    self.set_configmap(data, f"file:{path}")
            except (OSError, KoordletError) as exc:
                log.error("slo-controller-config file unusable, last good kept",
                          extra={"path": str(path), "error": str(exc)})
            self._stop.wait(CONFIG_POLL_SECONDS)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._elector is not None:
            self._elector.stop()
        if self.descheduler is not None:
            self.descheduler.stop()
        if self.webhook is not None:
            self.webhook.stop()
        if self.cluster_cache is not None:
            self.cluster_cache.stop()
        for watcher in self._watchers:
            watcher.stop()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._metrics is not None:
            self._metrics.stop()
            self._metrics = None
        self.server.stop()
        self.topology.stop()
        self.resources.close()
        for writer in (self._slo_writer, self._metric_writer):
            if writer is not None:
                writer.backoff.close()  # pending retry timers
        for thread in self._threads:
            thread.join(5.0)

    @property
    def extender_port(self) -> int:
        return int(self._http.server_address[1]) if self._http is not None else 0

