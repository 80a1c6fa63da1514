"""The ``tc`` network QoS backend (Koordinator ``runtimehooks/hooks/tc``): HTB on the node's interface,
pod traffic classified by ipset + iptables ``CLASSIFY``, ingress shaped through an IFB device.

Layout (Koordinator's tc plugin, upstream ``tc_linux.go``)::

    <iface> root htb 1: default 2          <ifb> root htb 1: default 2
      class 1:1  rate=ceil=total              class 1:1  rate=ceil=total
        class 1:2 SYSTEM prio 1                 class 1:2 / 1:3 / 1:4, ingress rates
        class 1:3 LS     prio 2               u32 "ip dst <pod ip>" -> 1:3 / 1:4 / 1:2
        class 1:4 BE     prio 3
    <iface> ingress ffff: u32 match-all -> mirred egress redirect <ifb>

Egress is classified by ipsets and iptables ``CLASSIFY`` (:mod:`.tc_classify`).  Ingress: redirected
packets reach the IFB before netfilter sees them, so there they are classified by u32 on the destination
address.

Every change runs as a list of steps, each with its undo (:mod:`.tc_steps`); when a step fails the earlier
ones are undone in reverse and a :class:`KoordletError` names the interface and the step, so a failed live
change leaves the previous configuration in force.  ``apply`` first reads what is installed and touches only
what differs: classes are changed in place (``tc class change``), ipsets are refilled through
``ipset swap`` (atomic), classifiers are added before stale ones go.  ``clear`` removes exactly the
objects named under the configured prefix and the root HTB 1: with this layout.

pyroute2 (keyword arguments, netlink decoding) stays inside :mod:`.tc_netlink`; tests drive
:class:`TcNetQoS` through the :class:`Netlink` protocol and a fake :data:`Runner`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor import tc_pods
from koordlet.resourceexecutor.netqos import IFNAMSIZ, NetQoSPlan
from koordlet.resourceexecutor.tc_classify import (
    CLASS_MINOR,
    CLASS_PRIO,
    ETH_P_ALL,
    FAMILIES,
    IPV4,
    IPV6,
    Classifiers,
    Family,
)
from koordlet.resourceexecutor.tc_filters import U32_ROOT_TABLE, filter_ip, sync_filters, with_free_handle
from koordlet.resourceexecutor.tc_netlink import (
    INGRESS_HANDLE,
    ROOT_HANDLE,
    CommandFailed,
    HtbClass,
    Link,
    Netlink,
    PyrouteNetlink,
    Qdisc,
    U32Filter,
    handle_text,
)
from koordlet.resourceexecutor.tc_steps import Runner, Steps, subprocess_runner

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "koordlet-"
ROOT_CLASS = 0x10001
"""``1:1`` - parent of the three classes, so they can borrow from each other up to their ceilings."""
DEFAULT_MINOR = CLASS_MINOR["system"]
REDIRECT_PRIO = 1


# ---- the backend -----------------------------------------------------------------------------------


@dataclass
class _Installed:
    """What is on the host now (only the parts this backend manages)."""

    link: Link
    root: Qdisc | None
    classes: dict[int, HtbClass]
    ingress: bool
    redirects: list[U32Filter]
    ifb: Link | None
    ifb_root: Qdisc | None
    ifb_classes: dict[int, HtbClass]
    ifb_filters: list[U32Filter]
    sets: dict[str, tuple[str, frozenset[str]]]
    rules: dict[str, list[str]]
    """Per iptables binary, the ``-S`` lines of mangle POSTROUTING and our chain."""


class TcNetQoS:
    """:class:`~koordlet.resourceexecutor.netqos.NetQoS` over tc/ipset/iptables.

    ``interface`` is the one :meth:`clear` cleans when nothing was applied by this instance (empty: the
    interface holding the default route); :meth:`apply` shapes ``plan.interface``.  ``prefix`` names
    the ipsets (``<prefix>ls_class``), the iptables chain (``<prefix>netqos``) and the IFB
    (``<prefix>ifb`` unless ``ifb_name``); only objects with those names are ever removed."""

    def __init__(
        self,
        interface: str = "",
        *,
        netns: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        ifb_name: str | None = None,
        netlink: Callable[[], Netlink] | None = None,
        run: Runner | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,16}", prefix):
            raise ConfigError(f"netqos.tc.prefix: {prefix!r} must be 1-16 characters of [A-Za-z0-9_.-]")
        self.prefix = prefix
        self.ifb_name = ifb_name if ifb_name is not None else f"{prefix}ifb"
        if not self.ifb_name or len(self.ifb_name) >= IFNAMSIZ or "/" in self.ifb_name:
            raise ConfigError(f"netqos.tc.ifb_name: {self.ifb_name!r} is not a valid interface name "
                              f"(at most {IFNAMSIZ - 1} characters; shorten the prefix or pass ifb_name)")
        self.interface = interface
        self.netns = netns
        self._netlink = netlink or (lambda: PyrouteNetlink(netns))
        self._classifiers = Classifiers(prefix, run or subprocess_runner(netns))
        self.chain = self._classifiers.chain
        self._applied: str | None = None

    def _where(self, iface: str) -> str:
        return f"tc netqos on {iface}" + (f" (netns {self.netns})" if self.netns else "")

    @contextmanager
    def _session(self) -> Iterator[Netlink]:
        nl = self._netlink()
        try:
            yield nl
        finally:
            nl.close()

    # NetQoS

    def resolve_interface(self) -> str:
        """The configured interface, else the one holding the default route."""
        if self.interface:
            return self.interface
        with self._session() as nl:
            name = nl.default_route_interface()
        if not name:
            raise KoordletError(f"tc netqos{f' (netns {self.netns})' if self.netns else ''}: no interface "
                                "configured and no default route to find one")
        return name

    def apply(self, plan: NetQoSPlan) -> None:
        if self._applied is not None and self._applied != plan.interface:
            self.clear()
        where = self._where(plan.interface)
        with self._session() as nl:
            try:
                have = self._read(nl, plan.interface)
            except KoordletError as err:
                raise CommandFailed(f"{where}: {err}") from err
            steps = Steps(where)
            self._apply_egress(nl, steps, plan, have)
            if plan.shape_ingress:
                self._apply_ingress(nl, steps, plan, have)
            self._classifiers.apply(steps, plan, have.sets, have.rules)
            # Removals come last and are not undone: they only take away what the plan no longer wants.
            if not plan.shape_ingress:
                self._remove_ingress(nl, steps, have)
        self._applied = plan.interface
        if steps.done:
            log.info("tc netqos changed", extra={"where": where, "steps": "; ".join(steps.done)})

    def clear(self) -> None:
        iface = self._applied or self.resolve_interface()
        where = self._where(iface)
        errors: list[str] = []

        def attempt(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except KoordletError as err:
                errors.append(f"{what}: {err}")

        with self._session() as nl:
            self._classifiers.clear(attempt)
            link = nl.link(iface)
            ifb = nl.link(self.ifb_name)
            if link is not None:
                qdiscs = nl.qdiscs(link.index)
                if any(q.handle == INGRESS_HANDLE for q in qdiscs):
                    theirs = [f for f in nl.filters(link.index, INGRESS_HANDLE) if not self._is_redirect(f, ifb)]
                    for flt in nl.filters(link.index, INGRESS_HANDLE):
                        if self._is_redirect(flt, ifb):
                            attempt("delete ingress redirect", partial(nl.del_filter, link.index, flt))
                    if not theirs:
                        attempt("delete ingress qdisc",
                                lambda: nl.del_qdisc(link.index, INGRESS_HANDLE, 0xFFFFFFF1))
                if self._ours(qdiscs, nl.classes(link.index)):
                    attempt("delete root htb 1:", lambda: nl.del_qdisc(link.index, ROOT_HANDLE, 0xFFFFFFFF))
            if ifb is not None and ifb.kind == "ifb":
                attempt(f"delete ifb {self.ifb_name}", lambda: nl.del_link(ifb.index))
        self._applied = None
        if errors:
            raise CommandFailed(f"{where}: clear left objects behind: " + "; ".join(errors))

    def describe(self) -> dict[str, object]:
        iface = self._applied or self.resolve_interface()
        with self._session() as nl:
            have = self._read(nl, iface)
        return {
            "backend": "tc",
            "netns": self.netns,
            "interface": iface,
            "egress": {"qdisc": _qdisc_text(have.root), "classes": _classes_text(have.classes)},
            "ingress": {
                "ifb": have.ifb.name if have.ifb else None,
                "redirect": bool(have.redirects),
                "qdisc": _qdisc_text(have.ifb_root),
                "classes": _classes_text(have.ifb_classes),
                "filters": [
                    {"class": _class_name(f.classid), "dst": filter_ip(f)} for f in have.ifb_filters
                ],
            },
            "ipsets": {name: sorted(members) for name, (_, members) in sorted(have.sets.items())},
            "iptables": {binary: lines for binary, lines in have.rules.items() if lines},
        }

    # reading

    def _read(self, nl: Netlink, iface: str) -> _Installed:
        link = nl.link(iface)
        if link is None:
            raise CommandFailed(f"interface {iface!r} not found")
        qdiscs = nl.qdiscs(link.index)
        root = next((q for q in qdiscs if q.parent == 0xFFFFFFFF), None)
        ingress = any(q.handle == INGRESS_HANDLE for q in qdiscs)
        ifb = nl.link(self.ifb_name)
        redirects = [f for f in nl.filters(link.index, INGRESS_HANDLE) if self._is_redirect(f, ifb)] if ingress else []
        ifb_root, ifb_classes, ifb_filters = None, {}, []
        if ifb is not None:
            ifb_root = next((q for q in nl.qdiscs(ifb.index) if q.parent == 0xFFFFFFFF), None)
            if ifb_root is not None and (ifb_root.kind, ifb_root.handle) == ("htb", ROOT_HANDLE):
                ifb_classes = {c.classid: c for c in nl.classes(ifb.index)}
                ifb_filters = nl.filters(ifb.index, ROOT_HANDLE)
        classes = {c.classid: c for c in nl.classes(link.index)} if root is not None else {}
        return _Installed(link, root, classes, ingress, redirects, ifb, ifb_root, ifb_classes, ifb_filters,
                          self._classifiers.read_sets(), self._classifiers.read_rules())

    def _is_redirect(self, flt: U32Filter, ifb: Link | None) -> bool:
        return ifb is not None and flt.prio == REDIRECT_PRIO and flt.redirect_ifindex == ifb.index

    @staticmethod
    def _ours(qdiscs: list[Qdisc], classes: list[HtbClass]) -> bool:
        # Remove a root htb 1: only when it has exactly this backend's class layout.
        root = next((q for q in qdiscs if q.parent == 0xFFFFFFFF), None)
        wanted = {ROOT_CLASS} | {ROOT_HANDLE | m for m in CLASS_MINOR.values()}
        return (root is not None and (root.kind, root.handle) == ("htb", ROOT_HANDLE)
                and {c.classid for c in classes if not tc_pods.is_pod_class(c.classid)} == wanted)

    # egress and the IFB: qdiscs and classes

    def _ensure_htb(self, nl: Netlink, steps: Steps, link: Link, root: Qdisc | None,
                    have: dict[int, HtbClass], want: list[HtbClass], label: str) -> None:
        if root is None or (root.kind, root.handle) != ("htb", ROOT_HANDLE):
            if root is not None and root.handle != 0:
                # handle 0 is the kernel's default qdisc (noqueue, mq, fq_codel...); anything else was
                # put there by someone, and replacing it would silently undo their shaping.
                raise CommandFailed(f"{steps.where}: {link.name} has root qdisc {root.kind} {handle_text(root.handle)} "
                                    "that koordlet did not make; refusing to replace it")
            steps.run(f"add {label} root htb 1: default {DEFAULT_MINOR}",
                      lambda: nl.add_htb(link.index, DEFAULT_MINOR, replace=root is not None),
                      lambda: nl.del_qdisc(link.index, ROOT_HANDLE, 0xFFFFFFFF))
            have = {}
        for cls in want:
            old = have.get(cls.classid)
            text = f"{label} class {handle_text(cls.classid)} rate {cls.rate_bps} ceil {cls.ceil_bps} prio {cls.prio}"
            if old is None:
                steps.run(f"add {text}", partial(nl.put_class, link.index, cls, change=False),
                          partial(nl.del_class, link.index, cls.classid))
            elif old != cls:
                steps.run(f"change {text}", partial(nl.put_class, link.index, cls, change=True),
                          partial(nl.put_class, link.index, old, change=True))

    @staticmethod
    def _want_classes(plan: NetQoSPlan, direction: str) -> list[HtbClass]:
        total = _byte_aligned(plan.total_bps)
        want = [HtbClass(ROOT_CLASS, 0xFFFFFFFF, total, total, 0)]
        for name, cls in plan.classes():
            rate = _byte_aligned(getattr(cls, f"{direction}_rate_bps"))
            ceil = _byte_aligned(getattr(cls, f"{direction}_ceil_bps"))
            want.append(HtbClass(ROOT_HANDLE | CLASS_MINOR[name], ROOT_CLASS, rate, ceil, CLASS_PRIO[name]))
        return want + tc_pods.classes(plan, direction, ROOT_CLASS)

    def _apply_egress(self, nl: Netlink, steps: Steps, plan: NetQoSPlan, have: _Installed) -> None:
        want = self._want_classes(plan, "egress")
        self._ensure_htb(nl, steps, have.link, have.root, have.classes, want, "egress")
        tc_pods.ensure_src_filters(nl, steps, plan, have.link)
        tc_pods.drop_stale_classes(nl, steps, have.link, "egress", want)

    def _apply_ingress(self, nl: Netlink, steps: Steps, plan: NetQoSPlan, have: _Installed) -> None:
        ifb = have.ifb
        if ifb is not None and ifb.kind != "ifb":
            raise CommandFailed(f"{steps.where}: {self.ifb_name} exists and is a {ifb.kind or 'plain'} link, not ifb")
        if ifb is None:
            steps.run(f"add ifb {self.ifb_name}", lambda: nl.add_ifb(self.ifb_name),
                      lambda: _del_named_link(nl, self.ifb_name))
            ifb = nl.link(self.ifb_name)
            if ifb is None:
                raise CommandFailed(f"{steps.where}: {self.ifb_name} vanished right after it was made")
        if not ifb.up:
            steps.run(f"set {self.ifb_name} up", partial(nl.set_up, ifb.index))
        want_classes = self._want_classes(plan, "ingress")
        self._ensure_htb(nl, steps, ifb, have.ifb_root, have.ifb_classes, want_classes, "ingress")
        self._ensure_dst_filters(nl, steps, plan, ifb, have.ifb_filters)
        tc_pods.drop_stale_classes(nl, steps, ifb, "ingress", want_classes)
        index = have.link.index
        if not have.ingress:
            steps.run("add ingress qdisc ffff:", lambda: nl.add_ingress(index),
                      lambda: nl.del_qdisc(index, INGRESS_HANDLE, 0xFFFFFFF1))
        want = U32Filter(INGRESS_HANDLE, REDIRECT_PRIO, ETH_P_ALL, U32_ROOT_TABLE | 1, 0, ((0, 0, 0),), ifb.index)
        if not any(f.match() == want.match() for f in have.redirects):
            taken = {f.handle for f in have.redirects}
            want = with_free_handle(want, taken)
            steps.run(f"redirect ingress of {have.link.name} to {self.ifb_name}", lambda: nl.add_u32(index, want),
                      lambda: nl.del_filter(index, want))

    def _ensure_dst_filters(self, nl: Netlink, steps: Steps, plan: NetQoSPlan, ifb: Link,
                            have: list[U32Filter]) -> None:
        want = []
        for name, cls in plan.classes():
            for ip in cls.source_ips:
                family = IPV4 if IPV4.owns(ip) else IPV6
                want.append(U32Filter(ROOT_HANDLE, family.filter_prio, family.ethertype, 0,
                                      ROOT_HANDLE | CLASS_MINOR[name], family.dst_keys(ip)))
        want += tc_pods.dst_filters(plan)
        sync_filters(nl, steps, ifb.index, have, want, "ingress dst")

    def _remove_ingress(self, nl: Netlink, steps: Steps, have: _Installed) -> None:
        for flt in have.redirects:
            steps.run("delete ingress redirect", partial(nl.del_filter, have.link.index, flt))
        if have.ingress and have.redirects and len(nl.filters(have.link.index, INGRESS_HANDLE)) == 0:
            steps.run("delete ingress qdisc", lambda: nl.del_qdisc(have.link.index, INGRESS_HANDLE, 0xFFFFFFF1))
        if have.ifb is not None and have.ifb.kind == "ifb":
            steps.run(f"delete ifb {self.ifb_name}", partial(nl.del_link, have.ifb.index))

def _byte_aligned(bps: int) -> int:
    # HTB keeps rates in bytes per second; compare what the kernel will report back.
    return bps // 8 * 8


def _del_named_link(nl: Netlink, name: str) -> None:
    link = nl.link(name)
    if link is not None:
        nl.del_link(link.index)


def _class_name(classid: int) -> str:
    for name, minor in CLASS_MINOR.items():
        if classid == ROOT_HANDLE | minor:
            return name
    return handle_text(classid)


def _qdisc_text(qdisc: Qdisc | None) -> str | None:
    return None if qdisc is None else f"{qdisc.kind} {handle_text(qdisc.handle)}"


def _classes_text(classes: dict[int, HtbClass]) -> dict[str, dict[str, object]]:
    return {
        ("root" if c.classid == ROOT_CLASS else _class_name(c.classid)): {
            "classid": handle_text(c.classid), "rate_bps": c.rate_bps, "ceil_bps": c.ceil_bps, "prio": c.prio,
        }
        for c in sorted(classes.values(), key=lambda c: c.classid)
    }


__all__ = ["CLASS_MINOR", "DEFAULT_PREFIX", "FAMILIES", "IPV4", "IPV6", "ROOT_CLASS", "Family", "Runner", "TcNetQoS",
           "subprocess_runner"]
