"""The SLO controller (Koordinator ``slo-controller/nodeslo``): one NodeSLO spec per node, rendered from the
``slo-controller-config`` ConfigMap and the node's labels.

Bad input is contained per ConfigMap key: a key that fails validation (not JSON, a field out of range...)
keeps its *last good* text, so the NodeSLO in force does not change because of a typo, while the other
keys of the same edit still apply.  A key that was never good falls back to Koordinator's defaults.  The
errors name the key and the field path (``resource-threshold-config: clusterStrategy:
cpuSuppressThresholdPercent: must be 0..100, got 160``) and stay readable in :attr:`SLOController.errors`
until the key is fixed.

Each node's spec carries a generation that grows whenever its rendered JSON changes; listeners hear about
changed nodes only, so a ConfigMap edit that does not touch a node causes no churn on it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.apis.gojson import member
from koordlet.apis.sloconfig import (
    COLOCATION_CONFIG_KEY,
    ColocationStrategy,
    CPUNormalizationStrategy,
    ResourceAmplificationStrategy,
    default_colocation_strategy,
    keep_last_good,
    render_colocation,
    render_cpu_normalization,
    render_nodeslo,
    render_resource_amplification,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderedSLO:
    generation: int
    spec: dict[str, Any]
    """The NodeSLO spec as Koordinator JSON."""
    origin: str


Listener = Callable[[list[str]], None]
"""Called with the names of the nodes whose spec changed (from the thread that made the change)."""


class SLOController:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._good: dict[str, str] = {}
        self._errors: dict[str, str] = {}
        self._origin = "defaults"
        self._configured = False
        self._nodes: dict[str, dict[str, str]] = {}
        self._rendered: dict[str, RenderedSLO] = {}
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # --- inputs -----------------------------------------------------------------------------------------

    def set_configmap(self, data: Mapping[str, Any], origin: str) -> dict[str, str]:
        """Takes a new ConfigMap ``data``; returns the keys that were refused and why (their last good
        text stays in force)."""
        with self._lock:
            self._good, errors = keep_last_good(self._good, data)
            self._configured = True
            self._errors = errors
            self._origin = origin
            changed = self._render(self._nodes)
        for key, why in errors.items():
            log.warning("slo-controller-config key refused, last good kept", extra={"key": key, "error": why})
        self._notify(changed)
        return dict(errors)

    def set_node(self, name: str, labels: Mapping[str, str]) -> None:
        with self._lock:
            if self._nodes.get(name) == dict(labels) and name in self._rendered:
                return
            self._nodes[name] = dict(labels)
            changed = self._render({name: self._nodes[name]})
        self._notify(changed)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
            self._rendered.pop(name, None)

    # --- outputs ----------------------------------------------------------------------------------------

    def spec_for(self, node: str) -> RenderedSLO | None:
        with self._lock:
            return self._rendered.get(node)

    def colocation_for(self, node: str) -> ColocationStrategy:
        """The node's colocation strategy (batch resources) from the last good ``colocation-config``."""
        with self._lock:
            labels = self._nodes.get(node, {})
            data = dict(self._good)
        strategy, _ = render_colocation(data, labels)
        return strategy

    @property
    def configured(self) -> bool:
        """Whether a ConfigMap (or its absence) has been taken yet: until then every key is at its defaults only
        because nothing was read, which a controller writing node metadata must not act on."""
        with self._lock:
            return self._configured

    def cpu_normalization_for(self, node: str) -> CPUNormalizationStrategy:
        """The node's CPU normalization strategy from the last good ``cpu-normalization-config`` (disabled
        without one)."""
        with self._lock:
            labels = self._nodes.get(node, {})
            data = dict(self._good)
        strategy, _ = render_cpu_normalization(data, labels)
        return strategy

    def amplification_for(self, node: str) -> ResourceAmplificationStrategy:
        """The node's resource amplification strategy from the last good ``resource-amplification-config``
        (disabled without one)."""
        with self._lock:
            labels = self._nodes.get(node, {})
            data = dict(self._good)
        strategy, _ = render_resource_amplification(data, labels)
        return strategy

    def cluster_colocation_enabled(self) -> bool:
        """``colocation-config``'s cluster-level ``enable`` (a node override cannot switch on what the cluster
        switched off: Koordinator checks both)."""
        with self._lock:
            text = self._good.get(COLOCATION_CONFIG_KEY)
        if text is None:
            return bool(default_colocation_strategy().enable)
        return member(json.loads(text), "enable") is True  # Go's decoder matches "Enable" too

    @property
    def errors(self) -> dict[str, str]:
        with self._lock:
            return dict(self._errors)

    @property
    def nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    # --- internals --------------------------------------------------------------------------------------

    def _render(self, nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
        changed = []
        for name, labels in nodes.items():
            spec, _ = render_nodeslo(self._good, labels)  # the good keys render without error
            spec_json = spec.to_json()
            previous = self._rendered.get(name)
            if previous is not None and previous.spec == spec_json:
                continue
            generation = previous.generation + 1 if previous is not None else 1
            self._rendered[name] = RenderedSLO(generation, spec_json, self._origin)
            changed.append(name)
        return changed

    def _notify(self, nodes: list[str]) -> None:
        if not nodes:
            return
        for listener in self._listeners:
            try:
                listener(nodes)
            except Exception:  # a listener's bug must not stop the others from hearing about the change
                log.exception("NodeSLO listener failed")

