"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource): "100m", "4k", "1.5Gi", "1e3"."""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException
from typing import Final

from koordlet.errors import ParseError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
MAX_MAGNITUDE = Decimal(10) ** 24
"""The largest absolute value accepted: far above any int64 quantity (9.2e18, the most Kubernetes'
``Value()`` reports), below the 28 significant digits the decimal arithmetic keeps exactly.  Beyond it
"1e999999" would overflow the decimal context or become an integer of a million digits downstream."""
_MAX_EXPONENT_DIGITS = 4
"""More exponent digits than this is out of range whatever the mantissa; never handed to ``int()``, which
refuses strings of more than 4300 digits with a plain ValueError."""
_FAST_DIGITS = 18
"""The fast paths of :func:`milli_value` / :func:`int_value` only take texts short enough for ``int()``."""
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$", re.ASCII)


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity; raises ParseError naming the text for anything malformed, not finite
    or out of range (magnitude above :data:`MAX_MAGNITUDE`)."""
    if isinstance(text, bool):
        raise ParseError(f"quantity must be a string or number, got {text!r}")
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise ParseError(f"invalid quantity {text!r}: not a finite number")
        return _in_range(Decimal(str(text)), text)
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ParseError(f"invalid quantity {_show(text)}")
    number, suffix, exponent = match.groups()
    try:
        value = Decimal(number)
        if exponent is not None:
            digits = exponent.lstrip("+-").lstrip("0")
            if len(digits) > _MAX_EXPONENT_DIGITS:
                if value == 0:
                    return Decimal(0)
                raise ParseError(f"quantity {_show(text)} out of range (exponent too long)")
            value = value.scaleb(int(exponent))
        elif suffix in _BINARY:
            value = value * _BINARY[suffix]
        else:
            value = value * _DECIMAL[suffix or ""]
    except DecimalException:  # Overflow, InvalidOperation: the arithmetic left the decimal context
        raise ParseError(f"quantity {_show(text)} out of range") from None
    return _in_range(value, text)


def _in_range(value: Decimal, text: object) -> Decimal:
    if not value.is_finite() or abs(value) > MAX_MAGNITUDE:
        raise ParseError(f"quantity {_show(text)} out of range (magnitude above {MAX_MAGNITUDE:.0e})")
    return value


def _show(text: object) -> str:
    """The offending text for an error message, cut short: it may come from a tenant's pod."""
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def milli_value(text: str | int | float) -> int:
    """Milli-units rounded up, as Kubernetes' MilliValue() does for CPU ("100m" -> 100, "4k" -> 4000000)."""
    # Fast paths for the canonical forms Kubernetes and koordlet write ("138m", "4"): a companion decodes
    # thousands of them per NodeMetric report, and Decimal arithmetic is ten times slower.
    if type(text) is str and len(text) <= _FAST_DIGITS:
        if text.isascii() and text.isdigit():
            return int(text) * 1000
        if text[-1:] == "m" and text[:-1].isascii() and text[:-1].isdigit():
            return int(text[:-1])
    return int((parse_quantity(text) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def int_value(text: str | int | float) -> int:
    """Whole units rounded up, as Kubernetes' Value() does for bytes ("1Gi" -> 1073741824)."""
    if type(text) is str and len(text) <= _FAST_DIGITS and text.isascii():
        if text.isdigit():
            return int(text)
        scale = _BINARY.get(text[-2:])
        if scale is not None and text[:-2].isdigit():
            return int(text[:-2]) * scale
    return int(parse_quantity(text).to_integral_value(rounding="ROUND_CEILING"))


def format_milli(milli: int) -> str:
    """A CPU quantity string from milli-cores ("1500m", "2")."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


# Writing quantities: the canonical text apimachinery writes, so NodeMetric status reads as Koordinator's.

_DECIMAL_SUFFIXES: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def _decimal_si(mantissa: int, exponent: int) -> str:
    """Kubernetes' canonical DecimalSI text of ``mantissa * 10**exponent`` (apimachinery int64Amount
    AsCanonicalBytes): strip factors of ten, then lower the exponent to a multiple of three."""
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's modulo is never negative: -1 -> 2, -2 -> 1, as Go's switch maps them
    mantissa *= 10**shift
    exponent -= shift
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    return f"{mantissa}{suffix}" if suffix is not None else f"{mantissa}e{exponent}"


def format_cpu_milli(milli: int) -> str:
    """A CPU quantity as Kubernetes writes ``NewMilliQuantity(milli, DecimalSI)``: ``138m``, ``2``, ``1k``."""
    return _decimal_si(milli, -3)


def format_memory_bytes(count: int) -> str:
    """A byte quantity as Kubernetes writes ``NewQuantity(count, BinarySI)``.

    Below 1024 in magnitude Kubernetes switches to DecimalSI (so 1000 is ``1k``); otherwise every factor of
    1024 becomes a binary suffix (``17828Ki``) and anything else stays a plain integer (``1815637738``)."""
    if -1024 < count < 1024:
        return _decimal_si(count, 0)
    exponent = 0
    while count % 1024 == 0 and exponent < max(_BINARY_SUFFIXES):
        count //= 1024
        exponent += 1
    return f"{count}{_BINARY_SUFFIXES[exponent]}"
