"""The node's CPU normalization ratio (Koordinator ``pkg/slo-controller/noderesource/plugins/cpunormalization``):
computed from ``cpu-normalization-config`` and the CPU basic info the node's koordlet reports, written as the
Node annotation ``node.koordinator.sh/cpu-normalization-ratio``, and used to amplify the node's batch-cpu
(``plugins/util/util.go``, ``PrepareNodeForResource``).

For one node (``Plugin.Calculate``):

* the strategy is the cluster one, overlaid by the first ``nodeConfigs`` entry whose selector matches;
* the node label ``node.koordinator.sh/cpu-normalization-enabled`` wins over the strategy's ``enable``;
* disabled: the ratio is "1.00" (upstream resets rather than removes);
* enabled: the ratio is the ``ratioModel`` entry of the node's CPU model, picked by hyper-threading and turbo
  (``hyperThreadTurboEnabledRatio``, ``hyperThreadEnabledRatio``, ``turboEnabledRatio``, ``baseRatio``), else
  ``defaultRatio``; it must lie in [1.0, 5.0] (upstream refuses ratios below 1 and absurd amplification);
* any missing or bad input (no basic info yet, a bad label, no ratio for the model, a ratio out of range)
  leaves the node's annotation as it is and says why (:class:`RatioRefused`).

The annotation is rewritten only when it differs by more than 0.01 (``NeedSyncMeta``).  This module is pure;
:class:`CPUNormalizer` holds the reported basic info and what was last decided per node.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis.cpunormalization import (
    ANNOTATION_CPU_BASIC_INFO,
    CPUBasicInfo,
    basic_info_of,
    enabled_label,
    format_ratio,
    parse_ratio,
    ratio_differs,
)
from koordlet.apis.sloconfig import CPUNormalizationStrategy
from koordlet.errors import KoordletError, ParseError

log = logging.getLogger(__name__)

DEFAULT_RATIO: Final = "1.00"
MIN_RATIO: Final = 1.0
MAX_RATIO: Final = 5.0


class RatioRefused(KoordletError, ValueError):
    """No ratio can be derived for the node now; its annotation is left as it is."""


def model_ratio(info: CPUBasicInfo, strategy: CPUNormalizationStrategy) -> float:
    """``getCPUNormalizationRatioFromModel``; raises RatioRefused naming the model and the missing field."""
    models = strategy.ratio_model or {}
    cfg = models.get(info.cpu_model)
    if cfg is None:
        raise RatioRefused(f"no ratio for CPU {info.cpu_model!r} in ratioModel")
    if info.hyper_thread_enabled and info.turbo_enabled:
        value, name = cfg.hyper_thread_turbo_enabled_ratio, "hyperThreadTurboEnabledRatio"
    elif info.hyper_thread_enabled:
        value, name = cfg.hyper_thread_enabled_ratio, "hyperThreadEnabledRatio"
    elif info.turbo_enabled:
        value, name = cfg.turbo_enabled_ratio, "turboEnabledRatio"
    else:
        value, name = cfg.base_ratio, "baseRatio"
    if value is None:
        raise RatioRefused(f"missing {name} for CPU {info.cpu_model!r}")
    return value


def node_ratio(strategy: CPUNormalizationStrategy, labels: Mapping[str, str], info: CPUBasicInfo | None) -> str:
    """The annotation value for a node (``Calculate``); raises RatioRefused saying why there is none."""
    try:
        by_label = enabled_label(labels)
    except ParseError as err:
        raise RatioRefused(str(err)) from None
    enabled = by_label if by_label is not None else bool(strategy.enable)
    if not enabled:
        return DEFAULT_RATIO
    if info is None:
        raise RatioRefused(f"the node's koordlet has not reported {ANNOTATION_CPU_BASIC_INFO} yet")
    try:
        ratio = model_ratio(info, strategy)
    except RatioRefused:
        if strategy.default_ratio is None:
            raise
        ratio = strategy.default_ratio
    if ratio < MIN_RATIO:
        raise RatioRefused(f"ratio {ratio} for CPU {info.cpu_model!r} is below the minimum {MIN_RATIO}")
    if ratio > MAX_RATIO:
        raise RatioRefused(f"ratio {ratio} for CPU {info.cpu_model!r} is above the maximum {MAX_RATIO}")
    return format_ratio(ratio)


def strategy_needs_info(strategy: CPUNormalizationStrategy, labels: Mapping[str, str]) -> bool:
    """Whether the node's ratio depends on its CPU basic info (normalization on for it)."""
    try:
        by_label = enabled_label(labels)
    except ParseError:
        return False
    return by_label if by_label is not None else bool(strategy.enable)


