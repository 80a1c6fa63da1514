"""NodeSLO lookups every isolation rule starts from."""

from __future__ import annotations

from koordlet.apis.nodeslo import NodeSLOSpec, ResourceQOSStrategy, default_resource_qos_strategy


def qos_strategy(slo: NodeSLOSpec) -> ResourceQOSStrategy:
    """The NodeSLO's ``resourceQOSStrategy``, or the default one when the NodeSLO has none."""
    return slo.resource_qos_strategy or default_resource_qos_strategy()
