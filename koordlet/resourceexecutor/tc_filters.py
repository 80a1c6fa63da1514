"""u32 filters shared by the tc backend's classifiers (the class addresses on the IFB, the per-pod sources on
the interface): handles in table 800:, and the add-new-then-drop-stale sync of one prio's filters."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from functools import partial

from koordlet.resourceexecutor.tc_netlink import CommandFailed, Netlink, U32Filter, handle_text
from koordlet.resourceexecutor.tc_steps import Steps

U32_ROOT_TABLE = 0x80000000
"""u32 handles are ``htid:hash:node``; filters added without a table land in table 800:."""
U32_MAX_NODE = 0xFFF


def with_free_handle(flt: U32Filter, taken: set[int]) -> U32Filter:
    """``flt`` with the first node handle of table 800: not in ``taken``."""
    for node in range(1, U32_MAX_NODE + 1):
        handle = U32_ROOT_TABLE | node
        if handle not in taken:
            return U32Filter(flt.parent, flt.prio, flt.protocol, handle, flt.classid, flt.keys, flt.redirect_ifindex)
    raise CommandFailed(f"no free u32 handle left in table 800: (more than {U32_MAX_NODE} classified addresses)")


def filter_ip(flt: U32Filter) -> str:
    """The address a one-address filter matches, for step descriptions (hex when the keys are not one)."""
    packed = b"".join(value.to_bytes(4, "big") for _, value, _ in flt.keys)
    try:
        return str(ipaddress.ip_address(packed))
    except ValueError:
        return packed.hex()


def sync_filters(nl: Netlink, steps: Steps, index: int, have: Sequence[U32Filter], want: Sequence[U32Filter],
                 what: str) -> None:
    """Makes the filters ``have`` (those of our prios on link ``index``) into ``want``.  New classifiers go
    first and stale ones after, so a moved address is classified by one of them at all times (filters of one
    prio are tried in handle order: either one is right for a moment).  ``what``: "egress src" or the like."""
    present = {f.match() for f in have}
    taken = {f.handle for f in have}
    for flt in want:
        if flt.match() in present:
            continue
        flt = with_free_handle(flt, taken)
        taken.add(flt.handle)
        steps.run(f"classify {what} {filter_ip(flt)} -> {handle_text(flt.classid)}",
                  partial(nl.add_u32, index, flt), partial(nl.del_filter, index, flt))
    wanted = {f.match() for f in want}
    for flt in have:
        if flt.match() not in wanted:
            steps.run(f"drop {what} classifier {filter_ip(flt)} -> {handle_text(flt.classid)}",
                      partial(nl.del_filter, index, flt), partial(nl.add_u32, index, flt))


