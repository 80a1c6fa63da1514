"""The peak predict server (Koordinator ``pkg/koordlet/prediction/predict_server.go``): trains one model (a CPU
and a memory decaying histogram) per pod, per priority class, for the node and for the system part, from the
metric cache, checkpoints the models in the state dir and restores them after a restart.

Every training interval (1 min) each model takes one sample with weight 1: the p90 of the last interval's
usage.  A pod's priority class model takes the sum of its pods' samples (0 when it has none); the system
model takes the node's usage minus all pods' (not below 0).  Models not updated for 30 min are dropped with
their checkpoints; at most 12 models are checkpointed per minute, each at most once per 10 min, oldest first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.pod import Pod
from koordlet.component import Worker
from koordlet.metriccache import names
from koordlet.metriccache.aggregate import Aggregate
from koordlet.metriccache.cache import Labels, labels_of
from koordlet.prediction.checkpoint import FileCheckpointer, ModelCheckpoint, valid_uid
from koordlet.prediction.histogram import DecayingHistogram, ExponentialOptions

log = logging.getLogger(__name__)

NODE_UID: Final = "__node__"
SYSTEM_ITEM: Final = "sys"
"""The node item for the usage no pod accounts for (``SystemItemID``)."""
KNOWN_PRIORITY_CLASSES: Final = (PriorityClass.PROD, PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE,
                                 PriorityClass.NONE)
"""``extension.KnownPriorityClasses``, in upstream's order."""
PERCENTILES: Final = {"p60": 0.6, "p90": 0.9, "p95": 0.95, "p98": 0.98, "max": 1.0}

MIN_SAMPLE_WEIGHT: Final = 0.1
EPSILON: Final = 0.001 * MIN_SAMPLE_WEIGHT
BUCKET_GROWTH: Final = 0.05
CPU_OPTIONS: Final = ExponentialOptions(1024, 0.025, 1.0 + BUCKET_GROWTH, EPSILON)
"""CPU cores from 0.025 to 1024, buckets growing by 5 % (``defaultCPUHistogram``)."""
MEMORY_OPTIONS: Final = ExponentialOptions(float(1 << 41), float(5 << 20), 1.0 + BUCKET_GROWTH, EPSILON)
"""Memory bytes from 5 MiB to 2 TiB, buckets growing by 5 % (``defaultMemoryHistogram``)."""


def node_item_uid(item: str) -> str:
    """``__node-<item>__`` (``DefaultNodeItemIDFmt``); the NONE class gives ``__node-__``."""
    return f"__node-{item}__"


@dataclass(frozen=True, slots=True)
class PredictionConfig:
    """Upstream's ``prediction.NewDefaultConfig()``."""

    cold_start_seconds: float = 24 * 3600
    """A pod younger than this has no prediction: its request counts as its peak."""
    safety_margin_percent: int = 10
    """Headroom added above the predicted peak."""
    memory_half_life_seconds: float = 24 * 3600
    cpu_half_life_seconds: float = 12 * 3600
    training_interval_seconds: float = 60
    model_expiration_seconds: float = 30 * 60
    checkpoint_interval_seconds: float = 10 * 60
    checkpoint_max_per_step: int = 12


def priority_with_default(pod: Pod) -> PriorityClass:
    """``GetPodPriorityClassWithDefault``: the pod's band, else the one its QoS class implies."""
    band = pod.priority_class
    if band is not PriorityClass.NONE:
        return band
    qos = pod.qos
    if qos in (QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS):
        return PriorityClass.PROD
    if qos is QoSClass.BE:
        return PriorityClass.BATCH
    return PriorityClass.NONE


class UsageQuerier(Protocol):
    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        ...


class HasPod(Protocol):
    @property
    def pod(self) -> Pod:
        ...


class PodLister(Protocol):
    def pods(self) -> Sequence[HasPod]:
        ...


@dataclass
class Model:
    cpu: DecayingHistogram
    memory: DecayingHistogram
    last_updated: float = 0.0
    last_checkpointed: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class PredictionUnavailable(LookupError):
    """No model for the UID (never trained, or dropped)."""


