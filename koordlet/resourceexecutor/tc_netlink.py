"""The rtnetlink side of the ``tc`` backend: the kernel objects it manages as plain data, the
:class:`Netlink` requests :class:`~koordlet.resourceexecutor.tc.TcNetQoS` makes, and their pyroute2
implementation.  pyroute2's keyword arguments and message decoding stay in this module."""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from koordlet.errors import KoordletError

ROOT_HANDLE = 0x10000
"""``1:`` - the HTB qdisc on the interface and on the IFB."""
INGRESS_HANDLE = 0xFFFF0000
BURST_HZ = 1000
BURST_MTU = 1600


class CommandFailed(KoordletError):
    """An ipset/iptables command (or a netlink request) was refused."""


# ---- the kernel objects, as plain data -------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    kind: str
    up: bool


@dataclass(frozen=True)
class Qdisc:
    kind: str
    handle: int
    parent: int


@dataclass(frozen=True)
class HtbClass:
    classid: int
    parent: int
    rate_bps: int
    ceil_bps: int
    prio: int


@dataclass(frozen=True)
class U32Filter:
    parent: int
    prio: int
    protocol: int
    handle: int
    classid: int
    keys: tuple[tuple[int, int, int], ...]
    """(mask, value, offset) per 32-bit key."""
    redirect_ifindex: int | None = None
    """When set, a mirred egress redirect to this interface."""

    def match(self) -> tuple[int, int, int, tuple[tuple[int, int, int], ...], int | None]:
        return (self.prio, self.protocol, self.classid, self.keys, self.redirect_ifindex)


class Netlink(Protocol):
    """The rtnetlink requests the backend makes; rates in bits per second."""

    def link(self, name: str) -> Link | None: ...
    def default_route_interface(self) -> str | None: ...
    def add_ifb(self, name: str) -> None: ...
    def set_up(self, index: int) -> None: ...
    def del_link(self, index: int) -> None: ...
    def qdiscs(self, index: int) -> list[Qdisc]: ...
    def add_htb(self, index: int, default_minor: int, replace: bool) -> None: ...
    def add_ingress(self, index: int) -> None: ...
    def del_qdisc(self, index: int, handle: int, parent: int) -> None: ...
    def classes(self, index: int) -> list[HtbClass]: ...
    def put_class(self, index: int, cls: HtbClass, change: bool) -> None: ...
    def del_class(self, index: int, classid: int) -> None: ...
    def filters(self, index: int, parent: int) -> list[U32Filter]: ...
    def add_u32(self, index: int, flt: U32Filter) -> None: ...
    def del_filter(self, index: int, flt: U32Filter) -> None: ...
    def close(self) -> None: ...


# ---- pyroute2 ---------------------------------------------------------------------------------------


