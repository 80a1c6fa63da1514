"""The companion's NodeMetricStatus decoder: msgspec reads the exact shape koordlets send, straight from a report's
bytes (or from a NodeMetric's parsed status in the cluster).

A companion decodes every node's report every interval (~100 pods and ~30 aggregated usages each).  The checked
decoder (:meth:`NodeMetricStatus.from_json`) walks the parsed JSON a field at a time, building the field path it
would name in an error, and reads keys as leniently as Go does.  Here msgspec parses and type-checks the whole
document in C against the schema below (canonical keys, no unknown ones, strings where koordlets write strings),
and the quantity columns are converted a column at a time.  Anything else (a key in another case, an unknown key,
a null, a number for a quantity, a class or window it does not know) makes :func:`decode_status` hand the document
to the checked decoder, which decodes it or names what is wrong: for every document both take, both give the same
status.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from itertools import chain, repeat
from operator import attrgetter, itemgetter, mul
from typing import Any, Final, cast

import msgspec

from koordlet.apis.duration import parse_duration
from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric.status import (
    AggregatedUsage,
    AggregationType,
    HostApplicationMetricInfo,
    NodeMetricInfo,
    NodeMetricStatus,
    PeakMetric,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
    parse_time,
)
from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ParseError


class _Resources(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    cpu: str | None = None
    memory: str | None = None


class _Usage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    resources: _Resources = msgspec.field(default_factory=_Resources)


class _Window(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    usage: dict[AggregationType, _Usage] = msgspec.field(default_factory=dict)
    duration: str = ""


class _NodeInfo(msgspec.Struct, forbid_unknown_fields=True, gc=False, rename="camel"):
    node_usage: _Usage = msgspec.field(default_factory=_Usage)
    aggregated_node_usages: list[_Window] = msgspec.field(default_factory=list)
    system_usage: _Usage = msgspec.field(default_factory=_Usage)
    aggregated_system_usages: list[_Window] = msgspec.field(default_factory=list)


class _Pod(msgspec.Struct, forbid_unknown_fields=True, gc=False, rename="camel"):
    name: str = ""
    namespace: str = ""
    pod_usage: _Usage = msgspec.field(default_factory=_Usage)
    priority: PriorityClass = PriorityClass.NONE
    qos: QoSClass = QoSClass.NONE


class _HostApp(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str = ""
    usage: _Usage = msgspec.field(default_factory=_Usage)
    priority: PriorityClass = PriorityClass.NONE
    qos: QoSClass = QoSClass.NONE


class _Resource(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    resource: _Usage = msgspec.field(default_factory=_Usage)


class _Status(msgspec.Struct, forbid_unknown_fields=True, gc=False, rename="camel"):
    update_time: str = ""
    node_metric: _NodeInfo | None = None
    pods_metric: list[_Pod] = msgspec.field(default_factory=list)
    prod_reclaimable_metric: _Resource | None = None
    prod_peak_metric: _Resource | None = None
    host_application_metric: list[_HostApp] = msgspec.field(default_factory=list)


_DECODER: Final = msgspec.json.Decoder(_Status)


def decode_status(document: bytes | Mapping[str, Any] | None, where: str = "status",
                  source: str = "status_json") -> NodeMetricStatus:
    """A NodeMetricStatus from its JSON ``document``: the bytes a koordlet sent (``source`` names them in a JSON
    error), or the parsed object of a NodeMetric in the cluster.  Raises ParseError naming the field path below
    ``where`` (or the JSON error) when it is bad."""
    if document is None:
        return NodeMetricStatus()
    status = fast_status(document)
    if status is not None:
        return status
    if isinstance(document, bytes):
        try:
            document = json.loads(document)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"{source}: not valid JSON: {exc}") from None
        except RecursionError:  # "[[[[..." a few thousand deep: the C decoder recurses per level
            raise ParseError(f"{source}: nested too deeply") from None
    return NodeMetricStatus.from_json(document, where)


def fast_status(document: bytes | Mapping[str, Any]) -> NodeMetricStatus | None:
    """The status when ``document`` has the exact shape koordlets send; None for anything else."""
    try:
        wire = _DECODER.decode(document) if isinstance(document, bytes) else msgspec.convert(document, _Status)
    except msgspec.MsgspecError:
        return None
    return _status(wire)


# --- from the wire structs to the status ---------------------------------------------------------------------
#
# Each returns None when a value is one the schema cannot rule out but the fast path does not take (a quantity
# that does not parse, a duration or time that does not): the checked decoder then has the last word.

_FAST_DIGITS: Final = 18
"""Texts short enough for ``int()`` (as in :mod:`koordlet.apis.quantity`)."""
_BINARY_SCALES: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_FAST_LIMIT: Final = 10**_FAST_DIGITS
"""Values below it have at most :data:`_FAST_DIGITS` digits; a column holding a larger one is read a text at a
time ..."""
_FAST_LIMIT_SUFFIXED: Final = 10**(_FAST_DIGITS - 2)
"""... and so is one with suffixes (up to two letters) holding a value with more than 16 digits."""
_MILLI_SCALES: Final = {True: 1, False: 1000}
"""Milli-units per unit of a CPU text with and without the ``m`` suffix."""
_TAIL: Final = itemgetter(slice(-2, None))
_DELETE_BINARY_LETTERS: Final = str.maketrans("", "", "KMGTPEi")
_INTEGERS: Final = msgspec.json.Decoder(list[int])
_JSON_BLANKS: Final = (" ", "\t", "\n", "\r")
_UNUSUAL: Final = object()
"""What :func:`_amount` gives for an amount the fast path does not take."""

_CPU: Final = attrgetter("resources.cpu")
_MEMORY: Final = attrgetter("resources.memory")
_NAME: Final = attrgetter("name")
_NAMESPACE: Final = attrgetter("namespace")
_POD_USAGE: Final = attrgetter("pod_usage")
_PRIORITY: Final = attrgetter("priority")
_QOS: Final = attrgetter("qos")
_DURATION: Final = attrgetter("duration")

# Objects built without their frozen dataclass's __init__ (which sets each field through object.__setattr__):
# the slots are written directly, half the cost, for the ~130 maps of every report.
_new: Final = object.__new__
_SET_CPU: Final = vars(ResourceMap)["cpu_milli"].__set__
_SET_MEMORY: Final = vars(ResourceMap)["memory_bytes"].__set__
_SET_WIRE_POD_USAGE: Final = vars(_Pod)["pod_usage"].__set__
_SET_AGG_DURATION: Final = vars(AggregatedUsage)["duration_seconds"].__set__
_SET_AGG_USAGE: Final = vars(AggregatedUsage)["usage"].__set__


def _each(setter: Callable[[Any, Any], None], objects: list[Any], values: list[Any]) -> None:
    """``setter(obj, value)`` for each pair (a C loop)."""
    any(map(setter, objects, values))  # setters return None: any() runs them all


def _quantity(text: str | None, milli: bool) -> int | None:
    """A quantity in the canonical forms koordlets write (``"138m"``, ``"2"`` for CPU; ``"1815637738"``,
    ``"17828Ki"`` for memory) as :func:`milli_value` / :func:`int_value` read them; None for anything else."""
    if text is None or not text.isascii() or len(text) > _FAST_DIGITS:
        return None
    if text.isdigit():
        return int(text) * 1000 if milli else int(text)
    if milli:
        return int(text[:-1]) if text[-1:] == "m" and text[:-1].isdigit() else None
    scale = _BINARY_SCALES.get(text[-2:])
    return int(text[:-2]) * scale if scale is not None and text[:-2].isdigit() else None


def _amount(text: str | None, milli: bool) -> Any:
    """An amount as :func:`_quantity` reads it, else as the checked reader does; None when absent,
    :data:`_UNUSUAL` when it does not parse."""
    if text is None:
        return None
    amount = _quantity(text, milli)
    if amount is not None:
        return amount
    try:
        return milli_value(text) if milli else int_value(text)
    except ParseError:
        return _UNUSUAL


def _amounts(texts: list[str | None], milli: bool) -> list[Any] | None:
    """The amounts of a column of quantities (None where absent); None when one does not parse."""
    if texts and None not in texts:
        whole = _whole_column(cast(list[str], texts), milli)
        if whole is not None:
            return whole
    amounts = [_amount(text, milli) for text in texts]
    return None if _UNUSUAL in amounts else amounts


def _whole_column(texts: list[str], milli: bool) -> list[int] | None:
    """The column as koordlets write it (CPU ``"138m"``, ``"2"`` or ``"0"``; memory ``"17828Ki"``, ``"3Mi"`` or
    plain bytes), checked as one string and read as one JSON array of integers, in C; None for anything else."""
    joined = ",".join(texts)
    column = _cpu_column(joined, texts) if milli else _memory_column(joined, texts)
    if column is None:
        return None
    digits, scale = column
    # The JSON reader takes integers only (no fraction, exponent or "+", no empty text, no leading zero: the
    # per-text path reads those) but also a "-" and blanks between tokens, which quantities do not have.  A text
    # with a comma would read as two.
    if any(map(digits.__contains__, _JSON_BLANKS)):
        return None
    try:
        values = _INTEGERS.decode(f"[{digits}]")
    except msgspec.DecodeError:
        return None
    if (len(values) != len(texts) or min(values) < 0
            or max(values) >= (_FAST_LIMIT if len(digits) == len(joined) else _FAST_LIMIT_SUFFIXED)):
        return None
    if isinstance(scale, int):
        return values if scale == 1 else list(map(mul, values, repeat(scale)))
    return list(map(mul, values, scale))


def _cpu_column(joined: str, texts: list[str]) -> tuple[str, int | list[int]] | None:
    """The column's digits without the ``m`` suffixes, and the milli-units per unit of all texts or of each;
    None when an ``m`` is not the last letter of its text."""
    suffixed = joined.count("m")
    if suffixed == 0:
        return joined, 1000
    if _suffixes_end_texts(joined, "m") != suffixed:
        return None
    plain = len(texts) - suffixed
    if plain == 0 or _zeros(joined) == plain:  # "0" is zero in any unit: an idle pod's usage
        return joined.replace("m", ""), 1
    return joined.replace("m", ""), list(map(_MILLI_SCALES.__getitem__, map(str.endswith, texts, repeat("m"))))


def _memory_column(joined: str, texts: list[str]) -> tuple[str, int | list[int]] | None:
    """The column's digits without the binary suffixes, and the scale of all texts or of each; None when a
    suffix is not at the end of its text."""
    suffixed = joined.count("i")  # each binary suffix has one "i", and digits none
    if suffixed == 0:
        return joined, 1
    if joined.count("Ki") == suffixed:  # memory in pages: "Ki" and the odd plain "0"
        if _suffixes_end_texts(joined, "Ki") != suffixed:
            return None
        plain = len(texts) - suffixed
        if plain == 0 or _zeros(joined) == plain:
            return joined.replace("Ki", ""), 1024
    scales = list(map(_BINARY_SCALES.get, map(_TAIL, texts), repeat(1)))
    digits = joined.translate(_DELETE_BINARY_LETTERS)
    # Each suffix at a text's end takes two letters: any other letter anywhere makes the count differ.
    if len(texts) - scales.count(1) != suffixed or len(joined) - len(digits) != 2 * suffixed:
        return None
    return digits, scales


def _suffixes_end_texts(joined: str, suffix: str) -> int:
    """How many of the texts joined by commas end with ``suffix``."""
    return joined.count(suffix + ",") + joined.endswith(suffix)


def _zeros(joined: str) -> int:
    """How many of the texts joined by commas are ``"0"``."""
    return f",{joined.replace(',', ',,')},".count(",0,")


def _resource_maps(usages: list[_Usage]) -> list[ResourceMap] | None:
    cpu = _amounts(list(map(_CPU, usages)), True)
    memory = _amounts(list(map(_MEMORY, usages)), False)
    if cpu is None or memory is None:
        return None
    maps = list(map(_new, repeat(ResourceMap, len(usages))))
    _each(_SET_CPU, maps, cpu)
    _each(_SET_MEMORY, maps, memory)
    return maps


def _resource_map(usage: _Usage) -> ResourceMap | None:
    maps = _resource_maps([usage])
    return maps[0] if maps is not None else None


def _pods(items: list[_Pod]) -> tuple[PodMetricInfo, ...] | None:
    if not items:
        return ()
    usages = _resource_maps(list(map(_POD_USAGE, items)))
    if usages is None:
        return None
    # The wire pods, their usage swapped for its ResourceMap, are the attributes msgspec builds the PodMetricInfo
    # dataclasses from, in C (a ResourceMap is taken as it is, not copied).
    _each(_SET_WIRE_POD_USAGE, items, usages)
    return msgspec.convert(items, tuple[PodMetricInfo, ...], from_attributes=True)


@functools.lru_cache(maxsize=64)  # koordlets send the same few windows ("5m0s") in every report
def _seconds(text: str) -> float | None:
    """Seconds of a window's duration text ("" is 0); None when it does not parse."""
    if text == "":
        return 0.0
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _node_info(wire: _NodeInfo) -> NodeMetricInfo | None:
    """The node's and the system's usage and windows, their ResourceMaps converted as one column."""
    windows = wire.aggregated_node_usages + wire.aggregated_system_usages
    usages = [window.usage for window in windows]
    maps = _resource_maps([wire.node_usage, wire.system_usage, *chain.from_iterable(map(dict.values, usages))])
    seconds = list(map(_seconds, map(_DURATION, windows)))
    if maps is None or None in seconds:
        return None
    out = list(map(_new, repeat(AggregatedUsage, len(windows))))
    _each(_SET_AGG_DURATION, out, seconds)
    at = 2
    for window, usage in zip(out, usages, strict=True):
        _SET_AGG_USAGE(window, dict(zip(usage, maps[at:at + len(usage)], strict=True)))
        at += len(usage)
    split = len(wire.aggregated_node_usages)
    return NodeMetricInfo(maps[0], tuple(out[:split]), maps[1], tuple(out[split:]))


