"""Per-pod bandwidth in the tc backend (upstream ``createRulesForPod``): a class 1:<minor> under 1:1 with
rate = ceil = the limit, ``u32 src`` on the interface and ``u32 dst`` on the IFB; the pod's addresses in no
ipset; a direction it does not limit goes to its network class; stale classes go after their filters; the
plan refuses what cannot be.  Over the recording fake kernel of test_tc."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.errors import ConfigError
from koordlet.resourceexecutor.netqos import PodBandwidth
from koordlet.resourceexecutor.tc import TcNetQoS
from tests.unit.resourceexecutor.test_tc import MBIT, TOTAL, FakeKernel, FakeTools, dst_keys, host, koordinator_plan

__all__ = ["host"]  # the fixture, re-used

POD = PodBandwidth("ns/limited", 0x1234, "ls", 20 * MBIT, 8 * MBIT, ("10.1.0.9",))
Host = tuple[FakeKernel, FakeTools, TcNetQoS]


def ops_of(kernel: FakeKernel, kind: str) -> list[tuple[Any, ...]]:
    return [op for op in kernel.ops if op[0] == kind]


def test_a_pod_with_its_own_bandwidth_gets_a_class_and_filters(host: Host) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan(pods=(POD,)))
    eth0, ifb = kernel.class_table[2], kernel.class_table[10]
    assert eth0[0x11234].parent == 0x10001 and (eth0[0x11234].rate_bps, eth0[0x11234].ceil_bps) == (20 * MBIT,) * 2
    assert eth0[0x11234].prio == 2  # LS's prio: it yields to SYSTEM, not to BE
    assert (ifb[0x11234].rate_bps, ifb[0x11234].ceil_bps) == (8 * MBIT, 8 * MBIT)
    (src,) = kernel.filter_table[(2, 0x10000)]
    assert (src.prio, src.classid, src.keys) == (4, 0x11234, dst_keys("10.1.0.9", offset=12))
    dst = [f for f in kernel.filter_table[(10, 0x10000)] if f.classid == 0x11234]
    assert [f.keys for f in dst] == [dst_keys("10.1.0.9")]
    assert all("10.1.0.9" not in members for _, members in tools.sets.values())  # CLASSIFY must not catch it
    assert backend.describe()["egress"]["classes"]["1:1234"]["rate_bps"] == 20 * MBIT  # type: ignore[index]

    kernel.ops.clear()
    backend.apply(koordinator_plan(pods=(POD,)))
    assert kernel.ops == []  # the same plan again: reads only


def test_an_unlimited_direction_goes_to_the_pods_class(host: Host) -> None:
    kernel, _, backend = host
    egress_only = PodBandwidth("ns/limited", 0x1234, "be", 20 * MBIT, 0, ("10.1.0.9",))
    backend.apply(koordinator_plan(pods=(egress_only,)))
    assert 0x11234 in kernel.class_table[2] and 0x11234 not in kernel.class_table[10]
    assert [f.classid for f in kernel.filter_table[(10, 0x10000)] if f.keys == dst_keys("10.1.0.9")] == [0x10004]


def test_a_changed_limit_is_changed_in_place_and_a_gone_pod_is_removed_filters_first(host: Host) -> None:
    kernel, _, backend = host
    backend.apply(koordinator_plan(pods=(POD,)))
    kernel.ops.clear()
    faster = PodBandwidth("ns/limited", 0x1234, "ls", 40 * MBIT, 8 * MBIT, ("10.1.0.9",))
    backend.apply(koordinator_plan(pods=(faster,)))
    assert [op[:3] for op in kernel.ops] == [("change_class", "eth0", "0x11234")]

    kernel.ops.clear()
    backend.apply(koordinator_plan())
    kinds = [(op[0], op[1]) for op in kernel.ops if op[0] in ("del_filter", "del_class")]
    assert kinds == [("del_filter", "eth0"), ("del_class", "eth0"), ("del_filter", "koordlet-ifb"),
                     ("del_class", "koordlet-ifb")]
    assert 0x11234 not in kernel.class_table[2] and kernel.filter_table[(2, 0x10000)] == []


def test_clear_still_recognises_our_layout_with_pod_classes(host: Host) -> None:
    kernel, _, backend = host
    backend.apply(koordinator_plan(pods=(POD,)))
    backend.clear()
    assert ("del_qdisc", "eth0", "0x10000") in kernel.ops and "koordlet-ifb" not in kernel.links


@pytest.mark.parametrize(("pod", "message"), [
    (PodBandwidth("ns/a", 0x3, "ls", MBIT, 0, ()), "pods[0].minor: 3 is outside 0x10..0xffff"),
    (PodBandwidth("ns/a", 0x20, "gold", MBIT, 0, ()), "pods[0].net_class: must be one of"),
    (PodBandwidth("ns/a", 0x20, "ls", 0, 0, ()), "pod ns/a limits neither direction"),
    (PodBandwidth("ns/a", 0x20, "ls", TOTAL + 1, 0, ()), "pods[0].egress_bps"),
    (PodBandwidth("ns/a", 0x20, "ls", MBIT, 0, ("10.1.0.2",)), "10.1.0.2 already belongs to ls"),
])
def test_the_plan_refuses_bad_pods(pod: PodBandwidth, message: str) -> None:
    with pytest.raises(ConfigError, match=r"netqos\.pods") as err:
        koordinator_plan(pods=(pod,))
    assert message in str(err.value)


def test_two_pods_on_one_minor_are_refused() -> None:
    other = PodBandwidth("ns/b", 0x1234, "be", MBIT, 0, ("10.1.0.10",))
    with pytest.raises(ConfigError, match="0x1234 already taken by pod ns/limited"):
        koordinator_plan(pods=(POD, other))
