"""The node's resource amplification ratios (Koordinator ``pkg/slo-controller/noderesource/plugins/
resourceamplification``), written as the Node annotation ``node.koordinator.sh/resource-amplification-ratio``
for the scheduler, which lets pods allocate that many times the node's allocatable of a resource.

For one node (``Plugin.Calculate``):

* the strategy is ``resource-amplification-config``'s cluster one, overlaid by the first ``nodeConfigs`` entry
  whose selector matches; its ratios count only when it is enabled;
* the CPU ratio is the configured one (1 when unset or not positive) times the node's CPU normalization ratio
  (when positive), and replaces the configured one only when the product is above 1.  So a node whose CPU is
  normalized above 1 gets a CPU ratio even with amplification disabled: its cores are worth more;
* any ratio below 1 would shrink the node: the node gets nothing written and the error says which;
* no ratio at all removes the annotation.

The value is Go's ``json.Marshal`` of ``map[ResourceName]Ratio``: keys sorted, each ratio printed by
``Ratio.MarshalJSON`` with two decimals (``{"cpu":1.80,"memory":1.10}``).  This module is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO, format_ratio, parse_ratio
from koordlet.apis.gojson import dumps_string
from koordlet.apis.sloconfig import ResourceAmplificationStrategy
from koordlet.errors import KoordletError, ParseError

ANNOTATION_RESOURCE_AMPLIFICATION_RATIO: Final = "node.koordinator.sh/resource-amplification-ratio"
CPU: Final = "cpu"


class AmplificationRefused(KoordletError, ValueError):
    """No valid ratios for the node now; its annotation is left as it is."""


def cpu_ratio(configured: float | None, normalization: float | None) -> float:
    """``calculateCPUAmplificationRatio``: the configured CPU ratio (1 unless positive) times the CPU
    normalization ratio (when positive), in float64 arithmetic as upstream (1.5 x 1.2 = 1.7999999999999998)."""
    ratio = configured if configured is not None and configured > 0 else 1.0
    if normalization is not None and normalization > 0:
        ratio *= normalization
    return ratio


def node_ratios(strategy: ResourceAmplificationStrategy, cpu_normalization: str | None) -> dict[str, float]:
    """The ratios the node should carry (resource -> ratio, possibly empty); raises AmplificationRefused when
    the CPU normalization ratio is unreadable or a ratio is below 1.

    ``cpu_normalization`` is the node's CPU normalization ratio annotation value, None without one."""
    try:
        normalization = parse_ratio({ANNOTATION_CPU_NORMALIZATION_RATIO: cpu_normalization}
                                    if cpu_normalization is not None else None)
    except ParseError as err:
        raise AmplificationRefused(f"cpu normalization ratio: {err}") from None
    ratios = dict(strategy.resource_amplification_ratio or {}) if strategy.enable else {}
    cpu = cpu_ratio(ratios.get(CPU), normalization)
    if cpu > 1:
        ratios[CPU] = cpu
    for resource, ratio in sorted(ratios.items()):
        if ratio < 1:
            raise AmplificationRefused(f"ratio of {resource} is {ratio}, below 1")
        if not math.isfinite(ratio):
            # Go's json.Marshal fails on "+Inf" and upstream would write an empty annotation: refuse instead.
            raise AmplificationRefused(f"ratio of {resource} overflows: {ratio}")
    return ratios


def annotation_value(ratios: Mapping[str, float]) -> str | None:
    """The annotation's text for ``ratios`` (Go's ``json.Marshal``), None (remove it) when there are none."""
    if not ratios:
        return None
    members = (f"{dumps_string(resource)}:{format_ratio(ratios[resource])}" for resource in sorted(ratios))
    return "{" + ",".join(members) + "}"


def node_annotation(strategy: ResourceAmplificationStrategy, cpu_normalization: str | None) -> str | None:
    """The annotation value the node should carry (None: none); raises AmplificationRefused saying why the
    node gets nothing written."""
    return annotation_value(node_ratios(strategy, cpu_normalization))
