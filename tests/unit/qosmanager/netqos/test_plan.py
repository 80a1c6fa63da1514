"""NodeSLO ``networkQOS`` -> class rates (bits per second), worked from Koordinator's formulas: percent =
total * p // 100, quantities in bits rounded up, SYSTEM rate = total - LS rate - BE rate, ceilings the
total unless limited; classes that are off get tc's 30 % (SYSTEM 40 %) or terway's 0."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.apis.nodeslo import NetworkQOSCfg
from koordlet.errors import ConfigError
from koordlet.isolation.netqos.plan import bandwidth, class_rates, parse_total

G = 1_000_000_000
M = 1_000_000
LS = "resourceQOSStrategy.lsClass.networkQOS"
BE = "resourceQOSStrategy.beClass.networkQOS"
TOTAL = "systemStrategy.totalNetworkBandwidth"


def cfg(enable: bool = True, **fields: Any) -> NetworkQOSCfg:
    """As merged over Koordinator's defaults: every field the user leaves out is 0."""
    base = {"ingress_request": 0, "ingress_limit": 0, "egress_request": 0, "egress_limit": 0}
    return NetworkQOSCfg(enable=enable, **{**base, **fields})


def flat(rates: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {name: (r.egress_rate_bps, r.egress_ceil_bps, r.ingress_rate_bps, r.ingress_ceil_bps)
            for name, r in rates.items()}


# (policy, ls cfg, be cfg, expected (egress rate, egress ceil, ingress rate, ingress ceil) per class)
CASES = [
    pytest.param("tc", None, None,
                 {"system": (400 * M, G, 400 * M, G), "ls": (300 * M, G, 300 * M, G), "be": (300 * M, G, 300 * M, G)},
                 id="tc-defaults-40-30-30"),
    pytest.param("tc", cfg(False, egress_limit=10), cfg(False),
                 {"system": (400 * M, G, 400 * M, G), "ls": (300 * M, G, 300 * M, G), "be": (300 * M, G, 300 * M, G)},
                 id="tc-disabled-values-ignored"),
    pytest.param("tc", None, cfg(egress_limit="50M"),
                 {"system": (700 * M, G, 700 * M, G), "ls": (300 * M, G, 300 * M, G), "be": (0, 50 * M, 0, G)},
                 id="tc-be-limit-only"),
    pytest.param("tc", cfg(egress_request=50, egress_limit=80),
                 cfg(egress_request="100M", egress_limit=30, ingress_request=10, ingress_limit="200M"),
                 {"system": (400 * M, G, 900 * M, G), "ls": (500 * M, 800 * M, 0, G),
                  "be": (100 * M, 300 * M, 100 * M, 200 * M)},
                 id="tc-percent-and-quantity"),
    pytest.param("tc", cfg(egress_request=80), None,
                 {"system": (0, G, 700 * M, G), "ls": (800 * M, G, 0, G), "be": (200 * M, G, 300 * M, G)},
                 id="tc-default-yields-to-configured"),
    pytest.param("terway-qos", None, cfg(egress_request=10, egress_limit=50),
                 {"system": (900 * M, G, G, G), "ls": (0, G, 0, G), "be": (100 * M, 500 * M, 0, G)},
                 id="terway-off-class-is-zero"),
    pytest.param("tc", cfg(egress_request="1.5M", egress_limit="1Gi"), None, None, id="tc-binary-over-total"),
]


@pytest.mark.parametrize(("policy", "ls", "be", "expected"), CASES)
def test_class_rates(policy: str, ls: NetworkQOSCfg | None, be: NetworkQOSCfg | None,
                     expected: dict[str, tuple[int, int, int, int]] | None) -> None:
    if expected is None:  # 1Gi = 1073741824 bits is more than 1000M
        with pytest.raises(ConfigError, match=rf"^{LS}.egressLimit: '1Gi' \(1073741824 bps\) exceeds {TOTAL} "
                                              rf"\(1000000000 bps\)$"):
            class_rates(policy, {"ls": ls, "be": be}, G)
        return
    rates = class_rates(policy, {"ls": ls, "be": be}, G)
    assert flat(rates) == expected
    assert list(rates) == ["system", "ls", "be"]
    assert rates["ls"].configured is (ls is not None and ls.enable is True)


@pytest.mark.parametrize(("value", "total", "bps"), [
    (33, 1001, 330),  # percent rounds down (uint64 total * p / 100)
    (100, G, G),
    (0, G, 0),
    ("1.5", 10, 2),  # a fraction of a bit rounds up like Quantity.Value()
    ("1k", G, 1000),
    ("1Mi", G, 1 << 20),
    ("0", G, 0),
    (None, G, None),
])
def test_bandwidth_units(value: Any, total: int, bps: int | None) -> None:
    assert bandwidth("f", value, total) == bps


@pytest.mark.parametrize(("ls", "be", "message"), [
    (None, cfg(egress_limit="50Q"),
     rf"^{BE}.egressLimit: must be a percentage 0..100 or a non-negative quantity in bits per second such as "
     r"'50M', got '50Q'$"),
    (None, cfg(egress_limit=150), rf"^{BE}.egressLimit: a percentage must be 0..100, got 150$"),
    (None, cfg(ingress_request=-1), rf"^{BE}.ingressRequest: a percentage must be 0..100, got -1$"),
    (None, cfg(ingress_request="-5M"), rf"^{BE}.ingressRequest: must be a percentage 0..100 or a non-negative"),
    (None, cfg(egress_request=True), rf"^{BE}.egressRequest: must be an integer percentage or a quantity string"),
    (cfg(egress_request=60, egress_limit=50), None,
     rf"^{LS}.egressRequest: 600000000 bps exceeds {LS}.egressLimit \(500000000 bps\)$"),
    (cfg(ingress_request="300M", ingress_limit=20), None,
     rf"^{LS}.ingressRequest: 300000000 bps exceeds {LS}.ingressLimit \(200000000 bps\)$"),
    (None, cfg(ingress_limit="2G"),
     rf"^{BE}.ingressLimit: '2G' \(2000000000 bps\) exceeds {TOTAL} \(1000000000 bps\)$"),
    (cfg(egress_request=60), cfg(egress_request=50),
     rf"^{LS}.egressRequest \+ {BE}.egressRequest: 1100000000 bps guaranteed, more than {TOTAL} \(1000000000 bps\)$"),
])
def test_bad_input_names_the_field(ls: NetworkQOSCfg | None, be: NetworkQOSCfg | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        class_rates("tc", {"ls": ls, "be": be}, G)


@pytest.mark.parametrize(("text", "bps"), [("1000M", G), ("10G", 10 * G), ("1Gi", 1 << 30), ("0", 0), (100, 100),
                                           ("0.5", 1)])
def test_total(text: Any, bps: int) -> None:
    assert parse_total(text) == bps


@pytest.mark.parametrize(("text", "message"), [
    ("50Q", rf"^{TOTAL}: must be a Kubernetes quantity in bits per second such as '1000M', got '50Q'$"),
    ("-1M", rf"^{TOTAL}: must not be negative, got '-1M'$"),
    (True, rf"^{TOTAL}: must be a Kubernetes quantity"),
])
def test_bad_total(text: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_total(text)
