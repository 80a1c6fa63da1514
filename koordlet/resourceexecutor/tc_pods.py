"""Per-pod HTB classes of the tc backend (Koordinator ``runtimehooks/hooks/tc`` ``createRulesForPod``):
a pod with a bandwidth of its own (:class:`~koordlet.resourceexecutor.netqos.PodBandwidth`) gets
``class 1:<minor>`` under the root class 1:1, rate = ceil = its limit, the prio of its network class.

Egress: upstream classifies the pod with ``u32 match ip src <pod ip> classid 1:<minor>`` on the interface's
root qdisc, and so does this backend (prio :data:`SRC_PRIO`).  The pod's addresses are in no ipset, so the
iptables ``CLASSIFY`` rules (which HTB honours before any filter) leave its packets to this filter.
Ingress (upstream parses ``ingressLimit`` and applies nothing): the IFB gets the same class with the ingress
limit and a ``u32 match ip dst`` filter, like the class addresses.  A direction the pod does not limit goes
to its network class's handle through the same filters.

Stale classes (pods gone, limits removed) are deleted after the filters pointing at them: HTB refuses to
delete a class a filter is still bound to.  Only minors in
:data:`~koordlet.resourceexecutor.netqos.POD_MINORS` are ever deleted, and only filters at our prios.
"""

from __future__ import annotations

import ipaddress
from functools import partial

from koordlet.resourceexecutor.netqos import POD_MINORS, NetQoSPlan, PodBandwidth
from koordlet.resourceexecutor.tc_classify import CLASS_MINOR, CLASS_PRIO, IPV4, IPV6, Family
from koordlet.resourceexecutor.tc_filters import sync_filters
from koordlet.resourceexecutor.tc_netlink import ROOT_HANDLE, HtbClass, Link, Netlink, U32Filter, handle_text
from koordlet.resourceexecutor.tc_steps import Steps

SRC_PRIO = {"ipv4": 4, "ipv6": 5}
"""Prio of the per-pod source filters on the interface (upstream ``POD_FILTER_PRIO`` 4; IPv6 next to it)."""
SRC_OFFSET = {"ipv4": 12, "ipv6": 8}
"""Where the source address starts in the IPv4 / IPv6 header."""


def is_pod_class(classid: int) -> bool:
    return classid >> 16 == ROOT_HANDLE >> 16 and (classid & 0xFFFF) in POD_MINORS


def target(pod: PodBandwidth, direction: str) -> int:
    """The class a pod's traffic in ``direction`` goes to: its own, or its network class when unlimited."""
    limited = getattr(pod, f"{direction}_bps") > 0
    return ROOT_HANDLE | (pod.minor if limited else CLASS_MINOR[pod.net_class])


def classes(plan: NetQoSPlan, direction: str, root_class: int) -> list[HtbClass]:
    """The pods' own classes in ``direction`` (rates byte-aligned, as HTB reports them back)."""
    want = []
    for pod in plan.pods:
        bps = getattr(pod, f"{direction}_bps")
        if bps > 0:
            rate = bps // 8 * 8
            want.append(HtbClass(ROOT_HANDLE | pod.minor, root_class, rate, rate, CLASS_PRIO[pod.net_class]))
    return want


def _family(ip: str) -> Family:
    return IPV4 if IPV4.owns(ip) else IPV6


def _src_keys(family: Family, ip: str) -> tuple[tuple[int, int, int], ...]:
    packed = ipaddress.ip_address(ip).packed
    return tuple((0xFFFFFFFF, int.from_bytes(packed[i:i + 4], "big"), SRC_OFFSET[family.name] + i)
                 for i in range(0, len(packed), 4))


def dst_filters(plan: NetQoSPlan) -> list[U32Filter]:
    """IFB filters for the pods' addresses (handles still to be chosen)."""
    want = []
    for pod in plan.pods:
        for ip in pod.source_ips:
            family = _family(ip)
            want.append(U32Filter(ROOT_HANDLE, family.filter_prio, family.ethertype, 0, target(pod, "ingress"),
                                  family.dst_keys(ip)))
    return want


def src_filters(plan: NetQoSPlan) -> list[U32Filter]:
    want = []
    for pod in plan.pods:
        for ip in pod.source_ips:
            family = _family(ip)
            want.append(U32Filter(ROOT_HANDLE, SRC_PRIO[family.name], family.ethertype, 0, target(pod, "egress"),
                                  _src_keys(family, ip)))
    return want


def ensure_src_filters(nl: Netlink, steps: Steps, plan: NetQoSPlan, link: Link) -> None:
    """The interface's per-pod source filters: new ones first, stale ones (at our prios only) after."""
    ours = set(SRC_PRIO.values())
    have = [f for f in nl.filters(link.index, ROOT_HANDLE) if f.prio in ours]
    sync_filters(nl, steps, link.index, have, src_filters(plan), "egress src")


def drop_stale_classes(nl: Netlink, steps: Steps, link: Link, label: str, want: list[HtbClass]) -> None:
    """Deletes per-pod classes ``want`` no longer holds (call after the filters are settled)."""
    wanted = {c.classid for c in want}
    for cls in nl.classes(link.index):
        if is_pod_class(cls.classid) and cls.classid not in wanted:
            steps.run(f"delete {label} class {handle_text(cls.classid)} (pod bandwidth gone)",
                      partial(nl.del_class, link.index, cls.classid), partial(nl.put_class, link.index, cls, False))


