"""Go ``time.Duration`` text: the one parser and the one formatter for every duration koordlet reads or writes.

Kubernetes and Koordinator objects carry durations as ``metav1.Duration`` (a Go duration string such as
``"5m0s"``); koordlet's own configuration accepts the same strings and, in addition, plain seconds.  All of them
are read here, so a duration means the same thing in a NodeMetric spec, in the slo-controller-config, in the
scheduler extender's arguments and in ``koordlet.yaml``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.errors import ConfigError

_NANOS_PER_UNIT: Final = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9,
                          "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (``time.ParseDuration``: ``"5m"``, ``"1h30m"``, ``"1.5s"``, ``"-2m"``).

    The grammar is Go's: an optional sign, then one or more ``<number><unit>`` parts in any order, where the
    number may have a fraction (``"1.5h"``, ``".5s"``, ``"1.s"``) and the unit is one of ns, us (µs, μs), ms,
    s, m, h; ``"0"`` alone needs no unit.  Raises ValueError naming the text."""
    rest = text
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"invalid duration {text!r}")
    # Decimal keeps "0.1h" exact until the final division, as Go's integer nanoseconds do.
    nanos = Decimal(0)
    pos = 0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected a number and a unit (ns, us, ms, s, m, h)")
        nanos += Decimal(match.group(1)) * _NANOS_PER_UNIT[match.group(2)]
        pos = match.end()
    return sign * float(nanos / 10**9)


def parse_seconds_or_duration(text: str) -> float:
    """A configuration value: plain seconds (``"10"``, ``"2.5"``) or a Go duration (``"1m30s"``), surrounding
    blanks ignored.  Plain numbers are koordlet's own extension for flags and YAML; Go accepts only ``"0"``.

    Raises ValueError ("not a duration: ...") when the text is neither."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (use e.g. 10s, 1m30s, 12h)") from None


def duration_value(value: Any, where: str) -> float:
    """Seconds of a ``metav1.Duration`` JSON value; ConfigError naming ``where`` when it is not a string or
    does not parse.  Range checks are the caller's: they differ per field."""
    return gojson.parsed(value, where, parse_duration, ConfigError, expected='a duration string such as "5m"',
                         quote=False)


def _fraction(value: int, precision: int) -> tuple[str, int]:
    """Go's fmtFrac: the low ``precision`` digits of ``value`` as a fraction without trailing zeros."""
    digits: list[str] = []
    for _ in range(precision):
        digit = value % 10
        if digit or digits:
            digits.append(str(digit))
        value //= 10
    return ("." + "".join(reversed(digits)) if digits else ""), value


def format_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` writes it: ``5m0s``, ``1h0m0s``, ``1.5s``, ``500ms``."""
    nanos = round(seconds * 10**9)
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos == 0:
        return "0s"
    if nanos < 10**9:
        if nanos < 10**3:
            return f"{sign}{nanos}ns"
        precision, unit = (3, "µs") if nanos < 10**6 else (6, "ms")
        frac, whole = _fraction(nanos, precision)
        return f"{sign}{whole}{frac}{unit}"
    frac, whole_seconds = _fraction(nanos, 9)
    text = f"{whole_seconds % 60}{frac}s"
    minutes = whole_seconds // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        if minutes // 60:
            text = f"{minutes // 60}h{text}"
    return sign + text
