"""Peak prediction (Koordinator pkg/koordlet/prediction): decaying histograms of usage per pod and per priority
class, checkpointed in the state dir, giving NodeMetric its prodReclaimableMetric."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from koordlet.apis.quantity import int_value, milli_value
from koordlet.prediction.predictor import Pair, PredictionError, ProdReclaimablePredictor, factory
from koordlet.prediction.server import PeakPredictServer, PredictionConfig, PredictionUnavailable, UsageQuerier

CHECKPOINT_DIR: Final = "prediction-checkpoints"
"""Directory under the state dir (upstream's default ``--prediction-checkpoint-filepath`` is
``/prediction-checkpoints``)."""

__all__ = ["CHECKPOINT_DIR", "Pair", "PeakPredictServer", "PredictionConfig", "PredictionError",
           "PredictionUnavailable", "ProdReclaimablePredictor", "build", "factory", "node_allocatable_of"]


def node_allocatable_of(informer: Any, node: Any) -> Callable[[], Pair | None]:
    """The node's allocatable as upstream's predictor reads it (``status.allocatable``): the Node the companion
    sends down when there is one, else what kubelet would compute here (capacity minus its reservation)."""

    def allocatable() -> Pair | None:
        kube_node = getattr(informer, "kube_node", None)
        found = kube_node() if kube_node is not None else None
        if found is not None:
            values = found.allocatable
            if "cpu" in values and "memory" in values:
                try:
                    return Pair(milli_value(values["cpu"]), int_value(values["memory"]))
                except ValueError:
                    pass  # a malformed quantity: fall back to the local figure below
        reservation = informer.reservation()
        return Pair(max(node.cpu_count * 1000 - reservation.cpu_milli, 0),
                    max(node.memory_total_bytes - reservation.memory_bytes, 0))

    return allocatable


PredictorFactory = Callable[[float], ProdReclaimablePredictor]


def build(cache: UsageQuerier, informer: Any, node: Any, checkpoint_dir: Path,
          config: PredictionConfig | None = None) -> tuple[PeakPredictServer, PredictorFactory]:
    """The predict server (a daemon component) and the predictor factory the NodeMetric reporter uses."""
    server = PeakPredictServer(cache, informer, Path(checkpoint_dir), config)
    return server, factory(server, node_allocatable_of(informer, node))
