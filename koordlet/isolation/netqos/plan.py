"""NodeSLO ``networkQOS`` -> class bandwidths in bits per second (Koordinator runtimehooks/hooks/tc
``loadConfigFromNodeSlo`` and hooks/terwayqos ``parseNetQoS``).

Units: ``systemStrategy.totalNetworkBandwidth`` and the quantity form of ``{ingress,egress}{Request,Limit}``
are bits per second ("1000M" = 1 Gbit/s).  The API comment says "bytes per second", but both Koordinator
plugins read them as bits: tc hands ``Value()`` to HTB after its own ``/8``, terway-qos divides by 8
(``BitsToBytes``).  An integer is a percentage of the total, rounded down (``total * p / 100``).

Only the LS and BE classes are configurable, as in Koordinator (LSE and LSR pods share the LS class);
SYSTEM is guaranteed what they leave, with the total as ceiling.  A request or limit of a class that is
off takes the backend's default: tc's HTB classes get Koordinator's 30 % (SYSTEM 40 %) with the total as
ceiling; terway-qos gets 0 and no ceiling, which the backend writes as Koordinator's ``0`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from koordlet.apis.nodeslo import NetworkQOSCfg
from koordlet.apis.quantity import parse_quantity
from koordlet.errors import ConfigError, ParseError

TOTAL_FIELD = "systemStrategy.totalNetworkBandwidth"
CLASS_FIELDS = {"ls": "resourceQOSStrategy.lsClass.networkQOS", "be": "resourceQOSStrategy.beClass.networkQOS"}
DEFAULT_RATE_PERCENT = {"system": 40, "ls": 30, "be": 30}
"""Koordinator tc_linux.go ``{SYSTEM,LS,BE}_CLASS_RATE_PERCENTAGE``; ceilings ``CEIL_PERCENTAGE`` = 100."""
DIRECTIONS = ("egress", "ingress")


@dataclass(frozen=True)
class ClassRates:
    """One class's guaranteed rate and ceiling per direction, bits per second."""

    egress_rate_bps: int
    egress_ceil_bps: int
    ingress_rate_bps: int
    ingress_ceil_bps: int
    configured: bool
    """True when the class's ``networkQOS.enable`` set the numbers, False for the defaults."""

    def numbers(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("egress_rate_bps", "egress_ceil_bps", "ingress_rate_bps",
                                               "ingress_ceil_bps")}


def parse_total(value: Any) -> int:
    """``totalNetworkBandwidth`` in bits per second, rounded up like ``Quantity.Value()``; 0 means "ask
    the NIC" (the caller's business)."""
    try:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ParseError("not a quantity")
        number = parse_quantity(value)
    except ParseError:
        raise ConfigError(f"{TOTAL_FIELD}: must be a Kubernetes quantity in bits per second such as '1000M', "
                          f"got {value!r}") from None
    if number < 0:
        raise ConfigError(f"{TOTAL_FIELD}: must not be negative, got {value!r}")
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


def bandwidth(where: str, value: Any, total: int) -> int | None:
    """A percent-or-quantity field in bits per second; None when unset."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 100:
            raise ConfigError(f"{where}: a percentage must be 0..100, got {value}")
        return total * value // 100
    if isinstance(value, str):
        try:
            number = parse_quantity(value)
        except ParseError:
            number = None
        if number is None or number < 0:
            raise ConfigError(f"{where}: must be a percentage 0..100 or a non-negative quantity in bits per second "
                              f"such as '50M', got {value!r}")
        bps = int(number.to_integral_value(rounding="ROUND_CEILING"))
        if bps > total:
            raise ConfigError(f"{where}: {value!r} ({bps} bps) exceeds {TOTAL_FIELD} ({total} bps)")
        return bps
    raise ConfigError(f"{where}: must be an integer percentage or a quantity string, got {value!r}")


def configured_class(where: str, cfg: NetworkQOSCfg, total: int) -> ClassRates:
    """A class whose ``networkQOS.enable`` is true.  An unset request is 0; an unset or 0 limit is the
    total (the API's default limit is 100 %, and a 0 ceiling would black-hole the class — Koordinator's
    merged defaults put 0 there for every field the user leaves out)."""
    values: dict[str, int] = {}
    for direction in DIRECTIONS:
        req_field, lim_field = f"{where}.{direction}Request", f"{where}.{direction}Limit"
        request = bandwidth(req_field, getattr(cfg, f"{direction}_request"), total) or 0
        limit = bandwidth(lim_field, getattr(cfg, f"{direction}_limit"), total) or total
        if request > limit:
            raise ConfigError(f"{req_field}: {request} bps exceeds {lim_field} ({limit} bps)")
        values[f"{direction}_rate_bps"] = request
        values[f"{direction}_ceil_bps"] = limit
    return ClassRates(configured=True, **values)


def class_rates(policy: str, cfgs: dict[str, NetworkQOSCfg | None], total: int) -> dict[str, ClassRates]:
    """SYSTEM, LS and BE rates for ``policy`` (``tc`` or ``terway-qos``); raises ConfigError naming the
    field when the NodeSLO asks for the impossible."""
    rates: dict[str, ClassRates] = {}
    for name in ("ls", "be"):
        cfg = cfgs.get(name)
        if cfg is not None and cfg.enable is True:
            rates[name] = configured_class(CLASS_FIELDS[name], cfg, total)
    for direction in DIRECTIONS:
        guaranteed = sum(getattr(r, f"{direction}_rate_bps") for r in rates.values())
        if guaranteed > total:
            raise ConfigError(
                f"{CLASS_FIELDS['ls']}.{direction}Request + {CLASS_FIELDS['be']}.{direction}Request: "
                f"{guaranteed} bps guaranteed, more than {TOTAL_FIELD} ({total} bps)"
            )
    left = {d: total - sum(getattr(r, f"{d}_rate_bps") for r in rates.values()) for d in DIRECTIONS}
    for name in ("ls", "be"):
        if name in rates:
            continue
        values: dict[str, int] = {}
        for direction in DIRECTIONS:
            share = total * DEFAULT_RATE_PERCENT[name] // 100 if policy == "tc" else 0
            # A configured class may have taken more than 70 %: the default yields, it guarantees nothing.
            share = min(share, left[direction])
            left[direction] -= share
            values[f"{direction}_rate_bps"] = share
            values[f"{direction}_ceil_bps"] = total
        rates[name] = ClassRates(configured=False, **values)
    rates["system"] = ClassRates(
        egress_rate_bps=total - rates["ls"].egress_rate_bps - rates["be"].egress_rate_bps,
        egress_ceil_bps=total,
        ingress_rate_bps=total - rates["ls"].ingress_rate_bps - rates["be"].ingress_rate_bps,
        ingress_ceil_bps=total,
        configured=False,
    )
    return {name: rates[name] for name in ("system", "ls", "be")}
