"""NetQoSPlan validation: a bad plan raises ConfigError naming the field; a good one is normalised."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from koordlet.errors import ConfigError
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoS, NetQoSPlan

MBIT = 1_000_000
TOTAL = 100 * MBIT


def cls(rate: int, ceil: int = TOTAL, ips: tuple[str, ...] = ()) -> ClassBandwidth:
    return ClassBandwidth(rate, ceil, rate, ceil, ips)


def koordinator_plan(**changes: Any) -> NetQoSPlan:
    """Koordinator's tc shares: SYSTEM 40 %, LS 30 %, BE 30 % of the total, each ceiling the total."""
    fields: dict[str, Any] = {
        "interface": "eth0",
        "total_bps": TOTAL,
        "system": cls(40 * MBIT),
        "ls": cls(30 * MBIT, ips=("198.18.0.2",)),
        "be": cls(30 * MBIT, 50 * MBIT, ips=("198.18.0.3", "2001:db8::0001")),
    }
    fields.update(changes)
    return NetQoSPlan(**fields)


def test_a_valid_plan_keeps_its_numbers_and_normalises_addresses() -> None:
    plan = koordinator_plan()
    assert [(name, c.egress_rate_bps, c.egress_ceil_bps) for name, c in plan.classes()] == [
        ("system", 40 * MBIT, TOTAL), ("ls", 30 * MBIT, TOTAL), ("be", 30 * MBIT, 50 * MBIT)
    ]
    assert plan.be.source_ips == ("198.18.0.3", "2001:db8::1")
    assert plan.shape_ingress
    assert koordinator_plan() == plan


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"interface": ""}, "netqos.interface: must be a non-empty interface name"),
        ({"interface": "veth-koordlet-01"}, "netqos.interface: 'veth-koordlet-01' is longer than 15 characters"),
        ({"interface": "eth0/1"}, "netqos.interface: 'eth0/1' is not a valid interface name"),
        ({"interface": "eth 0"}, "netqos.interface: 'eth 0' is not a valid interface name"),
        ({"interface": "eth0:1"}, "netqos.interface: 'eth0:1' is not a valid interface name"),
        ({"interface": ".."}, "netqos.interface: '..' is not a valid interface name"),
        ({"interface": None}, "netqos.interface: must be a non-empty interface name"),
        ({"total_bps": 0}, "netqos.total_bps: must be positive, got 0"),
        ({"total_bps": -1}, "netqos.total_bps: must be >= 0, got -1"),
        ({"total_bps": 1.5e8}, "netqos.total_bps: must be an int (bits per second), got 150000000.0"),
        ({"total_bps": True}, "netqos.total_bps: must be an int"),
        ({"be": cls(60 * MBIT, 50 * MBIT)}, "netqos.be.egress_rate_bps: 60000000 exceeds netqos.be.egress_ceil_bps"),
        ({"ls": cls(10 * MBIT, TOTAL + 1)}, "netqos.ls.egress_ceil_bps: 100000001 exceeds total_bps 100000000"),
        ({"system": cls(0, 0)}, "netqos.system.egress_ceil_bps: must be positive"),
        ({"be": cls(-1)}, "netqos.be.egress_rate_bps: must be >= 0, got -1"),
        ({"be": ClassBandwidth(1, 2, 3, 2)}, "netqos.be.ingress_rate_bps: 3 exceeds netqos.be.ingress_ceil_bps 2"),
        ({"be": ClassBandwidth(1, 2, 1, TOTAL * 2)}, "netqos.be.ingress_ceil_bps: 200000000 exceeds total_bps"),
        ({"be": ClassBandwidth(1, 2, "50Q", 2)}, "netqos.be.ingress_rate_bps: must be an int (bits per second), "  # type: ignore[arg-type]
                                                 "got '50Q'"),
        ({"ls": cls(1, ips=("10.0.0.300",))}, "netqos.ls.source_ips: '10.0.0.300' is not an IP address"),
        ({"ls": cls(1, ips=("10.0.0.1", "10.0.0.01"))}, "netqos.ls.source_ips: '10.0.0.01' is not an IP address"),
        ({"ls": cls(1, ips=("10.0.0.1", "10.0.0.1"))}, "netqos.ls.source_ips: 10.0.0.1 listed twice"),
        ({"ls": cls(1, ips="10.0.0.1")}, "netqos.ls.source_ips: must be a sequence of addresses, got one string"),  # type: ignore[arg-type]
        ({"ls": cls(1, ips=("198.18.0.3",))}, "netqos.be.source_ips: 198.18.0.3 already belongs to netqos.ls"),
        ({"ls": cls(31 * MBIT)}, "netqos.{system,ls,be}.egress_rate_bps: guaranteed rates add up to 101000000 bps"),
        ({"be": {"rate": 1}}, "netqos.be: must be a ClassBandwidth, got dict"),
    ],
)
def test_bad_plans_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        koordinator_plan(**changes)
    assert message in str(caught.value)


def test_ingress_rates_must_fit_too() -> None:
    heavy = replace(cls(30 * MBIT), ingress_rate_bps=31 * MBIT)
    with pytest.raises(ConfigError, match=r"ingress_rate_bps: guaranteed rates add up to 101000000"):
        koordinator_plan(ls=heavy)


class RecordingNetQoS:
    """The smallest backend: the protocol is structural, so strategies can be tested with this."""

    def __init__(self) -> None:
        self.plans: list[NetQoSPlan] = []

    def apply(self, plan: NetQoSPlan) -> None:
        self.plans.append(plan)

    def clear(self) -> None:
        self.plans.clear()

    def describe(self) -> dict[str, object]:
        return {"plans": len(self.plans)}


def test_a_backend_satisfies_the_protocol() -> None:
    backend: NetQoS = RecordingNetQoS()
    backend.apply(koordinator_plan())
    assert backend.describe() == {"plans": 1}
    backend.clear()
    assert backend.describe() == {"plans": 0}
