"""Which network QoS backend the NodeSLO asks for, and the gate that switches each one on."""

from __future__ import annotations

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.isolation.slo import qos_strategy

POLICY_TC = "tc"
POLICY_TERWAY = "terway-qos"
GATES = {POLICY_TC: gates.TC_NETWORK_QOS, POLICY_TERWAY: gates.TERWAY_QOS}
"""Gate of each ``netQOSPolicy`` value; a value not listed here is refused."""
DEFAULT_POLICY = POLICY_TC
POLICY_FIELD = "resourceQOSStrategy.policies.netQOSPolicy"


def policy_of(slo: NodeSLOSpec) -> str:
    """``netQOSPolicy`` of the NodeSLO, ``tc`` when unset."""
    policies = qos_strategy(slo).policies
    return (policies.net_qos_policy if policies is not None else None) or DEFAULT_POLICY