class PeakPredictServer:
    """See the module docstring.  ``run_once(now)`` is one training round plus GC and checkpoint steps (the
    thread calls it every training interval; tests call it with their own clock)."""

    name: Final = "prediction"

    def __init__(self, cache: UsageQuerier, informer: PodLister, checkpoint_dir: Path,
                 config: PredictionConfig | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config or PredictionConfig()
        self._cache = cache
        self._informer = informer
        self._checkpointer = FileCheckpointer(checkpoint_dir)
        self.checkpoint_dir = self._checkpointer.directory
        self._clock = clock
        self._models: dict[str, Model] = {}
        self._lock = threading.Lock()
        self._restored = False
        self._worker = Worker("koordlet-prediction")

    # ---------------------------------------------------------------------------------- models

    def _new_model(self) -> Model:
        return Model(DecayingHistogram(CPU_OPTIONS, self.config.cpu_half_life_seconds),
                     DecayingHistogram(MEMORY_OPTIONS, self.config.memory_half_life_seconds))

    def update_model(self, uid: str, cpu_cores: float, memory_bytes: float, now: float) -> None:
        with self._lock:
            model = self._models.get(uid)
            if model is None:
                model = self._models[uid] = self._new_model()
        with model.lock:
            model.last_updated = now
            model.cpu.add_sample(cpu_cores, 1.0, now)
            model.memory.add_sample(memory_bytes, 1.0, now)

    def prediction(self, uid: str) -> dict[str, tuple[int, int]]:
        """``GetPrediction``: per percentile name, (CPU milli-cores, memory bytes) as upstream truncates them.
        Raises :class:`PredictionUnavailable` when there is no model for ``uid``."""
        with self._lock:
            model = self._models.get(uid)
        if model is None:
            raise PredictionUnavailable(f"UID {uid} not found in predict server")
        with model.lock:
            return {name: (int(model.cpu.percentile(p) * 1000.0), int(model.memory.percentile(p)))
                    for name, p in PERCENTILES.items()}

    def model_uids(self) -> list[str]:
        with self._lock:
            return sorted(self._models)

    # ---------------------------------------------------------------------------------- training

    def _p90(self, series: str, labels: Labels, now: float) -> float | None:
        stats = self._cache.aggregate(series, labels, self.config.training_interval_seconds, now)
        return None if stats is None else stats.p90

    def train(self, now: float) -> None:
        """``training()``: one sample per model from the last training interval of the metric cache."""
        items: dict[str, tuple[float, float]] = {}

        def add(item: str, cpu: float, memory: float) -> None:
            old = items.get(item, (0.0, 0.0))
            items[item] = (old[0] + cpu, old[1] + memory)

        all_pods: tuple[float, float] | None = None
        for meta in self._informer.pods():
            pod = meta.pod
            labels = labels_of(pod=pod.uid)
            cpu = self._p90(names.POD_CPU_USAGE, labels, now)
            memory = self._p90(names.POD_MEMORY_USAGE, labels, now)
            if cpu is None or memory is None or not valid_uid(pod.uid):
                continue  # upstream: query failed, the pod is skipped this round
            self.update_model(pod.uid, cpu, memory, now)
            add(priority_with_default(pod).value, cpu, memory)
            all_pods = (cpu + (all_pods or (0.0, 0.0))[0], memory + (all_pods or (0.0, 0.0))[1])

        node_labels = labels_of()
        node_cpu = self._p90(names.NODE_CPU_USAGE, node_labels, now)
        node_memory = self._p90(names.NODE_MEMORY_USAGE, node_labels, now)
        if node_cpu is not None and node_memory is not None:
            self.update_model(NODE_UID, node_cpu, node_memory, now)
        else:
            node_cpu, node_memory = 0.0, 0.0  # upstream keeps the zero values it got back with the error
        for band in KNOWN_PRIORITY_CLASSES:
            cpu, memory = items.get(band.value, (0.0, 0.0))
            self.update_model(node_item_uid(band.value), cpu, memory, now)
        sys_cpu, sys_memory = node_cpu, node_memory
        if all_pods is not None:
            sys_cpu, sys_memory = max(node_cpu - all_pods[0], 0.0), max(node_memory - all_pods[1], 0.0)
        self.update_model(node_item_uid(SYSTEM_ITEM), sys_cpu, sys_memory, now)

    def gc(self, now: float) -> None:
        """Drops models not updated for ``model_expiration_seconds`` and their checkpoints."""
        with self._lock:
            expired = [uid for uid, m in self._models.items()
                       if now - m.last_updated > self.config.model_expiration_seconds]
            for uid in expired:
                del self._models[uid]
        for uid in expired:
            log.info("prediction model expired", extra={"uid": uid})
            self._remove_checkpoint(uid)

    def checkpoint(self, now: float) -> int:
        """Saves up to ``checkpoint_max_per_step`` models not saved for ``checkpoint_interval_seconds``, least
        recently saved first; returns how many were saved."""
        with self._lock:
            pairs = sorted(self._models.items(), key=lambda kv: kv[1].last_checkpointed)
        saved = 0
        for uid, model in pairs:
            if saved >= self.config.checkpoint_max_per_step:
                break
            if now - model.last_checkpointed < self.config.checkpoint_interval_seconds:
                break
            with model.lock:
                ckpt = ModelCheckpoint(uid, model.cpu.save(), model.memory.save(), now)
            try:
                self._checkpointer.save(ckpt)
            except (OSError, ValueError) as exc:
                log.warning("prediction checkpoint not saved", extra={"uid": uid, "error": str(exc)})
            model.last_checkpointed = now
            saved += 1
        return saved

    def restore(self) -> int:
        """Loads the checkpoints of known models (the informer's pods, the node, its items) and removes the
        others; returns how many were loaded.  A checkpoint that does not fit is removed, the model starts
        empty."""
        known = {meta.pod.uid for meta in self._informer.pods()}
        known |= {NODE_UID, node_item_uid(SYSTEM_ITEM)} | {node_item_uid(b.value) for b in KNOWN_PRIORITY_CLASSES}
        loaded = 0
        for ckpt in self._checkpointer.restore():
            if ckpt.error is not None or ckpt.uid not in known:
                log.info("prediction checkpoint removed", extra={"uid": ckpt.uid, "error": ckpt.error or ""})
                self._remove_checkpoint(ckpt.uid)
                continue
            model = self._new_model()
            model.last_updated = ckpt.last_updated
            try:
                if ckpt.cpu is not None:
                    model.cpu.load(ckpt.cpu)
                if ckpt.memory is not None:
                    model.memory.load(ckpt.memory)
            except ValueError as exc:
                log.warning("prediction checkpoint does not fit, removed", extra={"uid": ckpt.uid, "error": str(exc)})
                self._remove_checkpoint(ckpt.uid)
                continue
            with self._lock:
                self._models[ckpt.uid] = model
            loaded += 1
        self._restored = True
        return loaded

    def _remove_checkpoint(self, uid: str) -> None:
        try:
            self._checkpointer.remove(uid)
        except OSError as exc:
            log.warning("prediction checkpoint not removed", extra={"uid": uid, "error": str(exc)})

    def run_once(self, now: float | None = None) -> None:
        """Restore (first call only), then train, GC and checkpoint at ``now``."""
        now = self._clock() if now is None else now
        if not self._restored:
            self.restore()
        self.train(now)
        self.gc(now)
        self.checkpoint(now)

    # ---------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        def step() -> float:
            try:
                self.run_once()
            except Exception as exc:  # a bad round (an I/O error) must not end prediction for good
                log.warning("prediction round failed", extra={"error": str(exc)})
            return self.config.training_interval_seconds

        # The first round waits one interval: the informer has its pods by then (restoring earlier would
        # drop every pod's checkpoint as unknown) and the cache has an interval of samples.
        self._worker.loop(step, on_failure, first_wait=self.config.training_interval_seconds)

    def stop(self, timeout_seconds: float) -> None:
        if not self._worker.stop(timeout_seconds):
            log.warning("prediction still busy at stop", extra={"timeout_seconds": timeout_seconds})
