"""A pod's own network bandwidth: the annotation ``koordinator.sh/networkQOS`` (Koordinator
``apis/extension`` ``AnnotationNetworkQOS``, read by ``runtimehooks/hooks/tc`` ``getIngressAndEgress``).

Format, as upstream: ``{"ingressLimit": "100M", "egressLimit": "50M"}``, each a Kubernetes quantity in bits
per second (the constant's comment: "The unit is bps"); a missing field is ``"0"``, and 0 means "no limit of
its own in that direction".  A pod with a limit in either direction gets an HTB class of its own under the
root class (``1:<minor>``, rate = ceil = the limit, the prio of its network class) and is taken out of its
class's ipsets, so its addresses are classified to that class; its ``net_cls.classid`` names the class.

Upstream hands ``Value()/8`` to netlink's ``NewHtbClass``, which divides by 8 again, so its class ends up at
1/8 of the annotated rate; this module applies the annotated rate, as the annotation documents it.
Upstream picks a random minor per pod and keeps the map in memory; here the minor is derived from the pod
UID (:func:`pod_minor`), so the hook and the netqos strategy agree without sharing state and a restart
finds the same classes.  Two pods whose UIDs land on one minor: the strategy gives the later one (by UID)
the next free minor and its ``net_cls.classid`` is then stale, which only a ``cgroup`` classifier would read
(this backend classifies by address).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.apis.gojson import loads, member
from koordlet.apis.quantity import parse_quantity
from koordlet.errors import ConfigError, ParseError

ANNOTATION_NETWORK_QOS = "koordinator.sh/networkQOS"
FIELDS = ("ingressLimit", "egressLimit")
POD_MINOR_FIRST = 0x10
"""Per-pod class minors start above the fixed classes (1:1 root, 1:2..1:4 SYSTEM/LS/BE) with room to spare."""
POD_MINOR_LAST = 0xFFFF


@dataclass(frozen=True)
class PodNetLimit:
    """A pod's own limits, bits per second; 0 = none in that direction."""

    ingress_bps: int
    egress_bps: int

    @property
    def limited(self) -> bool:
        return self.ingress_bps > 0 or self.egress_bps > 0


def pod_net_limit(pod_key: str, annotations: Mapping[str, str]) -> PodNetLimit | None:
    """The pod's ``networkQOS`` annotation, None without one (or an empty one); raises
    :class:`ConfigError` naming the pod, the annotation and the field when it is malformed."""
    text = annotations.get(ANNOTATION_NETWORK_QOS)
    if not text:
        return None
    where = f"pod {pod_key}: annotation {ANNOTATION_NETWORK_QOS}"
    try:
        raw = loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be an object such as {{\"egressLimit\": \"50M\"}}, got {text!r}")
    values: dict[str, int] = {}
    for name in FIELDS:
        value = member(raw, name)
        if value is None:  # upstream's struct starts at "0"; JSON null leaves it there too
            value = "0"
        try:
            if not isinstance(value, str):
                raise ParseError("not a string")
            number = parse_quantity(value)
        except ParseError:
            raise ConfigError(f"{where}: {name} must be a quantity string in bits per second such as '50M', "
                              f"got {value!r}") from None
        if number < 0:
            raise ConfigError(f"{where}: {name} must not be negative, got {value!r}")
        values[name] = int(number.to_integral_value(rounding="ROUND_CEILING"))
    return PodNetLimit(ingress_bps=values["ingressLimit"], egress_bps=values["egressLimit"])


def pod_minor(uid: str) -> int:
    """The HTB minor of a pod's own class, derived from its UID (stable across restarts)."""
    span = POD_MINOR_LAST - POD_MINOR_FIRST + 1
    return POD_MINOR_FIRST + zlib.crc32(uid.encode()) % span


def free_minor(uid: str, taken: set[int]) -> int:
    """:func:`pod_minor`, else the next one not in ``taken`` (wrapping); raises ConfigError when none is left."""
    first = pod_minor(uid)
    span = POD_MINOR_LAST - POD_MINOR_FIRST + 1
    for step in range(span):
        minor = POD_MINOR_FIRST + (first - POD_MINOR_FIRST + step) % span
        if minor not in taken:
            return minor
    raise ConfigError(f"no free tc class minor left for pod {uid} ({span} pods with their own bandwidth)")