class PyrouteNetlink:
    """:class:`Netlink` over pyroute2's IPRoute, in ``netns`` when given (pyroute2 opens that socket in
    a child that setns()es, so this process never changes namespace)."""

    def __init__(self, netns: str | None = None) -> None:
        from pyroute2 import IPRoute

        try:
            # flags=0: never create the namespace (pyroute2's default is O_CREAT).
            self._ipr = IPRoute(netns=netns, flags=0) if netns else IPRoute()
        except Exception as err:  # pyroute2 raises OSError, NetlinkError or TimeoutError
            raise CommandFailed(f"cannot open rtnetlink{f' in netns {netns}' if netns else ''}: {err}") from err

    def close(self) -> None:
        self._ipr.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # NetlinkError, OSError, TimeoutError
            code = getattr(err, "code", None) or getattr(err, "errno", None)
            reason = errno.errorcode.get(code, str(err)) if isinstance(code, int) else str(err)
            raise CommandFailed(f"{what}: {reason} ({err})") from err

    def link(self, name: str) -> Link | None:
        found = self._call(f"link lookup {name}", self._ipr.link_lookup, ifname=name)
        if not found:
            return None
        msg = self._call(f"link get {name}", self._ipr.get_links, found[0])[0]
        info = msg.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else ""
        return Link(found[0], name, kind or "", bool(msg["flags"] & 1))

    def default_route_interface(self) -> str | None:
        for family in (2, 10):  # AF_INET, AF_INET6
            for route in self._call("route dump", self._ipr.get_default_routes, family=family):
                oif = route.get_attr("RTA_OIF")
                if oif:
                    return str(self._call("link get", self._ipr.get_links, oif)[0].get_attr("IFLA_IFNAME"))
        return None

    def add_ifb(self, name: str) -> None:
        self._call(f"add ifb {name}", self._ipr.link, "add", ifname=name, kind="ifb")

    def set_up(self, index: int) -> None:
        self._call(f"set link {index} up", self._ipr.link, "set", index=index, state="up")

    def del_link(self, index: int) -> None:
        self._call(f"delete link {index}", self._ipr.link, "del", index=index)

    def qdiscs(self, index: int) -> list[Qdisc]:
        msgs = self._call("qdisc dump", self._ipr.get_qdiscs, index)
        return [Qdisc(m.get_attr("TCA_KIND"), m["handle"], m["parent"]) for m in msgs if m["index"] == index]

    def add_htb(self, index: int, default_minor: int, replace: bool) -> None:
        self._call("add htb root 1:", self._ipr.tc, "replace" if replace else "add", "htb", index, ROOT_HANDLE,
                   default=default_minor)

    def add_ingress(self, index: int) -> None:
        self._call("add ingress qdisc", self._ipr.tc, "add", "ingress", index, INGRESS_HANDLE)

    def del_qdisc(self, index: int, handle: int, parent: int) -> None:
        kind = "ingress" if handle == INGRESS_HANDLE else "htb"
        self._call(f"delete qdisc {handle_text(handle)}", self._ipr.tc, "del", kind, index, handle)

    def classes(self, index: int) -> list[HtbClass]:
        result = []
        for msg in self._call("class dump", self._ipr.get_classes, index):
            opts = msg.get_attr("TCA_OPTIONS")
            parms = opts.get_attr("TCA_HTB_PARMS") if opts is not None and msg.get_attr("TCA_KIND") == "htb" else None
            if parms is None:
                continue
            # The kernel caps the 32-bit byte rates and adds *_RATE64 above 2^32-1 bytes/s.
            rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
            ceil = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
            result.append(HtbClass(msg["handle"], msg["parent"], rate * 8, ceil * 8, parms["prio"]))
        return result

    def put_class(self, index: int, cls: HtbClass, change: bool) -> None:
        self._call(f"{'change' if change else 'add'} class {handle_text(cls.classid)}", self._ipr.tc,
                   "change-class" if change else "add-class", "htb", index, cls.classid, parent=cls.parent,
                   rate=cls.rate_bps // 8, ceil=cls.ceil_bps // 8, prio=cls.prio,
                   burst=_burst_bytes(cls.rate_bps), cburst=_burst_bytes(cls.ceil_bps))

    def del_class(self, index: int, classid: int) -> None:
        # kind None: pyroute2 would otherwise build htb class parameters for the delete and fail.
        self._call(f"delete class {handle_text(classid)}", self._ipr.tc, "del-class", None, index, classid)

    def filters(self, index: int, parent: int) -> list[U32Filter]:
        result = []
        for msg in self._call("filter dump", self._ipr.get_filters, index, parent=parent):
            opts = msg.get_attr("TCA_OPTIONS")
            if msg.get_attr("TCA_KIND") != "u32" or opts is None:
                continue
            keys = _u32_keys(opts)
            if keys is None:  # the hash table node (800:), not a rule
                continue
            info = msg["info"]
            result.append(U32Filter(
                parent, info >> 16, _ntohs(info & 0xFFFF), msg["handle"], opts.get_attr("TCA_U32_CLASSID") or 0,
                keys, _mirred_ifindex(opts),
            ))
        return result

    def add_u32(self, index: int, flt: U32Filter) -> None:
        kwargs: dict[str, Any] = {
            "parent": flt.parent, "prio": flt.prio, "protocol": flt.protocol, "target": flt.classid,
            # Unpadded hex: pyroute2 strips leading "00" pairs off the mask (moving the offset), so a
            # zero-padded match-all mask would end up empty.
            "keys": [f"0x{value:x}/0x{mask:x}+{offset}" for mask, value, offset in flt.keys],
        }
        if flt.redirect_ifindex is not None:
            kwargs["action"] = {"kind": "mirred", "direction": "egress", "action": "redirect",
                                "ifindex": flt.redirect_ifindex}
        self._call(f"add u32 filter {_u32_handle(flt.handle)} prio {flt.prio}", self._ipr.tc, "add-filter", "u32",
                   index, flt.handle, **kwargs)

    def del_filter(self, index: int, flt: U32Filter) -> None:
        self._call(f"delete u32 filter {_u32_handle(flt.handle)} prio {flt.prio}", self._ipr.tc, "del-filter", "u32",
                   index, flt.handle, parent=flt.parent, prio=flt.prio, protocol=flt.protocol, target=flt.classid)


def _burst_bytes(bps: int) -> int:
    # tc's classic buffer, rate / HZ + MTU with HZ 1000: the bytes one 1 ms timer tick must release.
    # pyroute2 (like vishvananda/netlink) divides by the hrtimer resolution instead, leaving about one
    # MTU, and HTB then falls 10-30 % short of a 100+ Mbit/s ceiling on a veth (measured here).
    return bps // 8 // BURST_HZ + BURST_MTU


def _u32_keys(opts: Any) -> tuple[tuple[int, int, int], ...] | None:
    # pyroute2 0.9's u32_sel decoder reads the keys 4 bytes early (mask comes out as the value), so
    # parse the raw attribute: struct tc_u32_sel is 16 bytes, then nkeys x tc_u32_key
    # {__be32 mask; __be32 val; int off; int offmask} (include/uapi/linux/pkt_cls.h).
    for attr in opts["attrs"]:
        if attr[0] != "TCA_U32_SEL":
            continue
        sel = attr[1]
        raw = bytes(sel.data[sel.offset + 4: sel.offset + sel.length])
        nkeys = raw[2]
        return tuple(
            (struct.unpack_from(">I", raw, 16 + 16 * i)[0], struct.unpack_from(">I", raw, 20 + 16 * i)[0],
             struct.unpack_from("=i", raw, 24 + 16 * i)[0])
            for i in range(nkeys)
        )
    return None


def _mirred_ifindex(opts: Any) -> int | None:
    acts = opts.get_attr("TCA_U32_ACT")
    if acts is None:
        return None
    for _, act in acts["attrs"]:
        if act.get_attr("TCA_ACT_KIND") == "mirred":
            parms = act.get_attr("TCA_ACT_OPTIONS").get_attr("TCA_MIRRED_PARMS")
            return int(parms["ifindex"])
    return None


def _ntohs(value: int) -> int:
    return ((value & 0xFF) << 8) | (value >> 8)


def handle_text(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


def _u32_handle(handle: int) -> str:
    return f"{handle >> 20:x}:{(handle >> 12) & 0xFF:x}:{handle & 0xFFF:x}"