def needs_write(current: Mapping[str, str] | None, wanted: str) -> bool:
    """``NeedSyncMeta``: write when the node has no ratio, an unreadable one, or one off by more than 0.01."""
    try:
        old = parse_ratio(current)
    except ParseError:
        return True
    return old is None or ratio_differs(old, float(wanted))


def current_ratio(annotations: Mapping[str, str] | None) -> str | None:
    """The ratio a node carries now (what its koordlet scales quotas by), None when none or unreadable: the
    batch-cpu follows it while no new ratio can be decided, so the two never disagree."""
    try:
        value = parse_ratio(annotations)
    except ParseError:
        return None
    return None if value is None else format_ratio(value)


def amplify_batch_cpu(batch_cpu_milli: int | None, ratio: str | None) -> int | None:
    """The batch-cpu to advertise (``PrepareNodeForResource``): ``int64(milli * ratio)`` as a milli quantity,
    rounded up to a whole unit as the API requires an integer for extended resources; unchanged without a
    ratio above 1."""
    if batch_cpu_milli is None or ratio is None:
        return batch_cpu_milli
    factor = float(ratio)
    if factor <= 1.0:
        return batch_cpu_milli
    # batch-cpu's quantity counts milli-cores ("4000" = 4 cores), so its MilliValue() is the count x 1000.
    scaled = int(float(batch_cpu_milli * 1000) * factor)
    return -(-scaled // 1000)


TOPOLOGY_BASIC_INFO_KEY: Final = "cpuBasicInfo"
"""Where a koordlet's topology report carries its CPU basic info (an object; upstream puts its JSON text on the
NodeResourceTopology annotation ``node.koordinator.sh/cpu-basic-info``, also accepted here)."""


def basic_info_from_topology(topology: Mapping[str, Any]) -> CPUBasicInfo | None:
    """The CPU basic info of a koordlet's topology report; None when absent.  Raises ParseError when it is
    garbage."""
    if not isinstance(topology, Mapping):
        raise ParseError(f"topology report: expected a JSON object, got {type(topology).__name__}")
    raw = topology.get(TOPOLOGY_BASIC_INFO_KEY)
    where = f"topology report: {TOPOLOGY_BASIC_INFO_KEY}"
    if raw is None:
        annotations = topology.get("annotations")
        raw = annotations.get(ANNOTATION_CPU_BASIC_INFO) if isinstance(annotations, Mapping) else None
        where = f"topology report: annotations: {ANNOTATION_CPU_BASIC_INFO}"
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        raw = json.dumps(raw)
    if not isinstance(raw, str):
        raise ParseError(f"{where}: expected an object, got {type(raw).__name__}")
    return CPUBasicInfo.from_json_str(raw, where)


@dataclass(frozen=True)
class Decision:
    ratio: str | None
    """The annotation value the node should carry; None: leave it as it is."""
    reason: str


AnnotationsFetch = Callable[[str], Mapping[str, str] | None]
"""The annotations of a node's NodeResourceTopology (None: no such object)."""
FETCH_INTERVAL_SECONDS: Final = 60.0


class CPUNormalizer:
    """Per node: the reported CPU basic info and the last decision (for logs-once, the batch amplification
    and the koordlet's node info).

    A koordlet reports to whichever companion replica it is connected to, which need not be the leader.  So a
    leader that has no report of a node reads the basic info where upstream's controller always reads it: the
    ``node.koordinator.sh/cpu-basic-info`` annotation of the node's NodeResourceTopology (``fetch``, at most once
    per :data:`FETCH_INTERVAL_SECONDS` per node)."""

    def __init__(self, fetch: AnnotationsFetch | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._info: dict[str, CPUBasicInfo] = {}
        self._decided: dict[str, Decision] = {}
        self._logged: dict[str, str] = {}
        self.fetch = fetch
        self._clock = clock
        self._fetched: dict[str, float] = {}

    def set_basic_info(self, node: str, info: CPUBasicInfo | None) -> bool:
        """Records a node's reported info; True when it changed (the node's ratio must be recomputed)."""
        with self._lock:
            before = self._info.get(node)
            if info is None:
                self._info.pop(node, None)
            else:
                self._info[node] = info
        return before != info

    def on_topology(self, node: str, topology: Mapping[str, Any]) -> bool:
        """A koordlet's topology report; True when the node's CPU basic info changed.  Garbage raises
        ParseError (a ValueError) naming the field, and the last good info stays."""
        info = basic_info_from_topology(topology)
        if info is None:
            return False
        return self.set_basic_info(node, info)

    def basic_info(self, node: str) -> CPUBasicInfo | None:
        with self._lock:
            return self._info.get(node)

    def _fetch_info(self, node: str) -> None:
        fetch = self.fetch
        if fetch is None:
            return
        now = self._clock()
        with self._lock:
            last = self._fetched.get(node)
            if last is not None and now - last < FETCH_INTERVAL_SECONDS:
                return
            self._fetched[node] = now
        try:
            info = basic_info_of(fetch(node))
        except ParseError as err:
            log.warning("cpu basic info of the NodeResourceTopology refused", extra={"node": node, "error": str(err)})
            return
        except Exception as exc:  # kube-apiserver unreachable: the next round tries again after the interval
            log.warning("cpu basic info not read from the NodeResourceTopology", extra={"node": node,
                                                                                       "error": str(exc)})
            return
        if info is not None:
            with self._lock:
                self._info.setdefault(node, info)  # a report that arrived meanwhile is newer

    def decide(self, node: str, strategy: CPUNormalizationStrategy, labels: Mapping[str, str], *,
               may_fetch: bool = False) -> Decision:
        """The node's ratio now; ``may_fetch``: read the NodeResourceTopology when no report of the node came
        here and the ratio needs one (the leader)."""
        info = self.basic_info(node)
        if info is None and may_fetch and strategy_needs_info(strategy, labels):
            self._fetch_info(node)
            info = self.basic_info(node)
        try:
            ratio = node_ratio(strategy, labels, info)
            decision = Decision(ratio, "computed")
        except RatioRefused as err:
            with self._lock:
                last = self._decided.get(node)
            # Keep advertising what was last decided: a missing input must not flip the batch amplification.
            decision = Decision(last.ratio if last is not None else None, str(err))
            with self._lock:
                if self._logged.get(node) != decision.reason:
                    log.warning("cpu normalization ratio not computed, node left as it is",
                                extra={"node": node, "reason": decision.reason})
                self._logged[node] = decision.reason
        else:
            with self._lock:
                self._logged.pop(node, None)
        with self._lock:
            self._decided[node] = decision
        return decision

    def ratio(self, node: str) -> str | None:
        """The ratio last decided for the node (the annotation value), None when none was."""
        with self._lock:
            decision = self._decided.get(node)
        return decision.ratio if decision is not None else None

    def forget(self, node: str) -> None:
        with self._lock:
            self._fetched.pop(node, None)
            self._info.pop(node, None)
            self._decided.pop(node, None)
            self._logged.pop(node, None)
