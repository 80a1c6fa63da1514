"""The shared JSON-shape helpers: the texts of their errors are what decoders, hooks and readers report."""

from __future__ import annotations

import pytest

from koordlet.apis import gojson
from koordlet.apis.duration import parse_duration
from koordlet.errors import ConfigError, KoordletError, ParseError
from koordlet.system.validators import parse_cpulist


def test_parsed_runs_the_parser_on_a_string() -> None:
    assert gojson.parsed("0-2,5", "cpus", parse_cpulist) == [0, 1, 2, 5]


@pytest.mark.parametrize(
    ("value", "expected", "quote", "error", "message"),
    [
        (3, "a string", True, ParseError, "cpus: expected a string, got 3"),
        (None, "a cpu list string", True, ParseError, "cpus: expected a cpu list string, got None"),
        ("0-x", "a string", True, ParseError, "cpus '0-x': bad list element '0-x'"),
        ("0-x", "a string", False, ParseError, "cpus: bad list element '0-x'"),
        ("0-x", "a string", True, KoordletError, "cpus '0-x': bad list element '0-x'"),
    ],
)
def test_parsed_names_where_and_raises_the_given_class(value: object, expected: str, quote: bool,
                                                        error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        gojson.parsed(value, "cpus", parse_cpulist, error, expected=expected, quote=quote)
    assert str(caught.value) == message
    assert type(caught.value) is error


def test_parsed_without_quote_keeps_a_parser_message_that_quotes_the_text() -> None:
    with pytest.raises(ConfigError, match=r"^spec\.window: invalid duration '5 minutes'"):
        gojson.parsed("5 minutes", "spec.window", parse_duration, ConfigError, quote=False)


def test_load_object() -> None:
    assert gojson.load_object('{"cpuset": "0-3"}', "annotation") == {"cpuset": "0-3"}
    with pytest.raises(ParseError, match=r"^annotation: not JSON: "):
        gojson.load_object("{oops", "annotation")
    with pytest.raises(KoordletError, match=r"^annotation: expected a JSON object, got list$"):
        gojson.load_object("[1, 2]", "annotation", KoordletError)
    with pytest.raises(ParseError, match=r"^annotation: not JSON: nested too deeply"):
        gojson.load_object("[" * 100_000, "annotation")


@pytest.mark.parametrize(("text", "expected"), [
    ("cpu", '"cpu"'),
    ("a<b>&c", '"a\\u003cb\\u003e\\u0026c"'),  # encoding/json's HTML-safe escapes
    ('q"b\\', '"q\\"b\\\\"'),
    ("\n\r\t\b\f\x01\x7f", '"\\n\\r\\t\\b\\f\\u0001\x7f"'),  # Go 1.22 on: \b and \f short; DEL as is
    ("\u2028\u2029é", '"\\u2028\\u2029é"'),
    ("\ud800", '"\ufffd"'),  # Go's decoder turns a lone surrogate escape into U+FFFD
])
def test_dumps_string_writes_what_go_writes(text: str, expected: str) -> None:
    assert gojson.dumps_string(text) == expected
