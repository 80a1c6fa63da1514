"""parse_quantity's error contract: every malformed, non-finite or out-of-range quantity is a ParseError (what
its callers catch), never decimal.Overflow, InvalidOperation or int()'s digit-limit ValueError."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis.quantity import MAX_MAGNITUDE, int_value, milli_value, parse_quantity
from koordlet.errors import ParseError


@pytest.mark.parametrize("text", [
    "1e999999",  # decimal.Overflow before
    "1e1000000",
    "-1e999999",
    "1e-999999",
    "1e" + "1" * 5000,  # int() refuses more than 4300 digits with a plain ValueError
    "9" * 5000,
    "9" * 5000 + "Ki",
    "1e25",
    "10000000Ei",
    float("inf"),
    float("nan"),
])
def test_out_of_range_is_a_parse_error(text: str | float) -> None:
    with pytest.raises(ParseError, match="quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["9" * 5000, "9" * 30, "1" * 5000 + "Ki", "9" * 28 + "m"])
def test_fast_paths_refuse_long_numbers_as_parse_errors(text: str) -> None:
    with pytest.raises(ParseError):
        milli_value(text)
    with pytest.raises(ParseError):
        int_value(text)


@pytest.mark.parametrize(("text", "value"), [
    ("1e24", Decimal("1e24")),
    ("16Ei", Decimal(16 * 2**60)),
    ("0e99999999", Decimal(0)),
    ("1e-5", Decimal("1e-5")),
    ("1.5Gi", Decimal(1.5 * 2**30)),
])
def test_values_in_range_still_parse(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_long_text_is_cut_in_the_message() -> None:
    with pytest.raises(ParseError) as info:
        parse_quantity("x" * 10_000)
    assert len(str(info.value)) < 200


@given(st.one_of(st.text(), st.text(alphabet="0123456789eE+-.kKMGTPEimnu "), st.integers(), st.floats()))
@example("1e999999")
@example("1e-999999")
@example("." + "0" * 4000 + "1e-10")
def test_a_value_or_a_parse_error(text: str | int | float) -> None:
    try:
        value = parse_quantity(text)
    except ParseError:
        return
    assert isinstance(value, Decimal) and value.is_finite() and abs(value) <= MAX_MAGNITUDE
    assert isinstance(milli_value(text), int) and isinstance(int_value(text), int)
