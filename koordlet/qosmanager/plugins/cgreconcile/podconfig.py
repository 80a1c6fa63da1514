"""A pod's memory QoS configuration: its class's ``memoryQOS`` with the pod's ``koordinator.sh/memoryQOS``
annotation over it (Koordinator ``mergePodResourceQoSForMemoryQoS``).

The annotation is ``{"policy": "default"|"auto"|"none", <MemoryQOS fields>}``:

* ``none`` turns memory QoS off for the pod whatever its class says;
* ``auto`` starts from Koordinator's recommended values for the pod's class (``DefaultResourceQOSStrategy``)
  and turns it on even when the class is off;
* ``default`` (or no policy) starts from the class's configuration and is on when the class is.

Fields in the annotation override the starting values (``util.MergeCfg``).  Koordinator logs a parse error
and falls back to the class; here a garbage annotation (not JSON, not an object, an unknown policy, a value
out of range) skips the pod, and the decision says which pod and why: an operator who wrote an annotation
meant something else than the class's values, and guessing could protect or throttle the wrong amount."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.apis.extension import QoSClass
from koordlet.apis.gojson import loads
from koordlet.apis.nodeslo import MemoryQOSCfg, ResourceQOSStrategy, default_resource_qos
from koordlet.errors import ConfigError

log = logging.getLogger(__name__)

ANNOTATION_MEMORY_QOS = "koordinator.sh/memoryQOS"
POLICY_DEFAULT = "default"
POLICY_AUTO = "auto"
POLICY_NONE = "none"
POLICIES = ("", POLICY_DEFAULT, POLICY_AUTO, POLICY_NONE)
_CACHE_LIMIT = 4096


@dataclass(frozen=True)
class PodMemoryConfig:
    """The pod's effective memory QoS: ``enabled`` False means the strategy leaves it (or resets it)."""

    enabled: bool
    cfg: MemoryQOSCfg
    policy: str = POLICY_DEFAULT
    """Where the values came from: default (the class), auto (recommended) or none."""
    error: str | None = None
    """Why the annotation was refused; the pod is skipped."""


def class_config(strategy: ResourceQOSStrategy, qos: QoSClass) -> MemoryQOSCfg | None:
    """The ``memoryQOS`` of the class a pod of ``qos`` follows (LSE uses LSR's, as in Koordinator's
    ``GetPodResourceQoSByQoSClass``); None for pods of no class."""
    classes = {QoSClass.LSE: strategy.lsr_class, QoSClass.LSR: strategy.lsr_class, QoSClass.LS: strategy.ls_class,
               QoSClass.BE: strategy.be_class, QoSClass.SYSTEM: strategy.system_class}
    resource_qos = classes.get(qos)
    return None if resource_qos is None else resource_qos.memory_qos


def recommended(qos: QoSClass) -> MemoryQOSCfg:
    """Koordinator's default ``memoryQOS`` for the class (what policy ``auto`` applies)."""
    base = default_resource_qos(QoSClass.LSR if qos is QoSClass.LSE else qos).memory_qos
    assert base is not None  # default_resource_qos always sets it
    return dataclasses.replace(base, enable=True)


def _overrides(pod: MemoryQOSCfg) -> dict[str, Any]:
    # The annotation carries MemoryQOS without its "enable" (Koordinator's PodMemoryQOSConfig inlines
    # MemoryQOS, not MemoryQOSCfg): the policy says whether the pod is on.
    return {f.name: getattr(pod, f.name) for f in dataclasses.fields(pod)
            if f.name != "enable" and getattr(pod, f.name) is not None}


def parse(pod_key: str, text: str, qos: QoSClass, node: MemoryQOSCfg | None) -> PodMemoryConfig:
    """The configuration of pod ``pod_key`` of class ``qos`` whose annotation is ``text``."""
    fallback = node or MemoryQOSCfg(enable=False)
    where = f"pod {pod_key}: annotation {ANNOTATION_MEMORY_QOS}"
    try:
        raw = loads(text)
    except ValueError as exc:
        return PodMemoryConfig(False, fallback, error=f"{where} is not JSON ({exc}): {text!r}")
    if not isinstance(raw, Mapping):
        return PodMemoryConfig(False, fallback, error=f"{where} must be a JSON object, got {text!r}")
    policy = raw.get("policy", "")
    if policy not in POLICIES:
        return PodMemoryConfig(False, fallback, error=f"{where}: unknown policy {policy!r} "
                                                      f"(expected default, auto or none)")
    try:
        pod = MemoryQOSCfg.from_json(raw, ANNOTATION_MEMORY_QOS)
    except ConfigError as exc:
        return PodMemoryConfig(False, fallback, error=f"pod {pod_key}: {exc}")
    if policy == POLICY_NONE:
        return PodMemoryConfig(False, fallback, POLICY_NONE)
    if policy == POLICY_AUTO:
        if qos is QoSClass.NONE:
            return PodMemoryConfig(False, fallback, error=f"{where}: policy auto needs a QoS class, the pod has none")
        return PodMemoryConfig(True, dataclasses.replace(recommended(qos), **_overrides(pod)), POLICY_AUTO)
    enabled = node is not None and node.enable is True
    return PodMemoryConfig(enabled, dataclasses.replace(fallback, **_overrides(pod)))


class PodConfigs:
    """Parses each distinct annotation once (rounds run every second; annotations rarely change) and
    logs a refused one once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, QoSClass, MemoryQOSCfg | None], PodMemoryConfig] = {}
        self._plain: dict[MemoryQOSCfg | None, PodMemoryConfig] = {}
        """Pods without the annotation, by their class's configuration."""

    def get(self, pod_key: str, annotations: Mapping[str, str], qos: QoSClass,
            node: MemoryQOSCfg | None) -> PodMemoryConfig:
        """The configuration of pod ``pod_key`` of class ``qos`` whose class has ``node``
        (:func:`class_config`)."""
        text = annotations.get(ANNOTATION_MEMORY_QOS)
        if text is None:
            found = self._plain.get(node)
            if found is None:
                found = self._plain[node] = PodMemoryConfig(node is not None and node.enable is True,
                                                            node or MemoryQOSCfg(enable=False))
            return found
        key = (pod_key, text, qos, node)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
                self._plain.clear()
            found = self._cache[key] = parse(pod_key, text, qos, node)
            if found.error is not None:
                log.warning("pod memoryQOS annotation refused, pod skipped", extra={"pod": pod_key,
                                                                                   "error": found.error})
        return found
