"""A pod's burst configuration: the node's ``cpuBurstStrategy`` with the pod's ``koordinator.sh/cpuBurst``
annotation laid over it (Koordinator ``genPodBurstConfig``: marshal the pod's, unmarshal into a copy of
the node's, so fields the pod leaves out keep the node's values).

A garbage annotation is bad runtime input: the pod runs under the node's strategy (a tenant's typo must
not change how the node treats the pod), and the error names the pod and what was wrong.  Koordinator
accepts any policy string there and treats an unknown one as ``none``; here it is rejected like the rest,
which also ends up at the node's policy but says why."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.apis.gojson import loads
from koordlet.apis.nodeslo import CPUBurstStrategy, merge_json
from koordlet.errors import ConfigError

log = logging.getLogger(__name__)

ANNOTATION_CPU_BURST = "koordinator.sh/cpuBurst"
NONE = "none"
CPU_BURST_ONLY = "cpuBurstOnly"
CFS_QUOTA_BURST_ONLY = "cfsQuotaBurstOnly"
AUTO = "auto"
_NODE_ONLY = "sharePoolThresholdPercent"
"""A node-wide field: Koordinator's per-pod ``CPUBurstConfig`` has no such key."""
_CACHE_LIMIT = 4096


def burst_enabled(policy: str | None) -> bool:
    """``cpu.cfs_burst_us`` is set under cpuBurstOnly and auto."""
    return policy in (CPU_BURST_ONLY, AUTO)


def quota_burst_enabled(policy: str | None) -> bool:
    """The cfs quota is scaled under cfsQuotaBurstOnly and auto."""
    return policy in (CFS_QUOTA_BURST_ONLY, AUTO)


@dataclass(frozen=True)
class PodConfig:
    config: CPUBurstStrategy
    error: str | None = None
    """Why the pod's annotation was ignored (None: no annotation, or a good one)."""


class PodConfigs:
    """Parses annotations once per distinct (annotation, node strategy): rounds run every second and
    annotations rarely change."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, CPUBurstStrategy], PodConfig] = {}
        self._plain: PodConfig | None = None
        """The config of a pod without the annotation (the node's), kept while the node's stays the same."""

    def plain(self, node: CPUBurstStrategy) -> PodConfig:
        """The config of a pod without the annotation: the node's."""
        plain = self._plain
        if plain is None or plain.config is not node:
            plain = self._plain = PodConfig(node)
        return plain

    def get(self, pod_key: str, annotations: Mapping[str, str], node: CPUBurstStrategy) -> PodConfig:
        text = annotations.get(ANNOTATION_CPU_BURST)
        if text is None:
            return self.plain(node)
        key = (pod_key, text, node)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[key] = parse(pod_key, text, node)
            if found.error is not None:  # logged once per distinct annotation, not every round
                log.warning("pod cpuBurst annotation ignored, the node's strategy applies",
                            extra={"pod": pod_key, "error": found.error})
        return found


def parse(pod_key: str, text: str, node: CPUBurstStrategy) -> PodConfig:
    """The node strategy with the annotation ``text`` of pod ``pod_key`` over it."""
    try:
        raw = loads(text)
    except ValueError as exc:
        return PodConfig(node, f"pod {pod_key}: {ANNOTATION_CPU_BURST} is not JSON ({exc}): {text!r}")
    try:
        pod = CPUBurstStrategy.from_json(raw, ANNOTATION_CPU_BURST)
    except ConfigError as exc:
        return PodConfig(node, f"pod {pod_key}: {exc}")
    overrides = {k: v for k, v in pod.to_json().items() if k != _NODE_ONLY}
    return PodConfig(CPUBurstStrategy.from_json(merge_json(node.to_json(), overrides), ANNOTATION_CPU_BURST))
