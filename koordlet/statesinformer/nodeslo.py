"""The NodeSLO in force on this node, and where it came from.

Strategies read :meth:`NodeSLOHolder.current`: the last good spec merged over Koordinator's defaults.
A source offers new specs (the local file here, the companion later); a spec that fails validation is
rejected with its field path and the last good one stays in force, so an operator's typo never takes the
node back to defaults or half-applies a spec.

The local file may hold any of the shapes operators already have:

* a NodeSLO object (``apiVersion: slo.koordinator.sh/v1alpha1``, ``kind: NodeSLO``, ``spec: ...``);
* a bare NodeSLO spec (``resourceUsedThresholdWithBE: ...``);
* a ``slo-controller-config`` ConfigMap (full manifest or its ``data``), rendered for this node as the
  SLO controller would.  A ConfigMap with a bad key is rejected as a whole here: the controller falls
  back per key, but a node agent should not silently run half of what its operator wrote.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from koordlet.apis.nodeslo import NodeSLOSpec, default_nodeslo_spec, merge_over_defaults
from koordlet.apis.sloconfig import configmap_data_from_yaml, keep_last_good, render_nodeslo
from koordlet.errors import ConfigError, ParseError

log = logging.getLogger(__name__)

_CONFIGMAP_KEYS = frozenset({"colocation-config", "resource-threshold-config", "resource-qos-config",
                             "cpu-burst-config", "system-config", "host-application-config",
                             "cpu-normalization-config", "resource-amplification-config"})


@dataclass(frozen=True)
class Effective:
    """The spec in force (merged over defaults), its origin, and the last rejected offer."""

    spec: NodeSLOSpec
    origin: str
    """``defaults``, ``file:<path>``, ``companion``..."""
    generation: int
    """Counts accepted specs; strategies compare it to notice a change."""
    rejected: str | None = None
    """Why the newest offer was refused (None when the newest offer is in force)."""


class NodeSLOHolder:
    """Thread-safe holder of the effective NodeSLO with last-good semantics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = Effective(merge_over_defaults(default_nodeslo_spec()), "defaults", 0)
        self._listeners: list[Callable[[Effective], None]] = []

    def current(self) -> Effective:
        with self._lock:
            return self._state

    def subscribe(self, listener: Callable[[Effective], None]) -> None:
        self._listeners.append(listener)

    def offer_spec(self, spec_json: Any, origin: str, where: str = "spec") -> bool:
        """Validates a NodeSLO spec (JSON-shaped) and puts it in force; False (and the error kept in
        :attr:`Effective.rejected`, logged) when it is invalid."""
        try:
            spec = merge_over_defaults(NodeSLOSpec.from_json(spec_json, where))
        except ConfigError as err:
            return self.reject(origin, str(err))
        return self._accept(spec, origin)

    def offer(self, spec: NodeSLOSpec, origin: str) -> bool:
        """Puts an already decoded spec in force (merged over the defaults)."""
        try:
            merged = merge_over_defaults(spec)
        except ConfigError as err:
            return self.reject(origin, str(err))
        return self._accept(merged, origin)

    def reject(self, origin: str, reason: str) -> bool:
        with self._lock:
            previous = self._state.rejected
            self._state = Effective(self._state.spec, self._state.origin, self._state.generation,
                                    f"{origin}: {reason}")
        if previous != self._state.rejected:
            log.error("NodeSLO rejected, the last good one stays in force",
                      extra={"origin": origin, "in_force": self._state.origin, "reason": reason})
        return False

    def _accept(self, spec: NodeSLOSpec, origin: str) -> bool:
        with self._lock:
            changed = spec != self._state.spec or origin != self._state.origin
            generation = self._state.generation + 1 if changed else self._state.generation
            self._state = Effective(spec, origin, generation)
            state = self._state
        if changed:
            log.info("NodeSLO in force", extra={"origin": origin, "generation": generation})
            for listener in self._listeners:
                listener(state)
        return True


