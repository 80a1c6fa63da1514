"""NodeSLO to the wire: the netqos strategy, fed a NodeSLO and pods with IPs, drives the real tc backend
in a namespace we make.  BE's egress limit from ``beClass.networkQOS`` holds BE while LS saturates the
link next to it; a NodeSLO with a malformed limit is refused by field and the shaping in force stays;
switching the strategy off removes everything it made."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from koordlet.config.types import QoSManagerConfig
from koordlet.qosmanager.plugins.netqos.strategy import NetQoSStrategy
from koordlet.resourceexecutor.tc import TcNetQoS, subprocess_runner
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from tests.fixtures.fakehost import FakeHost
from tests.integration.netqos.conftest import NetPair
from tests.integration.netqos.test_tc_real import MBIT, class_bytes, wire, within
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_options, make_pod


def nodeslo(be_limit: str) -> dict[str, Any]:
    return {
        "systemStrategy": {"totalNetworkBandwidth": "200M"},
        "resourceQOSStrategy": {
            "policies": {"netQOSPolicy": "tc"},
            "lsClass": {"networkQOS": {"enable": True, "egressRequest": "60M", "egressLimit": "180M",
                                       "ingressRequest": "60M", "ingressLimit": "180M"}},
            "beClass": {"networkQOS": {"enable": True, "egressRequest": "10M", "egressLimit": be_limit,
                                       "ingressRequest": "10M", "ingressLimit": be_limit}},
        },
    }


def with_ip(name: str, qos: str, ip: str) -> Any:
    meta = make_pod(name, qos)
    return dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, ips=(ip,)))


def test_nodeslo_limits_be_on_the_wire_and_disable_clears(netpair: NetPair, fake_host: FakeHost,
                                                          tmp_path: Path) -> None:
    pair = netpair
    ls_ip, be_ip, sink = pair.addr(2), pair.addr(3), pair.addr(100)
    backend = TcNetQoS(pair.tx_if, netns=pair.tx_ns, prefix=f"{pair.tag}-", run=subprocess_runner(pair.tx_ns))
    clock = FakeClock(1_700_000_000.0)
    informer = FakeInformer([with_ip("web", "LS", ls_ip), with_ip("batch", "BE", be_ip)])
    options = make_options(fake_host, tmp_path, informer, clock=clock, gates={"TCNetworkQoS": True},
                           config=QoSManagerConfig(net_interface=pair.tx_if))
    strategy = NetQoSStrategy(dataclasses.replace(options, netqos=lambda policy: backend))

    holder = NodeSLOHolder()

    def run(spec_json: dict[str, Any] | None = None, enabled: bool = True) -> Any:
        if spec_json is not None:
            holder.offer_spec(spec_json, "test")
        return strategy.run_once(holder.current().spec, enabled)

    decision = run(nodeslo("20M"))
    assert decision.action not in ("invalid", "error", "skip"), decision.summary
    rates = wire(pair.measure(pair.rx_ns, [(pair.tx_ns, ls_ip, sink), (pair.tx_ns, be_ip, sink)]))
    print(f"\nNodeSLO beClass egressLimit 20M: LS {rates[ls_ip] / MBIT:.1f} Mbit/s, "
          f"BE {rates[be_ip] / MBIT:.1f} Mbit/s")
    assert within(rates[be_ip], 20 * MBIT, 0.10), f"BE {rates[be_ip] / MBIT:.1f} Mbit/s, expected 20 +- 10%"
    assert rates[ls_ip] >= 0.9 * 180 * MBIT, f"LS {rates[ls_ip] / MBIT:.1f} Mbit/s, expected >= 162"

    # A malformed limit: the NodeSLO is refused by field, the last good one and its shaping stay.
    installed = backend.describe()
    clock.advance(1.0)
    assert not holder.offer_spec(nodeslo("50Q"), "test")
    assert "spec.resourceQOSStrategy.beClass.networkQOS.egressLimit" in str(holder.current().rejected)
    run()
    assert backend.describe() == installed

    # A live change within one round: BE's limit to 40M, the class changed in place.
    before = class_bytes(pair, "1:4")
    clock.advance(1.0)
    run(nodeslo("40M"))
    assert class_bytes(pair, "1:4") >= before > 0
    alone = wire(pair.measure(pair.rx_ns, [(pair.tx_ns, be_ip, sink)]))[be_ip]
    print(f"after the NodeSLO changed BE's limit to 40M: BE alone {alone / MBIT:.1f} Mbit/s")
    assert within(alone, 40 * MBIT, 0.10), f"BE {alone / MBIT:.1f} Mbit/s, expected 40 +- 10%"

    clock.advance(1.0)
    run(enabled=False)
    assert pair.ns_run(pair.tx_ns, ["tc", "class", "show", "dev", pair.tx_if]) == ""
    assert pair.ns_run(pair.tx_ns, ["ipset", "list", "-n"]).split() == []
    assert pair.tag not in pair.ns_run(pair.tx_ns, ["iptables", "-w", "-t", "mangle", "-S"])
