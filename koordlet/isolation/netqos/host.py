"""What the host says about its network: the interface of the default route (Koordinator
``system.GetLinkInfoByDefaultRoute``) and a NIC's speed, both read from files so tests fake them."""

from __future__ import annotations

from koordlet.errors import ParseError
from koordlet.system.hostpaths import HostPaths

RTF_UP = 0x1


def default_route_interface(paths: HostPaths) -> str:
    """The interface of the IPv4 default route with the lowest metric (``/proc/net/route``), else of the
    IPv6 one (``/proc/net/ipv6_route``); raises ParseError when there is none.  koordlet runs in the host
    network namespace, so its ``/proc/net`` is the host's."""
    best: tuple[int, str] | None = None
    for line in _lines(paths.proc("net", "route"))[1:]:
        cols = line.split()
        if len(cols) < 8:
            continue
        try:
            flags, metric = int(cols[3], 16), int(cols[6])
        except ValueError:
            continue
        if cols[1] == "00000000" and cols[7] == "00000000" and flags & RTF_UP and (best is None or metric < best[0]):
            best = (metric, cols[0])
    if best is None:
        for line in _lines(paths.proc("net", "ipv6_route")):
            cols = line.split()
            if len(cols) < 10 or cols[0] != "0" * 32 or cols[1] != "00" or cols[9] == "lo":
                continue
            try:
                flags, metric = int(cols[8], 16), int(cols[5], 16)
            except ValueError:
                continue
            if flags & RTF_UP and (best is None or metric < best[0]):
                best = (metric, cols[9])
    if best is None:
        raise ParseError(f"no default route in {paths.proc('net', 'route')} or {paths.proc('net', 'ipv6_route')}")
    return best[1]


def link_speed_bps(paths: HostPaths, interface: str) -> int:
    """``/sys/class/net/<if>/speed`` (Mbit/s) in bits per second; raises ParseError when the driver does not
    report one (virtual NICs answer EINVAL or -1)."""
    path = paths.sys("class", "net", interface, "speed")
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ParseError(f"{path}: no link speed ({exc.strerror if isinstance(exc, OSError) else exc})") from None
    try:
        mbits = int(text)
    except ValueError:
        raise ParseError(f"{path}: not a number: {text!r}") from None
    if mbits <= 0:
        raise ParseError(f"{path}: the driver reports no link speed ({mbits})")
    return mbits * 1_000_000


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []
