"""Fuzzing of Kubernetes quantities (koordlet/apis/quantity.py): pod resources, NodeMetric usage, Node status,
ConfigMap thresholds and kubelet reservations all pass tenant- or network-supplied text through these parsers;
each returns a number or raises ParseError."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import example, given

from koordlet.apis.quantity import int_value, milli_value, parse_quantity
from koordlet.errors import ParseError
from tests.security.fuzzkit import decode, fuzz_settings, quantity_value


@fuzz_settings(500)
@given(quantity_value)
@example("1e999999")  # decimal.Overflow, not a ParseError, before issue 18
@example("1e-999999")
@example(float("nan"))
def test_parse_quantity(text: object) -> None:
    value = decode("quantity.parse_quantity", lambda: parse_quantity(text), (ParseError,))  # type: ignore[arg-type]
    assert value is None or isinstance(value, Decimal)


@fuzz_settings(300)
@given(quantity_value)
def test_milli_value(text: object) -> None:
    value = decode("quantity.milli_value", lambda: milli_value(text), (ParseError,))  # type: ignore[arg-type]
    assert value is None or isinstance(value, int)


@fuzz_settings(300)
@given(quantity_value)
def test_int_value(text: object) -> None:
    value = decode("quantity.int_value", lambda: int_value(text), (ParseError,))  # type: ignore[arg-type]
    assert value is None or isinstance(value, int)
