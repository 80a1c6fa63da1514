"""The prod-reclaimable predictor (Koordinator ``pkg/koordlet/prediction/peak_predictor.go``,
``ProdReclaimablePredictor``): the minimum of two estimates of what prod pods requested but will not use.

Per pod (``podReclaimablePredictor``), for each prod (or unclassified) pod past its cold start::

    peakCPU   = int(p95 CPU milli  x (100 + margin) / 100)     peakMemory = int(p98 memory x (100 + margin) / 100)
    reclaimable += max(request - peak, 0)                        unReclaimable += peak
    result = min(max(nodeAllocatable - unReclaimable, 0), reclaimable)

Per priority class (``priorityReclaimablePredictor``)::

    unReclaimable = int((p95/p98 of the system model + those of the prod and none class models) x (1 + margin))
    result = min(max(nodeAllocatable - unReclaimable, 0), max(sum of prod requests - unReclaimable, 0))

A young pod (cold start) or one without a model adds nothing reclaimable and its request to the peak; a
terminating or finished pod adds nothing.  Quirk kept from upstream's ``minPredictor.AddPod``: a pod whose
prediction fails is not added to the priority-class estimate either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from koordlet.apis.extension import PriorityClass
from koordlet.apis.nodemetric import parse_time
from koordlet.apis.pod import Pod
from koordlet.prediction.server import (
    KNOWN_PRIORITY_CLASSES,
    SYSTEM_ITEM,
    PeakPredictServer,
    PredictionUnavailable,
    node_item_uid,
    priority_with_default,
)

_RECLAIMABLE_FOR_PROD: Final = frozenset({PriorityClass.PROD, PriorityClass.NONE})
"""``isPriorityClassReclaimableForProd``."""


@dataclass(frozen=True, slots=True)
class Pair:
    """CPU in milli-cores and memory in bytes."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Pair) -> Pair:
        return Pair(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)

    def minimum(self, other: Pair) -> Pair:
        return Pair(min(self.cpu_milli, other.cpu_milli), min(self.memory_bytes, other.memory_bytes))

    def maximum(self, other: Pair) -> Pair:
        return Pair(max(self.cpu_milli, other.cpu_milli), max(self.memory_bytes, other.memory_bytes))

    def minus_floor_zero(self, other: Pair) -> Pair:
        return Pair(max(self.cpu_milli - other.cpu_milli, 0), max(self.memory_bytes - other.memory_bytes, 0))


class PredictionError(Exception):
    """The predictor cannot give a result (no node allocatable, a missing class model...)."""


def pod_request(pod: Pod) -> Pair:
    """The sum of the containers' CPU and memory requests (``GetPodRequest`` for cpu and memory)."""
    cpu = sum(c.requests.cpu_milli or 0 for c in pod.containers)
    memory = sum(c.requests.memory_bytes or 0 for c in pod.containers)
    return Pair(cpu, memory)


def _scale_margin(value: int, margin_percent: int) -> int:
    # util.MultiplyMilliQuant / MultiplyQuant: int64(float64(v) * float64(100+margin)/100).
    return int(float(value) * (float(100 + margin_percent) / 100))


class ProdReclaimablePredictor:
    """One use: add every pod with metrics, then read :meth:`result` (and :meth:`peak`)."""

    def __init__(self, server: PeakPredictServer, node_allocatable: Pair | None, now: float) -> None:
        self._server = server
        self._allocatable = node_allocatable
        self._now = now
        cfg = server.config
        self._cold_start = cfg.cold_start_seconds
        self._margin = cfg.safety_margin_percent
        self._pods: set[str] = set()
        self._reclaimable = Pair()
        self._unreclaimable = Pair()
        self._unpredicted = Pair()
        self._prod_request = Pair()

    def _young(self, pod: Pod) -> bool:
        if not pod.creation_timestamp:
            return False  # Go's zero time: never in cold start
        try:
            created = parse_time(pod.creation_timestamp)
        except ValueError:
            return True  # unknown age: conservatively its request is its peak
        return self._now - created <= self._cold_start

    def add_pod(self, pod: Pod) -> None:
        """Raises :class:`PredictionError` for a duplicate pod or one without a model (its request then
        counts as peak, as upstream)."""
        if priority_with_default(pod) not in _RECLAIMABLE_FOR_PROD:
            return
        if pod.uid in self._pods:
            raise PredictionError(f"pod {pod.key} already added to the prod reclaimable predictor")
        self._pods.add(pod.uid)
        self._add_pod_level(pod)
        if pod.deleting or pod.terminated:
            return
        self._prod_request += pod_request(pod)

    def _add_pod_level(self, pod: Pod) -> None:
        if self._young(pod):
            self._unpredicted += pod_request(pod)
            return
        if pod.deleting or pod.terminated:
            return
        try:
            result = self._server.prediction(pod.uid)
        except PredictionUnavailable as exc:
            self._unpredicted += pod_request(pod)
            raise PredictionError(f"pod {pod.key}: {exc}") from None
        request = pod_request(pod)
        peak = Pair(_scale_margin(result["p95"][0], self._margin), _scale_margin(result["p98"][1], self._margin))
        self._unreclaimable += peak
        self._reclaimable += Pair(max(request.cpu_milli - peak.cpu_milli, 0),
                                  max(request.memory_bytes - peak.memory_bytes, 0))

    def _priority_unreclaimable(self) -> Pair:
        try:
            sys = self._server.prediction(node_item_uid(SYSTEM_ITEM))
            total = Pair(sys["p95"][0], sys["p98"][1])
            for band in KNOWN_PRIORITY_CLASSES:
                if band not in _RECLAIMABLE_FOR_PROD:
                    continue
                item = self._server.prediction(node_item_uid(band.value))
                total += Pair(item["p95"][0], item["p98"][1])
        except PredictionUnavailable as exc:
            raise PredictionError(str(exc)) from None
        return Pair(_scale_margin(total.cpu_milli, self._margin), _scale_margin(total.memory_bytes, self._margin))

    def result(self) -> Pair:
        """The prod reclaimable resources; raises :class:`PredictionError` when either estimate has none."""
        if self._allocatable is None:
            raise PredictionError("node allocatable unknown")
        by_pod = self._allocatable.minus_floor_zero(self._unreclaimable).minimum(self._reclaimable)
        unreclaimable = self._priority_unreclaimable()
        by_priority = self._allocatable.minus_floor_zero(unreclaimable).minimum(
            self._prod_request.minus_floor_zero(unreclaimable))
        return by_pod.minimum(by_priority)

    def peak(self) -> Pair:
        """The predicted prod peak: the larger of the two estimates' peaks."""
        return (self._unreclaimable + self._unpredicted).maximum(self._priority_unreclaimable())


def factory(server: PeakPredictServer, node_allocatable: Callable[[], Pair | None]
            ) -> Callable[[float], ProdReclaimablePredictor]:
    """A maker of one predictor per NodeMetric round, with the node's allocatable at that time."""
    return lambda now: ProdReclaimablePredictor(server, node_allocatable(), now)
