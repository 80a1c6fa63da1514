"""Per-pod bandwidth (annotation ``koordinator.sh/networkQOS``) on a real veth pair in two namespaces we
make: the pod .2 has egress 30 Mbit/s and ingress 15 Mbit/s of its own; BE (.3) shares the link with it.
Its own class holds it to its limits while the node link (200) has room; dropping the limit removes the
class and its filters and the pod is back in LS.  Numbers are printed (``pytest -s``)."""

from __future__ import annotations

import re

from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan, PodBandwidth
from koordlet.resourceexecutor.tc import TcNetQoS
from tests.integration.netqos.conftest import NetPair
from tests.integration.netqos.test_tc_real import MBIT, TOTAL, wire, within

MINOR = 0x4D2


def plan(pair: NetPair, *, own: bool) -> NetQoSPlan:
    pod = pair.addr(2)
    return NetQoSPlan(
        interface=pair.tx_if, total_bps=TOTAL,
        system=ClassBandwidth(80 * MBIT, TOTAL, 80 * MBIT, TOTAL),
        ls=ClassBandwidth(60 * MBIT, 180 * MBIT, 60 * MBIT, 180 * MBIT, () if own else (pod,)),
        be=ClassBandwidth(10 * MBIT, 100 * MBIT, 10 * MBIT, 100 * MBIT, (pair.addr(3),)),
        pods=(PodBandwidth("ns/limited", MINOR, "ls", 30 * MBIT, 15 * MBIT, (pod,)),) if own else (),
    )


def test_a_pods_own_bandwidth_holds_it_and_goes_away_with_the_limit(netpair: NetPair) -> None:
    pair = netpair
    backend = TcNetQoS(pair.tx_if, netns=pair.tx_ns, prefix=f"{pair.tag}-")
    backend.apply(plan(pair, own=True))
    sink, pod, be = pair.addr(100), pair.addr(2), pair.addr(3)
    classes = pair.ns_run(pair.tx_ns, ["tc", "class", "show", "dev", pair.tx_if])
    assert re.search(r"class htb 1:4d2 parent 1:1 .*rate 30Mbit ceil 30Mbit", classes), classes
    filters = pair.ns_run(pair.tx_ns, ["tc", "filter", "show", "dev", pair.tx_if])
    assert "flowid 1:4d2" in filters, filters

    rates = wire(pair.measure(pair.rx_ns, [(pair.tx_ns, pod, sink), (pair.tx_ns, be, sink)]))
    print(f"\negress: pod {rates[pod] / MBIT:.1f} Mbit/s (own limit 30), BE {rates[be] / MBIT:.1f} (ceil 100)")
    assert within(rates[pod], 30 * MBIT, 0.10), f"pod egress {rates[pod] / MBIT:.1f} Mbit/s, expected 30 +- 10%"
    assert within(rates[be], 100 * MBIT, 0.10), f"BE egress {rates[be] / MBIT:.1f} Mbit/s, expected 100 +- 10%"

    ingress = wire(pair.measure(pair.tx_ns, [(pair.rx_ns, sink, pod)], key="local"))[pod]
    print(f"ingress: pod {ingress / MBIT:.1f} Mbit/s (own limit 15)")
    assert within(ingress, 15 * MBIT, 0.10), f"pod ingress {ingress / MBIT:.1f} Mbit/s, expected 15 +- 10%"

    # The limit removed: class and filters go, the pod is classified as LS again (ceil 180).
    backend.apply(plan(pair, own=False))
    assert "1:4d2" not in pair.ns_run(pair.tx_ns, ["tc", "class", "show", "dev", pair.tx_if])
    assert "1:4d2" not in pair.ns_run(pair.tx_ns, ["tc", "filter", "show", "dev", pair.tx_if])
    alone = wire(pair.measure(pair.rx_ns, [(pair.tx_ns, pod, sink)]))[pod]
    print(f"egress without its limit: pod {alone / MBIT:.1f} Mbit/s (LS ceil 180)")
    assert alone >= 0.9 * 180 * MBIT, f"pod without a limit {alone / MBIT:.1f} Mbit/s, expected >= 162"
    backend.clear()
    assert pair.ns_run(pair.tx_ns, ["tc", "class", "show", "dev", pair.tx_if]) == ""