def _host_apps(items: list[_HostApp]) -> tuple[HostApplicationMetricInfo, ...] | None:
    if not items:
        return ()
    usages = _resource_maps([item.usage for item in items])
    if usages is None:
        return None
    return tuple(map(HostApplicationMetricInfo, map(_NAME, items), usages, map(_PRIORITY, items), map(_QOS, items)))


def _status(wire: _Status) -> NodeMetricStatus | None:
    when = None
    if wire.update_time:
        try:
            when = parse_time(wire.update_time)
        except ValueError:
            return None
    node_metric = None
    if wire.node_metric is not None and (node_metric := _node_info(wire.node_metric)) is None:
        return None
    pods = _pods(wire.pods_metric)
    host_apps = _host_apps(wire.host_application_metric)
    if pods is None or host_apps is None:
        return None
    reclaimable = peak = None
    if wire.prod_reclaimable_metric is not None:
        if (resource := _resource_map(wire.prod_reclaimable_metric.resource)) is None:
            return None
        reclaimable = ReclaimableMetric(resource)
    if wire.prod_peak_metric is not None:
        if (resource := _resource_map(wire.prod_peak_metric.resource)) is None:
            return None
        peak = PeakMetric(resource)
    return NodeMetricStatus(when, node_metric, pods, reclaimable, peak, host_apps)
