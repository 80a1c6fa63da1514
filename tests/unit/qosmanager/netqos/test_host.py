"""Default-route interface and link speed from fake /proc/net and /sys/class/net files."""

from __future__ import annotations

import pytest

from koordlet.errors import ParseError
from koordlet.isolation.netqos.host import default_route_interface, link_speed_bps
from tests.fixtures.fakehost import FakeHost

HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
V6_DEFAULT = ("00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
              "fd000000000000000000000000000001 {metric} 00000003 00000000 {flags}     {iface}\n")


@pytest.mark.parametrize(("route", "ipv6_route", "expected"), [
    (HEAD + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", "", "eth0"),
    (HEAD + "bond0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n"
            "eth9\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "", "eth9"),  # lowest metric
    (HEAD + "eth0\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n"  # not RTF_UP
            "eth1\t00000000\t010200C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n", "", "eth1"),
    (HEAD + "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",  # only a subnet route
     V6_DEFAULT.format(metric="00000400", flags="00000003", iface="ens5"), "ens5"),
    (HEAD, V6_DEFAULT.format(metric="ffffffff", flags="00200200", iface="lo")
     + V6_DEFAULT.format(metric="00000400", flags="00000003", iface="ens6"), "ens6"),  # the kernel's lo entry
])
def test_default_route_interface(fake_host: FakeHost, route: str, ipv6_route: str, expected: str) -> None:
    fake_host.write_proc("net/route", route)
    fake_host.write_proc("net/ipv6_route", ipv6_route)
    assert default_route_interface(fake_host.paths) == expected


def test_no_default_route(fake_host: FakeHost) -> None:
    fake_host.write_proc("net/route", HEAD)
    with pytest.raises(ParseError, match=r"no default route in .*/proc/net/route or .*/proc/net/ipv6_route"):
        default_route_interface(fake_host.paths)


@pytest.mark.parametrize(("text", "bps"), [("1000\n", 1_000_000_000), ("25000", 25_000_000_000), ("-1", None),
                                           ("0", None), ("fast", None), (None, None)])
def test_link_speed(fake_host: FakeHost, text: str | None, bps: int | None) -> None:
    if text is not None:
        fake_host.write_sys("class/net/eth0/speed", text)
    if bps is None:
        with pytest.raises(ParseError, match="class/net/eth0/speed"):
            link_speed_bps(fake_host.paths, "eth0")
    else:
        assert link_speed_bps(fake_host.paths, "eth0") == bps
