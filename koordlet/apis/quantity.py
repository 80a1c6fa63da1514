"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource): "100m", "4k", "1.5Gi", "1e3"."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from koordlet.errors import ParseError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$", re.ASCII)


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity; raises ParseError naming the text."""
    if isinstance(text, bool):
        raise ParseError(f"quantity must be a string or number, got {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ParseError(f"invalid quantity {text!r}")
    number, suffix, exponent = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ParseError(f"invalid quantity {text!r}") from None
    if exponent is not None:
        return value.scaleb(int(exponent))
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def milli_value(text: str | int | float) -> int:
    """Milli-units rounded up, as Kubernetes' MilliValue() does for CPU ("100m" -> 100, "4k" -> 4000000)."""
    # Fast paths for the canonical forms Kubernetes and koordlet write ("138m", "4"): a companion decodes
    # thousands of them per NodeMetric report, and Decimal arithmetic is ten times slower.
    if type(text) is str:
        if text.isascii() and text.isdigit():
            return int(text) * 1000
        if text[-1:] == "m" and text[:-1].isascii() and text[:-1].isdigit():
            return int(text[:-1])
    return int((parse_quantity(text) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def int_value(text: str | int | float) -> int:
    """Whole units rounded up, as Kubernetes' Value() does for bytes ("1Gi" -> 1073741824)."""
    if type(text) is str and text.isascii():
        if text.isdigit():
            return int(text)
        scale = _BINARY.get(text[-2:])
        if scale is not None and text[:-2].isdigit():
            return int(text[:-2]) * scale
    return int(parse_quantity(text).to_integral_value(rounding="ROUND_CEILING"))


def format_milli(milli: int) -> str:
    """A CPU quantity string from milli-cores ("1500m", "2")."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