def spec_json_from_text(text: str, node_labels: Mapping[str, str], where: str) -> dict[str, Any]:
    """The NodeSLO spec (JSON-shaped) held by ``text`` in any of the accepted shapes; raises ConfigError
    or ParseError naming ``where`` and what was wrong."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ParseError(f"{where}: not valid YAML or JSON: {err}") from None
    if not docs:
        return {}
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        raise ParseError(f"{where}: expected one mapping, got {len(docs)} document(s)")
    doc = docs[0]
    kind = doc.get("kind")
    data = doc.get("data") if kind == "ConfigMap" or ("data" in doc and kind is None) else None
    if kind == "ConfigMap" or data is not None or _CONFIGMAP_KEYS & set(doc):
        configmap = configmap_data_from_yaml(text)
        spec, errors = render_nodeslo(configmap, node_labels)
        if errors:
            raise ConfigError(f"{where}: " + "; ".join(str(e) for e in errors))
        return spec.to_json()
    if kind is not None and kind != "NodeSLO":
        raise ConfigError(f"{where}: kind {kind!r} is neither NodeSLO nor ConfigMap")
    spec_obj = doc.get("spec", {}) if kind == "NodeSLO" else doc
    if spec_obj is None:
        return {}
    if not isinstance(spec_obj, Mapping):
        raise ConfigError(f"{where}: spec must be an object, got {type(spec_obj).__name__}")
    return dict(spec_obj)


def is_configmap(text: str) -> bool:
    """Whether ``text`` is an ``slo-controller-config`` ConfigMap (a manifest, a ``data:`` patch or bare
    data keys) rather than a NodeSLO or its spec; False for text that is not one YAML mapping."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        return False
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        return False
    doc = docs[0]
    kind = doc.get("kind")
    return kind == "ConfigMap" or ("data" in doc and kind is None) or bool(_CONFIGMAP_KEYS & set(doc))


class FileNodeSLOSource:
    """Offers the NodeSLO of a local file to a holder whenever the file changes (checked by
    :meth:`poll`, a ``stat`` per call).  A missing file means Koordinator's defaults.

    A NodeSLO (or its spec) is taken or refused as a whole.  An ``slo-controller-config`` ConfigMap is
    rendered by the same per-key rules as the companion's SLO controller (:func:`keep_last_good`): a bad
    key keeps its last good text and is reported in :attr:`Effective.rejected`, the other keys apply - the
    NodeSLO is the one the companion would serve this node for the same ConfigMap."""

    def __init__(self, path: str, holder: NodeSLOHolder, node_labels: Mapping[str, str] | None = None) -> None:
        self.path = path
        self._holder = holder
        self._labels = dict(node_labels or {})
        self._seen: tuple[float, int, int] | None = None
        self._good: dict[str, str] = {}
        """The ConfigMap keys in force: each key's last text that validated."""

    def poll(self) -> bool:
        """Re-reads the file if it changed; True when a new spec was put in force."""
        origin = f"file:{self.path}"
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._seen == (0.0, 0, 0):
                return False
            self._seen = (0.0, 0, 0)
            return self._holder.offer_spec({}, f"{origin} (missing: defaults)")
        except OSError as err:
            return self._holder.reject(origin, f"cannot stat: {err.strerror}")
        stamp = (st.st_mtime, st.st_size, st.st_ino)
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
            if is_configmap(text):
                return self._offer_configmap(text, origin)
            spec_json = spec_json_from_text(text, self._labels, self.path)
        except (OSError, UnicodeDecodeError) as err:
            return self._holder.reject(origin, f"cannot read: {err}")
        except (ConfigError, ParseError) as err:
            return self._holder.reject(origin, str(err))
        return self._holder.offer_spec(spec_json, origin)

    def _offer_configmap(self, text: str, origin: str) -> bool:
        self._good, errors = keep_last_good(self._good, configmap_data_from_yaml(text))
        for key, why in errors.items():
            log.warning("slo-controller-config key refused, last good kept", extra={"key": key, "error": why})
        spec, _ = render_nodeslo(self._good, self._labels)  # the good keys render without error
        accepted = self._holder.offer_spec(spec.to_json(), origin)
        if errors:
            refused = "; ".join(errors[key] for key in sorted(errors))
            self._holder.reject(origin, f"{self.path}: key(s) refused, last good kept: {refused}")
        return accepted


def dump_spec(spec: NodeSLOSpec) -> str:
    return json.dumps(spec.to_json(), sort_keys=True)
