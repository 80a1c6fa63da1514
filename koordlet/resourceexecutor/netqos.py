"""The network QoS interface: strategies build a validated :class:`NetQoSPlan` and hand it to a
:class:`NetQoS` backend (tc HTB + IFB, or Terway's QoS agent).  Backends keep their library's vocabulary
(pyroute2 keyword arguments, qdisc handles) to themselves, so a strategy never depends on one backend.

The plan holds resolved numbers only, in bits per second: the strategy turns NodeSLO ``networkQOS``
percentages and quantities and ``systemStrategy.totalNetworkBandwidth`` into them, so every backend
shapes the same thing.  Koordinator's tc plugin gives SYSTEM/LS/BE the rates 40/30/30 % of the total
and each a ceiling of the total (upstream ``runtimehooks/hooks/tc``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from koordlet.errors import ConfigError

IFNAMSIZ = 16
"""include/uapi/linux/if.h: an interface name holds at most IFNAMSIZ - 1 characters."""

CLASS_NAMES = ("system", "ls", "be")
"""The shaped classes, in priority order, named as the QoS classes are everywhere (SYSTEM, LS, BE)."""


@dataclass(frozen=True)
class ClassBandwidth:
    """The bandwidth of one class, in bits per second: ``rate`` is guaranteed, ``ceil`` the most it may
    borrow up to when others are idle (HTB's rate and ceil)."""

    egress_rate_bps: int
    egress_ceil_bps: int
    ingress_rate_bps: int
    ingress_ceil_bps: int
    source_ips: tuple[str, ...] = ()
    """Pod IPs whose traffic belongs to this class (canonical text after validation); SYSTEM traffic
    is whatever no class claims."""


@dataclass(frozen=True)
class PodBandwidth:
    """A pod with a bandwidth of its own (annotation ``koordinator.sh/networkQOS``): an HTB class ``1:<minor>``
    per direction it limits (rate = ceil = the limit), its addresses classified there; a direction it does
    not limit (0) stays with its network class."""

    pod: str
    """namespace/name, for messages."""
    minor: int
    net_class: str
    """``system``, ``ls`` or ``be``: the class it yields to (its prio) and where its unlimited direction goes."""
    egress_bps: int
    ingress_bps: int
    source_ips: tuple[str, ...] = ()


POD_MINORS = range(0x10, 0x10000)
"""Minors a :class:`PodBandwidth` may take (above the fixed classes 1:1..1:4)."""


@dataclass(frozen=True)
class NetQoSPlan:
    """What a :class:`NetQoS` backend makes the interface do.  Validated on construction: a bad plan
    raises :class:`~koordlet.errors.ConfigError` naming the field (``netqos.be.egress_ceil_bps``) and
    nothing is applied."""

    interface: str
    """The host interface to shape (``eth0``)."""
    total_bps: int
    """The interface's bandwidth, bits per second (``totalNetworkBandwidth``)."""
    system: ClassBandwidth
    ls: ClassBandwidth
    be: ClassBandwidth
    shape_ingress: bool = True
    """Shape ingress too (through an IFB device); when False the ingress fields are validated but unused."""
    pods: tuple[PodBandwidth, ...] = ()
    """Pods with a bandwidth of their own; their addresses are in no class's ``source_ips``."""

    def __post_init__(self) -> None:
        where = "netqos"
        _check_interface(f"{where}.interface", self.interface)
        _check_int(f"{where}.total_bps", self.total_bps)
        if self.total_bps <= 0:
            raise ConfigError(f"{where}.total_bps: must be positive, got {self.total_bps!r}")
        owner_of: dict[str, str] = {}
        for name, cls in self.classes():
            if not isinstance(cls, ClassBandwidth):
                raise ConfigError(f"{where}.{name}: must be a ClassBandwidth, got {type(cls).__name__}")
            ips = _check_class(f"{where}.{name}", cls, self.total_bps)
            for ip in ips:
                if ip in owner_of:
                    raise ConfigError(
                        f"{where}.{name}.source_ips: {ip} already belongs to {where}.{owner_of[ip]}.source_ips"
                    )
                owner_of[ip] = name
            object.__setattr__(self, name, ClassBandwidth(
                cls.egress_rate_bps, cls.egress_ceil_bps, cls.ingress_rate_bps, cls.ingress_ceil_bps, ips
            ))
        object.__setattr__(self, "pods", _check_pods(f"{where}.pods", self.pods, self.total_bps, owner_of))
        for direction in ("egress", "ingress"):
            total = sum(getattr(cls, f"{direction}_rate_bps") for _, cls in self.classes())
            if total > self.total_bps:
                raise ConfigError(
                    f"{where}.{{system,ls,be}}.{direction}_rate_bps: guaranteed rates add up to {total} bps, "
                    f"more than total_bps {self.total_bps}"
                )

    def classes(self) -> Iterator[tuple[str, ClassBandwidth]]:
        """(name, bandwidth) of SYSTEM, LS and BE, in priority order."""
        for name in CLASS_NAMES:
            yield name, getattr(self, name)


def plan_text(plan: NetQoSPlan) -> str:
    """What ``plan`` shapes, in one line: the netqos strategy's decision, and the audit log's "new" value of a plan
    not applied in shadow mode."""
    parts = [f"{plan.interface} total {_mbit(plan.total_bps)}bit/s"]
    parts += [f"{name.upper()} egress {_mbit(c.egress_rate_bps)}/{_mbit(c.egress_ceil_bps)} "
              f"ingress {_mbit(c.ingress_rate_bps)}/{_mbit(c.ingress_ceil_bps)} ({len(c.source_ips)} IPs)"
              for name, c in plan.classes()]
    if plan.pods:
        parts.append(f"{len(plan.pods)} pods with their own bandwidth")
    return "; ".join(parts)


def _mbit(bps: int) -> str:
    return f"{bps / 1_000_000:g}M"


class NetQoS(Protocol):
    """A network QoS backend (tc, terway-qos).  Methods raise :class:`~koordlet.errors.Unsupported` when
    the host lacks what the backend needs and another :class:`~koordlet.errors.KoordletError` when the
    kernel or agent refuses; they never leak the backend library's exceptions."""

    def apply(self, plan: NetQoSPlan) -> None:
        """Makes the interface shape traffic as ``plan`` says.  Idempotent (applying the same plan twice
        changes nothing) and live: a changed plan reconfigures in place, without dropping the root
        qdisc or its classifiers."""

    def clear(self) -> None:
        """Removes everything this backend made (qdiscs, classes, filters, IFB devices, ipsets, iptables
        rules, agent config); a no-op when nothing is left."""

    def describe(self) -> dict[str, object]:
        """What is in place now, as plain data for logs and ``koordctl``."""


def _check_interface(where: str, name: object) -> None:
    # net/core/dev.c dev_valid_name(): non-empty, shorter than IFNAMSIZ, not "." or "..", no '/', ':'
    # or whitespace.
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: must be a non-empty interface name, got {name!r}")
    if len(name) >= IFNAMSIZ:
        raise ConfigError(f"{where}: {name!r} is longer than {IFNAMSIZ - 1} characters")
    if name in (".", "..") or any(c in "/:" or c.isspace() or not c.isprintable() for c in name):
        raise ConfigError(f"{where}: {name!r} is not a valid interface name")


def _check_int(where: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be an int (bits per second), got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: must be >= 0, got {value!r}")


def _check_class(where: str, cls: ClassBandwidth, total: int) -> tuple[str, ...]:
    for direction in ("egress", "ingress"):
        rate_field, ceil_field = f"{direction}_rate_bps", f"{direction}_ceil_bps"
        rate, ceil = getattr(cls, rate_field), getattr(cls, ceil_field)
        _check_int(f"{where}.{rate_field}", rate)
        _check_int(f"{where}.{ceil_field}", ceil)
        if ceil == 0:
            # A zero ceiling would black-hole the class, which no NodeSLO asks for.
            raise ConfigError(f"{where}.{ceil_field}: must be positive, got 0")
        if rate > ceil:
            raise ConfigError(f"{where}.{rate_field}: {rate} exceeds {where}.{ceil_field} {ceil}")
        if ceil > total:
            raise ConfigError(f"{where}.{ceil_field}: {ceil} exceeds total_bps {total}")
    return _canonical_ips(f"{where}.source_ips", cls.source_ips)


def _canonical_ips(where: str, ips: Iterable[str]) -> tuple[str, ...]:
    if isinstance(ips, str):
        raise ConfigError(f"{where}: must be a sequence of addresses, got one string {ips!r}")
    result: list[str] = []
    for raw in ips:
        try:
            ip = str(ipaddress.ip_address(raw))
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not an IP address") from None
        if ip in result:
            raise ConfigError(f"{where}: {ip} listed twice")
        result.append(ip)
    return tuple(result)


def _check_pods(where: str, pods: Iterable[PodBandwidth], total: int, owner_of: dict[str, str]
                ) -> tuple[PodBandwidth, ...]:
    checked: list[PodBandwidth] = []
    minors: dict[int, str] = {}
    for i, pod in enumerate(pods):
        at = f"{where}[{i}]"
        if not isinstance(pod, PodBandwidth):
            raise ConfigError(f"{at}: must be a PodBandwidth, got {type(pod).__name__}")
        if isinstance(pod.minor, bool) or not isinstance(pod.minor, int) or pod.minor not in POD_MINORS:
            raise ConfigError(f"{at}.minor: {pod.minor!r} is outside {POD_MINORS.start:#x}..{POD_MINORS.stop - 1:#x}")
        if pod.minor in minors:
            raise ConfigError(f"{at}.minor: {pod.minor:#x} already taken by pod {minors[pod.minor]}")
        minors[pod.minor] = pod.pod
        if pod.net_class not in CLASS_NAMES:
            raise ConfigError(f"{at}.net_class: must be one of {', '.join(CLASS_NAMES)}, got {pod.net_class!r}")
        for name in ("egress_bps", "ingress_bps"):
            value = getattr(pod, name)
            _check_int(f"{at}.{name}", value)
            if value > total:
                raise ConfigError(f"{at}.{name}: {value} exceeds total_bps {total}")
        if pod.egress_bps == 0 and pod.ingress_bps == 0:
            raise ConfigError(f"{at}: pod {pod.pod} limits neither direction; it belongs in its class")
        ips = _canonical_ips(f"{at}.source_ips", pod.source_ips)
        for ip in ips:
            if ip in owner_of:
                raise ConfigError(f"{at}.source_ips: {ip} already belongs to {owner_of[ip]}")
            owner_of[ip] = f"pod {pod.pod}"
        checked.append(PodBandwidth(pod.pod, pod.minor, pod.net_class, pod.egress_bps, pod.ingress_bps, ips))
    return tuple(checked)
