"""The extended resources the companion writes on each Node: ``kubernetes.io/batch-{cpu,memory}``,
``kubernetes.io/mid-{cpu,memory}``, the CPU normalization ratio annotation that amplifies the batch-cpu and the
resource amplification ratio annotation built on it (upstream ``noderesource`` plugins ``batchresource``,
``midresource``, ``cpunormalization`` and ``resourceamplification``).

All of them come from the same inputs (the Node, its pods, its last NodeMetric) and are recomputed together
whenever one of those moves.  Every replica computes them (for logs, koordctl and a standby that takes over
at once); only the leader writes, and only when the values moved past the colocation strategy's
thresholds or a new ratio makes the written batch-cpu stale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO
from koordlet.apis.nodemetric import NodeMetricStatus
from koordlet.companion import midresource
from koordlet.companion.amplification import (
    ANNOTATION_RESOURCE_AMPLIFICATION_RATIO,
    AmplificationRefused,
    node_annotation,
)
from koordlet.companion.batchresource import (
    BatchResult,
    BatchValues,
    CPUMemory,
    HostAppMetric,
    NodeInput,
    PodInput,
    calculate,
    needs_update,
)
from koordlet.companion.cpunormalization import CPUNormalizer, amplify_batch_cpu, current_ratio, needs_write
from koordlet.companion.slocontroller import SLOController

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeInputs:
    """One node's inputs, copied under the companion's lock."""

    node: NodeInput
    pods: Sequence[PodInput]
    metric: NodeMetricStatus | None

    def host_apps(self) -> list[HostAppMetric]:
        """Host applications above batch priority count as system usage (upstream ``GetHostAppHPUsed``)."""
        if self.metric is None:
            return []
        return [HostAppMetric(a.name, CPUMemory.of(a.usage), a.priority) for a in self.metric.host_application_metric]


@dataclass
class _Written:
    values: BatchValues
    at: float
    ratio: str | None = None
    """The CPU normalization ratio the written batch-cpu was amplified by."""


class NodeResources:
    """Computes every node's batch and mid resources and, on the leader, writes them (:meth:`write`, called on
    the companion's writer thread).  ``inputs`` returns a node's inputs (None while its Node is unknown);
    ``requeue`` asks the writer thread for another :meth:`write` of a node."""

    def __init__(self, controller: SLOController, inputs: Callable[[str], NodeInputs | None],
                 requeue: Callable[[str], None], *, is_leader: Callable[[], bool], clock: Callable[[], float]) -> None:
        self._controller = controller
        self._inputs = inputs
        self._requeue = requeue
        self._is_leader = is_leader
        self._clock = clock
        self.cpu_normalization = CPUNormalizer()
        self.batch: dict[str, BatchResult] = {}
        """node -> the last batch calculation (for logs, koordctl and tests)."""
        self.mid: dict[str, midresource.MidResult] = {}
        """node -> the last mid calculation."""
        self._batch_written: dict[str, _Written] = {}
        self._mid_written: dict[str, _Written] = {}
        self._amplification_refused: dict[str, str] = {}
        """node -> why its amplification ratios were last refused (logged once per reason)."""
        self._batch_writer: Any = None
        self._mid_writer: Any = None
        self._annotation_writer: Any = None

    def start(self, api_client: Any) -> None:
        """With Kubernetes: the writers (each backs off per node; a node whose pause ends is requeued)."""
        from koordlet.companion import kube  # only with Kubernetes
        from koordlet.companion.kube.nodeannotations import NodeAnnotationWriter, nrt_annotations

        self._batch_writer = kube.NodeBatchResourceWriter(api_client, on_retry=self._requeue)
        self._mid_writer = kube.NodeMidResourceWriter(api_client, on_retry=self._requeue)
        self._annotation_writer = NodeAnnotationWriter(api_client, on_retry=self._requeue)
        self.cpu_normalization.fetch = lambda node: nrt_annotations(api_client, node)

    def _writers(self) -> tuple[Any, ...]:
        return tuple(w for w in (self._batch_writer, self._mid_writer, self._annotation_writer) if w is not None)

    def close(self) -> None:
        for writer in self._writers():
            writer.backoff.close()  # pending retry timers

    def forget(self, node: str) -> None:
        for writer in self._writers():
            writer.backoff.forget(node)
        self.cpu_normalization.forget(node)
        self.batch.pop(node, None)
        self.mid.pop(node, None)
        self._batch_written.pop(node, None)
        self._mid_written.pop(node, None)
        self._amplification_refused.pop(node, None)

    def on_topology(self, node: str, topology: dict[str, Any]) -> None:
        """A topology report's CPU basic info (raises ValueError on garbage: the last good info stays)."""
        if self.cpu_normalization.on_topology(node, topology):
            self._requeue(node)  # the ratio, and the batch-cpu amplified by it

    def ratio(self, node: str) -> str | None:
        """The CPU normalization ratio this replica last decided for the node, None when none."""
        return self.cpu_normalization.ratio(node)

    # --- calculations ---------------------------------------------------------------------------------

    def compute_batch(self, node: str) -> BatchResult | None:
        return self._compute_batch(node, self._inputs(node))

    def _compute_batch(self, node: str, inputs: NodeInputs | None) -> BatchResult | None:
        if inputs is None:
            return None
        result = calculate(inputs.node, inputs.pods, inputs.metric, self._controller.colocation_for(node),
                           self._clock(), host_apps=inputs.host_apps(),
                           cluster_enabled=self._controller.cluster_colocation_enabled())
        self.batch[node] = result
        return result

    def compute_mid(self, node: str) -> midresource.MidResult | None:
        return self._compute_mid(node, self._inputs(node))

    def _compute_mid(self, node: str, inputs: NodeInputs | None) -> midresource.MidResult | None:
        if inputs is None:
            return None
        result = midresource.calculate(inputs.node, inputs.pods, inputs.metric,
                                       self._controller.colocation_for(node), self._clock(),
                                       host_apps=inputs.host_apps(),
                                       cluster_enabled=self._controller.cluster_colocation_enabled())
        self.mid[node] = result
        return result

    # --- writes ---------------------------------------------------------------------------------------

    def write(self, node: str) -> None:
        """Recomputes the node's resources; the leader writes what moved.  Without Kubernetes the batch values
        are logged (there is no Node object to write them to)."""
        # One snapshot of the node's inputs for the whole round: each fetch copies the node's pod list.
        inputs = self._inputs(node)
        ratio = self._write_ratio(node, inputs)
        self._write_amplification(node, inputs, ratio)
        batch = self._compute_batch(node, inputs)
        mid = self._compute_mid(node, inputs)
        if batch is None or mid is None:
            return
        if self._batch_writer is None:
            log.info("node batch resources not written: no Kubernetes",
                     extra={"node": node, "batch_cpu_milli": batch.batch_cpu_milli,
                            "batch_memory_bytes": batch.batch_memory_bytes})
            return
        if not self._is_leader():
            return
        old = self._batch_written.get(node)
        stale = old is None or old.ratio != ratio or self._moved(node, old, batch.values)
        # A node whose patch kube-apiserver refuses for good backs off alone (DEFERRED) and is requeued when its
        # pause ends; the other nodes' writes go on.
        if stale and self._applied(self._batch_writer.apply(node, amplify_batch_cpu(batch.batch_cpu_milli, ratio),
                                                            batch.batch_memory_bytes)):
            self._batch_written[node] = _Written(batch.values, self._clock(), ratio)
            log.info("node batch resources", extra={"node": node, "reason": batch.reason})
        stale = self._moved(node, self._mid_written.get(node), mid.values)
        if stale and self._applied(self._mid_writer.apply(node, mid.mid_cpu_milli, mid.mid_memory_bytes)):
            self._mid_written[node] = _Written(mid.values, self._clock())
            log.info("node mid resources", extra={"node": node, "reason": mid.reason})

    def _moved(self, node: str, old: _Written | None, values: BatchValues) -> bool:
        return old is None or needs_update(old.values, values, old.at, self._clock(),
                                           self._controller.colocation_for(node))

    @staticmethod
    def _applied(result: Any) -> bool:
        from koordlet.companion import kube  # only with Kubernetes

        return result is not kube.ApplyResult.DEFERRED

    def _write_ratio(self, node: str, inputs: NodeInputs | None) -> str | None:
        """Decides the node's CPU normalization ratio and, on the leader, patches the annotation when the Node's
        differs; returns the ratio the batch-cpu is amplified by."""
        if inputs is None:
            return None
        annotations = inputs.node.annotations
        if not self._controller.configured:  # upstream: no ratio while the config is not available
            return current_ratio(annotations)
        leading = self._is_leader()
        decision = self.cpu_normalization.decide(node, self._controller.cpu_normalization_for(node),
                                                 inputs.node.labels, may_fetch=leading)
        if decision.ratio is None:  # nothing decided: the node keeps its ratio, the batch-cpu follows it
            return current_ratio(annotations)
        stale = leading and self._annotation_writer is not None and needs_write(annotations, decision.ratio)
        if stale and self._applied(self._annotation_writer.apply(node, {ANNOTATION_CPU_NORMALIZATION_RATIO:
                                                                        decision.ratio})):
            log.info("node cpu normalization ratio", extra={"node": node, "ratio": decision.ratio})
        return decision.ratio

    def _write_amplification(self, node: str, inputs: NodeInputs | None, ratio: str | None) -> None:
        """Decides the node's resource amplification ratios from this round's CPU normalization ``ratio`` and,
        on the leader, patches (or removes) the annotation when the Node's text differs (``NeedSyncMeta``)."""
        if inputs is None or not self._controller.configured:  # upstream: nothing while the config is unavailable
            return
        annotations = inputs.node.annotations
        # No ratio this round: the node's own annotation counts, an unreadable one included, which upstream
        # refuses rather than amplify the CPU as if the node were not normalized.
        normalization = ratio if ratio is not None else annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO)
        try:
            wanted = node_annotation(self._controller.amplification_for(node), normalization)
        except AmplificationRefused as err:
            if self._amplification_refused.get(node) != str(err):
                log.warning("resource amplification ratio refused, node left as it is",
                            extra={"node": node, "error": str(err)})
            self._amplification_refused[node] = str(err)
            return
        self._amplification_refused.pop(node, None)
        if not self._is_leader() or self._annotation_writer is None:
            return
        if annotations.get(ANNOTATION_RESOURCE_AMPLIFICATION_RATIO) == wanted:
            return
        if self._applied(self._annotation_writer.apply(node, {ANNOTATION_RESOURCE_AMPLIFICATION_RATIO: wanted})):
            log.info("node resource amplification ratio", extra={"node": node, "ratio": wanted})
